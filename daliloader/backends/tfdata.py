"""The preprocessing spec in plain ``tf.data`` + ``tf.image``: each stage implements its reference in
:mod:`daliloader.stages` with TensorFlow ops (the crop window is the reference's arithmetic on tensors).

Built as the TensorFlow performance guide recommends, so that it is the strongest pure-TF peer:
per-sample work (read, decode, label lookup, crop) in a parallel ``map`` with AUTOTUNE; JPEGs whose
window lies inside the image are decoded with ``decode_and_crop_jpeg`` (only the window's DCT blocks);
the cheap per-pixel work (normalise, one-hot) is vectorised after ``batch``; then ``prefetch``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from .. import stages
from ..buckets import FETCHES
from ..classes import ClassMap, MaskKind, packed_colour
from ..data import Container, SegmentationData
from ..guard import PairGuard
from ..parallel import mapped
from ..parts import MAGIC, in_bucket
from ..plan import Output, Plan
from ..sampler import SHUFFLE_BUFFER, ReaderEpochs
from ..spec import Preprocess
from ..tfprivate import variant
from ..tfrecord import read_record
from . import pair_guard, tf_augment
from .tfloader import EpochDataset, LoaderDataset
from .tfops import TF_MATH, colour, encode, flip_if, normalize, rotate, to_uint8, weights

AUTOTUNE = tf.data.AUTOTUNE


def dataset(plan: Plan) -> LoaderDataset:
    """The "tf.data" product. Epochs follow tf.data's own reshuffling (a new order every epoch) of the worker's
    stride of the files (a worker keeps its samples from epoch to epoch, where the sampler of the DALI and OpenCV
    backends deals the whole dataset out anew each epoch); with ``drop_remainder=False`` the last batch is filled up
    with padding samples (index -1, weight 0), as on the other backends, so that every backend gives the same
    batches. TFRecords are read
    with ``tf.data.TFRecordDataset`` (see :func:`_records`). Pairs are vetted by the guard a chunk of
    :data:`VET_CHUNK` at a time, before any of them is read (Python once per chunk, not per sample). The
    parallel map may hand samples over out of order (``deterministic`` off: each sample's draws are its
    own) only where an epoch is read on its own (TFRecord files in training without a ``seed``); never in
    evaluation, with a seed, or in the endless stream of training epochs, where a sample handed over
    early would cross into the epoch before.

    Training epochs are read from one endless stream (an :class:`~.tfloader.EpochDataset`): the epochs'
    vetted positions follow each other, each epoch's remainder dropped before batching, so the parallel
    map and the prefetch buffer never drain and refill between epochs (a cost that weighs most on a small
    dataset). Each epoch is vetted on its own, so that no vetting chunk reaches past the end of an epoch.
    Evaluation restarts at every ``iter()``, as a tf.data dataset does, and so does training on TFRecord
    files: each epoch reads the files again, so that a file changed under a run is refused by the next
    epoch at the latest (an endless stream's read-ahead could take a small dataset's whole next epoch
    from before the change)."""
    data, sampler = plan.data, plan.sampler
    guard = pair_guard(data, "tfdata")
    # One epoch's positions and one stream of draw seeds serve both the stream the dataset hands out
    # itself and the graph a chained transformation reads: tf.data's reshuffling and rerandomizing draw
    # their seeds from a generator each of these datasets owns, so that every epoch read, by either,
    # takes the generator's next seeds (two copies, each with its own generator, began alike: with a
    # seed, a chained pass replayed the dataset's first epoch).
    epoch, seeds = _vetted(plan, guard), _seeds(plan)
    one_epoch = _batches(plan, epoch, seeds)
    if not sampler.training or reading(data).epoch_by_epoch:  # every iter() from the first batch
        return LoaderDataset(one_epoch, guard)
    endless = _batches(plan, epoch.repeat(), seeds, across_epochs=True)
    return EpochDataset(endless, plan.steps, guard, variant(one_epoch))


def _vetted(plan: Plan, guard) -> tf.data.Dataset:
    """One epoch of vetted positions, as the data's container is read (:data:`READINGS`)."""
    return reading(plan.data).vetted(_positions(plan), guard)


