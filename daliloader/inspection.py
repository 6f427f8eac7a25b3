"""What is wrong with one pair's files: headers, tails and full decodes, as problems that name the file.

Two depths, for two users: :func:`quick_problems` reads headers and tails only (present, non-empty, a
known format, complete, the image's size, a mask the class map can read), what every loader runs on a
pair before it reads it (:class:`~daliloader.guard.PairGuard`) and what ``prepare`` refuses;
:func:`check_pair` adds a full decode of both files and the mask's values, what ``daliloader check``
runs (:mod:`daliloader.checks`). Each finding is a :class:`Problem` of a :class:`ProblemKind`.

Nothing here imports TensorFlow or DALI.
"""

from __future__ import annotations

import io
import os
import re
import zlib
from dataclasses import dataclass, field, replace

import cv2
import numpy as np

from .classes import ClassMap, MaskKind, remap_advice
from .codecs import decode, mask_pixels
from .data import SegmentationData
from .data import mask_depth as data_mask_depth
from .errors import DataError, StorageError, StorageFault, ValueEnum
from .manifest import LZ4_HEADER, lz4_mask_size
from .parts import (
    MAGIC,
    SINGLE_CHANNEL_MODES,
    SIXTEEN_BIT_MODES,
    in_record,
    open_image,
    open_part,
    read_checked,
    read_part,
    sniff,
)
from .tfrecord import RecordFault, RecordPart, RecordProblem


class ProblemKind(ValueEnum):
    """What is wrong with a file (the ``kind`` of a :class:`Problem`, and its name in ``check``'s JSON)."""

    MISSING = "missing"  # not there, or a record without the picture
    EMPTY = "empty"  # 0 bytes, or 0 pixels
    UNSUPPORTED = "unsupported"  # not an image in a format the loaders decode
    TRUNCATED = "truncated"  # cut short
    CORRUPT = "corrupt"  # damaged header or data
    SIZE_MISMATCH = "size_mismatch"  # the mask's size is not its image's
    UNKNOWN_VALUES = "unknown_values"  # mask colours or ids of no class (they load as ignored)
    BINARY_MASK = "binary_mask"  # 0 and 255 only, and 255 is the ignore index
    TINY = "tiny"  # a side under MIN_SIDE pixels
    LOSSY_MASK = "lossy_mask"  # a mask stored as JPEG or WebP
    UNPAIRED_IMAGE = "unpaired_image"
    UNPAIRED_MASK = "unpaired_mask"
    MASK_MODE = "mask_mode"  # a mask the class map cannot read (colour for an id map, ...)
    MASK_PALETTE = "mask_palette"  # a palette other than the class map's
    SHORT_PALETTE = "short_palette"  # a palette PNG whose pixels use indices past the end of its palette
    PALETTE_MASK = "palette_mask"  # a palette PNG where the map reads ids or colours
    MASK_DEPTH = "mask_depth"  # 8 and 16 bits in one dataset
    UNDECODABLE = "undecodable"  # a format or a size this backend does not decode
    BROKEN_LINK = "broken_link"
    UNREADABLE = "unreadable"  # a folder that cannot be listed
    CHANGED = "changed"  # a TFRecord file changed since it was indexed, an object since it was listed
    CLASS_TABLE = "class_table"  # the masks are in the other form of the published table given (forms.py)


#: Problems that mean the class map cannot read a mask at all.
MASK_KINDS = (ProblemKind.MASK_MODE, ProblemKind.MASK_PALETTE, ProblemKind.SHORT_PALETTE, ProblemKind.PALETTE_MASK,
              ProblemKind.MASK_DEPTH)

#: Formats that DALI, OpenCV and (except TIFF) tf.image all decode: those the loaders recognise.
SUPPORTED_FORMATS = tuple(MAGIC)
LOSSY_MASK_FORMATS = ("JPEG", "WEBP")
#: Images with a side shorter than this are reported as tiny.
MIN_SIDE = 16
#: Bytes read from the end of a file to find its end marker.
_TAIL = 4096
_END_MARKERS = {"JPEG": b"\xff\xd9", "PNG": b"IEND"}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file."""

    kind: ProblemKind
    path: str
    message: str
    partner: str | None = None  # the other file of the pair
    details: dict = field(default_factory=dict)

    def __post_init__(self):  # a record's part is named by its str(): file, record, byte offset, key
        object.__setattr__(self, "kind", ProblemKind(self.kind))
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
    past_palette: int | None = None  # the highest index its pixels use, where past its palette's end
    rounded_palette: bool = False  # a palette TIFF whose colours DALI reads otherwise (see _rounds_colormap)


@dataclass(frozen=True)
class Expect:
    """What a loader needs of each pair beyond readable, complete files of one size: masks the class map
    can read (single-channel of the dataset's depth for ids; the map's palette for palette indices),
    and, for a backend, formats its decoders know (``decoders``: backend -> formats, for the message).
    ``cached_masks``: the backend reads the masks' class indices from the mask cache, whose PNGs its
    decoders read whatever the masks' own format (the cache decodes them with OpenCV)."""

    classes: ClassMap | None = None
    mask_depth: int = 8
    backend: str = ""
    decoders: dict | None = None
    cached_masks: bool = False

    @classmethod
    def of(cls, data: SegmentationData, backend: str = "", decoders: dict | None = None,
           cached_masks: bool = False) -> Expect:
        return cls(data.classes, data.mask_depth, backend, decoders, cached_masks)


