"""The training recipe around the loaders: class weights, class balance, a validation split, and
model.fit with validation data and class weights on every backend."""

import cv2
import numpy as np
import pytest
from conftest import PALETTE, block_labels, one_epoch, write_pairs

import daliloader as dl


@pytest.fixture(scope="module")
def blocks(tmp_path_factory):
    """Six 32x40 pairs of block labels (classes 0-5 of the CamVid palette), images their own masks, and
    one unknown colour (loads as ignored)."""
    rng = np.random.default_rng(11)
    labels = [block_labels(rng, 32, 40) % 6 for _ in range(6)]
    masks = [PALETTE[lab] for lab in labels]
    masks[0][:8, :8] = (1, 2, 3)  # a colour of no class
    return write_pairs(tmp_path_factory.mktemp("blocks"), masks, masks), labels


def test_class_weights_belong_to_the_loss(blocks):
    """The loaders refuse class weights, pointing at the loss (weights in the batches would weigh the
    metrics too); the loss validates them as the loaders used to: a list, or a dict as Keras' class_weight."""
    from daliloader.losses import SparseCategoricalCrossentropy as Loss

    data, _ = blocks
    for name in ("class_weights", "class_weight"):
        with pytest.raises(dl.SpecError, match=f"{name}=: class weights belong to the loss.*dl.losses"):
            dl.make_plan(data, batch_size=2, **{name: [1.0] * 32})
    with pytest.raises(dl.SpecError, match="class_weights has 3 weights for the 32 classes"):
        Loss([1, 2, 3], num_classes=32)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(dl.SpecError, match="finite and non-negative"):
            Loss([bad] * 32)
    # a dict as Keras' class_weight: classes it leaves out weigh 1; numpy keys (np.unique's) work;
    # the ignore index may be named with 0, not with another weight; other keys are not classes
    assert Loss({np.int64(2): 3.0, 255: 0}, num_classes=32).class_weights == (1.0, 1.0, 3.0) + (1.0,) * 29
    with pytest.raises(dl.SpecError, match="ignore index 255 with a weight: ignored pixels always weigh 0"):
        Loss({255: 1.0}, num_classes=32, ignore_class=255)
    with pytest.raises(dl.SpecError, match=r"class_weights names \[255\], not classes of .*\(0..31\)"):
        Loss({255: 1.0}, num_classes=32)  # without ignore_class, every label that is no class is ignored
    with pytest.raises(dl.SpecError, match=r"class_weights names \[32, 40\], not classes of .*\(0..31\)"):
        Loss({40: 1.0, 32: 1.0}, num_classes=32)
    with pytest.raises(dl.SpecError, match="maps class indices"):
        Loss({"road": 1.0}, num_classes=32)
    with pytest.raises(dl.SpecError, match="needs num_classes"):
        Loss({2: 3.0})


def test_evaluation_weights_leave_out_ignored_pixels(blocks, backend):
    """Without class weights, evaluation weights are 1 on labelled pixels and 0 on ignored ones (the
    unknown colour, and the padding of crop="fit"), so weighted metrics count labelled pixels only."""
    data, _ = blocks
    n = data.classes.num_classes
    batches = one_epoch(backend, data, batch_size=4, image_size=(40, 40), crop="fit", label_mode="int",
                        shuffle=False, drop_remainder=False)
    real = 0
    for _x, y, w in batches:
        for yy, ww in zip(y, w):
            if ww.any():  # padding samples weigh 0 everywhere
                np.testing.assert_array_equal(ww, (yy < n).astype(np.float32))
                assert (yy >= n).any()  # fit pads 32x40 to 40x40 with the ignore index
                real += 1
    assert real == len(data)


