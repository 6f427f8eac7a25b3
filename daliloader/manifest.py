"""Reading the prepared format that ``daliloader prepare`` writes (the writer is :mod:`daliloader.preparation`).

A prepared copy holds ``manifest.json`` (written last), the images, the masks as 8-bit class indices
(PNG, which the CPU backends read, and the same indices LZ4-compressed, which ``dali-gpu`` inflates on
the GPU: see :func:`read_lz4_mask`), and optionally the same pairs packed into webdataset tars ("packs")
with DALI's index files. Sample ``i`` of a pack is ``NNNNNNN.<image ext>``, ``NNNNNNN.labels.png``,
``NNNNNNN.labels.lz4`` (copies made since it exists) and ``NNNNNNN.index`` (int64 ``i``).

Format version 3 keeps the packs in the copy's ``packs/`` folder, under the manifest key ``"packs"``.
Version 2 said ``shards/``, ``"shards"`` and ``"samples_per_shard"``: :func:`read_manifest` reads a
version 2 manifest through :func:`migrate_v2`, into version 3's shape (its files stay where they are),
so that every copy made so far stays readable; older versions are refused.

:func:`read_manifest` checks the file key by key (a damaged one is a DataError naming the key), then
reads it into typed records: a frozen :class:`Manifest` of :class:`Source`, :class:`ClassesEntry`,
:class:`MasksEntry`, :class:`ImagesEntry` and :class:`PacksEntry`. ``prepare`` builds the same records
and writes :meth:`Manifest.to_json`: a version 3 manifest read and written back is the same JSON.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from . import buckets
from .classes import ClassMap, MaskKind
from .errors import DataError
from .pairing import refuse_incomplete

MANIFEST = "manifest.json"
FORMAT = "daliloader-prepared"
#: The format version ``prepare`` writes. 2: packs carry ``NNNNNNN.index``; 3: "packs" where 2 said "shards".
VERSION = 3
#: The versions :func:`read_manifest` reads (older ones through :func:`migrate_v2`).
READABLE = (2, 3)
#: The manifest's key of the packs (see :class:`PacksEntry`).
PACKS = "packs"
#: The folder of the packs in a copy ``prepare`` writes (version 2: ``shards``; a migrated manifest's
#: paths point there).
PACKS_FOLDER = "packs"
#: Member names of a sample in a pack (``<key>.<ext>``).
PACK_IMAGE_EXTS = ("jpg", "jpeg", "png", "bmp", "tif", "tiff", "webp")
PACK_MASK_EXT = "labels.png"
PACK_GPU_MASK_EXT = "labels.lz4"
PACK_INDEX_EXT = "index"
#: The first word of a DALI webdataset index file (``wds2idx``'s format version).
INDEX_VERSION = "v1.2"
#: A tar's block: each member's header is one, and its data is padded to whole blocks (USTAR, which
#: ``prepare`` writes).
TAR_BLOCK = 512

#: The GPU mask form: ``LZ4_MAGIC``, height and width as little-endian int32, then the (H, W) uint8 class
#: indices, row-major, as one LZ4 block (the format DALI's ``fn.decoders.inflate`` reads, through
#: nvCOMP; python-lz4's ``lz4.block`` writes and reads it on the CPU).
LZ4_MAGIC = b"DLZ4"
LZ4_HEADER = len(LZ4_MAGIC) + 8
#: nvCOMP's LZ4 decompresses chunks of at most 16 MiB: larger masks are written without the GPU form.
LZ4_MAX_BYTES = 16 * 2**20
#: The manifest's key (under "masks") for the GPU form: its encoding and its files, one per pair.
GPU_FORM = "gpu"


@dataclass(frozen=True, kw_only=True)
class PacksEntry:
    """The manifest's :data:`PACKS` entry: the copy's webdataset tars and how their members are named (a
    copy without packs has None there). Paths are relative to the copy."""

    format: str  # "webdataset"
    samples_per_pack: int
    tars: tuple[str, ...]
    indexes: tuple[str, ...]  # DALI's index file of each tar
    image_exts: tuple[str, ...]  # the member extensions an image may have (PACK_IMAGE_EXTS)
    mask_ext: str
    index_ext: str
    gpu_mask_ext: str | None  # None: no GPU form in the packs

    @classmethod
    def from_json(cls, raw: dict) -> PacksEntry:
        """The entry of a manifest's JSON object, checked (see :func:`read_manifest`)."""
        return cls(format=raw["format"], samples_per_pack=raw["samples_per_pack"], tars=tuple(raw["tars"]),
                   indexes=tuple(raw["indexes"]), image_exts=tuple(raw["image_exts"]), mask_ext=raw["mask_ext"],
                   index_ext=raw["index_ext"], gpu_mask_ext=raw.get("gpu_mask_ext"))

    def to_json(self) -> dict:
        """The entry as ``manifest.json`` holds it."""
        return {"format": self.format, "samples_per_pack": self.samples_per_pack, "tars": list(self.tars),
                "indexes": list(self.indexes), "image_exts": list(self.image_exts), "mask_ext": self.mask_ext,
                "index_ext": self.index_ext, "gpu_mask_ext": self.gpu_mask_ext}