class FileProblem(Exception):
    """What :func:`peek` finds wrong with a file: a kind and a message (without the file's name)."""

    def __init__(self, kind: ProblemKind, message: str):
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------- one file
def peek(path, blob: bytes | None = None) -> Header:
    """Format and size from the header, and a complete-file test from the tail; raises FileProblem.
    ``path``: a file, or a record's picture (a :class:`~daliloader.tfrecord.RecordPart`, read whole).

    Cheap (no decode): what the loaders run on every new pair. A JPEG/PNG without its end marker is
    decoded once to tell a truncated file from one with trailing data after the marker, and a palette
    image of fewer than 256 colours to find whether its pixels use indices past them
    (``Header.past_palette``). ``blob``: the
    picture's bytes where they were read already (a record's, checked against its index).
    """
    if blob is None and in_record(path):
        blob = _record_bytes(path)
    elif blob is None and read_checked(path):
        blob = _object_bytes(path)
    try:
        size = len(blob) if blob is not None else os.path.getsize(path)
    except FileNotFoundError:
        raise FileProblem(ProblemKind.MISSING, "file not found") from None
    if size == 0:
        raise FileProblem(ProblemKind.EMPTY, "empty file (0 bytes)")
    header = _read_header(path, blob)
    if header.format not in SUPPORTED_FORMATS:
        raise FileProblem(ProblemKind.UNSUPPORTED,
                          f"{header.format} is not supported; convert to one of {', '.join(SUPPORTED_FORMATS)}")
    if header.width == 0 or header.height == 0:
        raise FileProblem(ProblemKind.EMPTY, f"the image is {header.width}x{header.height} pixels")
    _refuse_truncated(path, blob, header.format, size)
    return header


def _past_palette(im, palette: tuple[int, ...] | None) -> int | None:
    """The highest palette index ``im``'s pixels use where it is past the end of its palette, else None.
    Every decoder (libpng in DALI and OpenCV, TensorFlow's) shows such a pixel as black: a VOC mask saved
    with the 21 colours of its classes shows its border (index 255) as background. Only a palette of
    fewer than 256 colours can be too short, so only such an image is decoded."""
    if palette is None or len(palette) >= 3 * 256:
        return None
    top = im.getextrema()[1]  # (a palette image's extrema are its lowest and highest index)
    return top if top >= len(palette) // 3 else None


#: TIFF's ColorMap tag: a palette's colours, 16 bits each (all reds, then all greens, then all blues).
COLORMAP = 320


