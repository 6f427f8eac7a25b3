"""TensorFlow implementations of reference stages (:mod:`daliloader.stages`), shared by the backends
that hand batches to Keras (:mod:`.dali_tf` on the host, :mod:`.tfdata`)."""

from __future__ import annotations

from types import SimpleNamespace

import tensorflow as tf

from .. import stages


def _to_int(x):
    return tf.cast(x, tf.int32)


def _to_float(x):
    return tf.cast(x, tf.float32)


#: The draws' arithmetic (:mod:`daliloader.draws`) on TensorFlow tensors (named functions, which
#: autograph can read, unlike two lambdas on one line).
TF_MATH = SimpleNamespace(floor=tf.floor, ceil=tf.math.ceil, abs=tf.abs, maximum=tf.maximum, minimum=tf.minimum,
                          sqrt=tf.sqrt, exp=tf.exp, sum=tf.reduce_sum, stack=tf.stack, to_int=_to_int,
                          to_float=_to_float)


def to_uint8(x):
    """Float pixel values -> uint8, rounded to nearest and clipped to 0-255, as the reference's kernels."""
    return tf.cast(tf.clip_by_value(tf.round(x), 0.0, 255.0), tf.uint8)


def flip_if(flip, axis: int, image, labels):
    """``image`` and ``labels`` reversed along ``axis`` where ``flip`` (a scalar bool tensor: ``tf.cond``
    refuses a Python bool in graph code) is true, else as they are.
    A ``tf.cond``: ``tf.where`` would reverse both whatever the draw and then select every pixel
    through a broadcast condition, which slowed the tfdata loader down by much (docs/benchmarks.md,
    "Two fixes, measured again")."""
    return tf.cond(flip, lambda: (tf.reverse(image, [axis]), tf.reverse(labels, [axis])), lambda: (image, labels))


def colour(image, factors):
    """colour (:func:`daliloader.stages.colour`): uint8 RGB -> uint8 RGB through the reference's colour
    map, for one draw ``factors`` (brightness, contrast, saturation, hue)."""
    a0, a1, a2, offset = stages.colour_coefficients(*factors, cos=tf.cos, sin=tf.sin)
    matrix = (a0 * tf.constant(stages.LUMA, tf.float32) + a1 * tf.constant(stages.CHROMA, tf.float32)
              + a2 * tf.constant(stages.CHROMA_TURN, tf.float32))
    return to_uint8(tf.tensordot(tf.cast(image, tf.float32), tf.transpose(matrix), axes=1) + offset)


def rotate(image, labels, angle, ignore_index: int):
    """rotate (:func:`daliloader.stages.rotate`): image (H, W, 3) uint8 bilinear and labels (H, W, 1)
    nearest-neighbour, by ``angle`` degrees about the centre, corners filled as padding."""
    shape = tf.shape(image)
    height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
    transform = tf.stack(list(stages.rotation_coefficients(angle, height, width, tf.cos, tf.sin)) + [0.0, 0.0])
    transform = tf.cast(transform, tf.float32)[None]

    def turn(a, fill, method):
        out = tf.raw_ops.ImageProjectiveTransformV3(images=a[None], transforms=transform, output_shape=shape[:2],
                                                     fill_value=fill, interpolation=method, fill_mode="CONSTANT")
        return out[0]

    image = to_uint8(turn(tf.cast(image, tf.float32), float(stages.IMAGE_FILL), "BILINEAR"))
    turned = turn(tf.cast(labels, tf.int32), float(ignore_index), "NEAREST")  # no uint16 kernel
    return image, tf.cast(turned, labels.dtype)


def normalize(images, spec):
    """normalize (:func:`daliloader.stages.normalize`) of uint8 RGB batches, as the reference: to float,
    minus the mean (a zero mean is not subtracted), over the deviation, in ``spec.dtype``."""
    mean, std = (tf.constant(stages.per_channel(v), tf.float32) for v in stages.mean_std_255(spec))
    x = tf.cast(images, tf.float32)
    x = (x - mean if any(spec.mean) else x) / std
    return tf.cast(x, {"float32": tf.float32, "float16": tf.float16, "bfloat16": tf.bfloat16}[spec.dtype])


def encode(labels, spec, num_classes: int):
    """encode (:func:`daliloader.stages.encode`) of class-index batches: int32, or one-hot (:func:`one_hot`)."""
    return tf.cast(labels, tf.int32) if spec.label_mode == "int" else one_hot(labels, num_classes)


def one_hot(labels, num_classes: int):
    """encode (:func:`daliloader.stages.encode`): class indices (any integer dtype) -> float32 one-hot
    ``[..., num_classes]``, rows of :func:`daliloader.stages.one_hot_table` (``ignore_index``, and every
    value >= ``num_classes``, gives all zeros, as ``tf.one_hot``). A gather of rows is faster than
    ``tf.one_hot`` (measured: docs/design.md, "What makes the CPU graph fast")."""
    return tf.gather(tf.constant(stages.one_hot_table(num_classes)), tf.minimum(tf.cast(labels, tf.int32), num_classes))


def weights(labels, num_classes: int):
    """weights (:func:`daliloader.stages.weights`) of real samples: per pixel, the labels' weights."""
    table = tf.constant(stages.weight_table(num_classes))
    return tf.gather(table, tf.minimum(tf.cast(labels, tf.int32), num_classes))
