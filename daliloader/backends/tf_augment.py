"""The declared stages (:mod:`daliloader.augment`) in TensorFlow: one kernel per stage, each its
reference's formula with TensorFlow ops, on one sample inside the tf.data backend's parallel map.

A kernel takes the stage, the uint8 RGB image ``(H, W, 3)``, the class indices ``(H, W, 1)`` and the
sample's parameters (:meth:`~daliloader.augment.Stage.params` with :data:`~.tfops.TF_MATH`), and
returns the image and the labels.
"""

from __future__ import annotations

import tensorflow as tf

from .. import augment
from .tfops import TF_MATH, flip_if, to_uint8


def apply(stages, image, labels, u, ignore_index: int):
    """The declared stages that are on, in order, on one sample with draws ``u``; image and labels of a
    static size (:func:`daliloader.augment.apply` with these kernels)."""
    return augment.apply(stages, image, labels, u, ignore_index, kernels=KERNELS, m=TF_MATH)


def vflip(stage, image, labels, params, ignore_index):
    return flip_if(params[0], 0, image, labels)


def reflect_101(n: int, radius):
    """Indices of ``range(-radius, n + radius)`` reflected into ``[0, n)`` without repeating the edge
    (OpenCV's ``BORDER_REFLECT_101``, any radius)."""
    period = max(2 * (n - 1), 1)
    i = tf.abs(tf.range(-radius, n + radius)) % period
    return tf.where(i >= n, period - i, i)


def blur(stage, image, labels, params, ignore_index):
    """The reference's kernel (:func:`~daliloader.augment.gaussian_weights`) of this sample's radius, the
    border reflected by gathering, then one depthwise convolution per axis."""
    r = augment.blur_radius(params[0], TF_MATH)
    k = augment.gaussian_weights(tf.cast(tf.range(-r, r + 1), tf.float32), params[0], TF_MATH)
    height, width = image.shape[0], image.shape[1]
    x = tf.gather(tf.gather(tf.cast(image, tf.float32), reflect_101(height, r), axis=0), reflect_101(width, r),
                  axis=1)[None]
    taps = tf.tile(k[:, None, None, None], [1, 1, 3, 1])
    x = tf.nn.depthwise_conv2d(x, taps, [1, 1, 1, 1], "VALID")
    x = tf.nn.depthwise_conv2d(x, tf.transpose(taps, [1, 0, 2, 3]), [1, 1, 1, 1], "VALID")
    return tf.ensure_shape(to_uint8(x[0]), image.shape), labels


def gamma(stage, image, labels, params, ignore_index):
    g = tf.cast(params[0], tf.float32)
    return to_uint8(tf.pow(tf.cast(image, tf.float32) / 255.0, g) * 255.0), labels


def erase(stage, image, labels, params, ignore_index):
    top, left, h, w = params
    rows = tf.range(image.shape[0])[:, None, None]
    cols = tf.range(image.shape[1])[None, :, None]
    inside = (rows >= top) & (rows < top + h) & (cols >= left) & (cols < left + w)
    image = tf.where(inside, tf.constant(stage.erase_value, tf.uint8), image)
    if stage.erase_mask == "ignore":
        labels = tf.where(inside, tf.constant(ignore_index, labels.dtype), labels)
    return image, labels


#: Each declared stage's kernel.
KERNELS = {augment.VerticalFlip: vflip, augment.GaussianBlur: blur, augment.Gamma: gamma,
           augment.RandomErasing: erase}
