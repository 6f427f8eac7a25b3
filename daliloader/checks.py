"""Bad input: ``check`` scans a dataset before training; ``PairGuard`` vets each pair as it is loaded.

DALI cannot skip a bad file: a truncated JPEG stops the pipeline with an error that names no file, and
the pipeline is dead afterwards. So daliloader looks at files itself, at two depths:

* ``check(data)`` (``daliloader check DATA``): every pair, fully decoded, in parallel: JPEGs by
  libjpeg-turbo in strict mode (simplejpeg), which fails on the corrupt data the loaders' decoders only
  warn about, other formats by Pillow, the masks' values by OpenCV.
  It reports per file: missing, empty, unsupported or unrecognised content, truncated, corrupt, image
  and mask sizes that differ, mask colours/ids the class map does not know (with pixel counts), tiny
  images, lossy (JPEG) masks, files without a partner, symbolic links that lead nowhere (or into a
  loop of links) and folders that cannot be read.
* :class:`PairGuard`, used by every loader the first time it reads a pair: the cheap part of the same
  checks (present, non-empty, a known format, complete, same size as its mask) from file headers and
  tails. A failure raises :class:`~daliloader.errors.LoadError` naming the files, instead of a
  decoder error naming none. Later epochs skip pairs already vetted, unless a file changed since
  (its size, modification time, inode or change time).

Nothing here imports TensorFlow or DALI.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import cv2
import numpy as np

from .classes import ClassMap
from .codecs import decode, mask_pixels
from .data import SINGLE_CHANNEL_MODES, SIXTEEN_BIT_MODES, SegmentationData, choose_classes
from .data import mask_depth as data_mask_depth
from .errors import WHAT_TO_DO, DataError, LoadError
from .layouts import find
from .manifest import LZ4_HEADER, lz4_mask_size
from .pairing import listing_problems, pair_files
from .parallel import threaded_map
from .parts import open_image, open_part, part_file, read_part, sniff
from .tfrecord import RecordPart, RecordProblem, file_stamp

#: Formats that DALI, OpenCV and (except TIFF) tf.image all decode.
SUPPORTED_FORMATS = ("JPEG", "PNG", "BMP", "TIFF", "WEBP")
LOSSY_MASK_FORMATS = ("JPEG", "WEBP")
#: Images with a side shorter than this are reported as tiny.
MIN_SIDE = 16
#: Bytes read from the end of a file to find its end marker.
_TAIL = 4096
_END_MARKERS = {"JPEG": b"\xff\xd9", "PNG": b"IEND"}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file."""

    kind: str  # missing | empty | unsupported | truncated | corrupt | size_mismatch | unknown_values
    #            | binary_mask | tiny | lossy_mask | unpaired_image | unpaired_mask | mask_mode
    #            | mask_palette | palette_mask | mask_depth | undecodable | broken_link | unreadable
    path: str
    message: str
    partner: str | None = None  # the other file of the pair
    details: dict = field(default_factory=dict)

    def __post_init__(self):  # a record's part is named by its str(): file, record, byte offset, key
        object.__setattr__(self, "path", str(self.path))
        if self.partner is not None:
            object.__setattr__(self, "partner", str(self.partner))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class Header:
    format: str
    width: int
    height: int
    mode: str = ""  # Pillow's: "L" (8-bit), "I;16" (16-bit), "P" (palette), "RGB", ...
    palette: tuple[int, ...] | None = None  # a palette image's palette, flat r, g, b, ...


@dataclass(frozen=True)
class Expect:
    """What a loader needs of each pair beyond readable, complete files of one size: masks the class map
    can read (single-channel of the dataset's depth for ids; the map's palette for palette indices),
    and, for a backend, formats its decoders know (``decoders``: backend -> formats, for the message)."""

    classes: ClassMap | None = None
    mask_depth: int = 8
    backend: str = ""
    decoders: dict | None = None

    @classmethod
    def of(cls, data: SegmentationData, backend: str = "", decoders: dict | None = None) -> "Expect":
        return cls(data.classes, data.mask_depth, backend, decoders)


