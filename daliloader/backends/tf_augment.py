"""The declared stages (:mod:`daliloader.augment`) in TensorFlow: one kernel per stage, each its
reference's formula with TensorFlow ops, on one sample inside the tf.data backend's parallel map.

A kernel takes the stage, the uint8 RGB image ``(H, W, 3)``, the class indices ``(H, W, 1)`` and the
sample's parameters (:meth:`~daliloader.augment.Stage.params` with :data:`~.tfops.TF_MATH`), and
returns the image and the labels.
"""

from __future__ import annotations

import tensorflow as tf

from .. import augment
from .tfops import TF_MATH, to_uint8


def apply(stages, image, labels, u, ignore_index: int):
    """The declared stages that are on, in order, on one sample with draws ``u``; image and labels of a
    static size."""
    height, width = image.shape[0], image.shape[1]
    for stage in stages:
        image, labels = KERNELS[type(stage)](stage, image, labels, stage.params(u, height, width, TF_MATH),
                                             ignore_index)
    return image, labels


def vflip(stage, image, labels, params, ignore_index):
    flip = params[0]
    return tf.where(flip, tf.reverse(image, [0]), image), tf.where(flip, tf.reverse(labels, [0]), labels)


def reflect_101(n: int, radius: int):
    """Indices of ``range(-radius, n + radius)`` reflected into ``[0, n)`` without repeating the edge
    (OpenCV's ``BORDER_REFLECT_101``, any radius)."""
    period = max(2 * (n - 1), 1)
    i = tf.abs(tf.range(-radius, n + radius)) % period
    return tf.where(i >= n, period - i, i)


def blur(stage, image, labels, params, ignore_index):
    """The reference's kernel (:func:`~daliloader.augment.gaussian_kernel`) for this sample's sigma,
    zero beyond its radius inside one kernel of the range's largest radius, so that the shapes are static;
    the border reflected by gathering, then one depthwise convolution per axis."""
    sigma = tf.cast(params[0], tf.float32)
    most = augment.blur_radius(stage.blur[1])
    x = tf.range(-most, most + 1, dtype=tf.float32)
    k = tf.where(tf.abs(x) <= tf.math.ceil(3.0 * sigma), tf.exp(-x * x / (2.0 * sigma * sigma)), 0.0)
    k /= tf.reduce_sum(k)
    height, width = image.shape[0], image.shape[1]
    x = tf.gather(tf.gather(tf.cast(image, tf.float32), reflect_101(height, most), axis=0),
                  reflect_101(width, most), axis=1)[None]
    size = 2 * most + 1
    x = tf.nn.depthwise_conv2d(x, tf.tile(tf.reshape(k, [size, 1, 1, 1]), [1, 1, 3, 1]), [1, 1, 1, 1], "VALID")
    x = tf.nn.depthwise_conv2d(x, tf.tile(tf.reshape(k, [1, size, 1, 1]), [1, 1, 3, 1]), [1, 1, 1, 1], "VALID")
    return to_uint8(x[0]), labels


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
