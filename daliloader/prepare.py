"""Prepared datasets: a one-time conversion that takes mask decoding and colour mapping off the critical path.

``prepare(data, out)`` writes::

    OUT/manifest.json              what was made, from what, and how (written last: no manifest, no dataset)
    OUT/images/NNNNNNN-<stem>.ext  the original image bytes (``jpeg_quality``: PNG photos re-encoded as JPEG)
    OUT/masks/NNNNNNN-<stem>.png   single-channel 8-bit class indices; unknown colours/ids -> ignore_index
    OUT/masks_lz4/NNNNNNN-<stem>.lz4  (``gpu_masks``) the same indices LZ4-compressed: the form dali-gpu
                                   inflates on the GPU (PNG decodes only on the CPU, even in DALI's
                                   "mixed" decoder); the CPU backends read the PNG masks
    OUT/shards/NNNNN.tar + .idx    (``pack_size``) packs, webdataset tars: per sample ``NNNNNNN.<image
                                   ext>``, ``NNNNNNN.labels.png`` (the prepared mask), its GPU form
                                   ``NNNNNNN.labels.lz4`` (with ``gpu_masks``) and ``NNNNNNN.index``
                                   (the sample index, int64 little-endian), with the index files DALI's
                                   ``fn.readers.webdataset`` reads (``SegmentationData.from_prepared(OUT,
                                   packs=True)`` reads them); the folder keeps format version 2's name

An RGB colour mask costs several times more to decode than an 8-bit one of the same size, and then
needs the colour-to-class mapping; a prepared mask needs neither. ``SegmentationData.from_prepared``
loads the result for every backend; ``verify`` decodes every prepared mask and compares it with the
mapping of the original, bit for bit, and the copied images byte for byte.

This module needs OpenCV and numpy only (the pack index uses ``wds2idx`` from the DALI wheel). The
reading side of the format is :mod:`daliloader.manifest`.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from . import __version__
from .checks import Expect, quick_problems
from .classes import ClassMap
from .codecs import decode_file, decode_image, decode_mask, encode, read, write_file
from .data import SegmentationData
from .errors import DataError, LoadError
from .folders import OUT_WAY_OUT, atomic_folder, made_once
from .manifest import (FORMAT, GPU_FORM, INDEX_VERSION, LZ4_MAGIC, LZ4_MAX_BYTES, MANIFEST, PACK_GPU_MASK_EXT,
                       PACK_IMAGE_EXTS, PACK_INDEX_EXT, PACK_MASK_EXT, PACKS, VERSION, load_manifest, original_classes,
                       read_lz4_mask, read_manifest)
from .parallel import threaded_map
from .parts import image_suffix, part_file, part_stem, read_part
from .tfrecord import RecordPart, file_stamp

#: PNG settings of prepared masks: no row filter, deflate level 9. Prediction filters do not help maps of
#: class indices: without them the masks decode several times faster and are smaller (measured in the
#: docs/prepared.md, "Which mask form": benchmarks/mask_forms.py).
MASK_PNG_PARAMS = (cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_NONE, cv2.IMWRITE_PNG_COMPRESSION, 9)
#: How the GPU form is described in the manifest.
LZ4_ENCODING = (f"{LZ4_MAGIC.decode()} + height, width (int32 LE) + one LZ4 block (high compression) of the (H, W) "
                "uint8 class indices; inflated on the GPU by DALI's fn.decoders.inflate")


def encode_lz4_mask(labels: np.ndarray) -> bytes:
    """The GPU form of a prepared mask (see :func:`daliloader.manifest.read_lz4_mask`, its reader). LZ4's
    high-compression mode: smaller files (4.0 KB against 11.1 KB for the embedded dataset's 960x720 masks,
    PNG 3.7 KB), the same speed to inflate."""
    import lz4.block

    header = LZ4_MAGIC + np.array(labels.shape, "<i4").tobytes()
    return header + lz4.block.compress(np.ascontiguousarray(labels).tobytes(), mode="high_compression",
                                       store_size=False)


def prepare(data: SegmentationData, out: str | Path, *, jpeg_quality: int | None = None,
            pack_size: int | None = None, workers: int | None = None, progress: bool = True,
            source: dict | None = None, gpu_masks: bool = True) -> dict:
    """Write the prepared copy of ``data`` into ``out`` (new or empty); returns the manifest.

    ``jpeg_quality`` (1-100): re-encode non-JPEG photos as JPEG (decodable by nvJPEG on the GPU) and
    record the quality lost (PSNR); JPEG photos are always copied byte for byte. ``pack_size``: also
    write packs (webdataset tars) of that many samples.
    ``gpu_masks``: also write the masks in the form dali-gpu inflates on the GPU (LZ4, about as small as
    the PNG masks); left out, with a note in the manifest, when a mask is over nvCOMP's 16 MiB. A pair
    that cannot be read stops the conversion with a message naming its files (nothing is skipped); a
    file that cannot be written (a full disk) stops it at once, naming that file.
    ``source`` is recorded in the manifest. How ``out`` is written (a lock, a temporary folder, a marker):
    see :func:`daliloader.folders.atomic_folder`.
    """
    _check_options(data, jpeg_quality, pack_size)
    if (Path(out) / MANIFEST).exists():  # (atomic_folder would refuse it too, less precisely)
        raise DataError(f"{out} already holds a prepared dataset; remove it or {OUT_WAY_OUT}")
    with atomic_folder(out) as folder:
        return _write(data, folder, jpeg_quality, pack_size, workers, progress, source, gpu_masks)


def prepare_cached(data: SegmentationData, out: str | Path, way_out: str, *, pack_size: int | None = None,
                   source: dict | None = None) -> None:
    """:func:`prepare` for a cache (the bench's prepared copy): nothing is done when ``out`` already holds
    the copy, and a run that finds another one making it waits for it, then uses its copy, where
    ``prepare`` would refuse (see :func:`daliloader.folders.made_once`). ``way_out``: what to do when ``out`` cannot be
    written (name the variable that chooses the cache)."""
    _check_options(data, None, pack_size)
    made_once(out, MANIFEST, "daliloader bench --prepared", way_out,
              lambda folder: _write(data, folder, None, pack_size, None, False, source, True))


def _check_options(data: SegmentationData, jpeg_quality: int | None, pack_size: int | None) -> None:
    if data.classes.label_dtype != np.uint8:
        raise DataError(f"ignore_index={data.classes.ignore_index} does not fit an 8-bit mask; prepared masks "
                        "hold class indices 0-255")
    if jpeg_quality is not None and not 1 <= jpeg_quality <= 100:
        raise DataError(f"jpeg_quality must lie in 1-100, got {jpeg_quality}")
    if pack_size is not None and pack_size < 1:
        raise DataError(f"pack_size must be a positive number of samples, got {pack_size}")


def _write(data: SegmentationData, out: Path, jpeg_quality, pack_size, workers, progress, source,
           gpu_masks) -> dict:
    """The prepared copy written into ``out`` (a folder that :func:`~daliloader.folders.atomic_folder` gives)."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(exist_ok=True)
    if gpu_masks:
        (out / "masks_lz4").mkdir(exist_ok=True)
    names = [file_stem(i, p) for i, p in enumerate(data.images)]

    def convert(i: int) -> dict:
        return _convert(data, i, out, names[i], jpeg_quality, gpu_masks)

    started = time.perf_counter()
    rows = list(threaded_map(convert, range(len(data)), workers, "preparing" if progress else None))
    failures = [r["error"] for r in rows if "error" in r]
    if failures:
        shown = "\n".join(f"  {f}" for f in failures[:20])
        more = f"\n  ... and {len(failures) - 20} more" if len(failures) > 20 else ""
        raise LoadError(f"{len(failures)} of {len(data)} pairs could not be prepared; nothing was written as a "
                        f"dataset (no {MANIFEST}):\n{shown}{more}\nRun `daliloader check DATA` for a full report.")
    pairs = [[r["image"], r["mask"]] for r in rows]
    gpu_form = None
    if gpu_masks:
        too_big = [names[i] for i, r in enumerate(rows) if r["lz4"] is None]
        gpu_form = ({"encoding": LZ4_ENCODING, "files": [r["lz4"] for r in rows]} if not too_big else
                    {"left_out": f"{len(too_big)} masks are over nvCOMP's {LZ4_MAX_BYTES >> 20} MiB (first: "
                                 f"{too_big[0]}); dali-gpu reads the PNG masks"})
    manifest = {
        "format": FORMAT, "version": VERSION, "daliloader": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.perf_counter() - started, 1),
        "source": {**(source or {}), **_sources(data)},
        "classes": _classes_entry(data.classes),
        "masks": {"encoding": "png, 1 channel, 8-bit class indices",
                  "how": _how(data.classes),
                  "unknown_pixels": int(sum(r["unknown_pixels"] for r in rows)),
                  "pairs_with_unknown_values": [names[i] for i, r in enumerate(rows) if r["unknown_pixels"]],
                  GPU_FORM: gpu_form},
        "images": _images_entry(rows, jpeg_quality),
        "pairs": pairs,
        PACKS: _write_packs(out, pairs, pack_size, _gpu_files(gpu_form)) if pack_size else None,
    }
    write_file(out / MANIFEST, json.dumps(manifest, indent=1).encode())
    read_manifest(out / MANIFEST)  # written and readable: the copy is complete
    return manifest


