"""TFRecord files and TFDS folders, as TensorFlow and TFDS write them, on every backend.

The trees (tests/trees.py) are written by ``tf.io.TFRecordWriter`` in DeepLab's / Model Garden's layout
and by TFDS's own builder (oxford_iiit_pet's definition); labels are checked against TensorFlow's own
parse and decode, and against the same pairs as files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import BACKENDS, one_epoch
from trees import tfds_pets, voc_tfrecords

import daliloader as dl
from daliloader import codecs, parts, tfrecord
from daliloader.cache import INDEXES

tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    """DeepLab's VOC TFRecords (train: 2 files of 3 records, val: 1 of 2) and their labels."""
    return voc_tfrecords(tmp_path_factory.mktemp("voc"))


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    """oxford_iiit_pet prepared by TFDS (train 5, test 3) and its trimaps."""
    pytest.importorskip("tensorflow_datasets")
    return tfds_pets(tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="module")
def index_records(index_data, tmp_path_factory) -> dl.SegmentationData:
    """index_data (ten 24x32 pairs whose red channel is 10 * index) in two TFRecord files of 5."""
    from daliloader import convert

    out = tmp_path_factory.mktemp("index-records")
    with tfrecord.Writer(out / "a.tfrecord") as a, tfrecord.Writer(out / "b.tfrecord") as b:
        for i, (image, mask) in enumerate(zip(index_data.images, index_data.masks)):
            (a if i < 5 else b).write({"image/encoded": Path(image).read_bytes(),
                                       "image/segmentation/class/encoded": Path(mask).read_bytes(),
                                       "image/filename": f"pair{i}".encode()})
    assert convert.RECORDS_PER_FILE > 10
    return dl.SegmentationData.from_tfrecord(sorted(map(str, out.glob("*.tfrecord"))), classes=index_data.classes)


def tf_labels(records: list[str], classes: dl.ClassMap) -> dict[str, np.ndarray]:
    """TensorFlow's own reading of DeepLab's records: parse_single_example, decode_png, the class map."""
    spec = {"image/filename": tf.io.FixedLenFeature([], tf.string),
            "image/segmentation/class/encoded": tf.io.FixedLenFeature([], tf.string)}
    out = {}
    for serialized in tf.data.TFRecordDataset(records):
        parsed = tf.io.parse_single_example(serialized, spec)
        mask = tf.io.decode_png(parsed["image/segmentation/class/encoded"]).numpy()[..., 0]
        out[parsed["image/filename"].numpy().decode()] = classes.map_mask(mask)
    return out


def real_samples(batches) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels of an evaluation epoch's batches, padding (weight 0 everywhere) left out."""
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    weights = np.concatenate([b[2] for b in batches])
    real = weights.reshape(len(weights), -1).max(axis=1) > 0
    return images[real], labels[real]


# ---------------------------------------------------------------- the container
def test_an_error_of_sound_records_names_their_files_on_its_own_line(index_records):
    from daliloader.guard import PairGuard

    guard = PairGuard(index_records)
    for index in (0, 7):
        guard.read(index)
    message = str(guard.explain(RuntimeError("a decoder failed")))
    assert "nothing is wrong here with the 2 records read last (of " in message
    assert "b.tfrecord)\nso the cause may not be the data" in message


def test_the_index_is_dalis_and_the_parser_reads_what_tensorflow_writes(voc, tmp_path):
    folder, _ = voc
    file = str(folder / "train-00000-of-00002.tfrecord")
    subprocess.run([str(Path(sys.executable).parent / "tfrecord2idx"), file, str(tmp_path / "ref.idx")], check=True)
    found = tfrecord.indexed(file)
    assert Path(tfrecord.dali_index(found)).read_text() == (tmp_path / "ref.idx").read_text()  # the bench's
    assert not (folder / tfrecord.INDEX_FOLDER).exists()  # nothing written beside the data
    example = tf.train.Example(features=tf.train.Features(feature={
        "b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x", b"yz"])),
        "f": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5, 2.5, 3.5])),
        "i": tf.train.Feature(int64_list=tf.train.Int64List(value=[-1, 2 ** 40]))}))
    parsed = tfrecord.parse_example(example.SerializeToString())
    assert {k: (f.kind, f.count) for k, f in parsed.items()} == {"b": ("bytes", 2), "f": ("float", 3),
                                                                  "i": ("int64", 2)}
    with tfrecord.Writer(tmp_path / "ours.tfrecord") as writer:  # and TensorFlow reads what we write
        writer.write({"image/encoded": b"\x00\xff", "n": 7})
    got = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(str(tmp_path / "ours.tfrecord")))).numpy())
    assert got.features.feature["image/encoded"].bytes_list.value == [b"\x00\xff"]
    assert got.features.feature["n"].int64_list.value == [7]


