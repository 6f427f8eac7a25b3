"""tf_dataset: the DALI graph handed to Keras through DALI's TensorFlow plugin (daliloader/backends/dali_tf.py),
and what every tf.data loader refuses of Keras (fit's class_weight: backends/tfloader.py)."""

import numpy as np
import pytest
from conftest import batch_indices, one_epoch

import daliloader as dl

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def tiny_unet(num_classes: int, size=(32, 32)) -> "keras.Model":
    inp = keras.Input(size + (3,))
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = keras.layers.UpSampling2D()(x)
    return keras.Model(inp, keras.layers.Conv2D(num_classes, 1)(x))


def test_signature_and_epoch_length(synth_data, dali_backend):
    ds = dl.tf_dataset(synth_data, batch_size=3, image_size=(48, 64), backend=dali_backend)
    assert int(ds.cardinality()) == len(ds) == 8 // 3
    x, y = ds.element_spec
    assert (x.shape, x.dtype) == ((3, 48, 64, 3), tf.float32)
    assert (y.shape, y.dtype) == ((3, 48, 64, 32), tf.float32)
    x, y = next(iter(ds))
    assert float(tf.reduce_min(x)) >= 0.0 and float(tf.reduce_max(x)) <= 1.0
    assert set(np.unique(y.numpy().sum(-1))) <= {0.0, 1.0}
    ds_int = dl.tf_dataset(synth_data, batch_size=2, image_size=(48, 64), label_mode="int", backend=dali_backend)
    assert ds_int.element_spec[1].shape == (2, 48, 64) and ds_int.element_spec[1].dtype == tf.int32


def test_epochs_continue_one_pipeline(index_data):
    """Each iter() is the next epoch of the same DALI stream: no repeats, reshuffled, not restarted."""
    ds = dl.tf_dataset(index_data, batch_size=3, image_size=(24, 32), crop="center", seed=8, backend="dali-cpu")
    epochs = []
    for _ in range(4):
        seen = [i for x, _ in ds for i in batch_indices(x.numpy())]
        assert len(seen) == len(set(seen)) == 9
        epochs.append(tuple(seen))
    # A rebuilt pipeline would restart the stream at position 0 and repeat epoch 0's order.
    assert len(set(epochs)) == 4


def test_fit_keeps_the_pipeline_across_epochs(index_data):
    """model.fit(ds, epochs=2) without steps_per_epoch, then the stream continues at epoch 2."""
    from daliloader.sampler import Sampler

    ds = dl.tf_dataset(index_data, batch_size=2, image_size=(24, 32), crop="center", label_mode="int",
                       seed=9, backend="dali-cpu")
    model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Conv2D(32, 1)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255))
    model.fit(ds, epochs=2, verbose=0)
    reference = Sampler(10, 2, seed=9)
    x, _ = next(iter(ds))
    assert batch_indices(x.numpy()) == reference.batch(2 * reference.steps).tolist()


def test_paths_of_every_length_reach_the_graph_a_batch_at_a_time(index_data, dali_backend, tmp_path):
    """The graph's inputs are fed a batch at a time (dali_graph.graph_input), the paths of a batch padded
    to its longest, each with its length first: names of very different lengths, with spaces and
    non-ASCII letters, each read their own pair, in order."""
    import shutil

    names = ["a", "é" * 60, "with spaces", "x" * 150, "日本語", "b", "ü" * 3, "c" * 40, "d", "e.f.g"]
    pairs = []
    for i, name in enumerate(names):
        (tmp_path / name).mkdir()
        image, mask = tmp_path / name / f"{name}.png", tmp_path / name / f"{name}_L.png"
        shutil.copy(index_data.images[i], image)
        shutil.copy(index_data.masks[i], mask)
        pairs.append((str(image), str(mask)))
    data = dl.SegmentationData.from_pairs(pairs, index_data.classes)
    ds = dl.tf_dataset(data, batch_size=4, image_size=(24, 32), crop="center", shuffle=False, drop_remainder=False,
                       backend=dali_backend)
    seen = [i for x, _, w in ds for i, real in zip(batch_indices(x.numpy()), w.numpy()[:, 0, 0]) if real]
    assert seen == list(range(10))


def test_evaluation_batches_carry_weights(index_data):
    ds = dl.tf_dataset(index_data, batch_size=4, image_size=(24, 32), crop="center", shuffle=False,
                       drop_remainder=False, backend="dali-cpu")
    assert len(ds) == 3
    batches = list(ds)
    assert batches[0][2].shape == (4, 24, 32)
    weights = np.concatenate([w.numpy()[:, 0, 0] for _, _, w in batches])
    seen = np.concatenate([batch_indices(x.numpy()) for x, _, _ in batches])
    assert weights.tolist() == [1.0] * 10 + [0.0] * 2
    assert sorted(seen[weights == 1].tolist()) == list(range(10))


