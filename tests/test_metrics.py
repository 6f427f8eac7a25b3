"""daliloader/metrics.py: dl.metrics.MeanIoU, Accuracy and Crossentropy against a numpy reference on the evaluation
batches of every backend (ignored pixels, padding weighted 0, float weights), against Keras' own MeanIoU
where Keras is exact, inside Keras under XLA, and on Keras' [B, H, W, 1] labels.

Two tests check the metrics and the losses together; they are here because their main assertion is on the
metrics: test_metrics_and_losses_compile_under_xla (fit's and evaluate's reports, accuracy and mean IoU with
the loss, equal with and without XLA) and test_metrics_read_int_labels_shaped_bhw1_and_refuse_another_one_hot_depth
(the metrics read [B, H, W, 1] labels; metrics and losses refuse one-hot labels of another depth). The losses'
own tests: tests/test_losses.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import eval_batches
from test_training import loaders

import daliloader as dl

pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


# ---------------------------------------------------------------- the IoU metric
def confusion(labels, predicted, weights, num_classes, ignore=255):
    """The numpy reference: confusion[label, prediction], weighted, ignoring ignore and out-of-range labels."""
    keep = (labels >= 0) & (labels < num_classes) & (labels != ignore)
    conf = np.zeros((num_classes, num_classes))
    np.add.at(conf, (labels[keep], predicted[keep]), weights[keep])
    return conf


def iou(conf):
    tp = np.diag(conf)
    union = conf.sum(0) + conf.sum(1) - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, tp / union, np.nan)


@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_mean_iou_accuracy_and_crossentropy_are_the_numpy_reference_on_every_backends_batches(synth_data, backend,
                                                                                              label_mode):
    """Evaluation batches of every backend (ignored pixels, padding weighted 0), random logits: the mean
    and per-class IoU, the accuracy and the cross-entropy (summed over the epoch before dividing) equal the
    reference, with int or one-hot labels; float weights count exactly."""
    n = synth_data.classes.num_classes
    batches = eval_batches(backend, synth_data, batch_size=3, image_size=(64, 80), label_mode=label_mode)
    rng = np.random.default_rng(0)
    metric = dl.metrics.MeanIoU(n, per_class=True, class_names=synth_data.classes.names)
    accuracy, crossentropy = dl.metrics.Accuracy(), dl.metrics.Crossentropy()
    conf, ce_sum, weight_sum = np.zeros((n, n)), 0.0, 0.0
    for x, y, w in batches:
        logits = rng.normal(size=x.shape[:3] + (n,)).astype(np.float32)
        labels = np.where(y.any(-1), y.argmax(-1), 255) if label_mode == "onehot" else y
        w = w * rng.choice([0.25, 1.0, 3.5], size=w.shape).astype(np.float32)  # float weights stay exact
        metric.update_state(y, logits, w)
        accuracy.update_state(y, logits, w)
        crossentropy.update_state(y, logits, w)
        conf += confusion(labels, logits.argmax(-1), w, n)
        known = labels < n
        log_p = logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
        ce_sum -= (w[known] * log_p[known, labels[known]]).sum()
        weight_sum += w[known].sum()
    assert abs(float(accuracy.result()) - np.trace(conf) / conf.sum()) < 1e-12
    assert float(crossentropy.result()) == pytest.approx(ce_sum / weight_sum, rel=1e-6)
    want = iou(conf)
    np.testing.assert_allclose(metric.per_class_iou(), want, rtol=1e-12, equal_nan=True)
    result = metric.result()
    assert abs(float(result["mean_iou"]) - np.nanmean(want)) < 1e-12
    road = synth_data.classes.names.index("Road")
    assert abs(float(result["iou_Road"]) - np.nan_to_num(want[road])) < 1e-12


def test_mean_iou_agrees_with_keras_where_keras_is_exact(synth_data):
    """With 0/1 weights and class-id predictions, Keras' own MeanIoU(ignore_class=255) is the anchor."""
    n = synth_data.classes.num_classes
    ours, theirs = dl.metrics.MeanIoU(n), keras.metrics.MeanIoU(n, ignore_class=255, sparse_y_pred=True)
    rng = np.random.default_rng(1)
    for x, y, w in eval_batches("dali-cpu", synth_data, batch_size=3, image_size=(64, 80), label_mode="int"):
        logits = rng.normal(size=x.shape[:3] + (n,)).astype(np.float32)
        ours.update_state(y, logits, w)
        theirs.update_state(y, logits.argmax(-1), w)
    assert abs(float(ours.result()) - float(theirs.result())) < 1e-6