def test_the_index_is_kept_and_made_again_when_the_file_changes(voc, tmp_path, monkeypatch):
    folder, _ = voc
    copy = tmp_path / "x.tfrecord"
    copy.write_bytes((folder / "val-00000-of-00001.tfrecord").read_bytes())
    calls = []
    monkeypatch.setattr(tfrecord, "scan", lambda f, real=tfrecord.scan: calls.append(f) or real(f))
    first = tfrecord.indexed(copy)
    assert tfrecord.indexed(copy).offsets == first.offsets and len(calls) == 1  # read back, not scanned again
    with open(copy, "ab") as fh:  # one more record: the kept index is stale
        fh.write(tfrecord.frame(tfrecord.encode_example({"image/encoded": b"x"})))
    again = tfrecord.indexed(copy)
    assert len(again.offsets) == len(first.offsets) + 1 and len(calls) == 2
    assert tfrecord.indexed(copy) == again and len(calls) == 2


def test_an_index_beside_the_data_travels_with_it(voc, tmp_path, monkeypatch):
    """An index kept beside its file (index="beside", for datasets that travel with their indexes) was
    scanned anew after any copy: ``cp -a`` keeps size and modification time, not the inode or change
    time. It is now read on the copy, with the copy's stamp; a copy changed since is scanned anew."""
    import shutil

    folder, _ = voc
    data = tmp_path / "data"
    data.mkdir()
    (data / "val.tfrecord").write_bytes((folder / "val-00000-of-00001.tfrecord").read_bytes())
    first = tfrecord.indexed(data / "val.tfrecord", index="beside")
    assert (data / tfrecord.INDEX_FOLDER / "val.tfrecord.json").is_file()
    shutil.copytree(data, tmp_path / "copied")  # (copy2: size and modification time kept, as cp -a)
    copied = tmp_path / "copied" / "val.tfrecord"
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(tfrecord, "scan", lambda f, real=tfrecord.scan: calls.append(f) or real(f))
    travelled = tfrecord.indexed(copied, index="beside")
    assert calls == [] and travelled.offsets == first.offsets and travelled.stamp == tfrecord.file_stamp(copied)
    assert len(dl.SegmentationData.from_tfrecord(copied, classes="voc", index="beside")) == 2 and calls == []
    with open(copied, "ab") as fh:  # changed since: its own size and time
        fh.write(tfrecord.frame(tfrecord.encode_example({"image/encoded": b"x"})))
    assert len(tfrecord.indexed(copied, index="beside").offsets) == len(first.offsets) + 1 and len(calls) == 1


def test_an_index_found_stale_by_a_read_is_not_trusted_again(index_data, tmp_path, monkeypatch):
    """A file rewritten with its records in another order, its size and modification time kept (an index
    beside the file is judged by those, as a copy keeps them): the index was trusted at every load, each
    read refused a record as changed and said to load again, which trusted the index again. The read that
    finds a record changed now removes the kept index, so the next load indexes the file anew."""
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "val.tfrecord"
    image, mask = (Path(f).read_bytes() for f in (index_data.images[0], index_data.masks[0]))
    with tfrecord.Writer(path) as out:  # records of one size: one picture, names of one length
        for k in range(10):
            out.write({"image/encoded": image, "image/segmentation/class/encoded": mask,
                       "image/filename": f"pair{k}".encode()})
    found = tfrecord.indexed(path, index="beside")
    assert len(set(found.sizes)) == 1
    stat = path.stat()
    records = [path.read_bytes()[o:o + s] for o, s in zip(found.offsets, found.sizes)]
    records[1], records[2] = records[2], records[1]  # (between the index's spot checks: 0, 3, 6 and 9)
    path.write_bytes(b"".join(records))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    stale = dl.SegmentationData.from_tfrecord(path, classes=index_data.classes)
    assert [p.name for p in stale.images[:3]] == ["pair0", "pair1", "pair2"]
    with pytest.raises(tfrecord.RecordProblem, match="changed since the file was indexed.*Load the dataset again"):
        stale.images[1].payload()
    again = dl.SegmentationData.from_tfrecord(path, classes=index_data.classes)
    assert [p.name for p in again.images[:3]] == ["pair0", "pair2", "pair1"]
    assert all(p.payload() for p in again.images)
    kept = list((tmp_path / "cache" / INDEXES).glob("*/val.tfrecord.json"))  # written by that load
    assert len(kept) == 1
    with pytest.raises(tfrecord.RecordProblem, match="changed since the file was indexed"):
        stale.images[1].payload()  # a reader loaded before the change: the index of after it stays
    assert kept[0].is_file()