#: The keys of the manifest's ``source`` that :class:`Source` reads; every other one is the caller's.
SOURCE_KEYS = ("images", "masks", "records", "keys", "stamps")


@dataclass(frozen=True, kw_only=True)
class Source:
    """The manifest's ``source``: where the pairs came from, for ``verify``.

    ``images`` and ``masks`` name each pair's originals: absolute paths or URLs; for pairs read from
    TFRecord files, the records' names, with ``records`` giving each pair's ``(file, record number, byte
    offset, size)`` and ``keys`` the image's and the mask's feature (both None for files). ``stamps``
    holds each source file's stamp as it was read (None: a copy made before they were recorded).

    ``extra`` holds every other key, as the caller of ``prepare`` gave it (its ``source=``; the command
    line records ``data`` and ``split``, which :attr:`data` and :attr:`split` read): kept as read, in its
    order, and written back unchanged, before the others, as ``prepare`` writes them."""

    images: tuple[str, ...]
    masks: tuple[str, ...]
    records: tuple[tuple[str, int, int, int], ...] | None = None
    keys: tuple[str, str] | None = None
    stamps: dict[str, tuple] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> str | None:
        """The DATA that ``daliloader prepare DATA OUT`` read (None: not recorded, as by ``dl.prepare``)."""
        return self.extra.get("data")

    @property
    def split(self) -> str | None:
        """The split of DATA that ``daliloader prepare`` read (None: one split, or not recorded)."""
        return self.extra.get("split")

    @classmethod
    def from_json(cls, raw: dict) -> Source:
        """The entry of a manifest's JSON object, checked (see :func:`read_manifest`)."""
        records, keys, stamps = raw.get("records"), raw.get("keys"), raw.get("stamps")
        return cls(images=tuple(raw["images"]), masks=tuple(raw["masks"]),
                   records=None if records is None else tuple(tuple(row) for row in records),
                   keys=None if keys is None else tuple(keys),
                   stamps=None if stamps is None else {file: tuple(stamp) for file, stamp in stamps.items()},
                   extra={key: value for key, value in raw.items() if key not in SOURCE_KEYS})

    def to_json(self) -> dict:
        """The entry as ``manifest.json`` holds it: the caller's keys first, then the originals."""
        entry = {**self.extra, "images": list(self.images), "masks": list(self.masks)}
        if self.records is not None:
            entry["records"] = [list(row) for row in self.records]
        if self.keys is not None:
            entry["keys"] = list(self.keys)
        if self.stamps is not None:
            entry["stamps"] = {file: list(stamp) for file, stamp in self.stamps.items()}
        return entry


