"""Throughput benchmarks: every backend on the same files, next to the decode ceilings that bound it.

Method (see README): each figure is the median of ``repeats`` timed windows of ``seconds`` each,
after a warm-up of one epoch; batches are forced to exist (one element read back) before the clock
counts them. Ceilings are all CPU cores decoding the same files and doing nothing else (and, with a
GPU, nvJPEG decoding the images alone). Stage breakdowns time the DALI graph cut after each stage,
and the OpenCV kernels one by one.
"""

from __future__ import annotations

import itertools
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np

from .data import SegmentationData

#: Backends ``bench`` knows. ``tfdata-naive`` is the baseline a user would write first.
BENCH_BACKENDS = ("dali-gpu", "dali-cpu", "tfdata", "opencv", "tfdata-naive")
#: Backends that cannot run at all without TensorFlow.
TF_ONLY = ("tfdata", "tfdata-naive")


def has_tensorflow() -> bool:
    """Whether TensorFlow, Keras and DALI's TensorFlow plugin are installed. Without them (a GPU machine
    with DALI alone) the DALI backends are timed through ``pipeline.run`` and opencv without Keras."""
    from importlib.util import find_spec

    return all(find_spec(m) is not None for m in ("tensorflow", "keras", "nvidia.dali_tf_plugin"))


def via(name: str) -> str:
    """What carries a backend's batches in this bench run."""
    if name == "opencv":
        return "keras PyDataset" if has_tensorflow() else "OpenCV loader (no Keras)"
    if name.startswith("dali"):
        return "tf.data (DALIDataset)" if has_tensorflow() else "DALI pipeline.run (no TensorFlow)"
    return "tf.data"


@dataclass
class Measurement:
    name: str
    label_mode: str | None
    rates: list[float]  # images (pairs) per second, one per repeat
    unit: str = "img/s"
    extra: dict = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    def to_dict(self) -> dict:
        return {**asdict(self), "median": round(self.median, 2), "min": round(min(self.rates), 2),
                "max": round(max(self.rates), 2)}


def measure(next_batch, batch_size: int, seconds: float, repeats: int, warmup_batches: int) -> list[float]:
    """Items/s of ``repeats`` windows of about ``seconds`` each, after ``warmup_batches`` batches."""
    for _ in range(warmup_batches):
        next_batch()
    rates = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            next_batch()
            n += batch_size
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        rates.append(n / elapsed)
    return rates


def touch(batch) -> None:
    """Wait until every tensor of a batch exists (reads back one element, not the batch). DALI's own
    outputs exist once ``pipeline.run()`` has returned them."""
    for t in batch:
        if type(t).__module__.startswith("nvidia.dali"):
            continue
        if hasattr(t, "numpy"):
            t[(0,) * len(t.shape)].numpy()
        else:
            np.asarray(t).flat[0]


def endless(dataset):
    """Batches of a Keras-style dataset forever, starting a new epoch when one ends."""
    while True:
        for batch in dataset:
            yield batch


# ---------------------------------------------------------------- backends
def backend_source(name: str, data: SegmentationData, batch_size: int, image_size, label_mode: str,
                   workers: int):
    """One backend's dataset (``tf.data``) or PyDataset (opencv), built as a user would build it."""
    from . import loaders

    common = dict(batch_size=batch_size, image_size=image_size, crop="random", label_mode=label_mode, seed=0)
    if name == "opencv":
        if has_tensorflow():
            return loaders.keras_sequence(data, workers=workers, **common)
        from .cpu.opencv import EpochBatches, OpenCVLoader

        spec, sampler = loaders._setup(data, batch_size, image_size, "random", label_mode, True, 0, True, 0, 1, {})
        return EpochBatches(OpenCVLoader(data, spec, sampler), with_weights=False)
    if name == "tfdata-naive":
        return naive_tfdata(data, batch_size, image_size, label_mode)
    return loaders.tf_dataset(data, backend=name, **common)


def backend_stream(name: str, data: SegmentationData, batch_size: int, image_size, label_mode: str,
                   workers: int):
    """An endless iterator of batches from one backend (opencv: ``workers`` threads, as PyDataset)."""
    if name.startswith("dali") and not has_tensorflow():
        from .loaders import dali_pipeline

        pipe, _ = dali_pipeline(data, batch_size=batch_size, image_size=image_size, crop="random",
                                label_mode=label_mode, seed=0, backend=name)
        return (pipe.run() for _ in itertools.count())
    source = backend_source(name, data, batch_size, image_size, label_mode, workers)
    return ordered_parallel(source, workers) if name == "opencv" else endless(source)


