"""Checking a prepared copy against what it was made from: ``daliloader verify OUT`` and ``prepare --verify``.

:func:`verify` decodes every prepared mask and compares it with the mapping of its original, bit for
bit; compares copied images and pack members with their sources byte for byte, and the packs' DALI
index files with their tars. It reports (:class:`VerifyReport`), never raises, on what it finds. It
needs OpenCV, numpy and python-lz4, not DALI (see :func:`daliloader.packs.index_text`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from . import buckets
from .cache import VERIFY_SCRATCH
from .classes import ClassMap
from .codecs import decode_file, decode_mask, read
from .environment import cache_scratch
from .errors import DataError, LoadError
from .manifest import Manifest, load_manifest, read_lz4_mask
from .packs import KINDS, index_text, members, sample_index
from .parallel import threaded_map
from .parts import image_suffix, in_record, part_file, read_part
from .spec import check_workers
from .tfrecord import RecordPart, file_stamp, same_content

#: How many differences ``str(VerifyReport)`` lists (it counts them all).
SHOWN = 20


@dataclass
class VerifyReport:
    """What ``verify`` compared, and every difference it found; ``str()`` is what ``daliloader verify`` prints."""

    pairs: int
    masks_checked: int = 0  # compared with the mapping of their originals
    gpu_masks_checked: int = 0  # their GPU form (LZ4), compared with the originals or, where gone, the PNG masks
    images_checked: int = 0  # copied images compared with their originals
    pack_members_checked: int = 0
    indexes_checked: int = 0  # the packs' DALI index files compared with their tars
    originals_missing: int = 0  # pairs whose originals are not where the manifest says
    mismatches: list[str] = field(default_factory=list)
    #: source files changed since the copy was made (not a fault of the copy: what it tells of the source)
    changed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def __str__(self) -> str:
        return self._compared() + (f"\nnote: {changed_sources(self.changed)}" if self.changed else "")

    def _compared(self) -> str:
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
        lines = "\n".join(f"  {m}" for m in self.mismatches[:SHOWN])
        more = f"\n  ... and {len(self.mismatches) - SHOWN} more" if len(self.mismatches) > SHOWN else ""
        return f"{head}\n{len(self.mismatches)} MISMATCH(ES):\n{lines}{more}"

    def add(self, check: PairCheck) -> None:
        """Count one pair's check in.

        :meta private:
        """
        self.mismatches += check.problems
        self.masks_checked += check.mask
        self.gpu_masks_checked += check.gpu_mask
        self.images_checked += check.image


@dataclass(frozen=True)
class PairCheck:
    """What ``verify`` found for one pair: its problems, and which of its files it compared with their sources."""

    problems: tuple[str, ...] = ()
    mask: bool = False  # the prepared mask, with the mapping of its original
    gpu_mask: bool = False  # its GPU form, with the original's mapping or, where the original is gone, the PNG
    image: bool = False  # the copied image, with its original (re-encoded images are not compared)
    moved: bool = False  # its original image or mask is not where the manifest says


@dataclass(frozen=True)
class PreparedCopy:
    """A prepared copy as ``verify`` reads it: its files and the originals they were made from."""

    out: Path
    pairs: tuple[tuple[str, str], ...]  # (image, mask) relative to out
    gpu_masks: tuple[str, ...] | None  # the GPU form's files, relative to out (None: no GPU form)
    originals: ClassMap  # the class map that read the original masks
    images: list  # each pair's original image: a Path, or a RecordPart
    masks: list

    @classmethod
    def of(cls, out: Path, manifest: Manifest) -> PreparedCopy:
        images, masks = original_parts(manifest)
        return cls(out, manifest.pairs, manifest.masks.gpu_files, manifest.classes.original_map(), images, masks)


def verify(out: str | Path, workers: int | None = None, progress: bool = True) -> VerifyReport:
    """Check a prepared copy against its originals, and its packs against their index files.

    Decode every prepared mask and compare it with the mapping of its original, bit for bit; compare
    copied images and pack members with their sources byte for byte, and the packs' DALI index files
    with their tars.

    It reports, never raises, on what it finds: sources that moved (the checks that need no source still
    run: every prepared mask decodes, its LZ4 form holds the same indices), files of the copy that are
    missing or damaged, packs that break off (named, with the byte where they break) and index files
    that are missing or do not match their tar.

    Args:
        out: the prepared copy's folder (written by :func:`daliloader.preparation.prepare`).
        workers: threads comparing pairs (None: one per core).
        progress: show a progress bar.

    Returns:
        The :class:`VerifyReport` of what was compared, and every mismatch found.

    Raises:
        daliloader.errors.DataError: a manifest that cannot be read, naming it (missing, damaged, of a
            version this daliloader does not read), or an ``out`` that is the unfinished output of a
            ``prepare``.
        daliloader.errors.SpecError: a ``workers`` that is not a positive count this machine can use.
    """
    if buckets.is_url(str(out)):
        return _verify_bucket(str(out), workers, progress)
    out, workers = Path(out), check_workers(workers)
    manifest = load_manifest(out)
    copy = PreparedCopy.of(out, manifest)
    report = VerifyReport(pairs=len(copy.pairs))
    moved = []
    with closing(threaded_map(lambda i: check_pair(copy, i), range(len(copy.pairs)), workers,
                              "verifying" if progress else None)) as checked:
        for i, check in enumerate(checked):
            report.add(check)
            if check.moved:
                moved.append(i)
    if moved:
        report.originals_missing = len(moved)
        report.mismatches.insert(0, _moved(copy, moved))
    report.changed = changed_since(manifest)
    if manifest.packs:
        report.pack_members_checked, report.indexes_checked, problems = check_packs(out, manifest)
        # (a prepared file that is gone is said once: the pairs' check said it, the packs' would again)
        report.mismatches += [p for p in problems if p not in report.mismatches]
    return report


def _verify_bucket(url: str, workers: int | None, progress: bool) -> VerifyReport:
    """A prepared copy in a bucket, downloaded into a temporary folder of the cache and verified there; the
    mismatches name its objects."""
    with cache_scratch(VERIFY_SCRATCH) as tmp:
        local = Path(tmp) / "copy"
        buckets.download(url, local)
        report = verify(local, workers, progress)
    report.mismatches = [m.replace(str(local), url) for m in report.mismatches]
    return report


def changed_since(manifest: Manifest) -> list[str]:
    """The source files (or objects) whose version now is not the one the copy was made from, as the
    manifest's ``source`` "stamps" record them (copies made before they were recorded: none), judged by
    :func:`~daliloader.tfrecord.same_content`; a file gone is not one changed (see ``_moved``)."""
    recorded = manifest.source.stamps or {}
    fetched = any(buckets.is_url(f) for f in recorded)  # (a HEAD each: on the fetching threads)
    now = list(threaded_map(_stamp, list(recorded), buckets.FETCHES if fetched else None))
    return [f for (f, then), stamp in zip(recorded.items(), now) if stamp and not same_content(stamp, then)]


def changed_sources(files: list[str]) -> str:
    """What ``VerifyReport.changed`` says: how many, the first, and what to do."""
    return (f"{len(files)} source file(s) changed since the copy was made (first: {files[0]}): the copy holds what "
            "they were then (any difference is listed above); run the same `daliloader prepare` into a new folder "
            "to copy what they are now")


def _moved(copy: PreparedCopy, moved: list[int]) -> str:
    first = next(p for p in (copy.masks[moved[0]], copy.images[moved[0]]) if not _exists(p))
    return (f"the originals of {len(moved)} of {len(copy.pairs)} pairs are not where the manifest says (first: "
            f"{first}): moved or deleted? Their masks and images were not compared with them; everything else was "
            "checked")


def check_pair(copy: PreparedCopy, i: int) -> PairCheck:
    """Pair ``i`` of ``copy``: its prepared mask, the mask's GPU form and its image, each compared with
    what it was made from where that is still there."""
    image, mask = copy.pairs[i]
    moved = not (_exists(copy.masks[i]) and _exists(copy.images[i]))
    problems: list[str] = []
    got = _prepared_mask(copy.out / mask, problems)
    want = _mapped_original(copy, i, problems)
    if got is not None and want is not None:
        problems += differences(copy.out / mask, got, want, copy.masks[i])
    gpu_mask = bool(copy.gpu_masks) and _check_gpu_mask(copy, i, got, want, problems)
    image_checked = _check_image(copy.out / image, copy.images[i], problems)
    return PairCheck(tuple(problems), mask=got is not None and want is not None, gpu_mask=gpu_mask,
                     image=image_checked, moved=moved)


def _prepared_mask(path: Path, problems: list[str]) -> np.ndarray | None:
    """The indices of a prepared mask; None, with a problem, when it is missing or no 8-bit single-channel PNG."""
    # (read by Python, decoded from memory: OpenCV's own file functions crash on names that are no UTF-8)
    try:
        got = decode_file(path, cv2.IMREAD_UNCHANGED) if path.is_file() else None
    except OSError as e:  # (reported: verify reports what it finds, never stops at it)
        problems.append(f"{path}: cannot read it ({e.strerror or e})")
        return None
    if got is None or got.dtype != np.uint8 or got.ndim != 2:
        problems.append(f"{path}: missing, or not a single-channel 8-bit PNG")
        return None
    return got


def _mapped_original(copy: PreparedCopy, i: int, problems: list[str]) -> np.ndarray | None:
    """The class indices of pair ``i``'s original mask; None where it is gone, or with a problem where it
    cannot be read."""
    source = copy.masks[i]
    if not _exists(source):
        return None
    try:
        return copy.originals.map_mask(decode_mask(read(source), str(source), copy.originals))
    except (LoadError, OSError, DataError) as e:
        problems.append(str(e).splitlines()[0])
        return None


def _check_gpu_mask(copy: PreparedCopy, i: int, got: np.ndarray | None, want: np.ndarray | None,
                    problems: list[str]) -> bool:
    """The GPU form, inflated on the CPU: the original's indices (or, where it is gone, the PNG's), bit for
    bit. Whether it was compared."""
    path = copy.out / copy.gpu_masks[i]
    try:
        inflated = read_lz4_mask(path)
    except OSError as e:
        problems.append(f"{path}: cannot read it ({e.strerror})")
        return False
    except DataError as e:
        problems.append(str(e).split("; run `daliloader verify`")[0])
        return False
    reference = want if want is not None else got
    if reference is None:
        return False
    original = copy.masks[i] if want is not None else copy.out / copy.pairs[i][1]
    problems += differences(path, inflated, reference, original)
    return True


def _check_image(copied: Path, source, problems: list[str]) -> bool:
    """A copied image, byte for byte with its original (a re-encoded one, whose suffix changed, is not
    compared). Whether it was compared."""
    try:
        checked = _exists(source) and copied.suffix.lower() == image_suffix(source)
        if checked and copied.read_bytes() != read_part(source):
            problems.append(f"{copied}: bytes differ from {source}")
        return checked
    except OSError as e:
        problems.append(f"{e.filename or copied}: cannot read it ({e.strerror or e})")
    except DataError as e:  # a record that cannot be read
        problems.append(str(e))
    return False


def differences(path: Path, got: np.ndarray, want: np.ndarray, original) -> list[str]:
    """What differs between a prepared mask's indices (the file ``path``) and the mapping of ``original``."""
    if got.shape == want.shape and np.array_equal(got, want):
        return []
    bad = int(np.count_nonzero(got != want)) if got.shape == want.shape else got.size
    return [f"{path}: {bad} pixels differ from the mapping of {original}"]


