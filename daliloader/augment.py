"""The declared stages: augmentations after the window, each one declared once, here.

A declared stage is a frozen dataclass (a subclass of :class:`Stage`). Its fields are its options, as
the loaders take them (keywords) and the CLI (flags): each field's :func:`option` gives its default
(which leaves the stage off), its check (the refusal names the option and what it takes), a line of
documentation and the CLI's metavar. From these declarations come the loaders' keywords (their
signatures, :func:`signature_parameters`), the checks, the spec's field (``Preprocess.augment``: the
stages that are on), ``preview``'s flags and the options table of docs/options.md
(:func:`options_table`, checked by the tests).

Each stage takes :attr:`Stage.draws` uniform draws per sample, after the prologue's (the window,
colour and rotation: :data:`FIRST_DRAW` of them, :mod:`daliloader.stages`), in the order of
:data:`STAGES`; :meth:`Stage.params` turns them into its parameters with a framework's math (numpy's,
TensorFlow's or DALI's, :mod:`daliloader.draws`: the same code for all three), and :meth:`Stage.apply`
is its reference in numpy, which the OpenCV backend runs and against which the tests check the DALI
kernels (``daliloader.backends.dali_augment``) and TensorFlow's
(``daliloader.backends.tf_augment``), one function per stage in each.

Where they run: after the window's geometry (pad, resize, rotate) and before the horizontal flip,
which DALI fuses with the normalisation, on uint8 RGB pixels of ``image_size`` and their class indices.
Adding a stage: a dataclass here (its options, draws, parameters and reference), added to
:data:`STAGES`; its DALI and TensorFlow kernels; a row in tests/test_augment.py (docs/design.md, "How
to add a stage").
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .draws import NUMPY, check_choice, check_probability, check_range, draw, is_integer, uniform_offset
from .errors import OptionError, SpecError, flag

#: The draws of the prologue (zoom, top, left, flip, angle, brightness, contrast, saturation, hue:
#: :mod:`daliloader.stages`), which come first in a sample's draws.
FIRST_DRAW = 9


@dataclass(frozen=True)
class Option:
    """One option of a declared stage: a loader's keyword and a CLI flag of the same name."""

    name: str
    default: Any
    check: Callable[[str, Any], Any]  # (name, the value as given) -> the value the stage keeps, or a SpecError
    doc: str  # what it does, one line (docs/options.md's table, the CLI's help)
    metavar: str  # the CLI flag's value (ending in MIN,MAX: a range, read by daliloader.spec.range_value)
    annotation: str  # the types the keyword takes
    foreign: tuple[str, ...] = ()  # what torchvision or albumentations call it ("did you mean" points here)


def option(default, check: Callable[[str, Any], Any], doc: str, metavar: str, annotation: str,
           foreign: tuple[str, ...] = ()):
    """A declared stage's field that is one of its options (see :class:`Option`)."""
    return field(default=default, metadata={"option": (check, doc, metavar, annotation, foreign)})


class Stage:
    """The base of the declared stages. A subclass is a frozen dataclass whose fields are its options
    (:func:`option`); the first one turns it on (any value but its default)."""

    #: Uniform draws per sample.
    draws: ClassVar[int]

    @classmethod
    def options(cls) -> tuple[Option, ...]:
        return tuple(Option(f.name, f.default, *f.metadata["option"]) for f in dataclasses.fields(cls))

    @classmethod
    def switch(cls) -> Option:
        """The option that turns the stage on."""
        return cls.options()[0]

    @property
    def on(self) -> bool:
        switch = self.switch()
        return getattr(self, switch.name) != switch.default

    def first_draw(self) -> int:
        """Where this stage's draws start in a sample's draws."""
        return FIRST_DRAW + sum(s.draws for s in STAGES[:STAGES.index(type(self))])

    def params(self, u, height: int, width: int, m=NUMPY) -> tuple:
        """The sample's parameters from its draws ``u`` (all of them: :func:`daliloader.stages.draw_count`),
        for an output of ``height`` x ``width``, with math ``m``."""
        raise NotImplementedError

    def apply(self, image: np.ndarray, labels: np.ndarray, params: tuple, ignore_index: int):
        """The reference: uint8 RGB ``image`` (H, W, 3) and class indices ``labels`` (H, W), with the
        sample's ``params``; returns both."""
        raise NotImplementedError


