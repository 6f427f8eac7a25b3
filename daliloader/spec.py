"""The preprocessing spec: what every backend does, declared once and validated in one place.

The spec says *what* (crop mode, zoom range, rotation, flip rate, photometric jitter, normalisation,
label encoding, dtype); each per-sample stage's formula is defined once, in numpy, in
:mod:`daliloader.stages`, the reference that every backend implements and is tested against, and which
lists the stages in order, by the names every backend uses.

Option names and ranges follow torchvision: ``brightness``/``contrast``/``saturation`` as
``ColorJitter`` (a number ``v`` draws a factor from ``U(max(0, 1 - v), 1 + v)``, a pair is the range),
``rotate`` as ``RandomRotation``'s ``degrees``; ``hue`` is in degrees (``v``: a shift from ``U(-v, v)``),
as DALI's ``hue``: not torchvision's fraction of a turn, nor albumentations' ``hue_shift_limit``, which
on uint8 images counts OpenCV's two-degree hue steps.

The prologue's options (``scale``, ``flip``, ``rotate``, the colour and ``cat_max_ratio``: the options of the
window and of what each backend fuses with it) are declared once, here, in :data:`PROLOGUE`, as the stages
after the window are in :mod:`daliloader.augment`: each one's check (the crop given too, on which some
depend), a line of documentation, its annotation, ``preview``'s flag and its foreign names. From them come
:data:`OPTIONS`, :func:`make_spec`'s checks, the loaders' keywords (:func:`prologue_parameters`, which
:func:`daliloader.plan.make_plan` shows and passes on), "did you mean" (:data:`FOREIGN_NAMES`), ``preview``'s
flags and the rows of docs/options.md's table (:func:`options_table`, printed by ``python
tests/test_spec.py``, checked by the tests). A new one is also a field of :class:`Preprocess` and a keyword of
``make_spec``, which the tests check against the declarations.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from .augment import FOREIGN_NAMES as STAGE_FOREIGN_NAMES
from .augment import OPTIONS as STAGE_OPTIONS
from .augment import Stage, keyword_parameter, make_stages
from .augment import options_table as stage_rows
from .draws import NUMPY, REDRAWS, Range, check_choice, check_probability, check_range, is_integer, window_side
from .errors import OptionError, user_stacklevel
from .parallel import cores

#: random: a window placed at random (zoomed with ``scale``); center: the centre window; resize: the
#: whole image stretched to ``image_size``; fit: the whole image scaled to fit inside ``image_size``
#: (aspect ratio kept), centred and padded.
Crop = Literal["random", "center", "resize", "fit"]
#: onehot: float32 ``[H, W, C]`` rows; int: int32 ``[H, W]`` class indices with the ignore index.
LabelMode = Literal["onehot", "int"]
#: The images' floating-point type.
DType = Literal["float32", "float16", "bfloat16"]
#: The output size: ``(height, width)``, or one int for a square.
ImageSize = int | tuple[int, int]
#: The choices of each, as the checks list them (the types above are their one definition).
CROPS, LABEL_MODES, DTYPES = get_args(Crop), get_args(LabelMode), get_args(DType)
#: Other spellings of the label modes, read as daliloader's by :func:`make_spec` (so the spec, and all
#: that reads it, holds one of :data:`LABEL_MODES`): Keras' ``image_dataset_from_directory`` calls one-hot
#: labels ``"categorical"``.
LABEL_MODE_SPELLINGS = {"categorical": "onehot"}
#: The colour options, which change the image only.
COLOUR = ("brightness", "contrast", "saturation", "hue")


@dataclass(frozen=True)
class Preprocess:
    """What to do to each (image, mask) pair. Build it with :func:`make_spec`, which validates. Ranges
    are ``(low, high)`` of uniform draws; the identity range means the stage is off."""

    image_size: tuple[int, int]
    crop: Crop = "random"
    scale: tuple[float, float] = (1.0, 1.0)
    flip: float = 0.5
    rotate: tuple[float, float] = (0.0, 0.0)  # degrees, counter-clockwise
    brightness: tuple[float, float] = (1.0, 1.0)  # factors
    contrast: tuple[float, float] = (1.0, 1.0)
    saturation: tuple[float, float] = (1.0, 1.0)
    hue: tuple[float, float] = (0.0, 0.0)  # degrees
    cat_max_ratio: float = 1.0  # 1: the first window drawn is kept (see daliloader.stages.choose_window)
    label_mode: LabelMode = "onehot"
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    dtype: DType = "float32"
    augment: tuple[Stage, ...] = ()  # the declared stages that are on, in order (daliloader.augment)

    @property
    def resizes(self) -> bool:
        """Whether the window is resized: random crops with scale jitter, and the whole-image modes."""
        return self.crop in ("resize", "fit") or (self.crop == "random" and self.scale != (1.0, 1.0))

    @property
    def chooses_window(self) -> bool:
        """Whether the window is chosen among redrawn candidates while one class dominates them
        (``cat_max_ratio`` < 1: :func:`daliloader.stages.choose_window`)."""
        return self.cat_max_ratio < 1.0

    @property
    def rotates(self) -> bool:
        return self.rotate != (0.0, 0.0)

    @property
    def colours(self) -> bool:
        """Whether any colour option is on."""
        return any(getattr(self, name) != getattr(Preprocess, name) for name in COLOUR)

    def drawn(self) -> list[str]:
        """The options that are on and draw at random (the crop's place aside)."""
        return ([name for name, option in PROLOGUE.items() if getattr(self, name) != option.off] +
                [stage.switch().name for stage in self.augment])

    @property
    def draws_at_random(self) -> bool:
        """Whether a sample's preprocessing draws anything (:func:`daliloader.stages.draw_count` draws): the
        place of a random crop, or an option of :meth:`drawn`."""
        return self.crop == "random" or bool(self.drawn())


# ---------------------------------------------------------------- the prologue's options, declared once
@dataclass(frozen=True)
class PrologueOption:
    """One option of the prologue (the window, and the colour, pad, resize, rotation and flip each backend
    fuses with it: :mod:`daliloader.stages`): a field of :class:`Preprocess`, an argument of
    :func:`make_spec`, a keyword of the loaders and a flag of ``preview``, all of its name. As
    :class:`daliloader.augment.Option` is for the declared stages, but every keyword's default is None
    (what the option does when left out, which may depend on the crop) and the check is given the crop."""

    name: str
    check: Callable[[str, Any, str], Any]  # (name, value as given or None, crop) -> the field's value, or SpecError
    doc: str  # what it does, one line (docs/options.md's table, preview's help)
    metavar: str  # preview's flag's value (ending in RANGE_METAVAR: a range, read by range_value)
    default_doc: str  # what None gives, as docs/options.md's table says it
    form: str = ""  # the value as the table writes it after the name (`rotate=d`: the `d` of `doc`)
    annotation: str = "Range"  # the types the keyword takes, besides None
    foreign: tuple[str, ...] = ()  # what torchvision, albumentations or Keras call it ("did you mean" points here)
    parse: Callable[[str], Any] = float  # preview's flag's value from its text, where it is no range
    random_crops_only: bool = False  # it acts on random crops alone (evaluation, which has none, refuses it by name)

    @property
    def off(self):
        """The field's value that draws nothing: what None gives where the crop is not random."""
        return self.check(self.name, None, "center")


def _zoom(name: str, value, crop: str) -> tuple[float, float]:
    """The zoom range (None: (1, 1), no zoom), which only a random crop draws from."""
    lo, hi = check_range(name, (1.0, 1.0) if value is None else value, symmetric=None, low=0.0, high=10.0,
                         what="zoom factors", open_low=True)
    if crop != "random" and (lo, hi) != (1.0, 1.0):
        raise OptionError(name, f"{name} jitter needs crop='random'; crop={crop!r} does not zoom")
    if (lo, hi) == TORCHVISION_SCALE:
        warnings.warn(f"{name}={TORCHVISION_SCALE} is torchvision's RandomResizedCrop default, a share of the "
                      "image's area; here it is a zoom factor (mmsegmentation's ratio_range), and a zoom of "
                      f"{lo:g} makes windows {1 / lo:g} times the crop's side, mostly padding. A share a of the "
                      "image's area is a zoom of (crop side / image side) / sqrt(a)", UserWarning,
                      stacklevel=user_stacklevel())
    return lo, hi


#: torchvision's RandomResizedCrop(scale=...) default: the share of the image's area a crop takes.
TORCHVISION_SCALE = (0.08, 1.0)


def _flip(name: str, value, crop: str) -> float:
    """The flip probability (None: 0.5 for random crops, 0 otherwise)."""
    return check_probability(name, (0.5 if crop == "random" else 0.0) if value is None else value)


def _angle(name: str, value, crop: str) -> tuple[float, float]:
    """A rotation's range of degrees (None: none)."""
    return check_range(name, 0.0 if value is None else value, symmetric="angle", low=-360.0, high=360.0,
                       what="degrees")


def _factor(name: str, value, crop: str) -> tuple[float, float]:
    """A colour factor's range, as torchvision's ColorJitter takes it (None: (1, 1), unchanged)."""
    return check_range(name, 0.0 if value is None else value, symmetric="factor", low=0.0, high=100.0, what="factors")


def _hue(name: str, value, crop: str) -> tuple[float, float]:
    """hue in degrees (None: none); a range within half a degree is most likely torchvision's fraction of a
    turn, and warns."""
    lo, hi = check_range(name, 0.0 if value is None else value, symmetric="angle", low=-180.0, high=180.0,
                         what="degrees")
    if 0 < max(abs(lo), abs(hi)) <= 0.5:
        given = f"{hi:g}" if lo == -hi else f"({lo:g}, {hi:g})"
        turned = f"{hi * 360:g}" if lo == -hi else f"({lo * 360:g}, {hi * 360:g})"
        warnings.warn(f"{name}={given} is in degrees here and shifts hues by at most {max(abs(lo), abs(hi)):g} "
                      f"degree; torchvision's {name}={given} (a fraction of a turn) is {name}={turned}", UserWarning,
                      stacklevel=user_stacklevel())
    return lo, hi


def _class_ratio(name: str, value, crop: str) -> float:
    """mmsegmentation's ``cat_max_ratio`` (None: 1, off): a fraction in (0, 1], for random crops only."""
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise OptionError(name,
                          f"{name} is the largest share of a crop's labelled pixels one class may cover, a fraction in "
                          f"(0, 1] (mmsegmentation's cat_max_ratio=0.75; 1 is off), got {value!r}")
    if crop != "random" and value < 1.0:
        raise OptionError(name,
                          f"{name} redraws random crop windows; crop={crop!r} has one window: use crop='random' or "
                          f"leave {name} out")
    return float(value)


def positive_number(text: str) -> float:
    """A command-line value that must be a positive finite number (argparse's ``type``: the refusal is its
    message; ``nan`` and ``inf``, which ``float`` reads, are no duration: a timed window would never end)."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


#: How a command-line flag's metavar ends where the flag takes a range (:func:`range_value`): one number, or
#: ``MIN,MAX``, which ``daliloader preview`` also takes as two words (``--scale 0.5 2``).
RANGE_METAVAR = "MIN,MAX"


def range_value(text: str) -> float | tuple[float, float]:
    """A range flag's value (argparse's ``type``: the refusal is its message): one number, as the option
    reads one (its check says how), or ``MIN,MAX``, a ``(min, max)`` pair."""
    import argparse

    try:
        numbers = tuple(float(part) for part in text.split(","))
    except ValueError:
        numbers = ()
    if len(numbers) not in (1, 2):
        raise argparse.ArgumentTypeError(f"expected a number or MIN,MAX (two numbers, as one word or two), got "
                                         f"{text!r}")
    return numbers if len(numbers) == 2 else numbers[0]


#: The prologue's options, in the order of the draws (:mod:`daliloader.stages`), by name.
PROLOGUE: dict[str, PrologueOption] = {o.name: o for o in (
    PrologueOption("scale", _zoom, "zoom `s ~ U(lo, hi)` (random crops): `s < 1` shows more of the image, `s > 1` "
                   "less (torchvision's area share `(0.08, 1.0)` warns)", "S|MIN,MAX", default_doc="`(1, 1)`",
                   form="=(lo, hi)", foreign=("zoom_range",),
                   random_crops_only=True),
    PrologueOption("flip", _flip, "mirror left-right with probability `flip`", "P",
                   default_doc='0.5 for `"random"`, else 0', annotation="float", foreign=("hflip", "horizontal_flip")),
    PrologueOption("rotate", _angle, "angle `a ~ U(-d, d)` degrees, counter-clockwise about the centre of the output "
                   "(OpenCV's `getRotationMatrix2D`), same size; image bilinear, mask nearest neighbour",
                   "DEGREES|MIN,MAX", default_doc="0", form="=d", foreign=("degrees", "limit", "angle")),
    PrologueOption("brightness", _factor, "factor `b ~ U(max(0, 1-v), 1+v)` (torchvision's `ColorJitter`)",
                   "V|MIN,MAX", default_doc="0", form="=v"),
    PrologueOption("contrast", _factor, "factor `c`, drawn as `b`; scales about mid-grey 128", "V|MIN,MAX",
                   default_doc="0", form="=v"),
    PrologueOption("saturation", _factor, "factor `t`, drawn as `b`; 0 is grey (luma 0.299 R + 0.587 G + 0.114 B)",
                   "V|MIN,MAX", default_doc="0", form="=v", foreign=("sat_shift_limit",)),
    PrologueOption("hue", _hue, "angle `g ~ U(-d, d)` degrees, turning YIQ chroma (torchvision's `hue=0.1`, a fraction "
                   "of a turn, is `hue=36`; values up to 0.5 warn)", "DEGREES|MIN,MAX", default_doc="0", form="=d",
                   foreign=("hue_shift_limit",)),
    PrologueOption("cat_max_ratio", _class_ratio, f"redraw the random crop window, up to {REDRAWS} times, while one "
                   "class covers `r` or more of its labelled pixels or it holds one class (mmsegmentation's "
                   "`RandomCrop(cat_max_ratio=0.75)`)", "R", default_doc="1 (off)", form="=r", annotation="float",
                   random_crops_only=True),
)}
#: The preprocessing options a loader takes as keywords beside image_size, crop and label_mode: the
#: prologue's, the normalisation's, then the declared stages' (:mod:`daliloader.augment`).
OPTIONS = tuple(PROLOGUE) + ("mean", "std", "dtype") + tuple(STAGE_OPTIONS)
#: What torchvision, albumentations and Keras call the preprocessing options (for "did you mean": the
#: meaning may differ, the message points at the option, whose docs give its units).
FOREIGN_NAMES = {foreign: o.name for o in PROLOGUE.values() for foreign in o.foreign} | STAGE_FOREIGN_NAMES


def _prologue_on(given: Mapping[str, Any]) -> list[str]:
    """The prologue's options among ``given`` (name -> value as given; None: left out) that are on, each
    checked as for random crops."""
    return [name for name, o in PROLOGUE.items()
            if given.get(name) is not None and o.check(name, given[name], "random") != o.off]


def random_crop_options(given: Mapping[str, Any]) -> list[str]:
    """The options among ``given`` (name -> value as given) that act on random crops alone and are on."""
    return [name for name in _prologue_on(given) if PROLOGUE[name].random_crops_only]


def drawn_options(given: Mapping[str, Any]) -> list[str]:
    """The options among ``given`` (name -> value as given; None: left out) that draw at random where the
    crop is random: the prologue's that are on, then the switch of each declared stage that ``given`` turns
    on (checked: :func:`daliloader.augment.make_stages`). What evaluation, which draws nothing, refuses."""
    stages = make_stages({name: given[name] for name in STAGE_OPTIONS if given.get(name) is not None})
    return _prologue_on(given) + [stage.switch().name for stage in stages]


def prologue_parameters() -> list[inspect.Parameter]:
    """The prologue's options as keyword-only parameters (None: what each does when left out), for the
    loaders' signatures (:func:`daliloader.plan.make_plan` shows them)."""
    return [keyword_parameter(o.name, o.annotation) for o in PROLOGUE.values()]


