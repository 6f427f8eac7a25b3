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

import glob
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from . import __version__
from .checks import Expect, quick_problems
from .classes import ClassMap
from .codecs import decode_image, decode_mask, read
from .data import SegmentationData
from .errors import DataError, LoadError, user_stacklevel
from .pairing import INCOMPLETE_MARKER
from .manifest import (FORMAT, GPU_FORM, LZ4_MAGIC, LZ4_MAX_BYTES, MANIFEST, PACK_GPU_MASK_EXT, PACK_IMAGE_EXTS,
                       PACK_INDEX_EXT, PACK_MASK_EXT, PACKS, VERSION, load_manifest, original_classes, read_lz4_mask)
from .parallel import threaded_map

#: PNG settings of prepared masks: no row filter, deflate level 9. Prediction filters do not help maps of
#: class indices: without them the masks decode several times faster and are smaller (measured in the
#: README, "Which mask form": benchmarks/mask_forms.py).
MASK_PNG_PARAMS = (cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_NONE, cv2.IMWRITE_PNG_COMPRESSION, 9)
#: How the GPU form is described in the manifest.
LZ4_ENCODING = (f"{LZ4_MAGIC.decode()} + height, width (int32 LE) + one LZ4 block (high compression) of the (H, W) "
                "uint8 class indices; inflated on the GPU by DALI's fn.experimental.inflate")


def encode_lz4_mask(labels: np.ndarray) -> bytes:
    """The GPU form of a prepared mask (see :func:`daliloader.manifest.read_lz4_mask`, its reader). LZ4's
    high-compression mode: smaller files (4.0 KB against 11.1 KB for the embedded dataset's 960x720 masks,
    PNG 3.7 KB), the same speed to inflate."""
    import lz4.block

    header = LZ4_MAGIC + np.array(labels.shape, "<i4").tobytes()
    return header + lz4.block.compress(np.ascontiguousarray(labels).tobytes(), mode="high_compression",
                                       store_size=False)


@dataclass
class VerifyReport:
    """What ``verify`` compared, and every difference it found."""

    pairs: int
    masks_checked: int = 0
    gpu_masks_checked: int = 0  # their GPU form (LZ4)
    images_checked: int = 0
    pack_members_checked: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __str__(self) -> str:
        forms = f" (and {self.gpu_masks_checked} of their LZ4 forms)" if self.gpu_masks_checked else ""
        head = (f"verified {self.pairs} pairs: {self.masks_checked} masks{forms} equal the mapping of their originals, "
                f"{self.images_checked} images byte-identical, {self.pack_members_checked} pack members "
                f"identical to their sources")
        if self.ok:
            return head
        lines = "\n".join(f"  {m}" for m in self.mismatches[:20])
        more = f"\n  ... and {len(self.mismatches) - 20} more" if len(self.mismatches) > 20 else ""
        return f"{head}\n{len(self.mismatches)} MISMATCH(ES):\n{lines}{more}"


def prepare(data: SegmentationData, out: str | Path, *, jpeg_quality: int | None = None,
            pack_size: int | None = None, workers: int | None = None, progress: bool = True,
            source: dict | None = None, gpu_masks: bool = True) -> dict:
    """Write the prepared copy of ``data`` into ``out`` (new or empty); returns the manifest.

    ``jpeg_quality`` (1-100): re-encode non-JPEG photos as JPEG (decodable by nvJPEG on the GPU) and
    record the quality lost (PSNR); JPEG photos are always copied byte for byte. ``pack_size``: also
    write packs (webdataset tars) of that many samples.
    ``gpu_masks``: also write the masks in the form dali-gpu inflates on the GPU (LZ4, about as small as
    the PNG masks); left out, with a note in the manifest, when a mask is over nvCOMP's 16 MiB. A pair
    that cannot be read stops the conversion with a message naming its files (nothing is skipped).
    ``source`` is recorded in the manifest.
    """
    out = Path(out)
    if data.classes.label_dtype != np.uint8:
        raise DataError(f"ignore_index={data.classes.ignore_index} does not fit an 8-bit mask; prepared masks "
                        "hold class indices 0-255")
    if jpeg_quality is not None and not 1 <= jpeg_quality <= 100:
        raise DataError(f"jpeg_quality must lie in 1-100, got {jpeg_quality}")
    if pack_size is not None and pack_size < 1:
        raise DataError(f"pack_size must be a positive number of samples, got {pack_size}")
    with atomic_folder(out) as tmp:
        return _write(data, tmp, jpeg_quality, pack_size, workers, progress, source, gpu_masks)


