"""Evaluation done right: evaluation mode on every backend, class weights in the loss only, the IoU
metric against a numpy reference, and predictions per file."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import batch_indices, one_epoch
from test_training import loaders

import daliloader as dl

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def eval_batches(backend, data, **kw):
    """One evaluation epoch of any backend, as numpy (x, y, w)."""
    return one_epoch(backend, data, training=False, **kw)


# ---------------------------------------------------------------- evaluation mode
def test_evaluation_mode_defaults(index_data):
    plan = dl.make_plan(index_data, batch_size=3, training=False)
    assert plan.spec.image_size == (24, 32) and plan.spec.crop == "center" and plan.spec.flip == 0
    assert not plan.sampler.shuffle and not plan.sampler.drop_remainder
    assert plan.outputs == ("image", "labels", "weight")
    assert dl.make_plan(index_data, batch_size=3, image_size=64, training=False).spec.crop == "fit"
    train = dl.make_plan(index_data, batch_size=3)
    assert train.spec.crop == "random" and train.sampler.shuffle and train.sampler.drop_remainder
    for option in (dict(rotate=5), dict(flip=0.5), dict(scale=(0.5, 2.0)), dict(hue=5), dict(crop="random")):
        with pytest.raises(dl.SpecError, match=r"tf_dataset\(training=False\) draws nothing at random, but got"):
            dl.tf_dataset(index_data, batch_size=3, training=False, backend="dali-cpu", **option)
    with pytest.raises(dl.SpecError, match="training must be True"):
        dl.make_plan(index_data, training="no")


def test_evaluation_sees_every_sample_once_in_order_on_every_backend(index_data, backend):
    """10 pairs, batch 3: 4 batches on every backend, the last padded with two weight-0 samples, the real
    samples in the dataset's order; twice the same."""
    for _ in range(2):
        batches = eval_batches(backend, index_data, batch_size=3, label_mode="int")
        assert [b[0].shape[0] for b in batches] == [3, 3, 3, 3]
        seen = [i for x, _, w in batches for i, ww in zip(batch_indices(x), w) if ww.any()]
        assert seen == list(range(10))
        assert not batches[-1][2][1:].any()


def test_image_size_left_out_takes_the_images_own_size_or_names_the_sizes(index_data, mirror_data):
    x, y = next(iter(dl.tf_dataset(index_data, batch_size=2, label_mode="int", backend="dali-cpu")))
    assert x.shape == (2, 24, 32, 3) and y.shape == (2, 24, 32)
    with pytest.raises(dl.DataError, match=r"image_size was left out.*6 sizes: .*90x130 \(1 image\).*Pass "
                                           r"image_size=\(height, width\)"):
        dl.tf_dataset(mirror_data, batch_size=2, backend="dali-cpu")


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
def test_mean_iou_and_accuracy_are_the_numpy_reference_on_every_backends_batches(synth_data, backend, label_mode):
    """Evaluation batches of every backend (ignored pixels, padding weighted 0), random logits: the mean
    and per-class IoU, and the accuracy, equal the reference, with int or one-hot labels; float weights
    count exactly."""
    n = synth_data.classes.num_classes
    batches = eval_batches(backend, synth_data, batch_size=3, image_size=(64, 80), label_mode=label_mode)
    rng = np.random.default_rng(0)
    metric = dl.metrics.MeanIoU(n, per_class=True, class_names=synth_data.classes.names)
    accuracy = dl.metrics.Accuracy()
    conf = np.zeros((n, n))
    for x, y, w in batches:
        logits = rng.normal(size=x.shape[:3] + (n,)).astype(np.float32)
        labels = np.where(y.any(-1), y.argmax(-1), 255) if label_mode == "onehot" else y
        w = w * rng.choice([0.25, 1.0, 3.5], size=w.shape).astype(np.float32)  # float weights stay exact
        metric.update_state(y, logits, w)
        accuracy.update_state(y, logits, w)
        conf += confusion(labels, logits.argmax(-1), w, n)
    assert abs(float(accuracy.result()) - np.trace(conf) / conf.sum()) < 1e-12
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
    metrics = [dl.metrics.Accuracy(), dl.metrics.MeanIoU(n, per_class=True, class_names=["a", "b", "c", "d"])]
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
    assert "iou_d" in before


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


# ---------------------------------------------------------------- predictions per file
class Identity:
    """A 'model' that predicts the labels it is given: the image's red channel is 10 x the sample index,
    so it predicts class (index) everywhere."""

    def predict_on_batch(self, x):
        x = np.asarray(x)
        index = np.rint(x[..., 0] * 255 / 10).astype(int)
        return np.eye(32, dtype=np.float32)[np.clip(index, 0, 31)]


def test_predict_gives_one_prediction_per_pair_in_order_with_file_names(index_data, backend, tmp_path):
    found = dl.predict(Identity(), index_data, batch_size=3, backend=backend)
    assert len(found) == 10
    assert [p.image for p in found] == list(index_data.images) and [p.mask for p in found] == list(index_data.masks)
    for k, p in enumerate(found):
        assert p.index == k and p.labels.shape == (24, 32) and (p.labels == k).all()


