"""Folders prepared by TensorFlow Datasets (what ``tfds.load`` reads), read without importing it.

A prepared TFDS dataset is a version folder, ``DATA_DIR/NAME[/CONFIG]/VERSION/``, holding
``dataset_info.json`` (the name, the splits, each split's shard lengths and file-name template),
``features.json`` (each feature's class and shape) and the splits' TFRecord shards
(``NAME-SPLIT.tfrecord-00000-of-00004``). Image features are stored as encoded bytes under their own
key (nested feature dicts join their keys with ``/``); a segmentation mask is an ``Image`` feature of
one channel, or of three where TFDS's dataset is published so (:data:`PUBLISHED`).

:func:`find` resolves what a user names (a version folder, a dataset folder holding versions, or
``"name[/config][:version]"`` under ``data_dir`` as ``tfds.load`` finds it), reads a split expression
in TFDS's grammar (``"train[:10%]+test"``, :func:`split_parts`) and gives the records it selects in the
order ``tfds.load(split=..., shuffle_files=False)`` yields them (:func:`read_order`). Metadata that is
malformed is a DataError naming the file and what is wrong, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import buckets
from .errors import DataError
from .tfrecord import FOOTER, HEADER, RecordProblem, Records

#: What TFDS calls its files.
INFO, FEATURES = "dataset_info.json", "features.json"
IMAGE_CLASS = "tensorflow_datasets.core.features.image_feature.Image"


@dataclass(frozen=True)
class Published:
    """How TFDS publishes a segmentation dataset: the catalogue name of its class table
    (:meth:`daliloader.classes.ClassMap.named`), the mask's feature where the features alone do not
    say it (an ``Image`` of three channels), and the channel of that colour mask that holds the class
    id (None: masks of one channel, read whole)."""

    classes: str
    mask_key: str | None = None
    mask_channel: int | None = None


#: TFDS's segmentation datasets: oxford_iiit_pet's trimaps, cityscapes' labelIds, scene_parse150's
#: annotations: its builder reads MIT's ``annotations_instance`` (the Places Challenge 2017 instance
#: release), RGB PNGs whose red channel is one of ADE20K's 100 instance categories (0: none) and green the
#: instance; not the 150 scene-parsing classes its name suggests.
PUBLISHED = {"oxford_iiit_pet": Published("oxford_iiit_pet"), "cityscapes": Published("cityscapes"),
             "scene_parse150": Published("ade20k-instances", mask_key="annotation", mask_channel=0)}
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
#: What reads as a TFDS name, ``name[/config][:version]``, rather than a path.
_NAME = re.compile(r"^[A-Za-z0-9_]+(/[\w.+-]+)?(:[\d.*]+)?$")
#: How ``tfds.load`` interleaves a split's shards (``tfds.ReadConfig``'s defaults): 16 files at once, 16
#: records from each in turn; one file after the other where ``dataset_info.json`` disables shuffling.
CYCLE_LENGTH, BLOCK_LENGTH = 16, 16
#: The fields TFDS fills in a split's ``filepathTemplate``.
TEMPLATE_FIELDS = ("DATASET", "SPLIT", "FILEFORMAT", "SHARD_INDEX", "NUM_SHARDS", "SHARD_X_OF_Y")
DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
#: TFDS's split grammar (``tensorflow_datasets/core/splits.py``): parts joined by ``+``, each a split
#: name with an optional ``[from:to]`` slice of records, percents or shards.
_ADDITION_SEP = re.compile(r"\s*\+\s*")
_SUB_SPEC = re.compile(r"^(?P<split_name>[\w-]+)(\[(?P<split_selector>[\d\w%:.-]+)\])?$")
_SLICE = re.compile(r"^((?P<val>-?[\d_.]+)(?P<unit>(?:%|shard))?)?$")
GRAMMAR = ("TFDS's split grammar: a split ('train'), a slice of its records ('train[10:20]', 'test[-5:]'), of "
           "its percents ('train[:10%]', rounded to the closest record), of its shards ('train[:2shard]', "
           "'train[1shard]'), 'all', or parts joined by '+' ('train[:50%]+test[:10]')")


@dataclass(frozen=True)
class SplitInfo:
    """One split as ``dataset_info.json`` describes it: its name, the records in each shard (None where
    an older TFDS gave only ``numShards``), its shard count and file-name template."""

    name: str
    lengths: tuple[int, ...] | None
    shards: int
    template: str


@dataclass(frozen=True)
class DatasetInfo:
    """What daliloader reads of ``dataset_info.json``, checked: the dataset's name and version, its
    file format, its splits (in the file's order) and whether TFDS reads its shards one after the
    other (``disableShuffling``)."""

    name: str
    version: str
    file_format: str
    splits: tuple[SplitInfo, ...]
    disable_shuffling: bool

    def split(self, name: str) -> SplitInfo | None:
        return next((s for s in self.splits if s.name == name), None)


@dataclass(frozen=True)
class ShardRead:
    """Records ``skip`` to ``skip + take`` of file ``file`` (an index into ``TFDSSplit.files``), as
    TFDS's file instructions say; ``take`` None: every record (an older folder, of unknown lengths)."""

    file: int
    skip: int
    take: int | None


@dataclass(frozen=True)
class TFDSFeature:
    """A feature of ``features.json``: its class (the last part of ``pythonClassName``) and, for an
    ``Image``, its channels (None where its shape gives none, -1 where unknown)."""

    kind: str
    image: bool
    channels: int | None = None


@dataclass(frozen=True)
class TFDSSplit:
    """The records a split expression selects in a prepared TFDS dataset: its files (each once, in the
    order TFDS's file instructions first name them), what to read of each (``reads``, in TFDS's order),
    the records ``dataset_info.json`` gives each file (``lengths``, None where unknown), how many files
    ``tfds.load`` interleaves at once (``cycle``), the image and mask keys, the dataset's name and
    version, the splits it has, the catalogue name of its class table (None where TFDS's dataset has
    none that daliloader knows) and the channel of colour masks that holds the class (None: masks read
    whole)."""

    name: str
    version: str
    folder: Path
    split: str
    files: tuple[str, ...]
    keys: Records
    splits: tuple[str, ...]
    classes: str | None
    reads: tuple[ShardRead, ...] = ()
    lengths: tuple[int | None, ...] = ()
    cycle: int = CYCLE_LENGTH
    mask_channel: int | None = None

    def in_order(self, pairs: list[tuple]) -> list[tuple]:
        """``pairs`` (the RecordParts of the files' records, :func:`daliloader.tfrecord.record_pairs`) that
        the split expression selects, in the order ``tfds.load(split=..., shuffle_files=False)`` yields
        them; records that are no pair (damaged, without the keys) are left out."""
        if any(read.take is None for read in self.reads):  # unknown lengths: whole files, one after the other
            return [p for read in self.reads for p in pairs if p[0].file == self.files[read.file]]
        by_record = {(p[0].file, p[0].record): p for p in pairs}
        wanted = ((self.files[file], record) for file, record in read_order(self.reads, self.cycle))
        return [by_record[key] for key in wanted if key in by_record]

    def relevant(self, problems: list[RecordProblem]) -> list[RecordProblem]:
        """The problems of records before the end of what is read of their file: those that stop or spoil
        the reading of the split expression's records."""
        ends = {}
        for read in self.reads:
            end = float("inf") if read.take is None else read.skip + read.take
            ends[self.files[read.file]] = max(ends.get(self.files[read.file], 0), end)
        return [p for p in problems if p.record < ends.get(p.file, 0)]

    def check_lengths(self, scans) -> None:
        """Refuse a file whose records are not as many as ``dataset_info.json`` says (``scans``: the files'
        :class:`~daliloader.tfrecord.Scan`, in ``files`` order; a damaged one is left to its problems)."""
        for scan, length in zip(scans, self.lengths):
            if length is not None and not scan.problems and len(scan.offsets) != length:
                raise DataError(f"{scan.file} holds {len(scan.offsets)} records, but {self.folder / INFO} gives it "
                                f"{length}: the folder is inconsistent (a shard replaced or copied from another "
                                "preparation?); prepare the dataset again")


def data_dir(given: str | os.PathLike | None) -> Path:
    """Where ``tfds.load`` looks: ``data_dir``, else ``$TFDS_DATA_DIR``, else ``~/tensorflow_datasets``."""
    return Path(given or os.environ.get("TFDS_DATA_DIR") or Path.home() / "tensorflow_datasets").expanduser()


def find(path_or_name: str | os.PathLike, split: str = "train", data_dir_: str | os.PathLike | None = None,
         image_key: str | None = None, mask_key: str | None = None, mask_channel: int | None = None) -> TFDSSplit:
    """The records that the split expression ``split`` selects in the TFDS dataset at ``path_or_name``
    (see the module's docstring), and its image and mask features, or those named; ``mask_channel``
    (the channel of colour masks that holds the class) also lets a mask feature of three channels be
    found, and replaces the published one."""
    folder = version_folder(path_or_name, data_dir_)
    info = dataset_info(folder)
    if info.file_format != "tfrecord":
        raise DataError(f"{folder} stores its examples as {info.file_format}, not TFRecord: prepare it again with "
                        "tfds.builder(...).download_and_prepare(file_format='tfrecord')")
    keys, channel = image_and_mask(folder, info.name, image_key, mask_key, mask_channel)
    files, reads, lengths = select(folder, info, split)
    published = PUBLISHED.get(info.name)
    return TFDSSplit(info.name, info.version, folder, split, files, keys, tuple(s.name for s in info.splits),
                     published.classes if published else None, reads, lengths,
                     1 if info.disable_shuffling else CYCLE_LENGTH, channel)


def resolve(data: str | os.PathLike, data_dir_: str | os.PathLike | None = None) -> Path:
    """What a command's DATA names: a TFDS dataset ``name[/config][:version]`` under ``data_dir_``
    (:func:`data_dir`) where one is prepared there and ``data_dir_`` is given, else the path itself where
    it exists or reads as no TFDS name (a glob, an absolute path), else that TFDS name's version folder (a
    name not prepared is refused, listing what the data_dir holds)."""
    name, _, version = str(data).partition(":")
    under = data_dir(data_dir_) / name / version if version else data_dir(data_dir_) / name
    path = Path(data).expanduser()
    if not _NAME.match(str(data)):
        return path
    if data_dir_ is not None and under.is_dir():
        return version_folder(data, data_dir_)
    if path.exists():
        return path
    if not (data_dir(data_dir_) / name).is_dir():  # no folder here, no dataset of that name there
        raise _not_prepared(str(data), data_dir(data_dir_), where="--data-dir DIR")
    return version_folder(data, data_dir_)


def version_folder(path_or_name: str | os.PathLike, data_dir_: str | os.PathLike | None = None) -> Path:
    """The version folder that ``path_or_name`` names: itself, the newest version inside a dataset (or
    config) folder, or ``name[/config][:version]`` under :func:`data_dir`."""
    path = named_folder(path_or_name, data_dir_)
    if (path / INFO).is_file():
        return path
    versions = _versions(path)
    if versions:
        return path / versions[-1]
    configs = sorted(p.name for p in path.iterdir() if p.is_dir() and any(map(_is_version, p.iterdir())))
    if configs:
        raise DataError(f"{path} holds {', '.join(configs)}, each with version folders: the configs of a TFDS dataset, "
                        f"or the datasets of a TFDS data_dir. Name one ({path / configs[0]})")
    raise DataError(f"{path} is no prepared TFDS dataset: no {INFO} in it nor in a version folder (such as 1.0.0/) "
                    "inside it")


def named_folder(path_or_name: str | os.PathLike, data_dir_: str | os.PathLike | None) -> Path:
    """The folder ``path_or_name`` names: ``name[/config][:version]`` under :func:`data_dir` where that
    is a folder and data_dir is given (or the path is none), else the path itself; neither is refused,
    listing the versions (or configs) prepared of that name, or what the data_dir holds. A folder in a
    bucket (``s3://``) is listed once and read as a :class:`~daliloader.buckets.BucketPath`."""
    if buckets.is_url(path_or_name):
        found = buckets.tree(path_or_name)
        if not found.is_dir():
            raise DataError(f"{path_or_name} does not exist or is not a folder")
        return found
    path = Path(path_or_name).expanduser()
    name, _, version = str(path_or_name).partition(":")
    root = data_dir(data_dir_)
    if "*" in version:  # as tfds.load: the newest prepared version that the pattern matches
        version = _newest_matching(root / name, version) or version
    under = root / name / version if version else root / name
    if under.is_dir() and (data_dir_ is not None or not path.is_dir()):
        return under
    if path.is_dir():
        return path
    raise _not_prepared(str(path_or_name), root)


def _newest_matching(dataset: Path, pattern: str) -> str | None:
    """The newest version folder of ``dataset`` that ``pattern`` (``4.*.*``, ``4.0.*``: a ``*`` for any
    number) matches, as ``tfds.load("name:4.*.*")`` picks it; None where none does."""
    wanted = pattern.split(".")
    matching = [v for v in _versions(dataset) if len(v.split(".")) == len(wanted)
                and all(w in ("*", part) for w, part in zip(wanted, v.split(".")))] if dataset.is_dir() else []
    return matching[-1] if matching else None


def _not_prepared(given: str, root: Path, where: str = "data_dir=") -> DataError:
    """Why ``name[/config][:version]`` names nothing under ``root``: the versions (or configs) prepared of
    that name, or what ``root`` holds; ``where``: how the caller names the data_dir (the command line:
    ``--data-dir DIR``)."""
    name, _, version = given.partition(":")
    if version and (root / name).is_dir():
        versions = _versions(root / name) or ["none (a dataset of configs? name one: name/config:version)"]
        return DataError(f"no version {version} of TFDS dataset {name!r} is prepared under {root}; its versions: "
                         f"{', '.join(versions)}. Name one of them, or prepare that version")
    parent = (root / name).parent
    if "/" in name and parent.is_dir() and parent != root:
        return _no_config(name, parent, root)
    held = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "downloads") if root.is_dir() else []
    return DataError(f"no TFDS dataset {given!r}: no folder of that name exists, and none is prepared under {root} "
                     f"({', '.join(held) or 'which holds no dataset'}). daliloader reads prepared datasets only: "
                     f"prepare it first (tfds.builder(name, data_dir=...).download_and_prepare()), or pass {where}")


