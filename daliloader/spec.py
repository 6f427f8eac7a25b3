"""The preprocessing spec: what every backend does, declared once and validated in one place.

The spec says *what* (crop mode, zoom range, flip rate, normalisation, label encoding, dtype); each
per-sample stage's formula is defined once, in numpy, in :mod:`daliloader.stages`, the reference that
every backend implements and is tested against. Stages, in order, with the same names in every backend:
read, decode, labels, window (crop, zoom, flip), pad, resize, flip, normalize, encode, weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .errors import SpecError

CROPS = ("random", "center")
LABEL_MODES = ("onehot", "int")
DTYPES = ("float32", "float16", "bfloat16")
#: The preprocessing options a loader takes as keywords beside image_size, crop and label_mode.
OPTIONS = ("scale", "flip", "mean", "std", "dtype")


@dataclass(frozen=True)
class Preprocess:
    """What to do to each (image, mask) pair. Build it with :func:`make_spec`, which validates."""

    image_size: tuple[int, int]
    crop: str = "random"
    scale: tuple[float, float] = (1.0, 1.0)
    flip: float = 0.5
    label_mode: str = "onehot"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    dtype: str = "float32"

    @property
    def resizes(self) -> bool:
        """Whether the crop window is resized (only random crops with scale jitter are)."""
        return self.crop == "random" and self.scale != (1.0, 1.0)


def make_spec(
    image_size,
    crop: str = "random",
    scale=None,
    flip: float | None = None,
    label_mode: str = "onehot",
    mean: Sequence[float] | float | None = None,
    std: Sequence[float] | float | None = None,
    dtype: str = "float32",
) -> Preprocess:
    """Validate user arguments and build the :class:`Preprocess` spec.

    ``flip`` defaults to 0.5 for random crops and 0 for centre crops; ``scale`` to (1, 1), i.e. no
    zoom. ``mean``/``std`` are in [0, 1] units, one value or one per RGB channel.
    """
    size = _image_size(image_size)
    if crop not in CROPS:
        raise SpecError(f"crop={crop!r} is not supported; use one of {', '.join(map(repr, CROPS))}")
    if label_mode not in LABEL_MODES:
        raise SpecError(f"label_mode={label_mode!r} is not supported; use {' or '.join(map(repr, LABEL_MODES))}")
    if dtype not in DTYPES:
        raise SpecError(f"dtype={dtype!r} is not supported; use one of {', '.join(map(repr, DTYPES))}")

    if scale is None:
        scale = (1.0, 1.0)
    elif isinstance(scale, (int, float)):
        scale = (float(scale), float(scale))
    try:
        lo, hi = (float(s) for s in scale)
    except (TypeError, ValueError):
        raise SpecError(f"scale must be a (min, max) pair of zoom factors, got {scale!r}") from None
    if not 0 < lo <= hi <= 10:
        raise SpecError(f"scale=({lo}, {hi}) must satisfy 0 < min <= max <= 10")
    if crop == "center" and (lo, hi) != (1.0, 1.0):
        raise SpecError("scale jitter needs crop='random'; crop='center' never resizes")

    if flip is None:
        flip = 0.5 if crop == "random" else 0.0
    if not isinstance(flip, (int, float)) or isinstance(flip, bool) or not 0.0 <= flip <= 1.0:
        raise SpecError(f"flip is a probability in [0, 1], got {flip!r}")

    return Preprocess(
        image_size=size, crop=crop, scale=(lo, hi), flip=float(flip), label_mode=label_mode,
        mean=_triple("mean", 0.0 if mean is None else mean),
        std=_triple("std", 1.0 if std is None else std, positive=True),
        dtype=dtype,
    )


def check_batch_size(batch_size, name: str = "batch_size") -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise SpecError(f"{name} must be a positive integer, got {batch_size!r}")
    return batch_size


def _image_size(image_size) -> tuple[int, int]:
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        image_size = (image_size, image_size)
    try:
        h, w = image_size
    except (TypeError, ValueError):
        raise SpecError(f"image_size is (height, width), got {image_size!r}") from None
    for v in (h, w):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 16384:
            raise SpecError(f"image_size=({h}, {w}): each side must be an integer in 1..16384")
    return int(h), int(w)


def _triple(name: str, value, positive: bool = False) -> tuple[float, float, float]:
    vals = [value] * 3 if isinstance(value, (int, float)) else list(value)
    if len(vals) != 3:
        raise SpecError(f"{name} must be one number or three (R, G, B), got {value!r}")
    vals = [float(v) for v in vals]
    if positive and min(vals) <= 0:
        raise SpecError(f"{name} must be positive, got {value!r}")
    return tuple(vals)
