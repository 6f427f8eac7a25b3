"""daliloader/losses.py: dl.losses' class-weighted cross-entropies (int and one-hot labels) against
their formula, per pixel and per evaluation batch of every backend (the mean over labelled pixels: ignored
pixels and padding count in neither the sum nor the divisor), saved and loaded by Keras alone, and class
weights that move the loss and nothing else.

Two tests check the losses and the metrics together; they are here because what they vary is the loss:
test_losses_and_metrics_survive_save_and_load (the loaded model's loss, its config and its report) and
test_metrics_with_and_without_class_weights_agree (class weights in the loss leave fit's and evaluate's
metrics as they are; only the loss moves). The metrics' own tests: tests/test_metrics.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import eval_batches
from test_training import loaders

import daliloader as dl

pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


# ---------------------------------------------------------------- the loss against its formula
def test_the_loss_weighs_each_pixel_by_its_class():
    """Against the formula: per pixel, the cross-entropy times the weight of its true class, averaged over
    the labelled pixels (ignored ones count in neither the sum nor the divisor)."""
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    labels = rng.choice([0, 1, 2, 3, 4, 255], size=(2, 3, 4))
    weights = np.array([0.5, 1.0, 2.0, 3.0, 0.0])
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    known = labels < 5
    ce = -np.log(np.take_along_axis(p, np.where(known, labels, 0)[..., None], -1)[..., 0])
    want = np.sum(ce * np.where(known, weights[np.minimum(labels, 4)], 0)) / known.sum()  # labelled pixels only
    got = dl.losses.SparseCategoricalCrossentropy(list(weights))(labels, logits)
    assert float(got) == pytest.approx(want, rel=1e-5)
    onehot = np.eye(5, dtype=np.float32)[np.minimum(labels, 4)] * known[..., None]
    assert float(dl.losses.CategoricalCrossentropy(list(weights))(onehot, logits)) == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="5 class weights .* for predictions with 6 scores"):
        dl.losses.SparseCategoricalCrossentropy(list(weights))(labels, np.zeros((2, 3, 4, 6), np.float32))
    assert float(dl.losses.SparseCategoricalCrossentropy(list(weights))(labels[..., None], logits)) == \
        pytest.approx(want, rel=1e-5)  # Keras' [B, H, W, 1]


def test_sample_weights_take_the_metrics_shapes():
    """Per pixel [B, H, W] or [B, H, W, 1], or per sample [B] (the shapes the metrics take): each labelled
    pixel's cross-entropy weighs its weight, the sum divided by the weights of the labelled pixels."""
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    labels = rng.choice([0, 1, 2, 3, 4, 255], size=(2, 3, 4))
    pixel = rng.uniform(0.5, 2.0, size=(2, 3, 4)).astype(np.float32)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    known = labels < 5
    ce = -np.log(np.take_along_axis(p, np.where(known, labels, 0)[..., None], -1)[..., 0])
    loss = dl.losses.SparseCategoricalCrossentropy()
    for given, weight in ((pixel, pixel), (pixel[..., None], pixel),
                          (np.array([1.0, 3.0], np.float32), np.array([1.0, 3.0])[:, None, None] * np.ones((2, 3, 4)))):
        want = np.sum(ce * weight * known) / np.sum(weight * known)
        assert float(loss(labels, logits, sample_weight=given)) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_the_loss_is_the_mean_over_labelled_pixels_of_each_evaluation_batch(synth_data, backend, label_mode):
    """8 pairs in batches of 3, fit to 64x64 (the padding is ignored), the last batch filled with a
    weight-0 copy: each batch's loss is the class-weighted cross-entropy summed over the labelled pixels
    of its real samples, divided by their weight (their count): neither ignored pixels nor the padding
    sample count, so a batch's loss does not depend on how much padding it holds."""
    n = synth_data.classes.num_classes
    class_weights = np.array([0.5 + k / 8 for k in range(n)])
    loss = (dl.losses.SparseCategoricalCrossentropy if label_mode == "int" else
            dl.losses.CategoricalCrossentropy)(list(class_weights))
    rng = np.random.default_rng(8)
    batches = eval_batches(backend, synth_data, batch_size=3, image_size=(64, 64), label_mode=label_mode)
    assert not batches[-1][2][2].any() and (batches[0][2] == 0).any()  # a padding sample, ignored pixels
    for x, y, w in batches:
        logits = rng.normal(size=x.shape[:3] + (n,))
        labels = np.where(y.any(-1), y.argmax(-1), 255) if label_mode == "onehot" else y
        known = labels < n
        log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        ce = -np.take_along_axis(log_p, np.where(known, labels, 0)[..., None], -1)[..., 0]
        want = np.sum(np.where(known, ce * class_weights[np.minimum(labels, n - 1)] * w, 0)) / np.sum(w * known)
        assert float(loss(y, logits.astype(np.float32), sample_weight=w)) == pytest.approx(want, rel=1e-5)