def _rounds_colormap(im) -> bool:
    """Whether a palette TIFF's pixels use colours of its 16-bit colormap that DALI's TIFF decoder reads
    otherwise than libtiff (so OpenCV) and Pillow: DALI rounds, ``round(c / 257)``, they keep the high
    byte, ``c >> 8``. Pillow writes a level v as ``256 v``, which DALI reads one level low above 128
    (writers of ``257 v`` are read alike). A colormap with no entry of 256 or more, an old writer's 8-bit
    one, is not judged. Only where some entry is read otherwise are the pixels decoded, to judge the
    entries they use."""
    colormap = im.tag_v2.get(COLORMAP) or ()
    colours = len(colormap) // 3
    rounded = {i % colours for i, c in enumerate(colormap) if (c + 128) // 257 != c >> 8}
    if not rounded or all(c < 256 for c in colormap):
        return False
    try:
        used = {i for i, count in enumerate(im.histogram()) if count}  # (a palette image's: one bin per index)
    except OSError:  # damaged pixels: the decoders' failure names the file
        return False
    return bool(rounded & used)


def _opened(path, blob: bytes | None):
    """A file object on a file, or on a record's picture already read."""
    return io.BytesIO(blob) if blob is not None else open(path, "rb")


def _read_header(path, blob: bytes | None) -> Header:
    """The header Pillow reads, or the FileProblem that says whether the file looks like a damaged image
    or like no image at all."""
    from PIL import UnidentifiedImageError

    try:
        with open_image(io.BytesIO(blob) if blob is not None else path) as im:
            palette = tuple(im.getpalette() or ()) if im.mode == "P" else None
            rounded = im.format == "TIFF" and palette is not None and _rounds_colormap(im)
            return Header(im.format, im.size[0], im.size[1], im.mode, palette, _past_palette(im, palette), rounded)
    except UnidentifiedImageError:
        with _opened(path, blob) as fh:
            head = fh.read(12)
        fmt = sniff(head)
        if fmt is not None:
            raise FileProblem(ProblemKind.CORRUPT, f"corrupt: starts like a {fmt} but its header is damaged") from None
        raw = " (raw pixels? store each picture encoded, as PNG or JPEG)" if blob is not None else ""
        raise FileProblem(ProblemKind.UNSUPPORTED, f"not an image in a known format (content starts with {head!r})"
                                                   f"{raw}; supported: {', '.join(SUPPORTED_FORMATS)}") from None
    except OSError as e:
        raise FileProblem(ProblemKind.CORRUPT, f"unreadable image header ({e})") from None


def _refuse_truncated(path, blob: bytes | None, fmt: str, size: int) -> None:
    """A JPEG or PNG without its end marker in its last bytes is truncated, unless it decodes (then the
    marker only sits before trailing data)."""
    marker = _END_MARKERS.get(fmt)
    if marker is None:
        return
    with _opened(path, blob) as fh:
        fh.seek(max(size - _TAIL, 0))
        if marker in fh.read():
            return
    if decode(np.frombuffer(blob if blob is not None else read_part(path), np.uint8), cv2.IMREAD_UNCHANGED) is None:
        raise FileProblem(ProblemKind.TRUNCATED, f"truncated {fmt} ({size} bytes, no end marker): an incomplete "
                                                 "download or copy?")


#: What a TFRecord file that changed since it was indexed is told.
CHANGED_FILE = ("changed (or went away) since it was indexed, when the dataset was loaded: its records may have moved. "
                "Load the dataset again (SegmentationData.from_tfrecord / from_tfds), which indexes it anew")
#: The problem kind of each way a record cannot be read.
_RECORD_KINDS = {RecordFault.TRUNCATED: ProblemKind.TRUNCATED, RecordFault.MISSING_KEY: ProblemKind.MISSING,
                 RecordFault.UNREADABLE: ProblemKind.MISSING, RecordFault.CHANGED: ProblemKind.CHANGED}


def record_problem_kind(fault: RecordFault) -> ProblemKind:
    """The problem kind of a record that cannot be read (a damaged one is corrupt)."""
    return _RECORD_KINDS.get(fault, ProblemKind.CORRUPT)


def _record_bytes(part: RecordPart) -> bytes:
    """A record's picture, or the FileProblem that says why it cannot be read: the file changed since it
    was indexed (its records may have moved), or the record is damaged."""
    if part.changed():
        raise FileProblem(ProblemKind.CHANGED, f"the TFRecord file {CHANGED_FILE}")
    try:
        return part.read()
    except RecordProblem as e:
        raise FileProblem(record_problem_kind(e.kind), e.what) from None


def _object_bytes(part) -> bytes:
    """An object's bytes, or the FileProblem that says it is gone or was replaced since it was listed (the
    bucket's other faults, which say nothing of the data, are raised as they are)."""
    try:
        return part.read()
    except StorageError as e:
        if e.fault not in _OBJECT_KINDS:
            raise
        raise FileProblem(_OBJECT_KINDS[e.fault], str(e).removeprefix(f"{part}: ")) from None


#: The faults of reading an object that are problems of the data, and their kinds.
_OBJECT_KINDS = {StorageFault.MISSING_OBJECT: ProblemKind.MISSING, StorageFault.CHANGED: ProblemKind.CHANGED}


def object_problem(error: StorageError, part, partner) -> Problem | None:
    """The Problem an object's fault is where it is one of the data (gone, or replaced); None otherwise."""
    kind = _OBJECT_KINDS.get(error.fault)
    return None if kind is None else Problem(kind, str(part), str(error).removeprefix(f"{part}: "), str(partner))


def quick_problems(image: str, mask: str, expect: Expect | None = None) -> list[Problem]:
    """The cheap checks of one pair (see :func:`~daliloader.inspection.peek`), as problems."""
    return quick_check(image, mask, expect)[0]


def quick_check(image: str, mask: str, expect: Expect | None = None,
                blobs: dict | None = None) -> tuple[list[Problem], dict[str, Header]]:
    """The quick checks' problems, and the headers of the files that passed them; ``blobs``: the bytes of
    either file where they were read already (part -> bytes)."""
    problems, headers = [], {}
    for path, partner in ((image, mask), (mask, image)):
        try:
            headers[path] = peek(path, (blobs or {}).get(path))
        except FileProblem as e:
            problems.append(Problem(e.kind, path, str(e), partner))
    problems += _header_problems(image, mask, headers)
    if expect is not None:
        problems += _decoder_problems(image, mask, headers, expect) + backend_size_problems(image, mask, headers,
                                                                                               expect)
        if mask in headers and expect.classes is not None:
            problems += _map_problems(mask, image, headers[mask], expect, (blobs or {}).get(mask))
    return problems, headers


def _map_problems(mask, image, header: Header, expect: Expect, blob: bytes | None) -> list[Problem]:
    """Why the class map cannot read the mask: its header (:func:`mask_problem`), else, for a grey mask
    under a colour table, its levels (:func:`grey_ids_problem`)."""
    problem = mask_problem(header, expect.classes, expect.mask_depth)
    if problem:
        return [Problem(problem[0], mask, problem[1], image)]
    grey = grey_ids_problem(mask, image, header, expect.classes, blob)
    return [grey] if grey else []


@dataclass(frozen=True)
class ReadOtherwise:
    """A picture that the decoders of some ``backends`` (the registry's names) read otherwise than the other
    backends' (other pixels; for a mask, other labels): ``what`` it is and what they ``would`` do."""

    backends: tuple[str, ...]
    what: str
    would: str

    def said(self, backends) -> str:
        """The problem, said of ``backends`` (some of its own), with what to do."""
        return f"{self.what} ({_listed(list(backends))} would {self.would}): convert it to PNG, or load it with " \
               "another backend"


def read_otherwise(header: Header) -> ReadOtherwise | None:
    """Whether some backends read a picture of this kind otherwise than the others (None: none does): a
    palette or 1-bit BMP, whose indices TensorFlow's BMP decoder returns (or it fails); a palette TIFF whose
    16-bit colours DALI's TIFF decoder rounds (``Header.rounded_palette``). Their loaders refuse it (but a
    mask from the mask cache, which OpenCV decodes), and ``check`` lists it."""
    if header.format == "BMP" and header.mode in ("1", "P"):
        kind = "1-bit" if header.mode == "1" else "palette"
        return ReadOtherwise(("tfdata",), f"a {kind} BMP, whose palette TensorFlow's BMP decoder does not apply",
                             "read its indices, or fail")
    if header.rounded_palette:
        return ReadOtherwise(("dali-cpu", "dali-gpu"), "a palette TIFF whose 16-bit colours DALI's TIFF decoder "
                             "rounds (round(c / 257)) where OpenCV and Pillow keep their high byte",
                             "read some colours one level low: other labels, for a mask")
    return None


def _decoder_problems(image, mask, headers: dict[str, Header], expect: Expect) -> list[Problem]:
    """The files of a pair whose format ``expect.backend``'s decoders do not read, or whose kind they read
    otherwise than the other backends (:func:`read_otherwise`); not the mask where the mask cache decodes it."""
    if expect.decoders is None:
        return []
    problems = []
    for path, partner in ((image, mask),) + (() if expect.cached_masks else ((mask, image),)):
        header = headers.get(path)
        if header is None:
            continue
        otherwise = read_otherwise(header)
        if header.format not in expect.decoders[expect.backend]:
            problems.append(_undecodable(path, partner, header.format, expect))
        elif otherwise and expect.backend in otherwise.backends:
            problems.append(Problem(ProblemKind.UNDECODABLE, path, otherwise.said([expect.backend]), partner))
    return problems


def read_otherwise_problem(path, partner, header: Header) -> Problem | None:
    """``check``'s problem of a picture that some backends read otherwise (:func:`read_otherwise`), naming
    them, why, and what to do; None for any other picture. Its details are a size cap's (:func:`size_problem`):
    ``cannot``, backend -> why; ``readers`` None, as which backends decode the format is the registry's."""
    otherwise = read_otherwise(header)
    if otherwise is None:
        return None
    why = f"{otherwise.what} ({otherwise.would})"
    return Problem(ProblemKind.UNDECODABLE, path, otherwise.said(otherwise.backends), partner,
                   {"cannot": dict.fromkeys(otherwise.backends, why), "readers": None})


def _header_problems(image: str, mask: str, headers: dict[str, Header]) -> list[Problem]:
    """What the headers of a pair say whatever reads it: sizes that differ, a palette too short."""
    problems = []
    if len(headers) == 2:
        im, mk = headers[image], headers[mask]
        if (im.width, im.height) != (mk.width, mk.height):
            problems.append(Problem(ProblemKind.SIZE_MISMATCH, mask, f"mask is {mk.width}x{mk.height} but its image is "
                                                           f"{im.width}x{im.height}", image))
    if mask in headers and headers[mask].past_palette is not None:
        problems.append(_short_palette(mask, image, headers[mask]))
    return problems


def _short_palette(mask, image, header: Header) -> Problem:
    colours = len(header.palette) // 3
    return Problem(ProblemKind.SHORT_PALETTE, mask, f"its pixels use palette index {header.past_palette}, past the end "
                   f"of its palette ({colours} colours): every decoder reads such pixels as black (0, 0, 0), not as "
                   "their label. Save the mask with a whole palette (VOC's has 256 colours; 255 marks the borders) "
                   "or as 8-bit class ids", image)


def _undecodable(path, partner, fmt: str, expect: Expect) -> Problem:
    able = [name for name, formats in expect.decoders.items() if fmt in formats]
    return Problem(ProblemKind.UNDECODABLE, path, f"{fmt} cannot be decoded by backend={expect.backend!r}; "
                                        f"{', '.join(able) or 'no backend'} can, or convert the file", partner)


def mask_problem(header: Header, classes: ClassMap, depth: int) -> tuple[ProblemKind, str] | None:
    """Why the class map cannot read a mask with this header, as (kind, message); None when it can."""
    if header.format in LOSSY_MASK_FORMATS:  # (folders never pair such masks: the pairing names them)
        return ProblemKind.LOSSY_MASK, (f"mask stored as {header.format}, a lossy format: its edges carry values of "
                                        "no class, which the decoders round differently (the backends would give "
                                        "different labels); store masks as PNG")
    if classes.palette_masks is not None:
        if header.mode != "P":
            return ProblemKind.MASK_MODE, (f"a {header.mode} image, but this class map ({classes.source}) reads the "
                                           "indices of palette PNGs")
        expected = tuple(int(v) for v in classes.palette_masks.reshape(-1))
        if header.palette[:len(expected)] != expected[:len(header.palette)]:
            return ProblemKind.MASK_PALETTE, ("its palette differs from the one of the class map "
                                              f"({classes.source}): its indices cannot be read through its colours; "
                                              "convert the masks to one palette, or to 8-bit ids")
        return None
    if classes.kind is not MaskKind.ID:
        return None
    if classes.mask_channel is not None:
        if header.mode in SIXTEEN_BIT_MODES:
            return ProblemKind.MASK_MODE, (f"a 16-bit {header.mode} image, but this class map ({classes.source}) reads "
                                           f"the ids in channel {classes.mask_channel} of 8-bit colour masks")
        return None
    if header.mode == "P":
        return ProblemKind.PALETTE_MASK, ("this mask is a palette PNG, which an id map cannot read: the decoders "
                                          "expand a palette into colours. If its indices are the labels, pass the "
                                          "class count (classes=N, --classes N), which reads them through the "
                                          "palette, or ClassMap.from_palette_indices(palette, N)")
    if header.mode not in SINGLE_CHANNEL_MODES:
        return ProblemKind.MASK_MODE, (f"a {header.mode} image, but an id map ({classes.source}) needs "
                                       "single-channel masks; colour masks need a colour map (class_dict.csv: "
                                       "name,r,g,b)")
    bits = 16 if header.mode in SIXTEEN_BIT_MODES else 8
    if bits != depth:
        return ProblemKind.MASK_DEPTH, (f"a {bits}-bit mask in a dataset of {depth}-bit masks (the depth of its "
                                        "first mask): every mask must have the same depth")
    return None


def grey_ids_problem(mask, image, header: Header, classes: ClassMap, blob: bytes | None = None) -> Problem | None:
    """An 8-bit single-channel mask under a colour table with colours that are not grey, whose grey levels
    include some that are no colour of the table: class ids, most likely (SegNet's CamVid beside a
    class_dict.csv), which would load as ignored, and id 0 as the class drawn in black. Its pixels are
    read (only such a mask's). A grey mask whose levels are all grey colours of the table (a mask of Void
    alone, one an optimiser stored as grey) is read as any other; so is any grey mask under a table of
    grey colours only."""
    if classes.kind is not MaskKind.RGB or header.mode not in ("L", "1"):
        return None
    colours = classes.colors if classes.ignore_colors is None else np.concatenate([classes.colors,
                                                                                 classes.ignore_colors])
    grey = (colours == colours[:, :1]).all(axis=1)
    if grey.all():
        return None
    greys = set(colours[grey, 0].tolist())
    with open_image(io.BytesIO(blob) if blob is not None else mask) as im:
        levels = [int(v) for v in np.unique(np.asarray(im.convert("L"))) if int(v) not in greys]
    if not levels:
        return None
    shown = ", ".join(map(str, levels[:8])) + (", ..." if len(levels) > 8 else "")
    return Problem(ProblemKind.MASK_MODE, mask, f"a single-channel ({header.mode}) mask under a colour table "
                   f"({classes.source}) whose grey levels {shown} are no colour of it: are its values class ids? "
                   "They would load as ignored. Pass the class count (classes=N, --classes N) or an id table to "
                   "read them as ids, or store the masks in the table's colours", image)


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


def check_pair(image, mask, classes: ClassMap, min_side: int = MIN_SIDE, mask_depth: int | None = None,
               cached_masks: bool = False) -> list[Problem]:
    """Every check of one pair: the quick ones, then a full decode of both files and the mask's values.
    ``mask_depth``: the dataset's (default: this mask's own). ``image`` and ``mask``: files, or a
    record's pictures (:class:`~daliloader.tfrecord.RecordPart`). ``cached_masks``: the loaders read the
    masks from the mask cache (OpenCV decodes them there): a mask that some backend's decoders would read
    otherwise is not said to be (``read_otherwise``)."""
    if mask_depth is None:
        mask_depth = data_mask_depth(mask)
    problems, headers = quick_check(image, mask, Expect(classes, mask_depth))
    problems = [replace(p, message=f"{p.message}. Its indices: {palette_indices(mask)}")
                if p.path == str(mask) and p.kind is ProblemKind.PALETTE_MASK else p for p in problems]
    if any(p.path == str(mask) and p.kind in MASK_KINDS for p in problems):
        headers.pop(mask, None)  # the map cannot read it: its values say nothing more
    problems += _decode_problems(image, mask, headers, cached_masks)
    if image in headers and min(headers[image].height, headers[image].width) < min_side:
        problems.append(Problem(ProblemKind.TINY, image, f"tiny image: {headers[image].width}x{headers[image].height} "
                                                         f"pixels (a side below {min_side})", mask))
    if mask in headers:
        problems += _mask_problems(mask, image, headers[mask], classes)
    return problems


def _mask_problems(mask, image, header: Header, classes: ClassMap) -> list[Problem]:
    """What a mask's values say: values of no class, stray palette indices, a binary mask whose foreground
    is the ignore index (a lossy format is :func:`mask_problem`'s)."""
    problems = []
    m = mask_pixels(np.frombuffer(read_part(mask), np.uint8), classes)
    if m is None:
        problems.append(Problem(ProblemKind.CORRUPT, mask, "corrupt: the decoder rejects the data", image))
    else:
        unknown = classes.unknown_values(m)
        if unknown and header.mode == "P" and classes.palette_masks is None:
            problems.append(_palette_read_as_colours(mask, image, classes))
        elif unknown:
            problems.append(_unknown_problem(mask, image, unknown, m.shape[0] * m.shape[1], classes))
        if classes.palette_masks is not None:
            problems += _stray_indices(mask, image, classes)
        elif _looks_binary(m, classes):
            ignore = classes.ignore_index
            problems.append(Problem(ProblemKind.BINARY_MASK, mask, f"holds only the ids 0 and {ignore}, and {ignore} "
                                    f"is the ignore index: a binary mask with foreground {ignore}? Its foreground "
                                    f"would load as ignored; pass {remap_advice({0: 0, ignore: 1})}", image))
    return problems


def strict_decode(path) -> str | None:
    """What :func:`decode_problem` finds wrong with a file's data, in words, or None."""
    found = decode_problem(path)
    return found[1] if found else None


# ---------------------------------------------------------------- full decodes, as strict as the loaders' decoders
def _decode_problems(image, mask, headers: dict[str, Header], cached_masks: bool = False) -> list[Problem]:
    """The full decodes of :func:`check_pair`: pictures too large for some backend's decoders
    (:func:`size_problem`), and data that a decoder refuses or only warns about (:func:`decode_problem`).
    A file whose data is damaged, and a mask that OpenCV cannot decode here (for its size), leave
    ``headers``: nothing more is read of them."""
    problems = []
    for path, partner in ((image, mask), (mask, image)):
        if path not in headers:
            continue
        too_large = size_problem(path, partner, headers[path])
        otherwise = None if path == mask and cached_masks else read_otherwise_problem(path, partner, headers[path])
        problems += [p for p in (too_large, otherwise) if p]
        found = decode_problem(path, headers[path])
        if found:
            problems.append(Problem(found[0], path, found[1], partner))
        if found or (path == mask and opencv_limit(headers[path])):
            headers.pop(path)
    return problems


def decode_problem(path, header: Header | None = None) -> tuple[ProblemKind, str] | None:
    """Decode a file whole, at least as strictly as each loader's decoders: what is wrong with its data (a
    kind, and a message without the file's name), or None. ``header``: the file's, where read already.

    JPEGs go through libjpeg-turbo in strict mode (simplejpeg), which turns each of libjpeg's warnings
    ("Corrupt JPEG data: premature end of data segment", a bad Huffman code, ...) into an error: OpenCV,
    DALI and TensorFlow only warn there, and decode garbage pixels. Pillow is not enough there, as its
    decoder passes over part of them. PNGs go through libpng (by OpenCV), the library OpenCV, DALI's CPU
    decoder and TensorFlow decode them with, which refuses what Pillow lets pass: an image-data chunk
    (IDAT) whose checksum is wrong, compressed data that stops before the last row while the file keeps
    its end marker; :func:`png_damage` says what is wrong then. Other formats go through Pillow, then
    OpenCV. A picture too large for OpenCV in this process (:func:`opencv_limit`) is decoded by Pillow
    alone."""
    try:
        with open_part(path) as fh:
            data = fh.read()
    except OSError as e:
        return ProblemKind.MISSING, f"cannot read it ({e.strerror or e})"
    if sniff(data[:4]) == "JPEG":
        return _strict_jpeg(data)
    try:
        header = header or _pillow_header(data)
    except (OSError, ValueError, SyntaxError) as e:
        return ProblemKind.CORRUPT, f"corrupt data: {e}; {_FIX}"
    if opencv_limit(header):
        return _pillow_problem(data, header.format)
    if header.format == "PNG":
        return None if _opencv_decodes(data) else png_damage(data)
    if not _opencv_decodes(data):
        return ProblemKind.CORRUPT, f"corrupt {header.format} data: OpenCV's decoder refuses it; {_FIX}"
    return _pillow_problem(data, header.format)


def _pillow_header(data: bytes) -> Header:
    with open_image(io.BytesIO(data)) as im:
        return Header(im.format, im.size[0], im.size[1], im.mode)


def _strict_jpeg(data: bytes) -> tuple[ProblemKind, str] | None:
    """libjpeg-turbo in strict mode; fast DCT and upsampling, as the errors come from the entropy decoding,
    which both variants run whole."""
    import simplejpeg

    try:
        simplejpeg.decode_jpeg(data, strict=True, fastdct=True, fastupsample=True)
    except ValueError as e:
        return ProblemKind.CORRUPT, (f"corrupt data: {e} (the decoders the loaders use would fill the damaged part "
                                     "with garbage and only warn)")
    return None


def _pillow_problem(data: bytes, fmt: str) -> tuple[ProblemKind, str] | None:
    """Pillow's full decode: what it refuses, or None."""
    try:
        with open_image(io.BytesIO(data)) as im:
            im.load()
    except (OSError, ValueError, SyntaxError) as e:
        return ProblemKind.CORRUPT, f"corrupt {fmt} data: {e}; {_FIX}"
    return None


def _opencv_decodes(data: bytes) -> bool:
    """Whether OpenCV decodes the data whole, as it is stored."""
    try:
        return decode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED) is not None
    except cv2.error:
        return False


