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

from collections.abc import Sequence

import numpy as np

from . import codecs
from .data import SegmentationData
from .errors import SpecError
from .parallel import threaded_map
from .spec import check_workers

METHODS = ("median", "inverse")


def class_frequencies(data: SegmentationData, workers: int | None = None, progress: bool = True) -> np.ndarray:
    """The share of labelled pixels of each class over every mask of ``data``.

    The masks are read with OpenCV, on all cores unless ``workers`` says otherwise; ignored pixels count
    for no class.

    Args:
        data: the pairs (:class:`~daliloader.data.SegmentationData`), whose class map reads the masks.
        workers: threads reading the masks (None: every core).
        progress: show a progress bar.

    Returns:
        A float64 array of one share per class, which sums to 1 (the input of :func:`class_weights`).

    Raises:
        daliloader.errors.SpecError: masks that hold no labelled pixel (every pixel is the ignore index),
            or a ``workers`` that is not a positive count this machine can use.
        daliloader.errors.LoadError: a mask that cannot be decoded, named.
        daliloader.errors.DataError: a mask that the class map cannot read (a colour map on a mask that
            is no colour picture), or a TFRecord record that cannot be read, named.
    """
    classes = data.classes
    n = classes.num_classes

    def count(mask_path: str) -> np.ndarray:
        labels = classes.map_mask(codecs.decode_mask(codecs.read(mask_path), mask_path, classes))
        return np.bincount(labels[labels < n].ravel(), minlength=n)[:n]

    total = sum(threaded_map(count, data.masks, check_workers(workers), "counting class pixels" if progress else None))
    if not np.sum(total):
        raise SpecError("the masks hold no labelled pixel: every pixel is the ignore index")
    return total / np.sum(total)


def class_weights(frequencies: np.ndarray | Sequence[float], method: str = "median") -> tuple[float, ...]:
    """Weights that balance ``frequencies``, one per class, for the losses of :mod:`daliloader.losses`.

    A class absent from the masks (frequency 0) gets weight 1: there is nothing to balance.

    Args:
        frequencies: the share of labelled pixels of each class, as :func:`class_frequencies` gives it.
        method: ``"median"`` (median frequency balancing) or ``"inverse"`` (see the module's text).

    Returns:
        The weights, one float per class.

    Raises:
        daliloader.errors.SpecError: a ``method`` other than ``"median"`` and ``"inverse"``.
    """
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
