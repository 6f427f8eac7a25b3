"""The DALI graph: read -> decode (the crop window only) -> labels -> crop -> flip -> normalize -> encode.

This module imports DALI and never TensorFlow, so the same graph runs under ``DALIDataset`` and on
machines with DALI alone (GPU checks, benchmarks). Stage names follow :mod:`daliloader.spec`.

Reading files: three per-sample inputs (image path, mask path, sample index) are pure functions of
the stream position through one :class:`~daliloader.sampler.Sampler`, so image and mask are paired by
construction under shuffling and sharding; ``fn.io.file.read`` reads the bytes in DALI's worker
threads. Reading shards (``data.shards``): one ``fn.readers.webdataset`` reads image, mask and sample
index from the same record, and one input marks the padding positions
(:class:`~daliloader.sampler.ReaderEpochs`).

On a GPU (``device="gpu"``) JPEGs are decoded by nvJPEG and everything after the decoders runs on the
GPU, down to the per-pixel weights: every output a TF dataset receives (image, labels, weight) is a
GPU tensor, because a GPU-placed ``DALIDataset`` refuses CPU outputs, and nothing after it in
TensorFlow may need a CPU kernel. (``index``, for ``pipeline.run`` alone, stays on the CPU.)
``host_outputs`` hands the outputs over on the host instead, for TF input pipelines that can only be
read on the CPU (``MultiWorkerMirroredStrategy``).

Run alone, the pipeline computes its inputs in ``external_source`` callbacks; under TensorFlow they
are placeholders fed by native ``tf.data`` streams (``GraphOptions.fed``, see
:mod:`daliloader.dali.tf`), because the plugin would otherwise call the callbacks one sample at a
time through ``tf.data.Dataset.from_generator``, which halved the throughput.

Cropping happens while decoding: the crop window is known from the image header
(``peek_image_shape``), so only the part of the window inside the image is decoded
(``decoders.image_slice``, the region-of-interest decoder) and the colour-to-class mapping runs on
the window alone. The overhang is padded
afterwards (image with 0, labels with ``ignore_index``), which gives the same result as decoding,
mapping and cropping the whole picture.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
from nvidia.dali import fn, math as dmath, pipeline_def, types

from ..checks import PairGuard
from ..classes import ClassMap
from ..data import SegmentationData
from ..sampler import ReaderEpochs, Sampler
from ..errors import SpecError
from ..spec import Preprocess

#: Output names, in the order the pipeline returns them ("weight" is per pixel, [H, W] float32).
OUTPUTS = ("image", "labels", "weight", "index")
#: Names of the per-sample inputs when reading files: two paths as uint8 arrays, and the sample index
#: (-1: padding); when reading shards, SHARD_INPUTS: 1 for a sample, 0 for padding.
INPUTS = ("image_path", "mask_path", "index")
SHARD_INPUTS = ("real",)
#: Name of the webdataset reader (for ``pipeline.reader_meta``).
READER = "shards"
#: Stages after which the graph can be cut (for per-stage timing); "encode" is the full graph.
STAGES = ("read", "decode", "labels", "crop", "normalize")


@dataclass(frozen=True)
class GraphOptions:
    device: str = "cpu"  # "cpu" | "gpu"
    device_id: int | None = None  # None: DALI CPU-only mode
    num_threads: int | None = None
    prefetch: int = 2
    seed: int | None = None
    outputs: tuple[str, ...] = ("image", "labels")
    stage: str | None = None  # output the (image, mask/labels) pair after this stage instead (STAGES)
    fed: bool = False  # inputs are placeholders fed by tf.data (INPUTS) instead of Python callbacks
    host_outputs: bool = False  # a GPU graph copies its outputs to the host (needs DALI's dynamic executor)

    @property
    def outputs_on(self) -> str:
        """Where the pipeline hands its outputs over: "gpu" or "cpu"."""
        return "gpu" if self.device == "gpu" and not self.host_outputs else "cpu"


class _PathSource:
    """Encoded file path of the sample at ``info.idx_in_epoch`` (padding reuses the first file).

    With a ``guard``, each pair is vetted the first time it is asked for (see :class:`PairGuard`), so a
    missing, truncated or mismatched file fails here with its name, not later inside a decoder.
    """

    def __init__(self, sampler: Sampler, paths: tuple[str, ...], guard: PairGuard | None = None):
        self.sampler = sampler
        self.paths = [np.frombuffer(os.fsencode(p), dtype=np.uint8) for p in paths]
        self.guard = guard

    def __call__(self, info):
        i = max(self.sampler.index_at(info.idx_in_epoch), 0)
        if self.guard is not None:
            self.guard.verify(i)
        return self.paths[i]


class _IndexSource:
    """Sample index (``-1`` for padding) at ``info.idx_in_epoch``, as a 0-d int64."""

    def __init__(self, sampler: Sampler):
        self.sampler = sampler

    def __call__(self, info):
        return np.array(self.sampler.index_at(info.idx_in_epoch), dtype=np.int64)


class _RealSource:
    """1 for a sample, 0 for padding, at the reader's stream position ``info.idx_in_epoch``."""

    def __init__(self, epochs: ReaderEpochs):
        self.epochs = epochs

    def __call__(self, info):
        return np.array(self.epochs.real(info.idx_in_epoch), dtype=np.int64)