@dataclass(frozen=True, kw_only=True)
class ClassesEntry:
    """The manifest's ``classes``: the class table that read the original masks (:meth:`original_map`);
    the prepared masks hold its class indices (:meth:`prepared_map`)."""

    names: tuple[str, ...]
    ignore_index: int
    kind: MaskKind
    source: str  # where the table came from (the class map's ``source``)
    colors: tuple[tuple[int, int, int], ...] | None = None  # kind RGB: each class's colour
    ids: dict[int, int] | None = None  # kind ID: mask id -> class index
    mask_channel: int | None = None  # kind ID: the channel of colour masks that holds the id (None: 1 channel)

    def __post_init__(self):
        object.__setattr__(self, "kind", MaskKind(self.kind))  # (its value, as the file holds it, also taken)

    @classmethod
    def of(cls, classes: ClassMap) -> ClassesEntry:
        """The entry that records ``classes``, as ``prepare`` writes it."""
        rgb = classes.kind is MaskKind.RGB
        return cls(names=tuple(classes.names), ignore_index=int(classes.ignore_index), kind=classes.kind,
                   source=classes.source,
                   colors=tuple(tuple(color) for color in classes.colors.tolist()) if rgb else None,
                   ids=None if rgb else {int(k): int(v) for k, v in sorted(classes.id_to_class.items())},
                   mask_channel=None if rgb else classes.mask_channel)

    @classmethod
    def from_json(cls, raw: dict) -> ClassesEntry:
        """The entry of a manifest's JSON object, checked (see :func:`read_manifest`); a ValueError where
        a mask id or the kind is none."""
        colors, ids = raw.get("colors"), raw.get("ids")
        return cls(names=tuple(raw["names"]), ignore_index=raw["ignore_index"], kind=MaskKind(raw["kind"]),
                   source=raw["source"], colors=None if colors is None else tuple(tuple(c) for c in colors),
                   ids=None if ids is None else {int(k): v for k, v in ids.items()},
                   mask_channel=raw.get("mask_channel"))

    def to_json(self) -> dict:
        """The entry as ``manifest.json`` holds it (ids as strings: JSON's keys)."""
        entry = {"names": list(self.names), "ignore_index": self.ignore_index, "kind": self.kind.value,
                 "source": self.source}
        if self.colors is not None:
            entry["colors"] = [list(color) for color in self.colors]
        if self.ids is not None:
            entry["ids"] = {str(k): v for k, v in self.ids.items()}
        if self.mask_channel is not None:
            entry["mask_channel"] = self.mask_channel
        return entry

    def prepared_map(self) -> ClassMap:
        """The class map of the prepared masks: ids 0..C-1 are the classes, ignore_index stays; the palette
        of colour-mask datasets is kept for drawing."""
        classes = ClassMap.from_ids(len(self.names), list(self.names), ignore_index=self.ignore_index,
                                    source=f"prepared ({self.source})")
        if self.colors is not None:
            classes = replace(classes, colors=np.asarray(self.colors, dtype=np.uint8))
        return classes

    def original_map(self) -> ClassMap:
        """The class map that read the original masks."""
        if self.kind is MaskKind.RGB:
            return ClassMap.from_palette([list(c) for c in self.colors], list(self.names),
                                         ignore_index=self.ignore_index, source=self.source)
        classes = ClassMap.from_ids(dict(self.ids), list(self.names), ignore_index=self.ignore_index,
                                    source=self.source)
        return replace(classes, mask_channel=self.mask_channel)


@dataclass(frozen=True, kw_only=True)
class GpuForm:
    """The masks' GPU form (see :data:`LZ4_MAGIC`): its encoding, described, and each pair's file,
    relative to the copy."""

    encoding: str
    files: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class MasksEntry:
    """The manifest's ``masks``: how the prepared masks were made, the pixels of values outside the class
    map (now ``ignore_index``) and the masks holding them, and the GPU form. In the file, :data:`GPU_FORM`
    holds the form (its ``encoding`` and ``files``), or ``{"left_out": why}``, or null where it was not
    asked for (or a copy predates it); ``gpu`` and ``gpu_left_out`` are never both set."""

    encoding: str
    how: str
    unknown_pixels: int
    pairs_with_unknown_values: tuple[str, ...]
    gpu: GpuForm | None = None  # None: no GPU form
    gpu_left_out: str | None = None  # why there is no GPU form, where a mask was too big for it

    def __post_init__(self):
        if self.gpu is not None and self.gpu_left_out is not None:
            raise ValueError("a GPU form that was left out has no files: give gpu or gpu_left_out, not both")

    @property
    def gpu_files(self) -> tuple[str, ...] | None:
        """The GPU form's files, relative to the copy (None: the copy has no such form, or it was left
        out: a mask over nvCOMP's limit)."""
        return self.gpu.files if self.gpu is not None else None

    @classmethod
    def from_json(cls, raw: dict) -> MasksEntry:
        """The entry of a manifest's JSON object, checked (see :func:`read_manifest`)."""
        gpu = raw.get(GPU_FORM) or {}
        left_out = "left_out" in gpu
        return cls(encoding=raw["encoding"], how=raw["how"], unknown_pixels=raw["unknown_pixels"],
                   pairs_with_unknown_values=tuple(raw["pairs_with_unknown_values"]),
                   gpu=GpuForm(encoding=gpu["encoding"], files=tuple(gpu["files"])) if gpu and not left_out else None,
                   gpu_left_out=gpu["left_out"] if left_out else None)

    def to_json(self) -> dict:
        """The entry as ``manifest.json`` holds it."""
        if self.gpu is not None:
            gpu = {"encoding": self.gpu.encoding, "files": list(self.gpu.files)}
        else:
            gpu = {"left_out": self.gpu_left_out} if self.gpu_left_out is not None else None
        return {"encoding": self.encoding, "how": self.how, "unknown_pixels": self.unknown_pixels,
                "pairs_with_unknown_values": list(self.pairs_with_unknown_values), GPU_FORM: gpu}