def _sources(data: SegmentationData) -> dict:
    """Where the pairs came from, for ``verify``: the files' absolute paths; for records, their names
    and, under "records", each pair's ``[file, record number, byte offset, size]`` and the keys."""
    if data.records is None:
        return {"images": [os.path.abspath(p) for p in data.images], "masks": [os.path.abspath(p) for p in data.masks]}
    return {"images": [str(p) for p in data.images], "masks": [str(p) for p in data.masks],
            "records": [[os.path.abspath(p.file), p.record, p.offset, p.size] for p in data.images],
            "keys": [data.records.image_key, data.records.mask_key]}


def file_stem(index: int, path) -> str:
    """The prepared files' name for pair ``index``: its number and the image's stem (a record's: see
    :func:`daliloader.parts.part_stem`), cut so that the longest file name made of it
    (``.labels.png``, an image extension) stays within 255 bytes, in UTF-8: bytes of a name that are no
    UTF-8 (a Latin-1 ``café``) are left out, and the number keeps the names apart."""
    stem = f"{index:07d}-{part_stem(path)}"
    room = 255 - len(".labels.jpeg")
    return os.fsencode(stem)[:room].decode("utf-8", errors="ignore")


def summary(manifest: dict, out: str | Path) -> str:
    """What ``prepare`` made, in a few lines (the CLI prints it)."""
    m = manifest
    lines = [f"prepared {len(m['pairs'])} pairs into {out} in {m['seconds']} s: masks as 8-bit class indices "
             f"({m['masks']['unknown_pixels']} pixels of unknown values -> ignore index "
             f"{m['classes']['ignore_index']}, in {len(m['masks']['pairs_with_unknown_values'])} masks)"]
    images = m["images"]
    if images["reencoded"]:
        lines.append(f"  {images['reencoded']} photos re-encoded as JPEG: PSNR mean {images['psnr_db']['mean']} dB, "
                     f"min {images['psnr_db']['min']} dB")
    else:
        lines.append("  images copied byte for byte")
    gpu_form = m["masks"].get(GPU_FORM)
    if gpu_form and gpu_form.get("files"):
        root = Path(out)
        size = sum((root / f).stat().st_size for f in gpu_form["files"]) / len(gpu_form["files"]) / 1024
        lines.append(f"  masks also LZ4-compressed for dali-gpu, which inflates them on the GPU ({size:.1f} KB per mask)")
    elif gpu_form:
        lines.append(f"  no GPU form of the masks: {gpu_form['left_out']}")
    packs = m[PACKS]
    if packs:
        root = Path(out)
        size = sum((root / t).stat().st_size for t in packs["tars"]) / 2**20
        files = sum((root / f).stat().st_size for pair in m["pairs"] for f in pair) / 2**20
        lines.append(f"  {len(packs['tars'])} pack(s) (webdataset tars) of up to {packs['samples_per_shard']} samples: "
                     f"{size:.1f} MB beside the {files:.1f} MB of prepared files, which they hold again (the DALI "
                     "backends read the packs; opencv, tfdata and `daliloader verify` read the files)")
    lines.append(f"  load it with dl.SegmentationData.from_prepared({str(out)!r}{', packs=True' if packs else ''})")
    return "\n".join(lines)


