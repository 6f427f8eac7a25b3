"""Segmentation metrics for Keras that count labelled pixels only, exactly: :class:`Accuracy`,
:class:`MeanIoU` and :class:`Crossentropy`.

Training batches carry no weights, so a metric that should leave out ignored pixels (the ignore class,
the padding of a random crop) must do so itself; Keras' ``"accuracy"`` counts them as wrong. Evaluation
batches carry float weights (0 on the padding samples that fill the last batch and on ignored pixels),
which these metrics count exactly (float64 sums): pass them as ``weighted_metrics`` and training and
validation figures both count every labelled pixel once.

All three read labels through :func:`class_labels` (also the losses' definition of a labelled pixel):

* int labels ``[B, H, W]`` (or ``[B, H, W, 1]``) or one-hot ``[B, H, W, C]``; an all-zero one-hot row
  (daliloader's ignored pixel) and an int label outside ``0..C-1`` (every class map's ignore index: 255,
  or 65535 with over 255 classes) have no class, nor, where given, a label of class ``ignore_class``
  (Keras' name), int or one-hot alike. ``ignore_class`` is None by default: a fixed 255 would drop a real
  class of a class map with over 255 classes;
* logits or probabilities (the predicted class is their argmax).

Keras' own ``keras.metrics.MeanIoU`` wants class ids on both sides (``IoU``/``MeanIoU`` with
``sparse_y_pred=False`` take scores), counts in its ``dtype`` (float weights cast to an int dtype lose
their fractions) and reports the mean only. :class:`MeanIoU` here also reports the IoU of every class
(``per_class=True``: one log entry per class; :meth:`MeanIoU.per_class_iou` in any case). IoU of class
``k`` = ``TP / (TP + FP + FN)`` from the confusion matrix; the mean is over the classes that occur in the
labels or the predictions (a class absent from both has no IoU), as in Keras.

They compile under XLA (``model.compile(..., jit_compile=True)``, which Keras' ``"auto"`` picks on a
GPU): the confusion matrix is a ``segment_sum`` over its ``C * C`` cells, whose count is static, where
``bincount`` would need its length at compile time. All three are registered for ``model.save`` /
``keras.models.load_model`` as ``daliloader>MeanIoU``, ``daliloader>Accuracy`` and
``daliloader>Crossentropy`` (importing ``daliloader.metrics`` registers them).
"""

from __future__ import annotations

import re

import keras
import numpy as np
from keras import ops


def class_labels(y_true, y_pred, ignore_class: int | None, who: str):
    """Each pixel's class and whether it has one: int32 ``labels`` and bool ``known``, ``[B, H, W]``
    (0 where unknown), for predictions ``y_pred`` ``[B, H, W, C]`` (see the module's docstring).

    Labels with the predictions' rank are one-hot when their last axis is ``C``, int when it is 1 (Keras'
    ``[B, H, W, 1]``); any other depth raises, naming both numbers, instead of being misread, and so do
    labels whose rank or depth is not known when traced (which of the two they are cannot be told) and
    predictions of one score per pixel (a sigmoid output, whose argmax is always 0)."""
    y_true, y_pred = ops.convert_to_tensor(y_true), ops.convert_to_tensor(y_pred)
    classes, rank = y_pred.shape[-1], len(y_pred.shape)
    if classes == 1:
        raise ValueError(f"{who}: the predictions score 1 class per pixel (a sigmoid output?), whose argmax is "
                         "always class 0, so every pixel would count as right: give the model one output per class "
                         "(2 for a binary mask; a class map counts its background), or use Keras' "
                         "BinaryCrossentropy and BinaryIoU for one sigmoid output")
    try:
        true_rank = len(y_true.shape)
    except ValueError:  # (TensorFlow's shape of an unknown rank)
        true_rank = None
    if true_rank is None or (true_rank == rank and y_true.shape[-1] is None):
        raise ValueError(f"{who}: labels shaped {y_true.shape} (a rank or a last axis not known when traced) cannot "
                         f"be told int [B, H, W, 1] from one-hot [B, H, W, {classes}]: give them a static shape "
                         "(tf.ensure_shape, or set_shape in a tf.data map)")
    if true_rank == rank and y_true.shape[-1] != classes:
        if y_true.shape[-1] != 1:
            raise ValueError(f"{who}: the labels, shaped {tuple(y_true.shape)}, are one-hot over {y_true.shape[-1]} "
                             f"classes, but the predictions score {classes} (num_classes={classes}); give both the "
                             "dataset's number of classes (label_mode='onehot' gives one column per class of its "
                             "ClassMap), or pass int labels [B, H, W]")
        y_true, true_rank = ops.squeeze(y_true, axis=-1), rank - 1  # int labels [B, H, W, 1]
    if true_rank == rank:  # one-hot: an all-zero row is an ignored pixel
        known = ops.max(y_true, axis=-1) > 0
        labels = ops.cast(ops.argmax(y_true, axis=-1), "int32")
    elif true_rank == rank - 1:
        labels = ops.cast(y_true, "int32")
        known = ops.logical_and(labels >= 0, labels < classes)
    else:
        raise ValueError(f"{who}: labels shaped {tuple(y_true.shape)} for predictions shaped {tuple(y_pred.shape)}: "
                         "pass int labels [B, H, W] or one-hot labels [B, H, W, C]")
    if ignore_class is not None:
        known = ops.logical_and(known, labels != ignore_class)
    return ops.where(known, labels, 0), known