def _write(data: SegmentationData, out: Path, jpeg_quality, pack_size, workers, progress, source,
           gpu_masks) -> dict:
    """The prepared copy written into ``out`` (a temporary folder, renamed into place afterwards)."""
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
        "source": {**(source or {}), "images": [os.path.abspath(p) for p in data.images],
                   "masks": [os.path.abspath(p) for p in data.masks]},
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
    _write_file(out / MANIFEST, json.dumps(manifest, indent=1).encode())
    load_manifest(out)  # written and readable: the copy is complete
    return manifest


@contextmanager
def atomic_folder(out: Path, what: str = "daliloader prepare"):
    """Yield a temporary sibling of ``out`` to write into, renamed to ``out`` when the block succeeds,
    removed when it fails or is interrupted; the whole under an exclusive lock on ``out``.

    As TFDS (``*.incomplete*`` folders) and Hugging Face datasets (lock files) do: a second writer to
    the same ``out`` is refused with the first one's name, an interruption leaves no folder under
    ``out``'s name, and a later run removes the leftovers of interrupted ones, saying so.
    """
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(out, what):
        _check_output(out)
        for leftover in sorted(out.parent.glob(f"{glob.escape(out.name)}.incomplete-*")):
            shutil.rmtree(leftover, ignore_errors=True)
            warnings.warn(f"removed {leftover}: the leftover of an interrupted `{what}` into {out}",
                          stacklevel=user_stacklevel())
        tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.incomplete-", dir=out.parent))
        try:
            (tmp / INCOMPLETE_MARKER).write_text(f"{what} into {out}, pid {os.getpid()}: not a dataset until renamed into "
                                          "place\n")
            yield tmp
            (tmp / INCOMPLETE_MARKER).unlink()
            if out.exists():
                out.rmdir()  # empty: checked above
            tmp.rename(out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


@contextmanager
def exclusive(out: Path, what: str = "daliloader prepare"):
    """Hold ``out``'s lock (``.<name>.lock`` beside it, a ``filelock.FileLock``) for the block; another
    holder is refused at once with what it said about itself (process, host, start)."""
    from filelock import FileLock, Timeout

    lock_path = out.parent / f".{out.name}.lock"
    owner = out.parent / f".{out.name}.lock.owner"
    lock = FileLock(str(lock_path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        holder = _holder(owner)
        raise DataError(f"{out} is being written by {holder} (lock {lock_path}); wait for it to finish, or "
                        "choose another OUT") from None
    except OSError as e:
        raise DataError(f"cannot lock {lock_path} ({e.strerror or e}): is {out.parent} writable? (the cache folder "
                        "is $DALILOADER_CACHE, by default ~/.cache/daliloader)") from None
    try:
        note = owner.with_name(f"{owner.name}.{os.getpid()}")
        note.write_text(f"{what}, pid {os.getpid()} on {socket.gethostname()}, since "
                        f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
        note.replace(owner)  # whole or not at all, for a refused run reading it
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def _holder(owner: Path, wait: float = 2.0) -> str:
    """What the lock's holder wrote about itself; it writes that just after taking the lock, so a run
    refused in between waits for it a moment."""
    deadline = time.monotonic() + wait
    while True:
        try:
            text = owner.read_text().strip()
            if text:
                return text
        except OSError:
            pass
        if time.monotonic() > deadline:
            return "another process"
        time.sleep(0.02)


def file_stem(index: int, path: str) -> str:
    """The prepared files' name for pair ``index``: its number and the image's stem, cut so that the
    longest file name made of it (``.labels.png``, an image extension) stays within 255 bytes."""
    stem = f"{index:07d}-{Path(path).stem}"
    room = 255 - len(".labels.jpeg")
    return stem.encode()[:room].decode(errors="ignore")


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, trusting nothing: a short write (a full disk) raises, naming the file."""
    try:
        with open(path, "wb") as fh:
            fh.write(data)
        if path.stat().st_size != len(data):
            raise OSError(f"{path.stat().st_size} of {len(data)} bytes written")
    except OSError as e:
        raise LoadError(f"cannot write {path}: {e.strerror or e} (is the disk full or the folder read-only?)") from None


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


def _check_output(out: Path) -> None:
    if (out / MANIFEST).exists():
        raise DataError(f"{out} already holds a prepared dataset; remove it or choose another OUT")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError(f"{out} exists and is not an empty folder; choose a new OUT")


def _gpu_files(gpu_form: dict | None) -> list[str] | None:
    """The GPU-form mask files of a manifest's "gpu" entry (None: no such form)."""
    return gpu_form.get("files") if gpu_form else None


def _convert(data: SegmentationData, i: int, out: Path, name: str, jpeg_quality: int | None,
             gpu_masks: bool) -> dict:
    """One pair: the mask mapped to 8-bit indices (and its GPU form), the image copied (or re-encoded)."""
    image, mask = data.images[i], data.masks[i]
    problems = quick_problems(image, mask, Expect.of(data))  # what the loaders would refuse
    if problems:
        return {"error": f"{image} + {mask}: {problems[0]}"}
    try:
        decoded = decode_mask(read(mask), mask, data.classes)
        labels = data.classes.map_mask(decoded)
        unknown = sum(count for _, count in data.classes.unknown_values(decoded))
        mask_out = f"masks/{name}.png"
        _write_file(out / mask_out, _png(labels))
        suffix = Path(image).suffix.lower()
        row = {"mask": mask_out, "unknown_pixels": unknown, "psnr": None, "lz4": None}
        if gpu_masks and labels.nbytes <= LZ4_MAX_BYTES:
            row["lz4"] = f"masks_lz4/{name}.lz4"
            _write_file(out / row["lz4"], encode_lz4_mask(labels))
        if jpeg_quality is not None and suffix not in (".jpg", ".jpeg"):
            rgb = decode_image(read(image), image)
            row["image"] = f"images/{name}.jpg"
            ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                                       [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
            _write_file(out / row["image"], encoded.tobytes())
            back = cv2.cvtColor(cv2.imdecode(encoded, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
            row["psnr"] = cv2.PSNR(rgb, back)
        else:
            row["image"] = f"images/{name}{suffix}"
            _write_file(out / row["image"], Path(image).read_bytes())
        return row
    except (LoadError, OSError, ValueError) as e:
        return {"error": f"{image} + {mask}: {str(e).splitlines()[0]}"}


def _png(labels: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", labels, MASK_PNG_PARAMS)
    if not ok:
        raise LoadError(f"OpenCV cannot encode a {labels.shape} {labels.dtype} mask as PNG")
    return encoded.tobytes()


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
        except (OSError, tarfile.TarError) as e:
            raise LoadError(f"cannot write the pack {tar_path}: {getattr(e, 'strerror', None) or e} (is the disk full "
                            "or the folder read-only?)") from None
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
    try:
        with tarfile.open(path) as tar:
            while True:
                offset = tar.offset
                member = tar.next()
                if member is None:
                    return
                yield member, tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as e:
        size = path.stat().st_size if path.exists() else 0
        where = f"breaks at byte {offset} of {size}" if "offset" in locals() else "cannot be opened"
        problems.append(f"{path}: {where} ({e}): truncated or damaged; prepare the copy again")


def _index_bytes(i: int) -> bytes:
    return np.int64(i).astype("<i8").tobytes()


# ---------------------------------------------------------------- checking a copy
def verify(out: str | Path, workers: int | None = None, progress: bool = True) -> VerifyReport:
    """Decode every prepared mask and compare it with the mapping of its original, bit for bit; compare
    copied images and pack members with their sources byte for byte.

    It reports, never raises, on what it finds: sources that moved (the checks that need no source still
    run: every prepared mask decodes, its LZ4 form holds the same indices), files of the copy that are
    missing or damaged, and packs that break off (named, with the byte where they break)."""
    out = Path(out)
    manifest = load_manifest(out)
    originals = original_classes(manifest)
    src_images = [_source(p, out) for p in manifest["source"]["images"]]
    src_masks = [_source(p, out) for p in manifest["source"]["masks"]]
    pairs = manifest["pairs"]
    gpu_masks = _gpu_files(manifest["masks"].get(GPU_FORM))
    report = VerifyReport(pairs=len(pairs))

    def one(i: int) -> tuple[list[str], bool, bool]:
        image, mask = pairs[i]
        problems, moved = [], not (src_masks[i].is_file() and src_images[i].is_file())
        got = cv2.imread(str(out / mask), cv2.IMREAD_UNCHANGED) if (out / mask).is_file() else None
        if got is None or got.dtype != np.uint8 or got.ndim != 2:
            problems.append(f"{out / mask}: missing, or not a single-channel 8-bit PNG")
        want = None
        if src_masks[i].is_file():
            try:
                want = originals.map_mask(decode_mask(read(str(src_masks[i])), str(src_masks[i]), originals))
            except LoadError as e:
                problems.append(str(e).splitlines()[0])
        if got is not None and want is not None:
            problems += _differences(out / mask, got, want, src_masks[i])
        if gpu_masks:  # the GPU form, inflated on the CPU: the original's indices (or the PNG's), bit for bit
            try:
                reference = want if want is not None else got
                inflated = read_lz4_mask(out / gpu_masks[i])
                if reference is not None:
                    problems += _differences(out / gpu_masks[i], inflated, reference,
                                             src_masks[i] if want is not None else out / mask)
            except (DataError, OSError) as e:
                problems.append(str(e).split("; run `daliloader verify`")[0])
        copied = Path(image).suffix.lower() == src_images[i].suffix.lower() and src_images[i].is_file()
        try:
            if copied and (out / image).read_bytes() != src_images[i].read_bytes():
                problems.append(f"{out / image}: bytes differ from {src_images[i]}")
        except OSError as e:
            problems.append(f"{out / image}: cannot read it ({e.strerror or e})")
        return problems, copied, moved

    moved = []
    for i, (problems, copied, gone) in enumerate(threaded_map(one, range(len(pairs)), workers,
                                                              "verifying" if progress else None)):
        report.mismatches += problems
        report.masks_checked += 1
        report.gpu_masks_checked += bool(gpu_masks)
        report.images_checked += copied
        if gone:
            moved.append(i)
    if moved:
        first = next(p for p in (src_masks[moved[0]], src_images[moved[0]]) if not p.is_file())
        report.mismatches.insert(0, f"the originals of {len(moved)} of {len(pairs)} pairs are not where the manifest "
                                    f"says (first: {first}): moved or deleted? Their masks and images were not "
                                    "compared with them; everything else was checked")
    if manifest.get(PACKS):
        report.pack_members_checked, problems = _verify_packs(out, manifest)
        report.mismatches += problems
    return report


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


def _verify_packs(out: Path, manifest: dict) -> tuple[int, list[str]]:
    """Every pack member equals what it was made from (the prepared file, or the sample's index);
    every sample has each of its members (three, four with the GPU form) in the packs exactly once."""
    gpu_masks = _gpu_files(manifest["masks"].get(GPU_FORM)) if manifest[PACKS].get("gpu_mask_ext") else None
    kinds = ("image", "mask", "index") + (("gpu mask",) if gpu_masks else ())
    seen, problems = {}, []
    for tar_name in manifest[PACKS]["tars"]:
        for member, data in _members(out / tar_name, problems):
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
    for i in range(len(manifest["pairs"])):
        for kind in kinds:
            if seen.get((i, kind)) != 1:
                problems.append(f"pair {i}: its {kind} is in the packs {seen.get((i, kind), 0)} times, not once")
    return sum(seen.values()), problems
