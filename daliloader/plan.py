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
from dataclasses import dataclass

from .data import SegmentationData
from .errors import DataError, SpecError
from .sampler import Sampler
from .spec import OPTIONS, Preprocess, check_batch_size, class_keys, make_spec

#: What a batch can hold, in this order: images, labels, per-pixel weights (0 on the padding that fills
#: the last evaluation batch), sample indices (-1: padding; DALI pipelines run alone only).
OUTPUTS = ("image", "labels", "weight", "index")


@dataclass(frozen=True, eq=False)  # compared by identity: a plan holds arrays and a sampler
class Plan:
    """Everything a backend needs to build a loader. Make one with :func:`make_plan`."""

    data: SegmentationData
    spec: Preprocess
    sampler: Sampler
    outputs: tuple[str, ...]
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


def make_plan(data: SegmentationData, batch_size: int = 8, image_size=(512, 512), crop: str = "random",
              label_mode: str = "onehot", shuffle: bool = True, seed: int | None = None, *,
              drop_remainder: bool = True, shard_id: int = 0, num_shards: int = 1, num_threads: int | None = None,
              prefetch: int = 2, device_id: int = 0, outputs=None, caller: str = "make_plan", **options) -> Plan:
    """Validate a loader's arguments and plan the loader.

    ``options`` are the preprocessing options of :func:`daliloader.spec.make_spec` (``scale``, ``flip``,
    ``rotate``, ``brightness``, ``contrast``, ``saturation``, ``hue``, ``mean``, ``std``, ``dtype``,
    ``class_weights``). ``drop_remainder=True`` (training) gives full batches of ``(image, labels)``;
    ``False`` (evaluation) fills the last batch with weight-0 padding and adds per-pixel weights, as
    ``class_weights`` do in training too. ``shard_id``/``num_shards`` choose a worker's part of the data. ``outputs``
    overrides what a batch holds (for ``dali_pipeline``; any of :data:`OUTPUTS`). ``num_threads``,
    ``prefetch`` and ``device_id`` are the DALI backends'. ``caller`` names the public function in
    error messages.
    """
    if not isinstance(data, SegmentationData):
        raise DataError(f"data must be a SegmentationData (see SegmentationData.from_dirs), got {type(data).__name__}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        close = ([FOREIGN_NAMES[unknown[0]]] if unknown[0] in FOREIGN_NAMES else
                 difflib.get_close_matches(unknown[0], list(_SIGNATURE.parameters) + list(OPTIONS), n=1))
        raise SpecError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}"
                        + (f" (did you mean {close[0]!r}?)" if close else "")
                        + f". Arguments: {', '.join(ARGUMENTS)}; preprocessing options: {', '.join(OPTIONS)}; "
                          f"loader options: {', '.join(LOADER_OPTIONS)}")
    if isinstance(options.get("class_weights"), dict):
        options["class_weights"] = _weights_of_classes(options["class_weights"], data.classes)
    spec = make_spec(image_size, crop=crop, label_mode=label_mode, **options)
    classes = data.classes.num_classes
    if spec.class_weights is not None and len(spec.class_weights) != classes:
        raise SpecError(f"class_weights has {len(spec.class_weights)} weights for the {classes} classes of "
                        f"{data.classes.source or 'the class map'}: give one per class")
    batch_size = check_batch_size(batch_size)
    for name, value, least in (("seed", seed, 0), ("num_threads", num_threads, 1), ("prefetch", prefetch, 1),
                               ("device_id", device_id, 0)):
        if value is None and name in ("seed", "num_threads"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SpecError(f"{name} must be an integer >= {least}{' or None' if name in ('seed', 'num_threads') else ''}, "
                            f"got {value!r}")
    if outputs is None:  # weights for evaluation (padding) and for class weights
        weighted = not drop_remainder or spec.class_weights is not None
        outputs = ("image", "labels", "weight") if weighted else ("image", "labels")
    outputs = tuple(outputs)
    if not outputs or set(outputs) - set(OUTPUTS):
        raise SpecError(f"outputs={outputs!r}: choose from {', '.join(OUTPUTS)}")
    sampler = Sampler(len(data), batch_size, shuffle=shuffle, seed=seed, drop_remainder=drop_remainder,
                      shard_id=shard_id, num_shards=num_shards)
    return Plan(data, spec, sampler, outputs, device_id=device_id, num_threads=num_threads, prefetch=prefetch)


def _weights_of_classes(weights: dict, classes) -> list:
    """A ``{class: weight}`` dict as one weight per class, as Keras' ``class_weight``: classes it does not
    name weigh 1. The ignore index may be named with weight 0 (it always weighs 0)."""
    keys = dict(zip(class_keys(weights), weights.values()))
    if classes.ignore_index in keys:
        if keys.pop(classes.ignore_index) != 0:
            raise SpecError(f"class_weights names the ignore index {classes.ignore_index} with a weight: ignored pixels "
                            "always weigh 0; leave it out")
    strays = sorted(k for k in keys if not 0 <= k < classes.num_classes)
    if strays:
        raise SpecError(f"class_weights names {strays[:5]}, not classes of {classes.source or 'the class map'} "
                        f"(0..{classes.num_classes - 1})")
    return [keys.get(k, 1.0) for k in range(classes.num_classes)]


_SIGNATURE = inspect.signature(make_plan)
#: The keyword options of make_plan that are not preprocessing (for error messages).
LOADER_OPTIONS = tuple(n for n, p in _SIGNATURE.parameters.items()
                       if p.kind is p.KEYWORD_ONLY and n not in ("caller", "outputs"))
#: The arguments every loader names, after ``data``.
ARGUMENTS = tuple(n for n, p in _SIGNATURE.parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD and n != "data")
#: What torchvision and albumentations call some options, for "did you mean" (the meaning may differ:
#: the message points at the option, whose docs give its units).
FOREIGN_NAMES = {"degrees": "rotate", "limit": "rotate", "angle": "rotate", "hue_shift_limit": "hue",
                 "size": "image_size", "hflip": "flip", "horizontal_flip": "flip", "class_weight": "class_weights"}


def plan_of(data, caller: str, **arguments) -> Plan:
    """``data`` if it is a Plan already (then ``arguments`` must be make_plan's defaults: the plan fixes
    them), else the plan of ``data`` and ``arguments``. Only ``dali_pipeline`` chooses its outputs."""
    if caller != "dali_pipeline" and "outputs" in arguments:
        raise SpecError(f"{caller}() got an unexpected keyword argument 'outputs': only dali_pipeline chooses its "
                        "outputs (a loader's batches are (image, labels), and weights with drop_remainder=False)")
    if not isinstance(data, Plan):
        return make_plan(data, caller=caller, **arguments)
    defaults = {n: p.default for n, p in _SIGNATURE.parameters.items()}
    given = [n for n, v in arguments.items() if n not in defaults or v != defaults[n]]
    if given:
        raise SpecError(f"{caller}(plan, {', '.join(given)}=...): the plan fixes these already; pass them to make_plan")
    return data