def pixel_weights(known, sample_weight=None, dtype: str = "float64"):
    """The weight of each pixel ``[B, H, W]``: its ``sample_weight`` (per pixel ``[B, H, W]`` or
    ``[B, H, W, 1]``, or per sample ``[B]``; None: 1) where ``known``, else 0. float64 (the metrics')
    keeps float weights exact in sums over many pixels, where float32 would drop low bits once a sum
    passes 2**24; the losses, which Keras reduces in float32, ask for float32."""
    if sample_weight is None:
        return ops.cast(known, dtype)
    weight = ops.cast(ops.convert_to_tensor(sample_weight), dtype)
    if len(weight.shape) == len(known.shape) + 1 and weight.shape[-1] == 1:
        weight = ops.squeeze(weight, axis=-1)
    while len(weight.shape) < len(known.shape):  # [B] per-sample weights
        weight = ops.expand_dims(weight, -1)
    return ops.where(known, weight, 0.0)  # not a product: 0 * NaN is NaN


class _PixelMean(keras.metrics.Metric):
    """The mean over labelled pixels of a per-pixel value (:meth:`values`), each pixel counted with its float
    weight in float64 sums (see the module's docstring). ``ignore_class``: a class whose pixels count for
    nothing, int or one-hot labels alike (None: none; labels that are no class never count)."""

    def __init__(self, ignore_class: int | None, name: str, dtype):
        super().__init__(name=name, dtype=dtype)
        self.ignore_class = ignore_class
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float64", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float64", name="count")

    def values(self, labels, y_pred):
        """Each pixel's value ``[B, H, W]``, for its class ``labels`` (0 where it has none) and ``y_pred``."""
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels, known = class_labels(y_true, y_pred, self.ignore_class, self.name)
        weight = pixel_weights(known, sample_weight)
        # scores in float32 at least, as Keras' losses compute (float16 or bfloat16 logits under a mixed
        # precision policy would give another cross-entropy than the loss's)
        scores = ops.convert_to_tensor(y_pred)
        if scores.dtype in ("float16", "bfloat16"):
            scores = ops.cast(scores, "float32")
        values = ops.cast(self.values(labels, scores), "float64")
        self.total.assign_add(ops.sum(ops.where(known, values * weight, 0.0)))
        self.count.assign_add(ops.sum(weight))

    def result(self):
        return ops.divide_no_nan(self.total, self.count)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "ignore_class": self.ignore_class}


