"""The reference: every per-sample stage of the spec defined once, in numpy.

Random parameters are drawn once per sample and then applied to the image and to the mask by
separate kernels (as torchvision's ``make_params`` and albumentations' ``apply``/``apply_to_mask``).
Each backend implements the stages in its own framework and cites the function here; the tests check
every backend against these functions with fixed draws.

The arithmetic of the crop window is written once, with Python operators and the few functions of a
``Math`` namespace (floor, abs, maximum, minimum, casts). Numpy's is the reference (:data:`NUMPY`);
the tf.data backend passes TensorFlow's and the DALI graph DALI's, so that all three compute the
window with this very code, on their own tensors.

Stages (names as in :mod:`daliloader.spec`):

* window     ``draw_window``: a ``Window`` (top, left, height, width in source pixels, and the flip)
             from the image size and four uniform draws ``u`` in [0, 1): zoom, top, left, flip.
             ``crop="center"``: the ``image_size`` window at ``((H-h)//2, (W-w)//2)``, padded evenly
             when the image is smaller (as ``tf.image.resize_with_crop_or_pad``). ``crop="random"``:
             zoom ``s = lo + u0 (hi - lo)`` gives a window of ``floor(h/s + 0.5)`` x
             ``floor(w/s + 0.5)`` source pixels, placed uniformly, flipped when ``u3 < flip``.
* pad        ``crop``: the window of an array; what lies outside the image is the fill
             (:func:`fills`: 0 for the image, ``ignore_index`` for labels).
* resize     the window is resized to ``image_size`` when it differs (random crops with zoom):
             the image bilinear with antialias, labels nearest-neighbour without (no label invented).
             Only the geometry is shared; each framework has its own resampling kernel.
* flip       ``flip``: horizontal, the same draw for image and labels.
* normalize  ``normalize``: ``(x - 255 mean) / (255 std)`` in ``dtype`` (``mean``/``std`` in [0, 1] units).
* encode     ``encode``: labels -> int32, or float32 one-hot rows of ``one_hot_table`` (the ignore
             index, and every value >= the number of classes, gives an all-zero row).
* weights    ``weights``: per pixel, ``weight_table[label]`` times 0 for a padding sample (evaluation
             batches filled up to a full batch) and 1 for a real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from .spec import Preprocess

#: The functions the window arithmetic needs beyond operators; numpy's is the reference. Floats are
#: float32, as in TensorFlow and DALI, so that the same draws give the same window everywhere.
NUMPY = SimpleNamespace(floor=np.floor, abs=np.abs, maximum=np.maximum, minimum=np.minimum,
                        to_int=lambda x: np.asarray(x).astype(np.int64), to_float=lambda x: np.asarray(x, np.float32))


@dataclass(frozen=True)
class Window:
    """One sample's crop window, in source pixels (it may overhang the image), and its flip."""

    top: int
    left: int
    height: int
    width: int
    flip: bool


# ---------------------------------------------------------------- window (drawn once per sample)
def draw_window(spec: Preprocess, height, width, u, m=NUMPY):
    """The window of an image of ``height`` x ``width`` from the uniform draws ``u = (zoom, top, left,
    flip)``, with math ``m``; returns ``(top, left, window_height, window_width, flip)``."""
    h, w = spec.image_size
    if spec.crop == "center":
        return center_offset(height, h, m), center_offset(width, w, m), h, w, False
    win_h, win_w = h, w
    if spec.resizes:
        lo, hi = spec.scale
        zoom = lo + u[0] * (hi - lo)
        win_h, win_w = (m.to_int(m.floor(side / zoom + 0.5)) for side in (h, w))
    top = uniform_offset(height - win_h, u[1], m)
    left = uniform_offset(width - win_w, u[2], m)
    return top, left, win_h, win_w, (u[3] < spec.flip) if spec.flip > 0 else False


def window(spec: Preprocess, height: int, width: int, u) -> Window:
    """:func:`draw_window` in numpy (``u``: four float32 draws in [0, 1)), as a :class:`Window`."""
    top, left, win_h, win_w, flip = draw_window(spec, height, width, np.asarray(u, np.float32))
    return Window(int(top), int(left), int(win_h), int(win_w), bool(flip))