@dataclass(frozen=True, kw_only=True)
class Psnr:
    """The quality (PSNR, dB) that re-encoding photos as JPEG kept: mean and minimum over the finite
    values (None: none was finite, every re-encoding exact)."""

    mean: float | None
    min: float | None


@dataclass(frozen=True, kw_only=True)
class ImagesEntry:
    """The manifest's ``images``: how the prepared images were written, and how many photos were
    re-encoded as JPEG, with the PSNR lost (None: none was)."""

    encoding: str
    reencoded: int
    psnr_db: Psnr | None = None

    @classmethod
    def from_json(cls, raw: dict) -> ImagesEntry:
        """The entry of a manifest's JSON object, checked (see :func:`read_manifest`)."""
        psnr = raw.get("psnr_db")
        return cls(encoding=raw["encoding"], reencoded=raw["reencoded"],
                   psnr_db=None if psnr is None else Psnr(mean=psnr.get("mean"), min=psnr.get("min")))

    def to_json(self) -> dict:
        """The entry as ``manifest.json`` holds it (``psnr_db`` only where photos were re-encoded)."""
        entry = {"encoding": self.encoding, "reencoded": self.reencoded}
        if self.psnr_db is not None:
            entry["psnr_db"] = {"mean": self.psnr_db.mean, "min": self.psnr_db.min}
        return entry


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """``manifest.json`` of format version 3, as :func:`read_manifest` returns it and ``prepare`` writes
    it (:meth:`to_json`, then ``json.dumps(..., indent=1)``).

    ``pairs`` holds ``(image, mask)`` per pair, relative to the copy; ``source`` the originals
    (:class:`Source`, with the keys the caller added); ``classes`` the class table that read them
    (:class:`ClassesEntry`); ``masks`` how the masks were made and their GPU form (:class:`MasksEntry`);
    ``images`` the encoding and, for photos re-encoded as JPEG, the PSNR lost (:class:`ImagesEntry`);
    ``packs`` the webdataset tars (:class:`PacksEntry`; None: the copy has none). A manifest of version
    2 is read into this shape (:func:`migrate_v2`); ``format`` and ``version`` are the format's
    (``FORMAT``, :data:`VERSION`). Keys of the file that no record names are not kept, except the
    caller's in ``source`` (``Source.extra``)."""

    format: ClassVar[str] = FORMAT
    version: ClassVar[int] = VERSION
    daliloader: str  # the version that wrote it
    created: str  # when, as "%Y-%m-%dT%H:%M:%S%z"
    seconds: float  # how long the conversion took
    source: Source
    classes: ClassesEntry
    masks: MasksEntry
    images: ImagesEntry
    pairs: tuple[tuple[str, str], ...]
    packs: PacksEntry | None = None

    @classmethod
    def from_json(cls, raw: dict) -> Manifest:
        """The manifest of a JSON object of version 3's shape, once :func:`read_manifest`'s checks passed
        (a ValueError where the class table holds a mask id or a kind that is none)."""
        packs = raw.get(PACKS)
        return cls(daliloader=raw["daliloader"], created=raw["created"], seconds=raw["seconds"],
                   source=Source.from_json(raw["source"]), classes=ClassesEntry.from_json(raw["classes"]),
                   masks=MasksEntry.from_json(raw["masks"]), images=ImagesEntry.from_json(raw["images"]),
                   pairs=tuple(tuple(pair) for pair in raw["pairs"]),
                   packs=None if packs is None else PacksEntry.from_json(packs))

    def to_json(self) -> dict:
        """The manifest as ``manifest.json`` holds it: its keys in the order ``prepare`` writes them."""
        return {"format": self.format, "version": self.version, "daliloader": self.daliloader,
                "created": self.created, "seconds": self.seconds, "source": self.source.to_json(),
                "classes": self.classes.to_json(), "masks": self.masks.to_json(), "images": self.images.to_json(),
                "pairs": [list(pair) for pair in self.pairs],
                PACKS: None if self.packs is None else self.packs.to_json()}


