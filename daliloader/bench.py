"""Throughput benchmarks: every backend on the same files, next to the decode ceilings that bound it.

Method (see docs/benchmarks.md): each figure is the median of ``repeats`` timed windows of ``seconds`` each,
after a warm-up of one epoch and then until the rate is steady (two windows within 10%); batches are
forced to exist (one element read back) before the clock counts them. A report warns when windows
held too few batches for the figures they give, when a warm-up never settled, and when a stage cost
comes out negative (noise). Ceilings are all CPU cores decoding the same files and doing nothing else (and, with a
GPU, nvJPEG decoding the images alone). Stage breakdowns time the DALI graph cut after each stage,
and the OpenCV stages one by one. Every backend is built from one plan (:func:`daliloader.plan.make_plan`)
through the backend registry, so all of them run the same settings.

:func:`run` is the job behind ``daliloader bench``; :mod:`daliloader.report` prints and plots its report.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import backends
from .data import SegmentationData
from .errors import SpecError
from .plan import Plan, make_plan

#: The baseline a user would write first (the 4x goal's reference); not a product backend.
BASELINE = "tfdata-naive"
#: Backends ``bench`` knows: the registry's, then the baseline.
BENCH_BACKENDS = tuple(backends.BACKENDS) + (BASELINE,)
#: What the bench feeds from each backend, in order of preference: what Keras is fed (tf.data,
#: PyDataset), else, where TensorFlow or Keras is missing, DALI's own pipeline or numpy batches.
PRODUCTS = ("tf.data", "keras", "dali", "batches")
#: Samples per pack in the bench's prepared copy.
BENCH_PACK_SIZE = 256
#: ``--augment``: every photometric option, rotation and zoom on (a typical training recipe).
AUGMENT = dict(scale=(0.5, 2.0), rotate=15, brightness=0.3, contrast=0.3, saturation=0.3, hue=10)
#: A timed window should hold at least this many batches for its rate to mean much.
MIN_BATCHES = 5
#: Warm-up goes on until two consecutive windows agree within this share, for at most STEADY_WINDOWS.
STEADY, STEADY_WINDOWS = 0.10, 8
#: A figure whose repeats spread by more than this share of its median is too noisy to divide by.
NOISY = 0.25


def has_tensorflow() -> bool:
    """Whether TensorFlow, Keras and DALI's TensorFlow plugin are installed. Without them (a GPU machine
    with DALI alone) the DALI backends are timed through ``pipeline.run`` and opencv without Keras."""
    return not backends.missing(("tensorflow", "keras", "dali-tf-plugin"))


#: How the bench names what a backend lacks.
NEEDS = {"tensorflow": "TensorFlow", "keras": "Keras", "dali-tf-plugin": "DALI's TF plugin", "dali": "DALI",
         "gpu": "a CUDA GPU that DALI can see"}


def product(name: str) -> str | None:
    """What the bench builds of a backend (see :data:`PRODUCTS`); None when it cannot run here."""
    if name == BASELINE:
        return "tf.data" if has_tensorflow() else None
    return backends.available(name, PRODUCTS)


def lacks(name: str) -> str:
    needs = ("tensorflow",) if name == BASELINE else backends.BACKENDS[name].requirements(
        next(iter(backends.BACKENDS[name].builds)))
    return " and ".join(NEEDS[n] for n in backends.missing(needs)) or "what it needs"


#: How each product is read, in the JSON ("via").
VIA = {"tf.data": "tf.data", "keras": "keras PyDataset", "batches": "OpenCV loader (no Keras)",
       "dali": "DALI pipeline.run (no TensorFlow)"}


def via(name: str) -> str:
    return VIA[product(name)]


def sequence_like(name: str) -> bool:
    """Whether the bench reads a backend's product by index, as Keras reads a PyDataset."""
    return product(name) in ("keras", "batches")


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


class Rates(list):
    """Items/s of the timed windows, with how they were taken: batches per window, and whether the
    warm-up reached a steady rate."""

    def __init__(self, rates=(), batches=(), steady: bool = True):
        super().__init__(rates)
        self.batches, self.steady = list(batches), steady


