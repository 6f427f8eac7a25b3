"""Where a sample's image or mask is, and reading it whichever it is: a file (its path, a ``str``), a
picture inside a TFRecord record (a :class:`~daliloader.tfrecord.RecordPart`) or an object in a bucket
(a :class:`~daliloader.buckets.ObjectPart`).

``SegmentationData.images[i]`` and ``masks[i]`` hold one or the other; everything that reads a pair's
bytes outside a DALI or tf.data graph (the checks, the OpenCV backend, ``prepare``, ``predict``, class
detection) reads them through these functions, so it reads files and records alike. This is the one
module that tells the kinds apart (``tests/test_layers.py`` checks that no other asks
``isinstance(..., RecordPart)``): a new kind of part is added here. Records and objects are "read
checked" (:func:`read_checked`): read whole, with a check that they are what the dataset's load found.
"""

from __future__ import annotations

import contextlib
import io
import threading
from pathlib import Path

from .buckets import ObjectPart, is_url
from .tfrecord import RecordPart, file_stamp, read_pair

#: Where a sample's image or mask is: a file's path, a feature of a TFRecord record, an object in a bucket.
Part = str | RecordPart | ObjectPart


def read_part(part: Part) -> bytes:
    """The bytes of a file (a path), of a record's picture (a RecordPart) or of an object (an ObjectPart)."""
    if isinstance(part, (RecordPart, ObjectPart)):
        return part.read()
    with open(part, "rb") as fh:
        return fh.read()


def open_part(part: Part):
    """A binary file object to read a part from; the caller closes it."""
    return io.BytesIO(part.read()) if isinstance(part, (RecordPart, ObjectPart)) else open(part, "rb")


def in_record(part: Part) -> bool:
    """Whether a part is a picture inside a TFRecord record (read with its pair, checked against the file's
    index) rather than a file read by its path."""
    return isinstance(part, RecordPart)


def read_checked(part: Part) -> bool:
    """Whether a part is read whole and checked against what the load found (a record against its file's
    index, an object against its listed ETag and size), so that its bytes, once vetted, need no vetting
    again: records and objects, not files."""
    return isinstance(part, (RecordPart, ObjectPart))


def in_bucket(part: Part) -> bool:
    """Whether a part is read from a bucket: an object, or a record of a TFRecord object."""
    return isinstance(part, ObjectPart) or (isinstance(part, RecordPart) and is_url(part.file))


def read_checked_pair(image: Part, mask: Part) -> tuple[bytes, bytes]:
    """The bytes of a pair of records (one read: :func:`~daliloader.tfrecord.read_pair`) or objects (one
    fetch each; the mask may be a file of the mask cache); a RecordProblem or a StorageError where one is
    not as loaded."""
    if isinstance(image, RecordPart):
        return read_pair(image, mask)
    return read_part(image), read_part(mask)


def part_stamp(part: Part) -> tuple:
    """What tells a version of a file or an object from another: a file's stat stamp
    (:func:`~daliloader.tfrecord.file_stamp`), an object's size and ETag as listed (an object replaced since
    is refused when it is read: :meth:`~daliloader.buckets.ObjectPart.read`), a record's file's when it was
    indexed."""
    return part.stamp if isinstance(part, (ObjectPart, RecordPart)) else file_stamp(part)


def as_part(value) -> Part:
    """A pair's file as SegmentationData keeps it: a path as a string, a record's picture or an object as
    they are."""
    return value if isinstance(value, (RecordPart, ObjectPart)) else str(value)


def part_name(part: Part) -> str | None:
    """A part's file name: a file's or an object's own; a record's file-name feature (None where it has
    none)."""
    return part.name if isinstance(part, (RecordPart, ObjectPart)) else Path(part).name


def record_place(part: Part) -> str | None:
    """Where a record is, ``<file name>-<record number>``, which names a record that has no name of its own
    and tells apart records of one name; None for a file."""
    return f"{Path(part.file).name}-{part.record:06d}" if isinstance(part, RecordPart) else None


