"""The DALI graph: read -> decode (the crop window only) -> colour -> labels -> crop (pad, resize) -> rotate
-> the declared stages (:mod:`.dali_augment`) -> flip -> normalize -> padding -> encode, weights (the
stages of :mod:`daliloader.stages`).

This module imports DALI and never TensorFlow, so the same graph runs under ``DALIDataset``
(:mod:`daliloader.backends.dali_tf`) and with DALI alone (``dali_pipeline``: GPU checks, benchmarks,
other frameworks). Each stage implements its reference in :mod:`daliloader.stages` with DALI ops; the
crop window is the reference's own arithmetic evaluated on DALI nodes (:data:`.dali_math.DALI_MATH`).

Reading files: the per-sample inputs (image path, mask path, and the sample index where an output
uses it) are pure functions of the stream position through one
:class:`~daliloader.sampler.Sampler`, so image and mask are paired by construction under shuffling and
sharding; ``fn.io.file.read`` reads the bytes in DALI's worker
threads. Reading packs (``data.packs``): one ``fn.readers.webdataset`` reads image, mask and sample
index from the same record, and one input marks the padding positions
(:class:`~daliloader.sampler.ReaderEpochs`). Reading TFRecords: the records are read in Python by
the guard (:meth:`~daliloader.guard.PairGuard.read`), which checks each one against the file's index
(its data's CRC) as it hands it over, in the sampler's order as files are; DALI's own TFRecord reader
is not used, because it checks no CRC, trusts its index file, reads ahead of any check and
memory-maps the files (a file truncated under it kills the process with SIGBUS).

Run alone, the pipeline computes its inputs in ``external_source`` callbacks; under TensorFlow they
are placeholders fed by native ``tf.data`` streams (``fed``), because the plugin would otherwise call
the callbacks one sample at a time through ``tf.data.Dataset.from_generator``, which is much slower
(measured: docs/design.md, "What makes the CPU graph fast").

Cropping happens while decoding: the crop window is known from the image header
(``peek_image_shape``), so on the CPU only the part of the window inside the image is decoded
(``decoders.image_slice``, the region-of-interest decoder; on a GPU the whole picture, see
:func:`decode_window`) and the colour-to-class mapping runs on the window alone. The overhang is padded
afterwards (image with 0, labels with ``ignore_index``), which gives the same result as decoding, mapping
and cropping the whole picture.

On a GPU (``device="gpu"``) JPEGs are decoded by nvJPEG and everything after the decoders runs on the
GPU, down to the per-pixel weights: every output a TF dataset receives (image, labels, weight) is a
GPU tensor, because a GPU-placed ``DALIDataset`` refuses CPU outputs, and nothing after it in
TensorFlow may need a CPU kernel (the sample index, which the reader side knows, is copied there).
``plan.host_outputs`` hands the outputs over on the host instead, for TF input pipelines that can only
be read on the CPU (``MultiWorkerMirroredStrategy``).
"""

from __future__ import annotations

import functools
import logging
import os
import struct
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from nvidia.dali import fn, types
from nvidia.dali import math as dmath
from nvidia.dali.pipeline import DataNode, Pipeline

from .. import stages
from ..buckets import FETCHES
from ..classes import ClassMap, LookupTable, MaskKind
from ..data import Container, SegmentationData
from ..environment import dali_s3_safe
from ..errors import DataError, SpecError
from ..guard import PairGuard
from ..manifest import LZ4_HEADER, LZ4_MAGIC
from ..parallel import cores
from ..plan import Output, Plan
from ..sampler import SHUFFLE_BUFFER, ReaderEpochs, Sampler
from ..spec import Preprocess
from . import Device, dali_augment, dali_native, pair_guard
from .dali_math import DALI_MATH

log = logging.getLogger("daliloader")

#: Names of the per-sample inputs when reading files: two paths as uint8 rows (:func:`path_row`), and
#: the sample index (-1: padding); when reading packs, PACK_INPUTS: 1 for a sample, 0 for padding. Fed
#: by TensorFlow, the random draws are an input too (DRAWS_INPUT): stateless functions of the seed and the
#: stream position, drawn natively by tf.data, so that a pipeline built again (a chained transformation
#: read again) draws afresh for the next epoch's positions instead of replaying its generator. Under a
#: pack reader, which replays its first pass in a pipeline built again anyway (and is refused a second
#: pipeline by tf_dataset), DALI's generator draws: a training pipeline over packs is fed no input.
INPUTS = ("image_path", "mask_path", "index")
PACK_INPUTS = ("real",)
#: When reading TFRecords: each position's record (its encoded image and mask, :func:`pack_pair`) and
#: sample index (-1: padding).
RECORD_INPUTS = ("record", "index")
#: The fed graph's input of each sample's uniform draws (:func:`daliloader.stages.draw_count` of them).
DRAWS_INPUT = "draws"
#: Name of the webdataset reader (for ``pipeline.reader_meta``).
READER = "packs"
#: Whether DALI memory-maps the files and packs it reads (its default). Off: a file truncated or
#: rewritten under a mapped read kills the process with SIGBUS, which no error handler sees; with plain
#: file I/O it is an error naming the file (benchmarks/mmap_cost.py measures what maps would gain).
USE_MMAP = False
#: The share of each batch's JPEGs that DALI's GPU decoder hands to the GPU's hardware JPEG engines (A100,
#: H100, H200), the rest going to nvJPEG's CUDA decoder, whose Huffman stage runs on the CPU threads:
#: DALI's default, stated so that benchmarks/gpu_where.py can time another share against it.
HW_DECODER_LOAD = 0.65
#: The points after which the graph can be cut, for the bench's per-stage timing (:mod:`daliloader.bench.stages`,
#: which names them); "encode" is the full graph. Each cut ends after a stage of :mod:`daliloader.stages`.
CUTS = ("read", "decode", "labels", "crop", "normalize")


