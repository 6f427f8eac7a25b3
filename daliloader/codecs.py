"""Reading and decoding image and mask files with OpenCV, for everything that is not a DALI or tf.data
graph: the checks, ``prepare``, the opencv backend and the bench's decode ceilings; and writing files
whole (``prepare``, ``synth``), as ``cv2.imwrite`` cannot be trusted to.

EXIF orientation is ignored for images and masks alike (masks carry none), as in every backend.
"""

from __future__ import annotations

import errno
import io
import os

import cv2
import numpy as np

from .classes import ClassMap, MaskKind
from .errors import WHAT_TO_DO, LoadError
from .manifest import LZ4_MAGIC
from .parts import MAGIC, open_image, read_part


def read(path) -> np.ndarray:
    """A file's bytes (or a record's picture's: a :class:`~daliloader.tfrecord.RecordPart`), as uint8."""
    return np.frombuffer(read_part(path), dtype=np.uint8)


# OpenCV's own warnings about corrupt data would only repeat, without the file's name, what callers report
cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)


def decode(encoded: np.ndarray, flags: int) -> np.ndarray | None:
    """``cv2.imdecode`` with EXIF ignored (an 8-bit TIFF with unassociated alpha: :func:`decode_straight_alpha`);
    None when the data is corrupt (the caller names the file)."""
    if encoded[:4].tobytes() in MAGIC["TIFF"]:
        straight = decode_straight_alpha(encoded, flags)
        if straight is not None:
            return straight
    try:
        return cv2.imdecode(encoded, flags | cv2.IMREAD_IGNORE_ORIENTATION)
    except cv2.error:  # OpenCV 5 raises for a picture over its size limits (OPENCV_IO_MAX_IMAGE_PIXELS, ...)
        return None


#: TIFF's tags of the bits of each sample and of the samples beyond the colours, and the ExtraSamples value
#: of an alpha channel not multiplied into the colours ("unassociated").
BITS_PER_SAMPLE, EXTRA_SAMPLES, UNASSOCIATED_ALPHA = 258, 338, 2


def decode_straight_alpha(encoded: np.ndarray, flags: int) -> np.ndarray | None:
    """An 8-bit TIFF with unassociated alpha, decoded by Pillow as OpenCV would return it (BGR, or BGRA with
    ``IMREAD_UNCHANGED``), its colours as stored; None for any other TIFF (and a damaged one: OpenCV then
    says so). OpenCV reads such a TIFF through libtiff's RGBA interface, which multiplies the colours by
    their alpha (200 at alpha 200 read as 157), where DALI keeps them as stored. A 16-bit one OpenCV reads
    as stored, and Pillow would keep only its high byte: it is left to OpenCV (:func:`to_8bit` rounds it)."""
    try:
        with open_image(io.BytesIO(encoded.tobytes())) as im:
            if (im.mode != "RGBA" or UNASSOCIATED_ALPHA not in _tuple(im.tag_v2.get(EXTRA_SAMPLES))
                    or set(_tuple(im.tag_v2.get(BITS_PER_SAMPLE))) != {8}):
                return None
            rgba = np.asarray(im)
    except (OSError, ValueError):
        return None
    return np.ascontiguousarray(rgba[..., [2, 1, 0, 3]] if flags == cv2.IMREAD_UNCHANGED else rgba[..., 2::-1])


def _tuple(value) -> tuple:
    return value if isinstance(value, tuple) else () if value is None else (value,)


def decode_file(path, flags: int) -> np.ndarray | None:
    return decode(read(path), flags)


def mask_flags(classes: ClassMap) -> int:
    """How a mask is read, losslessly: its colours for colour maps (a palette expanded; 16-bit colours kept
    for :func:`to_8bit`), its values as stored (8 or 16 bits) for id maps."""
    return COLOUR if classes.mask_channels == 3 else cv2.IMREAD_UNCHANGED


#: How pictures are read: in colour, 16-bit samples kept (as 16 bits) for :func:`to_8bit`.
COLOUR = cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH


def to_8bit(pixels: np.ndarray) -> np.ndarray:
    """Colour samples as 8 bits: 16-bit ones rounded to the nearest level, ``round(x / 257)``, as DALI's
    decoders do (OpenCV alone would keep the high byte, one level lower for part of the values); 8-bit
    ones as they are. One rule on every backend (tf.data: :func:`daliloader.backends.tfdata.to_8bit`)."""
    if pixels.dtype != np.uint16:
        return pixels
    return ((pixels.astype(np.uint32) + 128) // 257).astype(np.uint8)


def mask_pixels(encoded: np.ndarray, classes: ClassMap) -> np.ndarray | None:
    """A mask's pixels as the class map reads them: RGB uint8 for colour maps (see :func:`to_8bit`),
    (H, W) uint8 or uint16 ids for id maps (the channel :attr:`ClassMap.mask_channel` of a colour mask
    where the map names one); None when the data is corrupt (the caller names the file)."""
    mask = decode(encoded, mask_flags(classes))
    if mask is None or classes.mask_channels == 1:
        return mask
    rgb = cv2.cvtColor(to_8bit(mask), cv2.COLOR_BGR2RGB)
    return rgb if classes.kind is MaskKind.RGB else np.ascontiguousarray(rgb[..., classes.mask_channel])


def decode_image(encoded: np.ndarray, path) -> np.ndarray:
    """RGB uint8; grayscale and RGBA become RGB, 16-bit becomes 8-bit (:func:`to_8bit`)."""
    img = decode(encoded, COLOUR)
    if img is None:
        raise LoadError(f"cannot decode image {path}: corrupt, truncated or not an image.\n{WHAT_TO_DO}")
    return cv2.cvtColor(to_8bit(img), cv2.COLOR_BGR2RGB)


def decode_mask(encoded: np.ndarray, path, classes: ClassMap) -> np.ndarray:
    """:func:`mask_pixels`, or a LoadError naming ``path``."""
    mask = mask_pixels(encoded, classes)
    if mask is None:
        raise LoadError(f"cannot decode mask {path}: corrupt, truncated or not an image.\n{WHAT_TO_DO}")
    return mask


def encode(extension: str, pixels: np.ndarray, params=()) -> bytes:
    """``pixels`` (OpenCV's BGR order) encoded as ``extension`` (".png", ".jpg")."""
    ok, encoded = cv2.imencode(extension, np.ascontiguousarray(pixels), list(params))
    if not ok:
        raise LoadError(f"OpenCV cannot encode a {pixels.shape} {pixels.dtype} array as {extension}")
    return encoded.tobytes()


def write_file(path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole, trusting nothing: ``cv2.imwrite`` reports success on a full disk
    and leaves an empty file, so files are encoded in memory and written here, where a failed or short
    write raises an OSError that names ``path`` (its ``errno`` says why: ENOSPC for a full disk)."""
    try:
        with open(path, "wb") as fh:
            fh.write(data)
    except OSError as e:  # a failed write (or flush at close) names no file
        raise OSError(e.errno, e.strerror, str(path)) from None
    written = os.stat(path).st_size
    if written != len(data):
        raise OSError(errno.EIO, f"{written} of {len(data)} bytes written", str(path))


#: PNG settings of class-index masks (prepared copies, the mask cache): no row filter, deflate level 9.
#: Prediction filters do not help maps of class indices: without them the masks decode faster and are
#: smaller (docs/prepared.md, "Which mask form", has the figures of benchmarks/mask_forms.py).
MASK_PNG_PARAMS = (cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_NONE, cv2.IMWRITE_PNG_COMPRESSION, 9)


def read_part_labels(part, classes: ClassMap) -> tuple[np.ndarray, int]:
    """A mask's class indices, as every loader maps it (:meth:`ClassMap.map_mask`), and how many of its pixels
    hold values of no class; a LoadError names the mask where it cannot be read."""
    decoded = decode_mask(read(part), part, classes)
    return classes.map_mask(decoded), sum(count for _, count in classes.unknown_values(decoded))


def mask_labels(part, classes: ClassMap) -> np.ndarray:
    """A mask's class indices (see :func:`read_part_labels`)."""
    return classes.map_mask(decode_mask(read(part), part, classes))


def encode_lz4_mask(labels: np.ndarray) -> bytes:
    """The GPU form of class-index masks (see :func:`daliloader.manifest.read_lz4_mask`, its reader):
    the header, then the (H, W) uint8 ``labels`` as one LZ4 block in LZ4's high-compression mode, which
    makes smaller files that inflate as fast (docs/prepared.md, "Which mask form", has the sizes)."""
    import lz4.block

    header = LZ4_MAGIC + np.array(labels.shape, "<i4").tobytes()
    return header + lz4.block.compress(np.ascontiguousarray(labels).tobytes(), mode="high_compression",
                                       store_size=False)