# ---------------------------------------------------------------- checks of the options
def _off_or_range(symmetric: str | None, low: float, high: float, what: str, off: tuple[float, float],
                  open_low: bool = False):
    """A range check (:func:`~daliloader.draws.check_range`) where 0 is off."""
    def check(name: str, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
            return off
        return check_range(name, value, symmetric=symmetric, low=low, high=high, what=what, open_low=open_low)
    return check


def _fraction_range(name: str, value):
    return check_range(name, value, symmetric=None, low=0.0, high=1.0, what="fractions of the image's area",
                       open_low=True)


def _ratio_range(name: str, value):
    return check_range(name, value, symmetric=None, low=0.01, high=100.0, what="height/width ratios")


def _level(name: str, value) -> int:
    if not is_integer(value) or not 0 <= value <= 255:
        raise OptionError(name, f"{name} is a pixel value, an integer in 0..255, got {value!r}")
    return int(value)


def _mask_policy(name: str, value) -> str:
    check_choice(name, value, ERASE_MASKS)
    return value


# ---------------------------------------------------------------- the stages
@dataclass(frozen=True)
class VerticalFlip(Stage):
    """vflip: the image and its labels mirrored top to bottom, as torchvision's ``RandomVerticalFlip``."""

    vflip: float = option(0.0, check_probability, "mirror top-bottom with probability `p` (torchvision's "
                          "`RandomVerticalFlip(p)`), image and mask together", "P", "float",
                          ("vertical_flip", "vertical_flip_prob"))
    draws: ClassVar[int] = 1

    def params(self, u, height, width, m=NUMPY):
        return (u[self.first_draw()] < self.vflip,)

    def apply(self, image, labels, params, ignore_index):
        return (image[::-1], labels[::-1]) if params[0] else (image, labels)


#: The blur's sigma, in pixels: the least (a smaller one blurs nothing a uint8 pixel shows, and its
#: square underflows float32) and the most.
MIN_SIGMA, MAX_SIGMA = 0.01, 20.0


def blur_radius(sigma, m=NUMPY):
    """The Gaussian kernel's radius for ``sigma``: ``ceil(3 sigma)`` pixels in float32 (DALI's
    ``gaussian_blur``), with math ``m``."""
    return m.to_int(m.ceil(m.to_float(sigma) * 3.0))


def gaussian_weights(x, sigma, m=NUMPY):
    """The reference's kernel at offsets ``x`` (float32, within :func:`blur_radius`), summing to 1:
    ``exp(-x^2 / (2 sigma^2))`` over its sum, in float32."""
    k = m.exp(-x * x / (m.to_float(sigma) * m.to_float(sigma) * 2.0))
    return k / m.sum(k)


@dataclass(frozen=True)
class GaussianBlur(Stage):
    """blur: a Gaussian blur of the image, its sigma drawn per sample (torchvision's ``GaussianBlur``
    ``sigma``); the kernel spans ``ceil(3 sigma)`` pixels each side, the border reflected without repeating
    the edge (OpenCV's ``BORDER_REFLECT_101``)."""

    blur: tuple[float, float] = option(
        (0.0, 0.0), _off_or_range(None, MIN_SIGMA, MAX_SIGMA, "pixels (sigma)", (0.0, 0.0)),
        "Gaussian blur of the image with `sigma ~ U(min, max)` pixels (one number: that sigma; 0.01 to 20), as "
        "torchvision's `GaussianBlur(sigma=...)`; kernel radius `ceil(3 sigma)`, border reflected "
        "(`BORDER_REFLECT_101`)",
        "SIGMA|MIN,MAX", "float | tuple[float, float]", ("sigma", "sigma_limit", "gaussian_blur"))
    draws: ClassVar[int] = 1

    def params(self, u, height, width, m=NUMPY):
        return (draw(self.blur, u[self.first_draw()]),)

    def apply(self, image, labels, params, ignore_index):
        import cv2

        r = int(blur_radius(params[0]))
        k = gaussian_weights(np.arange(-r, r + 1, dtype=np.float32), params[0])
        out = cv2.sepFilter2D(image.astype(np.float32), -1, k, k, borderType=cv2.BORDER_REFLECT_101)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8), labels


