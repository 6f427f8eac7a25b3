"""Prepared datasets: a one-time conversion that takes mask decoding and colour mapping off the critical path.

``prepare(data, out)`` writes::

    OUT/manifest.json              what was made, from what, and how (written last: no manifest, no dataset)
    OUT/images/NNNNNNN-<stem>.ext  the original image bytes (``jpeg_quality``: PNG photos re-encoded as JPEG)
    OUT/masks/NNNNNNN-<stem>.png   single-channel 8-bit class indices; unknown colours/ids -> ignore_index
    OUT/masks_lz4/NNNNNNN-<stem>.lz4  (``gpu_masks``) the same indices LZ4-compressed: the form dali-gpu
                                   inflates on the GPU (PNG decodes only on the CPU, even in DALI's
                                   "mixed" decoder); the CPU backends read the PNG masks
    OUT/packs/NNNNN.tar + .idx     (``pack_size``) packs, webdataset tars: per sample ``NNNNNNN.<image
                                   ext>``, ``NNNNNNN.labels.png`` (the prepared mask), its GPU form
                                   ``NNNNNNN.labels.lz4`` (with ``gpu_masks``) and ``NNNNNNN.index``
                                   (the sample index, int64 little-endian), with the index files DALI's
                                   ``fn.readers.webdataset`` reads (``SegmentationData.from_prepared(OUT,
                                   packs=True)`` reads them; see ``daliloader.packs``)

An RGB colour mask costs several times more to decode than an 8-bit one of the same size, and then
needs the colour-to-class mapping; a prepared mask needs neither. ``SegmentationData.from_prepared``
loads the result for every backend; :func:`verify` (from ``daliloader.verification``) decodes every
prepared mask and compares it with the mapping of the original, bit for bit, and the copied images byte
for byte.

This module needs OpenCV and numpy only (the pack index uses ``wds2idx`` from the DALI wheel). The
reading side of the format is :mod:`daliloader.manifest`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import cv2
import numpy as np

from . import __version__, buckets
from .cache import PREPARE_SCRATCH
from .classes import ClassMap, MaskKind
from .codecs import MASK_PNG_PARAMS, decode_image, encode, encode_lz4_mask, read_part_labels, write_file
from .data import SegmentationData
from .environment import cache_scratch
from .errors import DataError, LoadError, moved
from .folders import OUT_WAY_OUT, atomic_folder, made_once
from .inspection import Expect, quick_problems
from .manifest import (
    LZ4_MAGIC,
    LZ4_MAX_BYTES,
    MANIFEST,
    SOURCE_KEYS,
    VERSION,
    ClassesEntry,
    GpuForm,
    ImagesEntry,
    Manifest,
    MasksEntry,
    Psnr,
    Source,
    read_manifest,
)
from .packs import write_packs
from .parallel import threaded_map
from .parts import image_suffix, part_file, part_stamp, part_stem, read_part
from .spec import check_workers
from .verification import VerifyReport, verify

__all__ = ["prepare", "prepare_cached", "PrepareOptions", "PreparedPair", "summary", "file_stem", "encode_lz4_mask",
           "MASK_PNG_PARAMS", "LZ4_ENCODING", "verify", "VerifyReport", "MANIFEST", "VERSION"]

#: How the GPU form is described in the manifest.
LZ4_ENCODING = (f"{LZ4_MAGIC.decode()} + height, width (int32 LE) + one LZ4 block (high compression) of the (H, W) "
                "uint8 class indices; inflated on the GPU by DALI's fn.decoders.inflate")
#: How many failed pairs the error of a failed ``prepare`` lists (it counts them all).
SHOWN = 20


@dataclass(frozen=True)
class PrepareOptions:
    """How :func:`prepare` writes a copy: its keyword arguments, passed along as one value."""

    jpeg_quality: int | None = None  # 1-100: re-encode non-JPEG photos as JPEG of that quality
    pack_size: int | None = None  # also write packs of that many samples
    workers: int | None = None  # threads converting pairs (None: one per core)
    progress: bool = True  # show a progress bar
    source: dict | None = None  # recorded in the manifest's "source" (Source.extra), beside the originals' paths
    gpu_masks: bool = True  # also write the masks' GPU form

    def check(self, data: SegmentationData) -> None:
        """A DataError when these options cannot prepare ``data`` (or are out of range)."""
        if data.classes.label_dtype != np.uint8:
            raise DataError(f"ignore_index={data.classes.ignore_index} does not fit an 8-bit mask; prepared masks "
                            "hold class indices 0-255")
        if self.jpeg_quality is not None and not 1 <= self.jpeg_quality <= 100:
            raise DataError(f"jpeg_quality must lie in 1-100, got {self.jpeg_quality}")
        if self.pack_size is not None and self.pack_size < 1:
            raise DataError(f"pack_size must be a positive number of samples, got {self.pack_size}")
        check_workers(self.workers)


@dataclass(frozen=True)
class PreparedPair:
    """What :func:`prepare` made of one pair (the row of the manifest it becomes): the files written,
    relative to the copy, or why the pair could not be prepared (``error``; then nothing was written)."""

    image: str = ""
    mask: str = ""
    lz4: str | None = None  # the mask's GPU form (None: not written, or over nvCOMP's limit)
    psnr: float | None = None  # dB lost by re-encoding the image as JPEG (None: copied byte for byte)
    unknown_pixels: int = 0  # pixels of values outside the class map, now ignore_index
    error: str | None = None


def prepare(data: SegmentationData, out: str | Path, *, jpeg_quality: int | None = None,
            pack_size: int | None = None, workers: int | None = None, progress: bool = True,
            source: dict | None = None, gpu_masks: bool = True) -> Manifest:
    """Write the prepared copy of ``data`` into ``out`` (new or empty).

    A pair that cannot be read stops the conversion with a message naming its files (nothing is
    skipped); a file that cannot be written (a full disk) stops it at once, naming that file. How ``out``
    is written (a lock, a temporary folder, a marker): see :func:`daliloader.folders.atomic_folder`. The
    options travel as one :class:`PrepareOptions`.

    Args:
        data: the pairs to prepare (:class:`~daliloader.data.SegmentationData`), whose class map's
            ignore index must fit an 8-bit mask.
        out: the folder to write, new or empty.
        jpeg_quality: 1-100: re-encode non-JPEG photos as JPEG (decodable by nvJPEG on the GPU) and
            record the quality lost (PSNR); JPEG photos are always copied byte for byte. None: every
            image copied byte for byte.
        pack_size: also write packs (webdataset tars) of that many samples.
        workers: threads converting pairs (None: one per core).
        progress: show a progress bar.
        source: recorded in the manifest's ``source``, beside the originals (keys of its own; its
            ``images``, ``masks``, ``records``, ``keys`` and ``stamps`` are the originals').
        gpu_masks: also write the masks in the form dali-gpu inflates on the GPU (LZ4, about as small as
            the PNG masks); left out, with a note in the manifest, when a mask is over nvCOMP's 16 MiB.

    Returns:
        The manifest (a :class:`~daliloader.manifest.Manifest`), as written into ``out``'s
        ``manifest.json``, last, and read back.

    Raises:
        daliloader.errors.DataError: options that cannot prepare ``data`` (an ignore index over 255, a
            ``jpeg_quality`` or ``pack_size`` out of range), or an ``out`` that cannot be used: it holds a
            prepared dataset already, is not an empty folder, or is being written by another run.
        daliloader.errors.LoadError: pairs that cannot be read (every one listed; nothing is written as a
            dataset), or a file of ``out`` that cannot be written, named with why.
        daliloader.errors.SpecError: a ``workers`` that is not a positive count this machine can use.
    """
    options = PrepareOptions(jpeg_quality=jpeg_quality, pack_size=pack_size, workers=workers, progress=progress,
                             source=source, gpu_masks=gpu_masks)
    options.check(data)
    if buckets.is_url(str(out)):
        return _prepare_into_bucket(data, str(out), options)
    if (Path(out) / MANIFEST).exists():  # (atomic_folder would refuse it too, less precisely)
        raise DataError(f"{out} already holds a prepared dataset; remove it or {OUT_WAY_OUT}")
    _refuse_inside(data, Path(out))
    with atomic_folder(out) as folder:
        return _write(data, folder, options)


def prepare_cached(data: SegmentationData, out: str | Path, way_out: str, *, pack_size: int | None = None,
                   source: dict | None = None) -> None:
    """:func:`prepare` for a cache (the bench's prepared copy): nothing is done when ``out`` already holds
    the copy, and a run that finds another one making it waits for it, then uses its copy, where
    ``prepare`` would refuse (see :func:`daliloader.folders.made_once`). ``way_out``: what to do when ``out`` cannot be
    written (name the variable that chooses the cache)."""
    options = PrepareOptions(pack_size=pack_size, progress=False, source=source)
    options.check(data)
    made_once(out, MANIFEST, "daliloader bench --prepared", way_out, lambda folder: _write(data, folder, options))


def _write(data: SegmentationData, out: Path, options: PrepareOptions) -> Manifest:
    """The prepared copy written into ``out`` (a folder that :func:`~daliloader.folders.atomic_folder` gives);
    returns its manifest, written last and read back."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(exist_ok=True)
    if options.gpu_masks:
        (out / "masks_lz4").mkdir(exist_ok=True)
    names = [file_stem(i, p) for i, p in enumerate(data.images)]
    started = time.perf_counter()
    rows = list(threaded_map(lambda i: _convert(data, i, out, names[i], options), range(len(data)), options.workers,
                             "preparing" if options.progress else None))
    _refuse_failures(rows)
    manifest = _manifest(data, names, rows, options, round(time.perf_counter() - started, 1))
    if options.pack_size:
        manifest = replace(manifest, packs=write_packs(out, manifest.pairs, options.pack_size,
                                                       manifest.masks.gpu_files))
    write_file(out / MANIFEST, json.dumps(manifest.to_json(), indent=1).encode())
    return read_manifest(out / MANIFEST)  # written and readable: the copy is complete


def _refuse_failures(rows: list[PreparedPair]) -> None:
    """A LoadError listing the pairs that could not be prepared, if any."""
    failures = [r.error for r in rows if r.error is not None]
    if failures:
        shown = "\n".join(f"  {f}" for f in failures[:SHOWN])
        more = f"\n  ... and {len(failures) - SHOWN} more" if len(failures) > SHOWN else ""
        raise LoadError(f"{len(failures)} of {len(rows)} pairs could not be prepared; nothing was written as a "
                        f"dataset (no {MANIFEST}):\n{shown}{more}\nRun `daliloader check DATA` for a full report.")


def _manifest(data: SegmentationData, names: list[str], rows: list[PreparedPair], options: PrepareOptions,
              seconds: float) -> Manifest:
    """The manifest of the copy of ``data`` made of ``rows`` (its packs not yet written: None)."""
    return Manifest(daliloader=__version__, created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), seconds=seconds,
                    source=_source(data, options.source), classes=ClassesEntry.of(data.classes),
                    masks=_masks_entry(data.classes, names, rows, options.gpu_masks),
                    images=_images_entry(rows, options.jpeg_quality), pairs=tuple((r.image, r.mask) for r in rows))