def options_table() -> str:
    """The rows of docs/options.md's table (``option | default | what it does``) that the declarations make:
    the prologue's options, then the declared stages' (:func:`daliloader.augment.options_table`)."""
    rows = [f"| `{o.name}{o.form}` | {o.default_doc} | {o.doc} |" for o in PROLOGUE.values()]
    return "\n".join(rows + [stage_rows()])


def make_spec(
    image_size: ImageSize,
    crop: Crop = "random",
    scale: Range | None = None,
    flip: float | None = None,
    label_mode: LabelMode = "onehot",
    mean: Sequence[float] | float | None = None,
    std: Sequence[float] | float | None = None,
    dtype: DType = "float32",
    *,
    rotate: Range | None = None,
    brightness: Range | None = None,
    contrast: Range | None = None,
    saturation: Range | None = None,
    hue: Range | None = None,
    cat_max_ratio: float | None = None,
    augment: Mapping[str, object] | None = None,
) -> Preprocess:
    """Validate user arguments and build the :class:`Preprocess` spec.

    Ranges are ``(min, max)`` of uniform draws; an option left at None is off (its identity range), but
    ``flip``, whose default depends on ``crop``.

    Args:
        image_size: ``(height, width)`` of the outputs, or one int for a square; each side an integer in
            1..16384.
        crop: ``"random"``, ``"center"``, ``"resize"`` or ``"fit"`` (see :data:`Crop`).
        scale: the zoom range of random crops, a zoom factor or a ``(min, max)`` pair of them, within
            (0, 10]; None: (1, 1), i.e. no zoom. Only ``crop="random"`` zooms: another range with another
            crop is refused.
        flip: the probability of a horizontal flip; None: 0.5 for random crops and 0 otherwise.
        label_mode: ``"onehot"`` or ``"int"`` (see :data:`LabelMode`); Keras' ``"categorical"`` is read as
            ``"onehot"`` (:data:`LABEL_MODE_SPELLINGS`).
        mean: subtracted from the images, in [0, 1] units, one value or one per RGB channel (None: 0).
        std: what the images are divided by, in [0, 1] units, one value or one per RGB channel (None: 1).
        dtype: the images' floating-point type, ``"float32"``, ``"float16"`` or ``"bfloat16"``.
        rotate: degrees ``d`` (an angle from ``U(-d, d)``) or a ``(min, max)`` pair (None: no rotation).
        brightness: ``v`` (a factor from ``U(max(0, 1 - v), 1 + v)``) or a ``(min, max)`` pair of factors
            (None: off).
        contrast: as ``brightness``.
        saturation: as ``brightness``.
        hue: degrees ``d`` (``U(-d, d)``) or a pair, within [-180, 180] (None: off). A ``hue`` up to 0.5
            degrees warns: it looks like torchvision's fraction of a turn.
        cat_max_ratio: a fraction in (0, 1]: a random crop window in which one class covers this share of
            the labelled pixels or more, or that holds a single class, is drawn again, up to 10 times; the
            last is kept whatever it holds (mmsegmentation's ``RandomCrop``; None or 1: off).
            ``crop="random"`` only.
        augment: the declared stages' options (:func:`daliloader.augment.make_stages`; None: the default).

    Returns:
        The frozen :class:`Preprocess` spec.

    Raises:
        daliloader.errors.SpecError: an argument that is not valid, named with what it takes (a choice
            that is none of those listed, a range out of its bounds, ``mean``/``std`` in 0-255 units,
            with their conversion, a ``scale`` range or a ``cat_max_ratio`` without ``crop="random"``, a
            declared stage's option without the option that turns the stage on).
    """
    given = locals()  # the arguments by name: the prologue's options are read from here, as PROLOGUE names them
    size = check_image_size(image_size)
    check_choice("crop", crop, CROPS)
    if isinstance(label_mode, str):
        label_mode = LABEL_MODE_SPELLINGS.get(label_mode, label_mode)
    check_choice("label_mode", label_mode, LABEL_MODES)
    dtype = type_name(dtype)
    check_choice("dtype", dtype, DTYPES)
    spec = Preprocess(
        image_size=size, crop=crop, label_mode=label_mode,
        **{name: option.check(name, given[name], crop) for name, option in PROLOGUE.items()},
        mean=_units("mean", _triple("mean", 0.0 if mean is None else mean)),
        std=_units("std", _triple("std", 1.0 if std is None else std, positive=True)),
        dtype=dtype,
        augment=make_stages(augment or {}),
    )
    _refuse_empty_windows(spec)
    return spec