def graph_spec(spec: Preprocess, outputs_on: str) -> Preprocess:
    """The spec the graph runs under TensorFlow. Batches handed over on the host stop at int labels and
    TensorFlow one-hot encodes them (``daliloader.tfops.one_hot``), cheaper than DALI's CPU ``fn.one_hot``
    plus the copy of its 32 MB float32 output per 512x512 sample into TensorFlow's tensors. Batches
    handed over on the GPU are encoded by DALI there: nothing after a GPU DALIDataset may run on the CPU.
    DALI has no bfloat16: the graph outputs float32 and TensorFlow casts on the host (tf_dataset refuses
    bfloat16 for batches handed over on the GPU)."""
    if outputs_on == "cpu" and spec.label_mode == "onehot":
        spec = replace(spec, label_mode="int")
    if spec.dtype == "bfloat16":
        spec = replace(spec, dtype="float32")
    return spec


def build_pipeline(data: SegmentationData, spec: Preprocess, sampler: Sampler, opts: GraphOptions,
                   guard: PairGuard | None = None):
    """Build (not yet run) the DALI pipeline; its outputs are ``opts.outputs`` in that order.

    ``guard`` (default: a new :class:`PairGuard`) vets every pair before DALI reads it.
    """
    unknown = set(opts.outputs) - set(OUTPUTS)
    if unknown:
        raise SpecError(f"outputs: unknown {sorted(unknown)}; choose from {', '.join(OUTPUTS)}")
    if spec.dtype == "bfloat16":
        raise SpecError("dtype='bfloat16': DALI has no bfloat16 output; use dtype='float16' or 'float32'")
    num_threads = opts.num_threads or os.cpu_count() or 1

    # exec_dynamic: DALI 2.4's default, stated because .cpu() (host_outputs) needs it
    @pipeline_def(batch_size=sampler.batch_size, num_threads=num_threads, device_id=opts.device_id,
                  prefetch_queue_depth=opts.prefetch, seed=opts.seed, exec_dynamic=True)
    def segmentation_pipeline():
        nodes = graph(data, spec, sampler, opts.device, guard if guard is not None else PairGuard(data),
                      opts.fed)
        if opts.stage is not None:  # benchmarks: the graph up to and including one stage
            return nodes["stages"][opts.stage]
        outputs = tuple(nodes[name] for name in opts.outputs)
        return tuple(o.cpu() for o in outputs) if opts.host_outputs and opts.device == "gpu" else outputs

    return segmentation_pipeline()


def graph(data: SegmentationData, spec: Preprocess, sampler: Sampler, device: str,
          guard: PairGuard | None = None, fed: bool = False) -> dict:
    """Define the graph inside a pipeline; returns every named output node.

    ``fed``: the inputs (:data:`INPUTS` or :data:`SHARD_INPUTS`) are placeholders to be fed by the caller.
    """
    image_bytes, mask_bytes, index = read(data, sampler, guard, fed)
    stages = {"read": (image_bytes, mask_bytes)}

    # decode the crop window: JPEG on the GPU with nvJPEG when device == "gpu" ("mixed"); PNG is
    # decoded on the CPU by DALI in any case. EXIF orientation is ignored for image and mask alike.
    size = fn.peek_image_shape(image_bytes, adjust_orientation=False, dtype=types.INT32)
    start, shape = crop_window(size, spec)
    inside_start, inside_shape = _inside(start, shape, size)
    # jpeg_fancy_upsampling: nvJPEG upsamples chroma like libjpeg-turbo on the CPU (OpenCV, TensorFlow,
    # DALI's CPU decoder) instead of by pixel replication, which differs by tens of levels at colour edges.
    decoder = "mixed" if device == "gpu" else "cpu"
    mask_type = types.RGB if data.classes.kind == "rgb" else types.GRAY
    image, mask = (fn.decoders.image_slice(encoded, inside_start, inside_shape, axis_names="HW",
                                           normalized_anchor=False, normalized_shape=False, device=decoder,
                                           output_type=kind, adjust_orientation=False, jpeg_fancy_upsampling=True)
                   for encoded, kind in ((image_bytes, types.RGB), (mask_bytes, mask_type)))
    stages["decode"] = (image, mask)
    labels = map_labels(mask, data.classes)
    stages["labels"] = (image, labels)
    image, labels = crop(image, labels, start - inside_start, shape, spec, data.classes.ignore_index)
    stages["crop"] = (image, labels)
    image, labels = flip_and_normalize(image, labels, spec)
    stages["normalize"] = (image, labels)
    return {"image": image, "labels": encode(labels, spec, data.classes),
            "weight": weigh(labels, index, data.classes), "index": index, "stages": stages}


