"""The preprocessing spec in numpy + OpenCV, stage by stage (names as in :mod:`daliloader.spec`).

These kernels need neither Keras nor TensorFlow; :func:`keras_sequence` wraps them in a
``keras.utils.PyDataset``. Random parameters are drawn once per sample and applied to image and mask
by separate kernels, like the DALI graph does.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from ..checks import WHAT_TO_DO, PairGuard
from ..classes import ClassMap
from ..data import SegmentationData
from ..errors import LoadError
from ..sampler import Sampler
from ..spec import Preprocess


@dataclass(frozen=True)
class Window:
    """The crop window of one sample, in source pixels, and its flip."""

    top: int
    left: int
    height: int
    width: int
    flip: bool


# ---------------------------------------------------------------- read / decode
def read(path: str) -> np.ndarray:
    with open(path, "rb") as fh:
        return np.frombuffer(fh.read(), dtype=np.uint8)


def decode_image(encoded: np.ndarray, path: str) -> np.ndarray:
    """RGB uint8; grayscale and RGBA become RGB, 16-bit becomes 8-bit; EXIF orientation ignored."""
    img = cv2.imdecode(encoded, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    if img is None:
        raise LoadError(f"cannot decode image {path}: corrupt, truncated or not an image.\n{WHAT_TO_DO}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def decode_mask(encoded: np.ndarray, path: str, classes: ClassMap) -> np.ndarray:
    """RGB uint8 for colour maps, (H, W) ids for id maps; losslessly, EXIF ignored."""
    flags = (cv2.IMREAD_COLOR if classes.kind == "rgb" else cv2.IMREAD_GRAYSCALE) | cv2.IMREAD_IGNORE_ORIENTATION
    mask = cv2.imdecode(encoded, flags)
    if mask is None:
        raise LoadError(f"cannot decode mask {path}: corrupt, truncated or not an image.\n{WHAT_TO_DO}")
    return cv2.cvtColor(mask, cv2.COLOR_BGR2RGB) if classes.kind == "rgb" else mask


# ---------------------------------------------------------------- crop / flip
def draw_window(rng: np.random.Generator, spec: Preprocess, height: int, width: int) -> Window:
    """One sample's random parameters, with the same formulas as the DALI graph."""
    h, w = spec.image_size
    if spec.crop == "center":
        return Window(_center_offset(height, h), _center_offset(width, w), h, w, False)
    if spec.resizes:
        zoom = rng.uniform(*spec.scale)
        h, w = int(np.floor(h / zoom + 0.5)), int(np.floor(w / zoom + 0.5))
    top = _uniform_offset(height - h, rng.random())
    left = _uniform_offset(width - w, rng.random())
    flip = spec.flip > 0 and rng.random() < spec.flip
    return Window(top, left, h, w, bool(flip))


def _center_offset(extent: int, size: int) -> int:
    return max(extent - size, 0) // 2 - max(size - extent, 0) // 2


def _uniform_offset(slack: int, u: float) -> int:
    steps = min(int(np.floor(u * (abs(slack) + 1))), abs(slack))
    return steps if slack >= 0 else -steps


def crop(a: np.ndarray, win: Window, fill) -> np.ndarray:
    """The window of ``a``; what lies outside ``a`` is ``fill``."""
    out = np.full((win.height, win.width) + a.shape[2:], fill, dtype=a.dtype)
    y0, x0 = max(win.top, 0), max(win.left, 0)
    y1, x1 = min(win.top + win.height, a.shape[0]), min(win.left + win.width, a.shape[1])
    if y1 > y0 and x1 > x0:
        out[y0 - win.top:y1 - win.top, x0 - win.left:x1 - win.left] = a[y0:y1, x0:x1]
    return out


def resize_image(img: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    h, w = size
    if img.shape[:2] == (h, w):
        return img
    shrinking = h * w < img.shape[0] * img.shape[1]
    return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)


def resize_labels(labels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    h, w = size
    if labels.shape[:2] == (h, w):
        return labels
    return cv2.resize(labels, (w, h), interpolation=cv2.INTER_NEAREST_EXACT)


# ---------------------------------------------------------------- normalize / encode
def normalize(img: np.ndarray, spec: Preprocess) -> np.ndarray:
    x = img.astype(np.float32) / 255.0
    if spec.mean != (0.0, 0.0, 0.0) or spec.std != (1.0, 1.0, 1.0):
        x = (x - np.float32(spec.mean)) / np.float32(spec.std)
    return x.astype(np.float16) if spec.dtype == "float16" else x


def encode(labels: np.ndarray, spec: Preprocess, classes: ClassMap) -> np.ndarray:
    if spec.label_mode == "int":
        return labels.astype(np.int32)
    eye = np.concatenate([np.eye(classes.num_classes, dtype=np.float32),
                          np.zeros((1, classes.num_classes), np.float32)])
    return eye[np.minimum(labels, classes.num_classes)]


# ---------------------------------------------------------------- one sample, one batch
class OpenCVLoader:
    """Loads batches of the spec with OpenCV; ``batch(step)`` follows the shared :class:`Sampler`."""

    def __init__(self, data: SegmentationData, spec: Preprocess, sampler: Sampler):
        self.data, self.spec, self.sampler = data, spec, sampler
        self.guard = PairGuard(data)

    def sample(self, index: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        self.guard.verify(index)
        image_path, mask_path = self.data.images[index], self.data.masks[index]
        image = decode_image(read(image_path), image_path)
        labels = self.data.classes.map_mask(decode_mask(read(mask_path), mask_path, self.data.classes))
        win = draw_window(rng, self.spec, *image.shape[:2])
        image = resize_image(crop(image, win, 0), self.spec.image_size)
        labels = resize_labels(crop(labels, win, self.data.classes.ignore_index), self.spec.image_size)
        if win.flip:
            image, labels = image[:, ::-1], labels[:, ::-1]
        return normalize(image, self.spec), encode(labels, self.spec, self.data.classes)

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Images, labels and weights of the ``step``-th batch of the stream."""
        indices = self.sampler.batch(step)
        rng = np.random.default_rng([self.sampler.seed, step, 1])
        samples = [self.sample(max(i, 0), rng) for i in indices]
        return (np.stack([s[0] for s in samples]), np.stack([s[1] for s in samples]),
                (indices >= 0).astype(np.float32))


class EpochBatches:
    """An OpenCVLoader's batches by epoch, in Keras' ``PyDataset`` protocol without Keras: ``len()`` is
    batches per epoch, ``[i]`` batch ``i`` of the current epoch, ``on_epoch_end()`` the next epoch.

    Batch ``i`` of epoch ``e`` is the sampler's step ``e * len(self) + i``: the order comes from the same
    :class:`~daliloader.sampler.Sampler` as the DALI backends, and the random crops of a batch are seeded
    by its step, so ``self[i]`` is reproducible and safe to compute in any worker.
    """

    def __init__(self, loader: OpenCVLoader, with_weights: bool):
        self.loader = loader
        self.with_weights = with_weights
        self.epoch = 0

    def __len__(self) -> int:
        return self.loader.sampler.steps

    def __getitem__(self, i: int):
        if not 0 <= i < len(self):
            raise IndexError(f"batch {i} out of range: {len(self)} batches per epoch")
        x, y, w = self.loader.batch(self.epoch * len(self) + i)
        if not self.with_weights:
            return x, y
        return x, y, np.repeat(w[:, None, None], x.shape[1] * x.shape[2], axis=1).reshape(x.shape[:3])

    def on_epoch_end(self) -> None:
        self.epoch += 1
