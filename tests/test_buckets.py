"""Datasets read from an S3-compatible bucket (daliloader.buckets), on every backend, against a real S3
server the tests start on the loopback (moto: tests/s3server.py), with faults injected in front of it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("moto")
pytest.importorskip("obstore")

from conftest import BACKENDS, one_epoch  # noqa: E402
from s3server import Fault, S3Server, upload  # noqa: E402
from trees import ade20k_tree, cityscapes_tree, voc_tree  # noqa: E402

import daliloader as dl  # noqa: E402
from daliloader.errors import DataError, LoadError, MissingDependency, StorageError, StorageFault  # noqa: E402
from daliloader.guard import PairGuard  # noqa: E402
from daliloader.preparation import summary  # noqa: E402

EVAL = {"batch_size": 4, "image_size": (64, 64), "training": False}


@pytest.fixture(scope="module")
def server(s3_server):
    return s3_server


@pytest.fixture(scope="module")
def synth(server, tmp_path_factory):
    """The embedded synthetic dataset (8 JPEG pairs), on disk and in bucket ``data`` (not changed by any
    test): (local data, its URL)."""
    root = tmp_path_factory.mktemp("synth")
    local = dl.synthetic.make_dataset(root, n=8, image_size=(120, 160))
    return local, upload(server.client(), root, "data", "synth")


@pytest.fixture
def fresh(server, tmp_path):
    """A copy of the synthetic dataset of its own (the test may delete or replace its objects): (the
    loaded bucket data, a boto3 client, the bucket, the prefix)."""
    dl.synthetic.make_dataset(tmp_path, n=8, image_size=(120, 160))
    prefix = f"fresh-{time.monotonic_ns()}"
    url = upload(server.client(), tmp_path, "scratch", prefix)
    return dl.SegmentationData.from_folder(url), server.client(), "scratch", prefix


def same_classes(a, b) -> bool:
    return a.classes.names == b.classes.names and np.array_equal(a.classes.lookup_table, b.classes.lookup_table)


def keys(data, root) -> list[tuple[str, str]]:
    """The pairs by their place under ``root``, the dataset's folder or URL (a path and a URL compare alike)."""
    def tail(part):
        return str(part).removeprefix(str(root)).lstrip("/")
    return [(tail(i), tail(m)) for i, m in zip(data.images, data.masks)]


# ---------------------------------------------------------------- the same batches as from a disk
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bucket_loads_as_the_same_folder_on_disk(backend, synth):
    local, url = synth
    remote = dl.SegmentationData.from_folder(url)
    assert remote.container is dl.data.Container.OBJECTS and str(remote.images[0]).startswith(url)
    assert keys(remote, url) == keys(local, Path(local.images[0]).parents[1]) and same_classes(remote, local)
    for kw in (EVAL, {"batch_size": 4, "image_size": (64, 64), "seed": 3, "scale": (0.5, 1.5)}):
        got, want = one_epoch(backend, remote, tf=True, **kw), one_epoch(backend, local, tf=True, **kw)
        assert len(got) == len(want) > 0
        for a, b in zip(got, want):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("tree", [cityscapes_tree, voc_tree, ade20k_tree], ids=["cityscapes", "voc", "ade20k"])
def test_layouts_are_recognised_in_a_bucket_by_one_listing(tree, server, tmp_path):
    root = tree(tmp_path)[0]
    url = upload(server.client(), root, "layouts", tree.__name__)
    before = len(_listings(server, "layouts"))
    remote, local = dl.SegmentationData.from_folder(url), dl.SegmentationData.from_folder(root)
    assert len(_listings(server, "layouts")) == before + 1
    assert keys(remote, url) == keys(local, root) and same_classes(remote, local)
    labels = [one_epoch("dali-cpu", data, **EVAL)[0][1] for data in (remote, local)]
    np.testing.assert_array_equal(*labels)


