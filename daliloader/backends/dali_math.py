"""The draws' arithmetic (:mod:`daliloader.draws`) on DALI nodes: the window of the DALI graph
(:mod:`.dali_graph`) and the declared stages' parameters (:mod:`.dali_augment`) are computed with it."""

from __future__ import annotations

from types import SimpleNamespace

from nvidia.dali import fn, types
from nvidia.dali import math as dmath

#: The Math namespace of :mod:`daliloader.draws`, on DALI nodes.
DALI_MATH = SimpleNamespace(floor=dmath.floor, ceil=dmath.ceil, abs=dmath.abs, maximum=dmath.max, minimum=dmath.min,
                            sqrt=dmath.sqrt, exp=dmath.exp, sum=fn.reductions.sum, stack=lambda xs: fn.stack(*xs),
                            to_int=lambda x: fn.cast(x, dtype=types.INT32),
                            to_float=lambda x: fn.cast(x, dtype=types.FLOAT))
