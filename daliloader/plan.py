"""The plan: a loader call's arguments turned, once, into what every backend builds from.

:func:`make_plan` validates every argument (naming the argument and the fix) and returns a frozen
:class:`Plan`: the data, the preprocessing spec, the sampler that orders the stream, what each batch
holds, and where it runs. The public loaders (``tf_dataset``, ``keras_sequence``, ``dali_pipeline``,
``distribute``) call it with their keywords, or take a plan made beforehand, which the bench does:
one plan, every backend built from it, so that all are measured on the same settings.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import augment, maskcache
from .backends import dali_gpu_count
from .data import SegmentationData
from .errors import DataError, OptionError, SpecError, ValueEnum
from .sampler import Sampler
from .spec import FOREIGN_NAMES as OPTION_FOREIGN_NAMES
from .spec import (
    OPTIONS,
    PROLOGUE,
    Crop,
    DType,
    ImageSize,
    LabelMode,
    Preprocess,
    check_count,
    check_flag,
    make_spec,
    prologue_parameters,
    random_crop_options,
)

if TYPE_CHECKING:  # (typing.Unpack is Python 3.11's: annotations only, never evaluated at run time)
    from typing import Unpack

    from .keywords import MakePlanOptions

class Output(ValueEnum):
    """What a batch can hold, in this order: images, labels, per-pixel weights (0 on the padding that fills
    the last evaluation batch), sample indices (-1: padding; asked for by ``dali_pipeline`` and ``predict``).
    ``dali_pipeline(outputs=...)`` takes them or their values."""

    IMAGE = "image"
    LABELS = "labels"
    WEIGHT = "weight"
    INDEX = "index"


#: The outputs' names, as ``dali_pipeline(outputs=...)`` takes them.
OUTPUTS = tuple(o.value for o in Output)


@dataclass(frozen=True, eq=False)  # compared by identity: a plan holds arrays and a sampler
class Plan:
    """Everything a backend needs to build a loader. Make one with :func:`make_plan`."""

    data: SegmentationData
    spec: Preprocess
    sampler: Sampler
    outputs: tuple[Output, ...]
    device_id: int = 0  # dali-gpu: the CUDA device, as DALI and CUDA number GPUs
    num_threads: int | None = None  # DALI's CPU threads (default: every core)
    prefetch: int = 2  # DALI's prefetch queue depth, in batches
    placement: str | None = None  # the TensorFlow device to place the dataset on (distribute: a replica's)
    host_outputs: bool = False  # dali-gpu hands its batches over on the host (per-worker input pipelines)

    @property
    def batch_size(self) -> int:
        return self.sampler.batch_size

    @property
    def steps(self) -> int:
        """Batches per epoch."""
        return self.sampler.steps


def make_plan(data: SegmentationData, batch_size: int = 8, image_size: ImageSize | None = None,
              crop: Crop | None = None, label_mode: LabelMode = "onehot", shuffle: bool | None = None,
              seed: int | None = None, *, training: bool = True,
              mean: Sequence[float] | float | None = None, std: Sequence[float] | float | None = None,
              dtype: DType = "float32", drop_remainder: bool | None = None, shard_id: int = 0, num_shards: int = 1,
              num_threads: int | None = None, prefetch: int = 2, device_id: int = 0,
              outputs: Sequence[Output | str] | None = None, caller: str = "make_plan",
              **options: Unpack[MakePlanOptions]) -> Plan:
    """Validate a loader's arguments and plan the loader.

    ``training`` (True) or evaluation (False) sets the defaults (docs/training.md, "Evaluation mode"):

    ==================  =========================  ===========================================
    argument            training=True              training=False (evaluate, predict)
    ==================  =========================  ===========================================
    ``crop``            ``"random"``               ``"fit"``; ``"center"`` without image_size
    ``shuffle``         True                       False: the dataset's order
    ``drop_remainder``  True: full batches only    False: every sample once, the last batch
                                                   padded with weight-0 samples
    random options      as given                   refused (scale, flip, rotate, colour, the
                                                   declared stages)
    ==================  =========================  ===========================================

    Batches are ``(image, labels)``, and ``(image, labels, weights)`` when not dropping the remainder:
    per-pixel weights, 0 on padding samples and ignored pixels. Class weights belong to the loss, not the
    batches (:mod:`daliloader.losses`).

    Args:
        data: the pairs (:class:`~daliloader.data.SegmentationData`).
        batch_size: samples per batch (per worker or replica).
        image_size: ``(height, width)`` of the outputs, or one int; None: the images' own size, which they
            must all share (else a DataError names the sizes found).
        crop: ``"random"``, ``"center"``, ``"resize"`` or ``"fit"`` (None: see the table).
        label_mode: ``"onehot"`` (``"categorical"``, Keras' name, reads the same) or ``"int"``.
        shuffle: reshuffle every epoch (None: see the table).
        seed: fixes the order and the draws.
        training: training (True) or evaluation (False) defaults, as the table says.
        mean: as :func:`daliloader.spec.make_spec`'s, which says what each preprocessing option takes.
        std: as ``make_spec``'s.
        dtype: as ``make_spec``'s.
        drop_remainder: full batches only (None: see the table).
        shard_id: this worker's part of the data, of ``num_shards``.
        num_shards: the parts the data is split into, one per worker.
        num_threads: DALI's CPU threads (None: every core).
        prefetch: DALI's prefetch queue depth, in batches.
        device_id: the CUDA device of dali-gpu, as DALI numbers GPUs.
        outputs: what a batch holds, any of :data:`OUTPUTS` (None: as above).
        caller: the public function that error messages name.
        **options: the prologue's options (:data:`daliloader.spec.PROLOGUE`: ``scale``, ``flip``,
            ``rotate``, the colour, ``cat_max_ratio``; as ``make_spec``'s, None: as it says) and the declared
            stages' options (:mod:`daliloader.augment`: ``vflip``, ``blur``, ``gamma``, ``erase``...; None:
            off), which the signature lists, and nothing else: a keyword that is not an option is named, with
            the closest one.

    Returns:
        The frozen :class:`Plan`.

    Raises:
        daliloader.errors.SpecError: an argument that is not valid, named with what it takes.
        daliloader.errors.DataError: ``data`` that is not a SegmentationData, or images of several sizes
            without an ``image_size``.
    """
    if not isinstance(data, SegmentationData):
        raise DataError(f"data must be a SegmentationData (see SegmentationData.from_dirs), got {type(data).__name__}")
    declared, prologue = take_options(options, augment.OPTIONS), take_options(options, PROLOGUE)
    refuse_keywords(caller, options)
    training = check_flag("training", training)
    shuffle, drop_remainder = (check_flag(name, value, unset="as training") for name, value in (
        ("shuffle", shuffle), ("drop_remainder", drop_remainder)))
    if not training:  # before make_spec, whose crop check would name a crop the user never passed
        refuse_random_crop_options(caller, prologue)
    if crop is None:
        crop = "random" if training else ("fit" if image_size is not None else "center")
    spec = make_spec(data.image_size() if image_size is None else image_size, crop=crop, label_mode=label_mode,
                     mean=mean, std=std, dtype=dtype, augment=declared, **prologue)
    if not training:
        refuse_draws(caller, spec)
    batch_size, seed, num_threads, prefetch, device_id, shard_id, num_shards = (
        check_count(name, value) for name, value in (
            ("batch_size", batch_size), ("seed", seed), ("num_threads", num_threads), ("prefetch", prefetch),
            ("device_id", device_id), ("shard_id", shard_id), ("num_shards", num_shards)))
    shuffle = training if shuffle is None else shuffle
    drop_remainder = training if drop_remainder is None else drop_remainder
    outputs = batch_outputs(outputs, drop_remainder)
    sampler = Sampler(len(data), batch_size, shuffle=shuffle, seed=seed, drop_remainder=drop_remainder,
                      shard_id=shard_id, num_shards=num_shards)
    refuse_unseeded_shards(caller, num_shards, shuffle, seed)
    return Plan(loaded_data(data, spec), spec, sampler, outputs, device_id=device_id, num_threads=num_threads,
                prefetch=prefetch)


def refuse_unseeded_shards(caller: str, num_shards: int, shuffle: bool, seed: int | None) -> None:
    """Shards of a shuffled dataset need one seed: each worker draws its own otherwise, and the parts of
    its order that the workers read overlap and miss samples (on the backends that shuffle before they
    shard; refused on every backend alike)."""
    if num_shards > 1 and shuffle and seed is None:
        raise SpecError(f"{caller}() got num_shards={num_shards} and no seed: each worker would draw its own "
                        "order of the samples, and where the whole dataset is shuffled before it is sharded (files, "
                        "TFRecords on the DALI backends and OpenCV) the shards would overlap and miss samples. "
                        "Pass every worker the same seed (seed=0, or a number they share)")


def take_options(options: dict, declared: Mapping[str, object]) -> dict:
    """The options of ``declared`` (:data:`daliloader.augment.OPTIONS`, :data:`daliloader.spec.PROLOGUE`),
    taken out of a call's other ``options``."""
    return {name: options.pop(name) for name in list(options) if name in declared}


