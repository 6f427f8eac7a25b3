"""Colour masks decoded once: a cache of class-index masks that every loader reads in their place.

An RGB colour mask (CamVid's, VOC's colour copies, a mask whose class is one channel) costs several
times more to decode than an 8-bit mask of class indices of the same size, and then needs the
colour-to-class mapping, at every epoch: it bounds the CPU loaders (docs/benchmarks.md). So the first
loader planned on such a dataset decodes its masks once, maps them, and writes their class indices into
the cache as ``daliloader prepare`` writes them (8-bit PNG, and the LZ4 form that dali-gpu inflates on
the GPU where DALI sees one); every loader then reads those instead, on every backend, and so do later
runs. Only the masks are written: the images are read where they are.

- The cache is made by the first process that needs it, whole (a temporary folder renamed into place,
  under a lock: a second process waits for it), keyed by the masks' paths and the class map.
- Each entry keeps the stamp of the mask it came from (size, modification time, inode, change time): a
  mask that changed since is decoded again before it is read (:meth:`MaskCache.refresh`, which the
  loaders' vetting calls for each pair once the pair's own files passed), and one that no longer decodes
  fails naming it. A mask that does not decode when the cache is made gets no entry: the loaders meet
  it where they would without the cache, at its pair, and fail naming it (``daliloader check`` lists
  them all at once). Errors name the user's files, never the cache's.
- The LZ4 form is written where :func:`with_gpu_form` says (DALI sees a GPU; files, not objects; no
  ``cat_max_ratio``) and every mask's class indices fit 8 bits: dali-gpu then reads it for every pair,
  or for none.
- Labels are the same as without the cache, bit for bit: the same mapping
  (:meth:`~daliloader.classes.ClassMap.map_mask`), stored losslessly. ``DALILOADER_MASK_CACHE=0`` turns
  it off; ``=1`` also caches id masks, whose class indices then need no lookup (and dali-gpu inflates
  them on the GPU).

TFRecord datasets and prepared copies are read as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from .buckets import absolute
from .cache import MASK_CACHE, write_whole
from .classes import ClassMap, MaskKind
from .codecs import MASK_PNG_PARAMS, encode, encode_lz4_mask, mask_labels, write_file
from .data import Container, SegmentationData
from .environment import cache_dir, cache_way_out
from .errors import DataError, LoadError, StorageError, StorageFault
from .folders import made_once
from .manifest import LZ4_MAX_BYTES
from .parallel import threaded_map
from .parts import part_stamp

#: The cache's folders of masks start so (and :mod:`daliloader.cache` lists them by it).
PREFIX = f"{MASK_CACHE}1-"
#: The file written last, which says the cache is whole: each entry's source stamp.
ENTRIES = "entries.json"
#: What ``DALILOADER_MASK_CACHE`` says: off, colour masks only (the default), every mask.
SETTINGS = {"0": "off", "": "colours", "auto": "colours", "1": "all"}


def with_gpu_form(data: SegmentationData, gpu: bool, chooses_window: bool = False) -> bool:
    """Whether ``data``'s cache holds the masks' LZ4 form too, which dali-gpu inflates on the GPU: where
    DALI sees a GPU (``gpu``), for files (objects are fed to the graph as bytes, with their PNG masks),
    and not for ``cat_max_ratio`` (``chooses_window``: its window is chosen from the whole mask, on the CPU)."""
    return gpu and not chooses_window and data.container is Container.FILES


def wanted(data: SegmentationData) -> bool:
    """Whether ``data``'s masks are read from the cache (see the module's docstring): as :func:`wanted_for`
    says of their class map, where :func:`caches` says of their container."""
    return wanted_for(data.classes) and caches(data)


def caches(data: SegmentationData) -> bool:
    """Whether masks of ``data``'s kind are ever read from the cache: files or objects, not records, not a
    cache's own files already."""
    return data.container.caches_masks and data.records is None and data.mask_cache is None


def wanted_for(classes: ClassMap) -> bool:
    """Whether masks (files or objects) read by ``classes`` are read from the cache: colour masks (every mask
    not already class indices with ``DALILOADER_MASK_CACHE=1``; none with ``=0``)."""
    setting = os.environ.get("DALILOADER_MASK_CACHE", "").strip().lower()
    if setting not in SETTINGS:
        raise DataError(f"DALILOADER_MASK_CACHE={setting!r}: 0 (off), 1 (every mask) or unset (colour masks)")
    if SETTINGS[setting] == "off":
        return False
    if SETTINGS[setting] == "all":
        return not _class_indices(classes)
    return classes.mask_channels == 3