def load_manifest(out: str | Path) -> Manifest:
    """The manifest of the prepared copy ``out``, checked and read into its records: every key they hold
    is there with the right type (a damaged or cut-short file is a DataError naming it, not a traceback
    later), and ``out`` is not the unfinished output of a ``prepare`` (see :func:`read_manifest`)."""
    # A copy written in place (into an existing empty folder) stays marked until its manifest is in and
    # read back; an interrupted one is named as such rather than as a folder without a manifest
    out = buckets.as_path(out)
    refuse_incomplete(out)
    path = out / MANIFEST
    if not out.is_dir():
        raise DataError(f"{out} does not exist or is not a folder: a prepared dataset is the folder that "
                        "`daliloader prepare DATA OUT` wrote")
    if not path.is_file():
        raise DataError(f"{out} is not a prepared dataset: {MANIFEST} is missing (run `daliloader prepare DATA OUT`)")
    return read_manifest(path)


def read_manifest(path: str | Path) -> Manifest:
    """``manifest.json`` at ``path``, parsed, brought to version 3's shape (:func:`migrate_v2`), checked
    and read into a :class:`Manifest` (whatever marks its folder: ``prepare`` reads back what it wrote
    before the copy is declared done). A file that is no manifest, of a version not in :data:`READABLE`,
    or damaged (a key missing or of the wrong type, a class table no class map accepts) is a DataError
    naming it and the key."""
    path = path if isinstance(path, buckets.BucketPath) else Path(path)
    raw = _parse(path)
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT} manifest")
    version = raw.get("version")
    if version not in READABLE:
        raise DataError(f"{path}: version {version} of the prepared format; this daliloader reads "
                        f"versions {READABLE[0]} to {READABLE[-1]}: run `daliloader prepare DATA NEW_OUT` again")
    if version == 2:
        raw = migrate_v2(raw, path.parent)
    try:
        _check_keys(raw)
        manifest = Manifest.from_json(raw)
        manifest.classes.prepared_map(), manifest.classes.original_map()
    except _Missing as e:
        read_as = f" (format version 2, read as version {VERSION}: its 'shards' is {PACKS!r})" if version == 2 else ""
        raise _damaged(path, f"{e}{read_as}") from None
    except (DataError, ValueError, TypeError) as e:  # a class table no ClassMap accepts (ids that are no numbers...)
        raise _damaged(path, f"its classes: {e}") from None
    return manifest


#: JSON's literals, which a file cut short may end inside.
_LITERALS = ("true", "false", "null")