@pytest.mark.parametrize("tf", [False, True])
@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_padding_samples_have_no_labelled_pixel(blocks, backend, label_mode, tf):
    """The padding samples that fill an evaluation epoch's last batch have every label ignored (int: the
    ignore index; one-hot: all-zero rows), so that a metric given without the weights (Keras'
    ``metrics=``) counts none of their pixels either: before, they held sample 0's labels."""
    data, _ = blocks
    batches = one_epoch(backend, data, tf=tf, batch_size=4, image_size=(32, 40), label_mode=label_mode,
                        training=False)
    padding = [y for _x, ys, ws in batches for y, w in zip(ys, ws) if not w.any()]
    assert len(batches) == 2 and len(padding) == 2  # 6 pairs in batches of 4
    for y in padding:
        assert (y == data.classes.ignore_index).all() if label_mode == "int" else not y.any()
    weighted, unweighted = dl.metrics.Accuracy(), dl.metrics.Accuracy()
    for _x, y, w in batches:
        scores = np.eye(data.classes.num_classes, dtype=np.float32)[np.where(y < 32, 0, y % 32)] \
            if label_mode == "int" else y.astype(np.float32)
        weighted.update_state(y, scores, w)
        unweighted.update_state(y, scores)
    assert float(unweighted.result()) == float(weighted.result())


def test_class_frequencies_and_balancing_weights(blocks):
    data, labels = blocks
    first = labels[0].copy()
    first[:8, :8] = 255  # the unknown colour counts for no class, nor as a pixel of its mask
    per_mask = np.array([np.bincount(lab[lab < 32], minlength=32) for lab in [first, *labels[1:]]])
    counts = per_mask.sum(0)
    f = dl.class_frequencies(data, progress=False)
    np.testing.assert_array_equal(f.pixels, counts)
    np.testing.assert_allclose(f.share, counts / counts.sum())
    # Eigen & Fergus: a class's pixels over the pixels of the masks in which it appears
    appears = (per_mask > 0) * per_mask.sum(1, keepdims=True)
    present = counts > 0
    freq = counts[present] / appears.sum(0)[present]
    np.testing.assert_allclose(f.per_image[present], freq)
    w = np.array(dl.class_weights(f))
    np.testing.assert_allclose(w[present] * freq, np.median(freq))  # median frequency balancing
    assert (w[~present] == 1).all()
    inverse = np.array(dl.class_weights(f, method="inverse"))
    np.testing.assert_allclose(np.sum(inverse * f.share), 1.0)
    given = np.array(dl.class_weights(f.share))  # frequencies given as an array: balanced as they are
    np.testing.assert_allclose(given[present] * f.share[present], np.median(f.share[present]))
    with pytest.raises(dl.SpecError, match="method='sqrt'"):
        dl.class_weights(f, method="sqrt")


def test_median_frequency_balancing_counts_the_masks_each_class_appears_in(tmp_path):
    """Eigen & Fergus' definition, on four masks: classes 0 and 1 fill each mask in halves, class 2 covers
    half of the first only. Its frequency is 50 / 100 (the pixels of the one mask it appears in), not
    50 / 400; over all pixels it would weigh four times as much."""
    for d in ("img", "gt"):
        (tmp_path / d).mkdir()
    for i in range(4):
        mask = np.zeros((10, 10), np.uint8)
        mask[:, 5:] = 1
        if i == 0:
            mask[:5] = 2
        cv2.imwrite(str(tmp_path / "img" / f"{i}.png"), np.zeros((10, 10, 3), np.uint8))
        cv2.imwrite(str(tmp_path / "gt" / f"{i}.png"), mask)
    f = dl.class_frequencies(dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "gt", 3), progress=False)
    np.testing.assert_allclose(f.per_image, [175 / 400, 175 / 400, 50 / 100])
    np.testing.assert_allclose(dl.class_weights(f), [1.0, 1.0, 0.875])


def test_split_is_disjoint_complete_and_deterministic(blocks):
    data, _ = blocks
    train, val = data.split(0.34, seed=3)
    assert len(val) == 2 and len(train) == 4
    assert set(train.images).isdisjoint(val.images) and set(train.images) | set(val.images) == set(data.images)
    assert data.split(0.34, seed=3) == (train, val)
    for image, mask in zip(val.images, val.masks):
        assert data.masks[data.images.index(image)] == mask  # pairs stay pairs
    for bad in (0, 1, 1.5, 0.01):
        with pytest.raises(dl.DataError, match="fraction"):
            data.split(bad)