def part_file(part: Part) -> str:
    """The file (or object URL) that holds a part."""
    return part.file if isinstance(part, RecordPart) else str(part)


def part_stem(part: Part) -> str:
    """A part's name without folder and extension: a file's stem; a record's file-name feature's stem, or
    ``<file name>-<record number>`` for a record without one."""
    if not isinstance(part, RecordPart):
        return Path(str(part)).stem
    return Path(part.name).stem if part.name else record_place(part)


#: The first bytes of each picture format the loaders decode, and the file extension each is written with.
MAGIC = {"JPEG": (b"\xff\xd8\xff",), "PNG": (b"\x89PNG",), "BMP": (b"BM",), "TIFF": (b"II*\x00", b"MM\x00*"),
         "WEBP": (b"RIFF",)}
SUFFIXES = {"JPEG": ".jpg", "PNG": ".png", "BMP": ".bmp", "TIFF": ".tif", "WEBP": ".webp"}
#: The format a file's name says it holds, by its suffix.
FORMAT_OF_SUFFIX = {**{suffix: fmt for fmt, suffix in SUFFIXES.items()}, ".jpeg": "JPEG", ".tiff": "TIFF"}


def sniff(head: bytes) -> str | None:
    """The format whose first bytes ``head`` starts with (:data:`MAGIC`), or None."""
    return next((fmt for fmt, magics in MAGIC.items() if head.startswith(magics)), None)


def image_suffix(part: Part, data: bytes | None = None) -> str:
    """The file extension of a picture: a file's own (lower case); a record's from its first bytes
    (``data``, when read already)."""
    if not isinstance(part, RecordPart):
        return Path(str(part)).suffix.lower()
    return SUFFIXES.get(sniff((data if data is not None else part.read())[:4]), ".bin")


class _PixelLimitLifted:
    """Pillow's pixel limit, lifted while any :func:`open_image` runs and put back by the last one out.

    Only the count is kept under the lock, never a call that allocates: a lock held while Pillow opens a
    picture deadlocked with garbage collection running on a TensorFlow thread (the collection frees a
    tf.data iterator, whose destructor waits for in-flight calls that wait for the lock)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._open = 0
        self._limit = None

    def __enter__(self):
        from PIL import Image

        with self._lock:
            if self._open == 0:
                self._limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
            self._open += 1

    def __exit__(self, *exc):
        from PIL import Image

        with self._lock:
            self._open -= 1
            if self._open == 0:
                Image.MAX_IMAGE_PIXELS = self._limit


_NO_PIXEL_LIMIT = _PixelLimitLifted()

#: Pillow's modes of single-channel images, and of 16-bit ones among them. A 1-bit image ("1") is
#: read by every decoder as 0 and 255.
SINGLE_CHANNEL_MODES = ("L", "1", "I;16", "I;16B", "I;16L", "I;16N", "I")
SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I")


@contextlib.contextmanager
def open_image(part):
    """``PIL.Image.open`` of a part (a file, a record's picture, or a file object), lazily as Pillow opens: the
    header is read, the pixels when asked for, closed at the end: ``with open_image(part) as im``.

    Without Pillow's decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``, 89 million pixels, an error at
    twice that), inside the ``with`` block: daliloader opens the pictures a user's loaders decode anyway, and
    OpenCV, TensorFlow and DALI decode a 14000x14000 photo without complaint. Pillow checks the limit when it
    reads a header, and again when it loads some formats' pixels (TIFF; ``getpalette`` loads them). The limit
    is Pillow's one global setting, so it is lifted while any such block runs (``_PixelLimitLifted``) and put
    back as it was after the last; no lock is held while Pillow reads."""
    from PIL import Image

    source = io.BytesIO(part.read()) if isinstance(part, (RecordPart, ObjectPart)) else part
    with _NO_PIXEL_LIMIT, Image.open(source) as im:
        yield im