def original_parts(manifest: Manifest) -> tuple[list, list]:
    """The originals of each pair, as the manifest's ``source`` records them: files (absolute paths), or
    the records they were read from (``[file, record number, byte offset, size]`` and the keys)."""
    source = manifest.source
    if source.records is None:
        return [_original(p) for p in source.images], [_original(p) for p in source.masks]
    stamps: dict[str, tuple] = {}

    def part(row, key):
        file, record, offset, size = row
        if file not in stamps:
            stamps[file] = _stamp(file)
        return RecordPart(file, record, offset, size, key, None, stamps[file])

    image_key, mask_key = source.keys
    return [part(r, image_key) for r in source.records], [part(r, mask_key) for r in source.records]


def _original(path: str):
    """An original file as the manifest records it: a Path; an object of a bucket as it is now, or its URL
    alone (a ``str``) where it is gone."""
    return (buckets.head_or_none(path) or path) if buckets.is_url(path) else Path(path)


def _stamp(file: str) -> tuple:
    """A source file's (a TFRecord file's, an object's) stamp now; ``()`` where it is gone."""
    if buckets.is_url(file):
        found = buckets.head_or_none(file)
        return found.stamp if found else ()
    return file_stamp(file) if os.path.isfile(file) else ()


def _exists(part) -> bool:
    """Whether an original is still there: a file; an object found (a URL alone is one that is gone); a
    record whose file was found."""
    file = part_file(part)
    if not buckets.is_url(file):
        return os.path.isfile(file)
    return not isinstance(part, str) and (not in_record(part) or part.stamp != ())