#: The colour types of PNG (IHDR), and their samples per pixel.
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
#: The Adam7 passes of an interlaced PNG: first column, first row, column step, row step.
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
#: The PNG chunks a decoder cannot do without (a checksum error in one is an error, elsewhere a warning).
_CRITICAL_CHUNKS = (b"IHDR", b"PLTE", b"IDAT", b"IEND")
#: What to do with a damaged file.
_FIX = "copy or download it again, or remove the pair"
#: What every PNG problem found here ends with.
_PNG_FIX = f"Every loader's decoder (libpng) refuses it: {_FIX}"


def png_damage(data: bytes) -> tuple[ProblemKind, str]:
    """Why libpng refuses a PNG, read from its chunks: a chunk cut off by the end of the file, a critical
    chunk whose checksum (CRC) is wrong, compressed image data that is damaged, or that stops before the
    last row (while the file may still end with its end marker, IEND); else a corrupt file."""
    return png_chunk_damage(data) or _png_data_damage(b"".join(
        body for _, kind, body, _ in _png_chunks(data) if kind == b"IDAT"), _png_ihdr(data))


def png_chunk_damage(data: bytes) -> tuple[ProblemKind, str] | None:
    """Why libpng refuses a PNG, from its chunks' framing and checksums alone (nothing inflated: a pass at
    the speed of reading): a chunk cut off by the end of the file, or a critical chunk whose checksum (CRC)
    is wrong; None where every chunk is whole and sound."""
    for pos, kind, body, crc in _png_chunks(data):
        name = kind.decode("latin-1")
        if crc is None:
            return ProblemKind.TRUNCATED, (f"truncated PNG: its {name} chunk at byte {pos} runs past the end of the "
                                           f"file ({len(data)} bytes). {_PNG_FIX}")
        if kind in _CRITICAL_CHUNKS and zlib.crc32(kind + body) != crc:
            return ProblemKind.CORRUPT, (f"corrupt PNG: the checksum (CRC) of its {name} chunk at byte {pos} is "
                                         f"wrong: damaged bytes. {_PNG_FIX}")
    return None