def _refuse_empty_windows(spec: Preprocess) -> None:
    """Refuse a zoom so large that a random crop's window holds no pixel: each side of the window is an
    output side over the zoom, rounded (:func:`~daliloader.draws.window_side`, as
    :func:`daliloader.stages.draw_window` computes it), and every backend's resize fails on an empty one."""
    side, zoom = min(spec.image_size), spec.scale[1]
    if window_side(side, NUMPY.to_float(zoom)) < 1:
        raise OptionError("scale", f"scale={spec.scale}: at zoom {zoom:g} a random crop's window for image_size="
                                   f"{spec.image_size} is {side}/{zoom:g} pixels, which rounds to none; keep the "
                                   f"largest zoom at most {2 * side} (twice the smaller side) or ask for a larger "
                                   "image_size")


def _units(name: str, values: tuple[float, float, float]) -> tuple[float, float, float]:
    """mean/std are in [0, 1] units; values in 0-255 units are refused with their conversion."""
    if max(values) > 1.0 or min(values) < 0.0:
        converted = tuple(round(v / 255.0, 4) for v in values)
        hint = f" Did you mean {name}={converted} (the values / 255)?" if max(values) > 1.0 and min(values) >= 0 else ""
        raise OptionError(name, f"{name}={values} is outside [0, 1]: daliloader takes {name} in [0, 1] units, as "
                                f"torchvision's Normalize on tensors in [0, 1].{hint}")
    return values


