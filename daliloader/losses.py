"""Cross-entropy losses for segmentation in Keras: the mean over labelled pixels, with class weights.

Class weights belong to the loss. Keras hands a batch's ``sample_weight`` to the loss and to
``weighted_metrics`` alike, so class weights carried in the batches would weigh the metrics too
(accuracy and IoU counted per class weight, not per pixel). These losses weigh each pixel's cross-entropy
by the weight of its true class, as segmentation_models' and mmseg's losses do; the batches keep only
the 0/1 weights of evaluation (padding samples, ignored pixels), which leave the metrics exact.

What a batch's loss is: the sum over labelled pixels of ``class weight x sample weight x cross-entropy``,
divided by the sum of the sample weights over labelled pixels. A pixel is labelled when its label is a class
(:func:`daliloader.metrics.class_labels`, the metrics' definition): not ``ignore_class`` where given, not
outside ``0..C-1``, not an all-zero one-hot row. So in training (no sample weights) the divisor is the
number of labelled pixels, and without class weights the loss is Keras'
``SparseCategoricalCrossentropy(ignore_class=255)`` (with up to 255 classes); in evaluation the weight-0
padding samples that fill the last batch count in neither the sum nor the divisor, so a batch's loss does
not depend on how much padding it holds (Keras' ``val_loss``, an average of the batches' losses, still does:
:class:`daliloader.metrics.Crossentropy` is the exact figure). The mechanism: each pixel's sample weight
(per pixel ``[B, H, W]`` or ``[B, H, W, 1]``, or per sample ``[B]``) is set to 0 where the pixel is not
labelled (:func:`daliloader.metrics.pixel_weights`, the metrics' rule) before Keras' reduction
``"mean_with_sample_weight"`` divides by their sum, as Keras' own ``ignore_class`` does with a mask.

``class_weights``: a sequence (one per class) or a dict ``{class: weight}`` as Keras' ``class_weight``
(classes it leaves out weigh 1; it then needs ``num_classes``); None: every class 1. Both losses are
registered for ``model.save`` / ``keras.models.load_model`` as ``daliloader>SparseCategoricalCrossentropy``
and ``daliloader>CategoricalCrossentropy`` (importing ``daliloader.losses`` registers them).
"""

from __future__ import annotations

import keras
from keras import ops

from .metrics import class_labels, pixel_weights
from .spec import class_weight_list
from .stages import weight_table

#: Keras' reduction that divides by the sum of the sample weights, which the mask of labelled pixels
#: enters: the mean over labelled pixels (the default "sum_over_batch_size" divides by every pixel).
REDUCTION = "mean_with_sample_weight"


class _Weighted(keras.losses.Loss):
    def __init__(self, class_weights, num_classes, ignore_class, from_logits, name, reduction, dtype):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.class_weights = None if class_weights is None else class_weight_list(
            class_weights, num_classes, ignore_class, "the loss's classes")
        self.num_classes = len(self.class_weights) if self.class_weights is not None else num_classes
        self.ignore_class, self.from_logits = ignore_class, from_logits

    def __call__(self, y_true, y_pred, sample_weight=None):
        """The reduced loss, the sample weights set to 0 first on unlabelled pixels (see the module)."""
        _, known = class_labels(y_true, y_pred, self.ignore_class, self.name)
        weight = pixel_weights(known, sample_weight, "float32")  # the metrics' rule: one per pixel
        return super().__call__(y_true, y_pred, sample_weight=weight)

    def _per_class(self, classes: int):
        """The weight of each of the ``classes`` classes (float32 ``[classes]``), checked against num_classes."""
        if self.num_classes is not None and self.num_classes != classes:
            given = (f"{len(self.class_weights)} class weights (num_classes={self.num_classes})"
                     if self.class_weights else f"num_classes={self.num_classes}")
            raise ValueError(f"{self.name}: {given} for predictions with {classes} scores per pixel: give the model "
                             "one output per class of the dataset (an int label it has no output for would count as "
                             "ignored)")
        return ops.convert_to_tensor(weight_table(classes, self.class_weights)[:classes])

    def get_config(self):
        return {**super().get_config(), "class_weights": None if self.class_weights is None else
                list(self.class_weights), "num_classes": self.num_classes, "from_logits": self.from_logits,
                "dtype": self.dtype}


@keras.saving.register_keras_serializable(package="daliloader")
class SparseCategoricalCrossentropy(_Weighted):
    """Cross-entropy of int labels ``[B, H, W]`` (or ``[B, H, W, 1]``) against scores ``[B, H, W, C]``,
    each pixel weighted by its class, averaged over labelled pixels (see the module's docstring): pixels
    of ``ignore_class`` and labels outside 0..C-1 count for nothing."""

    def __init__(self, class_weights=None, *, num_classes: int | None = None, ignore_class: int | None = None,
                 from_logits: bool = True, name: str = "sparse_categorical_crossentropy",
                 reduction: str = REDUCTION, dtype=None):
        super().__init__(class_weights, num_classes, ignore_class, from_logits, name, reduction, dtype)

    def call(self, y_true, y_pred):
        labels, known = class_labels(y_true, y_pred, self.ignore_class, self.name)
        weight = ops.take(self._per_class(y_pred.shape[-1]), labels)
        ce = keras.losses.sparse_categorical_crossentropy(labels, y_pred, from_logits=self.from_logits)
        return _masked(ce * ops.cast(weight, ce.dtype), known)

    def get_config(self):
        return {**super().get_config(), "ignore_class": self.ignore_class}


@keras.saving.register_keras_serializable(package="daliloader")
class CategoricalCrossentropy(_Weighted):
    """Cross-entropy of one-hot labels ``[B, H, W, C]`` against scores, each pixel weighted by its class
    (``class_weights`` as in :class:`SparseCategoricalCrossentropy`), averaged over labelled pixels: an
    all-zero row (an ignored pixel) counts for nothing."""

    def __init__(self, class_weights=None, *, num_classes: int | None = None, from_logits: bool = True,
                 name: str = "categorical_crossentropy", reduction: str = REDUCTION, dtype=None):
        super().__init__(class_weights, num_classes, None, from_logits, name, reduction, dtype)

    def call(self, y_true, y_pred):
        if len(y_true.shape) != len(y_pred.shape) or y_true.shape[-1] == 1 != y_pred.shape[-1]:
            raise ValueError(f"{self.name}: labels shaped {tuple(y_true.shape)} are not one-hot for predictions "
                             f"shaped {tuple(y_pred.shape)}: for int labels use SparseCategoricalCrossentropy "
                             "(label_mode='int'), or load label_mode='onehot'")
        _, known = class_labels(y_true, y_pred, None, self.name)  # checks the one-hot depth
        y_true = ops.cast(y_true, y_pred.dtype)
        weight = ops.sum(y_true * ops.cast(self._per_class(y_pred.shape[-1]), y_pred.dtype), axis=-1)
        ce = keras.losses.categorical_crossentropy(y_true, y_pred, from_logits=self.from_logits)
        return _masked(ce * weight, known)


def _masked(loss, known):
    """``loss``, 0 where not ``known`` (those pixels' weight is 0 too: see ``__call__``)."""
    return ops.where(known, loss, 0.0)


__all__ = ["SparseCategoricalCrossentropy", "CategoricalCrossentropy"]