def _window(next_batch, batch_size: int, seconds: float) -> tuple[float, int]:
    """Items/s and batches of one window of at least ``seconds``."""
    n, start = 0, time.perf_counter()
    while True:
        next_batch()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n * batch_size / elapsed, n


def measure(next_batch, batch_size: int, seconds: float, repeats: int, warmup_batches: int) -> Rates:
    """Items/s of ``repeats`` windows of about ``seconds`` each, after ``warmup_batches`` batches and
    then short windows until two in a row agree within :data:`STEADY` (at most STEADY_WINDOWS)."""
    steady = _warm_up(next_batch, batch_size, seconds, warmup_batches)
    windows = [_window(next_batch, batch_size, seconds) for _ in range(repeats)]
    return Rates([r for r, _ in windows], [n for _, n in windows], steady)


def measure_in_turn(next_batches: list, batch_size: int, seconds: float, repeats: int,
                    warmup_batches: int) -> list[Rates]:
    """:func:`measure` for several sources whose ratio matters (the same pairs in two containers): each
    warmed up, then their timed windows taken in turn, A B A B ..., so that a machine that slows down or
    speeds up during the run weighs on both alike. Before each window a short one, untimed, drains
    what the source prefetched while the others ran."""
    steady = [_warm_up(n, batch_size, seconds, warmup_batches) for n in next_batches]
    windows: list[list] = [[] for _ in next_batches]
    for _ in range(repeats):
        for next_batch, taken in zip(next_batches, windows):
            _window(next_batch, batch_size, max(seconds / 4, 0.05))
            taken.append(_window(next_batch, batch_size, seconds))
    return [Rates([r for r, _ in w], [n for _, n in w], ok) for w, ok in zip(windows, steady)]


def _warm_up(next_batch, batch_size: int, seconds: float, warmup_batches: int) -> bool:
    """``warmup_batches`` batches, then short windows until two in a row agree within :data:`STEADY` (at
    most STEADY_WINDOWS); whether they did."""
    for _ in range(warmup_batches):
        next_batch()
    previous = None
    for _ in range(STEADY_WINDOWS):
        rate, _ = _window(next_batch, batch_size, max(seconds / 4, 0.05))
        if previous is not None and abs(rate - previous) <= STEADY * max(rate, previous):
            return True
        previous = rate
    return False


def timing_warnings(name: str, rates: Rates) -> list[str]:
    """What makes a measurement's figure doubtful, said plainly."""
    found = []
    if rates.batches and min(rates.batches) < MIN_BATCHES:
        found.append(f"{name}: a timed window held {min(rates.batches)} batches (fewer than {MIN_BATCHES}): the "
                     "figure is noisy; raise --seconds")
    if not rates.steady:
        found.append(f"{name}: the warm-up did not reach a steady rate (two windows within {STEADY:.0%}): the "
                     "machine is busy or the loader still warming; raise --seconds or --repeats")
    return found


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
def bench_plan(data: SegmentationData, batch_size: int, image_size, label_mode: str, **options) -> Plan:
    """The one plan every backend is built from: random crops, seed 0."""
    return make_plan(data, batch_size, image_size, crop="random", label_mode=label_mode, seed=0, caller="bench",
                     **options)


def backend_source(name: str, plan: Plan, workers: int):
    """One backend's product, built as a user would build it from ``plan``."""
    if name == BASELINE:
        return naive_tfdata(plan.data, plan.batch_size, plan.spec.image_size, plan.spec.label_mode)
    options = {"workers": workers} if product(name) == "keras" else {}
    return backends.resolve(name, product(name)).build(product(name), plan, **options)