def _gpu_files(gpu_form: dict | None) -> list[str] | None:
    """The GPU-form mask files of a manifest's "gpu" entry (None: no such form)."""
    return gpu_form.get("files") if gpu_form else None


def _convert(data: SegmentationData, i: int, out: Path, name: str, jpeg_quality: int | None,
             gpu_masks: bool) -> dict:
    """One pair: the mask mapped to 8-bit indices (and its GPU form), the image copied (or re-encoded).
    A pair that cannot be read is returned as an error, for the message that lists them all; a file that
    cannot be written raises (an OSError naming it), which stops the run at once (the next would fail
    the same way on a full disk)."""
    image, mask = data.images[i], data.masks[i]
    problems = quick_problems(image, mask, Expect.of(data))  # what the loaders would refuse
    if problems:
        return {"error": f"{image} + {mask}: {problems[0]}"}
    files = {}  # what to write: path in the copy -> bytes
    try:
        decoded = decode_mask(read(mask), mask, data.classes)
        labels = data.classes.map_mask(decoded)
        unknown = sum(count for _, count in data.classes.unknown_values(decoded))
        row = {"mask": f"masks/{name}.png", "unknown_pixels": unknown, "psnr": None, "lz4": None}
        files[row["mask"]] = encode(".png", labels, MASK_PNG_PARAMS)
        image_bytes = read_part(image)
        suffix = image_suffix(image, image_bytes)
        if gpu_masks and labels.nbytes <= LZ4_MAX_BYTES:
            row["lz4"] = f"masks_lz4/{name}.lz4"
            files[row["lz4"]] = encode_lz4_mask(labels)
        if jpeg_quality is not None and suffix not in (".jpg", ".jpeg"):
            rgb = decode_image(np.frombuffer(image_bytes, np.uint8), image)
            row["image"] = f"images/{name}.jpg"
            files[row["image"]] = encode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                                         (cv2.IMWRITE_JPEG_QUALITY, jpeg_quality))
            back = cv2.cvtColor(cv2.imdecode(np.frombuffer(files[row["image"]], np.uint8), cv2.IMREAD_COLOR),
                                cv2.COLOR_BGR2RGB)
            row["psnr"] = cv2.PSNR(rgb, back)
        else:
            row["image"] = f"images/{name}{suffix}"
            files[row["image"]] = image_bytes
    except (LoadError, OSError, ValueError) as e:
        return {"error": f"{image} + {mask}: {str(e).splitlines()[0]}"}
    for path, blob in files.items():
        write_file(out / path, blob)
    return row


