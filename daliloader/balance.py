"""Class balance: how often each class occurs in a dataset's masks, and the class weights that even it
out, computed once. Class weights belong to the loss: ``dl.losses.SparseCategoricalCrossentropy(weights)``
(or ``CategoricalCrossentropy``) weighs every pixel's cross-entropy by its class, and the metrics stay
unweighted (:mod:`daliloader.losses`).

Weights (``method``):

* ``"median"``: median frequency balancing (Eigen & Fergus 2015; SegNet's weights for CamVid),
  ``w_c = median(f) / f_c`` over the classes present, where ``f_c`` is class ``c``'s pixels over the
  pixels of the masks in which ``c`` appears (:attr:`ClassFrequencies.per_image`): a class rare across
  the dataset but large where it appears is not weighed as if it were small.
* ``"inverse"``: ``w_c = 1 / (K s_c)`` for the ``K`` classes present, ``s_c`` its share of all pixels
  (:attr:`ClassFrequencies.share`), so that the average weight of a pixel is 1.

A class absent from the masks gets weight 1 (there is nothing to balance); ignored pixels count for no
class, and as no pixel of a mask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import codecs
from .data import SegmentationData
from .errors import SpecError
from .parallel import threaded_map
from .spec import check_workers

METHODS = ("median", "inverse")


@dataclass(frozen=True, eq=False)
class ClassFrequencies:
    """How often each class occurs in a dataset's masks, counted in labelled pixels (ignored pixels count
    for no class and for no mask): ``pixels[c]``, class ``c``'s pixels; ``image_pixels[c]``, the pixels of
    the masks in which ``c`` appears (0 where it appears in none)."""

    pixels: np.ndarray
    image_pixels: np.ndarray

    @property
    def share(self) -> np.ndarray:
        """Each class's share of all labelled pixels (sums to 1): what ``"inverse"`` balances."""
        return self.pixels / self.pixels.sum()

    @property
    def per_image(self) -> np.ndarray:
        """Eigen & Fergus' frequency: each class's pixels over the pixels of the masks in which it appears
        (0 where it appears in none): what ``"median"`` balances."""
        return np.divide(self.pixels, self.image_pixels, out=np.zeros(len(self.pixels)), where=self.image_pixels > 0)


def class_frequencies(data: SegmentationData, workers: int | None = None,
                      progress: bool = True) -> ClassFrequencies:
    """How often each class occurs over every mask of ``data``, the input of :func:`class_weights`.

    The masks are read with OpenCV, on all cores unless ``workers`` says otherwise; ignored pixels count
    for no class.

    Args:
        data: the pairs (:class:`~daliloader.data.SegmentationData`), whose class map reads the masks.
        workers: threads reading the masks (None: every core).
        progress: show a progress bar.

    Returns:
        A :class:`ClassFrequencies`: each class's pixels and the pixels of the masks it appears in, with
        its share of all pixels (``.share``) and Eigen & Fergus' frequency (``.per_image``).

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
        """The mask's pixels of each class, and beside them its labelled pixels where each class appears."""
        labels = classes.map_mask(codecs.decode_mask(codecs.read(mask_path), mask_path, classes))
        pixels = np.bincount(labels[labels < n].ravel(), minlength=n)[:n]
        return np.stack([pixels, np.where(pixels > 0, pixels.sum(), 0)])

    counted = threaded_map(count, data.masks, check_workers(workers), "counting class pixels" if progress else None)
    pixels, image_pixels = sum(counted, np.zeros((2, n), np.int64))
    if not np.sum(pixels):
        raise SpecError("the masks hold no labelled pixel: every pixel is the ignore index")
    return ClassFrequencies(pixels, image_pixels)


def class_weights(frequencies: ClassFrequencies | np.ndarray | Sequence[float],
                  method: str = "median") -> tuple[float, ...]:
    """Weights that balance ``frequencies``, one per class, for the losses of :mod:`daliloader.losses`.

    A class absent from the masks (frequency 0) gets weight 1: there is nothing to balance.

    Args:
        frequencies: what :func:`class_frequencies` gives; or one frequency per class, balanced as given
            (``"median"``: ``median(f) / f_c``; ``"inverse"``: ``1 / (K f_c)``, for shares that sum to 1).
        method: ``"median"`` (median frequency balancing) or ``"inverse"`` (see the module's text).

    Returns:
        The weights, one float per class.

    Raises:
        daliloader.errors.SpecError: a ``method`` other than ``"median"`` and ``"inverse"``.
    """
    if method not in METHODS:
        raise SpecError(f"method={method!r}: use one of {', '.join(map(repr, METHODS))}")
    if isinstance(frequencies, ClassFrequencies):
        frequencies = frequencies.per_image if method == "median" else frequencies.share
    f = np.asarray(frequencies, dtype=np.float64)
    present = f > 0
    w = np.ones_like(f)
    if method == "median":
        w[present] = np.median(f[present]) / f[present]
    else:
        w[present] = 1.0 / (present.sum() * f[present])
    return tuple(float(v) for v in w)
