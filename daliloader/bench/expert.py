"""The ``tf.data`` pipeline an expert writes for daliloader's default training recipe: the reference every
backend is judged against in the bench (``tf-expert``).

It is what the TensorFlow performance guide teaches, in about forty lines, with nothing of daliloader's:
paths sliced and shuffled, one ``map`` with ``num_parallel_calls=AUTOTUNE`` that reads both files, decodes
the mask (``decode_png`` as uint8), draws one window for image and mask and one flip, decodes only that
window of a JPEG photo (``decode_and_crop_jpeg``; other formats whole, then sliced) and slices the mask at
the same offset, turns colours (or ids) into classes on the crop only through a
``tf.lookup.StaticHashTable`` (unknown values -> 255), then ``batch``, a map that scales the images to
[0, 1] and one-hot encodes the labels on the batch, and ``prefetch``; with autotuning, map
parallelization and ``deterministic=False``. (Before 2026-11-27 it read the files before shuffling,
decoded whole photos and joined image and mask with ``tf.concat`` for ``random_crop``; figures dated
before then were taken against that version: docs/benchmarks.md.) Its output is daliloader's default
(``crop="random"``, ``flip=0.5``, no zoom, ``mean=0``, ``std=1``): float32 images and int32 or one-hot
labels. It is endless (``repeat``), as the bench reads every loader.

docs/benchmarks.md shows this file. It reads files, TFRecord files with ``TFRecordDataset`` and objects of
a bucket with daliloader's S3 client (TensorFlow has none); its
window needs pictures at least as large as the crop.
"""

from __future__ import annotations

import numpy as np

from ..classes import ClassMap, MaskKind
from ..data import Container, SegmentationData
from ..parts import part_file, read_checked_pair
from ..plan import Plan


def expert_dataset(plan: Plan):
    """The expert's ``tf.data.Dataset`` for ``plan``'s data and recipe (see the module)."""
    import tensorflow as tf

    data, spec = plan.data, plan.spec
    (h, w), batch_size = spec.image_size, plan.batch_size
    channels = 3 if data.classes.kind is MaskKind.RGB else 1
    table = _class_table(data.classes)
    jpeg = _jpeg(data)
    files, read = _pairs(data)

    def load(image_file, mask_file):
        mask = tf.io.decode_png(read(mask_file), channels=channels)
        top = tf.random.uniform([], 0, tf.shape(mask)[0] - h + 1, tf.int32)  # one window for image and mask
        left = tf.random.uniform([], 0, tf.shape(mask)[1] - w + 1, tf.int32)
        if jpeg:  # only the window's blocks decoded
            image = tf.io.decode_and_crop_jpeg(read(image_file), tf.stack([top, left, h, w]), channels=3)
        else:
            image = tf.io.decode_png(read(image_file), channels=3)[top:top + h, left:left + w]
        m = tf.cast(tf.ensure_shape(mask[top:top + h, left:left + w], [h, w, channels]), tf.int32)
        code = m[..., 0] * 65536 + m[..., 1] * 256 + m[..., 2] if channels == 3 else m[..., 0]
        labels = table.lookup(code)  # colours (or ids) to classes on the crop only
        image = tf.ensure_shape(image, [h, w, 3])  # (a window: its shape is the crop's)
        if tf.random.uniform([]) < 0.5:  # one flip for both
            return tf.reverse(image, [1]), tf.reverse(labels, [1])
        return image, labels

    def finish(images, labels):
        images = tf.cast(images, tf.float32) / 255.0
        if spec.label_mode == "onehot":
            return images, tf.one_hot(labels, data.classes.num_classes)
        return images, labels

    ds = files.shuffle(len(data), seed=plan.sampler.seed).repeat()
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    ds = ds.batch(batch_size, drop_remainder=True).map(finish, num_parallel_calls=tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.autotune.enabled = True
    options.experimental_optimization.map_parallelization = True
    options.deterministic = False
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def _class_table(classes: ClassMap):
    """The hash table from packed colour ``r << 16 | g << 8 | b`` (or id) to class, unknown -> the ignore
    index. (The expert's code packs colours itself, as its 40 lines would: it is the reference the loaders
    are judged against, not one of them.)"""
    import tensorflow as tf

    if classes.kind is MaskKind.RGB:
        c = classes.colors.astype(np.int64)
        keys = (c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]
        values = np.arange(classes.num_classes)
    else:
        table = classes.id_table()
        keys, values = np.asarray(table.keys, np.int64), np.asarray(table.values, np.int64)
    initializer = tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.int32), tf.constant(values, tf.int32))
    return tf.lookup.StaticHashTable(initializer, default_value=classes.ignore_index)


def _pairs(data: SegmentationData):
    """The pairs as the expert's map takes them, and how it reads one: files as their paths (read with
    ``read_file`` in the map, after shuffling), records as their bytes (``TFRecordDataset``), objects of a
    bucket as their bytes (fetched by daliloader's S3 client in a parallel map: TensorFlow reads no
    ``s3://``)."""
    import tensorflow as tf

    if data.container is Container.OBJECTS:
        return fetched_pairs(data), tf.identity
    if data.records is None:
        return tf.data.Dataset.from_tensor_slices((list(data.images), list(data.masks))), tf.io.read_file
    keys = data.records
    features = {key: tf.io.FixedLenFeature([], tf.string) for key in (keys.image_key, keys.mask_key)}
    files = list(dict.fromkeys(part_file(p) for p in data.images))
    return tf.data.TFRecordDataset(files).map(lambda s: tf.io.parse_single_example(s, features)).map(
        lambda f: (f[keys.image_key], f[keys.mask_key])), tf.identity


def _jpeg(data: SegmentationData) -> bool:
    """Whether the dataset's pictures are JPEGs (by the first one), as an expert writes for their data."""
    from ..parts import image_suffix

    return image_suffix(data.images[0]) in (".jpg", ".jpeg")


def refuses(data: SegmentationData, plan: Plan) -> str | None:
    """Why the expert's pipeline cannot run on ``data`` with ``plan`` (None where it can): its
    random window needs pictures at least as large as the crop, its decoder one format."""
    h, w = plan.spec.image_size
    small = [(ih, iw) for ih, iw in data.image_sizes if ih < h or iw < w]
    if small:
        return f"its random crop needs pictures of at least {h}x{w}; the dataset holds {small[0][0]}x{small[0][1]}"
    suffixes = {part_file(p).rsplit(".", 1)[-1].lower() for p in data.images[:64]} if data.records is None else set()
    if len(suffixes) > 1:
        return f"its decoder reads one format; the dataset mixes {', '.join(sorted(suffixes))}"
    return None


def fetched_pairs(data: SegmentationData):
    """(image bytes, mask bytes) per pair in a bucket, fetched by daliloader's S3 client in a parallel map
    (TensorFlow reads no ``s3://``): how the references read a bucket."""
    import tensorflow as tf

    def fetched(i):
        image, mask = tf.numpy_function(lambda i: read_checked_pair(data.images[int(i)], data.masks[int(i)]), [i],
                                        (tf.string, tf.string))
        return tf.ensure_shape(image, []), tf.ensure_shape(mask, [])

    return tf.data.Dataset.range(len(data)).map(fetched, num_parallel_calls=tf.data.AUTOTUNE)
