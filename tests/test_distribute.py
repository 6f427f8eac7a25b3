"""``distribute`` with MirroredStrategy over two logical CPU devices (one DALI CPU pipeline per replica).

Logical devices must be configured before TensorFlow starts, so the check runs in a fresh process.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import daliloader as dl

    root = sys.argv[1]
    data = (dl.SegmentationData.from_prepared(root, packs=True) if sys.argv[2] == "shards"
            else dl.SegmentationData.from_folder(root, classes="camvid" if sys.argv[2] == "tfrecord" else None))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = {"replicas": strategy.num_replicas_in_sync, "epochs": []}
    ds = dl.distribute(strategy, data, global_batch_size=4, image_size=(24, 32), crop="center",
                       label_mode="int", drop_remainder=False, backend="dali-cpu")
    for epoch in range(3):
        seen = [[], []]
        for x, y, w in ds:
            for r, (xr, wr) in enumerate(zip(strategy.experimental_local_results(x),
                                             strategy.experimental_local_results(w))):
                assert xr.shape[0] == 2, xr.shape
                seen[r] += [[int(round(v * 25.5)), float(k), xr.device]
                            for v, k in zip(xr.numpy()[:, 0, 0, 0], wr.numpy()[:, 0, 0])]
        out["epochs"].append(seen)

    with strategy.scope():
        model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Conv2D(32, 1)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train = dl.distribute(strategy, data, global_batch_size=4, image_size=(24, 32), crop="center",
                          label_mode="int", seed=1, backend="dali-cpu")
    history = model.fit(train, epochs=2, verbose=0)
    out["loss"] = history.history["loss"]
    # Keras' fit reads one batch to build a model compiled under a strategy: a peek, which ends its epoch
    peeked = dl.distribute(strategy, data, global_batch_size=4, image_size=(24, 32), crop="center",
                           label_mode="int", seed=1, backend="dali-cpu")
    next(iter(peeked))
    out["after_peek"] = [[int(round(v * 25.5)) for x, y in peeked for xr in strategy.experimental_local_results(x)
                          for v in xr.numpy()[:, 0, 0, 0]] for _ in range(3)]
    try:  # a global batch larger than two shards: said of global_batch_size
        dl.distribute(strategy, data, global_batch_size=12, image_size=(24, 32), backend="dali-cpu")
    except dl.SpecError as e:
        out["too_large"] = str(e)
    try:  # one sample for two replicas: said of the replicas, not of num_shards (which distribute sets)
        dl.distribute(strategy, data.subset([0]), global_batch_size=2, image_size=(24, 32), training=False,
                      backend="dali-cpu")
    except dl.SpecError as e:
        out["too_few"] = str(e)
    try:  # tf.data reads one pipeline per worker: two replicas would each get a whole global batch
        dl.distribute(strategy, data, global_batch_size=4, image_size=(24, 32), backend="tfdata")
    except dl.SpecError as e:
        out["tfdata"] = str(e)
    print("RESULT" + json.dumps(out))
""")


def as_records(data, folder: Path) -> str:
    """A folder of TFRecord files holding ``data``'s pairs (Model Garden's layout), read by DALI's reader."""
    from daliloader import convert

    folder.mkdir()
    convert.to_tfrecord(data, folder)
    return str(folder)