def refuse_keywords(caller: str, options: dict) -> None:
    """Refuse the keywords a loader does not take, saying what to do: class weights belong to the loss,
    Keras' split options to SegmentationData.split, and a misspelt option is named with the closest one."""
    if not options:
        return
    moved = sorted({"class_weights", "class_weight"} & set(options))
    if moved:
        raise SpecError(f"{caller}() got {moved[0]}=: class weights belong to the loss, so that metrics stay exact "
                        "(Keras gives a batch's weights to the loss and to weighted_metrics alike). Pass them to "
                        "dl.losses.SparseCategoricalCrossentropy(class_weights=...) (int labels) or "
                        "dl.losses.CategoricalCrossentropy(class_weights=...) (one-hot)")
    unknown = sorted(options)
    split = [name for name in unknown if name in ("validation_split", "subset")]
    if split:
        raise SpecError(f"{caller}() got {split[0]}=: keras.utils.image_dataset_from_directory splits a folder by "
                        "these, but a loader reads the pairs it is given. Split them first: train, val = "
                        "data.split(0.2, seed=0) (SegmentationData.split: disjoint, the same for the same seed), then "
                        "one loader for each (val with training=False)")
    raise SpecError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}{_did_you_mean(unknown[0])}"
                    + f". Arguments: {', '.join(ARGUMENTS)}; preprocessing options: {', '.join(OPTIONS)}; "
                      f"loader options: {', '.join(LOADER_OPTIONS)}")


