"""Reading and decoding image and mask files with OpenCV, for everything that is not a DALI or tf.data
graph: the checks, ``prepare``, the opencv backend and the bench's decode ceilings; and writing files
whole (``prepare``, ``synth``), as ``cv2.imwrite`` cannot be trusted to.

EXIF orientation is ignored for images and masks alike (masks carry none), as in every backend.
"""

from __future__ import annotations

import errno
import os

import cv2
import numpy as np

from .classes import ClassMap
from .errors import WHAT_TO_DO, LoadError
from .parts import read_part


def read(path) -> np.ndarray:
    """A file's bytes (or a record's picture's: a :class:`~daliloader.tfrecord.RecordPart`), as uint8."""
    return np.frombuffer(read_part(path), dtype=np.uint8)


# OpenCV's own warnings about corrupt data would only repeat, without the file's name, what callers report
cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)


def decode(encoded: np.ndarray, flags: int) -> np.ndarray | None:
    """``cv2.imdecode`` with EXIF ignored; None when the data is corrupt (the caller names the file)."""
    return cv2.imdecode(encoded, flags | cv2.IMREAD_IGNORE_ORIENTATION)


def decode_file(path, flags: int) -> np.ndarray | None:
    return decode(read(path), flags)


def mask_flags(classes: ClassMap) -> int:
    """How a mask is read, losslessly: its colours for colour maps (a palette expanded), its values as
    stored (8 or 16 bits) for id maps."""
    return cv2.IMREAD_COLOR if classes.kind == "rgb" else cv2.IMREAD_UNCHANGED


def decode_image(encoded: np.ndarray, path: str) -> np.ndarray:
    """RGB uint8; grayscale and RGBA become RGB, 16-bit becomes 8-bit."""
    img = decode(encoded, cv2.IMREAD_COLOR)
    if img is None:
        raise LoadError(f"cannot decode image {path}: corrupt, truncated or not an image.\n{WHAT_TO_DO}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def decode_mask(encoded: np.ndarray, path: str, classes: ClassMap) -> np.ndarray:
    """RGB uint8 for colour maps, (H, W) uint8 or uint16 ids for id maps."""
    mask = decode(encoded, mask_flags(classes))
    if mask is None:
        raise LoadError(f"cannot decode mask {path}: corrupt, truncated or not an image.\n{WHAT_TO_DO}")
    return cv2.cvtColor(mask, cv2.COLOR_BGR2RGB) if classes.kind == "rgb" else mask


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
