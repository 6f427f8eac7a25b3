"""Predictions per file: one prediction per pair, in the dataset's order, with its file names.

:func:`predict` loads ``data`` in evaluation mode (``training=False``: no shuffle, no random option,
every sample once) on any backend, runs the model batch by batch, drops the padding samples that fill
the last batch (their index is -1), and returns a :class:`Prediction` per pair. With
``original_size=True`` each prediction is taken back to its image's own size (the inverse of the
loader's geometry), and ``out_dir`` writes them as PNG masks in the dataset's own encoding
(:meth:`daliloader.classes.ClassMap.to_mask`: Cityscapes' train ids back to label ids, as
cityscapesScripts reads them; colour datasets in their palette).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from . import backends, stages
from .data import SegmentationData
from .errors import DataError, SpecError
from .plan import make_plan
from .spec import Preprocess


@dataclass(frozen=True)
class Prediction:
    """The prediction for pair ``index`` of the dataset: class indices ``(H, W)`` (the loader's size, or
    the image's own with ``original_size``), and the pair's files (``written``: the PNG written, if any)."""

    index: int
    image: str
    mask: str
    labels: np.ndarray
    written: str | None = None


def predict(model, data: SegmentationData, batch_size: int = 8, image_size=None, crop: str | None = None,
            backend: str = "auto", *, original_size: bool = False, out_dir: str | Path | None = None,
            **options) -> list[Prediction]:
    """One :class:`Prediction` per pair of ``data``, in its order (see the module's docstring).

    The loader is built as ``tf_dataset(data, batch_size, image_size, crop, training=False, **options)``
    would be (``crop``: ``"fit"`` with an ``image_size``, else whole images), on ``backend`` (any:
    ``opencv`` runs without Keras' PyDataset). ``model`` maps image batches ``[B, h, w, 3]`` to class
    scores ``[B, h, w, C]`` (logits or probabilities); it is called as ``model.predict_on_batch``.
    ``out_dir``: also write ``<image stem>.png`` per pair there (implies ``original_size``: masks at the
    images' own size).
    """
    plan = make_plan(data, batch_size, image_size, crop, training=False, outputs=("image", "index"),
                     caller="predict", **options)
    product = "tf.data" if backend in backends.names("tf.data") else "batches"
    chosen = backends.resolve(backend, product, plan)
    if out_dir is not None:
        original_size = True
        out_dir = Path(out_dir)
        stems = [Path(p).stem for p in data.images]
        if len(set(stems)) < len(stems):
            twice = sorted({s for s in stems if stems.count(s) > 1})[:3]
            raise DataError(f"predict(out_dir=...): several images are named {', '.join(twice)}, so their masks "
                            "would overwrite each other; predict without out_dir and write them yourself")
        out_dir.mkdir(parents=True, exist_ok=True)
    found: dict[int, Prediction] = {}
    for x, indices in chosen.build(product, plan):  # one epoch, every pair once, padding last
        scores = np.asarray(model.predict_on_batch(x))
        if scores.ndim != 4 or scores.shape[1:3] != tuple(plan.spec.image_size):
            raise SpecError(f"predict: the model gave scores of shape {scores.shape} for images of "
                            f"{tuple(plan.spec.image_size)}; it should give [batch, height, width, classes]")
        for labels, i in zip(np.argmax(scores, axis=-1), np.asarray(indices).tolist()):
            if i < 0:
                continue  # padding, filling the last batch
            labels = labels.astype(data.classes.label_dtype)
            if original_size:
                labels = to_original_size(labels, plan.spec, data, i)
            written = _write(out_dir, data, i, labels) if out_dir is not None else None
            found[i] = Prediction(i, data.images[i], data.masks[i], labels, written)
    if sorted(found) != list(range(len(data))):
        raise DataError(f"predict: {len(found)} of {len(data)} pairs came back from backend {chosen.name!r}; this is "
                        "a bug in daliloader, please report it")
    return [found[i] for i in range(len(data))]


def to_original_size(labels: np.ndarray, spec: Preprocess, data: SegmentationData, index: int) -> np.ndarray:
    """The inverse of the loader's geometry for pair ``index``: labels at the loader's size back on the
    image's own pixels (nearest neighbour); pixels the loader cropped away get the ignore index."""
    from PIL import Image

    with Image.open(data.images[index]) as im:
        width, height = im.size
    win = stages.window(spec, height, width, np.zeros(stages.DRAWS, np.float32))  # evaluation draws nothing
    if spec.resizes:  # resize / fit: the whole image, scaled (fit: then padded)
        h, w = stages.resize_to(spec, win.height, win.width)
        if spec.crop == "fit":
            top, left = stages.fit_window(spec, h, w)
            labels = labels[-top:-top + h, -left:-left + w]
        return cv2.resize(labels, (width, height), interpolation=cv2.INTER_NEAREST)
    out = np.full((height, width), data.classes.ignore_index, labels.dtype)  # center: the window back in place
    top, left = max(win.top, 0), max(win.left, 0)
    bottom, right = min(win.top + win.height, height), min(win.left + win.width, width)
    out[top:bottom, left:right] = labels[top - win.top:bottom - win.top, left - win.left:right - win.left]
    return out


def _write(out_dir: Path, data: SegmentationData, index: int, labels: np.ndarray) -> str:
    mask = data.classes.to_mask(labels)
    path = out_dir / f"{Path(data.images[index]).stem}.png"
    if mask.ndim == 3:
        mask = cv2.cvtColor(mask, cv2.COLOR_RGB2BGR)
    if not cv2.imwrite(str(path), mask):
        raise DataError(f"cannot write {path}: check that the folder is writable and the disk has room")
    return str(path)
