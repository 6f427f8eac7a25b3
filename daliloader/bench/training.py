"""How much of a training step waits for input: a small Keras U-Net fed by each backend, against the
same step on one batch that already lives on the device it trains on."""

from __future__ import annotations

import time

from ..plan import Plan
from .record import TrainRow
from .sources import backend_source, sequence_like

#: Steps run before the clock starts (tracing, warm-up), at most.
WARM_STEPS = 3


def small_unet(image_size, num_classes: int, width: int = 16):
    """A small Keras U-Net (two levels): enough compute to be a realistic consumer, not a big one."""
    import keras

    inp = keras.Input(tuple(image_size) + (3,))
    c1 = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(inp)
    d1 = keras.layers.MaxPooling2D()(c1)
    c2 = keras.layers.Conv2D(2 * width, 3, padding="same", activation="relu")(d1)
    d2 = keras.layers.MaxPooling2D()(c2)
    b = keras.layers.Conv2D(4 * width, 3, padding="same", activation="relu")(d2)
    u2 = keras.layers.Concatenate()([keras.layers.UpSampling2D()(b), c2])
    c3 = keras.layers.Conv2D(2 * width, 3, padding="same", activation="relu")(u2)
    u1 = keras.layers.Concatenate()([keras.layers.UpSampling2D()(c3), c1])
    c4 = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(u1)
    return keras.Model(inp, keras.layers.Conv2D(num_classes, 1)(c4))


def training_device() -> str:
    """The device Keras trains on: the first GPU TensorFlow sees, else the CPU."""
    import tensorflow as tf

    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


def resident(batch, device: str) -> tuple:
    """A copy of ``batch`` that lives on ``device`` (tensors already there are not copied)."""
    import tensorflow as tf

    with tf.device(device):
        return tuple(tf.identity(t) for t in batch)


def compiled_unet(plan: Plan):
    """A fresh :func:`small_unet` for ``plan``'s samples, compiled with Adam and the cross-entropy of its
    labels (logits; int labels ignore the ignore index)."""
    import keras

    classes = plan.data.classes
    loss = (keras.losses.CategoricalCrossentropy(from_logits=True) if plan.spec.label_mode == "onehot"
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=classes.ignore_index))
    model = small_unet(plan.spec.image_size, classes.num_classes)
    model.compile("adam", loss)
    return model


def fed_step(plan: Plan, source, steps: int) -> tuple[float, int]:
    """Seconds per step of ``model.fit`` fed by ``source`` (what users run) in its steady state, and the
    steps timed: one fit of :data:`WARM_STEPS` more steps, timed from the end of its last warm-up step to
    its return, so that a fit's start (its iterator, the loader's workers or DALI pipeline, the step's
    trace) is in no timed step; a fit of 8 steps timed whole read that start as waiting for input.
    ``steps``, for a ``tf.data`` source (read through its epochs) as for a ``PyDataset`` (at most its
    length less the warm-up: Keras does not run one past its end). The time is divided by the steps
    Keras ran, counted, never by those asked for: a fit that runs out of data ends early."""
    import tensorflow as tf

    model = compiled_unet(plan)
    if isinstance(source, tf.data.Dataset):
        source, warm = source.repeat(), WARM_STEPS
    else:
        warm = min(WARM_STEPS, len(source) - 1)
        steps = min(steps, len(source) - warm)
    clock = _step_clock()
    start = time.perf_counter()
    # shuffle=False: the loader shuffles (no Keras warning that it ignores shuffle)
    model.fit(source, steps_per_epoch=warm + steps, epochs=1, verbose=0, shuffle=False, callbacks=[clock])
    done = time.perf_counter()
    if len(clock.ends) != warm + steps:
        raise RuntimeError(f"model.fit ran {len(clock.ends)} of the {warm + steps} steps asked for: the source ran "
                           "out")
    return (done - (clock.ends[warm - 1] if warm else start)) / steps, steps


def _step_clock():
    """A Keras callback whose ``ends`` holds when each training step ended (``time.perf_counter``; Keras
    imported when one is made)."""
    import keras

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

    return Clock()


def floor_step(plan: Plan, batch, steps: int) -> float:
    """Seconds per step of ``train_on_batch`` on ``batch`` (already on the training device), after a
    warm-up. It waits for each step's loss, so it is if anything a little high."""
    model = compiled_unet(plan)
    for _ in range(min(WARM_STEPS, steps)):
        model.train_on_batch(*batch)
    start = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(*batch)
    return (time.perf_counter() - start) / steps


def train_bound(plan: Plan, names, steps: int, workers: int) -> dict[str, TrainRow]:
    """Step time of a small U-Net fed by each backend of ``names``, and its floor: the same compiled step
    on one batch resident on the device the model trains on, so that no input work or copy is in it.

    ``waiting`` = 1 - floor / step time (at least 0): the share of each step spent waiting for input.
    The fed steps run in ``model.fit`` (what users run); the floor steps through ``train_on_batch``,
    which waits for each step's loss, so the floor is if anything a little high and ``waiting`` a little
    low. A batch cached in a ``tf.data`` dataset would be no floor: tf.data keeps it on the host and
    copies it to the device every step (see docs/benchmarks.md).
    """
    rows = {}
    for name in names:
        source = backend_source(name, plan, workers)
        x, y = source[0] if sequence_like(name) else next(iter(source))
        floor = floor_step(plan, resident((x, y), training_device()), steps)
        fed, _ = fed_step(plan, source, steps)
        rows[name] = TrainRow(step_ms=round(1000 * fed, 1), floor_ms=round(1000 * floor, 1),
                              waiting_share=round(max(0.0, 1 - floor / fed), 3))
    return rows
