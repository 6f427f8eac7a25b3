"""Nothing stale, nothing dropped: a TFRecord file that changes after it was loaded is refused on every
backend before any of its new content is used (between passes, mid-epoch, a byte flipped, a file
truncated or rewritten under a training run: an error, never a signal); a damaged kept index is never
trusted; and the edges around them (empty shards, file names that are no UTF-8, bytes paths, more than
255 colours, absurd worker counts) give right data or a named error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import BACKENDS, PALETTE, one_epoch

import daliloader as dl
from daliloader import tfrecord

tf = pytest.importorskip("tensorflow")

N = 10
SHAPE = (24, 32)


def bmp(value: int) -> bytes:
    """A 24x32 BMP whose red channel is ``value``: uncompressed, so records of other values keep their size."""
    return cv2.imencode(".bmp", np.full(SHAPE + (3,), (0, 0, value), np.uint8))[1].tobytes()


def write(path: Path, values) -> None:
    """Records of index-coded pairs: image red = value, mask = the palette colour of the record's number."""
    with tfrecord.Writer(path) as writer:
        for i, value in enumerate(values):
            colour = np.broadcast_to(PALETTE[i % len(PALETTE)][::-1], SHAPE + (3,))
            mask = cv2.imencode(".png", colour.copy())[1].tobytes()
            writer.write({"image/encoded": bmp(value), "image/segmentation/class/encoded": mask,
                          "image/filename": f"pair{i}".encode()})


def rewrite_in_place(path: Path, values) -> None:
    """The file written again over itself (same size, records at the same offsets), its times restored, as a
    careful copy tool leaves it."""
    before = os.stat(path)
    other = path.with_name("other.tfrecord")
    write(other, values)
    with open(path, "r+b") as fh:
        fh.write(other.read_bytes())
    other.unlink()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size


def reds(batches) -> list[int]:
    """The red value of each sample of the batches (padding, weight 0, left out where batches carry weights)."""
    return [int(round(float(v) * 255)) for b in batches
            for v, w in zip(b[0][:, 0, 0, 0], b[2][:, 0, 0] if len(b) > 2 else np.ones(len(b[0]))) if w > 0]


@pytest.fixture
def records(tmp_path, index_data):
    path = tmp_path / "train.tfrecord"
    write(path, [10 * i for i in range(N)])
    return path, dl.SegmentationData.from_tfrecord(path, classes=index_data.classes)