def backend_stream(name: str, plan: Plan, workers: int):
    """An endless iterator of batches from one backend (opencv: ``workers`` threads, as PyDataset)."""
    source = backend_source(name, plan, workers)
    if product(name) == "dali":
        pipe, _ = source
        return (pipe.run() for _ in itertools.count())
    return ordered_parallel(source, workers) if sequence_like(name) else endless(source)


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

    def load(image_bytes, mask_bytes):
        image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
        mask = tf.io.decode_image(mask_bytes, channels=3, expand_animations=False)
        image = tf.image.resize_with_crop_or_pad(image, h, w)
        mask = tf.image.resize_with_crop_or_pad(mask, h, w)
        onehot = tf.stack([tf.reduce_all(mask == palette[c], axis=-1) for c in range(data.classes.num_classes)], -1)
        labels = tf.cast(onehot, tf.float32)
        if label_mode == "int":
            labels = tf.where(tf.reduce_any(onehot, -1), tf.argmax(labels, -1, output_type=tf.int32), 255)
        return tf.cast(image, tf.float32) / 255.0, labels

    if data.records is not None:  # the same, from TFRecords as people first read them (TFRecordDataset)
        from .backends.tfdata import record_stream

        keys = data.records
        features = {key: tf.io.FixedLenFeature([], tf.string) for key in (keys.image_key, keys.mask_key)}
        ds = record_stream(data.images).map(lambda _, s: tf.io.parse_single_example(s, features)).map(
            lambda f: (f[keys.image_key], f[keys.mask_key]))
    else:
        ds = tf.data.Dataset.from_tensor_slices((list(data.images), list(data.masks))).map(
            lambda image, mask: (tf.io.read_file(image), tf.io.read_file(mask)))
    ds = ds.shuffle(len(data), seed=0).repeat().map(load, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------- ceilings
def cpu_decode_ceiling(data: SegmentationData, workers: int, seconds: float, repeats: int, what: str = "pairs"):
    """Pairs (or images, or masks) per second with ``workers`` threads doing nothing but read + decode."""
    import cv2

    from .codecs import decode_file, mask_flags

    mask_flag = mask_flags(data.classes)
    jobs = {"pairs": [(p, cv2.IMREAD_COLOR, m, mask_flag) for p, m in zip(data.images, data.masks)],
            "images": [(p, cv2.IMREAD_COLOR) for p in data.images],
            "masks": [(m, mask_flag) for m in data.masks]}[what]

    def work(job):
        for path, flag in zip(job[::2], job[1::2]):
            decode_file(path, flag)

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
        if data.records is not None:
            from nvidia.dali import tfrecord as tfrec

            from .tfrecord import reader_files

            paths, indexes = reader_files(data.images)
            key = data.records.image_key
            encoded = fn.readers.tfrecord(path=paths, index_path=indexes, random_shuffle=True, seed=0,
                                          features={key: tfrec.FixedLenFeature((), tfrec.string, "")})[key]
        else:
            encoded, _ = fn.readers.file(files=list(data.images), random_shuffle=True, seed=0)
        return fn.decoders.image(encoded, device="mixed", output_type=types.RGB, jpeg_fancy_upsampling=True)

    pipe = decode_only()
    pipe.build()
    return measure(pipe.run, batch_size, seconds, repeats, warmup_batches=max(1, len(data) // batch_size))


# ---------------------------------------------------------------- stage breakdowns
def dali_stages(plan: Plan, device: str, seconds: float, repeats: int) -> list[dict]:
    """The DALI graph cut after each stage; a stage's cost is the growth of wall time per image.

    As in ``tf_dataset``, a graph that hands its batches over on the CPU ends with int labels for
    one-hot batches, and the one-hot encoding by TensorFlow is timed on its own (the last row); and it
    runs as many samples per DALI batch as ``tf_dataset`` does (:func:`~.backends.dali_graph.host_batch_size`).
    """
    from .backends.dali_graph import STAGES, SegmentationPipeline, graph_spec, host_batch_size, outputs_on

    dali_spec = graph_spec(plan.spec, outputs_on(device, plan))
    encode_in_tf = dali_spec.label_mode != plan.spec.label_mode
    batch = host_batch_size(plan, device)
    rows, previous = [], 0.0
    for stage in STAGES + ("encode",):
        pipe = SegmentationPipeline(plan, device, spec=dali_spec, stage=None if stage == "encode" else stage,
                                    batch_size=batch)
        pipe.build()
        rate = statistics.median(measure(pipe.run, batch, seconds, repeats,
                                         warmup_batches=max(1, len(plan.data) // batch)))
        ms = 1000.0 / rate
        name = "encode (int)" if stage == "encode" and encode_in_tf else stage
        rows.append({"stage": name, "cumulative_img_per_s": round(rate, 1), "ms_per_img": round(ms - previous, 2)})
        previous = ms
        del pipe
    if encode_in_tf and has_tensorflow():
        import tensorflow as tf

        from .backends.tfops import one_hot

        num_classes = plan.data.classes.num_classes
        shape = (plan.batch_size, *plan.spec.image_size)
        labels = tf.constant(np.random.default_rng(0).integers(0, num_classes, shape, dtype=np.uint8))
        rate = statistics.median(measure(lambda: touch([one_hot(labels, num_classes)]), plan.batch_size,
                                         seconds, repeats, warmup_batches=1))
        rows.append({"stage": "one-hot (TensorFlow)", "cumulative_img_per_s": None, "ms_per_img": round(1000.0 / rate, 2)})
    return rows


def opencv_stages(plan: Plan, samples: int = 32) -> list[dict]:
    """The opencv backend's stages timed one by one on one thread, ms per image: the loader's own
    ``sample`` with a clock, then its ``encode``."""
    from .backends.opencv import SAMPLE_STAGES, OpenCVLoader

    loader = OpenCVLoader(plan)
    rng = np.random.default_rng(0)
    totals = dict.fromkeys(SAMPLE_STAGES + ("encode",), 0.0)
    for i in range(samples):
        last = [time.perf_counter()]

        def clock(stage):
            now = time.perf_counter()
            totals[stage] += now - last[0]
            last[0] = now

        _, labels = loader.sample(i % len(plan.data), rng, clock)
        loader.encode(labels)
        clock("encode")
    off = {"rotate": not plan.spec.rotates, "flip": plan.spec.flip == 0}
    return [{"stage": name, "ms_per_img": round(1000 * v / samples, 2)} for name, v in totals.items()
            if not off.get(name, False)]


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
    info["dali_build"] = dali_build()
    info["daliloader"] = code_version()
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            info["gpu"] = out.stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def code_version() -> str:
    """The daliloader measured: its version and, from a git checkout, the commit (``+`` if changed)."""
    import subprocess

    from . import __version__

    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty=+", "--abbrev=12"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__} {commit.stdout.strip()}" if commit.returncode == 0 and commit.stdout.strip() else __version__


def dali_build() -> str | None:
    """The DALI wheel installed, which names its CUDA build: ``nvidia-dali-cuda120 2.4.0``."""
    from importlib import metadata

    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().startswith("nvidia-dali-cuda"):
            return f"{name.lower()} {dist.version}"
    return None


def noisy(measurement: dict) -> bool:
    """Whether a figure's repeats spread by more than :data:`NOISY` of its median: too noisy to read
    as a ratio (its percentages are left out, and the report says so)."""
    return measurement["max"] - measurement["min"] > NOISY * measurement["median"]


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


def training_device() -> str:
    """The device Keras trains on: the first GPU TensorFlow sees, else the CPU."""
    import tensorflow as tf

    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


def resident(batch, device: str) -> tuple:
    """A copy of ``batch`` that lives on ``device`` (tensors already there are not copied)."""
    import tensorflow as tf

    with tf.device(device):
        return tuple(tf.identity(t) for t in batch)


def train_bound(plan: Plan, names, steps: int, workers: int) -> dict:
    """Step time of a small U-Net fed by each backend, and its floor: the same compiled step on one batch
    resident on the device the model trains on, so that no input work or copy is in it.

    ``waiting`` = 1 - floor / step time: the share of each step spent waiting for input. The fed steps
    run in ``model.fit`` (what users run); the floor steps through ``train_on_batch``, which waits for
    each step's loss, so the floor is if anything a little high and ``waiting`` a little low. (A batch
    cached in a ``tf.data`` dataset is no floor: tf.data keeps it on the host and copies it to the GPU
    every step, 268 MB for 8 one-hot 512x512 samples of 32 classes, which made the floor 48 ms against a
    fed dali-gpu step of 23 ms on the H100.)
    """
    import keras

    classes = plan.data.classes
    loss = (keras.losses.CategoricalCrossentropy(from_logits=True) if plan.spec.label_mode == "onehot"
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=classes.ignore_index))

    def model():
        built = small_unet(plan.spec.image_size, classes.num_classes)
        built.compile("adam", loss)
        return built

    def fed_step(source) -> float:
        trained = model()
        trained.fit(source, steps_per_epoch=min(3, steps), epochs=1, verbose=0,
                    shuffle=False)  # trace, warm up (the loader shuffles: no Keras warning that it ignores shuffle)
        start = time.perf_counter()
        trained.fit(source, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
        return (time.perf_counter() - start) / steps

    def floor_step(batch) -> float:
        trained = model()
        for _ in range(min(3, steps)):  # trace, warm up
            trained.train_on_batch(*batch)
        start = time.perf_counter()
        for _ in range(steps):
            trained.train_on_batch(*batch)
        return (time.perf_counter() - start) / steps

    rows = {}
    for name in names:
        source = backend_source(name, plan, workers)
        x, y = source[0] if sequence_like(name) else next(iter(source))
        floor = floor_step(resident((x, y), training_device()))
        fed = fed_step(source)
        rows[name] = {"step_ms": round(1000 * fed, 1), "floor_ms": round(1000 * floor, 1),
                      "waiting_share": round(max(0.0, 1 - floor / fed), 3)}
    return rows


# ---------------------------------------------------------------- the job
@dataclass(frozen=True)
class Settings:
    """What ``daliloader bench`` measures (its command-line options)."""

    backends: tuple[str, ...] | None = None  # None: every backend this machine can run
    batch_size: int = 8
    image_size: int | tuple[int, int] = 512  # a side (square crops) or (height, width)
    label_modes: tuple[str, ...] = ("onehot",)
    seconds: float = 3.0
    repeats: int = 3
    workers: int | None = None  # threads for opencv and the CPU ceilings (None: all cores)
    stages: bool = True
    train: bool = False
    train_steps: int = 8
    prepared: str | None = None  # a folder for the prepared copy, "cache" for one in the cache, or None
    augment: bool = False  # also measure each backend with AUGMENT on
    tfrecord: bool = False  # also measure the same pairs in the other container (TFRecords, or files)


def augment_kept(results: list[dict]) -> dict:
    """Per backend and labels: the share of its throughput that full augmentation keeps (same run)."""
    medians = {(r["name"], r["label_mode"], r.get("augment", "none")): r["median"] for r in results
               if r.get("data", "original") == "original"}
    return {f"{name} {mode}": round(medians[(name, mode, "full")] / medians[(name, mode, "none")], 3)
            for (name, mode, augment) in medians if augment == "full" and (name, mode, "none") in medians}


def choose_backends(settings: Settings) -> list[str]:
    """The backends to measure: those asked for, or every one this machine can run; refuses what it cannot."""
    chosen = list(settings.backends or [b for b in BENCH_BACKENDS if product(b) is not None])
    for name in chosen:
        if product(name) is None:
            raise SpecError(f"--backends: {name} needs {lacks(name)}, which this machine lacks (`make install` "
                            "installs TensorFlow, Keras and DALI's TF plugin)")
    if settings.train and not has_tensorflow():
        raise SpecError("--train needs TensorFlow, Keras and DALI's TF plugin (`make install`)")
    return chosen


def dataset_digest(data: SegmentationData) -> str:
    """A short digest of a dataset's pairs (their names), for the names of the bench's cached copies."""
    return hashlib.sha1("\n".join(map(str, data.images + data.masks)).encode(errors="surrogateescape")).hexdigest()[:12]


def other_container(data: SegmentationData, status=None) -> tuple[str, SegmentationData]:
    """``--tfrecord``: the same pairs in the other container, made once in the cache: ``("tfrecord",
    data)`` for files, ``("files", data)`` for TFRecords (see :mod:`daliloader.convert`)."""
    from . import convert
    from .environment import cache_dir, cache_way_out

    which = "files" if data.records is not None else "tfrecord"
    out = cache_dir() / f"{which}-{place_name(data)}-n{len(data)}-{dataset_digest(data)}"
    return which, (status or _quiet)(f"writing {len(data)} pairs as {which} into {out} (or waiting for a run "
                                     "writing them)", lambda: convert.other_container(data, out, cache_way_out()))


def dataset_place(data: SegmentationData) -> str:
    """Where a dataset's files are: the folder that holds them all (a multi-city split: the split's
    folder, not its first city's), or the TFRecord files' folder."""
    from .parts import part_file

    folders = sorted({os.path.dirname(os.path.abspath(part_file(p))) for p in data.images})
    return folders[0] if len(folders) == 1 else os.path.commonpath(folders)


def place_name(data: SegmentationData) -> str:
    """A short name of where a dataset's pairs are: the folder of its first file."""
    from .parts import part_file

    return Path(part_file(data.images[0])).parent.name


def container_kept(results: list[dict]) -> dict:
    """``--tfrecord``: per backend and labels, the rate on TFRecords over the rate on files (same run)."""
    medians = {(r["name"], r["label_mode"], r.get("data", "original")): r["median"] for r in results
               if r.get("augment", "none") == "none"}
    out = {}
    for (name, mode, which), rate in medians.items():
        other = {"tfrecord": "original", "files": "original"}.get(which)
        if other and (name, mode, other) in medians:
            records, files = (rate, medians[(name, mode, other)]) if which == "tfrecord" else \
                (medians[(name, mode, other)], rate)
            out[f"{name} {mode}"] = round(records / files, 3)
    return out


def prepared_copy(data: SegmentationData, where: str, status=None) -> Path:
    """The folder of the prepared copy (with packs) the bench compares with: ``where`` names one (made
    there if absent), or is ``"cache"``: made once for this dataset in the cache folder, where a bench
    that finds another one making it waits for it and then uses its copy."""
    from .prepare import MANIFEST, VERSION, prepare, prepare_cached
    from .environment import cache_dir, cache_way_out

    source = {"made_by": "daliloader bench --prepared"}
    if where == "cache":
        out = cache_dir() / f"prepared-v{VERSION}-{place_name(data)}-n{len(data)}-{dataset_digest(data)}"
        (status or _quiet)(f"preparing {len(data)} pairs into {out} (or waiting for a run making it)",
                           lambda: prepare_cached(data, out, cache_way_out(), pack_size=BENCH_PACK_SIZE, source=source))
        return out
    out = Path(where)
    if not (out / MANIFEST).exists():
        (status or _quiet)(f"preparing {len(data)} pairs into {out}",
                           lambda: prepare(data, out, pack_size=BENCH_PACK_SIZE, progress=False, source=source))
    return out


def _quiet(what: str, fn):
    return fn()


@dataclass(frozen=True)
class Cell:
    """One figure of the bench: a backend on some data (which: original, prepared, shards, tfrecord,
    files), with labels and augmentation, and the plan it is built from."""

    which: str
    name: str
    mode: str
    augment: str
    plan: Plan

    @property
    def what(self) -> str:
        return f"{self.name} / {self.mode} / {self.which}" + (" / augmented" if self.augment == "full" else "")


def cell_groups(datasets: dict, names: list[str], settings: "Settings") -> list[list[Cell]]:
    """Every figure to measure, in groups measured together (:func:`measure_in_turn`): a backend on the
    original pairs and on the same pairs in the other container (``--tfrecord``) form one group; every
    other figure is a group of its own."""
    size = (settings.image_size,) * 2 if isinstance(settings.image_size, int) else tuple(settings.image_size)
    groups: dict[tuple, list[Cell]] = {}
    for which, source in datasets.items():
        # packs are read by DALI's webdataset reader; opencv and tfdata read the prepared files
        for name in (b for b in names if which != "shards" or backends.BACKENDS.get(b, None) and
                     backends.BACKENDS[b].reads_packs):
            augments = ("none", "full") if settings.augment and which == "original" and name != BASELINE else ("none",)
            for mode, augment in itertools.product(settings.label_modes, augments):
                plan = bench_plan(source, settings.batch_size, size, mode, **(AUGMENT if augment == "full" else {}))
                together = which in ("original", "tfrecord", "files") and augment == "none"
                key = (name, mode, augment) if together else (which, name, mode, augment)
                groups.setdefault(key, []).append(Cell(which, name, mode, augment, plan))
    return list(groups.values())


def _result(cell: Cell, rates: Rates, ceilings: dict, warned: list[str]) -> dict:
    """A figure of the report: the rates and their spread, and its share of the ceiling that bounds it."""
    suffix = "_prepared" if cell.which in ("prepared", "shards") else ""  # other containers: the same bytes
    m = {**Measurement(cell.name, cell.mode, rates).to_dict(), "data": cell.which, "via": via(cell.name),
         "augment": cell.augment}
    bound_keys = [f"cpu_decode_pairs{suffix}"]
    if cell.name in backends.BACKENDS and backends.BACKENDS[cell.name].gpu:  # nvJPEG or the masks, whichever binds
        bound_keys = ["nvjpeg_images", f"cpu_decode_masks{suffix}"]
    m["noisy"] = noisy(m)
    ceiling_noisy = any(noisy(ceilings[k]) for k in bound_keys)
    share = m["median"] / min(ceilings[k]["median"] for k in bound_keys)
    # a share is only read where both figures hold still and the ceiling bounds the figure
    m["fraction_of_ceiling"] = None if m["noisy"] or ceiling_noisy or share > 1 else round(share, 3)
    if share > 1 and not (m["noisy"] or ceiling_noisy):
        warned.append(f"{cell.what}: {share:.0%} of its ceiling, which is then no ceiling (the ceiling ran while the "
                      "machine was busier?); raise --seconds or --repeats")
    return m


def run(data: SegmentationData, settings: Settings, status=None, say=print) -> dict:
    """Measure everything ``settings`` asks for; returns the report (machine, settings, ceilings, results,
    stages, training). ``status(what, fn)`` runs ``fn`` while showing ``what``; ``say`` prints a line."""
    from .manifest import PACKS, load_manifest
    from .parts import part_file

    status = status or _quiet
    names = choose_backends(settings)
    if not has_tensorflow():
        say("TensorFlow is not installed: DALI backends are timed through pipeline.run, opencv without Keras")
    gpu = backends.dali_gpu_count() > 0
    workers = settings.workers or os.cpu_count() or 1
    size = (settings.image_size,) * 2 if isinstance(settings.image_size, int) else tuple(settings.image_size)
    images_dir = dataset_place(data)
    report = {"machine": machine_info(),
              "dataset": {"images": images_dir, "pairs": len(data), "classes": data.classes.num_classes},
              "settings": {"batch_size": settings.batch_size, "image_size": list(size), "crop": "random",
                           "label_modes": list(settings.label_modes), "seconds": settings.seconds,
                           "repeats": settings.repeats, "workers": workers, "backends": names},
              "method": "median of repeats after a one-epoch warm-up and until steady; images/s", "ceilings": {},
              "results": [], "stages": {}, "warnings": []}
    if settings.augment:
        report["settings"]["augment"] = AUGMENT
    ceilings, warned = report["ceilings"], report["warnings"]

    def ceiling(key: str, unit: str, fn):
        rates = status(f"ceiling: {key.replace('_', ' ')}", fn)
        warned.extend(timing_warnings(f"ceiling {key}", rates))
        ceilings[key] = Measurement(key.replace("_", "-"), None, rates, unit).to_dict()

    for what in ("pairs", "images", "masks"):
        ceiling(f"cpu_decode_{what}", f"{what}/s",
                lambda: cpu_decode_ceiling(data, workers, settings.seconds, settings.repeats, what))
    if gpu:
        ceiling("nvjpeg_images", "images/s",
                lambda: nvjpeg_ceiling(data, settings.batch_size, settings.seconds, settings.repeats))

    datasets = {"original": data}
    if settings.prepared is not None:
        out = prepared_copy(data, settings.prepared, status)
        report["dataset"]["prepared"] = str(out)
        datasets["prepared"] = SegmentationData.from_prepared(out)
        if load_manifest(out)[PACKS]:
            datasets["shards"] = SegmentationData.from_prepared(out, packs=True)  # "shards" in reports: the packs
        else:
            say(f"{out} has no packs (`daliloader prepare --packs N` writes them): not measured")
        for what in ("pairs", "masks") if gpu else ("pairs",):  # masks: what binds dali-gpu next to nvJPEG
            ceiling(f"cpu_decode_{what}_prepared", f"{what}/s", lambda: cpu_decode_ceiling(
                datasets["prepared"], workers, settings.seconds, settings.repeats, what))

    if settings.tfrecord:
        which, other = other_container(data, status)
        datasets[which] = other
        report["dataset"][which] = str(Path(part_file(other.images[0])).parent)

    groups = cell_groups(datasets, names, settings)
    figures = sum(map(len, groups))
    say(f"measuring {figures} figure{'s' * (figures != 1)}, each at least {settings.repeats + 1} windows of {settings.seconds:g} s after a "
        f"warm-up epoch: {figures * (settings.repeats + 1) * settings.seconds:.0f} s or more")
    done = 0
    for group in groups:
        streams = [backend_stream(c.name, c.plan, workers) for c in group]
        what = " + ".join(c.what for c in group)
        warmup = max(1, len(group[0].plan.data) // group[0].plan.batch_size)
        found = status(what, lambda: measure_in_turn([lambda s=s: touch(next(s)) for s in streams],
                                                     group[0].plan.batch_size, settings.seconds, settings.repeats,
                                                     warmup))
        for cell, rates in zip(group, found):
            warned.extend(timing_warnings(cell.what, rates))
            report["results"].append(_result(cell, rates, ceilings, warned))
            done += 1
            say(f"  {done}/{figures} {cell.what}: {report['results'][-1]['median']:.1f} images/s")
        for stream in streams:
            stream.close()  # a generator: stops its workers (opencv) and drops its pipeline
    if settings.augment:
        report["augment_kept"] = augment_kept(report["results"])
    if settings.tfrecord:
        report["tfrecord_vs_files"] = container_kept(report["results"])

    if settings.stages:
        plan = bench_plan(data, settings.batch_size, size, settings.label_modes[0])
        for device in (["gpu"] if gpu else []) + ["cpu"]:
            report["stages"][f"dali-{device}"] = status(f"dali-{device} stages", lambda: dali_stages(
                plan, device, settings.seconds / 2, settings.repeats))
        report["stages"]["opencv (1 thread)"] = status("opencv stages", lambda: opencv_stages(plan))
        for name, rows in report["stages"].items():
            negative = [row["stage"] for row in rows if row["ms_per_img"] < 0]
            if negative:
                warned.append(f"stages of {name}: {', '.join(negative)} came out below zero, which is noise between "
                              "the cuts' windows; raise --seconds for a breakdown to read")

    if settings.train:
        plan = bench_plan(data, settings.batch_size, size, settings.label_modes[0])
        trained = [b for b in names if b != BASELINE]
        report["train"] = status("training step times", lambda: train_bound(plan, trained, settings.train_steps,
                                                                             workers))
    return report
