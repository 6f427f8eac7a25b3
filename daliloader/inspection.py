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
from dataclasses import dataclass, field, replace
from enum import Enum

import cv2
import numpy as np

from .classes import ClassMap, MaskKind
from .codecs import decode, mask_pixels
from .data import SINGLE_CHANNEL_MODES, SIXTEEN_BIT_MODES, SegmentationData
from .data import mask_depth as data_mask_depth
from .errors import DataError
from .manifest import LZ4_HEADER, lz4_mask_size
from .parts import open_image, open_part, read_part, sniff
from .tfrecord import RecordFault, RecordPart, RecordProblem


class ProblemKind(str, Enum):
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
    PALETTE_MASK = "palette_mask"  # a palette PNG where the map reads ids or colours
    MASK_DEPTH = "mask_depth"  # 8 and 16 bits in one dataset
    UNDECODABLE = "undecodable"  # a format this backend does not decode
    BROKEN_LINK = "broken_link"
    UNREADABLE = "unreadable"  # a folder that cannot be listed
    CHANGED = "changed"  # a TFRecord file changed since it was indexed
    CLASS_TABLE = "class_table"  # the masks are in the other form of the published table given (forms.py)

    def __str__(self) -> str:
        return self.value


#: Problems that mean the class map cannot read a mask at all.
MASK_KINDS = (ProblemKind.MASK_MODE, ProblemKind.MASK_PALETTE, ProblemKind.PALETTE_MASK, ProblemKind.MASK_DEPTH)

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
    def of(cls, data: SegmentationData, backend: str = "", decoders: dict | None = None) -> Expect:
        return cls(data.classes, data.mask_depth, backend, decoders)


class FileProblem(Exception):
    """What :func:`peek` finds wrong with a file: a kind and a message (without the file's name)."""

    def __init__(self, kind: ProblemKind, message: str):
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
            return Header(im.format, im.size[0], im.size[1], im.mode, palette)
    except UnidentifiedImageError:
        with _opened(path, blob) as fh:
            head = fh.read(12)
        fmt = sniff(head)
        if fmt is not None:
            raise FileProblem(ProblemKind.CORRUPT, f"corrupt: starts like a {fmt} but its header is damaged") from None
        raise FileProblem(ProblemKind.UNSUPPORTED, f"not an image in a known format (content starts with {head!r}); "
                                                   f"supported: {', '.join(SUPPORTED_FORMATS)}") from None
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
                 RecordFault.UNREADABLE: ProblemKind.MISSING}


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


def quick_problems(image: str, mask: str, expect: Expect | None = None) -> list[Problem]:
    """The cheap checks of one pair (see :func:`~daliloader.inspection.peek`), as problems."""
    return quick_check(image, mask, expect)[0]


def quick_check(image: str, mask: str, expect: Expect | None = None) -> tuple[list[Problem], dict[str, Header]]:
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
            problems.append(Problem(ProblemKind.SIZE_MISMATCH, mask, f"mask is {mk.width}x{mk.height} but its image is "
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
    return Problem(ProblemKind.UNDECODABLE, path, f"{fmt} cannot be decoded by backend={expect.backend!r}; "
                                        f"{', '.join(able) or 'no backend'} can, or convert the file", partner)


def mask_problem(header: Header, classes: ClassMap, depth: int) -> tuple[ProblemKind, str] | None:
    """Why the class map cannot read a mask with this header, as (kind, message); None when it can."""
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
    problems, headers = quick_check(image, mask, Expect(classes, mask_depth))
    problems = [replace(p, message=f"{p.message}. Its indices: {palette_indices(mask)}")
                if p.path == str(mask) and p.kind is ProblemKind.PALETTE_MASK else p for p in problems]
    if any(p.path == str(mask) and p.kind in MASK_KINDS for p in problems):
        headers.pop(mask, None)  # the map cannot read it: its values say nothing more
    for path, partner in ((image, mask), (mask, image)):
        damage = strict_decode(path) if path in headers else None
        if damage:
            problems.append(Problem(ProblemKind.CORRUPT, path, f"corrupt data: {damage}", partner))
            headers.pop(path)
    if image in headers and min(headers[image].height, headers[image].width) < min_side:
        problems.append(Problem(ProblemKind.TINY, image, f"tiny image: {headers[image].width}x{headers[image].height} "
                                                         f"pixels (a side below {min_side})", mask))
    if mask in headers:
        problems += _mask_problems(mask, image, headers[mask], classes)
    return problems


def _mask_problems(mask, image, header: Header, classes: ClassMap) -> list[Problem]:
    """What a mask's values and format say: values of no class, stray palette indices, a binary mask whose
    foreground is the ignore index, a lossy format."""
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
                                    f"would load as ignored; pass classes={{0: 0, {ignore}: 1}}", image))
    if header.format in LOSSY_MASK_FORMATS:
        problems.append(Problem(ProblemKind.LOSSY_MASK, mask, f"mask stored as {header.format}, a lossy format: its "
                                                              "edges carry values of no class; store masks as PNG",
                                image))
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


