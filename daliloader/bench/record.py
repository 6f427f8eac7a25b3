"""The bench's report as typed records, and how it is written to and read from JSON.

A report is a :class:`Report`: the machine, the dataset, the settings, the decode ceilings, one
:class:`Figure` per backend, data, labels and augmentation (named by its :class:`FigureKey`), the stage
breakdowns, the training rows, its warnings (:class:`BenchWarning`, each naming what it is about) and the
ratios between two of its figures (:class:`Ratio`, naming both).
:meth:`Report.to_json` gives the JSON that ``daliloader bench --json`` writes, with the :data:`SCHEMA`
version in it; :meth:`Report.from_json` and :func:`read` take any report a daliloader wrote, older ones
through :func:`migrate`, the one place that knows their forms.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path

from ..errors import DataError, ValueEnum
from .sources import EXPERT
from .timing import noisy

#: The version of the report's JSON form, written as its "schema". Reports without one are version 1;
#: version 2 did not record whether the loaders read the mask cache (``RunSettings.mask_cache``); version 3
#: held the warnings as text and the ratios as numbers keyed by ``"<backend> <labels>[ <data>]"``.
SCHEMA = 4


class Data(ValueEnum):
    """The data a figure is measured on (``Figure.data``, written into the JSON as its value): the
    original pairs, the prepared copy's files, its packs, the original pairs in the other container
    (``bench --tfrecord``: as TFRecords, or as files), and the local copy of pairs in a bucket."""

    ORIGINAL = "original"
    PREPARED = "prepared"
    PACKS = "packs"
    TFRECORD = "tfrecord"
    FILES = "files"
    LOCAL = "local"

    @property
    def prepared(self) -> bool:
        """Whether it is the prepared copy (its files or its packs), bound by the copy's own ceilings; the
        others hold the original pairs' bytes (in either container, or copied from a bucket), bound by the
        original pairs' ceilings."""
        return self in (Data.PREPARED, Data.PACKS)


#: The names of the data, as ``report --data`` takes them.
DATA = tuple(d.value for d in Data)
#: How every figure is taken (see :mod:`daliloader.bench.timing`).
METHOD = "median of repeats after a one-epoch warm-up and until steady; images/s"
#: What each command-line user is told when a file is no report.
WHAT_TO_PASS = "pass a report written by `daliloader bench --json`"
#: The keys without which a JSON object is no bench report, whatever its version.
REQUIRED = ("machine", "settings", "results", "ceilings")
#: A ceiling's key is what it decodes (``cpu_decode_pairs``, ``nvjpeg_images``...), then one of these where
#: it was measured on the prepared copy, or on the original pairs with their masks read from the mask cache
#: (:func:`ceiling_key`).
PREPARED_KEY, CACHED_KEY = "_prepared", "_cached"

#: Field metadata: the field is left out of the JSON while it holds its default.
OPTIONAL = {"optional": True}


def _optional(default=None):
    return field(default=default, metadata=OPTIONAL)


def plain(value):
    """``value`` as JSON holds it: records as objects (optional fields left out while unset), tuples
    as lists."""
    if is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)
                if not (f.metadata.get("optional") and getattr(value, f.name) == f.default)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _build(cls, raw: dict):
    """A record of ``cls`` from its JSON object (keys it does not know are left out); a TypeError where a
    value does not fit its field's plain type (a report edited by hand: ``"median": "fast"``)."""
    annotations = {f.name: f.type for f in fields(cls)}
    for key, value in raw.items():
        if key in annotations and not _fits(value, annotations[key]):
            raise TypeError(f"{key!r} is {value!r}, where {annotations[key]} belongs")
    return cls(**{k: v for k, v in raw.items() if k in annotations})


#: The plain types a record's fields are checked against when read (:func:`_fits`).
_PLAIN = {"float": (int, float), "int": (int,), "str": (str,), "bool": (bool,)}