# ---------------------------------------------------------------- the metrics and losses inside Keras
@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_metrics_and_losses_compile_under_xla(synth_data, backend, label_mode):
    """jit_compile=True (what Keras' "auto" picks where TensorFlow sees a GPU): fit and evaluate run with
    dl.losses and dl.metrics, int and one-hot labels, and report what the same model reports without XLA."""
    n = synth_data.classes.num_classes
    loss = dl.losses.SparseCategoricalCrossentropy if label_mode == "int" else dl.losses.CategoricalCrossentropy
    inputs = keras.Input((48, 64, 3))
    model = keras.Model(inputs, keras.layers.Conv2D(n, 3, padding="same")(inputs))
    start = model.get_weights()
    reports = []
    for jit in (True, False):  # the same crops: fresh loaders, one seed
        train, val = loaders(backend, synth_data, batch_size=3, image_size=(48, 64), label_mode=label_mode, seed=0)
        model.set_weights(start)
        model.compile(keras.optimizers.SGD(learning_rate=0.0), loss([1.0 + k / n for k in range(n)]),
                      weighted_metrics=[dl.metrics.Accuracy(), dl.metrics.MeanIoU(n, per_class=True)],
                      jit_compile=jit)
        fitted = model.fit(train, epochs=1, verbose=0).history
        reports.append({**{k: v[0] for k, v in fitted.items()}, **model.evaluate(val, verbose=0, return_dict=True)})
    assert 0 < reports[0]["accuracy"] < 1 and reports[0] == pytest.approx(reports[1], rel=1e-5, abs=1e-9)


def test_metrics_read_int_labels_shaped_bhw1_and_refuse_another_one_hot_depth():
    """Keras' [B, H, W, 1] int labels are squeezed (Keras' MeanIoU is the anchor), not misread as one-hot;
    one-hot labels over another number of classes raise, naming both numbers, in the metrics and losses."""
    rng = np.random.default_rng(6)
    labels = rng.choice([0, 1, 2, 255], size=(2, 4, 5))
    logits = rng.normal(size=(2, 4, 5, 3)).astype(np.float32)
    deep = {}
    for make in (lambda: dl.metrics.MeanIoU(3), dl.metrics.Accuracy):
        flat, deep[make] = make(), make()
        flat.update_state(labels, logits)
        deep[make].update_state(labels[..., None], logits)
        assert float(deep[make].result()) == float(flat.result())
        with pytest.raises(ValueError, match=r"one-hot over 4 classes, but the predictions score 3 \(num_classes=3\)"):
            make().update_state(np.eye(4)[np.minimum(labels, 3)], logits)
    anchor = keras.metrics.MeanIoU(3, ignore_class=255, sparse_y_pred=False)
    anchor.update_state(labels[..., None], logits)
    assert abs(float(anchor.result()) - float(next(iter(deep.values())).result())) < 1e-6
    with pytest.raises(ValueError, match="one-hot over 4 classes, but the predictions score 3"):
        dl.losses.CategoricalCrossentropy()(np.eye(4, dtype=np.float32)[np.minimum(labels, 3)], logits)
    with pytest.raises(ValueError, match="not one-hot .* use SparseCategoricalCrossentropy"):
        dl.losses.CategoricalCrossentropy()(labels.astype(np.float32), logits)


def test_class_255_counts_where_a_class_map_has_over_255_classes():
    """With over 255 classes the ignore index is 65535 and 255 is a class: the metrics and the loss count
    its pixels by default (a fixed ignore_class=255 dropped them), and drop the ignore index."""
    labels = np.array([[[10, 255, 299, 65535]]])
    logits = np.full((1, 1, 4, 300), -10.0, np.float32)
    logits[..., 255] = 10.0  # class 255 predicted everywhere
    accuracy, iou = dl.metrics.Accuracy(), dl.metrics.MeanIoU(300)
    accuracy.update_state(labels, logits)
    iou.update_state(labels, logits)
    assert float(accuracy.result()) == pytest.approx(1 / 3)  # 255 right, 10 and 299 wrong, 65535 not counted
    assert float(iou.result()) == pytest.approx(1 / 3 / 3)  # classes 10, 255, 299 occur: IoU 0, 1/3, 0
    loss = dl.losses.SparseCategoricalCrossentropy()
    ce = -np.log(np.exp(10) / (np.exp(10) + 299 * np.exp(-10)))
    assert float(loss(labels, logits)) == pytest.approx((ce + 2 * (ce + 20)) / 3, rel=1e-5)


def test_ignore_class_leaves_out_a_class_of_int_and_one_hot_labels_alike():
    """ignore_class names a class whose pixels count for nothing (background 0, say), whatever the labels'
    form: it used to be applied to int labels only."""
    rng = np.random.default_rng(8)
    labels = rng.choice([0, 1, 2, 255], size=(2, 6, 7))
    one_hot = np.eye(4, dtype=np.float32)[np.minimum(labels, 3)][..., :3]  # 255 -> all-zero row
    logits = rng.normal(size=(2, 6, 7, 3)).astype(np.float32)
    for make in (lambda: dl.metrics.Accuracy(ignore_class=0), lambda: dl.metrics.MeanIoU(3, ignore_class=0)):
        from_int, from_one_hot = make(), make()
        from_int.update_state(labels, logits)
        from_one_hot.update_state(one_hot, logits)
        assert float(from_one_hot.result()) == float(from_int.result())
    counted = (labels == 1) | (labels == 2)
    hits = logits.argmax(-1) == labels
    accuracy = dl.metrics.Accuracy(ignore_class=0)
    accuracy.update_state(one_hot, logits)
    assert float(accuracy.result()) == pytest.approx(hits[counted].mean())