def class_weight_list(weights, num_classes: int | None, ignore_index: int | None = 255,
                      source: str = "the class map") -> tuple[float, ...]:
    """One finite, non-negative weight per class: from a sequence (one per class), or from a dict
    ``{class: weight}`` as Keras' ``class_weight`` (classes it leaves out weigh 1; the ignore index may be
    named, with weight 0, as it always weighs 0; ``ignore_index`` None: every label that is no class is
    ignored, and may be named so). ``num_classes`` (None: the sequence's length) is checked; ``source``
    names the classes in messages."""
    if isinstance(weights, dict):
        weights = _dict_weights(weights, num_classes, ignore_index, source)
    try:
        out = tuple(float(w) for w in weights)
    except (TypeError, ValueError):
        raise OptionError("class_weights", "class_weights must be one number per class (a sequence or a dict), "
                                           f"got {weights!r}") from None
    if not out or not all(math.isfinite(w) and w >= 0 for w in out):
        raise OptionError("class_weights",
                          f"class_weights must be finite and non-negative, one per class; got {weights!r}")
    if num_classes is not None and len(out) != num_classes:
        raise OptionError("class_weights",
                          f"class_weights has {len(out)} weights for the {num_classes} classes of {source}: give one "
                          "per class")
    return out


def _dict_weights(weights: dict, num_classes: int | None, ignore_index: int | None, source: str) -> list:
    """Keras' ``class_weight`` dict as one weight per class, those it leaves out at 1."""
    if num_classes is None:
        raise OptionError("class_weights", "class_weights={...} needs num_classes=, to know the classes it leaves out")
    keys = dict(zip(class_keys(weights), weights.values()))
    if ignore_index is None:  # labels that are no class are ignored: named with 0, they say so
        keys = {k: w for k, w in keys.items() if 0 <= k < num_classes or w != 0}
    elif ignore_index in keys and keys.pop(ignore_index) != 0:
        raise OptionError("class_weights",
                          f"class_weights names the ignore index {ignore_index} with a weight: ignored pixels "
                          "always weigh 0; leave it out")
    strays = sorted(k for k in keys if not 0 <= k < num_classes)
    if strays:
        raise OptionError("class_weights",
                          f"class_weights names {strays[:5]}, not classes of {source} (0..{num_classes - 1})")
    return [keys.get(k, 1.0) for k in range(num_classes)]