def _png_ihdr(data: bytes) -> bytes:
    """A PNG's header chunk (IHDR) body; empty where it has none."""
    return next((body for _, kind, body, _ in _png_chunks(data) if kind == b"IHDR"), b"")


def _png_chunks(data: bytes):
    """A PNG's chunks up to IEND: ``(offset, type, body, the CRC stored)``, the CRC None for a chunk cut off
    by the end of the data (the last one yielded)."""
    pos = 8
    while pos + 8 <= len(data):
        length, kind = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4:pos + 8]
        end = pos + 8 + length
        crc = int.from_bytes(data[end:end + 4], "big") if end + 4 <= len(data) else None
        yield pos, kind, data[pos + 8:end], crc
        if crc is None or kind == b"IEND":
            return
        pos = end + 4


def _png_data_damage(compressed: bytes, ihdr: bytes) -> tuple[ProblemKind, str]:
    """What is wrong with a PNG's compressed image data (its IDAT chunks joined), whose header is ``ihdr``."""
    stream = zlib.decompressobj()
    inflated = 0
    try:
        while compressed:  # counted, not kept: a large picture inflates to gigabytes
            inflated += len(stream.decompress(compressed, 1 << 20))
            compressed = stream.unconsumed_tail
    except zlib.error as e:
        return ProblemKind.CORRUPT, f"corrupt PNG: its compressed image data is damaged ({e}). {_PNG_FIX}"
    expected, rows = _png_data_size(ihdr)
    if not stream.eof or inflated < expected:
        held = (f"{inflated * rows // expected} of its {rows} rows" if expected and rows
                else f"{inflated} of its {expected} bytes")
        ends = "" if stream.eof else ", and the compressed stream does not end"
        return ProblemKind.TRUNCATED, (f"truncated PNG: its compressed image data (IDAT) holds {held}{ends}, though "
                                       "the file ends with its end marker (cut short, then closed by a tool?). "
                                       + _PNG_FIX)
    return ProblemKind.CORRUPT, f"corrupt PNG: its data is damaged. {_PNG_FIX}"