@pytest.mark.parametrize("monitor, best", [("val_crossentropy", min), ("val_mean_iou", max), ("val_accuracy", max)])
def test_early_stopping_and_checkpoints_know_which_way_each_metric_improves(monitor, best):
    """docs/training.md says to monitor val_crossentropy: EarlyStopping and ModelCheckpoint refused it (and
    the other two) without mode=, as Keras could not tell whether it should rise or fall."""
    metrics = {"val_crossentropy": dl.metrics.Crossentropy(), "val_mean_iou": dl.metrics.MeanIoU(3),
               "val_accuracy": dl.metrics.Accuracy()}
    model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Conv2D(3, 1)])
    model.compile("sgd", dl.losses.SparseCategoricalCrossentropy(), weighted_metrics=[metrics[monitor]])
    rng = np.random.default_rng(0)
    x, y = rng.random((4, 4, 4, 3), np.float32), rng.integers(0, 3, (4, 4, 4))
    stop = keras.callbacks.EarlyStopping(monitor=monitor)
    model.fit(x, y, validation_data=(x, y), epochs=2, verbose=0, callbacks=[stop])  # refused here before
    assert best(1.0, 2.0) == (1.0 if bool(stop.monitor_op(1.0, 2.0)) else 2.0)


def test_one_score_per_pixel_and_labels_of_no_known_shape_are_refused():
    """A one-output (sigmoid) model scored 1.0 and lost 0 (the argmax of one score is always class 0, and
    int labels other than 0 count as no class); labels whose depth or rank is unknown when traced were read
    as one-hot (or crashed): each is refused, in the metrics and the losses."""
    import tensorflow as tf

    labels = np.array([[[0, 1], [1, 255]]])
    for make in (dl.metrics.Accuracy, lambda: dl.metrics.MeanIoU(1), dl.metrics.Crossentropy):
        with pytest.raises(ValueError, match="1 class per pixel .* BinaryIoU"):
            make().update_state(labels, np.zeros((1, 2, 2, 1), np.float32))
    with pytest.raises(ValueError, match="1 class per pixel"):
        dl.losses.SparseCategoricalCrossentropy()(labels, np.zeros((1, 2, 2, 1), np.float32))
    logits = tf.constant(np.zeros((1, 2, 2, 3), np.float32))
    metric = dl.metrics.Accuracy()
    for shape in ([None, None, None, None], None):
        update = tf.function(lambda y: metric.update_state(y, logits), input_signature=[tf.TensorSpec(shape, tf.int32)])
        with pytest.raises(ValueError, match="cannot be told int .* from one-hot .* static shape"):
            update.get_concrete_function()


def test_the_crossentropy_metric_is_the_loss_for_half_precision_logits():
    """The metric computed bfloat16 logits in bfloat16 (1.8e-4 off the loss, which Keras computes in
    float32): it now casts them as the loss does."""
    import tensorflow as tf

    rng = np.random.default_rng(11)
    labels = rng.choice([0, 1, 2, 255], size=(2, 8, 8))
    logits = rng.normal(scale=4.0, size=(2, 8, 8, 3)).astype(np.float32)
    for dtype in (tf.bfloat16, tf.float16):
        half = tf.cast(logits, dtype)
        metric = dl.metrics.Crossentropy()
        metric.update_state(labels, half)
        loss = dl.losses.SparseCategoricalCrossentropy()(labels, tf.cast(half, tf.float32))
        assert float(metric.result()) == pytest.approx(float(loss), rel=1e-6)


def test_class_names_that_share_a_log_entry_are_refused():
    """Two class names that differ only in characters a log entry cannot hold ("road side", "road-side")
    gave one entry iou_road_side, the second class's IoU in place of the first's."""
    with pytest.raises(ValueError, match="same log entry 'iou_road_side'"):
        dl.metrics.MeanIoU(3, per_class=True, class_names=["road side", "road-side", "sky"])


def test_num_classes_refuses_a_model_with_fewer_outputs_than_the_dataset_has_classes():
    """An int label the model has no output for counts as no class: a model of 5 outputs on data of 6
    classes would leave class 5 out without an error. Given the dataset's num_classes, the loss (and
    MeanIoU) refuse such a model."""
    labels, logits = np.array([[[0, 5]]]), np.zeros((1, 1, 2, 5), np.float32)
    with pytest.raises(ValueError, match="num_classes=6 for predictions with 5 scores per pixel: give the model"):
        dl.losses.SparseCategoricalCrossentropy(num_classes=6)(labels, logits)
    with pytest.raises(ValueError, match="5 scores per pixel for num_classes=6"):
        dl.metrics.MeanIoU(6).update_state(labels, logits)