def _how(classes: ClassMap) -> str:
    if classes.kind == "rgb":
        return (f"each RGB colour of the palette ({classes.source}) -> its class index; every other colour -> "
                f"ignore_index {classes.ignore_index}")
    return (f"each mask id -> its class by the id table ({classes.source}); ids mapped to ignore and ids "
            f"absent from the table -> ignore_index {classes.ignore_index}")


def _classes_entry(classes: ClassMap) -> dict:
    entry = {"names": list(classes.names), "ignore_index": classes.ignore_index, "kind": classes.kind,
             "source": classes.source}
    if classes.kind == "rgb":
        entry["colors"] = classes.colors.tolist()
    else:
        entry["ids"] = {str(k): v for k, v in sorted(classes.id_to_class.items())}
    return entry


def _images_entry(rows: list[dict], jpeg_quality: int | None) -> dict:
    psnr = [r["psnr"] for r in rows if r["psnr"] is not None]
    entry = {"encoding": "original bytes" if not psnr else f"non-JPEG photos re-encoded as JPEG, quality {jpeg_quality}",
             "reencoded": len(psnr)}
    if psnr:
        finite = [p for p in psnr if np.isfinite(p)]
        entry["psnr_db"] = {"mean": round(float(np.mean(finite)), 2) if finite else None,
                            "min": round(float(np.min(finite)), 2) if finite else None}
    return entry