def class_keys(weights: dict) -> list[int]:
    """The keys of a class_weights dict as ints (numpy integers included, as ``np.unique`` gives them)."""
    if not all(is_integer(k) for k in weights):
        raise OptionError("class_weights", f"class_weights={{...}} maps class indices (integers) to weights; got keys "
                                           f"{sorted(map(repr, weights))[:5]}")
    return [int(k) for k in weights]


@dataclass(frozen=True)
class Count:
    """An integer argument of the loaders: the least value it takes, whether None is allowed (it then
    means a default chosen later), and, for DALI's threads, the most (see :func:`most_threads`)."""

    least: int | None  # None: any integer (the range is checked elsewhere, against other arguments)
    optional: bool = False
    most: Callable[[], int] | None = None
    sized: bool = False  # a size (of a batch, a pool): "a positive integer"
    of: str = "threads"  # what the count is of, for the message about its most


#: DALI's CPU threads per core that a loader takes at most (see :func:`most_threads`).
THREADS_PER_CORE = 4


def most_threads() -> int:
    """The most threads (or worker processes) a loader or job takes: :data:`THREADS_PER_CORE` per core, 8
    at least. DALI's CPU threads share the cores and each holds its own buffers, so more threads add
    memory and no speed, and a few hundred crash DALI (a segmentation fault or an abort, not an error);
    Keras' ``workers`` and the jobs' threads alike (a million of them end in "can't start new thread")."""
    return max(8, THREADS_PER_CORE * cores())


