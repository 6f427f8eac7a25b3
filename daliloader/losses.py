"""Cross-entropy losses with class weights, for segmentation in Keras.

Class weights belong to the loss. Keras hands a batch's ``sample_weight`` to the loss and to
``weighted_metrics`` alike, so class weights carried in the batches would weigh the metrics too
(accuracy and IoU counted per class weight, not per pixel). These losses weigh each pixel's cross-entropy
by the weight of its true class, as segmentation_models' and mmseg's losses do; the batches keep only
the 0/1 weights of evaluation (padding samples, ignored pixels), which leave the metrics exact.

The weight of a pixel is ``weight_table[label]`` (:func:`daliloader.stages.weight_table`, the same table
the loaders' weights use): the class's weight, and 0 for the ignore class or any label outside
``0..C-1``. Keras then multiplies by the batch's ``sample_weight``, if any, and averages over all
pixels (``"sum_over_batch_size"``), as with its own ``class_weight``.
"""

from __future__ import annotations

import keras
from keras import ops

from .spec import class_weight_list
from .stages import weight_table


def _table(class_weights, num_classes, ignore_class):
    weights = None if class_weights is None else class_weight_list(class_weights, num_classes, ignore_class,
                                                                  "the loss's classes")
    return weights, (len(weights) if weights is not None else num_classes)


class _Weighted(keras.losses.Loss):
    def __init__(self, class_weights, num_classes, ignore_class, from_logits, name, reduction):
        super().__init__(name=name, reduction=reduction)
        self.class_weights, self.num_classes = _table(class_weights, num_classes, ignore_class)
        self.ignore_class, self.from_logits = ignore_class, from_logits

    def _weight_table(self, classes: int):
        if self.num_classes is not None and self.num_classes != classes:
            raise ValueError(f"{self.name}: {len(self.class_weights or ())} class weights (num_classes="
                             f"{self.num_classes}) for predictions with {classes} scores per pixel")
        return ops.convert_to_tensor(weight_table(classes, self.class_weights))

    def get_config(self):
        return {**super().get_config(), "class_weights": None if self.class_weights is None else
                list(self.class_weights), "num_classes": self.num_classes, "ignore_class": self.ignore_class,
                "from_logits": self.from_logits}


class SparseCategoricalCrossentropy(_Weighted):
    """Cross-entropy of int labels ``[B, H, W]`` against scores ``[B, H, W, C]``, each pixel weighted by
    its class: ``class_weights`` (a sequence, one per class, or a dict as Keras' ``class_weight``, which
    then needs ``num_classes``; None: 1). Pixels of ``ignore_class`` (and labels outside 0..C-1) weigh 0."""

    def __init__(self, class_weights=None, *, num_classes: int | None = None, ignore_class: int | None = 255,
                 from_logits: bool = True, name: str = "sparse_categorical_crossentropy",
                 reduction: str = "sum_over_batch_size"):
        super().__init__(class_weights, num_classes, ignore_class, from_logits, name, reduction)

    def call(self, y_true, y_pred):
        classes = y_pred.shape[-1]
        labels = ops.cast(y_true, "int32")
        known = ops.logical_and(labels >= 0, labels < classes)
        if self.ignore_class is not None:
            known = ops.logical_and(known, labels != self.ignore_class)
        rows = ops.where(known, labels, classes)  # the table's last row: weight 0
        weight = ops.take(self._weight_table(classes), rows)
        ce = keras.losses.sparse_categorical_crossentropy(ops.where(known, labels, 0), y_pred,
                                                          from_logits=self.from_logits)
        return ce * ops.cast(weight, ce.dtype)


class CategoricalCrossentropy(_Weighted):
    """Cross-entropy of one-hot labels ``[B, H, W, C]`` against scores, each pixel weighted by its class
    (``class_weights`` as in :class:`SparseCategoricalCrossentropy`); an all-zero row (an ignored pixel)
    weighs 0."""

    def __init__(self, class_weights=None, *, num_classes: int | None = None, from_logits: bool = True,
                 name: str = "categorical_crossentropy", reduction: str = "sum_over_batch_size"):
        super().__init__(class_weights, num_classes, None, from_logits, name, reduction)

    def call(self, y_true, y_pred):
        classes = y_pred.shape[-1]
        per_class = self._weight_table(classes)[:classes]
        y_true = ops.cast(y_true, y_pred.dtype)
        weight = ops.sum(y_true * ops.cast(per_class, y_pred.dtype), axis=-1)
        ce = keras.losses.categorical_crossentropy(y_true, y_pred, from_logits=self.from_logits)
        return ce * weight


__all__ = ["SparseCategoricalCrossentropy", "CategoricalCrossentropy"]