def _no_config(name: str, dataset: Path, root: Path) -> DataError:
    """``name`` (``dataset/config``) names a config that ``dataset`` does not hold: its configs listed."""
    configs = sorted(p.name for p in dataset.iterdir() if p.is_dir() and _versions(p))
    return DataError(f"TFDS dataset {name.rsplit('/', 1)[0]!r} under {root} has no config {name.rsplit('/', 1)[1]!r}; "
                     f"its configs: {', '.join(configs) or 'none'}")


def _versions(path: Path) -> list[str]:
    """The version folders of a dataset (or config) folder, oldest first."""
    found = [p.name for p in path.iterdir() if _is_version(p)] if path.is_dir() else []
    return sorted(found, key=lambda v: tuple(map(int, v.split("."))))


def _is_version(path: Path) -> bool:
    """Whether ``path`` is a version folder (``1.0.0/``) of a prepared dataset."""
    return path.is_dir() and bool(_VERSION.match(path.name)) and (path / INFO).is_file()


# ---------------------------------------------------------------- dataset_info.json, checked
def _damaged(path: Path, what: str) -> DataError:
    return DataError(f"{path} is damaged: {what}; prepare the dataset again")


def _kind(value) -> str:
    """A JSON value's kind in a message, with the value where it is short."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    shown = json.dumps(value)
    return f"{names.get(type(value), type(value).__name__)} ({shown})" if len(shown) <= 40 else names[type(value)]


def _typed(node: dict, key: str, kind: type, path: Path, where: str, default):
    """``node[key]`` (``default`` where absent), which must be a ``kind``."""
    value = node.get(key, default)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        expected = {str: "a string", list: "a list", dict: "an object", bool: "true or false"}[kind]
        raise _damaged(path, f"{where}{key!r} is {_kind(value)}, where {expected} belongs")
    return value


def _integer(value, path: Path, what: str, negative: bool = False) -> int:
    """A JSON integer, which TFDS writes as a number or a string of digits (int64 in protobuf's JSON)."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        number = int(value)
    else:
        raise _damaged(path, f"{what} is {_kind(value)}, not a whole number")
    if number < 0 and not negative:
        raise _damaged(path, f"{what} is {number}, below 0")
    return number


def dataset_info(folder: Path) -> DatasetInfo:
    """``dataset_info.json`` of a version folder, checked: every field daliloader reads has its type,
    each split's shard count is no more than the files in the folder, its template fills only TFDS's
    fields. Anything else is a DataError naming the file and what is wrong in it."""
    path = folder / INFO
    info = _read_json(path)
    listed = _typed(info, "splits", list, path, "", [])
    entries = sum(1 for _ in folder.iterdir())
    splits = tuple(_split_info(split, path, i, entries) for i, split in enumerate(listed))
    return DatasetInfo(_typed(info, "name", str, path, "", folder.parent.name),
                       _typed(info, "version", str, path, "", folder.name),
                       _typed(info, "fileFormat", str, path, "", "tfrecord"), splits,
                       _typed(info, "disableShuffling", bool, path, "", False))


def _split_info(split, path: Path, i: int, entries: int) -> SplitInfo:
    """Split ``i`` of ``dataset_info.json``, checked; a shard count beyond the ``entries`` of the folder
    is refused before any file name is made."""
    if not isinstance(split, dict):
        raise _damaged(path, f"split {i} of 'splits' is {_kind(split)}, where an object belongs")
    name = _typed(split, "name", str, path, f"split {i}: ", None) if "name" in split else None
    if not name:
        raise _damaged(path, f"split {i} of 'splits' has no name")
    where = f"split {name!r}: "
    lengths = None
    if "shardLengths" in split:
        listed = _typed(split, "shardLengths", list, path, where, [])
        lengths = tuple(_integer(n, path, f"{where}shard length {k}") for k, n in enumerate(listed))
    shards = len(lengths) if lengths else _integer(split.get("numShards", 1), path, f"{where}numShards")
    if shards > entries:
        raise _damaged(path, f"{where}it gives {shards} shards, but {path.parent} holds only {entries} files")
    template = _typed(split, "filepathTemplate", str, path, where, "") or DEFAULT_TEMPLATE
    _check_template(template, path, where)
    return SplitInfo(name, lengths or None, shards, template)


def _check_template(template: str, path: Path, where: str) -> None:
    """Refuse a ``filepathTemplate`` that is no format string of :data:`TEMPLATE_FIELDS` alone."""
    try:
        bad = _foreign_field(template)
        if bad is None:
            template.format(**{f: "00000" for f in TEMPLATE_FIELDS})
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise _damaged(path, f"{where}its filepathTemplate {template!r} is no file-name template ({e})") from None
    if bad is not None:
        field = "a positional field {}" if bad == "" or bad.isdigit() else f"the field {{{bad}}}"
        raise _damaged(path, f"{where}its filepathTemplate {template!r} has {field}, which TFDS does not fill (it "
                             f"fills {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)})")


def _foreign_field(template: str) -> str | None:
    """The first field of ``template`` that TFDS does not fill (None: none); a ValueError for a field with a
    format spec or a conversion (``{DATASET:>200000000}``), which TFDS's templates never have."""
    parsed = [(f, spec, conversion) for _, f, spec, conversion in string.Formatter().parse(template) if f is not None]
    if any(spec or conversion for _, spec, conversion in parsed):
        raise ValueError("a field with a format spec or conversion, which TFDS's templates do not have")
    return next((f for f, _, _ in parsed if f not in TEMPLATE_FIELDS), None)


# ---------------------------------------------------------------- split expressions, as TFDS reads them
def select(folder: Path, info: DatasetInfo, expression: str) -> tuple[tuple[str, ...], tuple[ShardRead, ...],
                                                                      tuple[int | None, ...]]:
    """The files, reads and shard lengths (see :class:`TFDSSplit`) of the split expression
    ``expression`` (:func:`split_parts`): each part's shards, skip and take, as TFDS's
    ``get_file_instructions`` gives them; an expression that selects no record is refused."""
    files: dict[str, int] = {}
    reads, lengths = [], []
    for name, start, stop in split_parts(expression, info, folder):
        split = info.split(name)
        names = shard_files(folder, info, split)
        for shard, skip, take in _shard_reads(split, start, stop):
            if names[shard] not in files:
                files[names[shard]] = len(files)
                lengths.append(split.lengths[shard] if split.lengths else None)
            reads.append(ShardRead(files[names[shard]], skip, take))
    if not reads:
        raise DataError(f"split={expression!r} selects no record of {folder} (tfds.load refuses it too): widen the "
                        "slice")
    for file, length in zip(files, lengths):
        size = (folder / Path(file).name).part.size if buckets.is_url(file) else os.path.getsize(file)
        if length is not None and length > size // (HEADER + FOOTER):
            raise _damaged(folder / INFO, f"it gives {file} {length} records, more than its {size} bytes can hold")
    return tuple(files), tuple(reads), tuple(lengths)


def split_parts(expression: str, info: DatasetInfo, folder: Path) -> list[tuple[str, int, int | None]]:
    """The parts of a split expression as TFDS's ``AbstractSplit.from_spec`` and ``_rel_to_abs_instr``
    read them: ``(split, first record, end)`` each (end None: the whole split of an older folder);
    percents rounded to the closest record (``int(round(p * n / 100))``, as TFDS). A form outside
    ``GRAMMAR``, an unknown split, a slice beyond the split or reversed is refused."""
    if not isinstance(expression, str):
        raise DataError(f"split={expression!r}: a split is a string in {GRAMMAR}. To read any other choice of "
                        "records, load the split and take data.subset(indices)")
    parts = []
    for spec in _ADDITION_SEP.split(expression):
        for name, start, stop, unit in _relative(spec, expression, info):
            split = info.split(name)
            if split is None:
                raise DataError(f"{folder} has no split {name!r}; its splits: "
                                f"{', '.join(sorted(s.name for s in info.splits)) or 'none'}")
            parts.append(_absolute(split, start, stop, unit, spec, folder))
    return parts


def _grammar(expression: str, what: str) -> DataError:
    return DataError(f"split={expression!r}: {what}. daliloader reads {GRAMMAR}. To read any other choice of "
                     "records, load the split and take data.subset(indices)")


def _relative(spec: str, expression: str, info: DatasetInfo) -> list[tuple[str, float | int | None, float | int |
                                                                                    None, str]]:
    """One part of an expression: ``(split, from, to, unit)`` as TFDS's ``_str_to_relative_instruction``
    reads it (``all``: every split, in the order of ``dataset_info.json``)."""
    match = _SUB_SPEC.match(spec)
    if not match:
        raise _grammar(expression, f"{spec!r} is no split name with an optional [from:to] slice")
    name, selector = match["split_name"], match["split_selector"]
    if name == "all":
        if selector:
            raise _grammar(expression, "'all' takes no slice")
        return [(s.name, None, None, "abs") for s in info.splits]
    if selector is None:
        return [(name, None, None, "abs")]
    return [(name, *_slice(selector, spec, expression))]


def _slice(selector: str, spec: str, expression: str) -> tuple[float | int | None, float | int | None, str]:
    """A part's ``[from:to]`` (or ``[N shard]``) as TFDS reads it: ``(from, to, unit)``."""
    slices = [_SLICE.match(x) for x in selector.split(":")]
    if not all(slices) or not any(s.group(0) for s in slices) or len(slices) > 2:
        raise _grammar(expression, f"{spec!r} has no slice TFDS reads ([from:to] of records, percents or shards)")
    if len(slices) == 1:  # one shard: [N shard] is [N shard:N+1 shard]
        unit = slices[0]["unit"] or "abs"
        if unit != "shard":
            raise _grammar(expression, f"{spec!r}: one index picks a shard ('train[1shard]'); records and percents "
                                       "take a slice ('train[10:11]')")
        start = _number(slices[0]["val"], unit, spec, expression)
        return start, start + 1, unit
    unit = slices[0]["unit"] or slices[1]["unit"] or "abs"
    start, stop = (None if m["val"] is None else _number(m["val"], unit, spec, expression) for m in slices)
    return start, stop, unit


def _number(text: str, unit: str, spec: str, expression: str) -> float | int:
    """A slice boundary as TFDS reads it: a float for percents (in [-100, 100]), else an int."""
    try:
        value = float(text) if unit == "%" else int(text)
    except ValueError:
        raise _grammar(expression, f"{spec!r}: {text!r} is no {'number' if unit == '%' else 'whole number'}") from None
    if unit == "%" and abs(value) > 100:
        raise _grammar(expression, f"{spec!r}: percents lie in [-100, 100]")
    return value


def _absolute(split: SplitInfo, start, stop, unit: str, spec: str, folder: Path) -> tuple[str, int, int | None]:
    """A part's first record and end in its split, as TFDS's ``_rel_to_abs_instr`` computes them."""
    if split.lengths is None:
        if (start, stop) != (None, None):
            raise DataError(f"split {spec!r}: {folder / INFO} gives no shard lengths (an older TFDS wrote it), so "
                            "only whole splits are read there ('train', 'train+test'); prepare it again with a "
                            "newer TFDS to slice it")
        return split.name, 0, None
    n = sum(split.lengths)
    start, stop = _records(split.lengths, start, stop, unit)
    if abs(start) > n or abs(stop) > n:
        raise DataError(f"split {spec!r}: records [{start}:{stop}] lie beyond split {split.name!r} of {n} records "
                        "(tfds.load refuses it too)")
    start, stop = start + n if start < 0 else start, stop + n if stop < 0 else stop
    if start > stop:
        raise DataError(f"split {spec!r}: its slice ends (record {stop}) before it starts (record {start})")
    return split.name, start, stop


def _records(lengths: tuple[int, ...], start, stop, unit: str) -> tuple[int, int]:
    """A slice's boundaries in records (before negative ones count from the end), as TFDS converts
    percents (rounded to the closest record: ``int(round(p * n / 100))``) and shards."""
    n = sum(lengths)
    if unit == "%":
        return (0 if start is None else int(round(start * n / 100.0)),
                n if stop is None else int(round(stop * n / 100.0)))
    if unit == "shard":
        return (0 if start is None else sum(lengths[:start]),
                n if stop is None else sum(lengths[:len(lengths) + stop if stop <= 0 else stop]))
    return 0 if start is None else start, n if stop is None else stop


def _shard_reads(split: SplitInfo, start: int, stop: int | None) -> list[tuple[int, int, int | None]]:
    """``(shard, skip, take)`` of records ``start`` to ``stop`` of a split, as TFDS's
    ``shard_utils.get_file_instructions`` gives them (empty shards left out); ``stop`` None: every
    shard whole."""
    if stop is None:
        return [(shard, 0, None) for shard in range(split.shards)]
    reads, index_start, index_end = [], 0, 0
    for shard, length in enumerate(split.lengths):
        if not length:
            continue
        index_end += length
        if start < index_end and stop > index_start:
            skip = start - index_start if start > index_start else 0
            take = stop - index_start - skip if stop < index_end else length - skip
            if take == 0:
                continue
            reads.append((shard, skip, take))
        index_start += length
    return reads


def shard_files(folder: Path, info: DatasetInfo, split: SplitInfo) -> list[str]:
    """The split's shards, as its ``filepathTemplate`` names them (numbers of at least 5 digits, as
    TFDS's ``ShardedFileTemplate``), in shard order; every one must be there."""
    digits = max(len(str(split.shards)), 5)
    files = []
    for i in range(split.shards):
        index, count = f"{i:0{digits}d}", f"{split.shards:0{digits}d}"
        files.append(str(folder / split.template.format(DATASET=info.name, SPLIT=split.name,
                                                        FILEFORMAT=info.file_format, SHARD_INDEX=index,
                                                        NUM_SHARDS=count, SHARD_X_OF_Y=f"{index}-of-{count}")))
    missing = [f for f in files if not (folder / Path(f).name).is_file()]
    if missing:
        raise DataError(f"{folder}: {len(missing)} of the {split.shards} shards of split {split.name!r} are missing, "
                        f"such as {missing[0]}: the dataset is incomplete; prepare it again")
    return files


def read_order(reads: Sequence[ShardRead], cycle: int, block: int = BLOCK_LENGTH) -> list[tuple[int, int]]:
    """``(file, record number)`` of every record ``reads`` select, in the order
    ``tf.data.Dataset.interleave(cycle_length=cycle, block_length=block)`` yields them over the reads (as
    ``tfds.load`` reads its files; deterministic, as without ``shuffle_files``): ``cycle`` reads open at
    once, ``block`` records from each in turn; a finished read's place goes to the next read when its
    turn comes again."""
    order: list[tuple[int, int]] = []
    slots: list[list[int] | None] = [None] * cycle
    pending = iter(reads)
    index = position = opened = 0
    exhausted = False
    while not exhausted or opened:
        slot = slots[index]
        if slot is None and not exhausted:
            read = next(pending, None)
            exhausted = read is None
            if read is not None:
                slots[index], opened = [read.file, read.skip, read.skip + read.take], opened + 1
            continue
        if slot is not None and slot[1] < slot[2]:
            n = min(block - position, slot[2] - slot[1])
            order.extend((slot[0], record) for record in range(slot[1], slot[1] + n))
            slot[1], position = slot[1] + n, position + n
            if position < block:
                continue
        elif slot is not None:
            slots[index], opened = None, opened - 1
        position, index = 0, (index + 1) % cycle
    return order


# ---------------------------------------------------------------- features.json, checked
def features(folder: Path) -> dict[str, TFDSFeature]:
    """``features.json`` flattened: each feature's key (nested dicts joined with ``/``) -> what it is;
    a description of the wrong shape is a DataError naming the file and the feature."""
    path = folder / FEATURES

    def walk(node, prefix: str) -> dict[str, TFDSFeature]:
        where = f"feature {prefix!r}: " if prefix else ""
        if not isinstance(node, dict):
            raise _damaged(path, f"{where or 'its top'} is {_kind(node)}, where an object belongs")
        if "featuresDict" not in node:
            return {prefix: _feature(node, path, where)} if prefix else {}
        inner = _typed(_typed(node, "featuresDict", dict, path, where, {}), "features", dict, path,
                       f"{where}featuresDict: ", {})
        found = {}
        for key, value in inner.items():
            found.update(walk(value, f"{prefix}/{key}" if prefix else key))
        return found

    return walk(_read_json(path), "")


def _feature(node: dict, path: Path, where: str) -> TFDSFeature:
    """One feature's description: its class and, for an Image, its channels (the shape's last dimension)."""
    kind = _typed(node, "pythonClassName", str, path, where, "?")
    if kind != IMAGE_CLASS:
        return TFDSFeature(kind.rsplit(".", 1)[-1], False)
    shape = _typed(_typed(node, "image", dict, path, where, {}), "shape", dict, path, f"{where}image: ", {})
    dims = _typed(shape, "dimensions", list, path, f"{where}image shape: ", [])
    channels = [_integer(d, path, f"{where}image dimension {i}", negative=True) for i, d in enumerate(dims)]
    return TFDSFeature(kind.rsplit(".", 1)[-1], True, channels[-1] if channels else None)


#: Words in the name of an Image feature that mark it as a segmentation mask.
MASK_WORDS = ("segmentation", "mask", "label", "trimap", "annotation")


def image_and_mask(folder: Path, name: str, image_key: str | None = None, mask_key: str | None = None,
                   mask_channel: int | None = None) -> tuple[Records, int | None]:
    """The keys of the image and of the mask, and the channel of a colour mask that holds the class (None:
    masks read whole): those given, else the published ones (:data:`PUBLISHED`), else found: the image an
    Image feature of three channels, the mask one of one channel whose name says so (:data:`MASK_WORDS`),
    or of three where ``mask_channel`` is given. A dataset without such a pair is refused, listing its
    features (a one-channel Image may be something else: cityscapes' disparity maps)."""
    found = features(folder)
    published = PUBLISHED.get(name) or Published("")
    mask = mask_key or published.mask_key or _mask(found, mask_channel is not None)
    photo = image_key or _photo(found, mask)
    if photo is None or mask is None:
        listed = ", ".join(_described(k, v) for k, v in found.items())
        raise DataError(f"{folder} ({name}) holds no image and segmentation mask (an Image feature of 3 channels, and "
                        f"one of 1 channel named as a mask); its features: {listed}. TFDS's voc, for one, holds boxes "
                        "only: read the VOC download with SegmentationData.from_folder. Or name the features: "
                        "image_key=, mask_key= (and mask_channel= where the mask is a colour picture whose channel "
                        "holds the class)")
    for key in (photo, mask):
        if key not in found:
            raise DataError(f"{folder} ({name}) has no feature {key!r}; its features: {', '.join(found)}")
    published_channel = published.mask_channel if mask == published.mask_key else None
    return Records(photo, mask), published_channel if mask_channel is None else mask_channel


def _images(found: dict[str, TFDSFeature], channels: int) -> list[str]:
    """The Image features of ``channels`` channels."""
    return [k for k, v in found.items() if v.image and v.channels == channels]


def _photo(found: dict[str, TFDSFeature], mask: str | None) -> str | None:
    """The photo's feature: ``image`` or ``image_left`` where there, else the first Image of 3 channels
    that is not the mask."""
    photos = [k for k in _images(found, 3) if k != mask]
    return next((k for k in ("image", "image_left") if k in photos), photos[0] if photos else None)


def _mask(found: dict[str, TFDSFeature], colour: bool) -> str | None:
    """The mask's feature: the first Image of one channel named as a mask (:data:`MASK_WORDS`), else, for
    ``colour`` masks, the first of three so named."""
    named = [k for k in _images(found, 1) + (_images(found, 3) if colour else [])
             if any(w in k.lower() for w in MASK_WORDS)]
    return named[0] if named else None


def _described(key: str, feature: TFDSFeature) -> str:
    """A feature in a message: its key, class and, for an Image, its channels."""
    return f"{key} ({feature.kind}, {feature.channels} channel(s))" if feature.image else f"{key} ({feature.kind})"


def _read_json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"cannot read {path} ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise DataError(f"{path} is damaged: not valid JSON ({type(e).__name__}: {e}); prepare the dataset "
                        "again") from None
    if not isinstance(found, dict):
        raise DataError(f"{path} is damaged: not a JSON object; prepare the dataset again")
    return found
