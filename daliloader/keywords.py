"""The keyword options that make_plan and the loaders take through ``**options``, as TypedDicts that type
checkers and IDEs read (``**options: Unpack[...]``); at run time the functions show the same keywords in
their signatures (``help()``, ``inspect.signature``).

Generated from those signatures, which the declarations make (the prologue's options,
:data:`daliloader.spec.PROLOGUE`, and the declared stages', :mod:`daliloader.augment`): do not edit. After
changing an option: ``python tests/test_keywords.py > daliloader/keywords.py`` (the test fails until then).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

from .draws import Range
from .spec import DType


class MakePlanOptions(TypedDict, total=False):
    """The keywords of ``make_plan``'s ``**options``."""

    scale: Range | None
    flip: float | None
    rotate: Range | None
    brightness: Range | None
    contrast: Range | None
    saturation: Range | None
    hue: Range | None
    cat_max_ratio: float | None
    vflip: float | None
    blur: float | tuple[float, float] | None
    gamma: float | tuple[float, float] | None
    erase: float | None
    erase_scale: tuple[float, float] | None
    erase_ratio: tuple[float, float] | None
    erase_value: int | None
    erase_mask: Literal['keep', 'ignore'] | None


class TfDatasetOptions(MakePlanOptions, total=False):
    """The keywords of ``tf_dataset``'s ``**options`` beyond MakePlanOptions's."""

    training: bool
    mean: Sequence[float] | float | None
    std: Sequence[float] | float | None
    dtype: DType
    drop_remainder: bool | None
    shard_id: int
    num_shards: int
    num_threads: int | None
    prefetch: int
    device_id: int


class KerasSequenceOptions(MakePlanOptions, total=False):
    """The keywords of ``keras_sequence``'s ``**options`` beyond MakePlanOptions's."""

    training: bool
    mean: Sequence[float] | float | None
    std: Sequence[float] | float | None
    dtype: DType
    drop_remainder: bool | None
    shard_id: int
    num_shards: int


DaliPipelineOptions = TfDatasetOptions  # ``dali_pipeline`` takes the same keywords


class DistributeOptions(MakePlanOptions, total=False):
    """The keywords of ``distribute``'s ``**options`` beyond MakePlanOptions's."""

    training: bool
    mean: Sequence[float] | float | None
    std: Sequence[float] | float | None
    dtype: DType
    drop_remainder: bool | None
    num_threads: int | None
    prefetch: int