def loaded_data(data: SegmentationData, spec: Preprocess) -> SegmentationData:
    """The pairs as the loaders read them: colour masks' class indices from the mask cache; with
    ``cat_max_ratio``, the masks as PNG (the window is chosen from the whole mask's classes, on the CPU),
    never their GPU form."""
    if maskcache.wanted(data):  # (no GPU form for pairs fed as bytes: objects come with their PNG masks)
        gpu = maskcache.with_gpu_form(data, dali_gpu_count() > 0, spec.chooses_window)
        data = maskcache.MaskCache.made_for(data, gpu=gpu).view()
    return data.without_gpu_form() if spec.chooses_window else data


def refuse_random_crop_options(caller: str, given: dict) -> None:
    """Evaluation has no random crop: refuse, by name, the options ``given`` that act on random crops alone."""
    named = random_crop_options(given)
    if named:
        raise SpecError(f"{caller}(training=False) draws nothing at random, but got {', '.join(named)}: leave "
                        f"{'it' if len(named) == 1 else 'them'} out for evaluation, or pass training=True")


def refuse_draws(caller: str, spec: Preprocess) -> None:
    """Evaluation draws nothing at random: refuse a spec that would."""
    if spec.draws_at_random:
        drawn = (["crop='random'"] if spec.crop == "random" else []) + spec.drawn()
        raise SpecError(f"{caller}(training=False) draws nothing at random, but got {', '.join(drawn)}: leave "
                        "them out for evaluation, or pass training=True")


def batch_outputs(outputs, drop_remainder: bool) -> tuple[Output, ...]:
    """What a batch holds: ``outputs`` (checked), or (image, labels) and, without drop_remainder, the
    weights of evaluation (padding, ignored pixels)."""
    if outputs is None:
        return (Output.IMAGE, Output.LABELS) + (() if drop_remainder else (Output.WEIGHT,))
    if isinstance(outputs, (set, frozenset, dict)):  # (their order is no order: Keras reads the batch by position)
        raise OptionError("outputs", f"outputs={outputs!r}: give them in order, as a list or tuple of "
                                     f"{', '.join(OUTPUTS)}")
    try:
        outputs = (outputs,) if isinstance(outputs, str) else tuple(outputs)
    except TypeError:  # (not iterable: refused below as given)
        outputs = (outputs,)
    if not outputs or not all(isinstance(o, str) and o in OUTPUTS for o in outputs):
        raise OptionError("outputs", f"outputs={outputs!r}: choose from {', '.join(OUTPUTS)}")
    return tuple(map(Output, outputs))


def with_keywords(fn, keywords, after: str | None = None) -> inspect.Signature:
    """``fn``'s signature without its ``**options``, the parameters ``keywords`` inserted after the parameter
    ``after`` (None: last), so that ``help()``, ``inspect.signature`` and completion list them: make_plan's
    gets the prologue's options (:data:`daliloader.spec.PROLOGUE`) and the declared stages'
    (:mod:`daliloader.augment`), each loader make_plan's keywords (:func:`daliloader.loaders.shows_options`)."""
    own = inspect.signature(fn)
    params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    at = len(params) if after is None else [p.name for p in params].index(after) + 1
    return own.replace(parameters=params[:at] + list(keywords) + params[at:])