def _write_packs(out: Path, pairs: list[list[str]], pack_size: int, gpu_masks: list[str] | None) -> dict:
    """Webdataset tars of ``pack_size`` samples (key ``NNNNNNN``: image, ``labels.png``, ``labels.lz4``
    when there is a GPU form, ``index``) and their DALI index files."""
    try:
        import wds2idx  # noqa: F401  (ships with the DALI wheel)
    except ImportError as e:
        raise ImportError("writing pack indexes needs DALI's wds2idx: install daliloader[cuda120] or "
                          "daliloader[cuda130]") from e
    folder = out / PACKS
    folder.mkdir(exist_ok=True)
    tars, indexes = [], []
    for p, first in enumerate(range(0, len(pairs), pack_size)):
        tar_path, idx_path = folder / f"{p:05d}.tar", folder / f"{p:05d}.idx"
        try:
            _write_pack(out, pairs, first, min(first + pack_size, len(pairs)), tar_path, idx_path, gpu_masks)
        except OSError as e:  # a write to an open file names none: name the pack
            raise OSError(e.errno, e.strerror, e.filename or str(tar_path)) from None
        except (tarfile.TarError, ValueError) as e:  # ValueError: wds2idx found no member in the tar
            raise LoadError(f"cannot write the pack {tar_path}: {e}") from None
        tars.append(f"{PACKS}/{tar_path.name}")
        indexes.append(f"{PACKS}/{idx_path.name}")
    # "samples_per_shard": format version 2's name for the pack size
    return {"format": "webdataset", "samples_per_shard": pack_size, "tars": tars, "indexes": indexes,
            "image_exts": list(PACK_IMAGE_EXTS), "mask_ext": PACK_MASK_EXT, "index_ext": PACK_INDEX_EXT,
            "gpu_mask_ext": PACK_GPU_MASK_EXT if gpu_masks else None}


def _write_pack(out: Path, pairs, first: int, stop: int, tar_path: Path, idx_path: Path, gpu_masks) -> None:
    """One tar of the samples ``[first, stop)`` and its DALI index."""
    from wds2idx import IndexCreator

    with tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(first, stop):
            image, mask = pairs[i]
            tar.add(out / image, arcname=f"{i:07d}.{Path(image).suffix.lower().lstrip('.')}")
            tar.add(out / mask, arcname=f"{i:07d}.{PACK_MASK_EXT}")
            if gpu_masks:
                tar.add(out / gpu_masks[i], arcname=f"{i:07d}.{PACK_GPU_MASK_EXT}")
            member = tarfile.TarInfo(f"{i:07d}.{PACK_INDEX_EXT}")
            member.size = 8
            tar.addfile(member, io.BytesIO(_index_bytes(i)))
    with IndexCreator(str(tar_path), str(idx_path), verbose=False) as creator:
        creator.create_index()


