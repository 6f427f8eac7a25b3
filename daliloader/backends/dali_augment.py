"""The declared stages (:mod:`daliloader.augment`) as DALI ops: one kernel per stage, each its
reference's formula, on the CPU and the GPU alike, inside the DALI graph (:mod:`.dali_graph`).

A kernel takes the stage, the uint8 RGB image ``(H, W, 3)``, the class indices ``(H, W, 1)`` and the
sample's parameters (:meth:`~daliloader.augment.Stage.params` evaluated on DALI nodes with
:data:`~.dali_math.DALI_MATH`: CPU nodes, which DALI takes as per-sample arguments on either device), and returns
the image and the labels.
"""

from __future__ import annotations

from nvidia.dali import fn, types
from nvidia.dali import math as dmath

from .. import augment
from .dali_math import DALI_MATH


def apply(stages, image, labels, u, image_size: tuple[int, int], ignore_index: int):
    """The declared stages that are on, in order, on the graph's samples of ``image_size``, draws ``u``
    (:func:`daliloader.augment.apply` with these kernels)."""
    return augment.apply(stages, image, labels, u, ignore_index, size=image_size, kernels=KERNELS, m=DALI_MATH)


def vflip(stage, image, labels, params, ignore_index):
    flip = DALI_MATH.to_int(params[0])
    return fn.flip(image, horizontal=0, vertical=flip), fn.flip(labels, horizontal=0, vertical=flip)


def blur(stage, image, labels, params, ignore_index):
    """DALI's gaussian_blur is the reference's kernel: radius ``ceil(3 sigma)``, ``BORDER_REFLECT_101``."""
    return fn.gaussian_blur(image, sigma=fn.cast(params[0], dtype=types.FLOAT)), labels


def gamma(stage, image, labels, params, ignore_index):
    g = fn.cast(params[0], dtype=types.FLOAT)
    if image.device == "gpu":  # (a per-sample operand of a GPU expression must be there too)
        g = g.gpu()
    return fn.cast(dmath.pow(fn.cast(image, dtype=types.FLOAT) / 255.0, g) * 255.0, dtype=types.UINT8), labels


def erase(stage, image, labels, params, ignore_index):
    top, left, h, w = params
    where = dict(anchor=fn.cast(fn.stack(top, left), dtype=types.FLOAT),
                 shape=fn.cast(fn.stack(h, w), dtype=types.FLOAT), axis_names="HW")
    image = fn.erase(image, fill_value=float(stage.erase_value), **where)
    if stage.erase_mask == "ignore":
        labels = fn.erase(labels, fill_value=float(ignore_index), **where)
    return image, labels


#: Each declared stage's kernel.
KERNELS = {augment.VerticalFlip: vflip, augment.GaussianBlur: blur, augment.Gamma: gamma,
           augment.RandomErasing: erase}