def _class_indices(classes: ClassMap) -> bool:
    """Whether masks read by ``classes`` hold class indices already (a prepared copy's): an identity map."""
    if classes.kind is not MaskKind.ID or classes.mask_channel is not None:
        return False
    return all(k == v for k, v in classes.id_to_class.items())


@dataclass(eq=False)
class MaskCache:
    """The cached class indices of ``original``'s masks in ``folder`` (``masks/NNNNNNN.png``, and
    ``masks_lz4/NNNNNNN.lz4`` with ``gpu``), and the stamp of the mask each entry came from."""

    original: SegmentationData
    folder: Path
    stamps: list
    gpu: bool
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def made_for(cls, data: SegmentationData, gpu: bool = False) -> MaskCache:
        """The cache of ``data``'s masks, made first if it is not there (once, on all cores, saying so on a
        terminal); ``gpu``: with the LZ4 form too (:func:`with_gpu_form`)."""
        folder = cache_dir() / f"{PREFIX}{_digest(data)}"
        entries = folder / ENTRIES
        made_once(folder, ENTRIES, "daliloader's mask cache", cache_way_out(), lambda out: _make(data, out, gpu))
        try:
            kept = json.loads(entries.read_text())
            stamps = [None if s is None else tuple(s) for s in kept["stamps"]]
            if len(stamps) != len(data):
                raise ValueError("one stamp per mask")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"{entries} is damaged ({e}): delete {folder}, which is made again, or "
                            "set DALILOADER_MASK_CACHE=0") from None
        gpu = gpu and _fits_lz4(data.classes)
        cache = cls(data, folder, stamps, bool(kept.get("gpu")) and gpu)
        if gpu and not cache.gpu:  # made without the GPU form: add it
            cache.add_gpu_form()
        return cache

    def view(self) -> SegmentationData:
        """``original`` with the cached masks in its masks' place: class indices, read by an identity map of
        its classes (names, colours and ignore index kept)."""
        c = self.original.classes
        classes = ClassMap.from_ids(c.num_classes, c.names, ignore_index=c.ignore_index,
                                    source=f"{c.source}, class indices from the mask cache")
        classes = replace(classes, colors=c.colors if c.kind is MaskKind.RGB else None)
        masks = tuple(str(self.entry(i)) for i in range(len(self.original)))
        gpu_masks = tuple(str(self.entry(i, lz4=True)) for i in range(len(self.original))) if self.gpu else None
        return SegmentationData(self.original.images, masks, classes, mask_depth=8 if c.ignore_index < 256 else 16,
                                gpu_masks=gpu_masks, mask_cache=self)

    def entry(self, index: int, lz4: bool = False) -> Path:
        return self.folder / ("masks_lz4" if lz4 else "masks") / f"{index:07d}.{'lz4' if lz4 else 'png'}"

    def refresh(self, index: int) -> None:
        """Decode pair ``index``'s mask again where it changed since its entry was made (or has none); a
        LoadError names it where it does not decode. Called by the loaders' vetting before the entry is
        read (the first time a loader vets the pair, and after its files change); an entry missing then (a
        cache cleaned since it was made) is written again. What it writes lasts for this process (a later
        one finds the stamp changed and decodes it again)."""
        mask = self.original.masks[index]
        try:
            stamp = part_stamp(mask)
        except OSError:
            raise LoadError(f"cannot load sample {index}: its mask {mask} is gone (it was there when the mask cache "
                            "was made)") from None
        if stamp == self.stamps[index] and self._entry_there(index):
            return
        with self._lock:  # one refresh at a time: a rare event (a mask changed under a run, an entry removed)
            if part_stamp(mask) != self.stamps[index] or not self._entry_there(index):
                try:
                    self.stamps[index] = _write_entry(self.original, index, self.folder, self.gpu)
                except _TooBigForLZ4 as e:
                    raise LoadError(f"{e}: it changed since the mask cache was made; set DALILOADER_MASK_CACHE=0 "
                                    "to read masks where they are") from None

    def _entry_there(self, index: int) -> bool:
        """Whether pair ``index``'s entry files exist (a cache cleaned or damaged under a run has lost them)."""
        return self.entry(index).exists() and (not self.gpu or self.entry(index, lz4=True).exists())

    def add_gpu_form(self) -> None:
        """Write the LZ4 form of every entry (a cache made where DALI saw no GPU, now read by dali-gpu), and
        say so in :data:`ENTRIES` for later runs; none where a mask is too large for it (dali-gpu then
        reads the PNG entries)."""
        with self._lock:
            (self.folder / "masks_lz4").mkdir(exist_ok=True)
            try:
                stamps = [_entry_or_none(self.original, i, self.folder, True) for i in range(len(self.original))]
            except _TooBigForLZ4:
                return
            self.stamps, self.gpu = stamps, True
            _write_whole(self.folder / ENTRIES, _entries(stamps, gpu=True))