def _fits(value, annotation: str) -> bool:
    """Whether a JSON value fits a field annotated ``annotation`` as far as plain types go: numbers,
    strings, booleans, lists of numbers, ``None`` where the annotation allows it; other values are
    taken as they are (their records check them)."""
    kinds = {k.strip() for k in annotation.split("|")}
    if value is None:
        return "None" in kinds or not kinds & (_PLAIN.keys() | {"list[float]"})
    if "list[float]" in kinds:
        return isinstance(value, list) and all(_fits(v, "float") for v in value)
    plain = kinds & _PLAIN.keys()
    return not plain or any(isinstance(value, _PLAIN[k]) and (k == "bool" or not isinstance(value, bool))
                            for k in plain)


@dataclass(kw_only=True)
class Measured:
    """Items per second of timed windows (``rates``, one per repeat), with their median, min and max
    rounded to two places."""

    name: str
    label_mode: str | None = None
    rates: list[float]
    unit: str = "img/s"
    extra: dict = field(default_factory=dict)
    median: float
    min: float
    max: float

    @staticmethod
    def summary(rates) -> dict:
        """The rates (as a list) and their median, min and max, as a record holds them."""
        rates = [float(r) for r in rates]
        return {"rates": rates, "median": round(statistics.median(rates), 2), "min": round(min(rates), 2),
                "max": round(max(rates), 2)}


@dataclass(kw_only=True)
class Ceiling(Measured):
    """A decode ceiling: all cores (or nvJPEG) doing nothing but read and decode, in ``unit``."""

    @classmethod
    def measured(cls, key: str, rates, unit: str) -> Ceiling:
        """The ceiling stored under ``key`` (``cpu_decode_pairs``...) from its rates."""
        return cls(name=key.replace("_", "-"), unit=unit, **cls.summary(rates))


@dataclass(frozen=True)
class FigureKey:
    """What names a figure of a report, as :class:`Figure` holds it: its backend, labels, data and
    augmentation ("none" or "full"). A warning about a figure and a ratio between two name them so."""

    name: str
    label_mode: str | None
    data: Data = Data.ORIGINAL
    augment: str = "none"

    def __post_init__(self):
        object.__setattr__(self, "data", Data(self.data))  # (read from JSON: its value)

    @property
    def what(self) -> str:
        """How the figure is named as it is measured and in its warnings: ``<backend> / <labels> / <data>``,
        then `` / augmented`` where it is."""
        return f"{self.name} / {self.label_mode} / {self.data}" + (" / augmented" if self.augment == "full" else "")


@dataclass(kw_only=True)
class Figure(Measured):
    """One backend's throughput on some ``data`` (one of :data:`DATA`), with labels ``label_mode`` and
    ``augment`` ("none" or "full"), read ``via`` a product; ``noisy`` when its repeats spread too much
    to divide by, and its share of the ceiling that bounds it (None where no share can be read), whose key
    is ``ceiling`` (None in reports older than it)."""

    data: Data = Data.ORIGINAL
    via: str | None = None
    augment: str = "none"
    noisy: bool = False
    fraction_of_ceiling: float | None = None
    ceiling: str | None = None

    def __post_init__(self):
        self.data = Data(self.data)  # (read from JSON: its value; one not known refuses the report)

    @property
    def key(self) -> FigureKey:
        """What names this figure (:class:`FigureKey`)."""
        return FigureKey(self.name, self.label_mode, self.data, self.augment)


class About(ValueEnum):
    """What a :class:`BenchWarning` is about: a figure, a decode ceiling, the expert's pipeline left out on
    some data, or the run as a whole (a stage breakdown's warning, a backend left out, an older report's
    warning of no known form: its text names what it is about)."""

    FIGURE = "figure"
    CEILING = "ceiling"
    EXPERT = "expert"
    RUN = "run"


#: The field of a :class:`BenchWarning` that names its subject, per :class:`About`: the figure's key, the
#: ceiling's key (:func:`ceiling_key`), the data the expert was left out on; none for the run.
SUBJECT_FIELD = {About.FIGURE: "figure", About.CEILING: "ceiling", About.EXPERT: "data", About.RUN: None}