def _masks_entry(classes: ClassMap, names: list[str], rows: list[PreparedPair], gpu_masks: bool) -> MasksEntry:
    """The manifest's "masks": how they were made, the unknown values met, and the GPU form: its files,
    or, when a mask was too big for it, why it was left out (neither without ``gpu_masks``)."""
    too_big = [name for name, r in zip(names, rows, strict=True) if r.lz4 is None]
    gpu = GpuForm(encoding=LZ4_ENCODING, files=tuple(r.lz4 for r in rows)) if gpu_masks and not too_big else None
    left_out = (f"{len(too_big)} masks are over nvCOMP's {LZ4_MAX_BYTES >> 20} MiB (first: {too_big[0]}); dali-gpu "
                "reads the PNG masks") if gpu_masks and too_big else None
    return MasksEntry(encoding="png, 1 channel, 8-bit class indices", how=_how(classes),
                      unknown_pixels=int(sum(r.unknown_pixels for r in rows)),
                      pairs_with_unknown_values=tuple(name for name, r in zip(names, rows, strict=True)
                                                      if r.unknown_pixels),
                      gpu=gpu, gpu_left_out=left_out)


def _refuse_inside(data: SegmentationData, out: Path) -> None:
    """Refuse an ``out`` inside the folder of the dataset's images or of its masks (``prepare DATA
    DATA/train/sub``): the copy's files would become strays of the dataset, which its loaders and
    ``check`` then refuse."""
    if data.records is not None or buckets.is_url(part_file(data.images[0])):
        return
    target = Path(os.path.realpath(out))
    homes = {Path(os.path.dirname(os.path.realpath(p))) for p in data.images + data.masks}
    home = next((h for h in (target, *target.parents) if h in homes), None)
    if home is not None:
        raise DataError(f"{out} is inside {home}, which holds the dataset's files: the copy's would become part of "
                        "the dataset. Choose an OUT outside it")