def _members(path: Path, problems: list[str]):
    """The (member, bytes) of a tar, read front to back; where it breaks off (a truncated or damaged
    pack), a problem naming the tar and the byte, and no more members."""
    offset = None
    try:
        with tarfile.open(path) as tar:
            while True:
                offset = tar.offset
                member = tar.next()
                if member is None:
                    return
                if not member.isfile():
                    problems.append(f"{path}: {member.name} is not a file: the pack is damaged; prepare the copy again")
                    continue
                yield member, tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as e:
        size = path.stat().st_size if path.exists() else 0
        where = f"breaks at byte {offset} of {size}" if offset is not None else "cannot be opened"
        problems.append(f"{path}: {where} ({e}): truncated or damaged; prepare the copy again")


def _index_bytes(i: int) -> bytes:
    return np.int64(i).astype("<i8").tobytes()


def _index_text(members: list[tarfile.TarInfo]) -> str:
    """The DALI index of a tar with these members, as DALI's ``wds2idx`` writes it: ``v1.2 N``, then per
    sample (the members that share a name before the first dot) ``ext offset size name`` of each."""
    samples, last = [], None
    for member in members:
        cut = member.name.find(".", member.name.rfind("/") + 1)
        key, ext = member.name[:cut], member.name[cut + 1:]
        if not key or key.endswith("/"):
            continue
        if key != last:
            samples.append([])
            last = key
        samples[-1].append(f"{ext} {member.offset_data} {member.size} {member.name}")
    return f"{INDEX_VERSION} {len(samples)}\n" + "".join(" ".join(sample) + "\n" for sample in samples)


# ---------------------------------------------------------------- checking a copy
@dataclass
class VerifyReport:
    """What ``verify`` compared, and every difference it found."""

    pairs: int
    masks_checked: int = 0  # compared with the mapping of their originals
    gpu_masks_checked: int = 0  # their GPU form (LZ4), compared with the originals or, where gone, the PNG masks
    images_checked: int = 0  # copied images compared with their originals
    pack_members_checked: int = 0
    indexes_checked: int = 0  # the packs' DALI index files compared with their tars
    originals_missing: int = 0  # pairs whose originals are not where the manifest says
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __str__(self) -> str:
        forms = f" (and {self.gpu_masks_checked} of their LZ4 forms)" if self.gpu_masks_checked else ""
        indexes = f" and {self.indexes_checked} pack indexes" if self.indexes_checked else ""
        if self.ok:
            return (f"verified {self.pairs} pairs: {self.masks_checked} masks{forms} equal the mapping of their "
                    f"originals, {self.images_checked} images byte-identical, {self.pack_members_checked} pack "
                    f"members identical to their sources{indexes and indexes + ' that match their tars'}")
        missing = (f"; {self.originals_missing} pairs not compared with their originals, which are missing"
                   if self.originals_missing else "")
        packs = f"{self.pack_members_checked} pack members with their sources"
        packs = f"{packs}{indexes} with their tars" if indexes else packs
        head = (f"verified {self.pairs} pairs, comparing {self.masks_checked} masks{forms} with the mapping of their "
                f"originals, {self.images_checked} images byte for byte, {packs}{missing}")
        lines = "\n".join(f"  {m}" for m in self.mismatches[:20])
        more = f"\n  ... and {len(self.mismatches) - 20} more" if len(self.mismatches) > 20 else ""
        return f"{head}\n{len(self.mismatches)} MISMATCH(ES):\n{lines}{more}"