def test_model_fit_two_epochs(synth_data, dali_backend):
    ds = dl.tf_dataset(synth_data, batch_size=2, image_size=(32, 32), crop="random", scale=(0.75, 1.25),
                       label_mode="onehot", backend=dali_backend, seed=0)
    model = tiny_unet(32)
    model.compile("adam", keras.losses.CategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and all(np.isfinite(history.history["loss"]))


def test_bfloat16_output(synth_data):
    ds = dl.tf_dataset(synth_data, batch_size=2, image_size=(16, 16), dtype="bfloat16", backend="dali-cpu")
    x, _ = next(iter(ds))
    assert x.dtype == tf.bfloat16 and len(ds) == 4


def test_gpu_backend_refuses_without_gpu(synth_data):
    from conftest import HAS_GPU

    if HAS_GPU:
        pytest.skip("a GPU is present")
    with pytest.raises(dl.SpecError, match="needs a CUDA GPU"):
        dl.tf_dataset(synth_data, image_size=(16, 16), backend="dali-gpu")


@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_tf_path_gives_the_pipelines_batches(synth_data, dali_backend, label_mode):
    """Under TF the graph's inputs come from tf.data streams (and on the CPU one-hot is encoded by TF):
    the batches are still exactly those of the DALI pipeline alone (the same samples in the same order;
    centre crops, as the random draws come from TF's generator there and DALI's alone). On the host, TF
    normalizes (dividing, as the reference) where DALI alone multiplies by the reciprocal: images agree to
    a float32 rounding, labels exactly."""
    kw = dict(batch_size=4, image_size=(64, 80), crop="center", label_mode=label_mode, seed=3)
    alone = one_epoch(dali_backend, synth_data, **kw)
    in_tf = one_epoch(dali_backend, synth_data, tf=True, **kw)
    assert len(alone) == len(in_tf) > 0
    for a, b in zip(alone, in_tf):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(a[1], b[1])


def test_one_hot_matches_tf_one_hot():
    from daliloader.backends.tfops import one_hot

    labels = np.array([[0, 3, 255], [31, 7, 32]], dtype=np.uint8)  # 255, 32: ignore / out of range
    for dtype in (tf.uint8, tf.int32):
        got = one_hot(tf.constant(labels, dtype), 32).numpy()
        want = tf.one_hot(labels.astype(np.int32), 32, dtype=tf.float32).numpy()
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    assert not got[0, 2].any() and not got[1, 2].any()


def test_importing_daliloader_leaves_gpu_memory_for_dali():
    """TensorFlow takes nearly all GPU memory by default and DALI then runs out: importing daliloader
    asks TF to grow its GPU memory on demand (TF_FORCE_GPU_ALLOW_GROWTH), unless the user set it."""
    import os
    import subprocess
    import sys

    code = "import os, daliloader; print(os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'))"
    env = {k: v for k, v in os.environ.items() if k != "TF_FORCE_GPU_ALLOW_GROWTH"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True).stdout.strip() == "true"
    env["TF_FORCE_GPU_ALLOW_GROWTH"] = "false"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True).stdout.strip() == "false"