# ---------------------------------------------------------------- packs
def check_packs(out: Path, manifest: Manifest) -> tuple[int, int, list[str]]:
    """Every pack member equals what it was made from (the prepared file, or the sample's index);
    every sample has each of its members (three, four with the GPU form) in the packs exactly once;
    each DALI index file is the index of its tar. Returns (members compared, indexes compared, problems)."""
    packs = manifest.packs
    gpu_masks = manifest.masks.gpu_files if packs.gpu_mask_ext else None
    seen: dict[tuple[int, str], int] = {}
    problems: list[str] = []
    indexes = 0
    for tar_name, index_name in zip(packs.tars, packs.indexes, strict=True):
        indexes += _check_tar(out, tar_name, index_name, manifest.pairs, gpu_masks, seen, problems)
    kinds = ("image", "mask", "index") + (("gpu mask",) if gpu_masks else ())
    for i in range(len(manifest.pairs)):
        for kind in kinds:
            if seen.get((i, kind)) != 1:
                problems.append(f"pair {i}: its {kind} is in the packs {seen.get((i, kind), 0)} times, not once")
    return sum(seen.values()), indexes, problems


def _check_tar(out: Path, tar_name: str, index_name: str, pairs: Sequence[tuple[str, str]],
               gpu_masks: Sequence[str] | None, seen: dict, problems: list[str]) -> bool:
    """One tar's members compared with their sources (counted in ``seen``: (sample, kind) -> times) and,
    when that found no problem, its index file with the index DALI's wds2idx makes of it. Whether the
    index was compared."""
    found, broken = [], len(problems)
    for member, data in members(out / tar_name, problems):
        found.append(member)
        key, ext = member.name.split(".", 1) if "." in member.name else (member.name, "")
        if not key.isdigit() or int(key) >= len(pairs):
            problems.append(f"{out / tar_name}: {member.name} belongs to no pair of the manifest")
            continue
        i, kind = int(key), KINDS.get(ext, "image")
        problems += _member_problems(out, tar_name, member.name, data, i, kind, pairs, gpu_masks)
        seen[(i, kind)] = seen.get((i, kind), 0) + 1
    if len(problems) > broken:  # the index is compared only with a tar read whole, and right
        return False
    problems += index_problems(out / index_name, out / tar_name, index_text(found))
    return True


def _member_problems(out: Path, tar_name: str, name: str, data: bytes, i: int, kind: str,
                     pairs: Sequence[tuple[str, str]], gpu_masks: Sequence[str] | None) -> list[str]:
    """How a member of sample ``i`` differs from what it was made from: the prepared file, or the index."""
    image, mask = pairs[i]
    source = {"image": out / image, "mask": out / mask,
              "gpu mask": out / gpu_masks[i] if gpu_masks else None}.get(kind)  # None: the index
    try:
        want = source.read_bytes() if source else sample_index(i)
    except OSError as e:
        return [f"{source}: cannot read it ({e.strerror or e})"]
    return [f"{out / tar_name}: {name} differs from {source or f'sample index {i}'}"] if data != want else []


def index_problems(index: Path, tar: Path, want: str) -> list[str]:
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