OPTIONS = dict(batch_size=2, image_size=SHAPE, label_mode="int")
CHANGED = r"(?s)train\.tfrecord \[record \d+ at byte \d+, image/encoded\].*changed since the file was indexed"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_rewritten_in_place_after_a_pass_is_refused_in_later_passes(records, backend):
    path, data = records
    assert reds(one_epoch(backend, data, tf=True, training=False, **OPTIONS)) == [10 * i for i in range(N)]
    rewrite_in_place(path, [10 * i + 100 for i in range(N)])
    for _ in range(2):  # every later pass, not only the next one
        with pytest.raises(dl.LoadError, match=CHANGED):
            one_epoch(backend, data, tf=True, training=False, **OPTIONS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("crc", ["kept", "made again"])
def test_a_byte_flipped_inside_a_picture_is_refused(records, backend, crc):
    path, data = records
    blob = bytearray(path.read_bytes())
    part = data.images[3]
    payload = tfrecord.read_record(part.file, part.record, part.offset, part.size)
    at = part.offset + tfrecord.HEADER + payload.index(bmp(30)) + 100  # a pixel of record 3's picture
    blob[at] ^= 0xFF
    if crc == "made again":  # a valid record of other content, as a tool that rewrites records leaves it
        changed = bytes(blob[part.offset + tfrecord.HEADER:part.offset + part.size - tfrecord.FOOTER])
        blob[part.offset:part.offset + part.size] = tfrecord.frame(changed)
    path.write_bytes(bytes(blob))
    # (tf.data's own reader finds the damaged CRC first and says where; the guard then names the file as changed)
    named = r"(?s)train\.tfrecord( \[record 3 at byte \d+, image/encoded\])?: .*"
    refused = r"(changed since the file was indexed|fails its CRC|changed \(or went away\))"
    with pytest.raises(dl.LoadError, match=named + refused):
        one_epoch(backend, data, tf=True, training=False, **OPTIONS)


def epochs_until_refused(backend: str, data, epochs: int, change) -> list[int]:
    """The red values of the samples delivered over ``epochs`` training epochs, calling ``change()`` after the
    first batch; the LoadError that must come before the end is checked here."""
    seen = []
    with pytest.raises(dl.LoadError, match=CHANGED):
        if backend == "opencv":
            seq = dl.keras_sequence(data, seed=1, crop="center", **OPTIONS)
            for _ in range(epochs):
                for i in range(len(seq)):
                    seen += reds([seq[i]])
                    if len(seen) == 2:
                        change()
                seq.on_epoch_end()
        else:
            ds = dl.tf_dataset(data, backend=backend, seed=1, crop="center", **OPTIONS)
            for _ in range(epochs):
                for batch in ds:
                    seen += reds([tuple(t.numpy() for t in batch)])
                    if len(seen) == 2:
                        change()
    return seen


@pytest.mark.parametrize("backend", BACKENDS)
def test_records_changed_mid_epoch_are_never_delivered(records, backend):
    path, data = records
    seen = epochs_until_refused(backend, data, 2, lambda: rewrite_in_place(path, [10 * i + 5 for i in range(N)]))
    assert seen and set(seen) <= {10 * i for i in range(N)}, seen  # old content only, then the error


@pytest.mark.parametrize("backend", BACKENDS)
def test_reordered_records_at_the_same_offsets_are_refused(records, backend):
    path, data = records
    assert reds(one_epoch(backend, data, tf=True, training=False, **OPTIONS)) == [10 * i for i in range(N)]
    rewrite_in_place(path, [10 * i for i in reversed(range(N))])  # same sizes: records swap places
    with pytest.raises(dl.LoadError, match=CHANGED):
        one_epoch(backend, data, tf=True, training=False, **OPTIONS)


def kept_index(path: Path) -> Path:
    index = tfrecord._index_folders(str(path))[0] / f"{path.name}.json"
    assert index.is_relative_to(Path(os.environ["DALILOADER_CACHE"]))  # in the suite's cache, not beside the data
    return index


def resign(kept: dict) -> dict:
    """A kept index made to pass its digest again (damage by hand, or a tool that rewrote it)."""
    kept["digest"] = tfrecord._digest(kept["body"])
    return kept


DAMAGE = {
    "cut short": lambda text: text[: len(text) // 2],
    "garbage": lambda text: "\x00\xff garbage",
    "empty": lambda text: "",
    "a list": lambda text: "[]",
    "digest of other content": lambda text: json.dumps({**json.loads(text), "body": {
        **json.loads(text)["body"], "offsets": list(reversed(json.loads(text)["body"]["offsets"]))}}),
    "a record dropped, digest made again": lambda text: json.dumps(resign({**json.loads(text), "body": {
        **json.loads(text)["body"], **{k: json.loads(text)["body"][k][:-1] for k in (
            "offsets", "sizes", "numbers", "crcs", "record_keysets", "names")}}})),
    "records swapped, digest made again": lambda text: json.dumps(resign({**json.loads(text), "body": {
        **json.loads(text)["body"], **{k: list(reversed(json.loads(text)["body"][k])) for k in (
            "offsets", "sizes", "crcs", "names")}}})),
    "wrong types, digest made again": lambda text: json.dumps(resign({**json.loads(text), "body": {
        **json.loads(text)["body"], "offsets": "0 100", "problems": 7}})),
    "names in another order, digest made again": lambda text: json.dumps(resign({**json.loads(text), "body": {
        **json.loads(text)["body"], "names": list(reversed(json.loads(text)["body"]["names"]))}})),
    "crcs in another order, digest made again": lambda text: json.dumps(resign({**json.loads(text), "body": {
        **json.loads(text)["body"], "crcs": list(reversed(json.loads(text)["body"]["crcs"]))}})),
    "nested a hundred thousand deep": lambda text: "[" * 100_000 + "]" * 100_000,
    "an infinite offset, digest made again": lambda text: json.dumps(resign({**json.loads(text), "body": {
        **json.loads(text)["body"], "offsets": [float("inf")] * N}})),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_kept_index_is_never_trusted(records, damage):
    """The file unchanged (its stamp matches the index's), the index damaged: scanned anew, every record
    there once and in order, no raw KeyError or TypeError."""
    path, data = records
    index = kept_index(path)
    index.write_text(DAMAGE[damage](index.read_text()))
    again = dl.SegmentationData.from_tfrecord(path, classes=data.classes)
    assert [p.record for p in again.images] == list(range(N))
    assert [p.name for p in again.images] == [f"pair{i}" for i in range(N)]
    assert reds(one_epoch("dali-cpu", again, training=False, **OPTIONS)) == [10 * i for i in range(N)]


SIGNAL_SCRIPT = """
import os, sys, threading
import daliloader as dl
from pathlib import Path
path, backend, how = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
data = dl.SegmentationData.from_tfrecord(path, classes="camvid")
def change():
    if how == "truncate":
        os.truncate(path, path.stat().st_size // 3)
    else:  # a conversion script run again: the file written anew, shorter, record by record
        with open(path, "wb") as fh:
            fh.write(b"\\0" * 1000)
try:
    if backend == "opencv":
        seq = dl.keras_sequence(data, batch_size=2, image_size=(24, 32), seed=0)
        for epoch in range(3):
            for i in range(len(seq)):
                seq[i]
                if epoch == 0 and i == 0:
                    change()
            seq.on_epoch_end()
    else:
        ds = dl.tf_dataset(data, batch_size=2, image_size=(24, 32), backend=backend, seed=0)
        for epoch in range(3):
            for i, _ in enumerate(ds):
                if epoch == 0 and i == 0:
                    change()
except dl.LoadError as e:
    print("LoadError:", e)
    sys.exit(3)
print("no error")
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["truncate", "rewrite"])
def test_a_file_truncated_or_rewritten_under_training_is_an_error_not_a_signal(tmp_path, backend, how):
    path = tmp_path / "train.tfrecord"
    write(path, [10 * i for i in range(N)] * 4)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SIGNAL_SCRIPT), str(path), backend, how],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr[-2000:])  # a LoadError, no SIGBUS (-7)
    assert "train.tfrecord" in done.stdout


# ---------------------------------------------------------------- the edges
def test_empty_shards_are_read_and_named(tmp_path, index_data):
    write(tmp_path / "train-00000-of-00002.tfrecord", [10 * i for i in range(4)])
    (tmp_path / "train-00001-of-00002.tfrecord").write_bytes(b"")  # DeepLab's script writes empty shards
    data = dl.SegmentationData.from_folder(tmp_path, classes=index_data.classes)
    assert len(data) == 4 and repr(data).endswith("2 TFRecord files (1 empty))")
    report = dl.check(tmp_path, classes=index_data.classes)
    assert report.ok and "1 TFRecord file(s) hold no record" in str(report)
    assert "train-00001-of-00002.tfrecord" in report.notes[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tfrecord_file_whose_name_is_no_utf8_loads(tmp_path, index_data, backend):
    folder = os.fsencode(tmp_path)
    name = os.path.join(folder, b"caf\xe9.tfrecord")
    write(Path(os.fsdecode(name)), [10 * i for i in range(4)])
    data = dl.SegmentationData.from_tfrecord(name, classes=index_data.classes)  # bytes, as os.listdir(b".") gives
    assert reds(one_epoch(backend, data, tf=True, training=False, **OPTIONS)) == [0, 10, 20, 30]
    assert dl.check(os.fsdecode(name), classes=index_data.classes).ok


def test_a_bad_file_whose_name_is_no_utf8_is_named_on_every_backend(tmp_path, backend):
    """A truncated image named in Latin-1 (bytes no UTF-8 decoding gives): the LoadError names its sample
    and file, the name's undecodable byte as an escape. Through TensorFlow, which hands on only UTF-8
    text, the DALI and tf.data backends lost the guard's words and said TensorFlow's iterator instead."""
    root = os.fsencode(tmp_path)
    for folder in (b"images", b"masks"):
        os.makedirs(os.path.join(root, folder))
    rng = np.random.default_rng(0)
    for k, name in enumerate((b"a.png", b"b.png", b"caf\xe9.png", b"d.png")):
        image = cv2.imencode(".png", rng.integers(0, 255, (24, 32, 3), np.uint8))[1].tobytes()
        mask = cv2.imencode(".png", rng.integers(0, 3, (24, 32), np.uint8))[1].tobytes()
        Path(os.fsdecode(os.path.join(root, b"images", name))).write_bytes(image[:100] if k == 2 else image)
        Path(os.fsdecode(os.path.join(root, b"masks", name))).write_bytes(mask)
    data = dl.SegmentationData.from_dirs(os.fsdecode(os.path.join(root, b"images")),
                                         os.fsdecode(os.path.join(root, b"masks")), classes=3)
    with pytest.raises(dl.LoadError) as raised:
        one_epoch(backend, data, tf=backend != "opencv", batch_size=2, image_size=(16, 16), label_mode="int")
    first, named = str(raised.value).splitlines()[:2]
    assert first.startswith("cannot load sample 2 (") and "caf\\xe9.png + " in first, first
    assert named.strip().startswith(f"{tmp_path}/images/caf\\xe9.png: truncated PNG"), named


def test_bytes_paths_and_other_types_are_taken_or_named(tmp_path, index_data):
    root = Path(index_data.images[0]).parent.parent
    assert len(dl.SegmentationData.from_folder(os.fsencode(root))) == len(index_data)
    with pytest.raises(dl.DataError, match="root is a path .* got int 7"):
        dl.SegmentationData.from_folder(7)
    with pytest.raises(dl.DataError, match="files is a TFRecord file, a glob pattern or a list of them"):
        dl.SegmentationData.from_tfrecord({"a": 1})
    with pytest.raises(dl.DataError, match=r"id_to_class is a class count .* got list \[0, 1, 2\]"):
        dl.ClassMap.from_ids([0, 1, 2])


def test_worker_counts_are_bounded(index_data):
    with pytest.raises(dl.SpecError, match="workers=1000000 is more than this machine can use.* at most 8 workers"):
        dl.keras_sequence(index_data, batch_size=2, workers=10**6)
    with pytest.raises(dl.SpecError, match="workers=1000000"):
        dl.check(index_data, workers=10**6)


def many_colours(tmp_path: Path, n: int = 300):
    """A class_dict.csv of ``n`` colours whose (r, g) pairs are all distinct, and masks using all of them."""
    rng = np.random.default_rng(3)
    codes = rng.choice(256 * 256, size=n, replace=False)
    colours = np.stack([codes // 256, codes % 256, rng.integers(0, 256, n)], axis=1).astype(np.uint8)
    (tmp_path / "train").mkdir()
    (tmp_path / "train_labels").mkdir()
    with open(tmp_path / "class_dict.csv", "w") as fh:
        fh.write("name,r,g,b\n" + "".join(f"c{i},{r},{g},{b}\n" for i, (r, g, b) in enumerate(colours)))
    truth = []
    for k in range(4):
        labels = rng.integers(0, n + 1, SHAPE)  # n: a colour of no class
        rgb = np.concatenate([colours, [[1, 2, 3]]])[labels].astype(np.uint8)
        labels[labels == n] = 65535
        cv2.imwrite(str(tmp_path / "train" / f"{k}.png"), rng.integers(0, 256, SHAPE + (3,), np.uint8))
        cv2.imwrite(str(tmp_path / "train_labels" / f"{k}_L.png"), rgb[..., ::-1])
        truth.append(labels)
    return tmp_path, truth


@pytest.mark.parametrize("backend", BACKENDS)
def test_more_than_255_colours_label_right_on_every_backend(tmp_path, backend):
    root, truth = many_colours(tmp_path)
    data = dl.SegmentationData.from_folder(root)
    assert data.classes.num_classes == 300 and data.classes.ignore_index == 65535
    labels = np.concatenate([b[1] for b in one_epoch(backend, data, tf=True, training=False, **OPTIONS)])
    np.testing.assert_array_equal(labels, np.stack(truth))


FILES_SCRIPT = """
import os, sys
import daliloader as dl
from pathlib import Path
root, container = Path(sys.argv[1]), sys.argv[2]
data = dl.synthetic.make_dataset(root / "data", n=16, image_size=(120, 160))
if container == "packs":
    dl.prepare(data, root / "copy", pack_size=4, progress=False)
    data = dl.SegmentationData.from_prepared(root / "copy", packs=True)
    victims = [Path(t) for t in data.packs.tars]
else:
    victims = [Path(p) for p in data.images + data.masks]
ds = dl.tf_dataset(data, batch_size=2, image_size=(64, 64), backend="dali-cpu", seed=0)
try:
    # epochs enough to outrun what DALI read before the files were cut: its prefetch queue, and with packs
    # the reader's buffer, hold several epochs of 16 samples (under load, 4 epochs were served whole)
    for epoch in range(20):
        for i, _ in enumerate(ds):
            if epoch == 0 and i == 0:
                for v in victims:
                    os.truncate(v, v.stat().st_size // 3)
except dl.LoadError as e:
    print("LoadError:", e)
    sys.exit(3)
print("no error")
"""


@pytest.mark.parametrize("container", ["files", "packs"])
def test_files_or_packs_truncated_under_dali_are_an_error_not_a_signal(tmp_path, container):
    """DALI reads files and packs with plain I/O (no memory map): truncated under a run, they fail with a
    LoadError, never SIGBUS."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(FILES_SCRIPT), str(tmp_path), container],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr[-2000:])


def test_a_record_whose_length_runs_past_the_end_of_its_file_is_truncated_not_a_memory_error(tmp_path, index_data):
    """A header whose length (CRC and all) says 2^62 bytes: the file is truncated there; the scan reads no more
    than the file holds."""
    import struct

    path = tmp_path / "train.tfrecord"
    write(path, [10 * i for i in range(3)])
    length = struct.pack("<Q", 2 ** 62)
    with open(path, "ab") as fh:
        fh.write(length + struct.pack("<I", tfrecord.masked_crc(length)) + b"x" * 100)
    with pytest.raises(dl.DataError, match=r"record 3 \(at byte \d+\): the file ends \d+ bytes into it: truncated"):
        dl.SegmentationData.from_tfrecord(path, classes=index_data.classes)
