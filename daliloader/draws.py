"""Random options: a range or a probability checked once, and a value drawn from it.

Every random option of the spec (:mod:`daliloader.spec`) and of the declared stages
(:mod:`daliloader.augment`) is checked here (:func:`check_range`, :func:`check_probability`,
:func:`check_choice`), so that one kind of option reads the same refusal everywhere, and drawn here
(:func:`draw`, :func:`uniform_offset`) with the math of a framework: the arithmetic is written once, with
Python operators and the few functions of a ``Math`` namespace (floor, ceil, abs, maximum, minimum, sqrt,
exp, sum, stack, casts). Numpy's is the reference (:data:`NUMPY`); the tf.data backend passes TensorFlow's
and the DALI graph DALI's, so that all three compute a sample's parameters with this very code, on their
own tensors. The operators apply elementwise, so a formula written for one number computes a ``[y, x]``
pair as well, in one operation per step (:func:`daliloader.stages.window_pairs`).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np

from .errors import OptionError

#: A random option's range as a user gives it: one number (its meaning per option: :func:`check_range`'s
#: ``symmetric``) or a ``(min, max)`` pair.
Range = float | tuple[float, float]

#: The functions the draws' arithmetic needs beyond operators; numpy's is the reference. Floats are
#: float32, as in TensorFlow and DALI, so that the same draws give the same parameters everywhere.
NUMPY = SimpleNamespace(floor=np.floor, ceil=np.ceil, abs=np.abs, maximum=np.maximum, minimum=np.minimum, sqrt=np.sqrt,
                        exp=np.exp, sum=np.sum, stack=np.stack, to_int=lambda x: np.asarray(x).astype(np.int64),
                        to_float=lambda x: np.asarray(x, np.float32))


def draw(bounds: tuple[float, float], u):
    """``lo + u (hi - lo)``: a value drawn uniformly from the range ``bounds`` with the draw ``u``."""
    lo, hi = bounds
    return lo + u * (hi - lo)


def uniform_offset(slack, u, m=NUMPY):
    """An offset drawn uniformly from the ``|slack| + 1`` integers in ``[0, slack]`` (``[slack, 0]`` when
    the window overhangs the image by ``-slack`` pixels)."""
    reach = m.abs(slack)
    steps = m.minimum(m.to_int(m.floor(u * m.to_float(reach + 1))), reach)
    return steps * (m.to_int(slack >= 0) * 2 - 1)


def window_side(side: int, zoom, m=NUMPY):
    """A random crop's window side for an output ``side`` (an int) at ``zoom`` (a float32 of the
    framework's, as :func:`draw` gives it): ``floor(side / zoom + 0.5)``, an int of the framework's."""
    return m.to_int(m.floor(side / zoom + 0.5))


#: mmsegmentation's category-ratio crop (``cat_max_ratio``) draws the window again up to this many times
#: (its ``RandomCrop``'s 10).
REDRAWS = 10


def check_choice(name: str, value, choices: Sequence[str]) -> None:
    """Refuse a value that is not one of ``choices``, listing them."""
    if value not in choices:
        listed = " or ".join(map(repr, choices)) if len(choices) == 2 else "one of " + ", ".join(map(repr, choices))
        raise OptionError(name, f"{name}={value!r} is not supported; use {listed}")


def is_integer(value) -> bool:
    """Whether ``value`` is an integer (Python's or numpy's), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_probability(name: str, value) -> float:
    """A probability in [0, 1], as a float."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise OptionError(name, f"{name} is a probability in [0, 1], got {value!r}")
    return float(value)


def check_range(name: str, value, symmetric: str | None, low: float, high: float, what: str,
                open_low: bool = False) -> tuple[float, float]:
    """A ``(min, max)`` range from a pair, or from one number: ``symmetric="factor"``: ``(max(0, 1 - v),
    1 + v)``; ``"angle"``: ``(-v, v)``; None: ``(v, v)``. ``low``/``high`` bound it (``open_low``: min
    must exceed ``low``); ``what`` names its units in the refusal, which says a number given as the number
    and the range it stands for (``gamma=20 (the range (0, 21)) must satisfy ...``)."""
    given = ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
        if symmetric is not None and v < 0:
            raise OptionError(name, f"{name}={value!r} must be >= 0 (or a (min, max) pair of {what})")
        value = {"factor": (max(0.0, 1.0 - v), 1.0 + v), "angle": (-v, v), None: (v, v)}[symmetric]
        given = f"{v:g} (the range "
    try:
        if isinstance(value, (str, bytes)):  # (a string of two digits would read as a pair)
            raise TypeError
        lo, hi = (float(x) for x in value)
    except (TypeError, ValueError):
        raise OptionError(name, f"{name} must be a number or a (min, max) pair of {what}, got {value!r}") from None
    if not (low < lo if open_low else low <= lo) or not lo <= hi <= high:
        raise OptionError(name, f"{name}={given}({lo:g}, {hi:g}){')' if given else ''} must satisfy {low:g} "
                                f"{'<' if open_low else '<='} min <= max <= {high:g} ({what})")
    return lo, hi
