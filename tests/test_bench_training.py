"""How much of a training step waits for input (daliloader.bench.training): a small U-Net fed by a
backend, against the same step on one batch resident where the model trains."""

import time

import pytest

from daliloader.bench import training
from daliloader.plan import make_plan

pytest.importorskip("tensorflow")


def test_the_training_floor_runs_the_step_on_a_batch_resident_on_the_training_device(synth_data, monkeypatch):
    """The floor is the model's own step on one batch that already lives where the model trains (not a
    tf.data-cached batch, which TF copies from the host every step): the tensors given to the step are
    the resident ones, on that device. Each backend's row: a step fed, its floor, and the share waiting
    (a tf.data product and a PyDataset, read by index)."""
    import keras
    import tensorflow as tf

    given = []
    original = keras.Model.train_on_batch

    def recording(self, x, y=None, *args, **kwargs):
        given.append((x, y))
        return original(self, x, y, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "train_on_batch", recording)
    plan = make_plan(synth_data, batch_size=2, image_size=(32, 32), label_mode="int", seed=0)
    rows = training.train_bound(plan, ["dali-cpu", "opencv"], steps=2, workers=1)
    assert set(rows) == {"dali-cpu", "opencv"}
    for row in rows.values():
        assert row.step_ms > 0 and row.floor_ms > 0 and 0 <= row.waiting_share < 1 and not row.floor_cached
    device = training.training_device()
    assert len(given) == 8  # per backend: 2 warm-up steps, 2 timed
    for steps in (given[:4], given[4:]):  # each backend's floor: one batch, resident
        first = steps[0]
        assert all(x is first[0] and y is first[1] for x, y in steps)
        for t in first:
            assert isinstance(t, tf.Tensor) and tf.DeviceSpec.from_string(t.device).device_type == \
                tf.DeviceSpec.from_string(device).device_type


def test_the_small_unet_predicts_a_logit_per_class_and_pixel():
    model = training.small_unet((32, 48), num_classes=5, width=4)
    assert tuple(model.output_shape) == (None, 32, 48, 5)


@pytest.mark.parametrize("name", ["tfdata", "opencv"])
def test_a_fed_step_is_timed_over_the_steps_that_ran(synth_data, name):
    """With more steps asked for than an epoch holds, model.fit ran out of data after the epoch and the
    time was divided by the steps asked for: fed steps faster than the floor, 0% waiting. A tf.data
    source now runs every step, through its epochs; a PyDataset runs its length."""
    from daliloader.bench.sources import backend_source

    plan = make_plan(synth_data, batch_size=4, image_size=(32, 32), label_mode="int", seed=0)
    source = backend_source(name, plan, 1)
    seconds, ran = training.fed_step(plan, source, 3 * plan.steps)
    warm = min(training.WARM_STEPS, len(source) - 1)
    assert seconds > 0 and ran == (3 * plan.steps if name == "tfdata" else len(source) - warm)


def test_a_fed_step_leaves_out_the_start_of_the_fit(synth_data):
    """bench --train timed a fit of 8 steps whole: the loader's start in each fit (workers started, a
    DALI pipeline built) read as waiting for input, 73-81% of the step on a small model where 200 steps
    gave 24-61%. Here a loader whose every fit starts with a second's pause: no timed step holds it."""
    import keras

    from daliloader.bench.sources import backend_source

    plan = make_plan(synth_data, batch_size=1, image_size=(32, 32), label_mode="int", seed=0)
    batches = backend_source("opencv", plan, 1)
    assert len(batches) >= training.WARM_STEPS + 4

    class SlowStart(keras.utils.PyDataset):
        def __len__(self):
            return len(batches)

        def __getitem__(self, i):
            if i == 0:
                time.sleep(1.0)
            return batches[i]

    seconds, ran = training.fed_step(plan, SlowStart(), 4)
    assert ran == 4 and seconds < 0.2, seconds