@keras.saving.register_keras_serializable(package="daliloader")
class Accuracy(_PixelMean):
    """The share of labelled pixels whose predicted class is their label, each pixel counted with its float
    weight (see the module's docstring). ``ignore_class``: a class whose pixels count for nothing, int or
    one-hot labels alike (None: none; labels that are no class never count)."""

    def __init__(self, ignore_class: int | None = None, name: str = "accuracy", dtype=None):
        super().__init__(ignore_class, name, dtype)
        self._direction = "up"  # for EarlyStopping and ModelCheckpoint without mode=, as Keras' own metrics

    def values(self, labels, y_pred):
        return ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), labels)


@keras.saving.register_keras_serializable(package="daliloader")
class Crossentropy(_PixelMean):
    """The mean cross-entropy over labelled pixels, each pixel counted with its float weight (see the
    module's docstring; ``ignore_class`` as :class:`Accuracy`'s), of int or one-hot labels, from
    logits (``from_logits=True``, the default, as daliloader's losses) or probabilities: the loss of
    :mod:`daliloader.losses` without class weights, summed over every batch before dividing. Keras'
    ``val_loss`` instead averages the batches' losses weighted by their size, so padding moves it: passed
    as a weighted metric, this is the exact figure over an evaluation epoch, on one device or several."""

    def __init__(self, from_logits: bool = True, ignore_class: int | None = None, name: str = "crossentropy",
                 dtype=None):
        super().__init__(ignore_class, name, dtype)
        self.from_logits = from_logits
        self._direction = "down"  # for EarlyStopping and ModelCheckpoint without mode=, as Keras' own metrics

    def values(self, labels, y_pred):
        return keras.losses.sparse_categorical_crossentropy(labels, y_pred, from_logits=self.from_logits)

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}


def _entry(class_name: str) -> str:
    """The log entry of a class's IoU: ``iou_`` and its name, characters other than letters, digits and _
    as _."""
    return f"iou_{re.sub(r'[^0-9A-Za-z_]+', '_', class_name)}"


@keras.saving.register_keras_serializable(package="daliloader")
class MeanIoU(keras.metrics.Metric):
    """Mean intersection over union of ``num_classes`` classes (see the module's docstring).

    ``class_names`` (with ``per_class=True``) name the per-class entries ``iou_<name>`` in Keras' logs
    (default: ``iou_<k>``).
    """

    def __init__(self, num_classes: int, ignore_class: int | None = None, per_class: bool = False,
                 class_names=None, name: str = "mean_iou", dtype=None):
        super().__init__(name=name, dtype=dtype)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        if class_names is not None and len(class_names) != num_classes:
            raise ValueError(f"class_names has {len(class_names)} names for num_classes={num_classes}")
        self.num_classes, self.ignore_class, self.per_class = num_classes, ignore_class, per_class
        self.class_names = list(class_names) if class_names is not None else [str(k) for k in range(num_classes)]
        keys = [_entry(name) for name in self.class_names]
        same = sorted({k for k in keys if keys.count(k) > 1})
        if same:
            raise ValueError(f"class_names give two classes the same log entry {same[0]!r} (each name's characters "
                             "other than letters, digits and _ become _): one would hide the other; name them apart")
        self.confusion = self.add_variable(shape=(num_classes, num_classes), initializer="zeros", dtype="float64",
                                           name="confusion")  # [label, prediction]
        self._direction = "up"  # for EarlyStopping and ModelCheckpoint without mode=, as Keras' own metrics

    def update_state(self, y_true, y_pred, sample_weight=None):
        c = self.num_classes
        y_pred = ops.convert_to_tensor(y_pred)
        if y_pred.shape[-1] != c:
            raise ValueError(f"{self.name}: predictions have {y_pred.shape[-1]} scores per pixel for num_classes={c}")
        labels, known = class_labels(y_true, y_pred, self.ignore_class, self.name)
        weight = pixel_weights(known, sample_weight)
        cells = labels * c + ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        counts = ops.segment_sum(ops.reshape(weight, [-1]), ops.reshape(cells, [-1]), num_segments=c * c)
        self.confusion.assign_add(ops.reshape(counts, (c, c)))

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
            entries[_entry(name)] = ious[k]  # (0 for a class absent from labels and predictions)
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


__all__ = ["Accuracy", "Crossentropy", "MeanIoU", "class_labels", "pixel_weights"]