def ordered_parallel(seq, workers: int):
    """``seq[i]`` for i = 0, 1, ... computed by ``workers`` threads, in order: what Keras does with
    ``PyDataset(workers=N)`` (threads), ``on_epoch_end`` included."""
    pool = ThreadPoolExecutor(workers)
    ahead = 2 * workers
    pending, i = [], 0
    try:
        while True:
            while len(pending) < ahead:
                pending.append(pool.submit(seq.__getitem__, i % len(seq)))
                i += 1
                if i % len(seq) == 0:
                    pending.append(None)  # epoch boundary
            item = pending.pop(0)
            if item is None:
                seq.on_epoch_end()
                continue
            yield item.result()
    finally:  # the stream is dropped: stop its workers
        pool.shutdown(wait=False, cancel_futures=True)


def naive_tfdata(data: SegmentationData, batch_size: int, image_size, label_mode: str):
    """The tf.data pipeline people write first (the 4x baseline of the performance goal).

    Per sample: ``decode_image``, ``resize_with_crop_or_pad``, one-hot by comparing the mask with
    each class colour; parallel map, batch, prefetch. Centre crops, no augmentation.
    """
    import tensorflow as tf

    h, w = image_size
    palette = tf.constant(data.classes.palette(), tf.uint8)

    def load(image_path, mask_path):
        image = tf.io.decode_image(tf.io.read_file(image_path), channels=3, expand_animations=False)
        mask = tf.io.decode_image(tf.io.read_file(mask_path), channels=3, expand_animations=False)
        image = tf.image.resize_with_crop_or_pad(image, h, w)
        mask = tf.image.resize_with_crop_or_pad(mask, h, w)
        onehot = tf.stack([tf.reduce_all(mask == palette[c], axis=-1) for c in range(data.classes.num_classes)], -1)
        labels = tf.cast(onehot, tf.float32)
        if label_mode == "int":
            labels = tf.where(tf.reduce_any(onehot, -1), tf.argmax(labels, -1, output_type=tf.int32), 255)
        return tf.cast(image, tf.float32) / 255.0, labels

    ds = tf.data.Dataset.from_tensor_slices((list(data.images), list(data.masks)))
    ds = ds.shuffle(len(data), seed=0).repeat().map(load, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------- ceilings
def cpu_decode_ceiling(data: SegmentationData, workers: int, seconds: float, repeats: int, what: str = "pairs"):
    """Pairs (or images, or masks) per second with ``workers`` threads doing nothing but read + decode."""
    import cv2

    from .checks import decode

    mask_flag = cv2.IMREAD_COLOR if data.classes.kind == "rgb" else cv2.IMREAD_GRAYSCALE
    jobs = {"pairs": [(p, cv2.IMREAD_COLOR, m, mask_flag) for p, m in zip(data.images, data.masks)],
            "images": [(p, cv2.IMREAD_COLOR) for p in data.images],
            "masks": [(m, mask_flag) for m in data.masks]}[what]

    def work(job):
        for path, flag in zip(job[::2], job[1::2]):
            decode(path, flag)

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # our threads decode; OpenCV's own pool would only oversubscribe the cores
    try:
        with ThreadPoolExecutor(workers) as pool:
            def one_pass():
                list(pool.map(work, jobs))
            return measure(one_pass, len(jobs), seconds, repeats, warmup_batches=1)
    finally:
        cv2.setNumThreads(threads)


def nvjpeg_ceiling(data: SegmentationData, batch_size: int, seconds: float, repeats: int, device_id: int = 0):
    """Images per second that DALI's mixed (nvJPEG) decoder reaches on the dataset's images alone."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch_size, num_threads=os.cpu_count(), device_id=device_id, prefetch_queue_depth=2)
    def decode_only():
        encoded, _ = fn.readers.file(files=list(data.images), random_shuffle=True, seed=0)
        return fn.decoders.image(encoded, device="mixed", output_type=types.RGB, jpeg_fancy_upsampling=True)

    pipe = decode_only()
    pipe.build()
    return measure(pipe.run, batch_size, seconds, repeats, warmup_batches=max(1, len(data) // batch_size))


# ---------------------------------------------------------------- stage breakdowns
def dali_stages(data: SegmentationData, device: str, batch_size: int, image_size, label_mode: str,
                seconds: float, repeats: int) -> list[dict]:
    """The DALI graph cut after each stage; a stage's cost is the growth of wall time per image.

    As in ``tf_dataset``, a CPU graph ends with int labels for one-hot batches, and the one-hot
    encoding by TensorFlow is timed on its own (the last row).
    """
    from .dali.graph import STAGES, GraphOptions, build_pipeline, graph_spec
    from .loaders import _setup

    spec, sampler = _setup(data, batch_size, image_size, "random", label_mode, True, 0, True, 0, 1, {})
    dali_spec = graph_spec(spec, device)
    encode_in_tf = dali_spec.label_mode != spec.label_mode
    rows, previous = [], 0.0
    for stage in STAGES + ("encode",):
        opts = GraphOptions(device, 0 if device == "gpu" else None, None, 2, 0,
                            ("image", "labels"), None if stage == "encode" else stage)
        pipe = build_pipeline(data, dali_spec, sampler, opts)
        pipe.build()
        rate = statistics.median(measure(pipe.run, batch_size, seconds, repeats,
                                         warmup_batches=max(1, sampler.steps)))
        ms = 1000.0 / rate
        name = "encode (int)" if stage == "encode" and encode_in_tf else stage
        rows.append({"stage": name, "cumulative_img_per_s": round(rate, 1), "ms_per_img": round(ms - previous, 2)})
        previous = ms
        del pipe
    if encode_in_tf and has_tensorflow():
        import tensorflow as tf

        from .tfops import one_hot

        shape = (batch_size, *spec.image_size)
        labels = tf.constant(np.random.default_rng(0).integers(0, data.classes.num_classes, shape, dtype=np.uint8))
        rate = statistics.median(measure(lambda: touch([one_hot(labels, data.classes.num_classes)]), batch_size,
                                         seconds, repeats, warmup_batches=1))
        rows.append({"stage": "one-hot (TensorFlow)", "cumulative_img_per_s": None, "ms_per_img": round(1000.0 / rate, 2)})
    return rows


def opencv_stages(data: SegmentationData, image_size, label_mode: str, samples: int = 32) -> list[dict]:
    """The OpenCV backend's kernels timed one by one on one thread, ms per image."""
    from .cpu import opencv as k
    from .spec import make_spec

    spec = make_spec(image_size, crop="random", label_mode=label_mode)
    classes = data.classes
    rng = np.random.default_rng(0)
    totals = dict.fromkeys(("read", "decode", "labels", "crop", "flip", "normalize", "encode"), 0.0)
    indices = [i % len(data) for i in range(samples)]
    for i in indices:
        t = [time.perf_counter()]
        image_bytes, mask_bytes = k.read(data.images[i]), k.read(data.masks[i])
        t.append(time.perf_counter())
        image = k.decode_image(image_bytes, data.images[i])
        mask = k.decode_mask(mask_bytes, data.masks[i], classes)
        t.append(time.perf_counter())
        labels = classes.map_mask(mask)
        t.append(time.perf_counter())
        win = k.draw_window(rng, spec, *image.shape[:2])
        image = k.resize_image(k.crop(image, win, 0), spec.image_size)
        labels = k.resize_labels(k.crop(labels, win, classes.ignore_index), spec.image_size)
        t.append(time.perf_counter())
        if win.flip:
            image, labels = np.ascontiguousarray(image[:, ::-1]), np.ascontiguousarray(labels[:, ::-1])
        t.append(time.perf_counter())
        k.normalize(image, spec)
        t.append(time.perf_counter())
        k.encode(labels, spec, classes)
        t.append(time.perf_counter())
        for name, a, b in zip(totals, t, t[1:]):
            totals[name] += b - a
    return [{"stage": name, "ms_per_img": round(1000 * v / samples, 2)} for name, v in totals.items()]


# ---------------------------------------------------------------- machine
def machine_info() -> dict:
    info = {"host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "cpu": _cpu_model(), "gpu": None, "versions": {}}
    for module in ("numpy", "cv2", "tensorflow", "keras", "nvidia.dali"):
        try:
            mod = __import__(module, fromlist=["__version__"])
            info["versions"][module] = getattr(mod, "__version__", "?")
        except ImportError:
            pass
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            info["gpu"] = out.stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# ---------------------------------------------------------------- input-bound analysis
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


def train_bound(data: SegmentationData, backends, batch_size: int, image_size, label_mode: str, steps: int,
                workers: int) -> dict:
    """Step time of a small U-Net fed by each backend, and fed by one batch cached on the device.

    ``waiting`` = 1 - floor / step time: the share of each step spent waiting for input.
    """
    import keras
    import tensorflow as tf

    loss = (keras.losses.CategoricalCrossentropy(from_logits=True) if label_mode == "onehot"
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=data.classes.ignore_index))

    def step_time(source) -> float:
        model = small_unet(image_size, data.classes.num_classes)
        model.compile("adam", loss)
        model.fit(source, steps_per_epoch=min(3, steps), epochs=1, verbose=0)  # trace, warm up
        start = time.perf_counter()
        model.fit(source, steps_per_epoch=steps, epochs=1, verbose=0)
        return (time.perf_counter() - start) / steps

    rows = {}
    for name in backends:
        source = backend_source(name, data, batch_size, image_size, label_mode, workers)
        x, y = source[0] if name == "opencv" else next(iter(source))
        device = getattr(x, "device", None) or "/cpu:0"
        with tf.device(device):  # the cached batch lives where the backend delivers batches
            cached = tf.data.Dataset.from_tensors((tf.identity(x), tf.identity(y))).repeat()
        floor = step_time(cached)
        fed = step_time(source)
        rows[name] = {"step_ms": round(1000 * fed, 1), "cached_batch_floor_ms": round(1000 * floor, 1),
                      "waiting_share": round(max(0.0, 1 - floor / fed), 3)}
    return rows