def verify(out: str | Path, workers: int | None = None, progress: bool = True) -> VerifyReport:
    """Decode every prepared mask and compare it with the mapping of its original, bit for bit; compare
    copied images and pack members with their sources byte for byte, and the packs' DALI index files
    with their tars.

    It reports, never raises, on what it finds: sources that moved (the checks that need no source still
    run: every prepared mask decodes, its LZ4 form holds the same indices), files of the copy that are
    missing or damaged, packs that break off (named, with the byte where they break) and index files
    that are missing or do not match their tar. A manifest that cannot be read is a DataError naming it."""
    out = Path(out)
    manifest = load_manifest(out)
    originals = original_classes(manifest)
    src_images, src_masks = _original_parts(manifest, out)
    pairs = manifest["pairs"]
    gpu_masks = _gpu_files(manifest["masks"].get(GPU_FORM))
    report = VerifyReport(pairs=len(pairs))

    def one(i: int) -> dict:
        image, mask = pairs[i]
        problems, found = [], {"mask": False, "gpu": False, "image": False}
        moved = not (_exists(src_masks[i]) and _exists(src_images[i]))
        # (read by Python, decoded from memory: OpenCV's own file functions crash on names that are no UTF-8)
        got = decode_file(out / mask, cv2.IMREAD_UNCHANGED) if (out / mask).is_file() else None
        if got is None or got.dtype != np.uint8 or got.ndim != 2:
            problems.append(f"{out / mask}: missing, or not a single-channel 8-bit PNG")
            got = None
        want = None
        if _exists(src_masks[i]):
            try:
                want = originals.map_mask(decode_mask(read(src_masks[i]), str(src_masks[i]), originals))
            except (LoadError, OSError, DataError) as e:
                problems.append(str(e).splitlines()[0])
        if got is not None and want is not None:
            problems += _differences(out / mask, got, want, src_masks[i])
            found["mask"] = True
        if gpu_masks:  # the GPU form, inflated on the CPU: the original's indices (or the PNG's), bit for bit
            reference = want if want is not None else got
            try:
                inflated = read_lz4_mask(out / gpu_masks[i])
            except (DataError, OSError) as e:
                problems.append(f"{out / gpu_masks[i]}: cannot read it ({e.strerror})" if isinstance(e, OSError) else
                                str(e).split("; run `daliloader verify`")[0])
            else:
                if reference is not None:
                    problems += _differences(out / gpu_masks[i], inflated, reference,
                                             src_masks[i] if want is not None else out / mask)
                    found["gpu"] = True
        try:
            copied = _exists(src_images[i]) and Path(image).suffix.lower() == image_suffix(src_images[i])
            if copied and (out / image).read_bytes() != read_part(src_images[i]):
                problems.append(f"{out / image}: bytes differ from {src_images[i]}")
            found["image"] = copied
        except OSError as e:
            problems.append(f"{e.filename or out / image}: cannot read it ({e.strerror or e})")
        except DataError as e:  # a record that cannot be read
            problems.append(str(e))
        return {"problems": problems, "found": found, "moved": moved}

    moved = []
    for i, result in enumerate(threaded_map(one, range(len(pairs)), workers, "verifying" if progress else None)):
        report.mismatches += result["problems"]
        report.masks_checked += result["found"]["mask"]
        report.gpu_masks_checked += result["found"]["gpu"]
        report.images_checked += result["found"]["image"]
        if result["moved"]:
            moved.append(i)
    if moved:
        report.originals_missing = len(moved)
        first = next(p for p in (src_masks[moved[0]], src_images[moved[0]]) if not _exists(p))
        report.mismatches.insert(0, f"the originals of {len(moved)} of {len(pairs)} pairs are not where the manifest "
                                    f"says (first: {first}): moved or deleted? Their masks and images were not "
                                    "compared with them; everything else was checked")
    if manifest.get(PACKS):
        report.pack_members_checked, report.indexes_checked, problems = _verify_packs(out, manifest)
        report.mismatches += problems
    return report


def _original_parts(manifest: dict, out: Path) -> tuple[list, list]:
    """The originals of each pair: files, or the records they were read from (see :func:`_sources`)."""
    source = manifest["source"]
    if "records" not in source:
        return [_source(p, out) for p in source["images"]], [_source(p, out) for p in source["masks"]]
    stamps: dict[str, tuple] = {}

    def part(row, key):
        file, record, offset, size = row
        if file not in stamps:
            stamps[file] = file_stamp(file) if os.path.isfile(file) else ()
        return RecordPart(file, record, offset, size, key, None, stamps[file])

    image_key, mask_key = source["keys"]
    return [part(r, image_key) for r in source["records"]], [part(r, mask_key) for r in source["records"]]


def _exists(part) -> bool:
    return os.path.isfile(part_file(part))