def center_offset(extent, size: int, m=NUMPY):
    """``(extent - size) // 2`` when the window fits, ``-((size - extent) // 2)`` when it overhangs (as TF)."""
    return m.maximum(extent - size, 0) // 2 - m.maximum(size - extent, 0) // 2


def uniform_offset(slack, u, m=NUMPY):
    """An offset drawn uniformly from the ``|slack| + 1`` integers in ``[0, slack]`` (``[slack, 0]`` when
    the window overhangs the image by ``-slack`` pixels)."""
    steps = m.minimum(m.to_int(m.floor(u * m.to_float(m.abs(slack) + 1))), m.abs(slack))
    return steps * (m.to_int(slack >= 0) * 2 - 1)


# ---------------------------------------------------------------- applied to image and labels
#: What pads the image where the window overhangs it (labels are padded with the ignore index).
IMAGE_FILL = 0


def fills(ignore_index: int) -> tuple[int, int]:
    """What pads the image and the labels where the window overhangs."""
    return IMAGE_FILL, ignore_index


def crop(a: np.ndarray, win: Window, fill) -> np.ndarray:
    """pad: the window of ``a`` (H, W, ...); what lies outside ``a`` is ``fill``."""
    out = np.full((win.height, win.width) + a.shape[2:], fill, dtype=a.dtype)
    y0, x0 = max(win.top, 0), max(win.left, 0)
    y1, x1 = min(win.top + win.height, a.shape[0]), min(win.left + win.width, a.shape[1])
    if y1 > y0 and x1 > x0:
        out[y0 - win.top:y1 - win.top, x0 - win.left:x1 - win.left] = a[y0:y1, x0:x1]
    return out


def flip(a: np.ndarray, win: Window) -> np.ndarray:
    """The horizontal mirror (a view) when the window says so."""
    return a[:, ::-1] if win.flip else a


# ---------------------------------------------------------------- image
def mean_std_255(spec: Preprocess) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The normalisation constants in pixel units (0-255)."""
    return tuple(255.0 * v for v in spec.mean), tuple(255.0 * v for v in spec.std)


def per_channel(values: tuple[float, ...]):
    """One number when every channel has the same value (arithmetic with a scalar is cheaper than a
    broadcast, and gives the same result), else the values."""
    return values[0] if len(set(values)) == 1 else values


def normalize(image: np.ndarray, spec: Preprocess) -> np.ndarray:
    """uint8 RGB -> ``(x - 255 mean) / (255 std)`` in ``spec.dtype`` (bfloat16 is computed as float32).
    A zero mean is not subtracted: the result is the same, one pass over the pixels cheaper."""
    mean, std = mean_std_255(spec)
    x = image.astype(np.float32)
    if any(spec.mean):
        x -= np.float32(per_channel(mean))
    x /= np.float32(per_channel(std))
    return x.astype(np.float16) if spec.dtype == "float16" else x


# ---------------------------------------------------------------- labels
def one_hot_table(num_classes: int) -> np.ndarray:
    """Row ``k`` is the one-hot encoding of class ``k``; row ``num_classes`` (every other value) is all zeros."""
    return np.concatenate([np.eye(num_classes, dtype=np.float32), np.zeros((1, num_classes), np.float32)])


def encode(labels: np.ndarray, spec: Preprocess, num_classes: int) -> np.ndarray:
    """encode: class indices -> int32 ``[H, W]``, or float32 one-hot ``[H, W, C]``."""
    if spec.label_mode == "int":
        return labels.astype(np.int32)
    return one_hot_table(num_classes)[np.minimum(labels, num_classes)]


def weight_table(num_classes: int) -> np.ndarray:
    """Row ``k`` is the weight of a pixel of class ``k``, row ``num_classes`` that of every other value
    (the ignore index): 1 for all, today."""
    return np.ones(num_classes + 1, np.float32)


def weights(labels: np.ndarray, real: bool, num_classes: int) -> np.ndarray:
    """Per-pixel float32 weights of one sample: its labels' weights, times 0 for padding."""
    return weight_table(num_classes)[np.minimum(labels, num_classes)] * np.float32(real)
