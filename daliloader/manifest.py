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
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

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


class PacksEntry(TypedDict):
    """The manifest's :data:`PACKS` entry (None: the copy has no packs). Paths are relative to the copy."""

    format: str  # "webdataset"
    samples_per_pack: int
    tars: list[str]
    indexes: list[str]  # DALI's index file of each tar
    image_exts: list[str]  # the member extensions an image may have (PACK_IMAGE_EXTS)
    mask_ext: str
    index_ext: str
    gpu_mask_ext: str | None  # None: no GPU form in the packs


class Manifest(TypedDict):
    """``manifest.json`` of format version 3, as :func:`read_manifest` returns it (a plain dict).

    ``pairs`` holds ``[image, mask]`` per pair, relative to the copy; ``source`` the originals'
    ``images`` and ``masks`` (absolute paths; for records, also ``records`` and ``keys``) and what the
    caller added; ``classes`` the class map that read the originals; ``masks`` how the masks were made,
    the unknown pixels, and the GPU form (:data:`GPU_FORM`: its ``files``, or why it was ``left_out``);
    ``images`` the encoding and, for photos re-encoded as JPEG, the PSNR lost."""

    format: str  # FORMAT
    version: int  # VERSION
    daliloader: str  # the version that wrote it
    created: str
    seconds: float
    source: dict
    classes: dict
    masks: dict
    images: dict
    pairs: list[list[str]]
    packs: PacksEntry | None


def load_manifest(out: str | Path) -> Manifest:
    """The manifest of the prepared copy ``out``, checked: every key the loaders and ``verify`` read is
    there with the right type (a damaged or cut-short file is a DataError naming it, not a traceback
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
    """``manifest.json`` at ``path``, parsed, brought to version 3's shape (:func:`migrate_v2`) and
    checked (whatever marks its folder: ``prepare`` reads back what it wrote before the copy is declared
    done). A file that is no manifest, of a version not in :data:`READABLE`, or damaged (a key the
    loaders or ``verify`` read missing or of the wrong type) is a DataError naming it."""
    path = path if isinstance(path, buckets.BucketPath) else Path(path)
    manifest = _parse(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT} manifest")
    version = manifest.get("version")
    if version not in READABLE:
        raise DataError(f"{path}: version {version} of the prepared format; this daliloader reads "
                        f"versions {READABLE[0]} to {READABLE[-1]}: run `daliloader prepare DATA NEW_OUT` again")
    if version == 2:
        manifest = migrate_v2(manifest, path.parent)
    try:
        _check_keys(manifest)
        prepared_classes(manifest), original_classes(manifest)
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


def _need(entry: dict, key: str, kind: type, where: str, length: int | None = None, each=None):
    """``entry[key]``, of type ``kind`` (a list of ``length`` items of type ``each``, where given)."""
    value = entry.get(key) if isinstance(entry, dict) else None
    name = f"{where}{key!r}"
    if not isinstance(value, kind):
        raise _Missing(f"{name} is missing or not a {kind.__name__}")
    if length is not None and len(value) != length:
        raise _Missing(f"{name} lists {len(value)} entries for {length} pairs")
    if each is not None and not all(each(v) for v in value):
        raise _Missing(f"{name} holds entries of the wrong type")
    return value


def _check_keys(m: dict) -> None:
    """Every key that the loaders and ``verify`` read, with its type; raises _Missing."""
    def is_pair(v):
        return isinstance(v, list) and len(v) == 2 and all(isinstance(f, str) for f in v)

    pairs = _need(m, "pairs", list, "", each=is_pair)
    if not pairs:
        raise _Missing("'pairs' is empty")
    n = len(pairs)
    source = _need(m, "source", dict, "")
    for key in ("images", "masks"):
        _need(source, key, list, "source ", n, each=lambda v: isinstance(v, str))
    classes = _need(m, "classes", dict, "")
    _need(classes, "names", list, "classes ", each=lambda v: isinstance(v, str))
    _need(classes, "ignore_index", int, "classes ")
    _need(classes, "source", str, "classes ")
    if _need(classes, "kind", str, "classes ") == MaskKind.RGB.value:
        _need(classes, "colors", list, "classes ", each=lambda v: isinstance(v, list) and len(v) == 3)
    else:
        _need(classes, "ids", dict, "classes ")
    masks = _need(m, "masks", dict, "")
    gpu = masks.get(GPU_FORM)
    if gpu is not None:
        _need(masks, GPU_FORM, dict, "masks ")
        if "left_out" not in gpu:
            _need(gpu, "files", list, f"masks {GPU_FORM!r} ", n, each=lambda v: isinstance(v, str))
    packs = m.get(PACKS)
    if packs is not None:
        _need(m, PACKS, dict, "")
        tars = _need(packs, "tars", list, f"{PACKS!r} ", each=lambda v: isinstance(v, str))
        _need(packs, "indexes", list, f"{PACKS!r} ", len(tars), each=lambda v: isinstance(v, str))
        _need(packs, "image_exts", list, f"{PACKS!r} ", each=lambda v: isinstance(v, str))
        for key in ("mask_ext", "index_ext"):
            _need(packs, key, str, f"{PACKS!r} ")
        per_pack = _need(packs, "samples_per_pack", int, f"{PACKS!r} ")
        if per_pack < 1 or len(tars) != -(-n // per_pack):
            raise _Missing(f"{PACKS!r} lists {len(tars)} tars for {n} pairs of {per_pack} per pack")
        if packs.get("gpu_mask_ext") is not None:
            _need(packs, "gpu_mask_ext", str, f"{PACKS!r} ")


def _damaged(path: Path, what: str) -> DataError:
    return DataError(f"{path}: {what}: the manifest is damaged; prepare the copy again (`daliloader prepare DATA "
                     "NEW_OUT`)")


def prepared_classes(manifest: dict) -> ClassMap:
    """The class map of prepared masks: ids 0..C-1 are the classes, ignore_index stays; the palette
    of colour-mask datasets is kept for drawing."""
    c = manifest["classes"]
    classes = ClassMap.from_ids(len(c["names"]), c["names"], ignore_index=c["ignore_index"],
                                source=f"prepared ({c['source']})")
    if c.get("colors") is not None:
        classes = replace(classes, colors=np.asarray(c["colors"], dtype=np.uint8))
    return classes


def original_classes(manifest: dict) -> ClassMap:
    """The class map that read the original masks."""
    c = manifest["classes"]
    if c["kind"] == MaskKind.RGB.value:
        return ClassMap.from_palette(c["colors"], c["names"], ignore_index=c["ignore_index"], source=c["source"])
    classes = ClassMap.from_ids({int(k): v for k, v in c["ids"].items()}, c["names"], ignore_index=c["ignore_index"],
                                source=c["source"])
    return replace(classes, mask_channel=c.get("mask_channel"))


def gpu_files(manifest: Manifest) -> list[str] | None:
    """The files of the masks' GPU form, relative to the copy, from the manifest's ``masks`` :data:`GPU_FORM`
    entry (None: the copy has no such form, or it was left out: a mask over nvCOMP's limit)."""
    gpu_form = manifest["masks"].get(GPU_FORM)
    return gpu_form.get("files") if gpu_form else None


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