def test_folders_and_pairs_name_objects(synth):
    local, url = synth
    by_dirs = dl.SegmentationData.from_dirs(f"{url}/train", f"{url}/train_labels", f"{url}/class_dict.csv")
    assert keys(by_dirs, url) == keys(local, Path(local.images[0]).parents[1]) and same_classes(by_dirs, local)
    pairs = [(str(i), str(m)) for i, m in zip(by_dirs.images[:3], by_dirs.masks[:3])]
    assert dl.SegmentationData.from_pairs(pairs, local.classes).images == by_dirs.images[:3]
    with pytest.raises(DataError, match="mixes s3:// objects and local files"):
        dl.SegmentationData.from_pairs([(pairs[0][0], str(local.masks[0]))], local.classes)
    with pytest.raises(StorageError, match=f"{url}/train/nope.jpg: the object does not exist"):
        dl.SegmentationData.from_pairs([(f"{url}/train/nope.jpg", pairs[0][1])], local.classes)


def _listings(server, bucket: str) -> list:
    return [r for r in server.requests("GET") if r[1].rstrip("/") == f"/{bucket}"]


@pytest.mark.parametrize("mask_cache", ["0", ""])
def test_evaluation_reads_every_object_once_and_lists_once(mask_cache, synth, server, monkeypatch):
    """Two evaluation epochs: every image fetched once per epoch; every mask too, or, with the mask cache
    (colour masks: decoded once into the cache), once in all (vetted the first time its pair is read)."""
    monkeypatch.setenv("DALILOADER_MASK_CACHE", mask_cache)
    remote = dl.SegmentationData.from_folder(synth[1])
    ds = dl.tf_dataset(remote, backend="tfdata", **EVAL)
    server.clear_requests()
    for _ in range(2):
        assert sum(len(batch[0]) for batch in ds) == len(remote)
    objects = [p for m, p in server.requests("GET") if p.count("/") > 1]
    expected = 2 * [f"/{str(p)[5:]}" for p in remote.images] + [f"/{str(p)[5:]}" for p in remote.masks] * (
        2 if mask_cache == "0" else 1)
    assert sorted(objects) == sorted(expected)
    assert _listings(server, "data") == []  # no listing per epoch


