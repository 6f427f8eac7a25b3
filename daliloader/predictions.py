"""Predictions per file: one prediction per pair, in the dataset's order, with its file names.

:func:`predict` loads ``data`` in evaluation mode (``training=False``: no shuffle, no random option,
every sample once) on any backend, runs the model batch by batch, drops the padding samples that fill
the last batch (their index is -1), and returns a :class:`Prediction` per pair. With
``original_size=True`` each prediction is taken back to its image's own size (the inverse of the
loader's geometry), and ``out_dir`` writes them as PNG masks in the dataset's own encoding
(:meth:`daliloader.classes.ClassMap.to_mask`: Cityscapes' train ids back to label ids, as
cityscapesScripts reads them; colour datasets in their colours). A class map that reads palette masks by
index (``ClassMap.palette_masks`` set: VOC's ``SegmentationClass``, index = class, 255 = border) gets
indexed PNGs with that palette, so that the VOC devkit reads predictions as it reads its ground truth.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from . import backends, stages
from .backends import Product
from .codecs import encode, write_file
from .data import SegmentationData
from .errors import DataError, LoadError, SpecError, cannot_write
from .parts import open_image, part_name, part_stem, record_place
from .plan import Output, make_plan
from .spec import ImageSize, Preprocess

#: Loader options that predict fixes, with the value it needs: any other would drop pairs (training,
#: drop_remainder, a worker's shard), mix their order (shuffle) or choose other outputs.
FIXED = {"training": (False, "draw random crops and drop the last pairs"),
         "drop_remainder": (False, "drop the pairs that do not fill the last batch"),
         "shuffle": (False, "mix the order of the pairs"),
         "shard_id": (0, "keep only a worker's part of the pairs"),
         "num_shards": (1, "keep only a worker's part of the pairs"),
         "outputs": (None, "replace the images and indices predict reads")}


@dataclass(frozen=True)
class Prediction:
    """The prediction for pair ``index`` of the dataset: class indices ``(H, W)`` (the loader's size, or
    the image's own with ``original_size``), and the pair's files (``written``: the PNG written, if any).
    For data read from TFRecords, ``image`` and ``mask`` name the record (file, record number, byte
    offset, key) and ``name`` is its file-name feature, where it has one; for files, ``name`` is the
    image's file name."""

    index: int
    image: str
    mask: str
    labels: np.ndarray
    written: str | None = None
    name: str | None = None


def predict(model, data: SegmentationData, batch_size: int = 8, image_size: ImageSize | None = None,
            crop: str | None = None, backend: str = "auto", *, original_size: bool = False,
            out_dir: str | Path | None = None, **options) -> list[Prediction]:
    """One :class:`Prediction` per pair of ``data``, in its order (see the module's docstring).

    The loader is built as ``tf_dataset(data, batch_size, image_size, crop, training=False, **options)``
    would be, and runs one epoch: every pair once, the padding samples that fill the last batch dropped.

    Args:
        model: maps image batches ``[B, h, w, 3]`` to class scores ``[B, h, w, C]`` (logits or
            probabilities); it is called as ``model.predict_on_batch``.
        data: the pairs to predict (:class:`~daliloader.data.SegmentationData`).
        batch_size: samples per batch.
        image_size: as :func:`~daliloader.loaders.tf_dataset`'s.
        crop: as :func:`~daliloader.loaders.tf_dataset`'s in evaluation; None: ``"fit"`` with an
            ``image_size``, else whole images.
        backend: the backend that loads the batches, any (``opencv`` runs without Keras' PyDataset).
        original_size: take each prediction back to its image's own size (the inverse of the loader's
            geometry).
        out_dir: also write ``<image stem>.png`` per pair there, in the dataset's own encoding (implies
            ``original_size``: masks at the images' own size); a record is named by its file-name
            feature's stem, or ``<TFRecord file>-<record number>`` where it has none; names that collide
            are made unique (:func:`file_stems`). Pixels the loader did not see (outside a centre crop
            smaller than the image) are written as ignored (:meth:`~daliloader.classes.ClassMap.to_mask`):
            255 in VOC's palette PNGs, which VOC's devkit refuses in results, so predict whole images or
            ``crop="fit"`` for it. A prepared copy (``from_prepared``) is written in its own encoding, class
            indices, under its own file names: predict the original data for the dataset's encoding.
        **options: the keyword options of :func:`~daliloader.plan.make_plan`, as the loaders take them.
            Options that would drop pairs or mix their order (``training=True``,
            ``drop_remainder=True``, ``shuffle=True``, ``shard_id``/``num_shards``) or change what a
            batch holds (``outputs``) raise a SpecError before anything is loaded; predict some pairs
            with ``data.subset(indices)``.

    Returns:
        A list of :class:`Prediction`, one per pair of ``data``, in its order.

    Raises:
        daliloader.errors.SpecError: an argument that is not valid, an option that would drop pairs, mix
            their order or change what a batch holds, or a model whose scores are not
            ``[batch, height, width, classes]`` at the loader's size, with the class map's class count.
        daliloader.errors.DataError: data that cannot be read as asked (images of several sizes
            without an ``image_size``), an ``out_dir`` for palette masks whose ignore index does not fit
            8 bits, or pairs missing from the backend's batches (a bug in daliloader).
        daliloader.errors.LoadError: a file that cannot be decoded, named, or a prediction that cannot
            be written into ``out_dir``.
        daliloader.errors.MissingDependency: a ``backend`` that needs a package that is not installed.
    """
    _refuse_fixed(options)
    plan = make_plan(data, batch_size, image_size, crop, training=False, outputs=(Output.IMAGE, Output.INDEX),
                     caller="predict", **options)
    product = Product.TF_DATA if backend in backends.names(Product.TF_DATA) else Product.BATCHES
    chosen = backends.resolve(backend, product, plan)
    stems = None
    if out_dir is not None:
        original_size, out_dir, stems = True, _ready(Path(out_dir), data), file_stems(data)
    found: dict[int, Prediction] = {}
    came = Counter()
    for x, indices in chosen.build(product, plan):  # one epoch, every pair once, padding last
        scores = np.asarray(model.predict_on_batch(x))
        _check_scores(scores, plan.spec.image_size, data.classes)
        for labels, i in zip(np.argmax(scores, axis=-1), np.asarray(indices).tolist()):
            if i >= 0:  # (-1: padding, filling the last batch)
                came[i] += 1
                found[i] = _prediction(data, plan.spec, i, labels, original_size, out_dir,
                                       stems[i] if stems else None)
    if sorted(came.elements()) != list(range(len(data))):
        raise _not_once(data, came, chosen.name)
    return [found[i] for i in range(len(data))]


def _check_scores(scores: np.ndarray, image_size, classes) -> None:
    """Refuse scores that are not ``[batch, height, width, classes]`` at the loader's size and with the
    class map's class count: a model of another count (ADE20K's 151 outputs with 0 for "other", where
    the map has 150 classes and 0 ignored) would have every class written off by one."""
    if scores.ndim != 4 or scores.shape[1:3] != tuple(image_size):
        raise SpecError(f"predict: the model gave scores of shape {scores.shape} for images of "
                        f"{tuple(image_size)}; it should give [batch, height, width, classes]")
    if scores.shape[-1] != classes.num_classes:
        raise SpecError(f"predict: the model gave {scores.shape[-1]} class scores per pixel, but the data's class "
                        f"map ({classes.source}) has {classes.num_classes} classes, so its classes would be "
                        "written as others. Predict with the class map the model was trained with (load the data "
                        "with classes=...), or a model of as many classes")


def _refuse_fixed(options: dict) -> None:
    """Refuse, before anything is loaded, the options that would drop pairs or mix their order
    (:data:`FIXED`): later, a lost pair would look like a bug. The harmless ones are taken out."""
    for name in [n for n in options if n in FIXED]:
        (needed, harm), given = FIXED[name], options.pop(name)
        if given is not None and not (type(given) is type(needed) and given == needed):
            raise SpecError(f"predict() got {name}={given!r}, which would {harm}: predict gives one prediction "
                            f"per pair of data, in its order. Leave {name} out (to predict some pairs, pass "
                            "data.subset(indices))")


def file_stems(data: SegmentationData) -> list[str]:
    """The name (without ``.png``) each pair's prediction is written under: its image's stem (a record's
    file-name feature's stem, else ``<TFRecord file>-<record number>``), made unique where stems collide
    (TF Model Garden's records name each by a 24-bit hash, ``image/source_id``, which repeat past a few
    thousand records; images of one name in several folders): a colliding record's stem gets its file and
    record number (``<stem>-<file>-<record>``), a colliding file's its pair number (``<stem>-<pair>``)."""
    stems = [_safe(part_stem(p), p) for p in data.images]
    seen = Counter(stems)
    unique = [s if seen[s] == 1 else
              f"{s}-{record_place(p) or f'{i:06d}'}"
              for i, (s, p) in enumerate(zip(stems, data.images))]
    if len(set(unique)) < len(unique):  # a stem that ends like another's fallback: the pair number decides
        unique = [f"{s}-{i:06d}" for i, s in enumerate(unique)]
    return unique


def _safe(stem: str, part) -> str:
    """A stem that is one file name in any folder: a record's name feature (its file name, which may hold
    anything) without path separators, NUL or other control characters, and not empty or hidden
    (else the record's ``<file>-<number>``)."""
    cleaned = re.sub(r"[\x00-\x1f/\\]", "_", stem).strip()
    if not cleaned.strip("._") and (place := record_place(part)):
        return place
    return cleaned.lstrip(".") or "_"


def _not_once(data: SegmentationData, came: Counter, backend: str) -> DataError:
    """The error of pairs that did not come back once each (``came``: how often each sample number did):
    in packs, whose index members say each sample's number, damage; elsewhere a bug."""
    if data.packs is None:
        return DataError(f"predict: {len(came)} of {len(data)} pairs came back from backend {backend!r}; this is "
                         "a bug in daliloader, please report it")
    copy = data.packs.tars[0].rsplit("/", 2)[0]  # (a path, or an s3:// URL)
    repeated = [str(i) for i, n in sorted(came.items()) if n > 1]
    missing = [str(i) for i in range(len(data)) if i not in came]
    return DataError(f"predict: the packs of {copy} hold sample {', '.join(repeated[:5]) or 'none'} more than once "
                     f"and sample {', '.join(missing[:5]) or 'none'} not at all: their sample numbers are damaged; run "
                     f"`daliloader verify {copy}`, or prepare the copy again")


def _ready(out_dir: Path, data: SegmentationData) -> Path:
    """``out_dir``, made, once it is known that the class map's ignore index fits the masks written."""
    if data.classes.palette_masks is not None and data.classes.ignore_index > 255:
        raise DataError(f"predict(out_dir=...): ignore_index {data.classes.ignore_index} does not fit the 8-bit "
                        "indices of the palette PNGs this class map reads; predict without out_dir and write "
                        "the masks yourself")
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def _prediction(data: SegmentationData, spec: Preprocess, i: int, labels: np.ndarray, original_size: bool,
                out_dir: Path | None, stem: str | None = None) -> Prediction:
    """Pair ``i``'s prediction from its class indices at the loader's size (taken back to the image's own
    size, and written, where asked)."""
    labels = labels.astype(data.classes.label_dtype)
    if original_size:
        labels = to_original_size(labels, spec, data, i)
    written = _write(out_dir / f"{stem}.png", data, labels) if out_dir is not None else None
    image = data.images[i]
    name = part_name(image)
    return Prediction(i, str(image), str(data.masks[i]), labels, written, name)


def to_original_size(labels: np.ndarray, spec: Preprocess, data: SegmentationData, index: int) -> np.ndarray:
    """The inverse of the loader's geometry for pair ``index``: labels at the loader's size back on the
    image's own pixels (nearest neighbour); pixels the loader cropped away get the ignore index."""
    with open_image(data.images[index]) as im:
        width, height = im.size
    win = stages.window(spec, height, width, np.zeros(stages.DRAWS, np.float32))  # evaluation draws nothing
    if spec.resizes:  # resize / fit: the whole image, scaled (fit: then padded)
        h, w = stages.resize_to(spec, win.height, win.width)
        if spec.crop == "fit":
            top, left = stages.fit_window(spec, h, w)
            labels = labels[-top:-top + h, -left:-left + w]
        return stages.resize(labels, (height, width), labels=True)
    out = np.full((height, width), data.classes.ignore_index, labels.dtype)  # center: the window back in place
    top, left = max(win.top, 0), max(win.left, 0)
    bottom, right = min(win.top + win.height, height), min(win.left + win.width, width)
    out[top:bottom, left:right] = labels[top - win.top:bottom - win.top, left - win.left:right - win.left]
    return out


def _write(path: Path, data: SegmentationData, labels: np.ndarray) -> str:
    """Write a pair's labels to ``path`` in the dataset's own encoding, checking that the whole file reached
    the disk (a full disk can leave a short file behind an encoder's success)."""
    from PIL import Image

    classes = data.classes
    if classes.palette_masks is not None:  # indexed, as the masks: index = class, ignore_index = border
        image = Image.fromarray(np.where(labels < classes.num_classes, labels, classes.ignore_index).astype(np.uint8))
        image.putpalette(classes.palette_masks.reshape(-1).tolist())  # an "L" image becomes "P"
        encoded = io.BytesIO()
        image.save(encoded, format="PNG")
        encoded = encoded.getvalue()
    else:
        mask = classes.to_mask(labels)
        encoded = encode(".png", cv2.cvtColor(mask, cv2.COLOR_RGB2BGR) if mask.ndim == 3 else mask)
    try:
        write_file(path, encoded)  # whole, or an error: cv2.imwrite reports success on a full disk
    except OSError as e:
        raise LoadError(f"cannot write {path}: {cannot_write(e, 'pass another out_dir')}") from None
    return str(path)