@dataclass(frozen=True, kw_only=True)
class BenchWarning:
    """A warning of the report: what it is ``about``, named by the one field :data:`SUBJECT_FIELD` gives it
    (the others None), and its ``text``, said after the subject (``line``). What reads a warning (``report
    --data``, the bench giving one once) reads these fields, never the text."""

    about: About
    figure: FigureKey | None = _optional()
    ceiling: str | None = _optional()
    data: Data | None = _optional()
    text: str

    def __post_init__(self):
        """Values read from JSON made records; ValueError where the fields set are not those ``about`` names."""
        about = About(self.about)
        object.__setattr__(self, "about", about)
        if isinstance(self.figure, dict):
            object.__setattr__(self, "figure", _build(FigureKey, self.figure))
        if self.data is not None:
            object.__setattr__(self, "data", Data(self.data))
        named = {name for name in ("figure", "ceiling", "data") if getattr(self, name) is not None}
        if named != {SUBJECT_FIELD[about]} - {None}:
            raise ValueError(f"a warning about the {about} names {', '.join(sorted(named)) or 'nothing'}")

    @property
    def subject(self) -> str | None:
        """What the warning is about, as the report names it; None for the run (its text names it)."""
        if self.about is About.FIGURE:
            return self.figure.what
        if self.about is About.CEILING:
            return f"ceiling {self.ceiling}"
        return f"{EXPERT} on {self.data}" if self.about is About.EXPERT else None

    @property
    def line(self) -> str:
        """The warning as the report says it: ``<subject>: <text>``, or the text alone for the run."""
        subject = self.subject
        return self.text if subject is None else f"{subject}: {self.text}"

    @property
    def on_data(self) -> set[Data]:
        """The data the warning is about (``report --data`` keeps it with them): a figure's, the data a
        ceiling bounds (:func:`ceiling_data`), the data the expert was left out on; for the run, the original
        pairs, on which the bench measures its breakdowns."""
        if self.about is About.FIGURE:
            return {self.figure.data}
        if self.about is About.CEILING:
            return ceiling_data(self.ceiling)
        return {self.data} if self.about is About.EXPERT else {Data.ORIGINAL}


class RatioKind(ValueEnum):
    """Which two figures a :class:`Ratio` divides, in the order the report says them: a figure augmented over
    the same without (``--augment``); on TFRecords over the same pairs as files, whichever of the two the
    original pairs are (``--tfrecord``); from a bucket over its local copy; any figure without augmentation
    over the expert's on the original pairs with the same labels."""

    AUGMENT_KEPT = "augment_kept"
    TFRECORD_VS_FILES = "tfrecord_vs_files"
    BUCKET_VS_LOCAL = "bucket_vs_local"
    VS_EXPERT = "vs_expert"

    def divisor(self, key: FigureKey) -> FigureKey | None:
        """The figure that the figure ``key`` is divided by in a ratio of this kind; None where no ratio of
        this kind divides it. The one statement of how each kind pairs figures: the bench builds its ratios
        by it, and the migration of older reports names their divisors by it."""
        if self is RatioKind.AUGMENT_KEPT:
            return replace(key, augment="none") if key.data is Data.ORIGINAL and key.augment == "full" else None
        if key.augment != "none":
            return None
        if self is RatioKind.VS_EXPERT:
            expert = FigureKey(EXPERT, key.label_mode)
            return None if key == expert else expert
        under = ({Data.ORIGINAL: Data.LOCAL} if self is RatioKind.BUCKET_VS_LOCAL else
                 {Data.TFRECORD: Data.ORIGINAL, Data.ORIGINAL: Data.FILES})
        return replace(key, data=under[key.data]) if key.data in under else None