@pytest.mark.parametrize("read", ["files", "shards", "tfrecord"])
def test_mirrored_strategy_on_two_logical_cpus(index_data, read, tmp_path):
    root = str(Path(index_data.images[0]).parent.parent)
    if read == "shards":  # the prepared copy, read through DALI's webdataset reader
        from daliloader.preparation import prepare

        prepare(index_data, tmp_path / "prepared", pack_size=4, progress=False)
        root = str(tmp_path / "prepared")
    if read == "tfrecord":  # TFRecord files, read through DALI's TFRecord reader
        root = as_records(index_data, tmp_path / "records")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, root, read], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert out["replicas"] == 2
    orders = []
    for seen in out["epochs"]:
        real = [[i for i, w, _ in replica if w == 1.0] for replica in seen]
        assert set(real[0]).isdisjoint(real[1])  # each replica reads its own shard
        assert sorted(real[0] + real[1]) == list(range(10))  # together: the whole dataset, once
        assert {d.split("device:")[1] for _, _, d in seen[0]} == {"CPU:0"}  # placed on the replica's device
        assert {d.split("device:")[1] for _, _, d in seen[1]} == {"CPU:1"}
        orders.append(real)
    # reshuffled between epochs: three, since two orders of 5 samples a replica agree once in 120 runs
    assert len({str(order) for order in orders}) > 1
    assert len(out["loss"]) == 2 and all(loss == loss for loss in out["loss"])
    if read != "shards":  # (packs: an epoch may straddle the reader's passes, docs/prepared.md)
        assert all(len(seen) == 8 and len(set(seen)) == 8 for seen in out["after_peek"]), out["after_peek"]
    assert "MirroredStrategy with 2 replicas on this worker and backend='tfdata'" in out["tfdata"]
    assert out["too_large"].startswith("distribute() got global_batch_size=12, which gives each of the 2 input "
                                       "pipelines (one shard each) batch_size=6 is larger than the 5 samples per "
                                       "shard") and "lower global_batch_size" in out["too_large"], out["too_large"]
    too_few = out["too_few"]
    assert too_few.startswith("distribute() under MirroredStrategy reads 1 samples through 2 input pipelines (one "
                              "per replica or worker), one shard each") and "num_shards" not in too_few, too_few


@pytest.mark.parametrize("kwargs, message", [
    ({"shard_id": 1}, "distribute() got shard_id=, which it sets itself"),
    ({"num_shards": 2}, "distribute() got num_shards=, which it sets itself"),
    ({"device_id": 0}, "distribute() got device_id=, which it sets itself"),
    ({"outputs": ("images",)}, "distribute() got outputs=, which it sets itself"),
    ({"global_batch_size": 0}, "global_batch_size must be a positive integer, got 0"),
    # issue 27: an internal TypeError (batch_size twice), and a bare missing-argument error
    ({"batch_size": 4}, "distribute() got batch_size=4: it takes global_batch_size=, the batch of all replicas"),
    ({"global_batch_size": None}, "distribute() got no global_batch_size: it takes global_batch_size="),
])
def test_distribute_refuses_what_it_sets_itself(index_data, kwargs, message):
    import tensorflow as tf

    import daliloader as dl

    args = {"global_batch_size": 4, "image_size": (24, 32), "backend": "dali-cpu", **kwargs}
    with pytest.raises(dl.SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dl.distribute(tf.distribute.get_strategy(), index_data, **args)
    with pytest.raises(dl.SpecError, match="takes a SegmentationData, not a plan"):
        dl.distribute(tf.distribute.get_strategy(), dl.make_plan(index_data, batch_size=4), global_batch_size=4)


def test_distribute_names_its_own_arguments_in_its_refusals(index_data):
    """An outside review: no strategy gave an AttributeError on None, and a global batch too large for the
    shards was refused as batch_size= with "lower batch_size", an argument distribute() does not take."""
    import tensorflow as tf

    import daliloader as dl

    with pytest.raises(dl.SpecError, match=r"takes a tf.distribute strategy first .* got NoneType"):
        dl.distribute(None, index_data, global_batch_size=4)
    with pytest.raises(dl.SpecError, match=r"distribute\(\) got global_batch_size=12, which gives each of the 1 input "
                                           r"pipelines \(one shard each\) batch_size=12 is larger .*; lower "
                                           r"global_batch_size"):
        dl.distribute(tf.distribute.get_strategy(), index_data, global_batch_size=12, image_size=(24, 32),
                      backend="dali-cpu")


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata"])
def test_the_default_strategy_reads_as_one_replica(index_data, backend):
    """distribute() under the default strategy (no tf.distribute), which its docstring names: it failed
    with TensorFlow's 'worker_devices() method unsupported by default tf.distribute.Strategy'. One worker,
    read as MultiWorkerMirroredStrategy's (on DALI an endless stream: steps_per_epoch batches an epoch)."""
    import tensorflow as tf
    from conftest import batch_indices

    import daliloader as dl

    ds = dl.distribute(tf.distribute.get_strategy(), index_data, global_batch_size=4, image_size=(24, 32),
                       crop="center", label_mode="int", seed=1, backend=backend)
    batches = iter(ds)
    seen = [i for _ in range(ds.steps_per_epoch) for i in batch_indices(next(batches)[0].numpy())]
    assert ds.steps_per_epoch == 2 and len(seen) == 8 and len(set(seen)) == 8


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata"])
def test_each_iterator_of_a_worker_stream_reads_fresh_epochs_and_evaluation_ends(index_data, backend):
    """Under the default strategy (and MultiWorkerMirroredStrategy), dali-cpu's per-worker stream replayed
    the first epoch's order at every new iterator (each fit() call), and its evaluation stream never ended
    (model.evaluate ran on, endless). Each iterator now claims epochs of its own; evaluation reads one
    epoch, every sample once, and ends."""
    import keras
    import tensorflow as tf
    from conftest import batch_indices

    import daliloader as dl

    strategy = tf.distribute.get_strategy()
    train = dl.distribute(strategy, index_data, global_batch_size=4, image_size=(24, 32), crop="center",
                          label_mode="int", seed=1, backend=backend)
    orders = [[i for _, batch in zip(range(2), iter(train)) for i in batch_indices(batch[0].numpy())]
              for _ in range(3)]
    assert len({tuple(o) for o in orders}) == 3, orders
    evaluation = dl.distribute(strategy, index_data, global_batch_size=4, image_size=(24, 32), crop="center",
                               label_mode="int", training=False, backend=backend)
    for _ in range(2):
        seen = [(i, bool(np.any(w))) for x, _, ws in evaluation
                for i, w in zip(batch_indices(x.numpy()), ws.numpy())]
        assert [i for i, real in seen if real] == list(range(10)), seen
    model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Conv2D(10, 1)])
    model.compile("sgd", dl.losses.SparseCategoricalCrossentropy(num_classes=10))
    assert np.isfinite(model.evaluate(evaluation, verbose=0))  # (it did not return: an endless stream)


