"""Class balance: how often each class occurs in a dataset's masks, and the class weights that even it
out, computed once. Class weights belong to the loss: ``dl.losses.SparseCategoricalCrossentropy(weights)``
(or ``CategoricalCrossentropy``) weighs every pixel's cross-entropy by its class, and the metrics stay
unweighted (:mod:`daliloader.losses`).

Weights (``method``):

* ``"median"``: median frequency balancing (Eigen & Fergus 2015; SegNet's weights for CamVid),
  ``w_c = median(f) / f_c`` over the classes present.
* ``"inverse"``: ``w_c = 1 / (K f_c)`` for the ``K`` classes present, so that the average weight of a
  pixel is 1.

A class absent from the masks gets weight 1 (there is nothing to balance); ignored pixels count for no
class.
"""

from __future__ import annotations

import numpy as np

from . import codecs
from .data import SegmentationData
from .errors import SpecError
from .parallel import threaded_map
from .spec import check_workers

METHODS = ("median", "inverse")


def class_frequencies(data: SegmentationData, workers: int | None = None, progress: bool = True) -> np.ndarray:
    """The share of labelled pixels of each class over every mask of ``data`` (float64, sums to 1),
    reading the masks with OpenCV on all cores, with a progress bar."""
    classes = data.classes
    n = classes.num_classes

    def count(mask_path: str) -> np.ndarray:
        labels = classes.map_mask(codecs.decode_mask(codecs.read(mask_path), mask_path, classes))
        return np.bincount(labels[labels < n].ravel(), minlength=n)[:n]

    total = sum(threaded_map(count, data.masks, check_workers(workers), "counting class pixels" if progress else None))
    if not np.sum(total):
        raise SpecError("the masks hold no labelled pixel: every pixel is the ignore index")
    return total / np.sum(total)


def class_weights(frequencies, method: str = "median") -> tuple[float, ...]:
    """Weights that balance ``frequencies`` (see the module's text for ``method``), one per class."""
    if method not in METHODS:
        raise SpecError(f"method={method!r}: use one of {', '.join(map(repr, METHODS))}")
    f = np.asarray(frequencies, dtype=np.float64)
    present = f > 0
    w = np.ones_like(f)
    if method == "median":
        w[present] = np.median(f[present]) / f[present]
    else:
        w[present] = 1.0 / (present.sum() * f[present])
    return tuple(float(v) for v in w)