def _source(path: str, out: Path) -> Path:
    """A source file as the manifest records it: absolute (since format version 2 copies made by
    daliloader 0.2), or, in older manifests, relative to the folder prepare ran in; tried from the
    current folder, then beside the copy."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    beside = out.absolute().parent / p
    return beside if beside.exists() else p


def _differences(path: Path, got: np.ndarray, want: np.ndarray, original: str) -> list[str]:
    """What differs between a prepared mask's indices and the mapping of its original."""
    if got.shape == want.shape and np.array_equal(got, want):
        return []
    bad = int(np.count_nonzero(got != want)) if got.shape == want.shape else got.size
    return [f"{path}: {bad} pixels differ from the mapping of {original}"]


def _verify_packs(out: Path, manifest: dict) -> tuple[int, int, list[str]]:
    """Every pack member equals what it was made from (the prepared file, or the sample's index);
    every sample has each of its members (three, four with the GPU form) in the packs exactly once;
    each DALI index file is the index of its tar. Returns (members compared, indexes compared, problems)."""
    gpu_masks = _gpu_files(manifest["masks"].get(GPU_FORM)) if manifest[PACKS].get("gpu_mask_ext") else None
    kinds = ("image", "mask", "index") + (("gpu mask",) if gpu_masks else ())
    seen, problems, indexes = {}, [], 0
    for tar_name, index_name in zip(manifest[PACKS]["tars"], manifest[PACKS]["indexes"]):
        members, broken = [], len(problems)
        for member, data in _members(out / tar_name, problems):
            members.append(member)
            key, ext = member.name.split(".", 1) if "." in member.name else (member.name, "")
            if not key.isdigit() or int(key) >= len(manifest["pairs"]):
                problems.append(f"{out / tar_name}: {member.name} belongs to no pair of the manifest")
                continue
            i = int(key)
            image, mask = manifest["pairs"][i]
            kind = {PACK_MASK_EXT: "mask", PACK_INDEX_EXT: "index", PACK_GPU_MASK_EXT: "gpu mask"}.get(ext, "image")
            source = {"image": out / image, "mask": out / mask,
                      "gpu mask": out / gpu_masks[i] if gpu_masks else None}.get(kind)  # None: the index
            try:
                want = source.read_bytes() if source else _index_bytes(i)
            except OSError as e:
                problems.append(f"{source}: cannot read it ({e.strerror or e})")
                want = None
            if want is not None and data != want:
                problems.append(f"{out / tar_name}: {member.name} differs from {source or f'sample index {i}'}")
            seen[(i, kind)] = seen.get((i, kind), 0) + 1
        if len(problems) == broken:  # a tar read whole: its index must be the one DALI's wds2idx makes of it
            problems += _index_problems(out / index_name, out / tar_name, _index_text(members))
            indexes += 1
    for i in range(len(manifest["pairs"])):
        for kind in kinds:
            if seen.get((i, kind)) != 1:
                problems.append(f"pair {i}: its {kind} is in the packs {seen.get((i, kind), 0)} times, not once")
    return sum(seen.values()), indexes, problems


def _index_problems(index: Path, tar: Path, want: str) -> list[str]:
    """How the DALI index file ``index`` differs from ``want``, the index of ``tar``: DALI's webdataset
    reader seeks by it, so a wrong one gives other samples' bytes, or an error naming no file."""
    try:
        got = index.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        return [f"{index}: cannot read the index of {tar} ({e.strerror or e}): DALI's webdataset reader needs it; "
                "prepare the copy again"]
    if got == want:
        return []
    got_lines, want_lines = got.splitlines(), want.splitlines()
    line = next((n for n, (a, b) in enumerate(zip(got_lines, want_lines), 1) if a != b),
                min(len(got_lines), len(want_lines)) + 1)
    return [f"{index}: does not match {tar} (first difference on line {line}): DALI's webdataset reader, which seeks "
            "by it, would read the wrong bytes; prepare the copy again"]