@dataclass(frozen=True)
class Gamma(Stage):
    """gamma: ``255 (x / 255) ** g`` with ``g`` drawn per sample (albumentations' ``RandomGamma``, whose
    ``gamma_limit=(80, 120)`` is ``gamma=0.2``); the image only."""

    gamma: tuple[float, float] = option(
        (1.0, 1.0), _off_or_range("factor", 0.0, 10.0, "exponents", (1.0, 1.0), open_low=True),
        "gamma `255 (x/255)^g` of the image with `g ~ U(1-v, 1+v)` (or a `(min, max)` pair); albumentations' "
        "`RandomGamma(gamma_limit=(80, 120))` is `gamma=0.2`", "V|MIN,MAX", "float | tuple[float, float]",
        ("gamma_limit",))
    draws: ClassVar[int] = 1

    def params(self, u, height, width, m=NUMPY):
        return (draw(self.gamma, u[self.first_draw()]),)

    def apply(self, image, labels, params, ignore_index):
        out = np.power(image.astype(np.float32) / np.float32(255.0), np.float32(params[0])) * np.float32(255.0)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8), labels


#: What random erasing does to the labels under the erased rectangle: keep them, or set them to the
#: ignore index (so that no loss or metric counts pixels whose image was erased).
ERASE_MASKS = ("keep", "ignore")


@dataclass(frozen=True)
class RandomErasing(Stage):
    """erase: a rectangle of the image filled with ``erase_value``, as torchvision's ``RandomErasing``:
    with probability ``erase``, an area of ``erase_scale`` of the image's (a uniform draw) and a height/width
    ratio of ``erase_ratio`` (drawn uniformly in log scale), its sides rounded and cut to the image (where
    torchvision draws again), placed uniformly. The labels under it are kept or set to the ignore index
    (``erase_mask``)."""

    erase: float = option(0.0, check_probability, "erase a rectangle of the image with probability `p` "
                          "(torchvision's `RandomErasing(p)`)", "P", "float")
    erase_scale: tuple[float, float] = option(
        (0.02, 0.33), _fraction_range, "the erased area, a fraction `~ U(min, max)` of the image's (torchvision's "
        "`scale`)", "MIN,MAX", "tuple[float, float]")
    erase_ratio: tuple[float, float] = option(
        (0.3, 3.3), _ratio_range, "the erased rectangle's height/width, log-uniform in `(min, max)` (torchvision's "
        "`ratio`)", "MIN,MAX", "tuple[float, float]")
    erase_value: int = option(0, _level, "the erased pixels' value, 0-255 in every channel, before normalisation "
                              "(torchvision's `value`, which usually comes after it: its 0 is then the mean colour)",
                              "V", "int")
    erase_mask: str = option("keep", _mask_policy, "`\"keep\"` the labels under the rectangle, or `\"ignore\"`: "
                             "set them to the ignore index (albumentations' `fill_mask`)", "keep|ignore",
                             "Literal['keep', 'ignore']", ("fill_mask",))
    draws: ClassVar[int] = 5

    def params(self, u, height, width, m=NUMPY):
        """``(top, left, height, width)`` of the rectangle, 0 x 0 when the sample draws no erasing."""
        k = self.first_draw()
        area = float(height * width) * draw(self.erase_scale, u[k + 1])
        ratio = m.exp(draw((math.log(self.erase_ratio[0]), math.log(self.erase_ratio[1])), u[k + 2]))
        on = m.to_int(u[k] < self.erase)
        h = m.minimum(m.to_int(m.floor(m.sqrt(area * ratio) + 0.5)), height) * on
        w = m.minimum(m.to_int(m.floor(m.sqrt(area / ratio) + 0.5)), width) * on
        return uniform_offset(height - h, u[k + 3], m), uniform_offset(width - w, u[k + 4], m), h, w

    def apply(self, image, labels, params, ignore_index):
        top, left, h, w = (int(v) for v in params)
        image, labels = image.copy(), labels.copy()
        image[top:top + h, left:left + w] = self.erase_value
        if self.erase_mask == "ignore":
            labels[top:top + h, left:left + w] = ignore_index
        return image, labels


