"""The bench's report as typed records, and how it is written to and read from JSON.

A report is a :class:`Report`: the machine, the dataset, the settings, the decode ceilings, one
:class:`Figure` per backend, data, labels and augmentation, the stage breakdowns and the training rows.
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
#: version 2 did not record whether the loaders read the mask cache (``RunSettings.mask_cache``).
SCHEMA = 3


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
#: The report's ratios between two of its figures (see :meth:`Report.divided`), in the order they are said.
RATIOS = ("augment_kept", "tfrecord_vs_files", "bucket_vs_local", "vs_expert")
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
    """A bench report (see the module's docstring); ``augment_kept``, ``tfrecord_vs_files`` and
    ``train`` only where ``--augment``, ``--tfrecord`` and ``--train`` asked for them; ``bucket_vs_local``
    (each rate from a bucket over the rate from its local copy) where the data was in a bucket; ``vs_expert`` (each
    figure over the expert's ``tf.data`` pipeline on the original pairs, same labels, same run) where the
    expert was measured; ``memory_mb`` (each loader's peak resident memory, alone in a process, MB) where
    it was measured; ``started``, when the run began (UTC, ISO 8601; reports older than it have none)."""

    schema: int = SCHEMA
    machine: Machine
    started: str | None = _optional()
    dataset: Dataset = field(default_factory=Dataset)
    settings: RunSettings
    method: str = METHOD
    ceilings: dict[str, Ceiling] = field(default_factory=dict)
    results: list[Figure] = field(default_factory=list)
    stages: dict[str, list[StageCut | StageTime]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    augment_kept: dict[str, float] | None = _optional()
    tfrecord_vs_files: dict[str, float] | None = _optional()
    bucket_vs_local: dict[str, float] | None = _optional()
    vs_expert: dict[str, float] | None = _optional()
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
                   warnings=list(raw["warnings"]), augment_kept=raw.get("augment_kept"),
                   tfrecord_vs_files=raw.get("tfrecord_vs_files"), bucket_vs_local=raw.get("bucket_vs_local"),
                   vs_expert=raw.get("vs_expert"),
                   memory_mb=raw.get("memory_mb"),
                   train=None if train is None else {name: _build(TrainRow, row) for name, row in train.items()})

    def only(self, data=None) -> Report:
        """The report keeping only what was measured on ``data`` (names of :data:`DATA`; None: all): the
        figures, the ceilings that bound them (the original pairs in either container are the same bytes:
        the same ceilings), the ratios of those figures (:meth:`divided`), the warnings about them
        (:func:`warning_data`), and, where the original pairs are asked for, what was measured on them
        alone (the stage breakdowns, training, memory)."""
        if data is None:
            return self
        wanted = {Data(d) for d in data}
        kept = {kind: self._ratios_on(kind, wanted) for kind in RATIOS}
        if Data.ORIGINAL not in wanted:
            kept.update(stages={}, train=None, memory_mb=None)
        return replace(self, results=[r for r in self.results if r.data in wanted],
                       ceilings={k: c for k, c in self.ceilings.items() if wanted & ceiling_data(k)},
                       warnings=[w for w in self.warnings if wanted & warning_data(w)], **kept)

    def _ratios_on(self, kind: str, wanted: set) -> dict[str, float] | None:
        """The ratios of ``kind`` whose figure (the one divided) is on the data ``wanted``."""
        ratios = getattr(self, kind)
        if ratios is None:
            return None
        return {key: ratio for key, ratio in ratios.items()
                if (figure := self.divided(kind, key)[0]) is not None and figure.data in wanted}

    def figure(self, name: str, label_mode: str, data: Data | str = Data.ORIGINAL,
               augment: str = "none") -> Figure | None:
        """The figure of backend ``name`` with those labels, data and augmentation; None where there is none."""
        return next((r for r in self.results if (r.name, r.label_mode, r.data, r.augment) == (
            name, label_mode, data, augment)), None)

    def divided(self, kind: str, key: str) -> tuple[Figure | None, Figure | None]:
        """The figure a ratio speaks of and the one it is divided by (None where the report lacks it), for
        the ratio ``key`` of ``kind`` (one of :data:`RATIOS`; keys ``"<backend> <labels>"``, for
        ``vs_expert`` with `` <data>`` where not the original pairs): augmented over not, on TFRecords
        over files (whichever the original pairs are), from the bucket over its local copy, over the
        expert's on the original pairs."""
        name, mode, *data = key.split(" ")
        if kind == "vs_expert":
            return self.figure(name, mode, data[0] if data else Data.ORIGINAL), self.figure(EXPERT, mode)
        if kind == "augment_kept":
            return self.figure(name, mode, augment="full"), self.figure(name, mode)
        if kind == "bucket_vs_local":
            return self.figure(name, mode), self.figure(name, mode, Data.LOCAL)
        records = self.figure(name, mode, Data.TFRECORD)  # tfrecord_vs_files
        return (records, self.figure(name, mode)) if records is not None else (
            self.figure(name, mode), self.figure(name, mode, Data.FILES))


def ceiling_key(decodes: str, data: Data = Data.ORIGINAL, cached: bool = False) -> str:
    """The key a ceiling is stored under: what it ``decodes`` (``cpu_decode_pairs``, ``nvjpeg_images``...) on
    ``data`` (the prepared copy's or the original pairs'), ``cached`` where the masks were read from the mask
    cache."""
    return decodes + (PREPARED_KEY if data.prepared else CACHED_KEY if cached else "")


def ceiling_data(key: str) -> set[Data]:
    """The data a ceiling bounds: the prepared copy's files and packs, or the original pairs' bytes."""
    return {d for d in Data if d.prepared == on_prepared(key)}


def warning_data(text: str) -> set[str]:
    """The data a bench warning is about, from the forms the bench writes: a figure's (``"<backend> /
    <labels> / <data>[ / augmented]: ..."``), a ceiling's (``"ceiling <key> ..."``: :func:`ceiling_data`),
    the expert left out (``"tf-expert on <data>: not measured: ..."``); a breakdown's (``"stages of
    ..."``) and any other: the original pairs, where the bench measures them."""
    figure = re.match(r"[^ /]+ / [^ /]+ / (\w+)( / augmented)?: ", text)
    if figure:
        return {Data(figure[1])}
    ceiling = re.match(r"ceiling (\w+)", text)
    if ceiling:
        return ceiling_data(ceiling[1])
    skipped = re.match(rf"{re.escape(EXPERT)} on (\w+): not measured", text)
    return {Data(skipped[1])} if skipped else {Data.ORIGINAL}


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
    it was. Each version is brought to the next: version 1 by ``_from_v1``, version 2 by
    ``_from_v2``."""
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
    return raw


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