def holds(manifest: Manifest, data: SegmentationData) -> bool:
    """Whether the prepared copy of ``manifest`` was made of ``data``: the same pairs (where they are), read
    with the same class table (as the manifest records it: names, ignore index, colours or ids). A copy
    found where one is to be made is used in its place only then."""
    made_of, now = manifest.source, _source(data)
    same_table = replace(manifest.classes, source="") == replace(ClassesEntry.of(data.classes), source="")
    return made_of.images == now.images and made_of.masks == now.masks and same_table


def _source(data: SegmentationData, extra: dict | None = None) -> Source:
    """Where the pairs came from, for ``verify``: the files' absolute paths; for records, their names, each
    pair's ``(file, record number, byte offset, size)`` and the keys; and each file's stamp as it was read
    (:func:`~daliloader.parts.part_stamp`), by which ``verify`` tells a source changed since. ``extra``:
    the caller's keys (``prepare``'s ``source``), less those of the originals."""
    extra = {key: value for key, value in (extra or {}).items() if key not in SOURCE_KEYS}
    stamps = {buckets.absolute(part_file(p)): tuple(part_stamp(p)) for p in data.images + data.masks}
    if data.records is None:
        return Source(images=tuple(buckets.absolute(p) for p in data.images),
                      masks=tuple(buckets.absolute(p) for p in data.masks), stamps=stamps, extra=extra)
    return Source(images=tuple(str(p) for p in data.images), masks=tuple(str(p) for p in data.masks),
                  records=tuple((buckets.absolute(p.file), p.record, p.offset, p.size) for p in data.images),
                  keys=(data.records.image_key, data.records.mask_key), stamps=stamps, extra=extra)


