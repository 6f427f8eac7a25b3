"""Segmentation metrics for Keras: a mean IoU that takes what segmentation models and loaders give it.

Keras' own ``keras.metrics.MeanIoU`` wants class ids on both sides (``IoU``/``MeanIoU`` with
``sparse_y_pred=False`` take scores), counts in its ``dtype`` (float weights cast to an int dtype lose
their fractions) and reports the mean only. :class:`MeanIoU` here:

* takes logits or probabilities (the class is their argmax), and int labels ``[B, H, W]`` or one-hot
  ``[B, H, W, C]`` (an all-zero row, daliloader's ignored pixel, is ignored);
* ignores ``ignore_class`` and any label outside ``0..C-1``, as Keras' ``ignore_class`` does;
* weighs pixels by float ``sample_weight`` exactly (a float64 confusion matrix): the loaders' evaluation
  weights (0 on padding samples and ignored pixels) leave every labelled pixel counted once;
* reports the IoU of every class beside the mean (``per_class=True``: one log entry per class;
  :meth:`MeanIoU.per_class_iou` in any case).

IoU of class ``k`` = ``TP / (TP + FP + FN)`` from the confusion matrix; the mean is over the classes
that occur in the labels or the predictions (a class absent from both has no IoU), as in Keras.
"""

from __future__ import annotations

import re

import keras
import numpy as np
from keras import ops


class MeanIoU(keras.metrics.Metric):
    """Mean intersection over union of ``num_classes`` classes (see the module's docstring).

    ``class_names`` (with ``per_class=True``) name the per-class entries ``iou_<name>`` in Keras' logs
    (default: ``iou_<k>``).
    """

    def __init__(self, num_classes: int, ignore_class: int | None = 255, per_class: bool = False,
                 class_names=None, name: str = "mean_iou", dtype=None):
        super().__init__(name=name, dtype=dtype)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        self.num_classes, self.ignore_class, self.per_class = num_classes, ignore_class, per_class
        self.class_names = list(class_names) if class_names is not None else [str(k) for k in range(num_classes)]
        self.confusion = self.add_variable(shape=(num_classes, num_classes), initializer="zeros", dtype="float64",
                                           name="confusion")  # [label, prediction]

    def update_state(self, y_true, y_pred, sample_weight=None):
        c = self.num_classes
        y_pred = ops.convert_to_tensor(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        if y_pred.shape[-1] != c:
            raise ValueError(f"{self.name}: predictions have {y_pred.shape[-1]} scores per pixel for num_classes={c}")
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        if len(y_true.shape) == len(y_pred.shape):  # one-hot: an all-zero row is an ignored pixel
            labels = ops.where(ops.max(y_true, axis=-1) > 0, ops.cast(ops.argmax(y_true, axis=-1), "int32"), -1)
        else:
            labels = ops.cast(y_true, "int32")
        valid = ops.logical_and(labels >= 0, labels < c)
        if self.ignore_class is not None:
            valid = ops.logical_and(valid, labels != self.ignore_class)
        weight = ops.ones_like(labels, dtype="float64")
        if sample_weight is not None:
            sample_weight = ops.cast(ops.convert_to_tensor(sample_weight), "float64")
            while len(sample_weight.shape) < len(labels.shape):  # [B] per-sample weights
                sample_weight = ops.expand_dims(sample_weight, -1)
            weight = weight * sample_weight
        weight = ops.where(valid, weight, 0.0)
        cells = ops.where(valid, labels, 0) * c + predicted
        counts = ops.bincount(ops.reshape(cells, [-1]), weights=ops.reshape(weight, [-1]), minlength=c * c)
        self.confusion.assign_add(ops.reshape(ops.cast(counts, "float64")[: c * c], (c, c)))

    def _ious(self):
        """Per-class IoU and whether the class occurs (in labels or predictions)."""
        conf = self.confusion
        true_positives = ops.diagonal(conf)
        union = ops.sum(conf, axis=0) + ops.sum(conf, axis=1) - true_positives
        present = union > 0
        return ops.where(present, true_positives / ops.where(present, union, 1.0), 0.0), present

    def result(self):
        ious, present = self._ious()
        mean = ops.sum(ious) / ops.maximum(ops.sum(ops.cast(present, "float64")), 1.0)
        if not self.per_class:
            return mean
        entries = {self.name: mean}
        for k, name in enumerate(self.class_names):
            entries[f"iou_{re.sub(r'[^0-9A-Za-z_]+', '_', name)}"] = ious[k]
        return entries

    def per_class_iou(self) -> np.ndarray:
        """The IoU of every class as float64 numpy, NaN for a class absent from labels and predictions."""
        ious, present = self._ious()
        return np.where(ops.convert_to_numpy(present), ops.convert_to_numpy(ious), np.nan)

    def reset_state(self):
        self.confusion.assign(ops.zeros((self.num_classes, self.num_classes), dtype="float64"))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "ignore_class": self.ignore_class,
                "per_class": self.per_class, "class_names": self.class_names}