#: Every integer argument of the loaders and jobs, checked in one place (:func:`check_count`) by each of them.
COUNTS = {"batch_size": Count(1, sized=True), "global_batch_size": Count(1, sized=True),
          "workers": Count(1, sized=True, most=most_threads, of="workers"), "prefetch": Count(1),
          "device_id": Count(0), "shard_id": Count(None), "num_shards": Count(1), "seed": Count(0, optional=True),
          "num_threads": Count(1, optional=True, most=most_threads, of="DALI CPU threads")}


def type_name(value):
    """A type given as TensorFlow's, numpy's or ml_dtypes' object (``tf.float16``, ``np.dtype("float16")``,
    ``np.float16``, ``tf.bfloat16``) by its name, as the loaders take it; anything else as it is (its check
    names it). Compared with a name, ``tf.float16 == "float16"`` holds, but the loaders look names up."""
    if isinstance(value, str):
        return value
    name = getattr(value, "name", None)  # a tf.DType, a numpy dtype
    if isinstance(name, str):
        return name
    try:
        return np.dtype(value).name  # a numpy scalar type
    except (TypeError, ValueError):
        return value


def check_flag(name: str, value, unset: str = ""):
    """``value`` as a bool if it is one (numpy's too), else a SpecError naming argument ``name``: a string
    such as "False", from a config file, is true to Python. ``unset``: what None means, where it is
    allowed (then None is returned)."""
    if value is None and unset:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise OptionError(name, f"{name} must be True or False{f' (or None: {unset})' if unset else ''}, got {value!r}")