#: Every declared stage, in the order they run and draw.
STAGES: tuple[type[Stage], ...] = (VerticalFlip, GaussianBlur, Gamma, RandomErasing)
#: The prologue's and the declared stages' uniform draws per sample, so where the window's redraws start
#: (:data:`daliloader.stages.FIRST_REDRAW`; all draws with them: :data:`daliloader.stages.DRAWS`).
STAGE_DRAWS = FIRST_DRAW + sum(s.draws for s in STAGES)
#: Every declared option, by name.
OPTIONS: dict[str, Option] = {o.name: o for s in STAGES for o in s.options()}
#: What torchvision and albumentations call the declared options (for "did you mean").
FOREIGN_NAMES = {foreign: o.name for o in OPTIONS.values() for foreign in o.foreign}


def make_stages(options: Mapping[str, Any]) -> tuple[Stage, ...]:
    """The declared stages that ``options`` (declared option -> value as given; None: the default) turn
    on, checked, in the order of :data:`STAGES`. Options of a stage that stays off are refused: they
    would do nothing."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise SpecError(f"{unknown[0]!r} is not an option of the declared stages ({', '.join(OPTIONS)})")
    on = []
    for cls in STAGES:
        given = {o.name: o.check(o.name, options[o.name]) for o in cls.options() if options.get(o.name) is not None}
        stage = cls(**given)
        if stage.on:
            on.append(stage)
        elif cls.switch().name not in given and given:
            names, switch = sorted(given), cls.switch().name
            raise SpecError(f"{', '.join(names)} set the stage that {switch}= turns on, and {switch} is not given: "
                            f"pass it too (e.g. {switch}=0.5), or leave {', '.join(names)} out (on the command line: "
                            f"{' and '.join(map(flag, names))} need{'s' if len(names) == 1 else ''} {flag(switch)})")
    return tuple(on)


def apply(stages: tuple[Stage, ...], image, labels, u, ignore_index: int, *, size=None, kernels=None, m=NUMPY):
    """The declared stages that are on, in order, on one sample (or a DALI graph's samples) with draws
    ``u``: each stage's parameters from ``u`` with math ``m``, for an output of ``size`` (default: the
    image's), then its kernel from ``kernels`` (a backend's, by stage class; default: the reference,
    :meth:`Stage.apply`, in numpy)."""
    height, width = image.shape[:2] if size is None else size
    for stage in stages:
        kernel = type(stage).apply if kernels is None else kernels[type(stage)]
        image, labels = kernel(stage, image, labels, stage.params(u, height, width, m), ignore_index)
    return image, labels


def keyword_parameter(name: str, annotation: str) -> inspect.Parameter:
    """An option as a loader's keyword-only parameter: None by default (the option's default), ``annotation``
    the types it takes besides None (the prologue's options too, :data:`daliloader.spec.PROLOGUE`)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=f"{annotation} | None")


def signature_parameters() -> list:
    """The declared options as keyword-only parameters (None: the default), for the loaders' signatures."""
    return [keyword_parameter(o.name, o.annotation) for o in OPTIONS.values()]


def from_text(text: str):
    """A CLI flag's value as the option takes it: a number, a ``MIN,MAX`` pair, or a word."""
    parts = text.split(",")
    try:
        numbers = [float(p) if any(c in p for c in ".eE") else int(p) for p in parts]
    except ValueError:
        return text
    return numbers[0] if len(numbers) == 1 else tuple(numbers)


def options_table() -> str:
    """The declared options as rows of docs/options.md's table (``option | default | what it does``)."""
    switches = {s.switch().name for s in STAGES}

    def shown(o: Option) -> str:
        return "off" if o.name in switches else "`" + repr(o.default).replace("'", '"') + "`"
    return "\n".join(f"| `{o.name}` | {shown(o)} | {o.doc} |" for o in OPTIONS.values())