def _png_data_size(ihdr: bytes) -> tuple[int, int]:
    """The bytes a PNG's image data inflates to (each row with its filter byte), and its rows (0 for an
    interlaced one, whose passes are not whole rows); (0, 0) for a damaged header."""
    if len(ihdr) != 13 or ihdr[9] not in _PNG_SAMPLES:
        return 0, 0
    width, height = int.from_bytes(ihdr[:4], "big"), int.from_bytes(ihdr[4:8], "big")
    bits = ihdr[8] * _PNG_SAMPLES[ihdr[9]]

    def size(w: int, h: int) -> int:
        return h * (1 + (w * bits + 7) // 8) if w and h else 0

    if ihdr[12] == 0:
        return size(width, height), height
    return sum(size(-(-(width - x) // dx), -(-(height - y) // dy)) for x, y, dx, dy in _ADAM7), 0


# ---------------------------------------------------------------- pictures too large for a decoder
#: The caps the decoders put on a picture's size, by their sources (TensorFlow's ``jpeg_mem.cc`` and
#: ``decode_image_op.cc``, OpenCV's ``loadsave.cpp``); docs/bad-input.md has what each does at them.
#: TensorFlow refuses a JPEG whose width x height x components (of the file) reach 2^29, cropping or not.
TF_JPEG_SAMPLES = 1 << 29
#: TensorFlow refuses a PNG of 2^29 pixels or more, or with a side of 2^27 or more.
TF_PNG_PIXELS, TF_PNG_SIDE = 1 << 29, 1 << 27
#: TensorFlow refuses a BMP of (2^31 - 1) // 8 pixels or more ("must be less than 2^30").
TF_BMP_PIXELS = (2 ** 31 - 1) // 8
#: OpenCV's defaults, which the environment variables OPENCV_IO_MAX_IMAGE_PIXELS, OPENCV_IO_MAX_IMAGE_WIDTH
#: and OPENCV_IO_MAX_IMAGE_HEIGHT replace (read when a process first decodes; DALI's copy of OpenCV too).
OPENCV_PIXELS, OPENCV_SIDE = 1 << 30, 1 << 20
#: A JPEG's components, by Pillow's mode.
_JPEG_COMPONENTS = {"L": 1, "RGB": 3, "YCbCr": 3, "CMYK": 4}


def _setting(name: str, default: int) -> int:
    """An OpenCV limit from the environment as it is now, parsed as OpenCV parses it (digits, then
    nothing, KB or MB); else the default. OpenCV reads it once, when a process first decodes."""
    found = re.fullmatch(r"(\d+)(|[KkMm][Bb])", os.environ.get(name, "").strip())
    if not found:
        return default
    return int(found[1]) << {"": 0, "k": 10, "m": 20}[found[2][:1].lower()]


def opencv_limit(header: Header) -> str | None:
    """Why OpenCV will not decode a picture of this size, or None: more pixels than OPENCV_IO_MAX_IMAGE_PIXELS,
    or a side over OPENCV_IO_MAX_IMAGE_WIDTH or _HEIGHT (OpenCV's defaults where they are not set)."""
    pixels = _setting("OPENCV_IO_MAX_IMAGE_PIXELS", OPENCV_PIXELS)
    width = _setting("OPENCV_IO_MAX_IMAGE_WIDTH", OPENCV_SIDE)
    height = _setting("OPENCV_IO_MAX_IMAGE_HEIGHT", OPENCV_SIDE)
    if header.width * header.height > pixels:
        return (f"OpenCV's limit is {pixels} pixels, and this one has {header.width * header.height}; the "
                "environment variable OPENCV_IO_MAX_IMAGE_PIXELS, set before the process starts, raises it")
    if header.width > width or header.height > height:
        return (f"OpenCV's limit is {width}x{height}; the environment variables OPENCV_IO_MAX_IMAGE_WIDTH and "
                "OPENCV_IO_MAX_IMAGE_HEIGHT, set before the process starts, raise it")
    return None


def tensorflow_limit(header: Header) -> str | None:
    """Why TensorFlow's decoders (tf.io.decode_image, decode_jpeg, decode_and_crop_jpeg) will not decode a
    picture of this size, or None. Their caps are fixed (no setting raises them)."""
    w, h = header.width, header.height
    if header.format == "JPEG":
        samples = w * h * _JPEG_COMPONENTS.get(header.mode, 3)
        if samples >= TF_JPEG_SAMPLES:
            return (f"TensorFlow's JPEG decoder refuses width x height x components of 2^29 ({TF_JPEG_SAMPLES}) or "
                    f"more, even for a crop, and this one has {samples}")
    if header.format == "PNG" and (w * h >= TF_PNG_PIXELS or max(w, h) >= TF_PNG_SIDE):
        return f"TensorFlow's PNG decoder refuses 2^29 ({TF_PNG_PIXELS}) pixels or more, or a side of 2^27"
    if header.format == "BMP" and w * h >= TF_BMP_PIXELS:
        return f"TensorFlow's BMP decoder refuses {TF_BMP_PIXELS} pixels or more"
    return None


def dali_limit(header: Header, on_gpu: bool = False) -> str | None:
    """Why DALI's decoders (on the CPU, or ``on_gpu``) will not decode a picture of this size, or None.

    DALI decodes JPEGs with libjpeg-turbo, under TensorFlow's cap (:func:`tensorflow_limit`: the same
    code); a JPEG over it goes to DALI's own copy of OpenCV, whole even where a window is asked for, so
    OpenCV's limit applies to it, as to PNG, WebP and BMP, which that OpenCV decodes. TIFF goes to libtiff,
    without a cap. On a GPU, nvJPEG decodes JPEGs (no cap known); the other formats decode on the CPU."""
    if header.format == "TIFF" or (header.format == "JPEG" and (on_gpu or not tensorflow_limit(header))):
        return None
    reason = opencv_limit(header)
    return reason and f"DALI decodes it with its own copy of OpenCV, whose limit is OpenCV's: {reason}"


#: Each backend's size limit (the registry's names: :data:`daliloader.backends.BACKENDS`).
SIZE_LIMITS = {"dali-gpu": lambda header: dali_limit(header, on_gpu=True), "dali-cpu": dali_limit,
               "tfdata": tensorflow_limit, "opencv": opencv_limit}


def backend_limits(header: Header, backend: str) -> str | None:
    """Why ``backend`` cannot decode a picture with this header for its size alone (a cap of its
    decoders), as a sentence naming the backend and the cap; None where it can (or is not known)."""
    limit = SIZE_LIMITS.get(backend)
    reason = limit(header) if limit else None
    if not reason:
        return None
    return f"{backend} cannot decode a {header.format} of {header.width}x{header.height} ({reason})"


def size_readers(header: Header, decoders: dict | None = None) -> list[str]:
    """The backends whose decoders read a picture of this size; of them, with ``decoders`` (backend -> the
    formats it decodes, as :class:`Expect` has it), those that read its format."""
    return [name for name in SIZE_LIMITS if not backend_limits(header, name)
            and (decoders is None or header.format in decoders.get(name, ()))]


def size_problem(path, partner, header: Header, backend: str = "", decoders: dict | None = None) -> Problem | None:
    """A picture too large for the decoders of ``backend`` (of any backend, where none is given): an
    ``ProblemKind.UNDECODABLE`` problem that says why and which backends read it
    (:func:`size_readers`; ``details``: ``cannot``, backend -> why, and ``readers``); None where none is."""
    names = [backend] if backend else list(SIZE_LIMITS)
    cannot = {name: why for name in names if (why := backend_limits(header, name))}
    if not cannot:
        return None
    readers = size_readers(header, decoders)
    if readers:
        fix = (f"{_listed(readers)} {'reads' if len(readers) == 1 else 'read'} it: load it with "
               f"{'that backend' if len(readers) == 1 else 'one of them'}, or make the picture smaller")
    else:
        fix = "no backend reads it: make the picture smaller"
    return Problem(ProblemKind.UNDECODABLE, path, "; ".join(cannot.values()) + f"; {fix}", partner,
                   {"cannot": cannot, "readers": readers})


def backend_size_problems(image, mask, headers: dict[str, Header], expect: Expect) -> list[Problem]:
    """The pictures of a pair (of those whose ``headers`` were read) too large for the decoders of
    ``expect.backend``, naming the backends that read them (:func:`size_problem`; those that read their
    format, with ``expect.decoders``); none without a backend. What a loader's vetting refuses, before
    any decoder fails on them."""
    if not expect.backend:
        return []
    found = [size_problem(path, partner, headers[path], expect.backend, expect.decoders)
             for path, partner in ((image, mask), (mask, image)) if path in headers]
    return [p for p in found if p]


def _listed(names: list[str]) -> str:
    """Names in words: "a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _palette_read_as_colours(mask: str, image: str, classes: ClassMap) -> Problem:
    """A palette PNG read as colours by a colour map whose colours it does not use: name its indices."""
    return Problem(ProblemKind.PALETTE_MASK, mask,
                   f"this mask is a palette PNG; its indices are {palette_indices(mask)}, and its colours are "
                   f"not those of the class map {classes.source}. If the indices are the "
                   "labels, read them with ClassMap.from_palette_indices(palette, num_classes) "
                   "(SegmentationData.from_folder does so for Pascal VOC)", image)


def _looks_binary(mask: np.ndarray, classes: ClassMap) -> bool:
    """An id mask of at most two classes that holds only 0 and the ignore index (255): binary masks
    store their foreground as 255."""
    ignore = classes.ignore_index
    return (classes.kind is MaskKind.ID and classes.num_classes <= 2 and classes.id_to_class.get(ignore) == ignore
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
    return [Problem(ProblemKind.UNKNOWN_VALUES, mask,
                    f"palette indices that are not classes (0-{n - 1}) nor the ignore index "
                    f"{classes.ignore_index}: {shown}; they load as ignore_index unless noted",
                    image, {"values": [[i, c] for i, c in stray]})]


def _unknown_problem(mask, image, unknown, total, classes: ClassMap) -> Problem:
    what = ("colour" if classes.kind is MaskKind.RGB else "id") + ("s" if len(unknown) > 1 else "")
    pixels = sum(c for _, c in unknown)
    shown = ", ".join(f"{v} x{c}" for v, c in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
    return Problem(ProblemKind.UNKNOWN_VALUES, mask,
                   f"{pixels} of {total} pixels ({100 * pixels / total:.2f}%) have {len(unknown)} {what} not in the "
                   f"class map {classes.source or ''}: {shown}; they load as ignore_index={classes.ignore_index}",
                   image, {"values": [[list(v) if isinstance(v, tuple) else v, c] for v, c in unknown],
                           "pixels": pixels, "total": total})


def gpu_mask_problems(path: str, image: Header, partner: str) -> list[Problem]:
    """The GPU form of a prepared mask (which dali-gpu inflates on the GPU, where a damaged header would
    fail without a file name): its header read, and its size compared with its image's."""
    try:
        with open(path, "rb") as fh:
            height, width = lz4_mask_size(fh.read(LZ4_HEADER), path)
    except OSError as e:
        return [Problem(ProblemKind.MISSING, path, f"cannot read it ({e.strerror or e})", partner)]
    except DataError as e:  # its message starts with the file's name, which the Problem gives
        return [Problem(ProblemKind.CORRUPT, path, str(e).removeprefix(f"{path}: "), partner)]
    if (width, height) != (image.width, image.height):
        return [Problem(ProblemKind.SIZE_MISMATCH, path, f"its header gives {width}x{height} but its image is "
                                               f"{image.width}x{image.height}: the prepared copy is damaged; run "
                                               "`daliloader verify` on it", partner)]
    return []