def outputs_on(device: Device, plan: Plan) -> Device:
    """Where a pipeline on ``device`` hands its outputs over."""
    return Device.GPU if device == Device.GPU and not plan.host_outputs else Device.CPU


@dataclass(frozen=True)
class GraphSpec:
    """What a graph runs: the ``spec``, and whether TensorFlow finishes its batches (``host_finish``): the graph
    then outputs uint8 pixels, not normalized, and class indices as stored (in the class map's ``label_dtype``:
    uint16 where its ignore index is over 255), which TensorFlow normalizes and encodes on whole batches
    (:func:`daliloader.backends.tfops.normalize`, ``encode``)."""

    spec: Preprocess
    host_finish: bool = False


def graph_spec(spec: Preprocess, outputs_on: Device) -> GraphSpec:
    """What the graph runs under TensorFlow. Batches handed over on the host are finished by TensorFlow
    (:attr:`GraphSpec.host_finish`): a quarter of the memory in DALI's buffers and in the copies into
    TensorFlow (a float32 one-hot sample of 32 classes at 512x512 is 32 MB, its indices 256 kB), and a
    one-hot gather cheaper than DALI's CPU ``fn.one_hot``. Batches handed over on the GPU are normalized
    and encoded by DALI there: nothing after a GPU DALIDataset may run on the CPU (DALI has no bfloat16:
    such batches are refused, by the loader with what to pass instead, else by :class:`Pipeline`)."""
    return GraphSpec(spec, host_finish=outputs_on == Device.CPU)


#: Samples per DALI thread in one batch of a graph whose batches TensorFlow takes on the host (see
#: :func:`host_batch_size`): two, so that a thread that drew a quick sample takes another while a slow one
#: finishes.
SAMPLES_PER_THREAD = 2
#: The fewest samples per DALI batch under TensorFlow on the host (an epoch's at most): each batch costs
#: DALI a fixed overhead per operator, which larger batches share, and each sample of a batch holds its
#: buffers in every operator: the value measured to keep the throughput of larger batches with less memory
#: (docs/benchmarks.md, "The samples per DALI batch, decided").
MIN_HOST_SAMPLES = 16


def threads(plan: Plan) -> int:
    """DALI's CPU threads for a plan: ``plan.num_threads``, by default every core."""
    return plan.num_threads or cores()


