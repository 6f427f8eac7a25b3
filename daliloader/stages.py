"""The reference: every per-sample stage of the spec defined once, in numpy.

Random parameters are drawn once per sample and then applied to the image and to the mask by
separate kernels (as torchvision's ``make_params`` and albumentations' ``apply``/``apply_to_mask``).
Each backend implements the stages in its own framework and cites the function here; the tests check
every backend against these functions with fixed draws.

The arithmetic of the draws and of the crop window is written once (:mod:`daliloader.draws`), with a
framework's math: numpy's here, TensorFlow's and DALI's in the backends, so that all three compute the
window with this very code, on their own tensors.

Each sample gets :func:`draw_count` uniform draws ``u`` in [0, 1), in this order: zoom, top, left, flip,
angle, brightness, contrast, saturation, hue, then those of the declared stages
(:mod:`daliloader.augment`), then, with ``cat_max_ratio`` only, the top and left of each of the
window's :data:`~daliloader.draws.REDRAWS` redraws (all of them: :data:`DRAWS`). A range option ``(lo, hi)`` takes
``lo + u (hi - lo)``.

Stages (names as in :mod:`daliloader.spec`), in order:

* window     ``draw_window``: a :class:`Window` (top, left, height, width in source pixels, and the flip).
             ``crop="center"``: the ``image_size`` window at ``((H-h)//2, (W-w)//2)``, padded evenly
             when the image is smaller (as ``tf.image.resize_with_crop_or_pad``). ``crop="random"``:
             zoom ``s`` gives a window of ``floor(h/s + 0.5)`` x ``floor(w/s + 0.5)`` source pixels,
             placed uniformly. ``crop="resize"`` and ``"fit"``: the whole image. Flipped when
             ``u[3] < flip``. With ``cat_max_ratio`` < 1, ``choose_window`` keeps the first of the
             window and its redraws (:func:`candidates`) in which no class dominates (:func:`balanced`).
* colour     ``colour``: brightness, contrast, saturation and hue in one affine map per pixel (DALI's
             ``color_twist``, :func:`colour_matrix`), on the image's pixels (not the padding), rounded
             to uint8.
* pad        ``crop``: the window of an array; what lies outside the image is the fill
             (:func:`fills`: 0 for the image, ``ignore_index`` for labels).
* resize     the window is resized to :func:`resize_to` when it differs (random crops with zoom, and
             the whole-image modes): the image bilinear with antialias, labels nearest-neighbour without
             (no label invented). ``crop="fit"`` then pads the result to ``image_size``, centred
             (:func:`fit_window`). Only the geometry is shared; each framework has its own kernel.
* rotate     ``rotate``: about the centre, keeping the size (:func:`rotation_matrix`); the image
             bilinear, labels nearest-neighbour; the corners are filled as padding.
* declared   the declared stages that are on (:mod:`daliloader.augment`: vertical flip, blur, gamma,
             random erasing), each with its own reference there.
* flip       ``flip``: horizontal, the same draw for image and labels.
* normalize  ``normalize``: ``(x - 255 mean) / (255 std)`` in ``dtype`` (``mean``/``std`` in [0, 1] units).
* padding    ``unpadded``: a padding sample's labels are all the ignore index (evaluation batches filled up
             to a full batch with copies of a pair), so that a metric given no weights (Keras'
             ``metrics=``) counts none of its pixels, as ``weighted_metrics`` count none.
* encode     ``encode``: labels -> int32, or float32 one-hot rows of ``one_hot_table`` (the ignore
             index, and every value >= the number of classes, gives an all-zero row).
* weights    ``weights``: per pixel, ``weight_table[label]`` times 0 for a padding sample (evaluation
             batches filled up to a full batch) and 1 for a real one. The table gives each class 1 and
             the ignore index 0 (class weights, which belong to the loss, use the same table:
             :mod:`daliloader.losses`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import cv2
import numpy as np

from . import augment
from .draws import NUMPY, REDRAWS, draw, uniform_offset, window_side
from .spec import Preprocess

#: The prologue's uniform draws per sample, and where each one is used; the declared stages' follow
#: (:mod:`daliloader.augment`). TOP and LEFT are adjacent: :func:`window_pairs` reads them as one pair.
ZOOM, TOP, LEFT, FLIP, ANGLE, BRIGHTNESS, CONTRAST, SATURATION, HUE = range(augment.FIRST_DRAW)
#: Where the redraws' draws start (two each: top, left), after the declared stages'.
FIRST_REDRAW = augment.STAGE_DRAWS
#: Uniform draws per sample, the most there are (with the redraws: a spec takes :func:`draw_count`).
DRAWS = FIRST_REDRAW + 2 * REDRAWS


def draw_count(spec: Preprocess) -> int:
    """The draws a sample of ``spec`` takes: all of :data:`DRAWS` with ``cat_max_ratio``, else those before
    the redraws (a spec without it draws, from a seed, what it drew before the option existed)."""
    return DRAWS if spec.chooses_window else FIRST_REDRAW


#: A window's numbers: ints in numpy, or the tensors or DALI nodes of the framework that drew it.
Value = TypeVar("Value")


@dataclass(frozen=True)
class Window(Generic[Value]):
    """One sample's crop window, in source pixels (it may overhang the image), and its flip: ints and a
    bool from :func:`window`, the framework's tensors or nodes from :func:`draw_window`."""

    top: Value
    left: Value
    height: Value
    width: Value
    flip: Any  # a bool, a framework's boolean, or False where the spec never flips

    def fields(self) -> tuple:
        """``(top, left, height, width, flip)``: what a framework passes where it takes no records
        (``tf.cond``'s branches return tuples of tensors); ``Window(*fields)`` is the window again."""
        return self.top, self.left, self.height, self.width, self.flip


