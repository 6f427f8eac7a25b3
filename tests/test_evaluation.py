"""Evaluation mode of the loaders (training=False; its defaults are the plan's, daliloader/plan.py) on
every backend: a centre crop (or a fit, for another image_size), nothing drawn at random, every sample seen
once, in the dataset's order, the last batch padded with weight-0 samples; image_size left out takes the
images' own size. What is evaluated with the batches: tests/test_metrics.py, test_losses.py and
test_predictions.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import DALI_BACKENDS, batch_indices, eval_batches, one_epoch, require_tf

import daliloader as dl

pytest.importorskip("tensorflow")


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


def test_shuffle_and_drop_remainder_take_booleans_only(index_data, backend):
    """shuffle="False" or drop_remainder="False" (a config file's strings) are true to Python: evaluation was
    shuffled, or lost its last samples, silently. Refused by name on every backend; numpy's bools count."""
    for name in ("shuffle", "drop_remainder"):
        with pytest.raises(dl.SpecError, match=f"{name} must be True or False \\(or None: as training\\), got 'False'"):
            one_epoch(backend, index_data, tf=backend != "opencv", batch_size=3, image_size=(24, 32),
                      training=False, **{name: "False"})
    plan = dl.make_plan(index_data, batch_size=3, training=False, shuffle=np.False_, drop_remainder=np.bool_(0))
    assert plan.sampler.shuffle is False and plan.sampler.drop_remainder is False


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


def _recording_model(seen: list):
    """A one-layer Keras model whose test and train steps record each batch's sample indices (index_data's
    images carry them) and weights, as the compiled function reads them."""
    import keras
    import tensorflow as tf

    def record(x, w):
        real = np.asarray(w).reshape(len(x), -1).any(1)
        seen.append([(i, bool(r)) for i, r in zip(batch_indices(x.numpy()), real)])
        return np.int32(0)

    class Recording(keras.Model):
        def test_step(self, data):
            x, _, w = data
            tf.py_function(record, [x, w], tf.int32)
            return super().test_step(data)

        def train_step(self, data):
            x = data[0]
            tf.py_function(record, [x, tf.ones(tf.shape(x)[:1])], tf.int32)
            return super().train_step(data)

    inputs = keras.Input((24, 32, 3))
    model = Recording(inputs, keras.layers.Conv2D(10, 1)(inputs))
    return model


@pytest.mark.parametrize("backend", DALI_BACKENDS)
@pytest.mark.parametrize("batch_size", [3, 4])
def test_the_dali_stream_of_an_evaluation_ends_after_its_epoch_by_itself(index_data, backend, batch_size):
    """The DALI dataset under an evaluation dataset ends after one epoch without a take() after it (none may
    follow a GPU DALIDataset): its inputs are one epoch's. It was endless, and on dali-gpu an evaluation
    compiled with steps_per_execution read into the next pass. Every sample once, read again alike."""
    require_tf()
    ds = dl.tf_dataset(index_data, batch_size=batch_size, image_size=(24, 32), label_mode="int", backend=backend,
                       training=False)
    for _ in range(2):
        batches = [[np.asarray(t) for t in batch] for batch in itertools.islice(ds._stream, len(ds) + 1)]
        assert len(batches) == len(ds)
        found = [i for x, _, w in batches for i, weight in zip(batch_indices(x), w[:, 0, 0]) if weight > 0]
        assert found == list(range(10))


@pytest.mark.parametrize("backend", [*DALI_BACKENDS, "tfdata"])
def test_evaluate_with_steps_per_execution_counts_every_sample_once(index_data, backend):
    """Keras compiled with steps_per_execution=k reads k batches per call and stops at the first missing
    one: an evaluation of 4 batches with k=3 read two batches of the endless stream's next epoch on
    dali-cpu (8 samples counted twice, wrong metrics); the evaluation iterator now ends after its epoch."""
    require_tf()
    seen: list = []
    model = _recording_model(seen)
    model.compile("sgd", dl.losses.SparseCategoricalCrossentropy(num_classes=10), steps_per_execution=3)
    ds = dl.tf_dataset(index_data, batch_size=3, image_size=(24, 32), label_mode="int", backend=backend,
                       training=False)
    for _ in range(2):
        seen.clear()
        model.evaluate(ds, verbose=0)
        assert [i for batch in seen for i, real in batch if real] == list(range(10)), seen