MWMS = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf, keras
    import daliloader as dl

    data = dl.SegmentationData.from_folder(sys.argv[1])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # no TF_CONFIG: one local worker
    with strategy.scope():
        model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Conv2D(32, 1)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train = dl.distribute(strategy, data, global_batch_size=4, image_size=(24, 32), crop="center",
                          label_mode="int", backend="dali-cpu")
    history = model.fit(train, epochs=3, steps_per_epoch=train.steps_per_epoch, verbose=0)
    print("RESULT" + json.dumps({"steps": train.steps_per_epoch, "loss": history.history["loss"]}))
""")


def test_multi_worker_strategy_single_host(index_data):
    root = str(Path(index_data.images[0]).parent.parent)
    proc = subprocess.run([sys.executable, "-c", MWMS, root], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert out["steps"] == 2 and len(out["loss"]) == 3


WORKER = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf, keras
    import daliloader as dl

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # TF_CONFIG names this worker and its peer
    data = dl.SegmentationData.from_folder(sys.argv[1], classes=sys.argv[2] if len(sys.argv) > 2 else None)
    try:  # each worker would draw its own seed
        dl.distribute(strategy, data, global_batch_size=4, image_size=(24, 32), backend="dali-cpu")
        unseeded = "accepted"
    except dl.SpecError as e:
        unseeded = str(e)
    ds = dl.distribute(strategy, data, global_batch_size=4, image_size=(24, 32), crop="center", label_mode="int",
                       drop_remainder=False, backend="dali-cpu", seed=5)
    batches, seen = iter(ds), []
    for _ in range(ds.steps_per_epoch):  # one evaluation epoch of this worker's part
        x, y, w = next(batches)
        for xr, wr in zip(strategy.experimental_local_results(x), strategy.experimental_local_results(w)):
            seen += [[int(round(v * 25.5)), float(k)] for v, k in zip(xr.numpy()[:, 0, 0, 0], wr.numpy()[:, 0, 0])]

    train = dl.distribute(strategy, data, global_batch_size=4, image_size=(24, 32), crop="center",
                          label_mode="int", backend="dali-cpu", seed=1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Conv2D(32, 1)])
        optimizer = keras.optimizers.Adam()
        per_pixel = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    @tf.function
    def train_step(batch):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                losses = tf.reduce_mean(per_pixel(y, model(x, training=True)), axis=[1, 2])
                loss = tf.nn.compute_average_loss(losses, global_batch_size=4)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    batches, losses = iter(train), []
    for epoch in range(2):  # a custom loop: Keras 3's model.fit breaks under multi-worker MWMS (see the test)
        losses.append(float(sum(train_step(next(batches)) for _ in range(train.steps_per_epoch))))

    with strategy.scope():
        fitted = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Conv2D(32, 1)])
        fitted.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        fitted.fit(train, epochs=1, steps_per_epoch=train.steps_per_epoch, verbose=0)
        fit = "ok"
    except ValueError as e:
        fit = str(e).splitlines()[0]
    print("RESULT" + json.dumps({"seen": seen, "steps": ds.steps_per_epoch, "loss": losses, "fit": fit,
                                 "unseeded": unseeded}))
""")