# ---------------------------------------------------------------- draws (once per sample)
def draw_window(spec: Preprocess, height, width, u, m=NUMPY) -> Window:
    """The window of an image of ``height`` x ``width`` from the draws ``u`` (see :func:`draw_count`), with
    math ``m`` (its numbers are ``m``'s: see :class:`Window`): :func:`window_pairs`, one number each."""
    start, shape, flip = window_pairs(spec, m.stack([height, width]), u, m)
    return Window(start[0], start[1], shape[0], shape[1], flip)


def window_pairs(spec: Preprocess, extent, u, m=NUMPY) -> tuple:
    """The window of an image of ``extent`` (its ``[height, width]``, a pair of ``m``'s) as ``(start, shape,
    flip)``: ``[top, left]`` and ``[height, width]`` pairs of ``m``'s (the shape an int32 numpy pair where
    it is ``image_size``), and the flip. Each step computes both axes at once (``TOP`` and ``LEFT`` are
    adjacent draws), so that a graph of one operator per operation (DALI's, whose operators each cost a
    fixed time per batch) computes the window in half the operators of the two axes apart."""
    size = np.array(spec.image_size, np.int32)
    flip = (u[FLIP] < spec.flip) if spec.flip > 0 else False
    if spec.crop == "center":
        return center_offset(extent, size, m), size, flip
    if spec.crop in ("resize", "fit"):
        return 0 * extent, extent, flip  # (0 * x: a zero of the framework's own type)
    shape = size
    if spec.scale != (1.0, 1.0):
        zoom = draw(spec.scale, u[ZOOM])
        shape = m.stack([window_side(side, zoom, m) for side in spec.image_size])
    return uniform_offset(extent - shape, u[TOP:LEFT + 1], m), shape, flip


def window(spec: Preprocess, height: int, width: int, u) -> Window[int]:
    """:func:`draw_window` in numpy (``u``: the float32 draws), in Python ints and a bool."""
    return as_ints(draw_window(spec, height, width, np.asarray(u, np.float32)))


def as_ints(win: Window) -> Window[int]:
    """A window of numpy numbers in Python ints and a bool."""
    return Window(int(win.top), int(win.left), int(win.height), int(win.width), bool(win.flip))


def redraws(height, width, win_h, win_w, u, m=NUMPY) -> list[tuple]:
    """``cat_max_ratio``: the ``(top, left)`` of the :data:`~daliloader.draws.REDRAWS` redraws of a ``win_h``
    x ``win_w`` window, each placed uniformly by its own two draws, as mmsegmentation's ``RandomCrop``
    draws them."""
    return [(uniform_offset(height - win_h, u[FIRST_REDRAW + 2 * k], m),
             uniform_offset(width - win_w, u[FIRST_REDRAW + 2 * k + 1], m)) for k in range(REDRAWS)]