class FileProblem(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------- one file
def peek(path) -> Header:
    """Format and size from the header, and a complete-file test from the tail; raises FileProblem.
    ``path``: a file, or a record's picture (a :class:`~daliloader.tfrecord.RecordPart`, read whole).

    Cheap (no decode): what the loaders run on every new pair. A JPEG/PNG without its end marker is
    decoded once to tell a truncated file from one with trailing data after the marker.
    """
    blob = _record_bytes(path) if isinstance(path, RecordPart) else None
    try:
        size = len(blob) if blob is not None else os.path.getsize(path)
    except FileNotFoundError:
        raise FileProblem("missing", "file not found") from None
    if size == 0:
        raise FileProblem("empty", "empty file (0 bytes)")

    def opened():
        return io.BytesIO(blob) if blob is not None else open(path, "rb")

    from PIL import UnidentifiedImageError

    try:
        with open_image(io.BytesIO(blob) if blob is not None else path) as im:
            fmt, (width, height), mode = im.format, im.size, im.mode
            palette = tuple(im.getpalette() or ()) if mode == "P" else None
    except UnidentifiedImageError:
        with opened() as fh:
            head = fh.read(12)
        fmt = sniff(head)
        if fmt is not None:
            raise FileProblem("corrupt", f"corrupt: starts like a {fmt} but its header is damaged") from None
        raise FileProblem("unsupported", f"not an image in a known format (content starts with {head!r}); "
                                         f"supported: {', '.join(SUPPORTED_FORMATS)}") from None
    except OSError as e:
        raise FileProblem("corrupt", f"unreadable image header ({e})") from None
    if fmt not in SUPPORTED_FORMATS:
        raise FileProblem("unsupported", f"{fmt} is not supported; convert to one of {', '.join(SUPPORTED_FORMATS)}")
    if width == 0 or height == 0:
        raise FileProblem("empty", f"the image is {width}x{height} pixels")
    marker = _END_MARKERS.get(fmt)
    if marker is not None:
        with opened() as fh:
            fh.seek(max(size - _TAIL, 0))
            complete = marker in fh.read()
        if not complete and decode(np.frombuffer(blob if blob is not None else read_part(path), np.uint8),
                                   cv2.IMREAD_UNCHANGED) is None:
            raise FileProblem("truncated", f"truncated {fmt} ({size} bytes, no end marker): an incomplete "
                                           "download or copy?")
    return Header(fmt, width, height, mode, palette)


#: The problem kind of each way a record cannot be read.
_RECORD_KINDS = {"truncated": "truncated", "crc": "corrupt", "parse": "corrupt", "missing_key": "missing",
                 "unreadable": "missing"}


def _record_bytes(part: RecordPart) -> bytes:
    """A record's picture, or the FileProblem that says why it cannot be read: the file changed since it
    was indexed (its records may have moved), or the record is damaged."""
    if part.changed():
        raise FileProblem("changed", "the TFRecord file changed (or went away) since it was indexed, when the dataset "
                                     "was loaded: its records may have moved. Load the dataset again "
                                     "(SegmentationData.from_tfrecord / from_tfds), which indexes it anew")
    try:
        return part.read()
    except RecordProblem as e:
        raise FileProblem(_RECORD_KINDS.get(e.kind, "corrupt"), e.what) from None


def quick_problems(image: str, mask: str, expect: Expect | None = None) -> list[Problem]:
    """The cheap checks of one pair (see :func:`peek`), as problems."""
    return _quick(image, mask, expect)[0]


def _quick(image: str, mask: str, expect: Expect | None = None) -> tuple[list[Problem], dict[str, Header]]:
    """The quick checks' problems, and the headers of the files that passed them."""
    problems, headers = [], {}
    for path, partner in ((image, mask), (mask, image)):
        try:
            headers[path] = peek(path)
        except FileProblem as e:
            problems.append(Problem(e.kind, path, str(e), partner))
    if len(headers) == 2:
        im, mk = headers[image], headers[mask]
        if (im.width, im.height) != (mk.width, mk.height):
            problems.append(Problem("size_mismatch", mask, f"mask is {mk.width}x{mk.height} but its image is "
                                                           f"{im.width}x{im.height}", image))
    if expect is not None:
        if expect.decoders is not None:
            problems += [_undecodable(path, partner, headers[path].format, expect)
                         for path, partner in ((image, mask), (mask, image))
                         if path in headers and headers[path].format not in expect.decoders[expect.backend]]
        if mask in headers and expect.classes is not None:
            problem = mask_problem(headers[mask], expect.classes, expect.mask_depth)
            if problem:
                problems.append(Problem(problem[0], mask, problem[1], image))
    return problems, headers


def _undecodable(path, partner, fmt: str, expect: Expect) -> Problem:
    able = [name for name, formats in expect.decoders.items() if fmt in formats]
    return Problem("undecodable", path, f"{fmt} cannot be decoded by backend={expect.backend!r}; "
                                        f"{', '.join(able) or 'no backend'} can, or convert the file", partner)


def mask_problem(header: Header, classes: ClassMap, depth: int) -> tuple[str, str] | None:
    """Why the class map cannot read a mask with this header, as (kind, message); None when it can."""
    if classes.palette_masks is not None:
        if header.mode != "P":
            return "mask_mode", (f"a {header.mode} image, but this class map ({classes.source}) reads the indices of "
                                 "palette PNGs")
        expected = tuple(int(v) for v in classes.palette_masks.reshape(-1))
        if header.palette[:len(expected)] != expected[:len(header.palette)]:
            return "mask_palette", ("its palette differs from the one of the class map "
                                    f"({classes.source}): its indices cannot be read through its colours; convert "
                                    "the masks to one palette, or to 8-bit ids")
        return None
    if classes.kind != "id":
        return None
    if header.mode == "P":
        return "palette_mask", ("this mask is a palette PNG, which an id map cannot read: the decoders expand a "
                                "palette into colours. If its indices are the labels, pass the class count "
                                "(classes=N, --classes N), which reads them through the palette, or "
                                "ClassMap.from_palette_indices(palette, N)")
    if header.mode not in SINGLE_CHANNEL_MODES:
        return "mask_mode", (f"a {header.mode} image, but an id map ({classes.source}) needs single-channel masks; "
                             "colour masks need a colour map (class_dict.csv: name,r,g,b)")
    bits = 16 if header.mode in SIXTEEN_BIT_MODES else 8
    if bits != depth:
        return "mask_depth", (f"a {bits}-bit mask in a dataset of {depth}-bit masks (the depth of its first mask): "
                              "every mask must have the same depth")
    return None


def palette_indices(path) -> str:
    """The indices a palette PNG uses, for messages."""
    with open_image(path) as im:
        indices = np.unique(np.asarray(im)).tolist()
    runs = [[indices[0], indices[0]]]  # consecutive indices as first-last
    for i in indices[1:]:
        if i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def check_pair(image, mask, classes: ClassMap, min_side: int = MIN_SIDE, mask_depth: int | None = None
               ) -> list[Problem]:
    """Every check of one pair: the quick ones, then a full decode of both files and the mask's values.
    ``mask_depth``: the dataset's (default: this mask's own). ``image`` and ``mask``: files, or a
    record's pictures (:class:`~daliloader.tfrecord.RecordPart`)."""
    if mask_depth is None:
        mask_depth = data_mask_depth(mask)
    problems, headers = _quick(image, mask, Expect(classes, mask_depth))
    problems = [replace(p, message=f"{p.message}. Its indices: {palette_indices(mask)}")
                if p.path == str(mask) and p.kind == "palette_mask" else p for p in problems]
    if any(p.path == str(mask) and p.kind in MASK_KINDS for p in problems):
        headers.pop(mask, None)  # the map cannot read it: its values say nothing more
    for path, partner in ((image, mask), (mask, image)):
        if path in headers:
            damage = strict_decode(path)
            if damage:
                problems.append(Problem("corrupt", path, f"corrupt data: {damage}", partner))
                headers.pop(path)
    if image in headers:
        height, width = headers[image].height, headers[image].width
        if min(height, width) < min_side:
            problems.append(Problem("tiny", image, f"tiny image: {width}x{height} pixels (a side below {min_side})",
                                    mask))
    if mask in headers:
        m = mask_pixels(np.frombuffer(read_part(mask), np.uint8), classes)
        if m is None:
            problems.append(Problem("corrupt", mask, "corrupt: the decoder rejects the data", image))
        else:
            unknown = classes.unknown_values(m)
            if unknown and headers[mask].mode == "P" and classes.palette_masks is None:
                problems.append(_palette_read_as_colours(mask, image, classes))
            elif unknown:
                problems.append(_unknown_problem(mask, image, unknown, m.shape[0] * m.shape[1], classes))
            if classes.palette_masks is not None:
                problems += _stray_indices(mask, image, classes)
            elif _looks_binary(m, classes):
                problems.append(Problem("binary_mask", mask, f"holds only the ids 0 and {classes.ignore_index}, and "
                                        f"{classes.ignore_index} is the ignore index: a binary mask with foreground "
                                        f"{classes.ignore_index}? Its foreground would load as ignored; pass "
                                        f"classes={{0: 0, {classes.ignore_index}: 1}}", image))
        fmt = headers[mask].format
        if fmt in LOSSY_MASK_FORMATS:
            problems.append(Problem("lossy_mask", mask, f"mask stored as {fmt}, a lossy format: its edges carry "
                                                        "values of no class; store masks as PNG", image))
    return problems


def strict_decode(path) -> str | None:
    """Decode a file whole, refusing the damaged data that the loaders' decoders (OpenCV, DALI,
    TensorFlow) only warn about on stderr before decoding it into garbage pixels: what is wrong, or None.

    JPEGs go through libjpeg-turbo in strict mode (simplejpeg), which turns each of libjpeg's warnings
    ("Corrupt JPEG data: premature end of data segment", a bad Huffman code, ...) into an error; Pillow
    is not enough there, as its decoder passes over part of them (a fair share of JPEGs with random bytes
    in their compressed data decode without a word). Other formats go through Pillow, which refuses a
    PNG whose data fails its checksums or ends early."""
    try:
        with open_part(path) as fh:
            head = fh.read(3)
            if sniff(head) == "JPEG":
                import simplejpeg

                # fast DCT and upsampling: the errors come from the entropy decoding, which both variants run whole
                simplejpeg.decode_jpeg(head + fh.read(), strict=True, fastdct=True, fastupsample=True)
                return None

        with open_image(path) as im:
            im.load()
    except (OSError, ValueError, SyntaxError) as e:
        return f"{e} (the decoders the loaders use would fill the damaged part with garbage and only warn)"
    return None


#: Problems that mean the class map cannot read a mask at all.
MASK_KINDS = ("mask_mode", "mask_palette", "palette_mask", "mask_depth")


def _palette_read_as_colours(mask: str, image: str, classes: ClassMap) -> Problem:
    """A palette PNG read as colours by a colour map whose colours it does not use: name its indices."""
    return Problem("palette_mask", mask, f"this mask is a palette PNG; its indices are {palette_indices(mask)}, and "
                                         "its colours are "
                                         f"not those of the class map {classes.source}. If the indices are the "
                                         "labels, read them with ClassMap.from_palette_indices(palette, num_classes) "
                                         "(SegmentationData.from_folder does so for Pascal VOC)", image)


def _looks_binary(mask: np.ndarray, classes: ClassMap) -> bool:
    """An id mask of at most two classes that holds only 0 and the ignore index (255): binary masks
    store their foreground as 255."""
    ignore = classes.ignore_index
    return (classes.kind == "id" and classes.num_classes <= 2 and classes.id_to_class.get(ignore) == ignore
            and set(np.unique(mask).tolist()) == {0, ignore})


def _stray_indices(mask: str, image: str, classes: ClassMap) -> list[Problem]:
    """Palette indices read by index that are neither a class nor the ignore index: they load as ignored,
    or, where the palette gives them the colour of a class, as that class."""
    with open_image(mask) as im:
        indices, counts = np.unique(np.asarray(im), return_counts=True)
    n, pal = classes.num_classes, classes.palette_masks
    stray = [(int(i), int(c)) for i, c in zip(indices, counts) if i >= n and i != classes.ignore_index]
    if not stray:
        return []
    colours = {tuple(c): k for k, c in enumerate(classes.colors.tolist())}
    shown = ", ".join(f"{i} x{c}" + (f" (the colour of class {colours[tuple(pal[i].tolist())]}: loads as that class)"
                                     if i < len(pal) and tuple(pal[i].tolist()) in colours else "")
                      for i, c in stray[:8])
    return [Problem("unknown_values", mask, f"palette indices that are not classes (0-{n - 1}) nor the ignore index "
                                            f"{classes.ignore_index}: {shown}; they load as ignore_index unless noted",
                    image, {"values": [[i, c] for i, c in stray]})]


def _unknown_problem(mask, image, unknown, total, classes: ClassMap) -> Problem:
    what = ("colour" if classes.kind == "rgb" else "id") + ("s" if len(unknown) > 1 else "")
    pixels = sum(c for _, c in unknown)
    shown = ", ".join(f"{v} x{c}" for v, c in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
    return Problem("unknown_values", mask,
                   f"{pixels} of {total} pixels ({100 * pixels / total:.2f}%) have {len(unknown)} {what} not in the "
                   f"class map {classes.source or ''}: {shown}; they load as ignore_index={classes.ignore_index}",
                   image, {"values": [[list(v) if isinstance(v, tuple) else v, c] for v, c in unknown],
                           "pixels": pixels, "total": total})


# ---------------------------------------------------------------- the whole dataset
@dataclass
class Report:
    """What ``check`` found. ``ok`` is true when nothing is wrong."""

    source: str
    pairs: int
    problems: list[Problem]
    seconds: float
    workers: int

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds if self.seconds > 0 else float("inf")

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.problems:
            out[p.kind] = out.get(p.kind, 0) + 1
        return out

    def to_dict(self) -> dict:
        return {"source": self.source, "pairs": self.pairs, "ok": self.ok, "seconds": round(self.seconds, 3),
                "pairs_per_second": round(self.pairs_per_second, 1), "workers": self.workers,
                "counts": self.counts(), "problems": [asdict(p) for p in self.problems]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        head = (f"checked {self.pairs} pairs in {self.seconds:.1f} s ({self.pairs_per_second:.0f} pairs/s, "
                f"{self.workers} threads): ")
        if self.ok:
            return head + "no problems"
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts().items()))
        return head + f"{len(self.problems)} problem(s): {counts}\n" + "\n".join(f"  {p}" for p in self.problems)


def check(data: SegmentationData | str | Path | dict, *, split: str | None = None, classes=None,
          workers: int | None = None, min_side: int = MIN_SIDE, progress: bool = False, image_key: str | None = None,
          mask_key: str | None = None) -> Report:
    """Check every pair of ``data``: a SegmentationData, a dataset folder in a known layout (see
    :mod:`daliloader.layouts`: TFRecord files and TFDS folders too, whose features ``image_key`` and
    ``mask_key`` may name), or the ``from_dirs`` arguments as a dict. ``classes`` replaces the class
    map, as in ``from_folder`` (:func:`~daliloader.data.choose_classes`; None: the layout's, or the ids
    in the masks).

    Folders are paired leniently: files without a partner are reported instead of raised, and so are
    TFRecord records that cannot be read or lack the keys (named by file, record and byte offset).
    ``workers`` threads decode in parallel (default: every core).
    """
    unpaired: list[Problem] = []
    if isinstance(data, SegmentationData):
        pairs, source, depth = list(zip(data.images, data.masks)), repr(data), data.mask_depth
        classes = data.classes if classes is None else choose_classes(classes, data.masks, progress=progress)
    else:
        if isinstance(data, dict):
            suffix = data.get("mask_suffix")
            with listing_problems():  # reported below with the rest, not raised
                pairing = pair_files(data["images"], data["masks"], suffix, data.get("image_suffix", ""),
                                     only_suffixed=suffix is not None)
            published, layout, source = None, "", f"{data['images']} + {data['masks']}"
            classes = data.get("classes") if classes is None else classes
        else:
            with listing_problems():
                found = find(data, split, image_key, mask_key)
            if classes is None and found.needs_classes:
                raise DataError(found.needs_classes)
            pairing, published, layout, source = found.pairing, found.classes, found.layout, f"{data} ({found.layout})"
            unpaired = [Problem(_RECORD_KINDS.get(p.kind, "corrupt"), f"{p.file} [record {p.record} at byte {p.offset}]",
                                p.what) for p in found.record_problems]
        pairs = pairing.pairs
        masks = [m for _, m in pairs]
        classes = choose_classes(classes, masks, published, layout, progress) if pairs else None
        depth = data_mask_depth(masks[0]) if masks else 8
        unpaired += ([Problem("broken_link", p, f"a symbolic link to {why}") for p, why in pairing.broken_links]
                    + [Problem("unreadable", folder, f"this folder cannot be read ({why}): the files in it were not "
                                                     "checked; make it readable") for folder, why in pairing.unreadable]
                    + [Problem("missing", p, f"listed in {where}, but missing") for p, where in pairing.missing]
                    + [Problem("unpaired_image", p, "image without a mask") for p in pairing.unpaired_images]
                    + [Problem("unpaired_mask", p, "mask without an image") for p in pairing.unpaired_masks])
    workers = workers or os.cpu_count() or 1
    start = time.perf_counter()
    problems = list(unpaired)
    for found in threaded_map(lambda pair: check_pair(*pair, classes, min_side, depth), pairs, workers,
                              "checking pairs" if progress else None):
        problems.extend(found)
    return Report(source, len(pairs), problems, time.perf_counter() - start, workers)


# ---------------------------------------------------------------- at load time
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
    indexed (:func:`peek` refuses one that changed).
    """

    def __init__(self, data: SegmentationData, remember: int = 64, backend: str = "",
                 decoders: dict | None = None):
        """``backend`` and ``decoders`` (backend -> the formats it decodes): refuse files of formats that
        backend cannot decode, naming those that can."""
        self.data = data
        self.expect = Expect.of(data, backend, decoders)
        self._vetted: dict[int, tuple] = {}  # pair -> the stat stamp of its files when vetted
        self._recent: deque[int] = deque(maxlen=remember)
        self._lock = threading.Lock()

    def verify(self, index: int) -> None:
        with self._lock:
            self._recent.append(index)
        image, mask = self.data.images[index], self.data.masks[index]
        try:
            stamp = (file_stamp(part_file(image)), file_stamp(part_file(mask)))
        except OSError:
            stamp = None  # gone: the quick checks say so, naming the file
        if stamp is not None and self._vetted.get(index) == stamp:
            return
        problems, headers = _quick(image, mask, self.expect)
        if not problems and self.expect.backend == "dali-gpu" and self.data.gpu_masks is not None:
            problems = _gpu_mask_problems(self.data.gpu_masks[index], headers[image], image)
        if problems:
            raise LoadError(_message(f"cannot load sample {index} ({image} + {mask})", problems))
        self._vetted[index] = stamp

    def explain(self, error: BaseException) -> LoadError:
        """A LoadError naming the bad files among the pairs in flight when ``error`` happened (reading
        TFRecords: among every record the reader can have read lately, which the guard remembers)."""
        text = str(error)
        if "LoadError: " in text:  # our own verify() failed inside the pipeline: pass its message on
            return LoadError(text.split("LoadError: ", 1)[1].split("\nTraceback", 1)[0].strip())
        first_line = _first_line(text) or type(error).__name__
        if self.data.packs is not None:  # the reader picks the samples: none is known to be in flight
            folder = Path(self.data.packs.tars[0]).parent
            return LoadError(f"loading a batch from the packed webdataset shards in {folder} failed ({first_line}). "
                             f"Check the prepared copy against its originals with `daliloader verify "
                             f"{folder.parent}`.\nOriginal error:\n{error}")
        with self._lock:
            recent = sorted(set(self._recent))
        if self.data.records is not None:  # a file that changed or went away fails before any record is vetted
            stamps = {p.file: p for p in self.data.images}
            moved = [p for p in stamps.values() if p.changed()]
            if moved:
                return LoadError(_message(f"loading a batch failed ({first_line})", [
                    Problem("changed", p.file, "changed (or went away) since it was indexed, when the dataset was loaded: "
                            "its records may have moved. Load the dataset again") for p in moved]))
        problems = [p for i in recent
                    for p in check_pair(self.data.images[i], self.data.masks[i], self.data.classes, min_side=0,
                                        mask_depth=self.data.mask_depth)
                    if p.kind not in ("unknown_values", "lossy_mask")]
        if problems:
            return LoadError(_message(f"loading a batch failed ({first_line})", problems))
        if self.data.records is not None:
            files = sorted({part_file(self.data.images[i]) for i in recent})
            read = f"the {len(recent)} records read last (of {', '.join(files)})"
        else:
            read = "the pairs in flight:\n" + "\n".join(f"  {self.data.images[i]} + {self.data.masks[i]}"
                                                     for i in recent)
        return LoadError(f"loading a batch failed ({first_line}); nothing is wrong here with {read}\nso the cause "
                         f"may not be the data (`daliloader check` decodes every pair).\nOriginal error:\n{error}")


def _first_line(text: str) -> str:
    """The first line of an error's text that says something, without TensorFlow's ``{{function_node
    ...}}`` prefix."""
    for line in text.strip().splitlines():
        line = re.sub(r"\{\{[^}]*\}\}\s*", "", line).strip()
        if line:
            return line
    return ""


def _gpu_mask_problems(path: str, image: Header, partner: str) -> list[Problem]:
    """The GPU form of a prepared mask (which dali-gpu inflates on the GPU, where a damaged header would
    fail without a file name): its header read, and its size compared with its image's."""
    try:
        with open(path, "rb") as fh:
            height, width = lz4_mask_size(fh.read(LZ4_HEADER), path)
    except OSError as e:
        return [Problem("missing", path, f"cannot read it ({e.strerror or e})", partner)]
    except DataError as e:  # its message starts with the file's name, which the Problem gives
        return [Problem("corrupt", path, str(e).removeprefix(f"{path}: "), partner)]
    if (width, height) != (image.width, image.height):
        return [Problem("size_mismatch", path, f"its header gives {width}x{height} but its image is "
                                               f"{image.width}x{image.height}: the prepared copy is damaged; run "
                                               "`daliloader verify` on it", partner)]
    return []


def _message(head: str, problems: list[Problem]) -> str:
    return head + ":\n" + "\n".join(f"  {p}" for p in problems) + "\n" + WHAT_TO_DO