def _parse(path: Path):
    """The JSON value in the file ``path``; a DataError naming it when it cannot be read or parsed."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise DataError(f"cannot read {path} ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise _damaged(path, "it is not text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        # (a string or a literal cut off is reported where it starts: the file ends inside it)
        rest = text[e.pos:].rstrip()
        ends = not rest or e.msg.startswith("Unterminated string") or any(w.startswith(rest) for w in _LITERALS)
        cut = ", where the file ends: cut short?" if ends else ""
        raise _damaged(path, f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}{cut})") from None


def migrate_v2(manifest: dict, root: str | Path) -> dict:
    """A format version 2 manifest (of the copy in ``root``) in version 3's shape; ``manifest`` is left as it is.

    The ``"shards"`` entry becomes ``"packs"``, its ``"samples_per_shard"`` ``"samples_per_pack"``, and the
    version 3. The files stay where they are: the entry's paths keep pointing into the copy's
    ``shards/`` folder. Copies made before sources were recorded as absolute paths hold them as
    ``prepare`` was given them, relative to the folder it ran in: each is made absolute from the current
    folder where it is found there, else from the copy's parent folder where it is found there, and
    left as it is otherwise (``verify`` then reports the originals missing)."""
    if manifest.get("version") != 2:
        raise ValueError(f"migrate_v2 takes a version 2 manifest, not version {manifest.get('version')}")
    renamed = {PACKS if key == "shards" else key: value for key, value in manifest.items()}
    packs = renamed.get(PACKS)
    if isinstance(packs, dict):
        renamed[PACKS] = {"samples_per_pack" if k == "samples_per_shard" else k: v for k, v in packs.items()}
    if isinstance(renamed.get("source"), dict) and "records" not in renamed["source"]:
        renamed["source"] = _absolute_sources(renamed["source"], Path(root).absolute().parent)
    renamed["version"] = VERSION
    return renamed


def _absolute_sources(source: dict, beside: Path) -> dict:
    """``source`` with its ``images`` and ``masks`` made absolute where found (see :func:`migrate_v2`)."""
    def found(path):
        if not isinstance(path, str) or os.path.isabs(path):
            return path
        if os.path.exists(path):
            return os.path.abspath(path)
        return str(beside / path) if (beside / path).exists() else path

    lists = {key: source[key] for key in ("images", "masks") if isinstance(source.get(key), list)}
    return {**source, **{key: [found(p) for p in paths] for key, paths in lists.items()}}


class _Missing(Exception):
    """A key of the manifest that is missing or of the wrong type (the message says which)."""


def _need(entry: dict, key: str, kind: type | tuple[type, ...], where: str, length: int | None = None, each=None):
    """``entry[key]``, of type ``kind`` (a list of ``length`` items of type ``each``, where given)."""
    value = entry.get(key) if isinstance(entry, dict) else None
    name = f"{where}{key!r}"
    if not isinstance(value, kind):
        raise _Missing(f"{name} is missing or not a {kind.__name__ if isinstance(kind, type) else 'number'}")
    if length is not None and len(value) != length:
        raise _Missing(f"{name} lists {len(value)} entries for {length} pairs")
    if each is not None and not all(each(v) for v in value):
        raise _Missing(f"{name} holds entries of the wrong type")
    return value


def _may(entry: dict, key: str, kind: type | tuple[type, ...], where: str, length: int | None = None, each=None):
    """``entry[key]`` as :func:`_need` checks it, where it is there and not null; None otherwise."""
    return None if entry.get(key) is None else _need(entry, key, kind, where, length, each)


#: JSON's numbers (``seconds``, PSNR).
_NUMBER = (int, float)


def _is_str(value) -> bool:
    return isinstance(value, str)


def _check_keys(m: dict) -> None:
    """Every key that the records of :class:`Manifest` hold, with its type; raises _Missing naming it."""
    def is_pair(v):
        return isinstance(v, list) and len(v) == 2 and all(isinstance(f, str) for f in v)

    pairs = _need(m, "pairs", list, "", each=is_pair)
    if not pairs:
        raise _Missing("'pairs' is empty")
    n = len(pairs)
    _check_source(_need(m, "source", dict, ""), n)
    _check_classes(_need(m, "classes", dict, ""))
    _check_masks(_need(m, "masks", dict, ""), n)
    if m.get(PACKS) is not None:
        _check_packs(_need(m, PACKS, dict, ""), n)
    _check_images(_need(m, "images", dict, ""))
    for key in ("daliloader", "created"):
        _need(m, key, str, "")
    _need(m, "seconds", _NUMBER, "")


def _check_source(source: dict, n: int) -> None:
    """The manifest's ``source``, of ``n`` pairs (see :class:`Source`)."""
    for key in ("images", "masks"):
        _need(source, key, list, "source ", n, each=_is_str)
    _may(source, "records", list, "source ", n, each=lambda v: isinstance(v, list) and len(v) == 4)
    keys = _may(source, "keys", list, "source ", each=_is_str)
    if keys is not None and len(keys) != 2:
        raise _Missing(f"source 'keys' lists {len(keys)} features, not the image's and the mask's")
    stamps = _may(source, "stamps", dict, "source ")
    if stamps is not None and not all(isinstance(stamp, list) for stamp in stamps.values()):
        raise _Missing("source 'stamps' holds entries of the wrong type")