def test_fit_with_validation_data_and_class_weights(blocks, backend):
    """Two epochs of model.fit(train, validation_data=val) on every backend, class weights in the loss and
    the IoU metric among the weighted metrics; the validation loader in evaluation mode."""
    keras = pytest.importorskip("keras")
    data, _ = blocks
    train, val = data.split(0.34, seed=0)
    weights = list(dl.class_weights(dl.class_frequencies(train, progress=False)))
    kw = dict(batch_size=2, image_size=(32, 40), label_mode="int", seed=1)
    if backend == "opencv":
        train_ds = dl.keras_sequence(train, rotate=10, brightness=0.2, **kw)
        val_ds = dl.keras_sequence(val, training=False, **kw)
    else:
        train_ds = dl.tf_dataset(train, rotate=10, brightness=0.2, backend=backend, **kw)
        val_ds = dl.tf_dataset(val, training=False, backend=backend, **kw)
    model = keras.Sequential([keras.Input((32, 40, 3)), keras.layers.Conv2D(32, 1)])
    model.compile("adam", dl.losses.SparseCategoricalCrossentropy(weights),
                  weighted_metrics=["accuracy", dl.metrics.MeanIoU(32)])
    history = model.fit(train_ds, validation_data=val_ds, epochs=2, verbose=0)
    assert len(history.history["val_loss"]) == 2 and all(np.isfinite(history.history["loss"]))
    assert 0 <= history.history["val_mean_iou"][-1] <= 1


def perfect_model(keras):
    """A model right on every labelled pixel of ``blocks`` (images are their own masks): a 1x1 convolution
    whose class scores ``2 x.c_k - |c_k|^2`` are largest for the palette colour nearest to the pixel's."""
    colours = PALETTE.astype(np.float64) / 255
    conv = keras.layers.Conv2D(len(PALETTE), 1)
    model = keras.Sequential([keras.Input((40, 48, 3)), conv])
    conv.set_weights([(100 * 2 * colours.T)[None, None].astype(np.float32),
                      (-100 * np.sum(colours**2, axis=1)).astype(np.float32)])
    return model


def loaders(backend, data, **kw):
    """Training and evaluation loaders of any backend (opencv: keras_sequence); evaluation pads without
    resizing (crop="center"), so that no interpolated colour reaches the model."""
    if backend == "opencv":
        return dl.keras_sequence(data, **kw), dl.keras_sequence(data, training=False, crop="center", **kw)
    return (dl.tf_dataset(data, backend=backend, **kw),
            dl.tf_dataset(data, training=False, crop="center", backend=backend, **kw))


@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_a_model_perfect_on_labelled_pixels_scores_1_in_training(blocks, backend, label_mode):
    """Random crops larger than the images pad them with ignored pixels, and one colour of no class is
    ignored too: training batches carry no weights, yet dl.metrics' accuracy and mean IoU in fit's logs
    are 1.0 (Keras' own accuracy counts the ignored pixels as wrong); the evaluation loader agrees."""
    keras = pytest.importorskip("keras")
    data, _ = blocks
    train, val = loaders(backend, data, batch_size=2, image_size=(40, 48), label_mode=label_mode, seed=1)
    model = perfect_model(keras)
    theirs = (keras.metrics.SparseCategoricalAccuracy if label_mode == "int" else keras.metrics.CategoricalAccuracy)
    model.compile(keras.optimizers.SGD(learning_rate=0.0), dl.losses.SparseCategoricalCrossentropy()
                  if label_mode == "int" else dl.losses.CategoricalCrossentropy(),
                  weighted_metrics=[dl.metrics.Accuracy(), dl.metrics.MeanIoU(32), theirs(name="keras_accuracy")])
    logs = {k: v[0] for k, v in model.fit(train, validation_data=val, epochs=1, verbose=0).history.items()}
    assert logs["accuracy"] == logs["mean_iou"] == logs["val_accuracy"] == logs["val_mean_iou"] == 1.0
    assert logs["keras_accuracy"] < 0.9  # the padding and the unknown colour are there, and Keras counts them
    assert logs["loss"] < 0.01 and logs["val_loss"] < 0.01


