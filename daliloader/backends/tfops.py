"""TensorFlow implementations of reference stages (:mod:`daliloader.stages`), shared by the backends
that hand batches to Keras (:mod:`.dali_tf` on the host, :mod:`.tfdata`)."""

from __future__ import annotations

from types import SimpleNamespace

import tensorflow as tf

from .. import stages

#: The window arithmetic of :mod:`daliloader.stages` on TensorFlow tensors.
TF_MATH = SimpleNamespace(floor=tf.floor, abs=tf.abs, maximum=tf.maximum, minimum=tf.minimum,
                          to_int=lambda x: tf.cast(x, tf.int32), to_float=lambda x: tf.cast(x, tf.float32))


def one_hot(labels, num_classes: int):
    """encode (:func:`daliloader.stages.encode`): class indices (any integer dtype) -> float32 one-hot
    ``[..., num_classes]``, rows of :func:`daliloader.stages.one_hot_table` (``ignore_index``, and every
    value >= ``num_classes``, gives all zeros, as ``tf.one_hot``). A gather of rows is faster than
    ``tf.one_hot`` (measured: README, How it is built)."""
    return tf.gather(tf.constant(stages.one_hot_table(num_classes)), tf.minimum(tf.cast(labels, tf.int32), num_classes))


def weights(labels, num_classes: int):
    """weights (:func:`daliloader.stages.weights`) of real samples: per pixel, the labels' weights."""
    table = tf.constant(stages.weight_table(num_classes))
    return tf.gather(table, tf.minimum(tf.cast(labels, tf.int32), num_classes))