def _check_classes(classes: dict) -> None:
    """The manifest's ``classes`` (see :class:`ClassesEntry`)."""
    _need(classes, "names", list, "classes ", each=_is_str)
    _need(classes, "ignore_index", int, "classes ")
    _need(classes, "source", str, "classes ")
    kind = _need(classes, "kind", str, "classes ")
    if kind not in {k.value for k in MaskKind}:
        raise _Missing(f"classes 'kind' is {kind!r}, none of {', '.join(repr(k.value) for k in MaskKind)}")
    if kind == MaskKind.RGB.value:
        _need(classes, "colors", list, "classes ", each=lambda v: isinstance(v, list) and len(v) == 3)
    else:
        _need(classes, "ids", dict, "classes ")
    _may(classes, "mask_channel", int, "classes ")


def _check_masks(masks: dict, n: int) -> None:
    """The manifest's ``masks``, of ``n`` pairs (see :class:`MasksEntry`)."""
    gpu = masks.get(GPU_FORM)
    if gpu is not None:
        _need(masks, GPU_FORM, dict, "masks ")
        if "left_out" not in gpu:
            _need(gpu, "files", list, f"masks {GPU_FORM!r} ", n, each=_is_str)
            _need(gpu, "encoding", str, f"masks {GPU_FORM!r} ")
        else:
            _need(gpu, "left_out", str, f"masks {GPU_FORM!r} ")
    for key in ("encoding", "how"):
        _need(masks, key, str, "masks ")
    _need(masks, "unknown_pixels", int, "masks ")
    _need(masks, "pairs_with_unknown_values", list, "masks ", each=_is_str)


