"""dali-gpu on a real GPU, through TensorFlow: what the trace tests (test_gpu_path.py) cannot run.

Marked ``gpu`` and skipped where DALI sees no CUDA device or TensorFlow is missing; ``pytest -m gpu``
(``benchmarks/gpu_check.sh``) runs them together with the dali-gpu cases of the other test files.
"""

import numpy as np
import pytest
from conftest import HAS_GPU, batch_indices

import daliloader as dl

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HAS_GPU, reason="DALI sees no CUDA GPU")]
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if HAS_GPU and not tf.config.list_physical_devices("GPU"):
    pytest.skip("TensorFlow sees no GPU (a TensorFlow without CUDA)", allow_module_level=True)


def on_gpu(tensor) -> bool:
    return tf.DeviceSpec.from_string(tensor.device).device_type == "GPU"


@pytest.mark.parametrize("kw", [dict(), dict(label_mode="int", dtype="float16", drop_remainder=False)],
                         ids=["train-onehot", "eval-int-float16"])
def test_every_tensor_of_a_batch_is_on_the_gpu(synth_data, kw):
    ds = dl.tf_dataset(synth_data, batch_size=2, image_size=(64, 64), scale=(0.5, 2.0), backend="dali-gpu", **kw)
    for batch in ds:
        assert all(on_gpu(t) for t in batch), [t.device for t in batch]
    assert batch[0].dtype == (tf.float16 if "dtype" in kw else tf.float32)


def test_evaluation_on_the_gpu_sees_every_sample_once(index_data):
    ds = dl.tf_dataset(index_data, batch_size=4, image_size=(24, 32), crop="center", shuffle=False,
                       drop_remainder=False, dtype="float16", backend="dali-gpu")
    batches = [[t.numpy() for t in b] for b in ds]
    assert len(batches) == len(ds) == 3
    weights = np.concatenate([w[:, 0, 0] for _, _, w in batches])
    seen = np.concatenate([batch_indices(x.astype(np.float32)) for x, _, _ in batches])
    assert weights.tolist() == [1.0] * 10 + [0.0] * 2
    assert sorted(seen[weights == 1].tolist()) == list(range(10))


def tiny_model(classes: int, size=(32, 32)):
    return keras.Sequential([keras.Input(size + (3,)), keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
                             keras.layers.Conv2D(classes, 1)])


def test_bfloat16_training_through_the_keras_policy(synth_data):
    """dtype='bfloat16' is refused on the GPU; float32 batches under the mixed_bfloat16 policy train."""
    with pytest.raises(dl.SpecError, match="mixed_bfloat16"):
        dl.tf_dataset(synth_data, image_size=(32, 32), dtype="bfloat16", backend="dali-gpu")
    details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
    if details.get("compute_capability", (0, 0)) < (8, 0):
        pytest.skip("bfloat16 convolutions need compute capability 8.0 (Ampere) or newer")
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = tiny_model(32)
        model.compile("adam", keras.losses.CategoricalCrossentropy(from_logits=True))
        ds = dl.tf_dataset(synth_data, batch_size=2, image_size=(32, 32), backend="dali-gpu")
        history = model.fit(ds, epochs=2, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.isfinite(history.history["loss"]).all()


def test_dali_finds_gpu_memory_after_tensorflow_started(synth_data):
    """TensorFlow starts on the GPU first (as when a model is built before the data), then DALI loads
    full-size batches beside it: TensorFlow grows its memory instead of reserving it all."""
    with tf.device("/gpu:0"):
        float(tf.reduce_sum(tf.random.uniform((2048, 2048)) @ tf.random.uniform((2048, 2048))))
    ds = dl.tf_dataset(synth_data, batch_size=8, image_size=(512, 512), scale=(0.5, 2.0), backend="dali-gpu")
    for _, batch in zip(range(3), ds):
        assert batch[1].shape == (8, 512, 512, 32)


def test_distribute_on_one_gpu(synth_data):
    strategy = tf.distribute.MirroredStrategy(["/gpu:0"])
    ds = dl.distribute(strategy, synth_data, global_batch_size=2, image_size=(32, 32), label_mode="int",
                       backend="dali-gpu", seed=0)
    with strategy.scope():
        model = tiny_model(32)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255))
    history = model.fit(ds, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    x, _ = next(iter(ds))
    assert all(on_gpu(t) for t in strategy.experimental_local_results(x))