def _positions(plan: Plan) -> tf.data.Dataset:
    """One epoch of positions: the sample indices of files, or (index, record) of TFRecords; in training,
    only the epoch's full batches (its remainder dropped here, so that repeated epochs never mix)."""
    sampler = plan.sampler
    epoch = reading(plan.data).positions(plan)
    return epoch.take(sampler.per_epoch) if sampler.drop_remainder else epoch


def _seeds(plan: Plan) -> tf.data.Dataset:
    """The seed of each position's draws: random, and new at every iteration, from the sampler's seed."""
    return tf.data.Dataset.random(seed=plan.sampler.seed, rerandomize_each_iteration=True)


def _batches(plan: Plan, stream: tf.data.Dataset, seeds: tf.data.Dataset, across_epochs: bool = False
             ) -> tf.data.Dataset:
    """The batches of a ``stream`` of vetted positions (:func:`_vetted`), each with its draws' seed from
    ``seeds`` (:func:`_seeds`): read, decoded and cropped in a parallel map, batched, then normalized and
    encoded on the batch (:func:`finish`), and prefetched."""
    data, spec, sampler = plan.data, plan.spec, plan.sampler
    classes = data.classes
    lut = tf.constant(classes.lookup_table)
    fetch = reading(data).fetch(data)

    def load(index, read, image_bytes, mask_bytes, seed):
        image_bytes, mask_bytes = fetch(read, image_bytes, mask_bytes)
        image, labels = sample_from_bytes(image_bytes, mask_bytes, spec, classes, lut, tf.stack([seed, read]),
                                          data.mask_depth, tf.gather(names, read))
        return image, labels, index

    names = tf.constant([f"{image} + {mask}".encode(errors="surrogateescape")
                         for image, mask in zip(data.images, data.masks)])  # for messages
    # the dataset's order in evaluation, and the same batches again for the same seed
    # and in order where the stream runs across epochs: a sample handed over early would cross into the
    # epoch before, which would then hold a sample twice (seen under load in the suite)
    ordered = sampler.seeded or not sampler.training or across_epochs
    ds = tf.data.Dataset.zip(stream, seeds).map(lambda vetted, seed: load(*vetted, seed), num_parallel_calls=AUTOTUNE,
                                                deterministic=ordered)
    ds = ds.batch(sampler.batch_size, drop_remainder=True, num_parallel_calls=AUTOTUNE)
    ds = ds.map(lambda x, y, i: finish(x, y, i, spec, classes, plan.outputs), num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def _fetch_files(data: SegmentationData) -> Callable:
    """``fetch`` of files: each pair read by ``tf.io.read_file`` from its paths."""
    # bytes, as the file system names them (a name that is no UTF-8 is no TensorFlow string)
    images, masks = (tf.constant([os.fsencode(p) for p in paths]) for paths in (data.images, data.masks))

    def fetch(read, *_):
        return tf.io.read_file(images[read]), tf.io.read_file(masks[read])
    return fetch


def _fetch_records(data: SegmentationData) -> Callable:
    """``fetch`` of TFRecords: the pair's bytes, read and checked with its record (:func:`_vetted_records`)."""
    def fetch(read, image, mask):
        return image, mask
    return fetch


@dataclass(frozen=True)
class Reading:
    """How this backend reads one kind of container: ``positions`` (one epoch of them, from the plan),
    ``vetted`` (those positions vetted by the guard: ``(sample index, index read, image bytes, mask
    bytes)``, the bytes empty where ``fetch`` reads them), ``fetch`` (``data`` -> a function of ``(index
    read, image bytes, mask bytes)`` giving the pair's encoded bytes), and ``epoch_by_epoch`` (training
    reads the container again every epoch instead of one endless stream: TFRecord files, so that a file
    changed under a run is refused by the next epoch at the latest)."""

    positions: Callable[[Plan], tf.data.Dataset]
    vetted: Callable[[tf.data.Dataset, PairGuard], tf.data.Dataset]
    fetch: Callable[[SegmentationData], Callable]
    epoch_by_epoch: bool = False


#: Stream positions vetted per Python call.
VET_CHUNK = 64


def _vetted_files(indices: tf.data.Dataset, guard) -> tf.data.Dataset:
    """``(sample index, the index read, b"", b"")`` per position, each chunk of :data:`VET_CHUNK` vetted by
    the guard before any of its pairs is read. Padding (index -1) reads sample 0."""
    def vet(chunk):
        for i in chunk:
            guard.verify(max(int(i), 0))
        return chunk

    def call(chunk):
        vetted = tf.numpy_function(vet, [chunk], tf.int64, stateful=False)
        return tf.ensure_shape(vetted, chunk.shape)

    vetted = indices.batch(VET_CHUNK).map(call).unbatch().map(
        lambda i: (i, tf.maximum(i, 0), tf.constant(b""), tf.constant(b"")))
    return vetted.apply(tf.data.experimental.assert_cardinality(indices.cardinality()))  # (unbatch forgets it)


def _vetted_records(records: tf.data.Dataset, guard) -> tf.data.Dataset:
    """``(sample index, the index read, image bytes, mask bytes)`` per position: each record's payload, as
    ``TFRecordDataset`` read it, checked against the file's index and its pair vetted by the guard
    (:meth:`~daliloader.guard.PairGuard.take`), a chunk of :data:`VET_CHUNK` at a time. Padding (index
    ``-1 - i``, see :func:`_records`) reads sample ``i``, the record it repeats; its index is -1."""
    def vet(indices, payloads):
        taken = [guard.take(-1 - int(i) if i < 0 else int(i), bytes(p)) for i, p in zip(indices, payloads)]
        return (np.array([t[0] for t in taken], dtype=object), np.array([t[1] for t in taken], dtype=object))

    def call(indices, payloads):
        images, masks = tf.numpy_function(vet, [indices, payloads], (tf.string, tf.string), stateful=False)
        read = tf.where(indices < 0, -1 - indices, indices)
        return tf.maximum(indices, -1), read, tf.ensure_shape(images, indices.shape), tf.ensure_shape(masks,
                                                                                                      indices.shape)

    vetted = records.batch(VET_CHUNK).map(call).unbatch()
    return vetted.apply(tf.data.experimental.assert_cardinality(records.cardinality()))  # (unbatch forgets it)


def _files(plan: Plan) -> tf.data.Dataset:
    """Sample indices of one epoch of files: the worker's stride of the dataset, shuffled whole, padded."""
    sampler, n = plan.sampler, len(plan.data)
    indices = tf.data.Dataset.range(n)
    if sampler.num_shards > 1:
        indices = indices.shard(sampler.num_shards, sampler.shard_id)
    if sampler.shuffle:
        indices = indices.shuffle(n, seed=sampler.seed, reshuffle_each_iteration=True)
    if not sampler.drop_remainder:  # padding positions at the end of the epoch (Sampler's rule)
        mine = len(range(sampler.shard_id, n, sampler.num_shards))
        indices = indices.concatenate(tf.data.Dataset.from_tensors(tf.constant(-1, tf.int64))
                                      .repeat(sampler.per_epoch - mine))
    return indices


def _records(plan: Plan) -> tf.data.Dataset:
    """``(sample index, serialized Example)`` of one epoch of TFRecords, read in the way of a DALI reader
    (:class:`~daliloader.sampler.ReaderEpochs`, as DALI's reader reads packs): the worker's contiguous range,
    shuffled within a buffer of :data:`~daliloader.sampler.SHUFFLE_BUFFER` records, an epoch of full batches for
    training or every record once and padding (index -1) for evaluation."""
    sampler, epochs = plan.sampler, ReaderEpochs(plan.sampler)
    records = record_stream(plan.data.images).skip(epochs.start).take(epochs.size)
    if sampler.shuffle:
        records = records.shuffle(SHUFFLE_BUFFER, seed=sampler.seed, reshuffle_each_iteration=True)
    if sampler.drop_remainder:
        records = records.take(sampler.per_epoch)
    else:
        padding = records.take(1).map(lambda index, serialized: (-1 - index, serialized))  # (see dataset's load)
        records = records.concatenate(padding.repeat(sampler.per_epoch - epochs.size))
    return records.apply(tf.data.experimental.assert_cardinality(sampler.per_epoch))


def record_stream(parts) -> tf.data.Dataset:
    """``(sample index, serialized Example)`` of the records of ``parts``, in their order. Parts in the
    files' order (every file read once, front to back: a whole dataset, or a split of it) are read by
    ``TFRecordDataset``, keeping the records asked for; parts in another order (a subset drawn at random)
    are read by their offsets, which a pass over the files could not do without reading them again for
    each step back."""
    runs: list[list[tuple[int, int]]] = []  # (record number, sample index)
    files: list[str] = []
    for index, part in enumerate(parts):
        if runs and files[-1] == part.file and part.record > runs[-1][-1][0]:
            runs[-1].append((part.record, index))
        else:
            runs.append([(part.record, index)])
            files.append(part.file)
    if len(files) > len(set(files)):
        return _by_offset(parts)
    found = None
    for file, run in zip(files, runs):
        table = np.full(run[-1][0] + 1, -1, np.int64)
        for record, index in run:
            table[record] = index
        lookup = tf.constant(table)  # this run's table, bound to its map function by the default below
        ds = tf.data.TFRecordDataset(os.fsencode(file)).take(len(table)).enumerate().map(
            lambda k, serialized, lookup=lookup: (lookup[k], serialized))
        if len(run) < len(table):
            ds = ds.filter(lambda index, _: index >= 0)
        found = ds if found is None else found.concatenate(ds)
    return found


def _by_offset(parts) -> tf.data.Dataset:
    """``(sample index, serialized Example)`` of each part, read at its offset (its CRCs checked)."""
    def payload(index):
        part = parts[int(index)]
        return read_record(part.file, part.record, part.offset, part.size, part.crc)

    return tf.data.Dataset.range(len(parts)).map(
        lambda i: (i, tf.numpy_function(payload, [i], tf.string, stateful=False)), num_parallel_calls=AUTOTUNE)


def resize_labels(labels, size):
    """resize, labels (:func:`daliloader.stages.nearest_source`): the source rows and columns gathered, in
    integers (``tf.image.resize``'s nearest neighbour decides ties in floats)."""
    for axis in (0, 1):
        n, extent = tf.cast(size[axis], tf.int64), tf.shape(labels, out_type=tf.int64)[axis]
        labels = tf.gather(labels, stages.nearest_source(tf.range(n, dtype=tf.int64), n, extent), axis=axis)
    return labels


def sample_from_bytes(image_bytes, mask_bytes, spec: Preprocess, classes: ClassMap, lut, seed, depth: int = 8,
                      name=""):
    """decode, colour, labels, crop (pad, resize), rotate, the declared stages, flip of one pair; returns
    uint8 RGB and class indices. The sample's draws (:func:`daliloader.stages.draw_count`) are stateless, from
    ``seed``. An image and a mask of different sizes (a file replaced after it was vetted) fail here, before
    they become a misaligned pair, with an error that shows ``name`` (the pair's files)."""
    u = tf.random.stateless_uniform([stages.draw_count(spec)], seed=seed)
    inside = (lambda part: colour(part, stages.draw_colour(spec, u))) if spec.colours else None
    mask = decode_mask(mask_bytes, classes, depth)

    def chosen(height, width):  # cat_max_ratio: the window chosen on the mask's classes
        return choose_window(spec, height, width, u, mask, classes, lut)

    image, size, win = decode_image_window(image_bytes, spec, u, inside, chosen if spec.chooses_window else None)
    image_fill, label_fill = stages.fills(classes.ignore_index)
    same = tf.debugging.Assert(tf.reduce_all(tf.shape(mask)[:2] == size), [
        "daliloader: an image and its mask differ in size (a file changed after it was vetted?):", name, "image",
        size, "mask", tf.shape(mask)[:2]])
    with tf.control_dependencies([same]):
        mask = tf.identity(mask)
    # labels on the window's pixels inside the mask only, then padded with the ignore index
    labels = crop(mask, win, label_fill, lambda part: map_labels(part, classes, lut)[..., None])
    h, w = spec.image_size
    if spec.resizes:
        size = tf.stack(stages.resize_to(spec, win.height, win.width, TF_MATH))
        image = to_uint8(tf.image.resize(image, size, method="bilinear", antialias=True))
        labels = resize_labels(labels, size)
        if spec.crop == "fit":
            fit = stages.Window(*stages.fit_window(spec, size[0], size[1], TF_MATH), h, w, False)
            image = crop(image, fit, image_fill)
            labels = crop(labels, fit, label_fill)
    image = tf.ensure_shape(image, (h, w, 3))
    labels = tf.ensure_shape(labels, (h, w, 1))
    if spec.rotates:
        image, labels = rotate(image, labels, stages.draw_angle(spec, u), classes.ignore_index)
    image, labels = tf_augment.apply(spec.augment, image, labels, u, classes.ignore_index)
    labels = labels[..., 0]
    if spec.flip > 0:
        image, labels = flip_pair(image, labels, win.flip)
    return image, labels


def flip_pair(image, labels, flip):
    """flip (:func:`daliloader.stages.flip`): image and labels mirrored left-right together when ``flip``."""
    return flip_if(flip, 1, image, labels)


def finish(images, labels, indices, spec: Preprocess, classes: ClassMap, outputs: tuple[Output, ...]):
    """normalize (:func:`daliloader.stages.normalize`), encode and weights, vectorised over the batch, as
    ``outputs`` ask (``indices``: -1 for padding)."""
    labels = unpadded(labels, indices, classes.ignore_index)
    out = {Output.IMAGE: normalize(images, spec), Output.LABELS: encode(labels, spec, classes.num_classes),
           Output.INDEX: indices}
    if Output.WEIGHT in outputs:  # 0 for padding samples
        out[Output.WEIGHT] = weights(labels, classes.num_classes) * tf.cast(indices >= 0, tf.float32)[:, None, None]
    return tuple(out[name] for name in outputs)


def unpadded(labels, indices, ignore_index: int):
    """padding (:func:`daliloader.stages.unpadded`): the labels of the padding samples (index -1) of a batch
    ``[B, H, W]`` set to ``ignore_index``."""
    real = tf.reshape(indices >= 0, [-1] + [1] * (len(labels.shape) - 1))
    return tf.where(real, labels, tf.constant(ignore_index, labels.dtype))


def decode_image_window(image_bytes, spec: Preprocess, u, inside=None, place=None):
    """decode + crop: each format decoded once, the window drawn from the image's shape and the draws
    ``u`` (``place(height, width)``, when given, chooses it instead: :func:`choose_window`); ``inside``
    (the colour stage) applies to the decoded pixels of the window, before padding. Returns the window's
    pixels, the image's ``(height, width)``, and the :class:`~daliloader.stages.Window`.

    JPEG: the shape comes from the header, and a window inside the image is decoded alone with
    ``decode_and_crop_jpeg``; other formats are decoded whole and cropped.
    """
    image_fill = stages.IMAGE_FILL
    inside = inside or (lambda part: part)
    place = place or (lambda height, width: draw_window(spec, height, width, u))

    def jpeg():
        shape = tf.io.extract_jpeg_shape(image_bytes)
        win = place(shape[0], shape[1])
        within = (win.top >= 0) & (win.left >= 0) & (win.top + win.height <= shape[0]) & (
            win.left + win.width <= shape[1])
        image = tf.cond(
            within,
            lambda: inside(tf.io.decode_and_crop_jpeg(
                image_bytes, tf.stack([win.top, win.left, win.height, win.width]), channels=3,
                dct_method="INTEGER_ACCURATE")),
            lambda: crop(tf.io.decode_jpeg(image_bytes, channels=3, dct_method="INTEGER_ACCURATE"), win, image_fill,
                         inside))
        return image, shape[:2], win.fields()

    def other():
        image = decode_rgb(image_bytes)
        shape = tf.shape(image)
        win = place(shape[0], shape[1])
        return crop(image, win, image_fill, inside), shape[:2], win.fields()

    image, size, fields = tf.cond(tf.io.is_jpeg(image_bytes), jpeg, other)
    return image, size, stages.Window(*fields)


def decode_mask(mask_bytes, classes: ClassMap, depth: int = 8):
    """Colours (a palette expanded; 16-bit ones as :func:`to_8bit`), or ids as stored: 8 or 16 bits
    (``depth``, the dataset's)."""
    if classes.mask_channels == 3:
        rgb = decode_rgb(mask_bytes)
        return rgb if classes.kind is MaskKind.RGB else rgb[..., classes.mask_channel:classes.mask_channel + 1]
    if depth == 16:
        return tf.io.decode_image(mask_bytes, channels=1, dtype=tf.uint16, expand_animations=False)

    def bmp():  # TensorFlow's BMP decoder takes 0, 3 or 4 channels, not 1: a grey BMP is read as stored
        return tf.ensure_shape(tf.io.decode_bmp(mask_bytes, channels=0)[..., :1], [None, None, 1])

    def others():
        return tf.io.decode_image(mask_bytes, channels=1, dtype=tf.uint8, expand_animations=False)
    bmp_magic = MAGIC["BMP"][0]
    return tf.cond(tf.strings.substr(mask_bytes, 0, len(bmp_magic)) == bmp_magic, bmp, others)


def decode_rgb(encoded):
    """Any picture but a JPEG as 8-bit RGB: a 16-bit PNG's samples rounded by :func:`to_8bit`, the others
    (8-bit PNG, BMP, GIF) as stored. TensorFlow decodes WebP only as uint8, and only with the channels it
    stores (3, or 4 with alpha): it is decoded so, and its alpha dropped."""
    def webp():
        pixels = tf.io.decode_image(encoded, dtype=tf.uint8, expand_animations=False)[..., :3]
        return tf.ensure_shape(pixels, [None, None, 3])

    def png8():  # the usual mask: decoded as stored
        return tf.io.decode_png(encoded, channels=3, dtype=tf.uint8)

    def png16():
        return to_8bit(tf.io.decode_png(encoded, channels=3, dtype=tf.uint16))

    def others():  # BMP, GIF: 8 bits as stored (decode_image's uint16 widens them by 256, not 257: read one
        # level low above 128 once divided back)
        return tf.io.decode_image(encoded, channels=3, dtype=tf.uint8, expand_animations=False)

    is_webp = (tf.strings.substr(encoded, 0, 4) == b"RIFF") & (tf.strings.substr(encoded, 8, 4) == b"WEBP")
    is_png = tf.strings.substr(encoded, 0, 8) == b"\x89PNG\r\n\x1a\n"
    sixteen = tf.strings.substr(encoded, 24, 1) == b"\x10"  # an IHDR's bit depth: 16, or 8 and less (palettes: 1-8)
    return tf.case([(is_webp, webp), (is_png & ~sixteen, png8), (is_png & sixteen, png16)], default=others,
                   exclusive=True)


def to_8bit(pixels):
    """uint16 samples as 8 bits, ``round(x / 257)``: the nearest level, as DALI and
    :func:`daliloader.codecs.to_8bit` read them."""
    return tf.cast((tf.cast(pixels, tf.int32) + 128) // 257, tf.uint8)


def map_labels(mask, classes: ClassMap, lut):
    """labels: one gather per pixel from :attr:`ClassMap.lookup_table`, as in the OpenCV backend."""
    m = tf.cast(mask, tf.int32)
    code = packed_colour(m) if classes.kind is MaskKind.RGB else m[..., 0]
    return tf.gather(lut, code)


def draw_window(spec: Preprocess, height, width, u) -> stages.Window:
    """window (:func:`daliloader.stages.draw_window`, evaluated on tensors) from the draws ``u``: int32
    tensors and a bool one."""
    win = stages.draw_window(spec, height, width, u, TF_MATH)
    return stages.Window(win.top, win.left, tf.cast(win.height, tf.int32), tf.cast(win.width, tf.int32),
                         tf.convert_to_tensor(win.flip))


def choose_window(spec: Preprocess, height, width, u, mask, classes: ClassMap, lut) -> stages.Window:
    """window with ``cat_max_ratio`` (:func:`daliloader.stages.choose_window`, on tensors): the candidates
    checked in turn, in a ``tf.while_loop`` that stops at the first balanced one, each on its part of the
    decoded ``mask`` mapped to classes; the last is kept unchecked."""
    first, n = draw_window(spec, height, width, u), classes.num_classes
    corners = [(first.top, first.left)] + stages.redraws(height, width, first.height, first.width, u, TF_MATH)
    tops, lefts = tf.stack([top for top, _ in corners]), tf.stack([left for _, left in corners])

    def balanced(k):
        top, left = tf.maximum(tops[k], 0), tf.maximum(lefts[k], 0)
        part = mask[top:tf.maximum(tops[k] + first.height, 0), left:tf.maximum(lefts[k] + first.width, 0)]
        counts = tf.math.bincount(tf.minimum(tf.cast(map_labels(part, classes, lut), tf.int32), n), minlength=n + 1,
                                  maxlength=n + 1)[:n]
        share = tf.cast(tf.reduce_max(counts), tf.float64) / tf.cast(tf.reduce_sum(counts), tf.float64)
        return (tf.math.count_nonzero(counts) > 1) & (share < spec.cat_max_ratio)

    (k,) = tf.while_loop(lambda k: tf.cond(k < stages.REDRAWS, lambda: ~balanced(k), lambda: False),
                         lambda k: (k + 1,), (tf.constant(0),))
    return stages.Window(tops[k], lefts[k], first.height, first.width, first.flip)


def crop(a, win: stages.Window, fill, inside=None):
    """pad (:func:`daliloader.stages.crop`): the window ``win`` of an (H, W, C) tensor (its flip aside);
    outside the image is ``fill``; ``inside`` applies to the part within the image before padding."""
    shape = tf.shape(a)
    top, left, win_h, win_w = win.top, win.left, win.height, win.width
    y0, x0 = tf.maximum(top, 0), tf.maximum(left, 0)
    y1, x1 = tf.minimum(top + win_h, shape[0]), tf.minimum(left + win_w, shape[1])
    inner = a[y0:tf.maximum(y1, y0), x0:tf.maximum(x1, x0)]
    if inside is not None:
        inner = inside(inner)
    pads = [[y0 - top, top + win_h - tf.maximum(y1, y0)], [x0 - left, left + win_w - tf.maximum(x1, x0)], [0, 0]]
    return tf.pad(inner, pads, constant_values=tf.cast(fill, inner.dtype))


def _vetted_objects(indices: tf.data.Dataset, guard) -> tf.data.Dataset:
    """``(sample index, the index read, image bytes, mask bytes)`` per position of objects in a bucket: each
    pair fetched, checked against its listing and vetted by the guard (:meth:`~daliloader.guard.PairGuard.read`),
    a chunk of :data:`VET_CHUNK` at a time on :data:`~daliloader.buckets.FETCHES` threads. Padding (index -1)
    reads sample 0."""
    def fetch(chunk):
        pairs = mapped(lambda i: guard.read(max(int(i), 0)), chunk, FETCHES)
        return np.array([p[0] for p in pairs], dtype=object), np.array([p[1] for p in pairs], dtype=object)

    def call(chunk):
        images, masks = tf.numpy_function(fetch, [chunk], (tf.string, tf.string), stateful=False)
        return chunk, tf.maximum(chunk, 0), tf.ensure_shape(images, chunk.shape), tf.ensure_shape(masks, chunk.shape)

    vetted = indices.batch(VET_CHUNK).map(call).unbatch()
    return vetted.apply(tf.data.experimental.assert_cardinality(indices.cardinality()))  # (unbatch forgets it)


def reading(data: SegmentationData) -> Reading:
    """How this backend reads ``data`` (:data:`READINGS`): packs are read as their pairs, and packs in a
    bucket as its objects (tf.data has no reader of webdataset tars)."""
    if data.container is Container.PACKS and in_bucket(data.images[0]):
        return READINGS[Container.OBJECTS]
    return READINGS[data.container]


_FILES = Reading(_files, _vetted_files, _fetch_files)
#: How each container is read (one entry per :class:`~daliloader.data.Container`; a test checks). A prepared
#: copy's packs are read as its files: tf.data has no reader of webdataset tars.
READINGS = {Container.FILES: _FILES, Container.PACKS: _FILES,
            Container.TFRECORD: Reading(_records, _vetted_records, _fetch_records, epoch_by_epoch=True),
            Container.OBJECTS: Reading(_files, _vetted_objects, _fetch_records)}