def test_gpu_memory_growth_is_set_or_its_absence_explained(monkeypatch):
    """tf_dataset(backend="dali-gpu") turns on memory growth for TF's GPUs; when TF already holds them
    without growth or a memory limit, it warns with the fix instead of letting DALI run out later."""
    from daliloader.backends import dali_tf

    gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config, "get_logical_device_configuration", lambda device: None)
    calls = []
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", lambda device, on: calls.append((device, on)))
    dali_tf.leave_gpu_memory_for_dali()
    assert calls == [(gpu, True)]

    def too_late(device, on):
        raise RuntimeError("Physical devices cannot be modified after being initialized")

    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", too_late)
    monkeypatch.setattr(tf.config.experimental, "get_memory_growth", lambda device: False)
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    with pytest.warns(UserWarning, match="GPU:0.*set_memory_growth.*before"):
        dali_tf.leave_gpu_memory_for_dali()
    import warnings

    monkeypatch.setattr(tf.config.experimental, "get_memory_growth", lambda device: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dali_tf.leave_gpu_memory_for_dali()  # growth already on: nothing to say

    limit = [tf.config.LogicalDeviceConfiguration(memory_limit=4096)]
    monkeypatch.setattr(tf.config, "get_logical_device_configuration", lambda device: limit)
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", lambda device, on: 1 / 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dali_tf.leave_gpu_memory_for_dali()  # a memory limit already leaves room (and TF refuses growth then)


# ---------------------------------------------------------------- tf.data chained onto a dataset
def _indices_of_pass(dataset) -> list[int]:
    """The sample indices of one pass over an evaluation dataset (padding dropped by its weight)."""
    seen = []
    for x, _, w in dataset:
        seen += [i for i, real in zip(batch_indices(x.numpy()), w.numpy()[:, 0, 0]) if real == 1.0]
    return seen


def test_chained_transformations_read_a_fresh_epoch_every_pass(index_data):
    """map, cache, unbatch/batch, take, repeat, prefetch chained onto a DALI dataset work for as many passes
    as they are read; every pass of a chain is a whole epoch (each sample once), reshuffled."""
    ds = dl.tf_dataset(index_data, batch_size=3, image_size=(24, 32), crop="center", label_mode="int", seed=4,
                       drop_remainder=False, backend="dali-cpu")
    mapped = ds.map(lambda x, y, w: (x * 1.0, y, w))
    assert int(mapped.cardinality()) == len(ds) == 4
    passes = [_indices_of_pass(mapped) for _ in range(3)]
    for seen in passes:
        assert sorted(seen) == list(range(10))
    assert len({tuple(p) for p in passes}) == 3, passes
    cached = ds.cache()
    assert _indices_of_pass(cached) == _indices_of_pass(cached)
    rebatched = ds.unbatch().batch(5)
    assert [[int(b[0].shape[0]) for b in rebatched] for _ in range(2)] == [[5, 5, 2]] * 2
    assert sum(1 for _ in ds.repeat(3)) == 12 and sum(1 for _ in ds.repeat().take(9)) == 9
    assert sum(1 for _ in ds.take(2).prefetch(1)) == 2


def test_passes_read_at_once_each_read_their_own_epoch_with_image_and_mask_together(index_data):
    """Passes of one DALI dataset read at once (interleave with parallel calls): every input stream of a
    pipeline read the epoch the latest pass had claimed as it began, so passes read one epoch alike and a
    pipeline's image and mask streams could read different epochs (75 of 180 batches paired images with
    other samples' labels). Each pass now builds its pipeline's streams from its own claim."""
    import tensorflow as tf

    ds = dl.tf_dataset(index_data, batch_size=2, image_size=(24, 32), crop="center", label_mode="int", seed=5,
                       backend="dali-cpu")

    def tagged(k):
        return ds.map(lambda x, y: (x, y, tf.fill(tf.shape(x)[:1], k)))

    passes = tf.data.Dataset.range(6).interleave(tagged, cycle_length=6, num_parallel_calls=6, deterministic=False)
    per_pass: dict[int, list] = {}
    for x, y, k in passes:
        seen = batch_indices(x.numpy())
        assert seen == y.numpy()[:, 0, 0].tolist()  # each image with its own mask's labels
        per_pass.setdefault(int(k[0]), []).extend(seen)
    assert sorted(per_pass) == list(range(6)) and all(sorted(p) == list(range(10)) for p in per_pass.values())
    assert len({tuple(p) for p in per_pass.values()}) == 6, per_pass  # six epochs, not one read six times


def test_epochs_claimed_at_once_are_all_different():
    """A claim added to the next free epoch and read it back in two operations, so that passes claiming at
    once could read one number (a few in thousands, from an outside review): one critical section now."""
    import tensorflow as tf

    from daliloader.backends.dali_tf import Epochs

    epochs = Epochs()

    def one_claim(_):
        return tf.data.Dataset.range(1).map(lambda _: epochs.claim_pass())

    claims = tf.data.Dataset.range(3000).interleave(one_claim, cycle_length=16, num_parallel_calls=16,
                                                    deterministic=False)
    assert sorted(int(c) for c in claims) == list(range(3000))


def test_model_fit_on_chained_datasets(index_data):
    ds = dl.tf_dataset(index_data, batch_size=2, image_size=(24, 32), crop="random", rotate=10, label_mode="int",
                       seed=9, backend="dali-cpu")
    model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Conv2D(32, 1)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255))
    assert len(model.fit(ds.repeat(), steps_per_epoch=3, epochs=2, verbose=0).history["loss"]) == 2
    assert len(model.fit(ds.map(lambda x, y: (x, y)), epochs=2, verbose=0).history["loss"]) == 2