def test_predict_back_at_the_original_size_and_written_in_the_datasets_ids(tmp_path):
    """Cityscapes-like ids (train ids back to label ids): fit crops at a smaller size, predictions taken
    back to 40x64 and written as label-id PNGs that the class map reads back to the same classes."""
    rng = np.random.default_rng(4)
    for d in ("img", "gt"):
        (tmp_path / d).mkdir()
    for i in range(4):
        cv2.imwrite(str(tmp_path / "img" / f"c_{i:02d}_leftImg8bit.png"), rng.integers(0, 255, (40, 64, 3), np.uint8))
        cv2.imwrite(str(tmp_path / "gt" / f"c_{i:02d}_gtFine_labelIds.png"), np.full((40, 64), 7, np.uint8))
    data = dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "gt", dl.ClassMap.cityscapes(),
                                         image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds")

    class Road:  # predicts train id 1 (sidewalk) everywhere
        def predict_on_batch(self, x):
            scores = np.zeros(np.shape(x)[:3] + (19,), np.float32)
            scores[..., 1] = 1
            return scores

    found = dl.predict(Road(), data, batch_size=3, image_size=(20, 24), backend="dali-cpu", out_dir=tmp_path / "out")
    for p in found:
        assert p.labels.shape == (40, 64) and (p.labels == 1).all()
        written = cv2.imread(p.written, cv2.IMREAD_UNCHANGED)
        assert Path(p.written).name == Path(p.image).stem + ".png" and (written == 8).all()  # label id of sidewalk
        np.testing.assert_array_equal(data.classes.map_mask(written), p.labels)


@pytest.mark.parametrize("options", [dict(training=True), dict(drop_remainder=True), dict(shuffle=True, seed=1),
                                     dict(num_shards=2, shard_id=1), dict(num_shards=2), dict(outputs=("image",))])
def test_predict_refuses_up_front_what_would_lose_or_mix_pairs(index_data, backend, options):
    """Options that drop pairs, mix their order or change what a batch holds are refused before loading,
    naming the argument; the values predict uses anyway are accepted."""
    name = next(k for k in options if k != "seed")
    with pytest.raises(dl.SpecError, match=rf"predict\(\) got {name}=.*which would .*Leave {name} out"):
        dl.predict(Identity(), index_data, batch_size=3, backend=backend, **options)
    found = dl.predict(Identity(), index_data, batch_size=3, backend=backend, training=False, shuffle=False,
                       drop_remainder=False, shard_id=0, num_shards=1)
    assert [p.index for p in found] == list(range(10))


def test_predict_writes_voc_masks_as_indexed_pngs_with_their_palette(tmp_path, backend):
    """VOC's SegmentationClass masks are palette PNGs read by index (index = class, 255 = border): the
    predictions are written the same way, with the same palette, so the VOC devkit reads them as it reads
    its ground truth, and daliloader's class map reads them back to the predicted classes."""
    from PIL import Image
    from trees import voc_tree

    root, _ = voc_tree(tmp_path)
    data = dl.SegmentationData.from_folder(root, split="trainval")

    class Halves:  # class 15 (person) on the left half, 0 (background) on the right
        def predict_on_batch(self, x):
            k = np.zeros(np.shape(x)[:3], int)
            k[:, :, : np.shape(x)[2] // 2] = 15
            return np.eye(21, dtype=np.float32)[k]

    found = dl.predict(Halves(), data, batch_size=3, image_size=(16, 32), crop="center", backend=backend,
                       out_dir=tmp_path / "out")
    assert len(found) == 4
    for p in found:
        with Image.open(p.written) as written, Image.open(p.mask) as truth:
            assert written.mode == truth.mode == "P" and written.getpalette() == truth.getpalette()
            indices = np.asarray(written)
            colours = np.asarray(written.convert("RGB"))
        np.testing.assert_array_equal(indices, np.where(p.labels < 21, p.labels, 255))
        assert {0, 15, 255} == set(np.unique(indices))  # cropped away by the centre crop: the border index
        np.testing.assert_array_equal(data.classes.map_mask(colours), p.labels)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_predict_names_a_mask_the_disk_did_not_take(tmp_path, index_data):
    """cv2.imwrite reports success on a full disk (/dev/full stands in for one): the mask is encoded in
    memory and written whole, or the file is named."""
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{Path(index_data.images[3]).stem}.png").symlink_to("/dev/full")
    with pytest.raises(dl.LoadError, match=r"cannot write .*0003\.png: no space left on the device"):
        dl.predict(Identity(), index_data, batch_size=4, backend="opencv", out_dir=out)


def test_to_mask_is_the_inverse_of_map_mask():
    rng = np.random.default_rng(5)
    for classes in (dl.ClassMap.cityscapes(), dl.ClassMap.voc(), dl.synthetic.camvid_classmap()):
        labels = rng.integers(0, classes.num_classes, (6, 7)).astype(classes.label_dtype)
        labels[0, 0] = classes.ignore_index
        np.testing.assert_array_equal(classes.map_mask(classes.to_mask(labels)), labels)