@dataclass(frozen=True, kw_only=True)
class Ratio:
    """A ratio between two figures of one run, as its ``kind`` pairs them: the median of the figure ``over``
    divided by that of the figure ``under``, ``value`` (:meth:`Ratio.between`, the one place it is computed)."""

    kind: RatioKind
    over: FigureKey
    under: FigureKey
    value: float

    def __post_init__(self):
        """Values read from JSON made records."""
        object.__setattr__(self, "kind", RatioKind(self.kind))
        for side in ("over", "under"):
            if not isinstance(getattr(self, side), FigureKey):
                object.__setattr__(self, side, _build(FigureKey, getattr(self, side)))

    @classmethod
    def between(cls, kind: RatioKind, over: Figure, under: Figure) -> Ratio:
        """The ratio of ``kind`` of the figure ``over`` to the figure ``under``: their medians' quotient,
        rounded to three places."""
        return cls(kind=kind, over=over.key, under=under.key, value=round(over.median / under.median, 3))


@dataclass(kw_only=True)
class StageCut:
    """A stage of the DALI graph: the rate of the graph cut after it, and its cost in ms per image (the
    growth of wall time per image; below zero it is noise). ``cumulative_img_per_s`` is None for a
    step timed outside the graph (TensorFlow's one-hot)."""

    stage: str
    cumulative_img_per_s: float | None
    ms_per_img: float


@dataclass(kw_only=True)
class StageTime:
    """A stage timed on its own (the OpenCV kernels, one thread): ms per image."""

    stage: str
    ms_per_img: float


@dataclass(kw_only=True)
class TrainRow:
    """A backend feeding a small U-Net: ms per step fed, ms per step on its floor, and the share of a
    step spent waiting for input, ``1 - floor / step`` (at least 0). ``floor_cached``: an older
    report's floor, a batch cached by tf.data and copied to the device every step (no floor)."""

    step_ms: float
    floor_ms: float
    waiting_share: float
    floor_cached: bool = _optional(False)


@dataclass(kw_only=True)
class Machine:
    """Where a report was measured (see :func:`daliloader.bench.machine.machine_info`)."""

    host: str | None = None
    platform: str | None = None
    python: str | None = None
    cpu_count: int | None = None
    cpu: str | None = None
    gpu: list[str] | None = None  # nvidia-smi's lines: name, driver, memory
    versions: dict = field(default_factory=dict)
    dali_build: str | None = None
    daliloader: str | None = None


@dataclass(kw_only=True)
class Dataset:
    """The pairs measured: the folder of the images, how many pairs and classes, and the copies made
    of them (the prepared copy; the same pairs in the other container)."""

    images: str | None = None
    pairs: int | None = None
    classes: int | None = None
    prepared: str | None = _optional()
    tfrecord: str | None = _optional()
    files: str | None = _optional()
    local: str | None = _optional()  # data in a bucket: its local copy, measured beside it


@dataclass(kw_only=True)
class RunSettings:
    """The settings a report was measured with, as resolved (the workers and backends used). ``mask_cache``:
    whether the loaders read the original pairs' masks as class indices from daliloader's mask cache (the
    references decode the masks themselves, every epoch); None where a report did not record it (one older
    than schema 3 whose ceilings show no cache)."""

    batch_size: int
    image_size: list[int]
    crop: str = "random"
    label_modes: list[str] = field(default_factory=list)
    seconds: float
    repeats: int
    workers: int | None = None
    backends: list[str] = field(default_factory=list)
    augment: dict | None = _optional()
    mask_cache: bool | None = None