def _prepare_into_bucket(data: SegmentationData, url: str, options: PrepareOptions) -> Manifest:
    """The prepared copy written into a temporary folder of the cache, then uploaded under ``url``, its
    manifest last: a reader that finds the manifest finds the whole copy."""
    from dataclasses import asdict

    if buckets.holds_objects(url):
        raise DataError(f"{url} already holds objects: prepare into a new prefix (a copy in a bucket is written "
                        "once, never into another's files)")
    with cache_scratch(PREPARE_SCRATCH) as tmp:
        manifest = prepare(data, Path(tmp) / "copy", **asdict(options))
        if buckets.holds_objects(url):  # written meanwhile (another prepare): never mixed into it
            raise DataError(f"{url} received objects while this copy was prepared: prepare into a new prefix")
        buckets.upload(Path(tmp) / "copy", url, last=MANIFEST)
    return manifest


def file_stem(index: int, path) -> str:
    """The prepared files' name for pair ``index``: its number and the image's stem (a record's: see
    :func:`daliloader.parts.part_stem`), cut so that the longest file name made of it
    (``.labels.png``, an image extension) stays within 255 bytes, in UTF-8: bytes of a name that are no
    UTF-8 (a Latin-1 ``café``) are left out, and the number keeps the names apart."""
    stem = f"{index:07d}-{part_stem(path)}"
    room = 255 - len(".labels.jpeg")
    return os.fsencode(stem)[:room].decode("utf-8", errors="ignore")


def summary(manifest: Manifest, out: str | Path) -> str:
    """What ``prepare`` made, in a few lines (the CLI prints it): ``manifest`` as :func:`prepare` returns
    it, of the copy in ``out`` (a folder, or a bucket's prefix, listed once), whose files it measures."""
    m, root = manifest, buckets.as_path(out)
    lines = [f"prepared {len(m.pairs)} pairs into {out} in {m.seconds} s: masks as 8-bit class indices "
             f"({m.masks.unknown_pixels} pixels of unknown values -> ignore index {m.classes.ignore_index}, in "
             f"{len(m.masks.pairs_with_unknown_values)} masks)"]
    lines.append(_images_line(m.images))
    gpu_line = _gpu_line(m.masks, root)
    if gpu_line:
        lines.append(gpu_line)
    if m.packs:
        lines.append(_packs_line(m, root))
    lines.append(f"  load it with dl.SegmentationData.from_prepared({str(out)!r}{', packs=True' if m.packs else ''})")
    return "\n".join(lines)


def _images_line(images: ImagesEntry) -> str:
    if images.reencoded and images.psnr_db is not None:
        return (f"  {images.reencoded} photos re-encoded as JPEG: PSNR mean {images.psnr_db.mean} dB, "
                f"min {images.psnr_db.min} dB")
    return "  images copied byte for byte"


def _bytes(root, names) -> int:
    """The total size of the copy's files ``names`` under ``root``: a folder, or a bucket's prefix (its
    listing, read once: no request per file)."""
    if isinstance(root, buckets.BucketPath):
        return sum((root / name).part.size for name in names)
    return sum((root / name).stat().st_size for name in names)


def _gpu_line(masks: MasksEntry, root) -> str | None:
    if masks.gpu is not None:
        size = _bytes(root, masks.gpu.files) / len(masks.gpu.files) / 1024
        return f"  masks also LZ4-compressed for dali-gpu, which inflates them on the GPU ({size:.1f} KB per mask)"
    if masks.gpu_left_out is not None:
        return f"  no GPU form of the masks: {masks.gpu_left_out}"
    return None