def test_dalis_own_pipeline_fetches_pairs_ahead_in_parallel(synth, monkeypatch):
    """dali_pipeline (DALI without TensorFlow) asks for one sample at a time: it fetched one pair at a time,
    each waiting on the network. Now the next pairs are fetched ahead on several threads, and the batches
    are those of the same data on disk."""
    local, url = synth
    remote = dl.SegmentationData.from_folder(url)
    read, lock, running, most = PairGuard.read, threading.Lock(), [0], [0]

    def slow_read(guard, index):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)  # a fetch's wait on the network
        try:
            return read(guard, index)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(PairGuard, "read", slow_read)
    got, want = one_epoch("dali-cpu", remote, **EVAL), one_epoch("dali-cpu", local, **EVAL)
    assert most[0] > 1 and len(got) == len(want) == 2
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------- faults, named on every backend
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_object_deleted_or_replaced_after_the_load_is_refused_by_name(backend, fresh):
    data, client, bucket, prefix = fresh
    gone, replaced = data.masks[2], data.images[5]
    client.delete_object(Bucket=bucket, Key=str(gone).split("/", 3)[3])
    with pytest.raises(LoadError, match=f"{gone}.*does not exist"):
        one_epoch(backend, data, tf=True, **EVAL)
    data = data.subset([0, 1, 3, 4, 5, 6, 7])
    body = client.get_object(Bucket=bucket, Key=str(replaced).split("/", 3)[3])["Body"].read()
    changed = body[:-100] + bytes([body[-100] ^ 1]) + body[-99:]  # one bit of the entropy-coded data, same size
    client.put_object(Bucket=bucket, Key=str(replaced).split("/", 3)[3], Body=changed)
    with pytest.raises(LoadError, match=f"{replaced}.*replaced since the dataset was listed"):
        one_epoch(backend, data, tf=True, **EVAL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_throttling_is_retried_then_named(backend, synth, server, monkeypatch):
    local, url = synth
    remote = dl.SegmentationData.from_folder(url)
    victim = remote.images[1]
    server.fail(Fault(path=str(victim)[4:], method="GET", times=2))  # two 503 SlowDown, then the object
    assert len(one_epoch(backend, remote, tf=True, **EVAL)) == 2
    server.clear_faults()
    monkeypatch.setenv("DALILOADER_S3_RETRIES", "1")
    server.fail(Fault(path=str(victim)[4:], method="GET", times=None))
    try:
        with pytest.raises(StorageError, match=f"{victim}: the server kept refusing with 'slow down'") as raised:
            one_epoch(backend, remote, tf=True, **EVAL)
    finally:
        server.clear_faults()
    assert raised.value.fault is StorageFault.THROTTLED


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stalled_server_times_out_by_name(backend, synth, server, monkeypatch):
    remote = dl.SegmentationData.from_folder(synth[1])
    monkeypatch.setenv("DALILOADER_S3_TIMEOUT", "0.5")
    monkeypatch.setenv("DALILOADER_S3_RETRIES", "0")
    victim = remote.masks[3]
    server.fail(Fault(path=str(victim)[4:], method="GET", times=None, status=0, delay=2.5))
    start = time.monotonic()
    try:
        with pytest.raises(StorageError, match=f"{victim}: no answer in time"):
            one_epoch(backend, remote, tf=True, **EVAL)
    finally:
        server.clear_faults()
    assert time.monotonic() - start < 30


def test_wrong_credentials_are_named_by_a_server_that_checks_them(synth, tmp_path, monkeypatch):
    checking = S3Server(credentials=True)
    try:
        url = upload(checking.client(), Path(synth[0].images[0]).parents[1], "private", "synth")
        monkeypatch.setenv("AWS_ENDPOINT_URL", checking.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", checking.keys[0])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", checking.keys[1])
        data = dl.SegmentationData.from_folder(url)
        assert len(one_epoch("opencv", data, **EVAL)) == 2
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
        with pytest.raises(StorageError, match=f"{url}: the credentials were refused") as raised:
            dl.SegmentationData.from_folder(url)
        assert raised.value.fault is StorageFault.DENIED
        with pytest.raises(LoadError, match="the credentials were refused"):  # (keys changed under a loader)
            one_epoch("tfdata", data, **EVAL)
    finally:
        checking.stop()


def test_load_time_faults_name_the_url(server, synth, monkeypatch):
    with pytest.raises(StorageError, match="s3://no-such-bucket/x: the bucket does not exist"):
        dl.SegmentationData.from_folder("s3://no-such-bucket/x")
    with pytest.raises(DataError, match="s3://data/nothing-here does not exist or is not a folder"):
        dl.SegmentationData.from_folder("s3://data/nothing-here")
    server.fail(Fault(path="/data", method="GET", status=403, code="InvalidAccessKeyId"))
    with pytest.raises(StorageError, match="s3://data/synth: the credentials were refused"):
        dl.SegmentationData.from_folder(synth[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("DALILOADER_S3_RETRIES", "1")
    with pytest.raises(StorageError, match="s3://data/synth: the endpoint cannot be reached") as raised:
        dl.SegmentationData.from_folder(synth[1])
    assert raised.value.fault is StorageFault.UNREACHABLE
    monkeypatch.setenv("DALILOADER_S3_TIMEOUT", "soon")
    with pytest.raises(DataError, match=r"\$DALILOADER_S3_TIMEOUT='soon': expected a positive number of seconds"):
        dl.SegmentationData.from_folder(synth[1])


# ---------------------------------------------------------------- records and prepared copies
@pytest.fixture(scope="module")
def stored(synth, server, tmp_path_factory):
    """The synthetic pairs as TFRecord files and as a prepared copy, on disk and in bucket ``stored``:
    {name: (local data, URL)}."""
    from daliloader import convert

    local = synth[0]
    records, prepared = tmp_path_factory.mktemp("records"), tmp_path_factory.mktemp("prepared") / "copy"
    convert.to_tfrecord(local, records)
    dl.prepare(local, prepared, pack_size=3, progress=False)
    client = server.client()
    return {"tfrecord": (dl.SegmentationData.from_tfrecord(str(records / "*.tfrecord"), classes=local.classes),
                         upload(client, records, "stored", "records")),
            "prepared": (dl.SegmentationData.from_prepared(prepared), upload(client, prepared, "stored", "prepared"))}


def load_stored(which: str, url: str, classes):
    if which == "tfrecord":
        return dl.SegmentationData.from_tfrecord(f"{url}/*.tfrecord", classes=classes)
    return dl.SegmentationData.from_prepared(url)


@pytest.mark.parametrize("which", ["tfrecord", "prepared"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_records_and_prepared_copies_load_from_a_bucket(backend, which, stored):
    local, url = stored[which]
    remote = load_stored(which, url, local.classes)
    assert remote.container is dl.data.Container.OBJECTS and len(remote) == len(local)
    by_folder = dl.SegmentationData.from_folder(url, classes=local.classes if which == "tfrecord" else None)
    assert [str(p) for p in by_folder.images] == [str(p) for p in remote.images]
    got, want = one_epoch(backend, remote, tf=True, **EVAL), one_epoch(backend, local, tf=True, **EVAL)
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_packs_in_a_bucket_are_read_by_dalis_own_reader(backend, stored):
    local, url = stored["prepared"]
    local = dl.SegmentationData.from_prepared(Path(local.images[0]).parents[1], packs=True)
    remote = dl.SegmentationData.from_prepared(url, packs=True)
    assert remote.container is dl.data.Container.PACKS and remote.packs.tars[0].startswith(f"{url}/")
    got, want = one_epoch(backend, remote, tf=True, **EVAL), one_epoch(backend, local, tf=True, **EVAL)
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_a_bucket_copys_pack_index_that_reads_other_samples_is_named_by_its_url(stored, server, tmp_path):
    """The pack indexes of a copy in a bucket are checked in the cache's copies of them: a refusal named
    the cache's file, which the user never wrote; it names the bucket's object."""
    import shutil

    local, _ = stored["prepared"]
    copy = tmp_path / "copy"
    shutil.copytree(Path(local.images[0]).parents[1], copy)
    first, second = (copy / "packs" / "00000.idx").read_bytes(), (copy / "packs" / "00001.idx").read_bytes()
    (copy / "packs" / "00000.idx").write_bytes(second)
    (copy / "packs" / "00001.idx").write_bytes(first)
    url = upload(server.client(), copy, "stored", "swapped")
    with pytest.raises(DataError, match=f"^{url}/packs/00000.idx, line 2: a member '0000003.jpg' where sample "
                                        f"0000000's are due: .* manifest puts in {url}/packs/00000.tar "):
        dl.SegmentationData.from_prepared(url, packs=True)


def test_packs_a_bucket_refuses_are_named_with_what_to_run(dali_backend, stored, server):
    """DALI's own pack reader (which neither retries nor names its faults as daliloader's readers do)
    failed while the pipeline was built, with DALI's raw RuntimeError; now the LoadError that names the
    packs' folder and `daliloader verify`, with DALI's words for the cause."""
    url = stored["prepared"][1]
    remote = dl.SegmentationData.from_prepared(url, packs=True)
    server.fail(Fault(path=remote.packs.tars[0][4:], times=None))  # (its HEAD, as the pipeline is built, too)
    try:
        with pytest.raises(LoadError, match=f"the webdataset packs in {url}/packs failed .*daliloader verify {url}"):
            one_epoch(dali_backend, remote, tf=True, **EVAL)
    finally:
        server.clear_faults()


def test_a_tfrecord_object_is_indexed_once_and_again_when_replaced(stored, server, tmp_path, monkeypatch):
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    local, url = stored["tfrecord"]
    files = sorted(p.file for p in local.images)
    client = server.client()
    client.copy_object(Bucket="stored", Key="indexed/a.tfrecord", CopySource={"Bucket": "stored",
                                                                              "Key": f"records/{Path(files[0]).name}"})
    size = client.head_object(Bucket="stored", Key="indexed/a.tfrecord")["ContentLength"]

    def whole_reads():  # GETs of the whole object, by one range (an index's spot checks read records' ranges)
        return server.ranges("/stored/indexed/a.tfrecord").count(f"bytes=0-{size - 1}")

    server.clear_requests()
    first = dl.SegmentationData.from_tfrecord("s3://stored/indexed/a.tfrecord", classes=local.classes)
    assert len(first) > 0 and whole_reads() == 1
    again = dl.SegmentationData.from_tfrecord("s3://stored/indexed/a.tfrecord", classes=local.classes)
    assert again.images == first.images and whole_reads() == 1  # read from the cache's index
    body = client.get_object(Bucket="stored", Key="indexed/a.tfrecord")["Body"].read()
    client.put_object(Bucket="stored", Key="indexed/a.tfrecord", Body=body[first.images[0].size:])  # one record less
    with pytest.raises(LoadError, match="changed since the file was indexed"):
        one_epoch("opencv", first, **EVAL)
    replaced = dl.SegmentationData.from_tfrecord("s3://stored/indexed/a.tfrecord", classes=local.classes)
    assert replaced.images[0].stamp != first.images[0].stamp and len(replaced) == len(first) - 1


# ---------------------------------------------------------------- fresh processes
def _run(code: str, endpoint: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "PYTHONPATH": str(Path(__file__).parents[1])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.parametrize("imports", ["tensorflow, daliloader", "daliloader, tensorflow", "nvidia.dali, tensorflow",
                                     "tensorflow, nvidia.dali"])
def test_either_import_order_reads_a_bucket(imports, synth, stored, server):
    """DALI's own S3 reader (packs) aborts a process where TensorFlow came before DALI's S3 client: in every
    order the user may import, a bucket is read or refused by name, never a crash."""
    done = _run(f"""
        import {imports}
        import daliloader as dl
        from daliloader.errors import DataError
        for load in (lambda: dl.SegmentationData.from_folder({synth[1]!r}),
                     lambda: dl.SegmentationData.from_prepared({stored["prepared"][1]!r}, packs=True)):
            try:
                data = load()
            except DataError as e:
                print("refused:", "Import daliloader before nvidia.dali" in str(e))
                continue
            print(sum(1 for _ in dl.tf_dataset(data, backend="dali-cpu", batch_size=4, image_size=(64, 64),
                                               training=False)))
        """, server.endpoint)
    packs = ["refused: True"] if imports.startswith("tensorflow, nvidia") else ["2"]
    assert done.returncode == 0 and done.stdout.splitlines() == ["2", *packs], done.stderr[-2000:]


def test_without_obstore_the_install_command_is_named(synth, server):
    done = _run(f"""
        import sys
        sys.modules["obstore"] = sys.modules["obstore.store"] = None
        import daliloader as dl
        from daliloader.errors import MissingDependency
        try:
            dl.SegmentationData.from_folder({synth[1]!r})
        except MissingDependency as e:
            print(e)
        """, server.endpoint)
    assert "pip install 'daliloader[s3]'" in done.stdout and "s3://data" in done.stdout, done.stderr[-2000:]
    assert issubclass(MissingDependency, ImportError)


def test_check_runs_on_a_bucket(synth, server):
    done = subprocess.run([sys.executable, "-m", "daliloader.cli", "check", synth[1]], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "checked 8 pairs" in done.stdout and "no problems" in done.stdout, done.stderr


def test_a_tfds_folder_in_a_bucket_reads_as_on_disk(server, tmp_path):
    pytest.importorskip("tensorflow_datasets")
    from trees import tfds_pets

    data_dir, _ = tfds_pets(tmp_path)
    url = upload(server.client(), data_dir, "tfds", "datasets")
    for split in ("train", "test[:2]"):
        remote = dl.SegmentationData.from_tfds(f"{url}/oxford_iiit_pet", split)
        local = dl.SegmentationData.from_tfds(data_dir / "oxford_iiit_pet", split)
        assert remote.container is dl.data.Container.OBJECTS and same_classes(remote, local)
        assert [p.name for p in remote.images] == [p.name for p in local.images]
        for a, b in zip(one_epoch("tfdata", remote, **EVAL), one_epoch("tfdata", local, **EVAL)):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)
    assert len(dl.SegmentationData.from_folder(f"{url}/oxford_iiit_pet/4.0.0")) == 5


# ---------------------------------------------------------------- what a bucket changes elsewhere
def test_a_bucket_is_refused_where_it_cannot_work(synth, tmp_path):
    local, url = synth
    remote = dl.SegmentationData.from_folder(url)
    with pytest.raises(dl.errors.SpecError, match="use_multiprocessing=True with data in a bucket"):
        dl.keras_sequence(remote, workers=2, use_multiprocessing=True)
    with pytest.raises(DataError, match="one is in a bucket \\(s3://\\) and one on a disk"):
        dl.SegmentationData.from_dirs(f"{url}/train", Path(local.masks[0]).parent, local.classes)
    with pytest.raises(DataError, match="s3://data/synth already holds objects: prepare into a new prefix"):
        dl.prepare(remote, url, progress=False)
    with pytest.raises(StorageError, match="s3://no-bucket/a.png: the bucket does not exist"):
        dl.SegmentationData.from_pairs([("s3://no-bucket/a.png", "s3://no-bucket/a_L.png")], local.classes)


def test_folder_markers_and_odd_keys(synth, server):
    """What S3 consoles and careless uploaders leave: an empty marker object per folder ("train/"), names
    with spaces and brackets; a key the client cannot read is named."""
    local, _ = synth
    client = server.client()
    for key in ("marked/", "marked/train/", "marked/train_labels/"):
        client.put_object(Bucket="data", Key=key, Body=b"")
    for i, (image, mask) in enumerate(zip(local.images[:3], local.masks[:3])):
        client.upload_file(str(image), "data", f"marked/train/photo ({i}) [a].jpg")
        client.upload_file(str(mask), "data", f"marked/train_labels/photo ({i}) [a]_L.png")
    client.upload_file(str(Path(local.images[0]).parents[1] / "class_dict.csv"), "data", "marked/class_dict.csv")
    marked = dl.SegmentationData.from_folder("s3://data/marked/")
    assert [str(p) for p in marked.images] == [f"s3://data/marked/train/photo ({i}) [a].jpg" for i in range(3)]
    assert len(one_epoch("tfdata", marked, **EVAL)) == 1
    client.put_object(Bucket="data", Key="odd//x.png", Body=b"x")
    with pytest.raises(StorageError, match="s3://data/odd: a key under the prefix cannot be read") as raised:
        dl.SegmentationData.from_folder("s3://data/odd")
    assert raised.value.fault is StorageFault.BAD_KEY


def test_a_storage_error_survives_pickling():
    import pickle

    error = StorageError(StorageFault.MISSING_OBJECT, "s3://b/img (1).png", "404 (x)")
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.fault is error.fault and again.url == error.url


@pytest.mark.parametrize("into", ["a local folder", "a bucket"])
def test_prepare_from_a_bucket_and_verify_against_it(into, synth, server, tmp_path, monkeypatch):
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    local, url = synth
    remote = dl.SegmentationData.from_folder(url)
    out = str(tmp_path / "prepared") if into == "a local folder" else f"s3://data/prepared-{time.monotonic_ns()}"
    manifest = dl.prepare(remote, out, pack_size=4, progress=False)
    # what `daliloader prepare` prints of it: the sizes of a copy in a bucket measured there (they were
    # looked for on the local disk, and the command failed after a complete upload)
    said = summary(manifest, out)
    assert "2 pack(s) (webdataset tars) of up to 4 samples" in said and f"from_prepared({out!r}, packs=True)" in said
    copy = dl.SegmentationData.from_prepared(out)
    assert len(copy) == len(remote) and (copy.container is dl.data.Container.OBJECTS) == (into == "a bucket")
    report = dl.verify(out, progress=False)
    assert report.ok and report.masks_checked == len(remote) and not report.originals_missing, report
    assert report.pack_members_checked == 4 * len(remote) and not list((tmp_path / "cache").glob("*-*/"))
    np.testing.assert_array_equal(one_epoch("opencv", copy, **EVAL)[0][1], one_epoch("opencv", local, **EVAL)[0][1])
    if into == "a bucket":  # a mask replaced in the bucket: verify names its object
        key = out.removeprefix("s3://data/") + "/" + copy.masks[0].url.split("/", 4)[4]
        server.client().put_object(Bucket="data", Key=key, Body=Path(str(local.masks[0])).read_bytes())
        assert any(m.startswith(f"{out}/") for m in dl.verify(out, progress=False).mismatches)


def test_bench_measures_a_bucket_beside_its_local_copy(synth, tmp_path, monkeypatch):
    from daliloader.bench.job import Settings, run

    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    remote = dl.SegmentationData.from_folder(synth[1])
    report = run(remote, Settings(backends=("tfdata", "tf-expert", "tfdata-naive"), image_size=64, seconds=0.2,
                                  repeats=1, stages=False), say=lambda *a: None)
    measured = {(r.name, r.data) for r in report.results}
    assert measured == {(name, data) for name in ("tfdata", "tf-expert", "tfdata-naive")
                        for data in ("original", "local")}
    assert {(q.over.name, q.over.data, q.under.data) for q in report.ratios_of("bucket_vs_local")} == {
        (name, "original", "local") for name in ("tfdata", "tf-expert", "tfdata-naive")}
    assert report.dataset.images == "s3://data/synth/train" and report.dataset.local.startswith(str(tmp_path / "cache"))


def test_check_names_the_objects_that_are_wrong(synth, server):
    """``check`` of a bucket: a truncated photo and an image without its mask, each named by its URL."""
    local, _ = synth
    client = server.client()
    prefix = f"checked-{time.monotonic_ns()}"
    for i, (image, mask) in enumerate(zip(local.images[:4], local.masks[:4])):
        body = Path(image).read_bytes()
        client.put_object(Bucket="data", Key=f"{prefix}/train/{i}.jpg", Body=body[: len(body) // 2] if i == 1 else body)
        if i != 3:
            client.upload_file(str(mask), "data", f"{prefix}/train_labels/{i}_L.png")
    client.upload_file(str(Path(local.images[0]).parents[1] / "class_dict.csv"), "data", f"{prefix}/class_dict.csv")
    report = dl.check(f"s3://data/{prefix}")
    found = {(p.kind.value, p.path) for p in report.problems}
    assert ("truncated", f"s3://data/{prefix}/train/1.jpg") in found
    assert ("unpaired_image", f"s3://data/{prefix}/train/3.jpg") in found


def test_globs_match_as_on_a_disk(synth, server, tmp_path):
    """A glob of TFRecord objects matches as glob.glob matches files: not into folders, not hidden names;
    a list that mixes a bucket and a disk is refused."""
    from daliloader import buckets, convert

    convert.to_tfrecord(synth[0], tmp_path)
    client = server.client()
    prefix = f"globbed-{time.monotonic_ns()}"
    for key in ("a.tfrecord", ".hidden.tfrecord", "old/b.tfrecord"):
        client.upload_file(str(tmp_path / "00000.tfrecord"), "data", f"{prefix}/{key}")
    assert buckets.matching(f"s3://data/{prefix}/*.tfrecord") == [f"s3://data/{prefix}/a.tfrecord"]
    assert buckets.matching(f"s3://data/{prefix}/*/*.tfrecord") == [f"s3://data/{prefix}/old/b.tfrecord"]
    with pytest.raises(DataError, match="files mixes s3:// objects and local files"):
        dl.SegmentationData.from_tfrecord([str(tmp_path / "00000.tfrecord"), f"s3://data/{prefix}/a.tfrecord"],
                                          classes=synth[0].classes)
    with pytest.raises(dl.errors.SpecError, match="use_multiprocessing=True with data in a bucket"):
        dl.keras_sequence(dl.SegmentationData.from_tfrecord(f"s3://data/{prefix}/a.tfrecord", classes=synth[0].classes),
                          use_multiprocessing=True, workers=2)


def test_a_version_without_etag_is_told_by_its_date():
    from datetime import datetime, timezone

    from daliloader.buckets import ObjectPart

    old, new = (ObjectPart("s3://b/k.png", 10, None, datetime(2026, 1, d, tzinfo=timezone.utc)) for d in (1, 2))
    assert old.stamp != new.stamp and old.stamp[1] != 0 and ObjectPart("s3://b/k.png", 10).stamp == (10, 0)


def test_a_tfrecord_object_is_indexed_by_ranges(stored, server, tmp_path, monkeypatch):
    """A large object is read front to back a chunk per request (here 4 KB), never whole: the same index
    as the file's on disk."""
    from daliloader import buckets, tfrecord

    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(buckets, "CHUNK", 4096)
    local, url = stored["tfrecord"]
    file = local.images[0].file
    server.clear_requests()
    remote = tfrecord.scan(f"{url}/{Path(file).name}")
    mine = tfrecord.scan(file)
    fields = ("offsets", "sizes", "crcs", "names", "numbers")
    assert [getattr(remote, f) for f in fields] == [getattr(mine, f) for f in fields]
    assert len(server.ranges(f"/stored/records/{Path(file).name}")) >= Path(file).stat().st_size // 4096