def free_ports(n: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture
def storage(request):
    """Where the workers read the dataset: a local folder, or a bucket of an S3 server the test starts on
    the loopback (tests/s3server.py): ``(server or None, the variables the workers need)``."""
    if request.node.callspec.params["read"] != "bucket":
        yield None, {}
        return
    pytest.importorskip("moto")
    from s3server import ENV, S3Server

    server = S3Server()
    yield server, {**ENV, "AWS_ENDPOINT_URL": server.endpoint}
    server.stop()


@pytest.mark.parametrize("read", ["files", "tfrecord", "bucket"])
def test_multi_worker_strategy_two_processes(index_data, read, tmp_path, storage):
    """Two worker processes on loopback (TF_CONFIG), each with MultiWorkerMirroredStrategy and its own
    DALI CPU pipeline: their parts of an epoch are disjoint and cover the dataset once, and two epochs of
    training finish on both. Bounded: both are killed after 240 s.

    The training is a custom loop (``strategy.run``): Keras 3's ``model.fit`` fails under multi-worker
    MWMS before it reads a batch, whatever the input (keras-team/keras#20585: it all-reduces the first
    batch as a nested structure). The test asserts that failure, so that it says when Keras fixes it."""
    import os

    args = [str(Path(index_data.images[0]).parent.parent)]
    if read == "tfrecord":  # each worker's DALI TFRecord reader takes its part of the records
        args = [as_records(index_data, tmp_path / "records"), "camvid"]
    server, variables = storage
    if server is not None:  # each worker lists the bucket and fetches its own part of the objects
        from s3server import upload

        args = [upload(server.client(), Path(args[0]), "mwms", "index")]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    workers = []
    for i in range(2):
        env = {**os.environ, **variables,
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
        workers.append(subprocess.Popen([sys.executable, "-c", WORKER, *args], env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    try:
        for proc in workers:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.split("RESULT", 1)[1]))
    finally:
        for proc in workers:
            proc.kill()
    parts = [[i for i, w in r["seen"] if w == 1.0] for r in results]
    assert results[0]["steps"] == results[1]["steps"] == 3  # 5 samples each, batches of 2, padded
    assert set(parts[0]).isdisjoint(parts[1])
    assert sorted(parts[0] + parts[1]) == list(range(10))
    for r in results:
        assert "with 2 workers needs seed=: each worker process would draw its own" in r["unseeded"], r["unseeded"]
        assert len(r["loss"]) == 2 and all(loss == loss for loss in r["loss"])
        assert r["fit"].startswith("Attempt to convert a value (PerReplica"), (
            f"model.fit under multi-worker MWMS: {r['fit']!r}. If it says 'ok', Keras fixed keras#20585: "
            "train with model.fit in WORKER and in the README")