def _packs_line(m: Manifest, root) -> str:
    size = _bytes(root, m.packs.tars) / 2**20
    files = _bytes(root, [f for pair in m.pairs for f in pair]) / 2**20
    return (f"  {len(m.packs.tars)} pack(s) (webdataset tars) of up to {m.packs.samples_per_pack} samples: "
            f"{size:.1f} MB beside the {files:.1f} MB of prepared files, which they hold again (the DALI "
            "backends read the packs; opencv, tfdata and `daliloader verify` read the files)")


def _convert(data: SegmentationData, i: int, out: Path, name: str, options: PrepareOptions) -> PreparedPair:
    """One pair: the mask mapped to 8-bit indices (and its GPU form), the image copied (or re-encoded).
    A pair that cannot be read is returned as an error, for the message that lists them all; a file that
    cannot be written raises (an OSError naming it), which stops the run at once (the next would fail
    the same way on a full disk)."""
    image, mask = data.images[i], data.masks[i]
    problems = quick_problems(image, mask, Expect.of(data))  # what the loaders would refuse
    if problems:
        return PreparedPair(error=f"{image} + {mask}: {problems[0]}")
    try:
        row, files = _encode_pair(data, i, name, options)
    except (LoadError, OSError, ValueError) as e:
        return PreparedPair(error=f"{image} + {mask}: {str(e).splitlines()[0]}")
    for path, blob in files.items():
        write_file(out / path, blob)
    return row


def _encode_pair(data: SegmentationData, i: int, name: str,
                 options: PrepareOptions) -> tuple[PreparedPair, dict[str, bytes]]:
    """Pair ``i``'s row and the files to write for it (path in the copy -> bytes)."""
    labels, unknown = read_part_labels(data.masks[i], data.classes)
    files = {f"masks/{name}.png": encode(".png", labels, MASK_PNG_PARAMS)}
    lz4 = None
    if options.gpu_masks and labels.nbytes <= LZ4_MAX_BYTES:
        lz4 = f"masks_lz4/{name}.lz4"
        files[lz4] = encode_lz4_mask(labels)
    image, blob, psnr = _image_file(data.images[i], name, options.jpeg_quality)
    files[image] = blob
    return PreparedPair(image, f"masks/{name}.png", lz4, psnr, unknown), files


def _image_file(image, name: str, jpeg_quality: int | None) -> tuple[str, bytes, float | None]:
    """The prepared image of the original ``image``: (path in the copy, bytes, PSNR of a re-encoding)."""
    image_bytes = read_part(image)
    suffix = image_suffix(image, image_bytes)
    if jpeg_quality is None or suffix in (".jpg", ".jpeg"):
        return f"images/{name}{suffix}", image_bytes, None
    rgb = decode_image(np.frombuffer(image_bytes, np.uint8), image)
    jpeg = encode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), (cv2.IMWRITE_JPEG_QUALITY, jpeg_quality))
    back = cv2.cvtColor(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return f"images/{name}.jpg", jpeg, cv2.PSNR(rgb, back)


def _how(classes: ClassMap) -> str:
    if classes.kind is MaskKind.RGB:
        return (f"each RGB colour of the palette ({classes.source}) -> its class index; every other colour -> "
                f"ignore_index {classes.ignore_index}")
    return (f"each mask id -> its class by the id table ({classes.source}); ids mapped to ignore and ids "
            f"absent from the table -> ignore_index {classes.ignore_index}")


def _images_entry(rows: list[PreparedPair], jpeg_quality: int | None) -> ImagesEntry:
    """The manifest's "images": how they were written, and the PSNR the photos re-encoded as JPEG kept."""
    psnr = [r.psnr for r in rows if r.psnr is not None]
    encoding = f"non-JPEG photos re-encoded as JPEG, quality {jpeg_quality}" if psnr else "original bytes"
    if not psnr:
        return ImagesEntry(encoding=encoding, reencoded=0)
    finite = [p for p in psnr if np.isfinite(p)]
    kept = Psnr(mean=round(float(np.mean(finite)), 2), min=round(float(np.min(finite)), 2)) if finite else \
        Psnr(mean=None, min=None)
    return ImagesEntry(encoding=encoding, reencoded=len(psnr), psnr_db=kept)


# the spellings of the time when dl.prepare was this module (dl.prepare.prepare, dl.prepare.verify)
prepare.prepare = moved(prepare, "dl.prepare.prepare")
prepare.verify = moved(verify, "dl.prepare.verify")