@dataclass(kw_only=True)
class Report:
    """A bench report (see the module's docstring); ``ratios`` between its figures (:class:`RatioKind`: what
    augmentation keeps with ``--augment``, TFRecords against files with ``--tfrecord``, a bucket against its
    local copy, each figure against the expert's where the expert was measured); ``train`` only where
    ``--train`` asked for it; ``memory_mb`` (each loader's peak resident memory, alone in a process, MB)
    where it was measured; ``started``, when the run began (UTC, ISO 8601; reports older than it have
    none)."""

    schema: int = SCHEMA
    machine: Machine
    started: str | None = _optional()
    dataset: Dataset = field(default_factory=Dataset)
    settings: RunSettings
    method: str = METHOD
    ceilings: dict[str, Ceiling] = field(default_factory=dict)
    results: list[Figure] = field(default_factory=list)
    stages: dict[str, list[StageCut | StageTime]] = field(default_factory=dict)
    warnings: list[BenchWarning] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    memory_mb: dict[str, float] | None = _optional()
    train: dict[str, TrainRow] | None = _optional()

    def to_json(self) -> dict:
        """The report as ``bench --json`` writes it."""
        return plain(self)

    @classmethod
    def from_json(cls, raw: dict) -> Report:
        """A report from its JSON object, of any version (:func:`migrate`); DataError if it is none."""
        if not isinstance(raw, dict):  # (JSON may hold a number or a list)
            raise DataError("not a bench report (not a JSON object)")
        missing = [key for key in REQUIRED if key not in raw]
        if missing:
            raise DataError(f"not a bench report (it lacks {', '.join(missing)})")
        try:
            return cls._parse(migrate(raw))
        except DataError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DataError(f"not a bench report (malformed: {type(e).__name__} {e})") from None

    @classmethod
    def _parse(cls, raw: dict) -> Report:
        train = raw.get("train")
        return cls(schema=raw["schema"], machine=_build(Machine, raw["machine"]),
                   dataset=_build(Dataset, raw["dataset"]), settings=_build(RunSettings, raw["settings"]),
                   method=raw["method"], ceilings={k: _build(Ceiling, c) for k, c in raw["ceilings"].items()},
                   results=[_build(Figure, r) for r in raw["results"]],
                   stages={name: [_stage_row(row) for row in rows] for name, rows in raw["stages"].items()},
                   warnings=[_build(BenchWarning, w) for w in raw["warnings"]],
                   ratios=[_build(Ratio, r) for r in raw["ratios"]], memory_mb=raw.get("memory_mb"),
                   train=None if train is None else {name: _build(TrainRow, row) for name, row in train.items()})

    def only(self, data=None) -> Report:
        """The report keeping only what was measured on ``data`` (names of :data:`DATA`; None: all): the
        figures, the ceilings that bound them (the original pairs in either container are the same bytes:
        the same ceilings), the ratios whose figure divided is kept, the warnings about that data
        (``BenchWarning.on_data``), and, where the original pairs are asked for, what was measured on them
        alone (the stage breakdowns, training, memory)."""
        if data is None:
            return self
        wanted = {Data(d) for d in data}
        results = [r for r in self.results if r.data in wanted]
        kept = {r.key for r in results}
        original = {} if Data.ORIGINAL in wanted else dict(stages={}, train=None, memory_mb=None)
        return replace(self, results=results,
                       ceilings={k: c for k, c in self.ceilings.items() if wanted & ceiling_data(k)},
                       warnings=[w for w in self.warnings if wanted & w.on_data],
                       ratios=[q for q in self.ratios if q.over in kept], **original)

    def ratios_of(self, kind: RatioKind | str) -> list[Ratio]:
        """The report's ratios of ``kind``, in their order."""
        return [q for q in self.ratios if q.kind is RatioKind(kind)]

    def figure(self, key: FigureKey) -> Figure | None:
        """The figure named ``key``; None where the report has none."""
        return next((r for r in self.results if r.key == key), None)

    def divided(self, ratio: Ratio) -> tuple[Figure | None, Figure | None]:
        """The figure a ratio divides and the one it divides by (None where the report lacks it, as one
        that ``only`` left out)."""
        return self.figure(ratio.over), self.figure(ratio.under)


def ceiling_key(decodes: str, data: Data = Data.ORIGINAL, cached: bool = False) -> str:
    """The key a ceiling is stored under: what it ``decodes`` (``cpu_decode_pairs``, ``nvjpeg_images``...) on
    ``data`` (the prepared copy's or the original pairs'), ``cached`` where the masks were read from the mask
    cache."""
    return decodes + (PREPARED_KEY if data.prepared else CACHED_KEY if cached else "")


