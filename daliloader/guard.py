"""The load-time guard: every loader vets each pair before it reads it, and names the files when a
decoder fails anyway.

A failure raises :class:`~daliloader.errors.LoadError` naming the files, instead of a decoder error
naming none. Later epochs skip pairs already vetted, unless a file changed since (its size,
modification time, inode or change time).

Nothing here imports TensorFlow or DALI.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from typing import NoReturn

from .data import SegmentationData
from .errors import WHAT_TO_DO, LoadError, StorageError
from .inspection import (
    CHANGED_FILE,
    Expect,
    Problem,
    ProblemKind,
    check_pair,
    gpu_mask_problems,
    object_problem,
    png_chunk_damage,
    quick_check,
    record_problem_kind,
)
from .parts import part_file, read_checked, read_checked_pair, read_part
from .tfrecord import CHANGED_RECORD, RecordProblem, file_stamp, masked_crc


# ---------------------------------------------------------------- at load time
def _png_mask_problems(mask, image, blob: bytes | None) -> list[Problem]:
    """A PNG mask's chunks checked whole (:func:`~daliloader.inspection.png_chunk_damage`): a damaged mask
    is then refused by name before a decoder meets it, where the decoder's failure would name no file
    inside ``model.fit`` (TensorFlow raises it there, before daliloader regains control). Masks only:
    they are small beside the photos, and checking is a read and a checksum of every byte, once per pair
    and process. Not where the mask cache holds the masks: it decodes each mask itself, once per version,
    and names the damage then."""
    damage = png_chunk_damage(read_part(mask) if blob is None else blob)
    return [] if damage is None else [Problem(damage[0], str(mask), damage[1], str(image))]


class PairGuard:
    """Vets each pair the first time a loader reads it; explains decoder failures afterwards.

    ``verify(i)`` runs the quick checks once per pair and raises :class:`~daliloader.errors.LoadError`
    naming the pair's files; later reads cost two ``stat`` calls, and a file whose size, modification
    time, inode or change time changed since is vetted again (a file replaced between epochs by an
    image of another size would otherwise train as a misaligned pair). For ``dali-gpu`` on a prepared
    copy, the header of the mask's GPU form (LZ4) is read too: it must give the image's size. It also
    remembers the last pairs asked for, so that when a decoder fails anyway (corrupt data inside an
    intact-looking file), :meth:`explain` can decode exactly those pairs and name the culprit. A pair
    read from a TFRecord file is stamped by that file, whose records must not have moved since it was
    indexed (:func:`~daliloader.inspection.peek` refuses one that changed).
    """

    def __init__(self, data: SegmentationData, remember: int = 64, backend: str = "",
                 decoders: dict | None = None, gpu_masks: bool = False):
        """``backend`` and ``decoders`` (backend -> the formats it decodes): refuse files of formats that
        backend cannot decode, naming those that can. ``gpu_masks``: the loader reads a prepared copy's
        masks in their GPU form (:func:`daliloader.backends.dali_graph.reads_gpu_masks`), whose headers are
        vetted too. Where ``data``'s masks come from the mask cache, the
        pairs vetted and named are the user's own files (``data.mask_cache.original``), and each pair's
        cached mask is kept fresh once its files passed (:meth:`_refresh`)."""
        self.data = data  # what the loader reads
        self._cache = data.mask_cache
        self._named = data if self._cache is None else self._cache.original  # what is vetted and named
        self.expect = Expect.of(self._named, backend, decoders, cached_masks=self._cache is not None)
        self._gpu_masks = gpu_masks and self._named.gpu_masks is not None
        self._vetted: dict[int, tuple] = {}  # pair -> the stat stamp of its files when vetted
        self._recent: deque[int] = deque(maxlen=remember)
        self._refused: deque[LoadError] = deque(maxlen=remember)  # verify()'s latest refusals
        self._lock = threading.Lock()

    def verify(self, index: int, blobs: tuple[bytes, bytes | None] | None = None) -> None:
        """Vet pair ``index`` unless it was vetted and its files have not changed since; a LoadError naming
        its files where it would not load. ``blobs``: the pair's encoded image and mask as read from its
        record or its objects, already checked against the index or the listing (:meth:`read`): vetted once,
        as the bytes are then the ones indexed or listed (a mask of None: read by the checks themselves)."""
        with self._lock:
            self._recent.append(index)
        image, mask = self._named.images[index], self._named.masks[index]
        if blobs is not None:
            stamp = "indexed"  # the record's data CRC was compared with the index's
        else:
            try:
                stamp = (file_stamp(part_file(image)), file_stamp(part_file(mask)))
            except OSError:
                stamp = None  # gone: the quick checks say so, naming the file
        if stamp is not None and self._vetted.get(index) == stamp:
            return
        read = {part: blob for part, blob in zip((image, mask), blobs or ()) if blob is not None}
        problems = self._vetting_problems(index, image, mask, read)
        if problems:
            self._refuse(index, problems)
        if self._cache is not None:  # the mask's cached class indices, decoded again where it changed
            self._refresh(index)
        self._vetted[index] = stamp

    def _vetting_problems(self, index: int, image, mask, read: dict) -> list[Problem]:
        """What vetting pair ``index`` finds wrong: the quick checks; a PNG mask's chunks, except where the
        mask cache holds the masks (it decodes each itself); where the loader reads the masks' GPU form, its
        header. ``read``: the bytes of either file already read (part -> bytes)."""
        problems, headers = quick_check(image, mask, self.expect, read)
        if not problems and self._cache is None and headers[mask].format == "PNG":
            problems = _png_mask_problems(mask, image, read.get(mask))
        if not problems and self._gpu_masks:
            problems = gpu_mask_problems(self._named.gpu_masks[index], headers[image], image)
        return problems

    def read(self, index: int) -> tuple[bytes, bytes]:
        """Pair ``index``'s encoded image and mask, vetted (:meth:`verify`). A pair in a TFRecord record is
        read once and checked against the file's index (:func:`~daliloader.tfrecord.read_pair`): a record
        whose data changed since the dataset was loaded is refused, so what a loader decodes is what was
        indexed and vetted."""
        image, mask = self.data.images[index], self.data.masks[index]
        if not read_checked(image):
            self.verify(index)
            return read_part(image), read_part(mask)
        try:  # (with the mask cache, the mask is the cache's file, kept fresh by the vetting: read after it)
            blobs = read_checked_pair(image, mask) if self._cache is None else (read_part(image), None)
        except RecordProblem as e:
            self._refuse(index, [Problem(record_problem_kind(e.kind), str(image), e.what, str(mask))])
        except StorageError as e:
            self._refuse_object(index, e)
        self.verify(index, blobs)
        return blobs if self._cache is None else (blobs[0], read_part(mask))

    def take(self, index: int, payload: bytes) -> tuple[bytes, bytes]:
        """:meth:`read` of a record that another reader read (tf.data's ``TFRecordDataset``): its
        ``payload`` checked against the index, then vetted; the encoded image and mask."""
        image, mask = self.data.images[index], self.data.masks[index]
        if image.crc is not None and masked_crc(payload) != image.crc:
            self._refuse(index, [Problem(ProblemKind.CHANGED, str(image), CHANGED_RECORD, str(mask))])
        try:
            blobs = image.picture(payload), mask.picture(payload)
        except RecordProblem as e:
            self._refuse(index, [Problem(record_problem_kind(e.kind), str(image), e.what, str(mask))])
        self.verify(index, blobs)
        return blobs

    def _refresh(self, index: int) -> None:
        """Keep pair ``index``'s cached mask fresh (:meth:`daliloader.maskcache.MaskCache.refresh`); a mask
        that no longer decodes refuses the pair, naming it."""
        try:
            self._cache.refresh(index)
        except StorageError as e:  # the bucket's faults, named as such (a mask gone or replaced: its pair)
            self._refuse_object(index, e)
        except LoadError as e:
            self._refuse(index, [Problem(ProblemKind.CORRUPT, str(self._named.masks[index]), str(e).splitlines()[0],
                                         str(self._named.images[index]))])

    def _refuse_object(self, index: int, error: StorageError) -> NoReturn:
        """Refuse pair ``index`` for an object gone or replaced since the load (a problem of the data, named
        with its pair), or raise the bucket's other faults as they are (they name the object), kept for
        :meth:`explain` alike."""
        image, mask = self._named.images[index], self._named.masks[index]
        part, partner = (image, mask) if error.url == part_file(image) else (mask, image)
        problem = object_problem(error, part, partner)
        if problem is not None:
            self._refuse(index, [problem])
        with self._lock:
            self._refused.append(error)
        raise error

    def _refuse(self, index: int, problems: list[Problem]) -> NoReturn:
        """Raise the LoadError that names pair ``index`` and its ``problems``, kept for :meth:`explain`."""
        image, mask = self._named.images[index], self._named.masks[index]
        refused = LoadError(_message(f"cannot load sample {index} ({image} + {mask})", problems))
        with self._lock:
            self._refused.append(refused)  # what explain() hands on, whatever wraps it on the way
        raise refused

    def explain(self, error: BaseException) -> LoadError:
        """A LoadError naming the bad files among the pairs in flight when ``error`` happened: the guard's own
        refusal where it raised one (TensorFlow hands it on wrapped in an ``OpError``), else what is wrong
        with the pairs it vetted last (reading TFRecords: every record the reader can have read lately)."""
        with self._lock:
            refused, self._refused = list(self._refused), deque(maxlen=self._refused.maxlen)
            newest = list(dict.fromkeys(reversed(self._recent)))  # the pairs vetted last, newest first
        carried = _carried(refused, error)
        if carried is not None:
            return carried
        first_line = _first_line(str(error)) or type(error).__name__
        moved = self._moved_files()
        if moved:
            return LoadError(_message(f"loading a batch failed ({first_line})", moved))
        if _out_of_memory(error):  # no file is to blame: checking the pairs would only list them all
            return LoadError(f"loading a batch failed: out of memory ({_allocation(error) or first_line}). A "
                             "batch takes memory in proportion to its samples times the crop's pixels, and one-hot "
                             "labels 4 bytes per class per pixel: load smaller batches or crops, or int labels (with "
                             f"a sparse loss) instead of one-hot.\nOriginal error:\n{error}")
        if self._named.packs is not None:  # the reader picks the samples: none is known to be in flight
            folder = self._named.packs.tars[0].rsplit("/", 1)[0]  # (a path, or an s3:// URL)
            return LoadError(f"loading a batch from the webdataset packs in {folder} failed ({first_line}). "
                             f"Check the prepared copy against its originals with `daliloader verify "
                             f"{folder.rsplit('/', 1)[0]}`.\nOriginal error:\n{error}")
        problems = self._problems(sorted(newest))
        if problems:
            return LoadError(_message(f"loading a batch failed ({first_line})", problems))
        return LoadError(f"loading a batch failed ({first_line}); nothing is wrong here with {self._what(newest)}\n"
                         f"so the cause may not be the data (`daliloader check` decodes every pair).\nOriginal "
                         f"error:\n{error}")

    def _moved_files(self) -> list[Problem]:
        """TFRecord files that changed or went away since they were indexed (that fails before any record of
        them is vetted)."""
        if self._named.records is None:
            return []
        first_parts = {p.file: p for p in self._named.images}.values()
        return [Problem(ProblemKind.CHANGED, p.file, CHANGED_FILE) for p in first_parts if p.changed()]

    def _problems(self, pairs: list[int]) -> list[Problem]:
        """What a full check finds wrong with ``pairs`` that a loader would fail on."""
        return [p for i in pairs
                for p in check_pair(self._named.images[i], self._named.masks[i], self._named.classes, min_side=0,
                                    mask_depth=self._named.mask_depth, cached_masks=self._cache is not None)
                if p.kind is not ProblemKind.UNKNOWN_VALUES and self._fails_here(p)]

    def _fails_here(self, problem: Problem) -> bool:
        """Whether a problem stops this guard's backend: a picture too large for another backend's decoders
        does not."""
        backend = self.expect.backend
        return problem.kind is not ProblemKind.UNDECODABLE or not backend or backend in problem.details.get(
            "cannot", {backend: ""})

    def _what(self, newest: list[int]) -> str:
        """The pairs vetted last (``newest`` first), in words: the newest :data:`SHOWN`, and how many more."""
        if self._named.records is not None:
            files = sorted({part_file(self._named.images[i]) for i in newest})
            return f"the {len(newest)} records read last (of {', '.join(files)})"
        named, more = self._named, len(newest) - SHOWN
        lines = [f"  {named.images[i]} + {named.masks[i]}" for i in newest[:SHOWN]]
        return "\n".join([f"the {len(newest)} pairs in flight (the newest first):"] + lines
                          + ([f"  and {more} more"] if more > 0 else []))


def _carried(refused: list[LoadError], error: BaseException) -> LoadError | None:
    """The refusal of :meth:`PairGuard.verify` that ``error`` is: that refusal itself, or TensorFlow's
    (or DALI's) error wrapping it, whose text holds the refusal's first line (the line names its sample,
    so among several pairs refused at once by parallel reads, the one handed on is found). None for an
    error that carries no refusal: a refusal raised where no explain() followed (an epoch stopped early)
    says nothing of a later error."""
    text = str(error)
    return next((r for r in refused if r is error or str(r).splitlines()[0] in text), None)


#: Pairs a message shows of those in flight (the guard remembers more).
SHOWN = 5
#: How the libraries say they ran out of memory: TensorFlow ("OOM when allocating", a ResourceExhaustedError),
#: CUDA and DALI ("out of memory"), C++ (``std::bad_alloc``), the system (ENOMEM).
_OUT_OF_MEMORY = re.compile(r"OOM when allocating|Failed to allocate memory|out of memory|std::bad_alloc|"
                            r"Cannot allocate memory", re.IGNORECASE)
#: TensorFlow's words for the allocation that failed.
_ALLOCATION = re.compile(r"OOM when allocating tensor with shape\[[^\]]*\] and type \w+")


def _out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says memory ran out: Python's MemoryError, TensorFlow's ResourceExhaustedError (by
    name: the guard imports no TensorFlow), or the words of :data:`_OUT_OF_MEMORY`."""
    return (isinstance(error, MemoryError) or type(error).__name__ == "ResourceExhaustedError"
            or _OUT_OF_MEMORY.search(str(error)) is not None)


def _allocation(error: BaseException) -> str:
    """TensorFlow's words for the allocation that failed (its shape and type), or ""."""
    found = _ALLOCATION.search(str(error))
    return found.group(0) if found else ""


#: The lines of a DALI error that say only that there is one: its code, "Critical error in pipeline:".
_DALI_PREAMBLE = re.compile(r"(Error DALI_ERROR_\w+:|Critical error in pipeline:)$")


def _first_line(text: str) -> str:
    """The first line of an error's text that says something, without TensorFlow's ``{{function_node
    ...}}`` prefix; of a DALI error, its cause: the line after "encountered:" (without ``Assert on "..."
    failed:``), past the operator and the traceback of its definition."""
    lines = [re.sub(r"\{\{[^}]*\}\}\s*", "", line).strip() for line in text.strip().splitlines()]
    if "encountered:" in lines:
        lines = lines[lines.index("encountered:") + 1:]
    for line in lines:
        if line and not _DALI_PREAMBLE.match(line):
            return re.sub(r'^Assert on ".*?" failed: ', "", line)
    return ""


def _message(head: str, problems: list[Problem]) -> str:
    return head + ":\n" + "\n".join(f"  {p}" for p in problems) + "\n" + WHAT_TO_DO