def candidates(spec: Preprocess, height, width, u, m=NUMPY) -> list[Window]:
    """``cat_max_ratio``: the window (:func:`draw_window`) and its :func:`redraws`, of the same size and flip."""
    first = draw_window(spec, height, width, u, m)
    return [first] + [Window(top, left, first.height, first.width, first.flip)
                      for top, left in redraws(height, width, first.height, first.width, u, m)]


def balanced(counts: np.ndarray, ratio: float) -> bool:
    """Whether a window whose classes have ``counts`` pixels (the ignored ones left out) passes
    mmsegmentation's test: more than one class, and the largest below ``ratio`` of them all (the quotient
    in float64, as numpy's)."""
    return np.count_nonzero(counts) > 1 and float(counts.max()) / float(counts.sum()) < ratio


def class_counts(labels: np.ndarray, win: Window, num_classes: int) -> np.ndarray:
    """The pixels of each class in the part of ``win`` inside ``labels`` (what overhangs is padding); the
    ignore index, and every value ``>= num_classes`` with it (the class map puts it there), is left out."""
    part = labels[max(win.top, 0):max(win.top + win.height, 0), max(win.left, 0):max(win.left + win.width, 0)]
    return np.bincount(np.minimum(part, num_classes).ravel(), minlength=num_classes + 1)[:num_classes]


def choose_window(spec: Preprocess, labels: np.ndarray, num_classes: int, u) -> Window[int]:
    """``cat_max_ratio`` (mmsegmentation's ``RandomCrop``): the first of :func:`candidates` that is
    :func:`balanced` on the class indices ``labels`` (the whole mask), else the last, unchecked."""
    wins = [as_ints(w) for w in candidates(spec, *labels.shape[:2], np.asarray(u, np.float32))]
    return next((w for w in wins[:-1] if balanced(class_counts(labels, w, num_classes), spec.cat_max_ratio)),
                wins[-1])


def resize_to(spec: Preprocess, win_h, win_w, m=NUMPY):
    """The size the window is resized to: ``image_size``, or for ``crop="fit"`` the largest size of the
    window's aspect ratio inside it, ``floor(side * min(h / H, w / W) + 0.5)`` (at least 1 pixel), in float32
    on every backend (``m``), so that they agree where an exact half rounds down in float32."""
    h, w = spec.image_size
    if spec.crop != "fit":
        return h, w
    s = m.minimum(m.to_float(h) / m.to_float(win_h), m.to_float(w) / m.to_float(win_w))
    return tuple(m.minimum(m.maximum(m.to_int(m.floor(m.to_float(side) * s + 0.5)), 1), size)
                 for side, size in ((win_h, h), (win_w, w)))


def fit_window(spec: Preprocess, height, width, m=NUMPY):
    """``crop="fit"``: the ``image_size`` window, centred, around a resized image of ``height`` x ``width``
    (offsets ``<= 0``: padding)."""
    h, w = spec.image_size
    return center_offset(height, h, m), center_offset(width, w, m)


def draw_angle(spec: Preprocess, u):
    """rotate: the angle in degrees, counter-clockwise."""
    return draw(spec.rotate, u[ANGLE])


def draw_colour(spec: Preprocess, u):
    """colour: ``(brightness, contrast, saturation, hue)`` (factors, and degrees for hue)."""
    return tuple(draw(getattr(spec, name), u[k]) for name, k in (("brightness", BRIGHTNESS), ("contrast", CONTRAST),
                                                                  ("saturation", SATURATION), ("hue", HUE)))


def center_offset(extent, size, m=NUMPY):
    """``(extent - size) // 2`` when the window fits, ``-((size - extent) // 2)`` when it overhangs (as TF);
    ``extent`` comes first in each operation, so that a numpy ``size`` meets a framework's ``extent`` in
    the framework's operator (numpy's would apply it to each element on its own)."""
    slack = extent - size
    return m.maximum(slack, 0) // 2 - m.maximum(-slack, 0) // 2