def test_a_second_chained_pass_over_packs_is_refused(index_data, tmp_path):
    """DALI's pack reader restarts with its seed when a chain builds it again: the second pass would
    replay the first, so it fails with daliloader's message."""
    from daliloader.preparation import prepare

    prepare(index_data, tmp_path / "p", pack_size=4, progress=False)
    data = dl.SegmentationData.from_prepared(tmp_path / "p", packs=True)
    ds = dl.tf_dataset(data, batch_size=2, image_size=(24, 32), crop="center", backend="dali-cpu", seed=1)
    mapped = ds.map(lambda x, y: x)
    assert sum(1 for _ in mapped) == len(ds)
    with pytest.raises(tf.errors.InvalidArgumentError, match="daliloader: this dataset is read by a DALI reader"):
        list(mapped)
    with pytest.raises(dl.SpecError, match="daliloader: this dataset is read by a DALI reader"):
        iter(ds)  # a pipeline of its own after the chain's would replay that one's first pass too
    ds = dl.tf_dataset(data, batch_size=2, image_size=(24, 32), crop="center", backend="dali-cpu", seed=1)
    assert [sum(1 for _ in ds) for _ in range(3)] == [len(ds)] * 3  # the dataset itself keeps its one pipeline


@pytest.mark.parametrize("seed", [None, 3])
@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata"])
def test_the_dataset_itself_and_chains_onto_it_never_read_one_epoch_twice(index_data, backend, seed):
    """Iterated itself and through a chain, in either order, a training dataset reads a fresh epoch each
    time. DALI's chained passes used to start at their own count, replaying the epochs the dataset had
    read itself (and the reverse); tfdata's, with a seed, drew their order from a generator of their own
    that began as the dataset's."""
    ds = dl.tf_dataset(index_data, batch_size=3, image_size=(24, 32), crop="center", label_mode="int", seed=seed,
                       backend=backend)
    mapped = ds.map(lambda x, y: (x, y))

    def order(dataset) -> tuple[int, ...]:
        return tuple(i for x, _ in dataset for i in batch_indices(x.numpy()))

    epochs = [order(mapped), order(ds), order(ds), order(mapped), order(mapped), order(ds)]
    assert all(len(set(epoch)) == 9 for epoch in epochs), epochs  # 3 whole batches of 10, no sample twice
    assert len(set(epochs)) == len(epochs), epochs


@pytest.mark.parametrize("options", [dict(label_mode="onehot", crop="random", scale=(0.5, 2.0), flip=0.5),
                                     dict(label_mode="int", crop="center", drop_remainder=False)],
                         ids=["train onehot random", "eval int"])