def read(data: SegmentationData, sampler: Sampler, guard: PairGuard | None, fed: bool):
    """read: the encoded image and mask, and the sample index (``-1``: padding), per position."""
    if data.shards is not None:
        return _read_shards(data, sampler, fed)
    sources = ((None, None, None) if fed else
               (_PathSource(sampler, data.images, guard), _PathSource(sampler, data.masks), _IndexSource(sampler)))
    image_path, mask_path, index = (
        fn.external_source(source=source, batch=False, name=name, dtype=dtype, ndim=ndim)
        for source, name, dtype, ndim in zip(sources, INPUTS, (types.UINT8, types.UINT8, types.INT64), (1, 1, 0)))
    return fn.io.file.read(image_path), fn.io.file.read(mask_path), index


def _read_shards(data: SegmentationData, sampler: Sampler, fed: bool):
    """One webdataset reader: image, mask and index from the same record, so paired by construction.

    It shuffles within its buffer (DALI's ``initial_fill``, 1024 samples) and shards by contiguous
    ranges; it pads its passes for evaluation only (see :class:`ReaderEpochs`). The seed is the pipeline's.
    """
    s = data.shards
    image_bytes, mask_bytes, index = fn.readers.webdataset(
        paths=list(s.tars), index_paths=list(s.indexes), ext=[";".join(s.image_exts), s.mask_ext, s.index_ext],
        dtypes=[types.UINT8, types.UINT8, types.INT64], missing_component_behavior="error",
        random_shuffle=sampler.shuffle, shard_id=sampler.shard_id, num_shards=sampler.num_shards,
        pad_last_batch=not sampler.drop_remainder, stick_to_shard=True, name=READER)
    real = fn.external_source(source=None if fed else _RealSource(ReaderEpochs(sampler)), batch=False,
                              name=SHARD_INPUTS[0], dtype=types.INT64, ndim=0)
    return image_bytes, mask_bytes, real * (index[0] + 1) - 1


def map_labels(mask, classes: ClassMap):
    """labels: decoded mask -> (H, W, 1) class indices; unknown colours/ids -> ignore_index."""
    out = types.UINT8 if classes.label_dtype == np.uint8 else types.UINT16
    if classes.kind == "id":
        keys, values = classes.id_table()
        return fn.lookup_table(mask, keys=list(keys), values=list(values),
                               default_value=classes.ignore_index, dtype=out)
    t = classes.rgb_tables()
    rgb = fn.cast(mask, dtype=types.INT32)
    r, g, b = rgb[:, :, 0:1], rgb[:, :, 1:2], rgb[:, :, 2:3]
    prefix = fn.lookup_table(r * 256 + g, keys=list(t.rg_keys), values=list(t.rg_values),
                             default_value=t.num_prefixes, dtype=types.INT32)
    return fn.lookup_table(prefix * 256 + b, keys=list(t.rgb_keys), values=list(t.rgb_values),
                           default_value=classes.ignore_index, dtype=out)


def crop_window(size, spec: Preprocess):
    """The crop window ``(start, shape)`` in source pixels, ``[y, x]`` int32 (see :mod:`daliloader.spec`);
    it may overhang the image, which is then padded."""
    h, w = spec.image_size
    height, width = size[0], size[1]
    if spec.crop == "center":
        top = _center_offset(height, h)
        left = _center_offset(width, w)
        win_h, win_w = h, w
    else:
        if spec.resizes:
            zoom = fn.random.uniform(range=spec.scale, dtype=types.FLOAT)
            win_h = fn.cast(dmath.floor(h / zoom + 0.5), dtype=types.INT32)
            win_w = fn.cast(dmath.floor(w / zoom + 0.5), dtype=types.INT32)
        else:
            win_h, win_w = h, w
        top = _uniform_offset(height - win_h, fn.random.uniform(range=(0.0, 1.0)))
        left = _uniform_offset(width - win_w, fn.random.uniform(range=(0.0, 1.0)))
    shape = fn.stack(win_h, win_w) if spec.resizes else np.array([h, w], dtype=np.int32)
    return fn.stack(top, left), shape