# ---------------------------------------------------------------- applied to image and labels
#: What pads the image where the window overhangs it (labels are padded with the ignore index).
IMAGE_FILL = 0


def fills(ignore_index: int) -> tuple[int, int]:
    """What pads the image and the labels where the window overhangs."""
    return IMAGE_FILL, ignore_index


def crop(a: np.ndarray, win: Window, fill, inside=None) -> np.ndarray:
    """pad: the window of ``a`` (H, W, ...); what lies outside ``a`` is ``fill``. ``inside``, when given,
    is applied to the part of the window inside ``a`` before padding (the colour stage)."""
    out = np.full((win.height, win.width) + a.shape[2:], fill, dtype=a.dtype)
    y0, x0 = max(win.top, 0), max(win.left, 0)
    y1, x1 = min(win.top + win.height, a.shape[0]), min(win.left + win.width, a.shape[1])
    if y1 > y0 and x1 > x0:
        part = a[y0:y1, x0:x1]
        out[y0 - win.top:y1 - win.top, x0 - win.left:x1 - win.left] = part if inside is None else inside(part)
    return out


def nearest_source(i, size, extent):
    """resize, labels: the source row (or column) of output row ``i`` of ``size`` taken from ``extent``:
    the one that holds the output pixel's centre, ``floor((i + 0.5) * extent / size)``, in integers. A
    centre on the border between two source pixels takes the second: in floats, rounding would decide
    that, each framework its own way (OpenCV's, TensorFlow's and DALI's nearest-neighbour resizes each
    break some of those ties otherwise). ``i``: a numpy or TensorFlow integer array, or a DALI int32 node."""
    return (2 * i + 1) * extent // (2 * size)


def resize(a: np.ndarray, size, labels: bool) -> np.ndarray:
    """resize: the image bilinear with antialiasing (OpenCV's area averaging along a side that shrinks,
    bilinear along one that grows, as DALI's and TensorFlow's antialiasing resizes work per side), labels
    nearest-neighbour without (:func:`nearest_source`)."""
    h, w = (int(v) for v in size)
    if a.shape[:2] == (h, w):
        return a
    if labels:
        rows, cols = (nearest_source(np.arange(n), n, extent) for n, extent in ((h, a.shape[0]), (w, a.shape[1])))
        return a[rows][:, cols]
    height, width = a.shape[:2]
    if (h <= height) == (w <= width):  # both sides shrink, or both grow: one pass
        return cv2.resize(a, (w, h), interpolation=cv2.INTER_AREA if h <= height else cv2.INTER_LINEAR)
    shrunk = cv2.resize(a, (min(w, width), min(h, height)), interpolation=cv2.INTER_AREA)  # one side shrinks
    return cv2.resize(shrunk, (w, h), interpolation=cv2.INTER_LINEAR)


def rotation_coefficients(angle, height, width, cos, sin):
    """rotate: the affine map from output pixel ``(x, y)`` to source pixel (pixel centres at integer
    coordinates), ``x' = a0 x + a1 y + a2``, ``y' = b0 x + b1 y + b2``, as ``(a0, a1, a2, b0, b1, b2)``:
    a rotation by ``angle`` degrees counter-clockwise about the centre ``((W - 1) / 2, (H - 1) / 2)``,
    with the framework's ``cos``/``sin``. It is OpenCV's ``getRotationMatrix2D`` inverted: the map
    ``cv2.warpAffine`` applies with ``WARP_INVERSE_MAP``, TensorFlow's ``ImageProjectiveTransformV3``
    takes, and DALI's ``fn.rotate(keep_size=True)`` computes (the tests check all three)."""
    t = angle * (np.pi / 180.0)
    c, s = cos(t), sin(t)
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    return c, -s, cx - c * cx + s * cy, s, c, cy - s * cx - c * cy


def rotation_matrix(angle, height: int, width: int) -> np.ndarray:
    """:func:`rotation_coefficients` in numpy, as the 2x3 matrix of ``cv2.warpAffine``."""
    return np.array(rotation_coefficients(np.float64(angle), height, width, np.cos, np.sin)).reshape(2, 3)