# the declared stages' options last, the prologue's after training, where they were written out before
make_plan.__signature__ = with_keywords(make_plan, augment.signature_parameters())
make_plan.__signature__ = with_keywords(make_plan, prologue_parameters(), after="training")
_SIGNATURE = inspect.signature(make_plan)
#: The keyword options of make_plan that are not preprocessing (for error messages).
LOADER_OPTIONS = tuple(n for n, p in _SIGNATURE.parameters.items()
                       if p.kind is p.KEYWORD_ONLY and n not in ("caller", "outputs") and n not in OPTIONS)
#: The arguments every loader names, after ``data``.
ARGUMENTS = tuple(n for n, p in _SIGNATURE.parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD and n != "data")
#: What other libraries call some arguments, for "did you mean" (the meaning may differ: the message points
#: at the argument, whose docs give its units): the preprocessing options' (declared with them,
#: :data:`daliloader.spec.FOREIGN_NAMES`), the loaders' own (mmsegmentation's ``crop_size``) and the data's
#: (:data:`NOT_LOADER_ARGUMENTS`).
FOREIGN_NAMES = {"size": "image_size", "crop_size": "image_size", "is_training": "training", "train": "training",
                 "num_classes": "classes", "n_classes": "classes", **OPTION_FOREIGN_NAMES}
#: Foreign names whose values mean something else here: what to write instead.
FOREIGN_VALUES = {"zoom_range": "Keras' zoom_range=z draws a zoom in [1 - z, 1 + z], below 1 showing less of the "
                                "picture; here a scale below 1 shows more: pass scale=(1 / (1 + z), 1 / (1 - z)), "
                                "e.g. (0.83, 1.25) for z=0.2 (a single number is a fixed zoom)"}
#: Names "did you mean" may point at that are no loader's arguments: where they are given instead.
NOT_LOADER_ARGUMENTS = {"classes": "The class map belongs to the data: SegmentationData.from_folder(..., classes=N) "
                                   "or from_dirs(..., classes=N)"}


def _did_you_mean(unknown: str) -> str:
    """The hint that follows an unknown keyword: the name it stands for in daliloader (:data:`FOREIGN_NAMES`),
    else the closest argument or option, if any; with where it is given, where no loader takes it."""
    close = ([FOREIGN_NAMES[unknown]] if unknown in FOREIGN_NAMES else
             difflib.get_close_matches(unknown, list(_SIGNATURE.parameters) + list(OPTIONS), n=1))
    if not close:
        return ""
    where = NOT_LOADER_ARGUMENTS.get(close[0]) or FOREIGN_VALUES.get(unknown)
    return f" (did you mean {close[0]!r}?{' ' + where if where else ''})"


class _Unpassed:
    """A loader's default for a named argument that is not None, told apart by its type from the same value
    passed (a Plan fixes every argument: one passed beside it is refused, also where it equals the default)."""


class _UnpassedInt(int, _Unpassed):
    pass


class _UnpassedStr(str, _Unpassed):
    pass


#: The loaders' default ``batch_size``: make_plan's, shown as it is by ``help()``.
BATCH_SIZE = _UnpassedInt(_SIGNATURE.parameters["batch_size"].default)
#: The loaders' default ``label_mode``: make_plan's, shown as it is by ``help()``.
LABEL_MODE = _UnpassedStr(_SIGNATURE.parameters["label_mode"].default)


def plan_of(data, caller: str, **arguments) -> Plan:
    """``data`` if it is a Plan already, else the plan of ``data`` and ``arguments``. With a Plan, every
    argument passed is refused (the plan fixes them all), which the loaders' defaults :data:`BATCH_SIZE` and
    :data:`LABEL_MODE` tell from the same values passed; None is never passed. Only ``dali_pipeline`` chooses
    its outputs."""
    if caller != "dali_pipeline" and "outputs" in arguments:
        raise SpecError(f"{caller}() got an unexpected keyword argument 'outputs': only dali_pipeline chooses its "
                        "outputs (a loader's batches are (image, labels), and weights with drop_remainder=False)")
    passed = {n: v for n, v in arguments.items() if not isinstance(v, _Unpassed)}
    if not isinstance(data, Plan):
        return make_plan(data, caller=caller, **passed)  # (make_plan's own defaults are those values)
    given = [n for n, v in passed.items() if v is not None]
    if given:
        raise SpecError(f"{caller}(plan, {', '.join(given)}=...): the plan fixes these already; pass them to make_plan "
                        "and leave them out here")
    return data