def test_a_read_only_folder_gets_its_index_in_the_cache(voc, tmp_path, tmpfs, monkeypatch):
    folder, _ = voc
    disk = tmpfs(tmp_path / "ro", "size=1m")
    (disk / "val.tfrecord").write_bytes((folder / "val-00000-of-00001.tfrecord").read_bytes())
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    data = dl.SegmentationData.from_tfrecord(disk / "val.tfrecord", classes="voc", index="beside")
    assert list((tmp_path / "cache" / INDEXES).glob("*/val.tfrecord.json"))  # beside asked, not there
    pipe, steps = dl.dali_pipeline(data, batch_size=2, training=False, backend="dali-cpu")
    assert steps == 1 and len(pipe.run()) == 3  # DALI reads the records by the cached index


def test_keys_are_found_for_the_known_layouts_and_an_unknown_one_is_refused_with_its_keys(voc, tmp_path):
    folder, _ = voc
    data = dl.SegmentationData.from_tfrecord(str(folder / "train-*.tfrecord"), classes="voc")
    assert data.records == tfrecord.Records("image/encoded", "image/segmentation/class/encoded")
    assert data.classes.kind == "id" and data.classes.names[15] == "person"  # VOC's classes, in id masks
    with tfrecord.Writer(tmp_path / "odd.tfrecord") as writer:
        writer.write({"photo": b"\xff\xd8\xff", "label_png": b"\x89PNG", "height": 3})
    with pytest.raises(dl.DataError, match=r"hold no known segmentation layout.*Their keys: 'height' \(int64 x1\), "
                                           r"'label_png' \(bytes x1\), 'photo' \(bytes x1\).*image_key= and mask_key="):
        dl.SegmentationData.from_tfrecord(tmp_path / "odd.tfrecord", classes=2)
    with pytest.raises(dl.DataError, match="no TFRecord file matches"):
        dl.SegmentationData.from_tfrecord(str(tmp_path / "none-*.tfrecord"))


# ---------------------------------------------------------------- every backend
@pytest.mark.parametrize("backend", BACKENDS)
def test_labels_equal_tensorflows_own_parse_and_decode_on_every_backend(voc, backend):
    folder, truth = voc
    files = sorted(map(str, folder.glob("train-*.tfrecord")))
    data = dl.SegmentationData.from_tfrecord(files, classes="voc")
    reference = tf_labels(files, data.classes)
    _, labels = real_samples(one_epoch(backend, data, tf=True, batch_size=4, training=False, label_mode="int"))
    names = [p.name for p in data.images]
    assert len(labels) == len(names) == 6
    for name, got in zip(names, labels):
        np.testing.assert_array_equal(got, reference[name])
        np.testing.assert_array_equal(got, truth["train"][name])  # ids as written, 255 on borders


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_pairs_as_records_and_as_files_give_the_same_batches(index_data, index_records, backend):
    """Evaluation (every record once, in order, padding last) and a seeded training epoch with random
    crops and flips: the records give what the files give, bit for bit (training: the same samples
    under the same draws, each where the reader put it)."""
    options = dict(batch_size=4, image_size=(24, 32), label_mode="int", training=False)
    as_files = real_samples(one_epoch(backend, index_data, tf=True, **options))
    as_records = real_samples(one_epoch(backend, index_records, tf=True, **options))
    for a, b in zip(as_files, as_records):
        np.testing.assert_array_equal(a, b)
    indices = [int(round(v * 25.5)) for v in as_records[0][:, 0, 0, 0]]
    assert indices == list(range(10))  # each record once, in order


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_epochs_shuffle_every_record_and_shards_split_the_records(index_records, backend):
    from conftest import batch_indices

    epochs = []
    for epoch in one_epochs(backend, index_records, 2, batch_size=2, image_size=(24, 32), crop="center", seed=3):
        seen = [i for batch in epoch for i in batch_indices(batch[0])]
        assert len(seen) == len(set(seen)) == 10  # every record once per epoch
        epochs.append(seen)
    assert epochs[0] != list(range(10)) or epochs[1] != list(range(10))  # shuffled
    parts = []
    for shard in range(3):
        epoch = one_epoch(backend, index_records, tf=True, batch_size=2, image_size=(24, 32), training=False,
                          label_mode="int", shard_id=shard, num_shards=3)
        assert len(epoch) == 2  # the same number of batches on every shard (ceil(4 / 2))
        parts.append([i for x, _, w in epoch for i, real in zip(batch_indices(x), w[:, 0, 0]) if real])
    assert sorted(sum(parts, [])) == list(range(10)) and all(set(a).isdisjoint(b) for a in parts for b in parts
                                                            if a is not b)


def one_epochs(backend: str, data, epochs: int, **options):
    """``epochs`` training epochs of numpy batches from one loader (Keras' way: iter() per epoch)."""
    if backend == "opencv":
        seq = dl.keras_sequence(data, **options)
        for _ in range(epochs):
            yield [seq[i] for i in range(len(seq))]
            seq.on_epoch_end()
        return
    ds = dl.tf_dataset(data, backend=backend, **options)
    for _ in range(epochs):
        yield [tuple(t.numpy() for t in batch) for batch in ds]