def check_count(name: str, value):
    """``value`` if it is what argument ``name`` takes (:data:`COUNTS`), else a SpecError naming it."""
    count = COUNTS[name]
    if value is None and count.optional:
        return value
    if not is_integer(value) or (count.least is not None and value < count.least):
        if count.sized:
            raise OptionError(name, f"{name} must be a positive integer, got {value!r}")
        least = "" if count.least is None else f" >= {count.least}"
        raise OptionError(name,
                          f"{name} must be an integer{least}{' or None' if count.optional else ''}, got {value!r}")
    if count.most is not None and value > count.most():
        raise OptionError(name, f"{name}={value} is more than this machine can use: it has {cores()} cores, and "
                                f"daliloader takes at most {count.most()} {count.of} ({THREADS_PER_CORE} per core). "
                                "Pass at most that")
    return int(value)


def check_workers(workers):
    """The threads a job (check, prepare, verify, class_frequencies) runs on: None (one per core) or a
    count, checked as the loaders' ``workers`` (:data:`COUNTS`)."""
    return None if workers is None else check_count("workers", workers)


def check_image_size(image_size) -> tuple[int, int]:
    """``image_size`` as ``(height, width)``: an int (a square) or a pair (numpy's integers and arrays too),
    each side an integer in 1..16384; a SpecError naming it, as given, otherwise."""
    given = image_size
    if hasattr(image_size, "tolist"):  # a numpy array or scalar
        image_size = image_size.tolist()
    if is_integer(image_size):
        image_size = (image_size, image_size)
    try:
        if isinstance(image_size, (str, bytes)):  # "32" would unpack into two characters
            raise TypeError
        h, w = image_size
    except (TypeError, ValueError):
        raise OptionError("image_size", f"image_size is an int or (height, width), got {given!r}") from None
    for v in (h, w):
        if not is_integer(v) or not 1 <= v <= 16384:
            raise OptionError("image_size", f"image_size={given!r}: each side must be an integer in 1..16384")
    return int(h), int(w)


def _triple(name: str, value, positive: bool = False) -> tuple[float, float, float]:
    vals = [value] * 3 if isinstance(value, (int, float)) else list(value)
    if len(vals) != 3:
        raise OptionError(name, f"{name} must be one number or three (R, G, B), got {value!r}")
    vals = [float(v) for v in vals]
    if positive and min(vals) <= 0:
        raise OptionError(name, f"{name} must be positive, got {value!r}")
    return tuple(vals)