def rotate(a: np.ndarray, angle, fill, labels: bool) -> np.ndarray:
    """rotate: ``a`` rotated by ``angle`` degrees about its centre, same size; the image bilinear,
    labels nearest-neighbour; what comes from outside is ``fill``."""
    if angle == 0:
        return a
    h, w = a.shape[:2]
    flags = (cv2.INTER_NEAREST if labels else cv2.INTER_LINEAR) | cv2.WARP_INVERSE_MAP
    out = cv2.warpAffine(a, rotation_matrix(angle, h, w), (w, h), flags=flags, borderMode=cv2.BORDER_CONSTANT,
                         borderValue=float(fill))
    return out.reshape(a.shape)


def flip(a: np.ndarray, win: Window) -> np.ndarray:
    """The horizontal mirror (a view) when the window says so."""
    return a[:, ::-1] if win.flip else a


# ---------------------------------------------------------------- image
#: RGB -> YIQ, as DALI's color_twist has it; YIQ -> RGB is its exact inverse (as DALI 2.4 computes it).
RGB_TO_YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
YIQ_TO_RGB = np.linalg.inv(RGB_TO_YIQ)
#: The colour map is a sum of three fixed matrices: luma, chroma scaled by ``cos(hue)`` and chroma
#: turned by ``sin(hue)`` (a hue shift is a rotation of the YIQ chroma plane, saturation scales it).
LUMA = YIQ_TO_RGB @ np.diag([1.0, 0.0, 0.0]) @ RGB_TO_YIQ
CHROMA = YIQ_TO_RGB @ np.diag([0.0, 1.0, 1.0]) @ RGB_TO_YIQ
CHROMA_TURN = YIQ_TO_RGB @ np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]) @ RGB_TO_YIQ
#: Contrast scales about mid-grey (DALI's ``color_twist``: half of the uint8 range).
MID_GREY = 128.0


def colour_coefficients(brightness, contrast, saturation, hue, cos, sin):
    """The colour map's weights ``(luma, chroma, chroma_turn, offset)`` for one draw, with the
    framework's ``cos``/``sin`` (radians): ``out = luma LUMA x + chroma CHROMA x + chroma_turn
    CHROMA_TURN x + offset``."""
    bc = brightness * contrast
    t = hue * (np.pi / 180.0)
    return bc, bc * saturation * cos(t), bc * saturation * sin(t), brightness * MID_GREY * (1.0 - contrast)


def colour_matrix(brightness, contrast, saturation, hue) -> tuple[np.ndarray, float]:
    """colour: the 3x3 matrix and offset of ``out = M @ rgb + offset``: saturation scales and hue turns
    the YIQ chroma, contrast scales about :data:`MID_GREY`, brightness multiplies (DALI's color_twist)."""
    a0, a1, a2, offset = colour_coefficients(brightness, contrast, saturation, hue, np.cos, np.sin)
    return a0 * LUMA + a1 * CHROMA + a2 * CHROMA_TURN, float(offset)


def colour(image: np.ndarray, factors) -> np.ndarray:
    """colour: uint8 RGB -> uint8 RGB through :func:`colour_matrix`, rounded and clipped."""
    matrix, offset = colour_matrix(*factors)
    x = image.astype(np.float32) @ matrix.T.astype(np.float32) + np.float32(offset)
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


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


def unpadded(labels: np.ndarray, real: bool, ignore_index: int) -> np.ndarray:
    """padding: a sample's labels, or, for a padding sample (not ``real``), the ignore index everywhere."""
    return labels if real else np.full_like(labels, ignore_index)


def weight_table(num_classes: int, class_weights=None) -> np.ndarray:
    """Row ``k`` is the weight of a pixel of class ``k``: ``class_weights[k]``, or 1 without them; row
    ``num_classes``, that of every other value (the ignore index), is 0, so that neither a weighted
    loss nor ``weighted_metrics`` count ignored pixels."""
    per_class = np.ones(num_classes) if class_weights is None else np.asarray(class_weights, np.float64)
    return np.append(per_class, 0.0).astype(np.float32)


def weights(labels: np.ndarray, real: bool, num_classes: int) -> np.ndarray:
    """Per-pixel float32 weights of one sample: 1 on its labelled pixels, 0 on ignored ones and on padding."""
    return weight_table(num_classes)[np.minimum(labels, num_classes)] * np.float32(real)