def _digest(data: SegmentationData) -> str:
    """The cache's name: the masks' absolute paths and how the class map reads them."""
    key = json.dumps([[absolute(m) for m in data.masks], *data.classes.reading(), data.mask_depth])
    return hashlib.sha1(key.encode("utf-8", errors="surrogateescape")).hexdigest()[:16]


def _fits_lz4(classes: ClassMap) -> bool:
    """Whether every class index, and the ignore index, fits the LZ4 form's 8 bits."""
    return classes.ignore_index < 256 and classes.num_classes <= 256


def _make(data: SegmentationData, out: Path, gpu: bool) -> None:
    """Every entry written into ``out``, then the stamps (:data:`ENTRIES`, last); a mask that does not
    decode gets no entry and the stamp None (see the module's docstring)."""
    (out / "masks").mkdir()
    gpu = gpu and _fits_lz4(data.classes)
    if gpu:
        (out / "masks_lz4").mkdir()
    what = f"decoding {len(data)} colour masks once into the mask cache" if data.classes.mask_channels == 3 else \
        f"decoding {len(data)} masks once into the mask cache"
    try:
        stamps = list(threaded_map(lambda i: _entry_or_none(data, i, out, gpu), range(len(data)), description=what))
    except _TooBigForLZ4:  # rare (a mask over 16 megapixels): no GPU form, dali-gpu reads the PNG entries
        shutil.rmtree(out / "masks_lz4")
        gpu = False
        stamps = list(threaded_map(lambda i: _entry_or_none(data, i, out, gpu), range(len(data)), description=what))
    write_file(out / ENTRIES, _entries(stamps, gpu))


def _entries(stamps: list, gpu: bool) -> bytes:
    """The contents of :data:`ENTRIES`: each entry's source stamp (None: no entry), and whether the LZ4
    form is there."""
    return json.dumps({"version": 1, "gpu": gpu, "stamps": stamps}).encode()


def _entry_or_none(data: SegmentationData, index: int, folder: Path, gpu: bool) -> list | None:
    """:func:`_write_entry`, or None for a mask that cannot be read or decoded (its pair's loader says so)."""
    try:
        return _write_entry(data, index, folder, gpu)
    except StorageError as e:  # a bucket's fault that says nothing of the mask stops the making, named
        if e.fault not in (StorageFault.MISSING_OBJECT, StorageFault.CHANGED):
            raise
        return None
    except LoadError:
        return None


def _write_entry(data: SegmentationData, index: int, folder: Path, gpu: bool) -> list:
    """Pair ``index``'s mask decoded, mapped and written as class indices (and its LZ4 form); the stamp of
    the mask it read (taken before reading: a change while it reads shows at the next look)."""
    mask = data.masks[index]
    try:
        stamp = list(part_stamp(mask))
        labels = mask_labels(mask, data.classes)
    except OSError as e:
        raise LoadError(f"cannot read mask {mask} ({e.strerror or e}) to cache its class indices") from None
    name = f"{index:07d}"
    for form in ("masks", "masks_lz4") if gpu else ("masks",):  # there, unless the cache was removed under a run
        (folder / form).mkdir(parents=True, exist_ok=True)
    _write_whole(folder / "masks" / f"{name}.png", encode(".png", labels, MASK_PNG_PARAMS))
    if gpu:
        if labels.nbytes > LZ4_MAX_BYTES:
            raise _TooBigForLZ4(f"mask {mask} is {labels.shape[1]}x{labels.shape[0]}, past the {LZ4_MAX_BYTES >> 20} "
                                "MiB of class indices nvCOMP inflates at once")
        _write_whole(folder / "masks_lz4" / f"{name}.lz4", encode_lz4_mask(labels))
    return stamp


class _TooBigForLZ4(Exception):
    """A mask whose class indices are too large for the LZ4 form (the cache is then made without it)."""


def _write_whole(path: Path, blob: bytes) -> None:
    """``blob`` into ``path``, whole (:func:`daliloader.cache.write_whole`): a reader never sees half a mask."""
    try:
        write_whole(path, blob)
    except OSError as e:
        raise DataError(f"cannot write {path} into the mask cache ({e.strerror or e}); {cache_way_out()}") from None
