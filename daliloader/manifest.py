"""Reading the prepared format that ``daliloader prepare`` writes (the writer is :mod:`daliloader.prepare`).

A prepared copy holds ``manifest.json`` (written last), the images, the masks as 8-bit class indices
(PNG, which the CPU backends read, and the same indices LZ4-compressed, which ``dali-gpu`` inflates on
the GPU: see :func:`read_lz4_mask`), and optionally the same pairs packed into webdataset tars ("packs")
with DALI's index files. Sample ``i`` of a pack is ``NNNNNNN.<image ext>``, ``NNNNNNN.labels.png``,
``NNNNNNN.labels.lz4`` (copies made since it exists) and ``NNNNNNN.index`` (int64 ``i``).
Format version 2 keeps the packs in the copy's ``shards/`` folder and under the manifest key
``"shards"``: names kept so that every copy made so far stays readable.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from .classes import ClassMap
from .errors import DataError

MANIFEST = "manifest.json"
FORMAT = "daliloader-prepared"
VERSION = 2  # 2: packs carry NNNNNNN.index
#: Folder of the packs in a prepared copy, and their key in the manifest (format version 2's names).
PACKS = "shards"
#: Member names of a sample in a pack (``<key>.<ext>``).
PACK_IMAGE_EXTS = ("jpg", "jpeg", "png", "bmp", "tif", "tiff", "webp")
PACK_MASK_EXT = "labels.png"
PACK_GPU_MASK_EXT = "labels.lz4"
PACK_INDEX_EXT = "index"

#: The GPU mask form: ``LZ4_MAGIC``, height and width as little-endian int32, then the (H, W) uint8 class
#: indices, row-major, as one LZ4 block (the format DALI's ``fn.experimental.inflate`` reads, through
#: nvCOMP; python-lz4's ``lz4.block`` writes and reads it on the CPU).
LZ4_MAGIC = b"DLZ4"
LZ4_HEADER = len(LZ4_MAGIC) + 8
#: nvCOMP's LZ4 decompresses chunks of at most 16 MiB: larger masks are written without the GPU form.
LZ4_MAX_BYTES = 16 * 2**20
#: The manifest's key (under "masks") for the GPU form: its encoding and its files, one per pair.
GPU_FORM = "gpu"


def load_manifest(out: str | Path) -> dict:
    path = Path(out) / MANIFEST
    if not path.is_file():
        raise DataError(f"{out} is not a prepared dataset: {MANIFEST} is missing (run `daliloader prepare DATA OUT`)")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT} manifest")
    if manifest.get("version") != VERSION:
        raise DataError(f"{path}: version {manifest.get('version')} of the prepared format; this daliloader reads "
                        f"version {VERSION}: run `daliloader prepare DATA NEW_OUT` again")
    return manifest


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
    if c["kind"] == "rgb":
        return ClassMap.from_palette(c["colors"], c["names"], ignore_index=c["ignore_index"], source=c["source"])
    return ClassMap.from_ids({int(k): v for k, v in c["ids"].items()}, c["names"], ignore_index=c["ignore_index"],
                             source=c["source"])


def index_samples(index_file: str | Path) -> int:
    """The sample count in the header (``v1.2 N``) of a DALI webdataset index file."""
    head = Path(index_file).open().readline().split()
    if len(head) != 2 or not head[1].isdigit():
        raise DataError(f"{index_file} is not a DALI webdataset index (its first line should be 'v1.2 N')")
    return int(head[1])


def read_lz4_mask(path: str | Path) -> np.ndarray:
    """A mask of the GPU form (see :data:`LZ4_MAGIC`) decoded on the CPU: (H, W) uint8 class indices."""
    import lz4.block

    blob = Path(path).read_bytes()
    if len(blob) < LZ4_HEADER or blob[:len(LZ4_MAGIC)] != LZ4_MAGIC:
        raise DataError(f"{path}: not a daliloader LZ4 mask (no {LZ4_MAGIC!r} header): the prepared copy is damaged; "
                        "run `daliloader verify` on it, or prepare it again")
    h, w = (int(v) for v in np.frombuffer(blob[len(LZ4_MAGIC):LZ4_HEADER], "<i4"))
    try:
        raw = lz4.block.decompress(blob[LZ4_HEADER:], uncompressed_size=h * w)
    except lz4.block.LZ4BlockError as e:
        raise DataError(f"{path}: its LZ4 data does not inflate to {h}x{w} ({e}): the prepared copy is damaged; "
                        "run `daliloader verify` on it, or prepare it again") from e
    return np.frombuffer(raw, np.uint8).reshape(h, w)