@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_the_loss_is_keras_ignore_class_on_training_batches(blocks, backend, label_mode):
    """Without class weights, on training batches with padded random crops (a third of the pixels
    ignored), dl.losses give what Keras' SparseCategoricalCrossentropy(ignore_class=255) gives: the mean
    over labelled pixels, not over all of them."""
    keras = pytest.importorskip("keras")
    data, _ = blocks
    batches = one_epoch(backend, data, batch_size=2, image_size=(40, 48), label_mode=label_mode, seed=2)
    ours = (dl.losses.SparseCategoricalCrossentropy() if label_mode == "int" else dl.losses.CategoricalCrossentropy())
    theirs = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255)
    rng = np.random.default_rng(3)
    for x, y in batches:
        labels = np.where(y.any(-1), y.argmax(-1), 255) if label_mode == "onehot" else y
        assert (labels == 255).mean() > 0.3
        logits = rng.normal(size=x.shape[:3] + (32,)).astype(np.float32)
        assert float(ours(y, logits)) == pytest.approx(float(theirs(labels, logits)), rel=1e-5)


def test_keras_hub_segmenters_need_their_metrics_named_and_a_compile_after_loading(blocks, tmp_path):
    """Issue 27: the training page's recipe for keras-hub (which it runs) overrides two of its habits; this
    checks that they are still keras-hub's, so that the page says when keras-hub changes them."""
    keras = pytest.importorskip("keras")
    keras_hub = pytest.importorskip("keras_hub")
    blocks, _ = blocks
    n = blocks.classes.num_classes
    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[3], stackwise_num_filters=[64, 64],
        stackwise_num_blocks=[1, 1], stackwise_num_strides=[1, 2], block_type="basic_block")
    backbone = keras_hub.models.DeepLabV3Backbone(
        image_encoder=encoder, spatial_pyramid_pooling_key="P3", low_level_feature_key="P2", upsampling_size=2,
        dilation_rates=[1, 2], projection_filters=8, image_shape=(32, 32, 3))
    model = keras_hub.models.DeepLabV3ImageSegmenter(backbone=backbone, num_classes=n)
    ds = dl.tf_dataset(blocks, batch_size=2, image_size=(32, 32), label_mode="int", backend="dali-cpu")
    model.compile(loss=dl.losses.SparseCategoricalCrossentropy())  # metrics="auto": one-hot accuracy
    with pytest.raises(ValueError, match="Dimensions must be equal"):
        model.fit(ds, epochs=1, steps_per_epoch=1, verbose=0)
    model.compile(loss=dl.losses.SparseCategoricalCrossentropy(), metrics=[dl.metrics.Accuracy()])
    model.fit(ds, epochs=1, steps_per_epoch=1, verbose=0)
    model.save(tmp_path / "m.keras")
    with pytest.warns(UserWarning, match="compile"):
        restored = keras.models.load_model(tmp_path / "m.keras")
    assert not isinstance(restored.loss, dl.losses.SparseCategoricalCrossentropy)  # keras-hub's own default



def test_keras_sequence_moves_on_at_every_fit_call(index_data):
    """Short fit() calls in a row (steps_per_epoch under len(seq)) each read fresh samples: a new fit()
    starts its reader at the first batch, so an epoch that waited for a whole pass (tried, and undone)
    gave them the same batches every time."""
    keras = pytest.importorskip("keras")
    import tensorflow as tf
    from conftest import batch_indices

    seen = []

    class Probe(keras.Model):
        def train_step(self, data):
            tf.py_function(lambda x: seen.append(tuple(batch_indices(x.numpy()))) or 0, [data[0]], tf.int32)
            return super().train_step(data)

    seq = dl.keras_sequence(index_data, batch_size=2, image_size=(24, 32), crop="center", label_mode="int", seed=1)
    inputs = keras.Input((24, 32, 3))
    model = Probe(inputs, keras.layers.Conv2D(32, 1)(inputs))
    model.compile("sgd", dl.losses.SparseCategoricalCrossentropy())
    calls = []
    for _ in range(3):
        seen.clear()
        model.fit(seq, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
        calls.append(seen[0])
    assert len(set(calls)) == 3, calls