def host_batch_size(plan: Plan, device: Device) -> int:
    """How many samples the DALI graph runs per batch under TensorFlow: a multiple of ``plan.batch_size``.

    DALI runs its CPU operators one at a time (the dynamic executor allows one CPU operator at once),
    and each one spreads a batch over the thread pool one sample per task and waits for the slowest.
    A batch of 8 samples therefore keeps at most 8 threads busy: on 16 cores, half of them wait (one
    sample per batch runs at the speed of one thread whatever ``num_threads`` says: docs/benchmarks.md,
    "Using every core"). Where the batches reach TensorFlow on the host,
    the graph runs :data:`SAMPLES_PER_THREAD` samples per thread and :data:`MIN_HOST_SAMPLES` at least (an
    epoch at most), and tf.data's ``rebatch``
    splits them back into ``plan.batch_size`` batches: the same samples in the same order (each
    position's draws are fed by TensorFlow). Batches handed over on the GPU stay at ``plan.batch_size``
    (nothing may follow a GPU DALIDataset in tf.data), and so do padded pack readers (evaluation), which
    pad each pass to a whole DALI batch (:class:`~daliloader.sampler.ReaderEpochs`).
    """
    batch = plan.batch_size
    padded_reader = plan.data.container.read_by_reader and not plan.sampler.drop_remainder
    if outputs_on(device, plan) == Device.GPU or padded_reader:
        return batch
    wanted = max(SAMPLES_PER_THREAD * threads(plan), MIN_HOST_SAMPLES)
    return batch * max(1, min(-(-wanted // batch), plan.steps))


def dali_guard(plan: Plan, device: Device, batch: int, chunk: int = 0) -> PairGuard:
    """The guard of a graph on ``device`` (:func:`~daliloader.backends.pair_guard`) that runs ``batch``
    samples per DALI batch: it vets the masks' GPU form where the graph reads it (:func:`reads_gpu_masks`),
    and remembers as many pairs as :meth:`PairGuard.explain` must decode to find a decoder's failure among
    those in flight: the batches DALI prefetches, and the positions vetted ahead of them (``chunk``, under
    TensorFlow)."""
    return pair_guard(plan.data, f"dali-{device}", remember=2 * chunk + batch * (plan.prefetch + 2) + _ahead(plan.data),
                      gpu_masks=reads_gpu_masks(plan.data, device))


class SegmentationPipeline(Pipeline):
    """The DALI pipeline of a plan on ``device``; its outputs are ``plan.outputs``.

    ``spec`` (default: ``plan.spec``, finished by DALI) is what the graph runs (see :func:`graph_spec`); ``stage`` cuts
    the graph after a stage and outputs the (image, mask or labels) pair there (benchmarks); ``fed``
    leaves the inputs as placeholders for tf.data streams; ``guard`` vets every pair before DALI reads
    it, and ``run()`` turns a decoder failure into a :class:`~daliloader.errors.LoadError` naming the
    files in flight. ``batch_size`` (default ``plan.batch_size``) is the samples per DALI batch (see
    :func:`host_batch_size`).
    """

    def __init__(self, plan: Plan, device: Device, *, spec: GraphSpec | None = None, stage: str | None = None,
                 fed: bool = False, guard: PairGuard | None = None, batch_size: int | None = None):
        self.plan, self.device, self.run_spec = plan, Device(device), spec or GraphSpec(plan.spec)
        self.stage, self.fed = stage, fed
        self.guard = guard if guard is not None else dali_guard(plan, device, batch_size or plan.batch_size)
        if self.run_spec.spec.dtype == "bfloat16" and not self.run_spec.host_finish:  # (TensorFlow casts)
            raise SpecError("dtype='bfloat16': DALI has no bfloat16 output; use dtype='float16' or 'float32'")
        # exec_dynamic: DALI 2.4's default, stated because .cpu() (host outputs) needs it
        super().__init__(batch_size=batch_size or plan.batch_size, num_threads=threads(plan),
                         device_id=plan.device_id if self.device == Device.GPU else None,
                         prefetch_queue_depth=plan.prefetch,
                         seed=plan.sampler.draw_seed % 2**31, exec_dynamic=True)

    def define_graph(self):
        nodes = graph(self.plan.data, self.run_spec, self.plan.sampler, self.device, self.guard, self.fed)
        if self.stage is not None:  # benchmarks: the graph up to and including one stage
            return nodes.cuts[self.stage]
        out = tuple(nodes.outputs[name] for name in self.plan.outputs)
        if self.device != Device.GPU:
            return out
        if self.plan.host_outputs:
            return tuple(o.cpu() for o in out)
        return tuple(o.gpu() if o.device == "cpu" else o for o in out)  # the sample index (DALI's node device)

    def build(self, *args, **kwargs):
        """``Pipeline.build``, DALI's errors explained as :meth:`run`'s are: DALI's pack reader reads its
        index files when the pipeline is built (by ``dali_pipeline``, or by the TF plugin as ``tf_dataset``
        makes its dataset), and a damaged or unreachable one failed there with DALI's own error."""
        try:
            return super().build(*args, **kwargs)
        except RuntimeError as e:
            raise self.guard.explain(e) from e

    def run(self, *args, **kwargs):
        try:
            return super().run(*args, **kwargs)
        except RuntimeError as e:
            raise self.guard.explain(e) from e


def pipeline(plan: Plan, device: Device) -> tuple[SegmentationPipeline, int]:
    """The "dali" product (``dali_pipeline``): the built pipeline and its batches per epoch."""
    pipe = SegmentationPipeline(plan, device)
    pipe.build()
    return pipe, plan.steps


# ---------------------------------------------------------------- the graph, stage by stage
@dataclass(frozen=True)
class Nodes:
    """What :func:`graph` defines: the node of every output a batch can hold, and the (image, mask or
    labels) pair after each of :data:`CUTS` (DALI drops the nodes no output uses)."""

    outputs: dict[Output, DataNode]
    cuts: dict[str, tuple[DataNode, DataNode]]


def graph(data: SegmentationData, run: GraphSpec, sampler: Sampler, device: Device,
          guard: PairGuard | None = None, fed: bool = False) -> Nodes:
    """Define the graph of ``run`` inside a pipeline; returns every output node and cut.

    ``fed``: the inputs (:data:`INPUTS`, :data:`PACK_INPUTS` or :data:`RECORD_INPUTS`, and
    :data:`DRAWS_INPUT` where the recipe draws) are placeholders to be fed by the caller.
    """
    spec = run.spec
    image_bytes, mask_bytes, index = read(data, sampler, guard, fed, device)
    cuts = {"read": (image_bytes, mask_bytes)}
    u = None
    if spec.draws_at_random:
        u = (graph_input(DRAWS_INPUT, None, types.FLOAT, ndim=1) if fed and draws_fed(data, spec) else
             fn.random.uniform(range=(0.0, 1.0), shape=[stages.draw_count(spec)]))

    # decode the crop window (decode_window): JPEG on the GPU with nvJPEG on Device.GPU ("mixed");
    # PNG is decoded on the CPU by DALI in any case. EXIF orientation is ignored for image and mask alike.
    gpu_masks = reads_gpu_masks(data, device)  # (never with cat_max_ratio: make_plan's data has no GPU form then)
    extent = same_size(fn.peek_image_shape(image_bytes, adjust_orientation=False, dtype=types.INT32),
                       lz4_header(mask_bytes)[0] if gpu_masks else
                       fn.peek_image_shape(mask_bytes, adjust_orientation=False, dtype=types.INT32))
    whole = None  # cat_max_ratio: the whole mask's classes, on the CPU, from which the window is chosen
    if spec.chooses_window:
        whole = map_labels(decode_mask(mask_bytes, None, None, Device.CPU, data), data.classes)
        start, shape, flip = choose_window(extent, spec, u, whole, data.classes)
    else:
        start, shape, flip = crop_window(extent, spec, u)
    inside_start, inside_shape = _inside(start, shape, extent)
    # jpeg_fancy_upsampling: nvJPEG upsamples chroma like libjpeg-turbo on the CPU (OpenCV, TensorFlow,
    # DALI's CPU decoder) instead of by pixel replication, which differs by tens of levels at colour edges.
    image = decode_window(image_bytes, inside_start, inside_shape, device, types.RGB, types.UINT8)
    if whole is not None:
        mask = fn.slice(whole, inside_start, inside_shape, axis_names="HW")
        mask = mask.gpu() if device == Device.GPU else mask
    elif gpu_masks:
        mask = inflate_window(mask_bytes, inside_start, inside_shape)
    else:
        mask = decode_mask(mask_bytes, inside_start, inside_shape, device, data)
    cuts["decode"] = (image, mask)
    if spec.colours:
        image = colour(image, spec, u)
    labels = mask if whole is not None else map_labels(mask, data.classes)
    cuts["labels"] = (image, labels)
    image, labels = crop(image, labels, start - inside_start, shape, spec, data.classes.ignore_index)
    if spec.rotates:
        image, labels = rotate(image, labels, stages.draw_angle(spec, u), data.classes, framed=device == Device.CPU)
    cuts["crop"] = (image, labels)
    image, labels = dali_augment.apply(spec.augment, image, labels, u, spec.image_size, data.classes.ignore_index)
    image, labels = flip_and_normalize(image, labels, flip, spec, run.host_finish)
    cuts["normalize"] = (image, labels)
    if not sampler.drop_remainder:  # evaluation: padding fills the last batch
        labels = unpadded(labels, index, data.classes)
    return Nodes({Output.IMAGE: image, Output.LABELS: encode(labels, spec, data.classes, run.host_finish),
                  Output.WEIGHT: weigh(labels, index, data.classes), Output.INDEX: index}, cuts)


def reads_index(plan: Plan) -> bool:
    """Whether :func:`graph`'s outputs use each position's sample index (or padding mark): the weights
    and the index, and in evaluation the labels (a padding sample's are ignored, :func:`unpadded`). DALI
    drops unused nodes, and refuses an input that a used node needs and nothing feeds."""
    evaluates = not plan.sampler.drop_remainder
    return bool({Output.WEIGHT, Output.INDEX} & set(plan.outputs)) or (Output.LABELS in plan.outputs and evaluates)


def draws_fed(data: SegmentationData, spec: Preprocess) -> bool:
    """Whether a fed graph takes its random draws as an input (:data:`DRAWS_INPUT`, TensorFlow's stateless
    draws of each position): where it draws and reads files or records. Under a pack reader, and run
    alone, DALI's generator draws, seeded by the pipeline."""
    return spec.draws_at_random and not data.container.read_by_reader


def stop_unless(ok):
    """A zero (uint8) per sample that exists only where ``ok`` (an int32 scalar per sample, 1 or 0) is 1:
    where it is 0, the pipeline stops. DALI has no assertion: one byte is reshaped to ``2 - ok`` bytes,
    which fails exactly when ``ok`` is 0. A value that must wait for the check comes out plus this zero,
    so that every output depends on it (an op kept with ``preserve`` may fail only after its iteration's
    outputs are out)."""
    return fn.reshape(fn.constant(idata=[0], dtype=types.UINT8), shape=fn.stack(2 - ok))[0]


def same_size(image_size, mask_size):
    """The image's ``[height, width]`` (``image_size[0:2]``), through a check that stops the pipeline where
    the image and the mask it read differ in size, before they become a misaligned pair: the guard vets
    each pair's headers before DALI reads it, but a file replaced in the meantime (by a valid picture of
    another size) is read as it is now. The guard's ``explain`` then names the file, which now fails its
    vetting."""
    extent = image_size[0:2]
    same = fn.reductions.min(fn.cast(extent == mask_size[0:2], dtype=types.INT32))
    return extent + fn.cast(stop_unless(same), dtype=types.INT32)


def sample_number(member, pairs: int):
    """The sample number a pack's index member holds (:func:`daliloader.packs.sample_index`), through a
    check that stops the pipeline where it is no number of the ``pairs``: a damaged member read as -5
    made its sample padding (lost from an evaluation), read as 254 broke ``predict``. The guard's
    ``explain`` then points to ``verify``."""
    number = member[0]
    ok = fn.cast(number >= 0, dtype=types.INT32) * fn.cast(number < pairs, dtype=types.INT32)
    return number + fn.cast(stop_unless(ok), dtype=types.INT64)


def reads_gpu_masks(data: SegmentationData, device: Device) -> bool:
    """Whether a graph on ``device`` reads the masks' GPU form: a prepared copy's LZ4 masks, on a GPU
    where DALI finds nvCOMP to inflate them (else the PNG masks, and a log line says why)."""
    if device != Device.GPU:
        return False
    has_form = data.packs.gpu_mask_ext is not None if data.packs is not None else data.gpu_masks is not None
    return has_form and nvcomp_loads()


@functools.cache
def nvcomp_loads() -> bool:
    """Whether nvCOMP, which DALI's inflate loads at run time, is there: the wheel DALI depends on
    (``nvidia-libnvcomp-cu12``), or the system's library."""
    import ctypes
    from importlib.util import find_spec

    spec = find_spec("nvidia.libnvcomp")
    candidates = [os.path.join(p, "lib64", "libnvcomp.so.5") for p in (spec.submodule_search_locations or [])] if spec \
        else []
    for library in candidates + ["libnvcomp.so.5", "libnvcomp.so"]:
        try:
            ctypes.CDLL(library)
            return True
        except OSError:
            continue
    log.info("dali-gpu reads a prepared copy's PNG masks (decoded on the CPU): nvCOMP, which inflates their LZ4 "
             "form on the GPU, is not installed (pip install nvidia-libnvcomp-cu12)")
    return False


def mask_files(data: SegmentationData, device: Device) -> tuple[str, ...]:
    """The mask files a graph on ``device`` reads (see :func:`reads_gpu_masks`)."""
    return data.gpu_masks if reads_gpu_masks(data, device) else data.masks


def read(data: SegmentationData, sampler: Sampler, guard: PairGuard | None, fed: bool, device: Device):
    """read: the encoded image and mask, and the sample index (``-1``: padding), per position, as the
    data's container is read (:data:`READERS`)."""
    return READERS[data.container](data, sampler, guard, fed, device)


def _read_files(data: SegmentationData, sampler: Sampler, guard: PairGuard | None, fed: bool, device: Device):
    """Each position's two files, read by DALI's threads from their paths (:func:`path_row`), and its
    sample index."""
    sources = ((None, None, None) if fed else
               (_PathSource(sampler, data.images, guard), _PathSource(sampler, mask_files(data, device)),
                _IndexSource(sampler)))
    image_row, mask_row, index = (
        graph_input(name, source, dtype, ndim)
        for source, name, dtype, ndim in zip(sources, INPUTS, (types.UINT8, types.UINT8, types.INT64), (1, 1, 0)))
    image, mask = (fn.io.file.read(split_pair(row)[0], dont_use_mmap=not USE_MMAP) for row in (image_row, mask_row))
    return image, mask, index


def graph_input(name: str, source, dtype, ndim: int):
    """One of the graph's inputs: computed per sample by ``source``, or, where ``source`` is None, a
    placeholder that TensorFlow feeds a batch at a time (``Input(batch=True)``). A GPU dataset's inputs
    are copied to the GPU element by element, and one copy per sample ran slower than the graph it fed
    on an H100 (docs/gpu.md, "On an H100"). Paths and records differ in length: each carries its lengths
    (:func:`pack_pair`), and a batch of them is padded with zeros to its longest."""
    return fn.external_source(source=source, batch=source is None, name=name, dtype=dtype, ndim=ndim)


def _read_packs(data: SegmentationData, sampler: Sampler, guard: PairGuard | None, fed: bool, device: Device):
    """One webdataset reader: image, mask and index from the same record, so paired by construction.

    It shuffles within its buffer (DALI's ``initial_fill``: ``SHUFFLE_BUFFER`` samples), gives each
    worker a contiguous range of samples, and pads its passes for evaluation only (see
    :class:`ReaderEpochs`).
    The seed is the pipeline's.
    """
    p = data.packs
    if p.tars[0].startswith("s3://") and not dali_s3_safe():  # (data loaded elsewhere, then handed here)
        raise DataError(f"packs in a bucket ({p.tars[0]}): DALI's S3 client would abort this process, where "
                        "TensorFlow was imported before DALI. Import daliloader before nvidia.dali, or load the "
                        "copy with packs=False")
    image_bytes, mask_bytes, index = fn.readers.webdataset(
        paths=list(p.tars), index_paths=list(p.indexes),
        ext=[";".join(p.image_exts), p.gpu_mask_ext if reads_gpu_masks(data, device) else p.mask_ext, p.index_ext],
        dtypes=[types.UINT8, types.UINT8, types.INT64], missing_component_behavior="error",
        random_shuffle=sampler.shuffle, initial_fill=SHUFFLE_BUFFER, shard_id=sampler.shard_id,
        num_shards=sampler.num_shards, pad_last_batch=not sampler.drop_remainder, stick_to_shard=True,
        dont_use_mmap=not USE_MMAP, name=READER)
    real = graph_input(PACK_INPUTS[0], None if fed else _RealSource(ReaderEpochs(sampler)), types.INT64, ndim=0)
    return image_bytes, mask_bytes, real * (sample_number(index, len(data)) + 1) - 1


def _read_records(data: SegmentationData, sampler: Sampler, guard: PairGuard | None, fed: bool, device: Device):
    """Each position's record, read in Python and checked against its index before DALI sees it
    (:meth:`~daliloader.guard.PairGuard.read`: a record that changed since the dataset was loaded is refused, never
    decoded), in the sampler's order like files: image and mask of one record, so paired by
    construction. They arrive as one input (:func:`pack_pair`), split here; a second input gives the
    sample index (-1: padding)."""
    source, index_source = (None, None) if fed else (_RecordSource(sampler, guard, _ahead(data)), _IndexSource(sampler))
    record = graph_input(RECORD_INPUTS[0], source, types.UINT8, ndim=1)
    index = graph_input(RECORD_INPUTS[1], index_source, types.INT64, ndim=0)
    return (*split_pair(record), index)


#: How the graph reads each container (one entry per :class:`~daliloader.data.Container`; a test checks):
#: ``(data, sampler, guard, fed, device) -> (image bytes, mask bytes, sample index)``.
#: Objects of a bucket are fed as records are: fetched and checked in Python (:mod:`daliloader.buckets`).
READERS = {Container.FILES: _read_files, Container.PACKS: _read_packs, Container.TFRECORD: _read_records,
           Container.OBJECTS: _read_records}


#: Bytes before the fields of a packed input (:func:`pack_pair`): the two fields' lengths, int32
#: little-endian.
PAIR_HEADER = 8


def pack_pair(first: bytes, second: bytes) -> bytes:
    """Two fields as one input of the graph (a record's encoded image and mask, or a path and nothing):
    their lengths, then the fields, so that zeros padded after them (a batch of inputs of different
    lengths, :func:`graph_input`) are no part of either (:func:`split_pair`)."""
    return struct.pack("<ii", len(first), len(second)) + first + second


def path_row(path: str) -> np.ndarray:
    """A file's path as the graph's path inputs take it (:func:`pack_pair`: the path, and no second field)."""
    return np.frombuffer(pack_pair(os.fsencode(path), b""), dtype=np.uint8)


def split_pair(packed):
    """A packed input (:func:`pack_pair`) split in the graph into its two fields, without the padding
    after them."""
    lengths = fn.reinterpret(packed[0:PAIR_HEADER], dtype=types.INT32)
    first_end = lengths[0] + PAIR_HEADER
    return packed[PAIR_HEADER:first_end], packed[first_end:first_end + lengths[1]]


def decode_window(encoded, start, shape, device: Device, kind, dtype):
    """decode: the part ``(start, shape)`` of the encoded picture, inside it.

    On the CPU, DALI decodes that region alone (``decoders.image_slice``). On a GPU the whole picture is
    decoded by nvJPEG ("mixed") and then sliced on the GPU: with the chroma upsampling that matches the
    CPU decoders (``jpeg_fancy_upsampling``), nvImageCodec refuses nvJPEG's region decode on the CUDA 12
    build (nvJPEG < 13.2: "ROI decode with fancy upsampling may produce wrong results on image edge")
    and falls back to a slower decoder, printing a warning per picture; the whole decode is several times
    faster there (figures: docs/gpu.md, "DALI builds").
    """
    options = dict(device=device.decoder, output_type=kind, dtype=dtype,
                   adjust_orientation=False, jpeg_fancy_upsampling=True)
    if device == Device.CPU:
        return fn.decoders.image_slice(encoded, start, shape, axis_names="HW", normalized_anchor=False,
                                       normalized_shape=False, **options)
    return fn.slice(fn.decoders.image(encoded, hw_decoder_load=HW_DECODER_LOAD, **options), start, shape,
                    axis_names="HW")


def decode_mask(encoded, start, shape, device: Device, data: SegmentationData):
    """decode, for a mask: the part ``(start, shape)`` (:func:`decode_window`), or all of it where ``start``
    is None (on the CPU only), as the class map reads it: colours as 8 bits (16-bit ones rounded, as every
    backend reads them), or ids as stored (a 16-bit mask decoded as uint8 would lose its high byte; an
    8-bit one decoded as uint16 would be scaled to 0-65535), of one channel where the ids are in one."""
    kind = types.RGB if data.classes.mask_channels == 3 else types.GRAY
    wide_ids = data.mask_depth == 16 and data.classes.kind is MaskKind.ID
    dtype = types.UINT16 if wide_ids else types.UINT8
    if start is None:
        mask = fn.decoders.image(encoded, device="cpu", output_type=kind, dtype=dtype, adjust_orientation=False)
    else:
        mask = decode_window(encoded, start, shape, device, kind, dtype)
    channel = data.classes.mask_channel
    if data.classes.kind is MaskKind.ID and channel is not None:
        mask = mask[:, :, channel:channel + 1]
    return mask


def lz4_header(encoded):
    """The GPU form's header read on the CPU (reference: :func:`daliloader.manifest.read_lz4_mask`): the
    mask's shape ``[H, W, 1]`` (int32, an argument input of the inflate) and the LZ4 block."""
    height_width = fn.reinterpret(encoded[len(LZ4_MAGIC):LZ4_HEADER], dtype=types.INT32)
    return fn.cat(height_width, np.array([1], np.int32)), encoded[LZ4_HEADER:]


def inflate_window(encoded, start, shape):
    """decode, for the masks' GPU form: the LZ4 block inflated on the GPU (nvCOMP, through
    ``fn.decoders.inflate``), then the window's part sliced there, as :func:`decode_window` does after
    nvJPEG. Nothing of the mask is decoded on the CPU: PNG, even in DALI's "mixed" decoder, is."""
    mask_shape, block = lz4_header(encoded)
    labels = fn.decoders.inflate(block.gpu(), shape=mask_shape, dtype=types.UINT8, layout="HWC")
    return fn.slice(labels, start, shape, axis_names="HW")


def map_labels(mask, classes: ClassMap):
    """labels (reference: :meth:`ClassMap.map_mask`): decoded mask -> (H, W, 1) class indices; unknown
    colours/ids -> ignore_index. Colours (uint8) go through two chained lookup tables per group of
    their (r, g) pairs (:class:`~daliloader.classes.RGBTables`), the keys computed in uint16."""
    out = types.UINT8 if classes.label_dtype == np.uint8 else types.UINT16
    if classes.kind is MaskKind.ID:
        return _lookup(mask, classes.id_table(), out)
    r, g, b = mask[:, :, 0:1], mask[:, :, 1:2], mask[:, :, 2:3]
    pair = r * types.Constant(256, dtype=types.UINT16) + g  # uint8 channels promoted to uint16, not wider
    labels = None
    for group in classes.rgb_tables().groups:
        found = _lookup(_lookup(pair, group.pairs, types.UINT16) + b, group.colours, out)
        labels = found if labels is None else dmath.min(labels, found)
    return labels


def _lookup(keys, table: LookupTable, dtype):
    """``fn.lookup_table`` of ``table``, its values of ``dtype``."""
    return fn.lookup_table(keys, keys=list(table.keys), values=list(table.values), default_value=table.default,
                           dtype=dtype)


def crop_window(extent, spec: Preprocess, u=None):
    """window (:func:`daliloader.stages.window_pairs`, evaluated on DALI nodes) of an image of ``extent``
    (``[height, width]``): ``(start, shape)`` in source pixels, ``[y, x]`` int32, and the flip; the window
    may overhang the image, which is then padded. ``u``: the sample's draws (None when the spec draws
    nothing)."""
    return stages.window_pairs(spec, extent, u, DALI_MATH)


def choose_window(extent, spec: Preprocess, u, labels, classes: ClassMap):
    """window with ``cat_max_ratio`` (:func:`daliloader.stages.choose_window`): :func:`crop_window`'s window
    and its :func:`daliloader.stages.redraws` on DALI nodes, checked on the whole mask's class indices
    ``labels`` (CPU) by daliloader's operator (:mod:`.dali_native`); returns what :func:`crop_window` does,
    the chosen window's corner for its own."""
    dali_native.load_operators()
    first, shape, flip = crop_window(extent, spec, u)
    win_h, win_w = (shape[0], shape[1]) if spec.resizes else spec.image_size
    starts = fn.stack(fn.cast(first, dtype=types.INT32), *(
        fn.cast(fn.stack(top, left), dtype=types.INT32) for top, left in
        stages.redraws(extent[0], extent[1], win_h, win_w, u, DALI_MATH)))
    sizes = fn.cast(shape, dtype=types.INT32) if spec.resizes else types.Constant(shape, device="cpu")
    start = fn.daliloader.cat_max_ratio_window(labels, starts, sizes, num_classes=classes.num_classes,
                                               ratio=repr(spec.cat_max_ratio))
    return start, shape, flip


def _inside(start, shape, extent):
    """The part of the window ``(start, shape)`` that lies inside an image of ``extent`` (``[H, W]``)."""
    lo = dmath.clamp(start, 0, extent)
    return lo, dmath.clamp(start + shape, 0, extent) - lo


def colour(image, spec: Preprocess, u):
    """colour (:func:`daliloader.stages.colour`): DALI's color_twist is the reference's formula, on the
    decoded pixels of the window (before padding), uint8 in and out. Without saturation and hue the map
    is per channel, ``b (c x + 128 (1 - c))``, which brightness_contrast computes as well, and much faster
    on the CPU (color_twist mixes channels through a 3x3 matrix; benchmarks/augment_ops.py measures both)."""
    brightness, contrast, saturation, hue = (fn.cast(v, dtype=types.FLOAT) for v in stages.draw_colour(spec, u))
    if spec.saturation == (1.0, 1.0) and spec.hue == (0.0, 0.0):
        return fn.brightness_contrast(image, brightness=brightness, contrast=contrast,
                                      contrast_center=stages.MID_GREY)
    return fn.color_twist(image, brightness=brightness, contrast=contrast, saturation=saturation, hue=hue)


def crop(image, labels, offset, shape, spec: Preprocess, ignore_index: int):
    """pad (:func:`daliloader.stages.crop`): the decoded window part (at ``offset`` in the window,
    ``<= 0``) padded to the window ``shape``; then resize (:func:`daliloader.stages.resize_to`) when it
    differs: the image bilinear with antialias, labels nearest-neighbour without; ``crop="fit"`` pads the
    result to ``image_size`` (:func:`daliloader.stages.fit_window`)."""
    image_fill, label_fill = stages.fills(ignore_index)
    image, labels = (fn.slice(a, start=offset, shape=shape, axis_names="HW", out_of_bounds_policy="pad",
                              fill_values=fill) for a, fill in ((image, image_fill), (labels, label_fill)))
    if not spec.resizes:
        return image, labels
    h, w = stages.resize_to(spec, shape[0], shape[1], DALI_MATH)
    labels = resize_labels(labels, shape, h, w, max(spec.image_size))
    if spec.crop == "fit":
        h, w = (fn.cast(v, dtype=types.FLOAT) for v in (h, w))
    image = fn.resize(image, resize_y=h, resize_x=w, interp_type=types.INTERP_LINEAR, antialias=True)
    if spec.crop == "fit":
        resized = image.shape(dtype=types.INT32)  # (the labels have the same size; the image needs no mask)
        top, left = stages.fit_window(spec, resized[0], resized[1], DALI_MATH)
        start = fn.stack(top, left)
        image, labels = (fn.slice(a, start=start, shape=np.array(spec.image_size, np.int32), axis_names="HW",
                                  out_of_bounds_policy="pad", fill_values=fill)
                         for a, fill in ((image, image_fill), (labels, label_fill)))
    return image, labels


def resize_labels(labels, shape, h, w, limit: int):
    """resize, labels (:func:`daliloader.stages.nearest_source`): the window's labels, of ``shape`` (a node,
    ``[height, width]``), nearest-neighbour to ``h`` x ``w`` (numbers, or nodes of at most ``limit``), the
    formula's rows and columns gathered in integers. DALI has no gather, and its nearest-neighbour resize
    computes the sampling points in float32, which decides ties (centres on a border between two source
    pixels) and, on large pictures, near-ties its own way (docs/design.md, "Labels resized alike"); but
    ``fn.sequence_rearrange`` picks the frames of a sequence by integer index. So each axis in turn is
    read as a sequence of rows, rearranged, and turned."""
    extent = fn.cast(shape, dtype=types.INT32)
    for along, size in ((extent[0], h), (extent[1], w)):
        picks = stages.nearest_source(_positions(size, limit), _int(size), along)
        labels = fn.sequence_rearrange(fn.reshape(labels, layout="FWC"), new_order=picks)
        labels = fn.transpose(labels, perm=[1, 0, 2], output_layout="HWC")
    return labels


def _positions(size, limit: int):
    """``0 .. size - 1`` as an int32 node; ``size``: a number, or a node of at most ``limit``."""
    if not isinstance(size, DataNode):
        return types.Constant(np.arange(size, dtype=np.int32), device="cpu")
    every = types.Constant(np.arange(limit, dtype=np.int32), device="cpu")
    return fn.slice(every, start=np.zeros(1, np.int32), shape=fn.reshape(_int(size), shape=[1]), axes=[0])


def _int(value):
    """An int32 node of a node or a number."""
    return fn.cast(value, dtype=types.INT32) if isinstance(value, DataNode) else \
        types.Constant(np.int32(value), device="cpu")


def rotate(image, labels, angle, classes: ClassMap, framed: bool = False):
    """rotate (:func:`daliloader.stages.rotate`): about the centre, keeping the size, corners filled as
    padding; DALI's rotation has no uint16, so wide labels turn as int32.

    ``framed`` (the CPU graph): the image turns inside a one-pixel frame of fill with DALI's clamped
    border instead of ``fill_value``. The bilinear taps that fall outside read the frame, so the pixels
    are the same (within one level of rounding), and DALI's CPU kernel is faster without a fill value
    (benchmarks/augment_ops.py measures it). ``size`` keeps the unframed size: DALI centres the output
    on the input's centre, which is the frame's. The GPU graph keeps ``fill_value``: there the frame
    would be one more copy, for a gain nobody has measured."""
    angle = fn.cast(angle, dtype=types.FLOAT)
    if framed:
        size = image.shape(dtype=types.INT32)[0:2]
        image = fn.slice(image, start=np.array([-1, -1], np.int32), shape=size + 2, axis_names="HW",
                         out_of_bounds_policy="pad", fill_values=stages.IMAGE_FILL)
        image = fn.rotate(image, angle=angle, size=fn.cast(size, dtype=types.FLOAT), interp_type=types.INTERP_LINEAR)
    else:
        image = fn.rotate(image, angle=angle, keep_size=True, fill_value=stages.IMAGE_FILL,
                          interp_type=types.INTERP_LINEAR)
    wide = classes.label_dtype == np.uint16
    turned = fn.rotate(fn.cast(labels, dtype=types.INT32) if wide else labels, angle=angle, keep_size=True,
                       fill_value=classes.ignore_index, interp_type=types.INTERP_NN)
    return image, (fn.cast(turned, dtype=types.UINT16) if wide else turned)


def flip_and_normalize(image, labels, flip, spec: Preprocess, host_finish: bool = False):
    """flip (:func:`daliloader.stages.flip`, the same draw for image and labels) and normalize
    (:func:`daliloader.stages.normalize`), fused into crop_mirror_normalize for the image; with
    ``host_finish``, flip alone (TensorFlow normalizes the batch: :class:`GraphSpec`)."""
    mirror = 0
    if flip is not False:
        mirror = DALI_MATH.to_int(flip)
        labels = fn.flip(labels, horizontal=mirror)
    if host_finish:
        return (fn.flip(image, horizontal=mirror) if flip is not False else image), labels
    mean, std = stages.mean_std_255(spec)
    image = fn.crop_mirror_normalize(image, mirror=mirror, dtype=types.FLOAT, output_layout="HWC", mean=list(mean),
                                     std=list(std))
    # float16: computed in float32 and rounded once, as the other backends do. Asked for float16 itself,
    # DALI's GPU kernel for HWC uint8 computes in half precision (1/255 itself rounded to a half), which
    # put values a half-precision step off the float32 images rounded (docs/gpu.md, "On an H200,
    # 2026-11-27, later")
    return (fn.cast(image, dtype=types.FLOAT16) if spec.dtype == "float16" else image), labels


def unpadded(labels, index, classes: ClassMap):
    """padding (:func:`daliloader.stages.unpadded`): the labels, or the ignore index everywhere for a padding
    sample (``index`` -1), in the labels' type."""
    real = fn.cast(index >= 0, dtype=types.INT32)
    kept = labels * real + classes.ignore_index * (1 - real)
    return fn.cast(kept, dtype=types.UINT16 if classes.label_dtype == np.uint16 else types.UINT8)


def encode(labels, spec: Preprocess, classes: ClassMap, host_finish: bool = False):
    """encode (:func:`daliloader.stages.encode`): (H, W, 1) indices -> int32 (H, W) or one-hot float32
    (H, W, C); ``fn.one_hot`` gives an all-zero row to the ignore index, as the reference. With
    ``host_finish``, the indices (H, W) as stored (TensorFlow encodes the batch: :class:`GraphSpec`)."""
    flat = labels[:, :, 0]
    if host_finish:
        return flat
    if spec.label_mode == "int":
        return fn.cast(flat, dtype=types.INT32)
    return fn.one_hot(flat, num_classes=classes.num_classes, axis=-1, dtype=types.FLOAT)


def weigh(labels, index, classes: ClassMap):
    """weights (:func:`daliloader.stages.weights`): per pixel, [H, W] float32, computed where the labels
    are (on the GPU for a GPU graph): the labels' weights (:func:`daliloader.stages.weight_table`), times
    0 for a padding sample (``index`` -1). Per pixel, because Keras cannot broadcast [B] sample weights
    against per-pixel losses."""
    table = stages.weight_table(classes.num_classes)
    per_label = fn.lookup_table(labels[:, :, 0], keys=list(range(classes.num_classes)),
                                values=[float(v) for v in table[:-1]], default_value=float(table[-1]),
                                dtype=types.FLOAT)
    return per_label * fn.cast(index >= 0, dtype=types.FLOAT)


# ---------------------------------------------------------------- the inputs, run alone
class _PathSource:
    """Encoded file path of the sample at ``info.idx_in_epoch`` (padding reuses the first file).

    With a ``guard``, each pair is vetted the first time it is asked for (see :class:`PairGuard`), so a
    missing, truncated or mismatched file fails here with its name, not later inside a decoder.
    """

    def __init__(self, sampler: Sampler, paths: tuple[str, ...], guard: PairGuard | None = None):
        self.sampler = sampler
        self.paths = [path_row(p) for p in paths]
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


def _ahead(data: SegmentationData) -> int:
    """Positions whose pairs a graph reading ``data`` without TensorFlow fetches ahead of the one DALI asks
    for: :data:`~daliloader.buckets.FETCHES` in a bucket (a fetch mostly waits on the network), none
    elsewhere."""
    return FETCHES if data.container is Container.OBJECTS else 0


class _RecordSource:
    """The record of the sample at ``info.idx_in_epoch`` (padding reads the first), read and vetted by the
    guard (:meth:`~daliloader.guard.PairGuard.read`), packed as the graph takes it (:func:`pack_pair`).

    DALI asks for one sample at a time. With ``ahead``, the next ``ahead`` positions are read on as many
    threads while it waits for this one (pairs in a bucket, as tf.data's streams fetch them), each
    position's result, or the refusal of its pair, handed over when DALI asks for that position."""

    def __init__(self, sampler: Sampler, guard: PairGuard, ahead: int = 0):
        self.sampler, self.guard, self.ahead = sampler, guard, ahead
        self._pool = ThreadPoolExecutor(ahead, thread_name_prefix="daliloader-fetch") if ahead else None
        self._pending: dict[int, Future] = {}

    def _record(self, position: int) -> np.ndarray:
        i = max(self.sampler.index_at(position), 0)
        return np.frombuffer(pack_pair(*self.guard.read(i)), dtype=np.uint8)

    def __call__(self, info):
        position = info.idx_in_epoch
        if self._pool is None:
            return self._record(position)
        for p in [p for p in self._pending if p < position]:  # (none, while DALI asks in order)
            del self._pending[p]
        for p in range(position, position + self.ahead):
            if p not in self._pending:
                self._pending[p] = self._pool.submit(self._record, p)
        return self._pending.pop(position).result()


def to_numpy(outputs) -> list[np.ndarray]:
    """One ``pipeline.run()`` result as host numpy arrays (GPU outputs are copied back)."""
    return [np.array(o.as_cpu().as_tensor() if hasattr(o, "as_cpu") else o.as_tensor()) for o in outputs]
