"""The preprocessing spec in plain ``tf.data`` + ``tf.image`` (stage names as in :mod:`daliloader.spec`).

Built as the TensorFlow performance guide recommends, so that it is the strongest pure-TF peer:
per-sample work (read, decode, label lookup, crop) in a parallel ``map`` with AUTOTUNE; JPEGs whose
window lies inside the image are decoded with ``decode_and_crop_jpeg`` (only the window's DCT blocks);
the cheap per-pixel work (normalise, one-hot) is vectorised after ``batch``; then ``prefetch``.
"""

from __future__ import annotations

import tensorflow as tf

from ..checks import PairGuard
from ..classes import ClassMap
from ..data import SegmentationData
from ..sampler import Sampler
from ..spec import Preprocess
from ..tfops import one_hot

AUTOTUNE = tf.data.AUTOTUNE


def tfdata_dataset(data: SegmentationData, spec: Preprocess, sampler: Sampler, with_weights: bool) -> tf.data.Dataset:
    """Epochs follow tf.data's own reshuffling (a new order at every ``iter()``), sharded like DALI."""
    classes = data.classes
    lut = tf.constant(classes.lookup_table)
    n = len(data)
    indices = tf.data.Dataset.range(n)
    if sampler.num_shards > 1:
        indices = indices.shard(sampler.num_shards, sampler.shard_id)
    if sampler.shuffle:
        indices = indices.shuffle(n, seed=sampler.seed, reshuffle_each_iteration=True)
    seeds = tf.data.Dataset.random(seed=sampler.seed, rerandomize_each_iteration=True)
    images, masks = tf.constant(data.images), tf.constant(data.masks)

    guard = PairGuard(data)

    def vet(index):  # the PairGuard's checks, once per pair: a bad file fails with its name
        guard.verify(int(index))
        return index

    def load(index, seed):
        index = tf.numpy_function(vet, [index], tf.int64, stateful=False)
        return sample(images[index], masks[index], spec, classes, lut, tf.stack([seed, index]))

    ds = tf.data.Dataset.zip(indices, seeds).map(load, num_parallel_calls=AUTOTUNE)
    ds = ds.batch(sampler.batch_size, drop_remainder=sampler.drop_remainder, num_parallel_calls=AUTOTUNE)
    ds = ds.map(lambda x, y: finish(x, y, spec, classes, with_weights), num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def sample(image_path, mask_path, spec: Preprocess, classes: ClassMap, lut, seed):
    """read, decode, labels, crop, flip of one pair; returns uint8 RGB and class indices."""
    image_bytes, mask_bytes = tf.io.read_file(image_path), tf.io.read_file(mask_path)
    image, top, left, win_h, win_w, flip = decode_image_window(image_bytes, spec, seed)
    labels = map_labels(decode_mask(mask_bytes, classes), classes, lut)
    labels = crop(labels[..., None], top, left, win_h, win_w, classes.ignore_index)
    h, w = spec.image_size
    if spec.resizes:
        image = tf.image.resize(image, (h, w), method="bilinear", antialias=True)
        image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
        labels = tf.image.resize(labels, (h, w), method="nearest")
    image = tf.ensure_shape(image, (h, w, 3))
    labels = tf.ensure_shape(labels[..., 0], (h, w))
    if spec.flip > 0:
        image = tf.where(flip, tf.reverse(image, [1]), image)
        labels = tf.where(flip, tf.reverse(labels, [1]), labels)
    return image, labels


def finish(images, labels, spec: Preprocess, classes: ClassMap, with_weights: bool):
    """normalize and encode, vectorised over the batch."""
    x = tf.cast(images, tf.float32) / 255.0
    if spec.mean != (0.0, 0.0, 0.0) or spec.std != (1.0, 1.0, 1.0):
        x = (x - tf.constant(spec.mean)) / tf.constant(spec.std)
    x = tf.cast(x, {"float32": tf.float32, "float16": tf.float16, "bfloat16": tf.bfloat16}[spec.dtype])
    if spec.label_mode == "int":
        y = tf.cast(labels, tf.int32)
    else:
        y = one_hot(labels, classes.num_classes)  # ignore -> zeros
    if with_weights:
        return x, y, tf.ones(tf.shape(x)[:3], tf.float32)  # per pixel, as the DALI backends
    return x, y


def decode_image_window(image_bytes, spec: Preprocess, seed):
    """decode + crop: each format decoded once, the window drawn from the image's shape.

    JPEG: the shape comes from the header, and a window inside the image is decoded alone with
    ``decode_and_crop_jpeg``; other formats are decoded whole and cropped.
    """
    def jpeg():
        shape = tf.io.extract_jpeg_shape(image_bytes)
        top, left, win_h, win_w, flip = draw_window(spec, shape[0], shape[1], seed)
        inside = (top >= 0) & (left >= 0) & (top + win_h <= shape[0]) & (left + win_w <= shape[1])
        image = tf.cond(
            inside,
            lambda: tf.io.decode_and_crop_jpeg(image_bytes, tf.stack([top, left, win_h, win_w]), channels=3,
                                               dct_method="INTEGER_ACCURATE"),
            lambda: crop(tf.io.decode_jpeg(image_bytes, channels=3, dct_method="INTEGER_ACCURATE"),
                         top, left, win_h, win_w, 0))
        return image, top, left, win_h, win_w, flip

    def other():
        image = tf.io.decode_image(image_bytes, channels=3, dtype=tf.uint8, expand_animations=False)
        shape = tf.shape(image)
        top, left, win_h, win_w, flip = draw_window(spec, shape[0], shape[1], seed)
        return crop(image, top, left, win_h, win_w, 0), top, left, win_h, win_w, flip

    return tf.cond(tf.io.is_jpeg(image_bytes), jpeg, other)


def decode_mask(mask_bytes, classes: ClassMap):
    channels = 3 if classes.kind == "rgb" else 1
    return tf.io.decode_image(mask_bytes, channels=channels, expand_animations=False)


def map_labels(mask, classes: ClassMap, lut):
    """labels: one gather per pixel from :attr:`ClassMap.lookup_table`, as in the OpenCV backend."""
    m = tf.cast(mask, tf.int32)
    code = (m[..., 0] * 65536 + m[..., 1] * 256 + m[..., 2]) if classes.kind == "rgb" else m[..., 0]
    return tf.gather(lut, code)


def draw_window(spec: Preprocess, height, width, seed):
    """Crop window and flip of one sample (formulas as in the DALI graph), from a stateless seed."""
    h, w = spec.image_size
    if spec.crop == "center":
        top = tf.maximum(height - h, 0) // 2 - tf.maximum(h - height, 0) // 2
        left = tf.maximum(width - w, 0) // 2 - tf.maximum(w - width, 0) // 2
        return top, left, tf.constant(h), tf.constant(w), tf.constant(False)
    u = tf.random.stateless_uniform([4], seed=seed)
    if spec.resizes:
        zoom = spec.scale[0] + u[0] * (spec.scale[1] - spec.scale[0])
        win_h = tf.cast(tf.floor(h / zoom + 0.5), tf.int32)
        win_w = tf.cast(tf.floor(w / zoom + 0.5), tf.int32)
    else:
        win_h, win_w = tf.constant(h), tf.constant(w)
    top = _uniform_offset(height - win_h, u[1])
    left = _uniform_offset(width - win_w, u[2])
    return top, left, win_h, win_w, u[3] < spec.flip


def _uniform_offset(slack, u):
    steps = tf.minimum(tf.cast(tf.floor(u * tf.cast(tf.abs(slack) + 1, tf.float32)), tf.int32), tf.abs(slack))
    return tf.where(slack >= 0, steps, -steps)


def crop(a, top, left, win_h, win_w, fill):
    """The window of an (H, W, C) tensor; outside the image is ``fill``."""
    shape = tf.shape(a)
    y0, x0 = tf.maximum(top, 0), tf.maximum(left, 0)
    y1, x1 = tf.minimum(top + win_h, shape[0]), tf.minimum(left + win_w, shape[1])
    inner = a[y0:tf.maximum(y1, y0), x0:tf.maximum(x1, x0)]
    pads = [[y0 - top, top + win_h - tf.maximum(y1, y0)], [x0 - left, left + win_w - tf.maximum(x1, x0)], [0, 0]]
    return tf.pad(inner, pads, constant_values=tf.cast(fill, a.dtype))