@pytest.mark.parametrize("backend", BACKENDS)
def test_predict_names_each_prediction_by_its_record_and_file_name(voc, backend, tmp_path):
    import keras

    folder, truth = voc
    data = dl.SegmentationData.from_folder(folder, "val", classes="voc")
    model = keras.Sequential([keras.Input((None, None, 3)), keras.layers.Conv2D(21, 1)])
    found = dl.predict(model, data, batch_size=4, backend=backend, out_dir=tmp_path / "out")
    assert [p.name for p in found] == list(truth["val"])
    assert all(f"val-00000-of-00001.tfrecord [record {i} at byte" in p.image for i, p in enumerate(found))
    assert sorted(os.listdir(tmp_path / "out")) == sorted(f"{n}.png" for n in truth["val"])


def test_a_record_without_a_file_name_is_named_by_its_file_and_number(index_records):
    unnamed = tfrecord.RecordPart("/d/train.tfrecord", 7, 0, 1, "image/encoded", None, ())
    assert parts.part_stem(unnamed) == "train.tfrecord-000007"
    assert parts.part_stem(index_records.images[3]) == "pair3"


# ---------------------------------------------------------------- TFDS
def test_tfds_folders_by_path_and_by_name_without_importing_tfds(pets, tmp_path):
    data_dir, truth = pets
    code = (f"import sys, daliloader as dl\n"
            f"a = dl.SegmentationData.from_tfds({str(data_dir / 'oxford_iiit_pet' / '4.0.0')!r})\n"
            f"b = dl.SegmentationData.from_tfds('oxford_iiit_pet', 'test', data_dir={str(data_dir)!r})\n"
            f"c = dl.SegmentationData.from_tfds({str(data_dir / 'oxford_iiit_pet')!r}, 'test')\n"
            "print(len(a), len(b), len(c), a.classes.names, a.records.image_key, a.records.mask_key,\n"
            "      'tensorflow_datasets' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["5", "3", "3", "('pet',", "'background',", "'border')", "image",
                                  "segmentation_mask", "False"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tfds_trimaps_load_as_tfds_stores_them_on_every_backend(pets, backend):
    data_dir, truth = pets
    data = dl.SegmentationData.from_tfds("oxford_iiit_pet", "test", data_dir=data_dir)
    _, labels = real_samples(one_epoch(backend, data, tf=True, batch_size=2, training=False, label_mode="int"))
    for part, got in zip(data.images, labels):
        np.testing.assert_array_equal(got, truth["test"][part.name] - 1)  # 1 pet, 2 background, 3 border


def test_tfds_refusals_name_what_is_there(pets, tmp_path):
    data_dir, _ = pets
    with pytest.raises(dl.DataError, match=r"no split 'validation'; its splits: test, train"):
        dl.SegmentationData.from_tfds("oxford_iiit_pet", "validation", data_dir=data_dir)
    with pytest.raises(dl.DataError, match=r"no TFDS dataset 'voc'.*\(oxford_iiit_pet\).*prepare it first"):
        dl.SegmentationData.from_tfds("voc", data_dir=data_dir)
    boxes = tmp_path / "voc" / "2012" / "5.0.0"  # TFDS's voc: boxes, no masks
    boxes.mkdir(parents=True)
    (boxes / "dataset_info.json").write_text('{"name": "voc", "splits": [{"name": "train", "shardLengths": ["1"]}]}')
    (boxes / "voc-train.tfrecord-00000-of-00001").write_bytes(b"")
    image = {"pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
             "image": {"shape": {"dimensions": ["-1", "-1", "3"]}}}
    (boxes / "features.json").write_text(json.dumps({"featuresDict": {"features": {
        "image": image,
        "image/filename": {"pythonClassName": "tensorflow_datasets.core.features.text_feature.Text"}}}}))
    with pytest.raises(dl.DataError, match=r"holds no image and segmentation mask.*image \(Image, 3 channel\(s\)\), "
                                           r"image/filename \(Text\).*TFDS's voc, for one, holds boxes only"):
        dl.SegmentationData.from_tfds(boxes)
    with pytest.raises(dl.DataError, match=r"voc holds 2012, each with version folders: the configs of a TFDS dataset"):
        dl.SegmentationData.from_tfds(tmp_path / "voc")
    (boxes / "dataset_info.json").write_text('{"name": "voc", "fileFormat": "array_record", "splits": [{"name": '
                                             '"train", "shardLengths": ["1"]}]}')
    with pytest.raises(dl.DataError, match=r"stores its examples as array_record.*download_and_prepare\(file_format="):
        dl.SegmentationData.from_tfds(boxes)


# ---------------------------------------------------------------- bad input
def damaged(voc, tmp_path: Path, how: str) -> Path:
    """A copy of DeepLab's val file with one kind of damage."""
    folder, _ = voc
    source = folder / "val-00000-of-00001.tfrecord"
    blob, found = source.read_bytes(), tfrecord.scan(str(source))
    out = tmp_path / f"{how}.tfrecord"
    if how == "truncated":
        out.write_bytes(blob[:-100])
    elif how == "crc":
        broken = bytearray(blob)
        broken[found.offsets[1] + 100] ^= 0xFF
        out.write_bytes(bytes(broken))
    else:
        payload = tfrecord.read_record(str(source), 0, found.offsets[0], found.sizes[0])
        image = tfrecord.example_bytes(payload, "image/encoded")
        mask = tfrecord.example_bytes(payload, "image/segmentation/class/encoded")
        with tfrecord.Writer(out) as writer:
            writer.write({"image/encoded": image, "image/segmentation/class/encoded": mask})
            if how == "missing key":
                writer.write({"image/encoded": image})
            else:  # undecodable
                writer.write({"image/encoded": b"<html>not found</html>", "image/segmentation/class/encoded": mask})
    return out


@pytest.mark.parametrize("how, message", [
    ("truncated", r"record 1 \(at byte \d+\): the file ends \d+ bytes into it: truncated"),
    ("crc", r"record 1 \(at byte \d+\): its data fails its CRC: the file is damaged"),
    ("missing key", r"record 1 \(at byte \d+\): it has no 'image/segmentation/class/encoded'.*its keys: image/encoded"),
])
def test_a_damaged_file_is_refused_naming_the_record_and_check_lists_it(voc, tmp_path, how, message):
    bad = damaged(voc, tmp_path, how)
    with pytest.raises(dl.DataError, match=f"{bad}: {message}"):
        dl.SegmentationData.from_tfrecord(bad, classes="voc")
    report = dl.check(bad, classes="voc")
    assert not report.ok and len(report.problems) == 1 and f"{bad} [record 1 at byte" in report.problems[0].path


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_undecodable_picture_inside_a_record_is_a_load_error_naming_it(voc, tmp_path, backend):
    bad = damaged(voc, tmp_path, "undecodable")
    data = dl.SegmentationData.from_tfrecord(bad, classes="voc")
    with pytest.raises((dl.LoadError, tf.errors.UnknownError),
                       match=rf"{bad} \[record 1 at byte \d+, image/encoded\]: not an image in a known format"):
        one_epoch(backend, data, tf=True, batch_size=2, image_size=(24, 40), training=False)
    assert "not an image" in str(dl.check(bad, classes="voc"))


def test_compressed_files_are_refused_with_the_command_that_decompresses_them(voc, tmp_path):
    folder, _ = voc
    source = str(folder / "val-00000-of-00001.tfrecord")
    for kind in ("GZIP", "ZLIB"):
        packed = tmp_path / kind / "val-00000-of-00001.tfrecord"
        packed.parent.mkdir()
        with tf.io.TFRecordWriter(str(packed), options=kind) as writer:
            for serialized in tf.data.TFRecordDataset(source):
                writer.write(serialized.numpy())
        with pytest.raises(dl.DataError, match=f"{packed}: record 0 .* the file is {kind}-compressed") as refused:
            dl.SegmentationData.from_folder(packed.parent, split="val", classes="voc")
        command = str(refused.value).splitlines()[-1].strip()
        subprocess.run(command, shell=True, check=True, cwd=tmp_path)  # in place: the folder reads it now
        assert len(dl.SegmentationData.from_folder(packed.parent, split="val", classes="voc")) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_changed_since_it_was_indexed_is_refused(voc, tmp_path, backend):
    folder, _ = voc
    copy = tmp_path / "val.tfrecord"
    copy.write_bytes((folder / "val-00000-of-00001.tfrecord").read_bytes())
    data = dl.SegmentationData.from_tfrecord(copy, classes="voc")
    other = tmp_path / "other.tfrecord"  # the same records in another order, swapped in whole
    with tfrecord.Writer(other) as writer:
        for part in reversed(data.images):
            payload = tfrecord.read_record(part.file, part.record, part.offset, part.size)
            writer.write({k: tfrecord.example_bytes(payload, k) for k in (data.records.image_key,
                                                                          data.records.mask_key)})
    os.replace(other, copy)
    with pytest.raises((dl.LoadError, tf.errors.UnknownError), match=f"(?s){copy}.*changed since the file was indexed"):
        one_epoch(backend, data, tf=True, batch_size=2, image_size=(24, 40), training=False)


# ---------------------------------------------------------------- the command line
@pytest.mark.parametrize("source", ["folder of TFRecords", "glob", "TFDS"])
def test_check_preview_prepare_and_bench_take_tfrecord_and_tfds_sources(voc, pets, source, tmp_path, capsys):
    from daliloader.cli import main as cli

    pattern = str(voc[0] / "train-*.tfrecord")
    args, load = {
        "folder of TFRecords": ([str(voc[0]), "--split", "val", "--classes", "voc"],
                                lambda: dl.SegmentationData.from_folder(voc[0], "val", classes="voc")),
        "glob": ([pattern, "--classes", "voc"], lambda: dl.SegmentationData.from_tfrecord(pattern, classes="voc")),
        "TFDS": ([str(pets[0] / "oxford_iiit_pet"), "--split", "test"],
                 lambda: dl.SegmentationData.from_tfds(pets[0] / "oxford_iiit_pet", "test")),
    }[source]
    assert cli(["check", *args, "--quiet"]) == 0, capsys.readouterr().out
    assert cli(["preview", *args, "-o", str(tmp_path / "p.png"), "--batches", "1", "--batch-size", "1",
                "--image-size", "16"]) == 0
    assert cli(["prepare", *args, str(tmp_path / "copy"), "--quiet", "--verify"]) == 0, capsys.readouterr()
    original, copy = load(), dl.SegmentationData.from_prepared(tmp_path / "copy")
    for mask, prepared in zip(original.masks, copy.masks):  # the same labels, as 8-bit class indices
        want = original.classes.map_mask(codecs.decode_mask(codecs.read(mask), str(mask), original.classes))
        np.testing.assert_array_equal(codecs.decode_mask(codecs.read(prepared), prepared, copy.classes), want)
    assert cli(["bench", *args, "--backends", "dali-cpu", "--batch-size", "1", "--image-size", "16", "--tfrecord",
                "--seconds", "0.05", "--repeats", "1", "--no-stages", "--json", str(tmp_path / "b.json")]) == 0
    report = json.loads((tmp_path / "b.json").read_text())
    assert [r["data"] for r in report["results"]] == ["original", "files"]  # the records, and them as files
    assert [(q["over"]["name"], q["over"]["data"], q["under"]["data"]) for q in report["ratios"]
            if q["kind"] == "tfrecord_vs_files"] == [("dali-cpu", "original", "files")]  # the records over their files
    assert "dali-cpu onehot on TFRecords:" in capsys.readouterr().out


def test_chained_passes_over_records_are_fresh_epochs_as_over_files(index_records):
    """The DALI backends read records in the sampler's order, as files: a chained tf.data transformation
    builds the pipeline anew for each pass, which reads the next epoch (every record once, a new order)."""
    from conftest import batch_indices

    ds = dl.tf_dataset(index_records, batch_size=2, image_size=(24, 32), crop="center", backend="dali-cpu", seed=1)
    mapped = ds.map(lambda x, y: x)
    epochs = [[i for x in mapped for i in batch_indices(x.numpy())] for _ in range(2)]
    assert all(sorted(e) == list(range(10)) for e in epochs) and epochs[0] != epochs[1]
    assert sum(1 for _ in ds) == sum(1 for _ in ds) == len(ds)


# ---------------------------------------------------------------- edges found in review
def unnamed_records(voc, tmp_path: Path, name: str = "part[1].tfrecord", first_without_mask: bool = False) -> Path:
    """DeepLab's val records again, without their file names (and, if asked, a first record without mask)."""
    folder, _ = voc
    source = tfrecord.scan(str(folder / "val-00000-of-00001.tfrecord"))
    out = tmp_path / name
    with tfrecord.Writer(out) as writer:
        for i, (offset, size) in enumerate(zip(source.offsets, source.sizes)):
            payload = tfrecord.read_record(source.file, i, offset, size)
            keys = ("image/encoded",) if first_without_mask and i == 0 else (
                "image/encoded", "image/segmentation/class/encoded")
            writer.write({k: tfrecord.example_bytes(payload, k) for k in keys})
    return out


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata", "opencv"])
def test_records_without_file_names_are_predicted_and_named_by_number(voc, tmp_path, backend):
    import keras

    data = dl.SegmentationData.from_tfrecord(unnamed_records(voc, tmp_path), classes="voc")  # a name with [ and ]
    model = keras.Sequential([keras.Input((None, None, 3)), keras.layers.Conv2D(21, 1)])
    found = dl.predict(model, data, batch_size=2, backend=backend, out_dir=tmp_path / "out")
    assert [p.name for p in found] == [None, None]
    assert sorted(os.listdir(tmp_path / "out")) == ["part[1].tfrecord-000000.png", "part[1].tfrecord-000001.png"]


def test_tfdata_on_records_knows_its_epoch_and_reads_a_shuffled_subset_in_its_order(index_records):
    subset = index_records.subset([7, 2, 9, 0, 5])  # across both files, out of their order
    for data, steps in ((index_records, 5), (subset, 3)):
        ds = dl.tf_dataset(data, batch_size=2, image_size=(24, 32), training=False, backend="tfdata")
        assert len(ds) == steps == ds.cardinality()
    from conftest import batch_indices

    got = [i for x, _, w in dl.tf_dataset(subset, batch_size=2, image_size=(24, 32), training=False,
                                         backend="tfdata")
           for i, real in zip(batch_indices(x.numpy()), w[:, 0, 0]) if real]
    assert got == [7, 2, 9, 0, 5]


def test_keys_come_from_most_records_so_check_lists_a_first_record_without_its_mask(voc, tmp_path):
    bad = unnamed_records(voc, tmp_path, "val.tfrecord", first_without_mask=True)
    report = dl.check(bad, classes="voc")
    assert report.pairs == 1 and [p.kind for p in report.problems] == ["missing"]
    assert f"{bad} [record 0 at byte 0]" in report.problems[0].path


def test_a_split_of_a_folder_is_the_files_that_name_it_whole(voc, tmp_path):
    folder, _ = voc
    for name in ("train-00000-of-00001", "train_aug-00000-of-00001", "val-00000-of-00001"):
        (tmp_path / f"{name}.tfrecord").write_bytes((folder / "val-00000-of-00001.tfrecord").read_bytes())
    for split in ("train", "train_aug", "val"):
        data = dl.SegmentationData.from_folder(tmp_path, split, classes="voc")
        assert {Path(p.file).name for p in data.images} == {f"{split}-00000-of-00001.tfrecord"}


def test_tfds_older_folders_data_dir_first_and_no_disparity_map_as_mask(pets, tmp_path, monkeypatch):
    data_dir, _ = pets
    version = data_dir / "oxford_iiit_pet" / "4.0.0"
    (tmp_path / "oxford_iiit_pet").mkdir()  # a folder of that name where we are: data_dir= still comes first
    monkeypatch.chdir(tmp_path)
    assert len(dl.SegmentationData.from_tfds("oxford_iiit_pet", "test", data_dir=data_dir)) == 3
    old = tmp_path / "old" / "4.0.0"  # numShards, no shardLengths (older TFDS)
    import shutil

    shutil.copytree(version, old)
    info = json.loads((old / "dataset_info.json").read_text())
    for split in info["splits"]:
        split["numShards"] = str(len(split.pop("shardLengths")))
    (old / "dataset_info.json").write_text(json.dumps(info))
    assert len(dl.SegmentationData.from_tfds(old, "test")) == 3
    features = json.loads((old / "features.json").read_text())
    features["featuresDict"]["features"]["disparity_map"] = features["featuresDict"]["features"].pop(
        "segmentation_mask")
    (old / "features.json").write_text(json.dumps(features))
    with pytest.raises(dl.DataError, match=r"holds no image and segmentation mask.*disparity_map \(Image, 1 channel"):
        dl.SegmentationData.from_tfds(old, "test")


def test_a_record_file_gone_after_loading_is_a_load_error_on_tfdata(voc, tmp_path):
    copy = tmp_path / "val.tfrecord"
    copy.write_bytes((voc[0] / "val-00000-of-00001.tfrecord").read_bytes())
    data = dl.SegmentationData.from_tfrecord(copy, classes="voc")
    copy.unlink()
    with pytest.raises(dl.LoadError, match=f"(?s){copy}.*changed \\(or went away\\) since it was indexed"):
        list(dl.tf_dataset(data, batch_size=2, image_size=(24, 40), training=False, backend="tfdata"))


def test_a_set_of_shards_missing_one_or_doubled_is_refused_where_a_glob_or_folder_reads_it(voc, tmp_path):
    """A folder or glob with a shard of its set missing loaded the rest as the whole dataset, and one
    holding a set written again with another shard count beside the old one read every record twice;
    check said nothing of either. Both are refused, naming the set; files named one by one are read as
    given, and a file that a glob matches again is read once."""
    import shutil

    folder = tmp_path / "voc"
    shutil.copytree(voc[0], folder)
    first, second = sorted(folder.glob("train-*"))
    second.unlink()
    for read in (lambda: dl.SegmentationData.from_folder(folder, split="train"),
                 lambda: dl.SegmentationData.from_tfrecord(str(folder / "train-*.tfrecord")),
                 lambda: dl.check(folder, split="train", progress=False)):
        with pytest.raises(dl.DataError, match=r"holds 1 of the 2 shards of \S*train-\*-of-\*\.tfrecord: shard\(s\) "
                                               "00001 missing"):
            read()
    assert len(dl.SegmentationData.from_tfrecord([str(first)])) == 3  # part of the set, on purpose

    shutil.copy(first, folder / "train-00000-of-00001.tfrecord")
    with pytest.raises(dl.DataError, match="holds 2 sets of shards of one name.*-of-00001 and with -of-00002"):
        dl.SegmentationData.from_folder(folder, split="train")

    val = str(folder / "val-00000-of-00001.tfrecord")
    assert len(dl.SegmentationData.from_tfrecord([val, str(folder / "val-*.tfrecord")])) == 2
    assert len(dl.SegmentationData.from_tfrecord([val, os.path.relpath(val)])) == 2


def test_masks_stored_as_raw_pixels_are_refused_saying_how_to_store_them(tmp_path):
    """A mask written as its pixels (an int64 list, or the raw bytes of the array) was refused without a
    word of what to do: encode each picture (PNG or JPEG bytes)."""
    image = tf.io.encode_png(np.zeros((8, 8, 3), np.uint8)).numpy()
    pixels = np.arange(64, dtype=np.uint8) % 3

    def write(path, mask_feature):
        with tf.io.TFRecordWriter(str(path)) as writer:
            feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
                       "image/segmentation/class/encoded": mask_feature}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())

    write(tmp_path / "ints.tfrecord", tf.train.Feature(int64_list=tf.train.Int64List(value=pixels.tolist())))
    with pytest.raises(dl.DataError, match="holds int64 x64 .*pixels stored raw: write each picture encoded"):
        dl.SegmentationData.from_tfrecord(tmp_path / "ints.tfrecord", classes=3, image_key="image/encoded",
                                          mask_key="image/segmentation/class/encoded")
    write(tmp_path / "bytes.tfrecord", tf.train.Feature(bytes_list=tf.train.BytesList(value=[pixels.tobytes()])))
    report = dl.check(tmp_path / "bytes.tfrecord", classes=3, progress=False)
    assert any("raw pixels? store each picture encoded" in p.message for p in report.problems), report.problems


