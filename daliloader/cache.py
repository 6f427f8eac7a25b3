"""What daliloader keeps in its cache folder (:func:`~daliloader.environment.cache_dir`,
``$DALILOADER_CACHE`` or ``~/.cache/daliloader``), listed by kind, and cleaned.

Nothing in the cache is precious: each entry is made again when it is needed and missing. The kinds
(:data:`KINDS`): the index of each TFRecord file read (:func:`daliloader.tfrecord.indexed`, one folder
per file, made by its absolute path), and the bench's copies of datasets (prepared copies, the other
container for ``--tfrecord``), the embedded synthetic datasets and daliloader's DALI operators, compiled
(``daliloader.backends.dali_native``). ``daliloader cache`` lists the
entries with their size and last use; ``daliloader cache --clean [--older-than DAYS]`` removes them.
TFRecord indexes are also pruned by themselves: when a process first writes an index, those not used
for :data:`INDEX_DAYS` days are removed (each use of an index marks it used). Its files are written whole
(:func:`write_whole`).
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .environment import cache_dir

#: The cache's folder of TFRecord indexes.
INDEXES = "tfrecord-index"
#: The prefix of the folders of daliloader's DALI operators, compiled (daliloader.backends.dali_native).
OPERATORS = "dali-ops-"
#: The folder of the index files of packs read from a bucket (daliloader.data, from_prepared).
PACK_INDEXES = "bucket-pack-indexes"
#: The starts of the other folders' names, each written by one module (named) and listed by KINDS.
MASK_CACHE = "masks-v"  # daliloader.maskcache, then its version
PREPARED = "prepared-v"  # daliloader.bench.copies, then the prepared format's version
AS_FILES, AS_RECORDS = "files-", "tfrecord-"  # daliloader.bench.copies
SYNTHETIC = "synthetic-"  # daliloader.synthetic
LOCAL = "local-"  # daliloader.bench.copies
PREPARE_SCRATCH, VERIFY_SCRATCH = "prepare-", "verify-"  # daliloader.preparation, daliloader.verification
#: Each kind of entry by the start of its folder's name: (prefix, what it is), the first that matches
#: (INDEXES before AS_RECORDS, which it starts with).
KINDS = ((INDEXES, "TFRecord index"), (MASK_CACHE, "mask cache"), (PREPARED, "bench: prepared copy"),
         (AS_FILES, "bench: TFRecords as files"), (AS_RECORDS, "bench: files as TFRecords"),
         (SYNTHETIC, "embedded synthetic dataset"), (OPERATORS, "DALI operators (compiled)"),
         (PACK_INDEXES, "pack indexes of a bucket"), (LOCAL, "bench: a bucket's pairs, copied"),
         (PREPARE_SCRATCH, "prepare into a bucket, unfinished"), (VERIFY_SCRATCH, "verify of a bucket, unfinished"))
#: Days after its last use that a TFRecord index is removed when another one is written.
INDEX_DAYS = 90
_DAY = 86400.0


@dataclass(frozen=True)
class Entry:
    """One entry of the cache: its kind (:data:`KINDS`, or "other"), folder, size in bytes and last use
    (the newest modification time in it, seconds since the epoch)."""

    kind: str
    path: Path
    size: int
    last_used: float

    def age_days(self, now: float | None = None) -> float:
        return ((time.time() if now is None else now) - self.last_used) / _DAY


def entries(root: Path | None = None, kinds=None) -> list[Entry]:
    """Every entry daliloader made in the cache (of ``kinds``, all when None), oldest use first (each
    TFRecord index one entry). Folders of other names are not daliloader's: never listed, never cleaned
    (the cache may be a folder that other tools share)."""
    root = cache_dir() if root is None else Path(root)
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        kind = next((what for prefix, what in KINDS if folder.name.startswith(prefix)), None)
        if kind is None or (kinds is not None and kind not in kinds):
            continue
        if folder.name == INDEXES:
            found += [_entry(kind, p) for p in sorted(folder.iterdir()) if p.is_dir()]
        else:
            found.append(_entry(kind, folder))
    return sorted(found, key=lambda e: e.last_used)


def _entry(kind: str, folder: Path) -> Entry:
    size, newest = 0, 0.0  # the newest file's time (the folder's own changes when a file comes or goes)
    for base, _, files in os.walk(folder):
        for name in files:
            try:
                s = os.stat(os.path.join(base, name))
            except OSError:  # removed meanwhile
                continue
            size, newest = size + s.st_size, max(newest, s.st_mtime)
    return Entry(kind, folder, size, newest or folder.stat().st_mtime)


def clean(older_than_days: float | None = None, root: Path | None = None, kinds=None, keep=()) -> list[Entry]:
    """Remove the entries not used for ``older_than_days`` days (all of them when None), of ``kinds``
    (all when None), but the folders ``keep``; returns those removed. An entry that cannot be removed is
    left, and not listed."""
    now, removed = time.time(), []
    for entry in entries(root, kinds):
        if entry.path in keep or (older_than_days is not None and entry.age_days(now) < older_than_days):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not entry.path.exists():
            removed.append(entry)
    return removed


_pruned: set[Path] = set()


def prune_indexes(keep: Path) -> None:
    """Remove the TFRecord indexes not used for :data:`INDEX_DAYS` days, once per process and cache; never
    ``keep``, the folder of the index being written."""
    root = cache_dir()
    if root in _pruned:
        return
    _pruned.add(root)
    clean(INDEX_DAYS, root, kinds=("TFRecord index",), keep=(keep,))


def describe(found: list[Entry]) -> str:
    """The entries as a table: kind, size, days since last use, folder; and the total."""
    if not found:
        return f"the cache {cache_dir()} is empty"
    now = time.time()
    lines = [f"{e.kind:28} {size_in_words(e.size):>9} {e.age_days(now):7.1f} d  {e.path}{_of(e)}" for e in found]
    return "\n".join([f"{'kind':28} {'size':>9} {'unused':>9}  folder", *lines,
                      f"{len(found)} entries, {size_in_words(sum(e.size for e in found))} in {cache_dir()}"])


def _of(entry: Entry) -> str:
    """What a TFRecord index is of (the files named by its kept indexes), for the listing."""
    if entry.kind != "TFRecord index":
        return ""
    names = sorted(p.name.removesuffix(".json") for p in entry.path.glob("*.json"))
    return f"  ({', '.join(names)})" if names else ""


def size_in_words(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def write_whole(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary sibling renamed into place, so that a reader (another
    thread or process) never sees half a file; an OSError where it cannot be written whole (a short write
    too: a full disk), the temporary removed."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(temporary, "wb") as fh:
            fh.write(data)
        written = os.stat(temporary).st_size
        if written != len(data):
            raise OSError(errno.EIO, f"{written} of {len(data)} bytes written", str(path))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