def _inside(start, shape, size):
    """The part of the window ``(start, shape)`` that lies inside an image of ``size`` (H, W, C)."""
    extent = size[0:2]
    lo = dmath.clamp(start, 0, extent)
    return lo, dmath.clamp(start + shape, 0, extent) - lo


def crop(image, labels, offset, shape, spec: Preprocess, ignore_index: int):
    """crop: the decoded window part (at ``offset`` in the window, ``<= 0``) padded to the window
    ``shape`` (image with 0, labels with ``ignore_index``), then resized to ``image_size`` when it
    differs (random crops with zoom)."""
    image = fn.slice(image, start=offset, shape=shape, axis_names="HW", out_of_bounds_policy="pad", fill_values=0)
    labels = fn.slice(labels, start=offset, shape=shape, axis_names="HW", out_of_bounds_policy="pad",
                      fill_values=ignore_index)
    if spec.resizes:
        h, w = spec.image_size
        image = fn.resize(image, resize_y=h, resize_x=w, interp_type=types.INTERP_LINEAR, antialias=True)
        labels = fn.resize(labels, resize_y=h, resize_x=w, interp_type=types.INTERP_NN, antialias=False)
    return image, labels


def _center_offset(extent, size: int):
    """``(extent - size) // 2`` when cropping, ``-((size - extent) // 2)`` when padding (as TF)."""
    return dmath.max(extent - size, 0) // 2 - dmath.max(size - extent, 0) // 2


def _uniform_offset(slack, u):
    """A uniform integer offset in ``[0, slack]`` (``[slack, 0]`` when the window overhangs)."""
    steps = fn.cast(dmath.floor(u * fn.cast(dmath.abs(slack) + 1, dtype=types.FLOAT)), dtype=types.INT32)
    return dmath.min(steps, dmath.abs(slack)) * (fn.cast(slack >= 0, dtype=types.INT32) * 2 - 1)


def flip_and_normalize(image, labels, spec: Preprocess):
    """flip (same coin for image and mask) and normalize, fused into crop_mirror_normalize."""
    mirror = 0
    if spec.flip > 0:
        mirror = fn.random.coin_flip(probability=spec.flip, dtype=types.INT32)
        labels = fn.flip(labels, horizontal=mirror)
    out = types.FLOAT16 if spec.dtype == "float16" else types.FLOAT
    image = fn.crop_mirror_normalize(
        image, mirror=mirror, dtype=out, output_layout="HWC",
        mean=[255.0 * m for m in spec.mean], std=[255.0 * s for s in spec.std])
    return image, labels


def encode(labels, spec: Preprocess, classes: ClassMap):
    """encode: (H, W, 1) indices -> one-hot float32 (H, W, C) or int32 (H, W)."""
    flat = labels[:, :, 0]
    if spec.label_mode == "int":
        return fn.cast(flat, dtype=types.INT32)
    return fn.one_hot(flat, num_classes=classes.num_classes, axis=-1, dtype=types.FLOAT)


def weigh(labels, index, classes: ClassMap):
    """weight: per pixel, [H, W] float32, computed where the labels are (on the GPU for a GPU graph):
    0 for every pixel of a padding sample (``index`` -1), 1 for a real one. Per pixel, because Keras
    cannot broadcast [B] sample weights against per-pixel losses; the lookup gives the map its
    per-pixel shape on the labels' device, and is where per-class weights would go."""
    per_class = fn.lookup_table(labels[:, :, 0], keys=list(range(classes.num_classes)),
                                values=[1.0] * classes.num_classes, default_value=1.0, dtype=types.FLOAT)
    return per_class * fn.cast(index >= 0, dtype=types.FLOAT)


def to_numpy(outputs) -> list[np.ndarray]:
    """One ``pipeline.run()`` result as host numpy arrays (GPU outputs are copied back)."""
    return [np.array(o.as_cpu().as_tensor() if hasattr(o, "as_cpu") else o.as_tensor()) for o in outputs]