def ceiling_data(key: str) -> set[Data]:
    """The data a ceiling bounds: the prepared copy's files and packs, or the original pairs' bytes."""
    return {d for d in Data if d.prepared == on_prepared(key)}


def on_prepared(key: str) -> bool:
    """Whether a ceiling was measured on the prepared copy (:func:`ceiling_key`)."""
    return key.endswith(PREPARED_KEY)


def _stage_row(row: dict) -> StageCut | StageTime:
    """A cut of the DALI graph (it has a cumulative rate, maybe None) or a stage timed on its own."""
    return _build(StageCut if "cumulative_img_per_s" in row else StageTime, row)


def read(path) -> Report:
    """The report in the JSON file ``path``, of any version; DataError naming the file if it holds none."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; {WHAT_TO_PASS}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not a JSON report ({e}); {WHAT_TO_PASS}") from None
    try:
        return Report.from_json(raw)
    except DataError as e:
        raise DataError(f"{path}: {e}; {WHAT_TO_PASS}") from None


# ---------------------------------------------------------------- older reports
def migrate(raw: dict) -> dict:
    """A report's JSON object in the current form (:data:`SCHEMA`), from any older one; ``raw`` is left as
    it was. Each version is brought to the next: version 1 by ``_from_v1``, version 2 by ``_from_v2``,
    version 3 by ``_from_v3``."""
    version = raw.get("schema", 1)
    if not isinstance(version, int) or version < 1:
        raise DataError(f"not a bench report (its schema is {version!r})")
    if version > SCHEMA:
        raise DataError(f"a report of schema {version}, which a newer daliloader wrote (this one reads up to "
                        f"{SCHEMA}): upgrade daliloader")
    if version == 1:
        raw = _from_v1(raw)
    if version <= 2:
        raw = _from_v2(raw)
    if version <= 3:
        raw = _from_v3(raw)
    return raw


#: The forms of a version-3 warning's text that name what it is about (``_warning_v3``): a figure's, a
#: ceiling's, the expert left out on some data. Read in older reports only: the bench writes records.
_FIGURE_V3 = re.compile(r"([^ /]+) / ([^ /]+) / (\w+)( / augmented)?: (.*)", re.DOTALL)
_CEILING_V3 = re.compile(r"ceiling (\w+): (.*)", re.DOTALL)
_EXPERT_V3 = re.compile(rf"{re.escape(EXPERT)} on (\w+): (not measured.*)", re.DOTALL)


def _from_v3(raw: dict) -> dict:
    """Version 3 to 4: each warning was its text, its subject said at its start (``_warning_v3``); the
    ratios were four objects (``augment_kept``, ``tfrecord_vs_files``, ``bucket_vs_local``, ``vs_expert``)
    of numbers keyed by ``"<backend> <labels>"``, and for ``vs_expert`` `` <data>`` where not the original
    pairs (``_ratio_v3``)."""
    ratios = [_ratio_v3(raw["results"], kind, key, value)
              for kind in RatioKind for key, value in (raw.get(kind.value) or {}).items()]
    kept = {k: v for k, v in raw.items() if k not in {kind.value for kind in RatioKind}}
    return {**kept, "schema": 4, "warnings": [_warning_v3(text) for text in raw["warnings"]], "ratios": ratios}


def _warning_v3(text: str) -> dict:
    """A version-3 warning as a record's JSON: a figure's (``<backend> / <labels> / <data>[ / augmented]:
    ...``), a ceiling's (``ceiling <key>: ...``), the expert left out (``tf-expert on <data>: not measured:
    ...``); any other (a breakdown's ``stages of ...``, a backend left out) is about the run, its text whole."""
    figure, ceiling, expert = (form.fullmatch(text) for form in (_FIGURE_V3, _CEILING_V3, _EXPERT_V3))
    if figure and figure[3] in DATA:
        key = FigureKey(figure[1], figure[2], figure[3], "full" if figure[4] else "none")
        return {"about": About.FIGURE.value, "figure": plain(key), "text": figure[5]}
    if ceiling:
        return {"about": About.CEILING.value, "ceiling": ceiling[1], "text": ceiling[2]}
    if expert and expert[1] in DATA:
        return {"about": About.EXPERT.value, "data": expert[1], "text": expert[2]}
    return {"about": About.RUN.value, "text": text}


def _ratio_v3(results: list[dict], kind: RatioKind, key: str, value: float) -> dict:
    """A version-3 ratio (its ``kind``, ``key`` and ``value``) as a record's JSON, with the two figures it
    divides: the figure its key names (augmented, for ``augment_kept``; on the data the key ends with, for
    ``vs_expert``; for ``tfrecord_vs_files``, the figure on ``tfrecord`` where the report has one, else the
    original pairs, which were then the TFRecords), over its divisor (``RatioKind.divisor``)."""
    name, mode, *data = key.split(" ")
    augment = "full" if kind is RatioKind.AUGMENT_KEPT else "none"
    over = FigureKey(name, mode, data[0] if data else Data.ORIGINAL, augment)
    if kind is RatioKind.TFRECORD_VS_FILES and replace(over, data=Data.TFRECORD) in map(_figure_key_v3, results):
        over = replace(over, data=Data.TFRECORD)
    return {"kind": kind.value, "over": plain(over), "under": plain(kind.divisor(over)), "value": value}


def _figure_key_v3(figure: dict) -> FigureKey:
    """What names a figure of a version-3 report (or one brought to it)."""
    return FigureKey(figure["name"], figure["label_mode"], figure.get("data", "original"),
                     figure.get("augment", "none"))


def _from_v2(raw: dict) -> dict:
    """Version 2 to 3: the settings did not say whether the loaders read the mask cache. Where the ceilings
    include one of the cache's (``..._cached``) they did; otherwise it is not known (None)."""
    cached = any(key.endswith(CACHED_KEY) for key in raw["ceilings"]) or None
    return {**raw, "schema": 3, "settings": {"mask_cache": cached, **raw["settings"]}}


def _from_v1(raw: dict) -> dict:
    """Version 1 (no "schema") to 2: the packs' figures said "shards"; the training floor was a
    tf.data-cached batch under ``cached_batch_floor_ms``; figures may lack ``data``, ``augment``,
    ``via``, ``noisy`` and ``fraction_of_ceiling``, ceilings their ``unit`` and ``name``, the machine
    its DALI build and daliloader's version, and the report its dataset, method, stages and warnings."""
    train = raw.get("train")
    return {"schema": 2, "machine": {"dali_build": None, "daliloader": None, "gpu": None, **raw["machine"]},
            "dataset": raw.get("dataset", {}),
            "settings": {"workers": None, "backends": [], **raw["settings"]},
            "method": raw.get("method", METHOD),
            "ceilings": {key: _ceiling_v1(key, c) for key, c in raw["ceilings"].items()},
            "results": [_figure_v1(r) for r in raw["results"]], "stages": raw.get("stages", {}),
            "warnings": raw.get("warnings", []),
            **{k: raw[k] for k in ("augment_kept", "tfrecord_vs_files") if k in raw},
            **({} if train is None else {"train": {name: _train_row_v1(row) for name, row in train.items()}})}


def _ceiling_v1(key: str, ceiling: dict) -> dict:
    what = key.removesuffix(PREPARED_KEY).rsplit("_", 1)[-1]  # cpu_decode_pairs: pairs; nvjpeg_images: images
    return {"name": key.replace("_", "-"), "label_mode": None, "unit": f"{what}/s", "extra": {}, **ceiling}


def _figure_v1(figure: dict) -> dict:
    data = figure.get("data", "original")
    return {"via": None, "augment": "none", "noisy": noisy(figure), "fraction_of_ceiling": None, **figure,
            "data": "packs" if data == "shards" else data}


def _train_row_v1(row: dict) -> dict:
    if "floor_ms" in row:
        return row
    row = dict(row, floor_ms=row["cached_batch_floor_ms"], floor_cached=True)
    del row["cached_batch_floor_ms"]
    return row