# ---------------------------------------------------------------- the losses inside Keras
@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_losses_and_metrics_survive_save_and_load(tmp_path, label_mode):
    """A model compiled with dl.losses (class weights) and dl.metrics is saved and loaded by Keras alone
    (they are registered as daliloader>...), and the loaded model reports the same; each object's config
    makes it again."""
    n = 4
    rng = np.random.default_rng(7)
    labels = rng.choice([0, 1, 2, 3, 255], size=(3, 6, 8))
    y = (labels if label_mode == "int"
         else np.eye(n, dtype=np.float32)[np.minimum(labels, n - 1)] * (labels < n)[..., None])
    loss = (dl.losses.SparseCategoricalCrossentropy({1: 2.0, 3: 0.5}, num_classes=n) if label_mode == "int" else
            dl.losses.CategoricalCrossentropy([1.0, 2.0, 1.0, 0.5]))
    metrics = [dl.metrics.Accuracy(), dl.metrics.MeanIoU(n, per_class=True, class_names=["a", "b", "c", "d"]),
               dl.metrics.Crossentropy(ignore_class=2)]
    for obj in (loss, *metrics):
        assert type(obj).from_config(obj.get_config()).get_config() == obj.get_config()
    inputs = keras.Input((6, 8, 3))
    model = keras.Model(inputs, keras.layers.Conv2D(n, 1)(inputs))
    model.compile("sgd", loss, weighted_metrics=metrics)
    x, w = rng.normal(size=(3, 6, 8, 3)).astype(np.float32), rng.choice([0.0, 0.5, 1.0], size=(3, 6, 8))
    before = model.evaluate(x, y, sample_weight=w, verbose=0, return_dict=True)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert type(loaded.loss) is type(loss) and loaded.loss.get_config() == loss.get_config()
    assert loaded.evaluate(x, y, sample_weight=w, verbose=0, return_dict=True) == pytest.approx(before, rel=1e-6)
    assert "iou_d" in before and "crossentropy" in before


# ---------------------------------------------------------------- class weights in the loss only
@pytest.mark.slow
@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_metrics_with_and_without_class_weights_agree(synth_data, backend, label_mode):
    """The same model (learning rate 0, so the same predictions), compiled with and without class weights
    in the loss: fit's training metrics and evaluate's metrics are the same; only the loss moves."""
    n = synth_data.classes.num_classes
    kw = dict(batch_size=2, image_size=(48, 64), label_mode=label_mode, seed=3)
    loss = dl.losses.SparseCategoricalCrossentropy if label_mode == "int" else dl.losses.CategoricalCrossentropy
    weights = [0.01 + k / 4 for k in range(n)]
    keras.utils.set_random_seed(0)  # a fixed model: an unseeded one scored 0 accuracy on this val set in one run
    inputs = keras.Input((48, 64, 3))
    model = keras.Model(inputs, keras.layers.Conv2D(n, 3, padding="same")(inputs))
    start = model.get_weights()
    reports = []
    for class_weights in (None, weights):
        train, val = loaders(backend, synth_data, **kw)
        model.set_weights(start)
        model.compile(keras.optimizers.SGD(learning_rate=0.0), loss(class_weights),
                      weighted_metrics=[dl.metrics.Accuracy(), dl.metrics.MeanIoU(n)])
        history = model.fit(train, epochs=1, verbose=0).history
        reports.append((history, model.evaluate(val, verbose=0, return_dict=True)))
    (fit_a, eval_a), (fit_b, eval_b) = reports
    for name in ("accuracy", "mean_iou"):
        assert fit_a[name] == pytest.approx(fit_b[name], abs=1e-6) and \
            eval_a[name] == pytest.approx(eval_b[name], abs=1e-6)
        assert 0 < eval_a[name] < 1
    assert eval_a["loss"] != pytest.approx(eval_b["loss"], rel=1e-3)
