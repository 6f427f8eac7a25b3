"""The dali-gpu path, proven without a GPU (see ``gpu_path.py``): every configuration the loaders can
build is built as on a GPU machine, traced, and checked against DALI's schemas and TF's kernel registry.

Runs in every ``make test``: no CUDA, no GPU marker, a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

import daliloader as dl

tf = pytest.importorskip("tensorflow")
from gpu_path import dali_problems, multi_device_iterator, placed, pretend_gpu, tf_problems  # noqa: E402

from daliloader.backends import Device  # noqa: E402
from daliloader.backends.dali_graph import SAMPLES_PER_THREAD, host_batch_size, threads  # noqa: E402
from daliloader.parallel import cores  # noqa: E402


@pytest.fixture(scope="module")
def id_data(tmp_path_factory) -> dl.SegmentationData:
    """Cityscapes-style 8-bit id masks (remapped to train ids) beside JPEG photos."""
    root = tmp_path_factory.mktemp("ids")
    rng = np.random.default_rng(0)
    for d in ("img", "gt"):
        (root / d).mkdir()
    for i in range(6):
        cv2.imwrite(str(root / "img" / f"{i}_leftImg8bit.jpg"), rng.integers(0, 255, (40, 56, 3), np.uint8))
        cv2.imwrite(str(root / "gt" / f"{i}_gtFine_labelIds.png"), rng.integers(0, 34, (40, 56), np.uint8))
    return dl.SegmentationData.from_dirs(root / "img", root / "gt", dl.ClassMap.cityscapes(),
                                         image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds")


@pytest.fixture(scope="module")
def packed(synth_data, tmp_path_factory) -> dl.SegmentationData:
    out = tmp_path_factory.mktemp("packed") / "out"
    dl.prepare(synth_data, out, pack_size=3, progress=False)
    return dl.SegmentationData.from_prepared(out, packs=True)


@pytest.fixture(scope="module")
def records(synth_data, tmp_path_factory) -> dl.SegmentationData:
    """synth_data's pairs in TFRecord files (Model Garden's layout), each record read and checked by the
    guard and fed to the graph (no DALI TFRecord reader)."""
    from daliloader import convert

    out = tmp_path_factory.mktemp("records")
    convert.to_tfrecord(synth_data, out)
    return dl.SegmentationData.from_tfrecord(str(out / "*.tfrecord"), classes=synth_data.classes)


@pytest.fixture(scope="module")
def bucket(synth_data, packed, s3_server):
    """synth_data's pairs in a bucket of an S3 server on the loopback (tests/conftest.py): their objects,
    each pair fetched and checked by the guard and fed to the graph as records are; and the prepared
    copy's packs, which DALI's own reader reads from the bucket."""
    from s3server import upload

    client = s3_server.client()
    url = upload(client, Path(synth_data.images[0]).parents[1], "gpu-path", "synth")
    copy = upload(client, Path(packed.packs.tars[0]).parents[1], "gpu-path", "prepared")
    return {"bucket": dl.SegmentationData.from_folder(url),
            "bucket packs": dl.SegmentationData.from_prepared(copy, packs=True)}


@pytest.fixture
def datasets(synth_data, id_data, packed, records, bucket):
    prepared = dl.SegmentationData.from_prepared(packed.packs.tars[0].rsplit("/packs/", 1)[0])
    return {"colour masks": synth_data, "id masks": id_data, "shards": packed, "prepared": prepared,
            "tfrecord": records, **bucket}


def assert_none(problems: list[str]) -> None:
    assert not problems, "\n".join(problems)


DATA = ["colour masks", "id masks", "shards", "prepared", "tfrecord", "bucket", "bucket packs"]
CASES = {
    "train onehot random zoom": dict(label_mode="onehot", crop="random", scale=(0.5, 2.0)),
    "train int center": dict(label_mode="int", crop="center"),
    "train int float16 normalised": dict(label_mode="int", crop="random", dtype="float16",
                                         mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
    "eval onehot center": dict(label_mode="onehot", crop="center", drop_remainder=False),
    "eval int random zoom float16": dict(label_mode="int", crop="random", scale=(0.75, 1.25), dtype="float16",
                                         drop_remainder=False),
    "train onehot full augmentation": dict(
        label_mode="onehot", crop="random", scale=(0.5, 2.0), rotate=20, brightness=0.3, contrast=0.3,
        saturation=0.3, hue=10),
    "evaluation mode, whole images": dict(label_mode="int", training=False, image_size=None),
    "eval int fit": dict(label_mode="int", crop="fit", drop_remainder=False),
    "train int resize rotate": dict(label_mode="int", crop="resize", rotate=(-90, 90), flip=0.5),
    "train int declared stages": dict(label_mode="int", crop="random", vflip=0.5, blur=(0.5, 1.5), gamma=0.2,
                                      erase=0.5, erase_mask="ignore"),
    "train int category-ratio crop": dict(label_mode="int", crop="random", scale=(0.5, 2.0), cat_max_ratio=0.75),
}


def case_options(case: str, which: str) -> dict:
    """The loader options of a case (image_size (32, 48) unless the case says)."""
    return {"image_size": (32, 48), **CASES[case]}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("which", DATA)
def test_dali_gpu_graph_and_what_follows_it(monkeypatch, datasets, which, case):
    """tf_dataset(backend="dali-gpu"): every op of the DALI graph on a device its schema allows, inputs
    where the schema needs them, nvJPEG set to decode like the CPU, every output on the GPU; and
    after the GPU-placed DALIDataset only ops with GPU kernels."""
    build = pretend_gpu(monkeypatch)
    built = build(lambda: dl.tf_dataset(datasets[which], batch_size=3, backend="dali-gpu", seed=0,
                                        **case_options(case, which)))
    assert len(built.pipelines) == 1
    assert_none(dali_problems(built.pipelines[0], outputs_on="gpu"))
    assert_none(tf_problems(built))
    assert [placed(op) for op in built.dali_ops()] == ["GPU:0"]
    # a prepared copy's masks are inflated on the GPU (LZ4), not decoded from PNG on the CPU
    ops = {(o._op._schema.Name(), o._op.device) for o in built.pipelines[0]._ops}
    # (but where cat_max_ratio chooses the window from the whole mask's classes, on the CPU)
    chooses = "cat_max_ratio" in CASES[case]
    assert (("decoders__Inflate", "gpu") in ops) == (which in ("shards", "prepared") and not chooses)
    assert (("daliloader__CatMaxRatioWindow", "cpu") in ops) == chooses
    assert ("decoders__Image", "mixed") in ops
    assert ("readers___TFRecord", "cpu") not in ops  # records are read by the guard, checked against the index
    assert (("io__file__Read", "cpu") in ops) == (which in ("colour masks", "id masks", "prepared"))
    # the random draws: fed by TensorFlow (an input), except under a pack reader, where DALI's generator draws
    draws = dl.make_plan(datasets[which], batch_size=3, seed=0, **case_options(case, which)).spec.draws_at_random
    assert (("random__Uniform", "cpu") in ops) == (draws and which in ("shards", "bucket packs"))


def test_an_evaluation_plan_without_weights(monkeypatch, synth_data):
    """make_plan(training=False, outputs=("image", "labels")): the labels read the sample index (a padding
    sample's are ignored), which the GPU graph is fed too, though no output is the index or the weights."""
    build = pretend_gpu(monkeypatch)
    plan = dl.make_plan(synth_data, 3, (32, 48), training=False, label_mode="int", outputs=("image", "labels"))
    built = build(lambda: dl.tf_dataset(plan, backend="dali-gpu"))
    assert_none(dali_problems(built.pipelines[0], outputs_on="gpu"))
    assert_none(tf_problems(built))


@pytest.mark.parametrize("case", ["train onehot random zoom", "eval int random zoom float16"])
def test_dali_cpu_is_checked_the_same_way(monkeypatch, synth_data, case):
    """The checks themselves: the CPU graph passes them with its outputs on the CPU, and fails them
    when told its outputs should be on the GPU."""
    build = pretend_gpu(monkeypatch)
    built = build(lambda: dl.tf_dataset(synth_data, batch_size=2, image_size=(32, 48), backend="dali-cpu",
                                        **CASES[case]))
    assert_none(dali_problems(built.pipelines[0], outputs_on="cpu"))
    assert dali_problems(built.pipelines[0], outputs_on="gpu")
    assert_none(tf_problems(built))
    assert [placed(op) for op in built.dali_ops()] == ["CPU:0"]


def test_tf_data_chained_onto_a_gpu_dataset_is_refused_by_name(monkeypatch, synth_data):
    """tf.data's transformations have no GPU kernels: chaining one onto a dali-gpu dataset fails at once,
    naming daliloader and the ways out (prefetch and with_options, which have GPU kernels, stay)."""
    build = pretend_gpu(monkeypatch)
    ds = build(lambda: dl.tf_dataset(synth_data, batch_size=2, image_size=(32, 48), backend="dali-gpu")).result
    for chain in (lambda d: d.map(lambda x, y: x), lambda d: d.repeat(), lambda d: d.unbatch(), lambda d: d.cache()):
        with pytest.raises(dl.SpecError, match="daliloader: ds\\.\\w+\\(\\) on a backend='dali-gpu' dataset.*Keras "
                                               "layers.*backend='dali-cpu'"):
            chain(ds)


def test_bfloat16_is_refused_on_the_gpu(monkeypatch, synth_data):
    """DALI cannot output bfloat16, and a cast after a GPU DALIDataset would be a CPU-only map."""
    build = pretend_gpu(monkeypatch)
    with pytest.raises(dl.SpecError, match="bfloat16.*mixed_bfloat16"):
        build(lambda: dl.tf_dataset(synth_data, image_size=(32, 48), dtype="bfloat16", backend="dali-gpu"))


# ---------------------------------------------------------------- distribute
GPU = "/job:localhost/replica:0/task:0/device:GPU:{}"


def mirrored(gpus: int):
    """MirroredStrategy over GPUs that need not exist (made inside the graph, where nothing runs)."""
    return tf.distribute.MirroredStrategy([GPU.format(i) for i in range(gpus)])


@pytest.mark.parametrize("drop_remainder", [True, False])
@pytest.mark.parametrize("which", ["colour masks", "shards", "tfrecord"])
def test_mirrored_strategy_places_one_pipeline_per_gpu(monkeypatch, datasets, which, drop_remainder):
    """Two replicas on TF's GPU:0 and GPU:1, which are CUDA devices 2 and 3 (GPUs 0 and 1 hidden with
    set_visible_devices): each DALI dataset on its replica's GPU with DALI's device_id = the CUDA
    ordinal, read directly (no MultiDeviceIterator), nothing CPU-only after it."""
    build = pretend_gpu(monkeypatch, gpus=4, visible=[2, 3])
    built = build(lambda: dl.distribute(mirrored(2), datasets[which], global_batch_size=4, image_size=(32, 48),
                                        backend="dali-gpu", drop_remainder=drop_remainder, seed=1))
    assert not multi_device_iterator(built.result._options)
    assert sorted(placed(op) for op in built.dali_ops()) == ["GPU:0", "GPU:1"] and len(built.pipelines) == 2
    assert_none(tf_problems(built, device_ids={"GPU:0": 2, "GPU:1": 3}))
    for pipe in built.pipelines:
        assert_none(dali_problems(pipe, outputs_on="gpu"))


def test_mirrored_strategy_shares_the_cores(monkeypatch, synth_data):
    """Each replica's pipeline gets its share of the host's cores, not all of them."""

    build = pretend_gpu(monkeypatch, gpus=2)
    built = build(lambda: dl.distribute(mirrored(2), synth_data, global_batch_size=4, image_size=(32, 48),
                                        backend="dali-gpu"))
    assert [op.get_attr("num_threads") for op in built.dali_ops()] == [max(1, cores() // 2)] * 2


def test_multi_worker_strategy_hands_the_batches_over_on_the_host(monkeypatch, synth_data):
    """A worker's input under MultiWorkerMirroredStrategy is always read through a MultiDeviceIterator,
    which has CPU kernels only: the DALI pipeline runs on the worker's GPU and hands its outputs to TF
    on the host, and TF copies them to the replica."""
    from tensorflow.python.distribute.cluster_resolver import SimpleClusterResolver

    build = pretend_gpu(monkeypatch, gpus=2, visible=[1])
    def strategy():  # one local worker with one GPU
        resolver = SimpleClusterResolver(tf.train.ClusterSpec({}), num_accelerators={"GPU": 1})
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)

    built = build(lambda: dl.distribute(strategy(), synth_data, global_batch_size=4, image_size=(32, 48),
                                        backend="dali-gpu", label_mode="int", drop_remainder=False))
    assert multi_device_iterator(built.result._options)
    (op,) = built.dali_ops()
    assert placed(op) == "CPU:0" and op.get_attr("device_id") == 1
    assert_none(tf_problems(built))
    (pipe,) = built.pipelines
    assert pipe.device_id == 1
    assert_none(dali_problems(pipe, outputs_on="cpu"))
    assert any(o._op.device == "mixed" for o in pipe._ops), "the DALI graph still decodes on the GPU"
    # handed over on the host, DALI runs several batches at once and tf.data splits them
    dali_batch = host_batch_size(pipe.plan, Device.GPU)
    assert op.get_attr("batch_size") == dali_batch >= SAMPLES_PER_THREAD * threads(pipe.plan)


def test_predict_on_the_gpu_hands_the_sample_index_over_there(monkeypatch, synth_data):
    """dl.predict's loader (images and sample indices) on dali-gpu: every output on the GPU, nothing
    without a GPU kernel after the dataset."""
    from daliloader import backends
    from daliloader.plan import make_plan

    build = pretend_gpu(monkeypatch)
    plan = make_plan(synth_data, 3, (32, 48), training=False, outputs=("image", "index"))
    built = build(lambda: backends.resolve("dali-gpu", "tf.data").build("tf.data", plan))
    assert_none(dali_problems(built.pipelines[0], outputs_on="gpu"))
    assert_none(tf_problems(built))


def test_a_region_decode_on_the_gpu_is_flagged():
    """The check behind "nvJPEG decodes the GPU graph's photos": a region decoder on the GPU (which the CUDA 12
    build's nvJPEG refuses with jpeg_fancy_upsampling, falling back to a slower decoder) is a problem;
    the whole-picture decoder followed by a GPU slice, as dali_graph.decode_window builds it, is not."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    def traced(region: bool):
        pipe = Pipeline(batch_size=1, num_threads=1, device_id=0)
        with pipe:
            encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1, batch=False)
            start, shape = np.array([0, 0], np.int32), np.array([8, 8], np.int32)
            if region:
                out = fn.decoders.image_slice(encoded, start, shape, axis_names="HW", device="mixed",
                                              jpeg_fancy_upsampling=True)
            else:
                out = fn.slice(fn.decoders.image(encoded, device="mixed", jpeg_fancy_upsampling=True), start, shape,
                               axis_names="HW")
            pipe.set_outputs(out)
        pipe._build_graph()
        return dali_problems(pipe, outputs_on="gpu")

    assert any("region decode on the GPU" in p for p in traced(region=True))
    assert_none(traced(region=False))


def test_several_replicas_on_one_worker_are_refused(monkeypatch, synth_data):
    """MultiWorkerMirroredStrategy hands each local replica a whole per-worker batch: refused, with why."""
    from tensorflow.python.distribute.cluster_resolver import SimpleClusterResolver

    build = pretend_gpu(monkeypatch, gpus=2)

    def strategy():
        resolver = SimpleClusterResolver(tf.train.ClusterSpec({}), num_accelerators={"GPU": 2})
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)

    with pytest.raises(dl.SpecError, match="2 replicas on this worker.*one worker process per GPU"):
        build(lambda: dl.distribute(strategy(), synth_data, global_batch_size=4, image_size=(32, 48),
                                    backend="dali-gpu"))


def test_labels_wider_than_8_bits_on_the_gpu(monkeypatch, mirror_data):
    """ignore_index=300: uint16 labels through the GPU graph (lookup, pad, zoom, rotation, flip, one-hot,
    weights)."""
    from dataclasses import replace

    data = replace(mirror_data, classes=dl.ClassMap.from_csv(mirror_data.classes.source, ignore_index=300))
    build = pretend_gpu(monkeypatch)
    for case in CASES:
        kw = {**case_options(case, "colour masks"), "image_size": (32, 48)}  # the images' sizes differ
        built = build(lambda kw=kw: dl.tf_dataset(data, batch_size=3, backend="dali-gpu", **kw))
        assert_none(dali_problems(built.pipelines[0], outputs_on="gpu"))
        assert_none(tf_problems(built))


def test_auto_stays_on_the_cpu_when_tensorflow_sees_no_gpu(monkeypatch, synth_data):
    """DALI sees a GPU, TensorFlow (built without CUDA) does not: batches cannot arrive on a GPU."""
    build = pretend_gpu(monkeypatch, visible=[])
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    with pytest.warns(UserWarning, match="TensorFlow does not.*tensorflow\\[and-cuda\\].*dali-cpu"):
        built = build(lambda: dl.tf_dataset(synth_data, image_size=(32, 48)))
    assert [placed(op) for op in built.dali_ops()] == ["CPU:0"] and built.pipelines[0].device_id is None
    with pytest.raises(dl.SpecError, match="TensorFlow sees no GPU.*tensorflow\\[and-cuda\\]"):
        build(lambda: dl.tf_dataset(synth_data, image_size=(32, 48), backend="dali-gpu"))


def test_device_ids_follow_the_physical_gpu(monkeypatch, synth_data):
    """tf_dataset(device_id=N) means DALI's CUDA device N; the dataset is placed on the TF device that is
    that physical GPU, whatever set_visible_devices hid, and in whatever order it listed the others."""
    build = pretend_gpu(monkeypatch, gpus=4, visible=[3, 1])
    built = build(lambda: dl.tf_dataset(synth_data, image_size=(32, 48), backend="dali-gpu", device_id=3))
    (op,) = built.dali_ops()
    assert placed(op) == "GPU:1" and op.get_attr("device_id") == 3
    with pytest.raises(dl.SpecError, match="device_id=0.*not visible to TensorFlow.*1, 3"):
        build(lambda: dl.tf_dataset(synth_data, image_size=(32, 48), backend="dali-gpu", device_id=0))