def test_larger_dali_batches_give_the_same_batches(index_data, monkeypatch, options):
    """With more DALI threads than a batch has samples, the graph runs several batches at once (every
    thread busy) and tf.data splits them: the batches, over several epochs, are exactly those of one
    DALI batch per batch (the same samples, crops and flips: each position's draws come from TF)."""
    import daliloader.backends.dali_graph as graph

    def epochs(samples_per_thread: int):
        monkeypatch.setattr(graph, "SAMPLES_PER_THREAD", samples_per_thread)
        ds = dl.tf_dataset(index_data, batch_size=3, image_size=(20, 24), seed=5, num_threads=4,
                           backend="dali-cpu", **options)
        return [[tuple(t.numpy() for t in batch) for batch in ds] for _ in range(3)]

    grouped, single = epochs(graph.SAMPLES_PER_THREAD), epochs(0)
    assert [len(e) for e in grouped] == [len(e) for e in single] == \
        [len(index_data) // 3 + ("drop_remainder" in options)] * 3
    for a, b in zip(sum(grouped, []), sum(single, [])):
        assert a[0].shape[0] == 3
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_dali_runs_large_batches_on_the_host(synth_data, monkeypatch):
    """The structure that keeps every DALI thread busy and shares DALI's overhead per batch: a DALI batch of
    at least SAMPLES_PER_THREAD samples per thread and MIN_HOST_SAMPLES, an epoch at most, a whole number of
    the user's batches, split by tf.data's rebatch; one DALI batch per batch on the GPU, and for padded pack
    readers (which pad each pass to DALI's batch)."""
    from daliloader.backends import Device
    from daliloader.backends.dali_graph import MIN_HOST_SAMPLES, SAMPLES_PER_THREAD, host_batch_size
    from daliloader.plan import make_plan

    assert SAMPLES_PER_THREAD >= 2
    monkeypatch.setattr("os.cpu_count", lambda: 64)  # planned as on a 64-core machine (threads are bounded by cores)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(64)), raising=False)
    big = synth_data.subset(list(range(len(synth_data))) * 100)  # 800 pairs: no epoch cap below
    for batch, threads in ((8, 64), (8, 2), (3, 4), (1, 64), (32, 64)):
        plan = make_plan(big, batch_size=batch, num_threads=threads, drop_remainder=False)
        dali, wanted = host_batch_size(plan, Device.CPU), max(SAMPLES_PER_THREAD * threads, MIN_HOST_SAMPLES)
        assert dali % batch == 0 and dali >= wanted and dali - batch < wanted, (batch, threads, dali)
        assert host_batch_size(plan, Device.GPU) == batch  # handed over on the GPU: nothing may follow DALIDataset
        small = make_plan(synth_data, batch_size=batch, num_threads=threads, drop_remainder=False)
        assert host_batch_size(small, Device.CPU) == batch * small.steps  # an epoch at most
    graph = tf.Graph()
    with graph.as_default():
        dl.tf_dataset(synth_data, batch_size=2, image_size=(32, 48), num_threads=8, backend="dali-cpu")
    (dali,) = [op for op in graph.get_operations() if op.type == "DALIDataset"]
    assert dali.get_attr("batch_size") == 8  # the epoch's 4 batches of 2
    assert "RebatchDatasetV2" in {op.type for op in graph.get_operations()}


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata"])
def test_keras_class_weight_is_refused_naming_the_loss_that_takes_it(synth_data, backend):
    """model.fit(ds, class_weight=...) maps the dataset to per-sample weights, which a segmentation batch
    cannot have: refused at once, naming dl.losses' class_weights (it failed deep in the loss before)."""
    keras = pytest.importorskip("keras")
    n = synth_data.classes.num_classes
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(n, 1)])
    model.compile("adam", dl.losses.SparseCategoricalCrossentropy())
    ds = dl.tf_dataset(synth_data, batch_size=2, image_size=(32, 32), label_mode="int", backend=backend)
    with pytest.raises(dl.SpecError, match=r"class_weight=.*dl.losses.SparseCategoricalCrossentropy\(class_weights="):
        model.fit(ds, class_weight={0: 1.0, 1: 2.0}, epochs=1, verbose=0)
    assert len(ds.map(lambda x, y: x).take(1).as_numpy_iterator().next()) == 2  # other maps still chain


def test_an_evaluation_plan_without_weights_feeds_its_padding_marks(synth_data, dali_backend):
    """make_plan(training=False, outputs=("image", "labels")): a padding sample's labels are ignored, which
    the graph reads from the sample index; the index was fed only to the weight and index outputs, and DALI
    refused the plan ("External Source nodes ... not assigned any inputs")."""
    plan = dl.make_plan(synth_data, 3, (32, 32), training=False, label_mode="int", outputs=("image", "labels"))
    batches = [tuple(t.numpy() for t in batch) for batch in dl.tf_dataset(plan, backend=dali_backend)]
    assert len(batches) == 3 and all(len(b) == 2 for b in batches)  # 8 pairs in batches of 3: one padding sample
    assert (batches[-1][1][2] == synth_data.classes.ignore_index).all() and (batches[-1][1][:2] != 255).any()


EXITS = """
import sys
import daliloader as dl
data = dl.SegmentationData.from_folder(sys.argv[1])
ds = dl.tf_dataset(data, backend=sys.argv[2], batch_size=2, image_size=32, label_mode="int")
for x, y in ds:
    pass
print("read", flush=True)
"""


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata"])
def test_a_script_that_read_a_training_stream_exits(tmp_path, backend):
    """A script whose last act was reading a training stream of colour masks (a global dataset, its
    persistent iterator alive) ends with its own exit status: tfdata's hung in the interpreter's
    finalisation, its parallel map waiting on the vetting's numpy_function, in 7 of 7 runs of a review
    (once the mask cache was made). Three runs at once, each in a fresh process."""
    import subprocess
    import sys

    from daliloader.synthetic import make_dataset

    make_dataset(tmp_path / "camvid", n=6, image_size=(48, 64))
    # the mask cache made here first: the runs read it, as every run after a dataset's first does
    dl.tf_dataset(dl.SegmentationData.from_folder(tmp_path / "camvid"), backend=backend, batch_size=2, image_size=32)
    runs = [subprocess.Popen([sys.executable, "-c", EXITS, str(tmp_path / "camvid"), backend], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    for run in runs:
        try:
            out, err = run.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            run.kill()
            pytest.fail(f"{backend}: the script read its stream, then did not exit within 120 s")
        assert run.returncode == 0 and out.strip() == "read", (run.returncode, out, err[-2000:])