def _check_packs(packs: dict, n: int) -> None:
    """The manifest's :data:`PACKS`, of ``n`` pairs (see :class:`PacksEntry`)."""
    tars = _need(packs, "tars", list, f"{PACKS!r} ", each=_is_str)
    _need(packs, "indexes", list, f"{PACKS!r} ", len(tars), each=_is_str)
    _need(packs, "image_exts", list, f"{PACKS!r} ", each=_is_str)
    for key in ("mask_ext", "index_ext"):
        _need(packs, key, str, f"{PACKS!r} ")
    per_pack = _need(packs, "samples_per_pack", int, f"{PACKS!r} ")
    if per_pack < 1 or len(tars) != -(-n // per_pack):
        raise _Missing(f"{PACKS!r} lists {len(tars)} tars for {n} pairs of {per_pack} per pack")
    _may(packs, "gpu_mask_ext", str, f"{PACKS!r} ")
    _need(packs, "format", str, f"{PACKS!r} ")


def _check_images(images: dict) -> None:
    """The manifest's ``images`` (see :class:`ImagesEntry`)."""
    _need(images, "encoding", str, "images ")
    _need(images, "reencoded", int, "images ")
    psnr = _may(images, "psnr_db", dict, "images ")
    for key in ("mean", "min") if psnr is not None else ():
        if key not in psnr:
            raise _Missing(f"images 'psnr_db' {key!r} is missing")
        _may(psnr, key, _NUMBER, "images 'psnr_db' ")


def _damaged(path: Path, what: str) -> DataError:
    return DataError(f"{path}: {what}: the manifest is damaged; prepare the copy again (`daliloader prepare DATA "
                     "NEW_OUT`)")


def check_pack_index(index_file: str | Path, tar: str, first: int, count: int, tar_size: int | None = None,
                     shown: str | None = None) -> None:
    """Refuse (a DataError naming the index ``shown``, default ``index_file``, or the tar) a DALI webdataset
    index that does not describe the pack ``tar`` as ``prepare`` writes it: samples ``first`` to
    ``first + count - 1``, each named by its number (:func:`daliloader.packs.member_name`), their members
    laid out one after another as a USTAR tar holds them (a 512-byte header before each, data padded to
    512 bytes), and, where ``tar_size`` is known, inside the tar. DALI's reader trusts its index: one of
    another pack, or an offset edited, reads other samples' bytes as this sample's image or mask without
    a word. A few bytes per sample to read; the members' contents are ``verify``'s to compare."""
    shown = shown or str(index_file)
    lines = _index_lines(index_file, shown)
    if len(lines) != count:
        raise DataError(f"{shown} lists {len(lines)} samples where the manifest puts {count} in {tar}: {DAMAGED}")
    end = _members_end(lines, first, tar, shown)
    if tar_size is not None and end > tar_size:
        raise DataError(f"{tar} holds {tar_size} bytes, where its index {shown} puts members up to byte {end}: the "
                        f"pack is truncated: {DAMAGED}")


#: What a damaged prepared copy's errors say to do.
DAMAGED = "the prepared copy is damaged; run `daliloader verify` on it, or prepare it again"


def _index_lines(index_file: str | Path, shown: str) -> list[list[str]]:
    """The sample lines of a DALI webdataset index, split into words, once its header (``v1.2 N``) is
    checked against them (DALI trusts the header: a line lost failed only when a pipeline was built)."""
    try:
        with open(index_file, "rb") as fh:
            head = fh.readline(64).decode("ascii", errors="replace").split()
            lines = [line.decode("utf-8", errors="replace").split() for line in fh if line.strip()]
    except OSError as e:
        raise DataError(f"cannot read the pack index {shown} ({e.strerror or e}): run `daliloader verify` on the "
                        "prepared copy") from None
    if len(head) != 2 or head[0] != INDEX_VERSION or not head[1].isdigit():
        raise DataError(f"{shown} is not a DALI webdataset index (its first line should be '{INDEX_VERSION} N'): "
                        f"{DAMAGED}")
    if len(lines) != int(head[1]):
        raise DataError(f"{shown} lists {len(lines)} samples where its header says {head[1]}: {DAMAGED}")
    return lines


def _members_end(lines: list[list[str]], first: int, tar: str, shown: str) -> int:
    """The byte after the last member's data that index ``lines`` (of samples ``first`` on) describe, once
    each member is checked: named by its sample's number, where the members before it end."""
    offset = TAR_BLOCK  # the first member's data, after its header
    for n, words in enumerate(lines, 2):
        key = f"{first + n - 2:07d}"
        if len(words) % 4 or not words:
            raise DataError(f"{shown}, line {n}: not the 'ext offset size name' of each member: {DAMAGED}")
        for ext, at, size, name in zip(*[iter(words)] * 4, strict=True):
            if name != f"{key}.{ext}":
                raise DataError(f"{shown}, line {n}: a member {name!r} where sample {key}'s are due: this pack and "
                                f"its index hold other samples than the manifest puts in {tar} (packs renamed or "
                                "swapped?); prepare the copy again")
            if not (at.isdigit() and size.isdigit()) or int(at) != offset:
                raise DataError(f"{shown}, line {n}: {name} at byte {at} of {tar}, where the members before it "
                                f"end it at {offset}: {DAMAGED}")
            offset = int(at) + -(-int(size) // TAR_BLOCK) * TAR_BLOCK + TAR_BLOCK
    return offset - TAR_BLOCK


def read_lz4_mask(path: str | Path) -> np.ndarray:
    """A mask of the GPU form (see :data:`LZ4_MAGIC`) decoded on the CPU: (H, W) uint8 class indices."""
    import lz4.block

    blob = Path(path).read_bytes()
    h, w = lz4_mask_size(blob, path)
    try:
        raw = lz4.block.decompress(blob[LZ4_HEADER:], uncompressed_size=h * w)
    except lz4.block.LZ4BlockError as e:
        raise DataError(f"{path}: its LZ4 data does not inflate to {h}x{w} ({e}): the prepared copy is damaged; "
                        "run `daliloader verify` on it, or prepare it again") from e
    return np.frombuffer(raw, np.uint8).reshape(h, w)


def lz4_mask_size(blob: bytes, path: str | Path) -> tuple[int, int]:
    """``(height, width)`` from the header of a mask of the GPU form; a DataError naming ``path`` when the
    header is not one ``prepare`` writes (no magic, or a size no mask of the form can have: a damaged
    header would otherwise ask the inflater for terabytes)."""
    if len(blob) < LZ4_HEADER or blob[:len(LZ4_MAGIC)] != LZ4_MAGIC:
        raise DataError(f"{path}: not a daliloader LZ4 mask (no {LZ4_MAGIC!r} header): the prepared copy is damaged; "
                        "run `daliloader verify` on it, or prepare it again")
    h, w = (int(v) for v in np.frombuffer(blob[len(LZ4_MAGIC):LZ4_HEADER], "<i4"))
    if h < 1 or w < 1 or h * w > LZ4_MAX_BYTES:
        raise DataError(f"{path}: its header gives a {h}x{w} mask, which prepare never writes (1 to "
                        f"{LZ4_MAX_BYTES >> 20} MiB of indices): the prepared copy is damaged; run `daliloader verify` "
                        "on it, or prepare it again")
    return h, w