def test_jpeg_masks_in_records_are_refused_on_every_backend(tmp_path, backend):
    """A folder never pairs a JPEG mask (the pairing names it); records holding one loaded, and the
    backends' decoders gave different labels at its edges (dali-cpu 1920 pixels of class 1, tfdata
    1728). Now refused at the pair, naming it, on every backend; ``check`` says the same."""
    rng = np.random.default_rng(0)
    mask = np.zeros((48, 64), np.uint8)
    mask[:, 20:40], mask[24:] = 1, 2
    with tf.io.TFRecordWriter(str(tmp_path / "train.tfrecord")) as writer:
        for _ in range(4):
            feature = {key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.encode_jpeg(p).numpy()]))
                       for key, p in (("image/encoded", rng.integers(0, 255, (48, 64, 3), np.uint8)),
                                      ("image/segmentation/class/encoded", mask[..., None]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    data = dl.SegmentationData.from_tfrecord(tmp_path / "train.tfrecord", classes=3)
    with pytest.raises(dl.LoadError, match="mask stored as JPEG, a lossy format: .*store masks as PNG"):
        one_epoch(backend, data, tf=backend != "opencv", batch_size=2, training=False, label_mode="int")
    assert {p.kind.value for p in dl.check(data, progress=False).problems} == {"lossy_mask"}


def test_shards_named_one_by_one_or_numbered_from_one_are_read_as_given():
    """The closing review's cases: objects of a bucket named one by one were judged as a set, each alone
    (a whole set refused); sets numbered from 1 (00001-of-00002, 00002-of-00002) were called short of
    00000."""
    urls = [f"s3://bucket/ds/train-{i:05d}-of-00002.tfrecord" for i in range(2)]
    assert tfrecord.expand(urls) == urls  # (no listing needed: named objects are taken as they are)
    ones = [f"d/model-{i:05d}-of-00002.tfrecord" for i in (1, 2)]
    assert tfrecord.refuse_partial_shards(ones, "d") == ones
    with pytest.raises(dl.DataError, match="shard\\(s\\) 00001 missing"):
        tfrecord.refuse_partial_shards(["d/x-00000-of-00002.tfrecord"], "d")
    # (an outside review's:) a set numbered from 1 that lacks its last shard was told to lack 00000; four
    # files of a set of three, two sets numbered from 0 and from 1, were read as one, every record twice
    with pytest.raises(dl.DataError, match="shard\\(s\\) 00000 or, numbered from 1, 00003 missing"):
        tfrecord.refuse_partial_shards([f"d/x-{i:05d}-of-00003.tfrecord" for i in (1, 2)], "d")
    with pytest.raises(dl.DataError, match="holds 4 shards of d/x-\\*-of-\\*.tfrecord, a set of 3, numbered 00000 to "
                                           "00003: two sets of one name and count, one numbered from 0 and one from 1"):
        tfrecord.refuse_partial_shards([f"d/x-{i:05d}-of-00003.tfrecord" for i in range(4)], "d")
    with pytest.raises(dl.DataError, match="holds shard\\(s\\) 00005 of d/x-\\*-of-\\*.tfrecord, numbered past the "
                                           "set's count of 4: a file of another set"):
        tfrecord.refuse_partial_shards([f"d/x-{i:05d}-of-00004.tfrecord" for i in (0, 1, 2, 3, 5)], "d")
