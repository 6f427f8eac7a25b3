"""Reading a prepared copy's packs (webdataset tars: ``from_prepared(packs=True)``) with DALI's reader:
paired by construction, every sample once per evaluation epoch (padding marked), training epochs cut
from passes read back to back, split between workers, same batches as the files.

``index_data``'s images encode their own index (red = 10 * index) and its masks are class ``index``
everywhere, so a batch says which samples it holds and whether image and mask belong together.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import batch_indices, dali_numpy, one_epoch, require_tf

import daliloader as dl
from daliloader.cli import main as cli
from daliloader.errors import DataError, LoadError
from daliloader.preparation import MANIFEST, prepare

KW = dict(image_size=(24, 32), crop="center", label_mode="int")


@pytest.fixture(scope="module")
def index_shards(index_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("index_shards") / "out"
    prepare(index_data, out, pack_size=3, progress=False)  # 10 samples in tars of 3, 3, 3, 1
    return out


@pytest.fixture(scope="module")
def mirror_shards(mirror_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mirror_shards") / "out"
    prepare(mirror_data, out, pack_size=4, progress=False)
    return out


def shards(root: Path) -> dl.SegmentationData:
    return dl.SegmentationData.from_prepared(root, packs=True)


def samples(batches) -> tuple[np.ndarray, np.ndarray]:
    """(sample index, weight) per position; asserts that each image came with its own mask (a padding
    sample's labels are all ignored: tests/test_training.py)."""
    indices, weights = [], []
    for batch in batches:
        images, labels = batch[0], batch[1]
        found = batch_indices(images)
        w = (batch[2] if len(batch) > 2 else np.ones(len(images))).reshape(len(images), -1)[:, 0]
        real = w > 0
        assert np.array(found)[real].tolist() == labels[real, 0, 0].tolist(), "an image came with another sample's mask"
        indices += found
        weights += w.tolist()
    return np.array(indices), np.array(weights)


@pytest.mark.parametrize("batch_size", [2, 3, 4, 5])
def test_evaluation_reads_every_sample_once(index_shards, dali_backend, batch_size):
    require_tf()
    ds = dl.tf_dataset(shards(index_shards), batch_size=batch_size, drop_remainder=False, seed=3,
                       backend=dali_backend, **KW)
    assert len(ds) == -(-10 // batch_size)
    orders = []
    for _ in range(3):
        indices, weights = samples(tuple(t.numpy() for t in b) for b in ds)
        assert sorted(indices[weights == 1].tolist()) == list(range(10))
        assert (weights == 0).sum() == -10 % batch_size  # padding, at the end of the epoch
        assert (weights[len(weights) - (weights == 0).sum():] == 0).all()
        orders.append(indices[weights == 1].tolist())
    assert orders[0] != orders[1] or orders[1] != orders[2]  # reshuffled between epochs


@pytest.mark.parametrize("batch_size", [3, 4])
def test_training_reads_the_passes_back_to_back(index_shards, dali_backend, batch_size):
    """Training (drop_remainder=True): the reader's passes follow each other without padding, each a fresh
    shuffle holding every sample once, and an epoch is the next 10 // batch_size full batches of them."""
    require_tf()
    ds = dl.tf_dataset(shards(index_shards), batch_size=batch_size, seed=1, backend=dali_backend, **KW)
    assert len(ds) == 10 // batch_size
    stream = []
    for _ in range(4):
        indices, _ = samples(tuple(t.numpy() for t in b) for b in ds)
        assert len(indices) == 10 // batch_size * batch_size
        stream += indices.tolist()
    passes = [stream[i:i + 10] for i in range(0, len(stream) - 9, 10)]
    assert len(passes) == 3 and all(sorted(p) == list(range(10)) for p in passes), passes
    assert len({tuple(p) for p in passes}) > 1  # reshuffled between passes


def test_workers_read_disjoint_parts_that_cover_the_dataset(index_shards, dali_backend):
    seen = []
    for shard_id in range(3):
        pipe, steps = dl.dali_pipeline(shards(index_shards), batch_size=2, drop_remainder=False, seed=7,
                                       shard_id=shard_id, num_shards=3, backend=dali_backend,
                                       outputs=("index", "weight"), **KW)
        assert steps == 2  # parts of 3, 3 and 4 samples: every worker steps the same, padding marked
        epochs = []
        for _ in range(3):
            index, weight = (np.concatenate(a) for a in zip(*(dali_numpy(pipe.run()) for _ in range(steps))))
            assert weight.shape == (4, 24, 32) and (weight == weight[:, :1, :1]).all()  # per pixel, per sample
            assert ((index == -1) == (weight[:, 0, 0] == 0)).all()
            epochs.append(sorted(index[index >= 0].tolist()))
        assert epochs[0] == epochs[1] == epochs[2] and len(set(epochs[0])) == len(epochs[0])
        seen += epochs[0]
    assert sorted(seen) == list(range(10))


@pytest.mark.parametrize("tf", [False, True])
@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_shards_give_the_batches_of_the_files(mirror_shards, dali_backend, tf, label_mode):
    """Unshuffled, the reader walks the tars in the files' order: the same samples, bit for bit."""
    kw = dict(batch_size=4, image_size=(40, 56), crop="center", label_mode=label_mode, shuffle=False,
              drop_remainder=False)
    files = one_epoch(dali_backend, dl.SegmentationData.from_prepared(mirror_shards), tf=tf, **kw)
    packed = one_epoch(dali_backend, shards(mirror_shards), tf=tf, **kw)
    assert len(files) == len(packed) == 2
    for a, b in zip(files, packed):
        real = a[2].reshape(4, -1)[:, 0] == 1  # padding differs: the files repeat sample 0, the reader the last
        np.testing.assert_array_equal(a[2], b[2])
        np.testing.assert_array_equal(a[0][real], b[0][real])
        np.testing.assert_array_equal(a[1][real], b[1][real])


def test_shuffled_random_crops_keep_image_and_mask_together(mirror_data, mirror_shards, dali_backend):
    """Images are their own masks: the labels must equal the mapped colours of the augmented image."""
    kw = dict(batch_size=3, image_size=(48, 48), crop="random", flip=0.5, label_mode="int", seed=5)
    for x, y in one_epoch(dali_backend, shards(mirror_shards), tf=True, **kw):
        for img, lab in zip(x, y):
            from_image = mirror_data.classes.map_mask(np.rint(img * 255).astype(np.uint8))
            valid = lab != 255
            np.testing.assert_array_equal(from_image[valid], lab[valid])


def test_random_draws_over_packs_are_dalis_own_seeded_by_the_loaders_seed(mirror_shards, dali_backend):
    """Under a pack reader the draws come from DALI's generator (a training pipeline over packs is fed no
    input by TensorFlow): one seed gives the same crops and flips, epoch after epoch, in a dataset built
    again; another seed other ones; and no epoch repeats the one before."""
    require_tf()
    kw = dict(batch_size=3, image_size=(24, 24), crop="random", flip=0.5, scale=(0.5, 1.5), label_mode="int")

    def two_epochs(seed):
        ds = dl.tf_dataset(shards(mirror_shards), backend=dali_backend, seed=seed, **kw)
        return [[np.asarray(b[0]) for b in ds] for _ in range(2)]

    first, again, other = two_epochs(5), two_epochs(5), two_epochs(6)
    assert all(np.array_equal(a, b) for e, f in zip(first, again) for a, b in zip(e, f))
    assert not all(np.array_equal(a, b) for a, b in zip(first[0], other[0]))
    assert not all(np.array_equal(a, b) for a, b in zip(first[0], first[1]))


def test_what_cannot_be_read_as_shards(index_data, index_shards, tmp_path):
    prepare(index_data, tmp_path / "files_only", progress=False)
    with pytest.raises(DataError, match="prepared without packs"):
        shards(tmp_path / "files_only")

    copy = tmp_path / "copy"
    prepare(index_data, copy, pack_size=3, progress=False)
    index = copy / "packs" / "00001.idx"
    whole = index.read_text()
    index.write_text(whole.replace("v1.2 3", "v1.2 2", 1))
    with pytest.raises(DataError, match=f"{index} lists 3 samples where its header says 2: .*daliloader verify"):
        shards(copy)
    index.write_text("\n".join(whole.replace("v1.2 3", "v1.2 2", 1).splitlines()[:-1]) + "\n")  # one sample less
    with pytest.raises(DataError, match=f"{index} lists 2 samples where the manifest puts 3 in .*00001.tar: .*verify"):
        shards(copy)

    manifest = json.loads((index_shards / MANIFEST).read_text())
    old = tmp_path / "old"
    old.mkdir()
    (old / MANIFEST).write_text(json.dumps({**manifest, "version": 1}))
    with pytest.raises(DataError, match="version 1 of the prepared format.*run `daliloader prepare"):
        dl.SegmentationData.from_prepared(old)


def _swap_indexes(packs: Path) -> None:
    first, second = (packs / "00000.idx").read_bytes(), (packs / "00001.idx").read_bytes()
    (packs / "00000.idx").write_bytes(second)
    (packs / "00001.idx").write_bytes(first)


def _point_a_mask_at_the_next_samples(packs: Path) -> None:
    """Sample 0's mask entry given sample 1's mask's offset and size: DALI would read sample 1's mask."""
    lines = (packs / "00000.idx").read_text().splitlines()
    first, second = lines[1].split(), lines[2].split()
    first[5:7] = second[5:7]
    (packs / "00000.idx").write_text("\n".join([lines[0], " ".join(first), *lines[2:]]) + "\n")


@pytest.mark.parametrize(("damage", "says"), [
    (_swap_indexes, "00000.idx, line 2: a member '0000003.png' where sample 0000000's are due: this pack and its "
                    "index hold other samples than the manifest puts in .*00000.tar \\(packs renamed or swapped\\?\\); "
                    "prepare the copy again"),
    (_point_a_mask_at_the_next_samples, "00000.idx, line 2: 0000000.labels.png at byte \\d+ of .*00000.tar, where "
                                        "the members before it end it at \\d+: the prepared copy is damaged; run "
                                        "`daliloader verify`"),
])
def test_an_index_that_reads_other_samples_is_refused_as_the_copy_loads(index_data, tmp_path, damage, says):
    """DALI's pack reader trusts its index: indexes swapped between two packs of one sample count, or an
    entry pointed at another sample's member, loaded without a word and paired images with other samples'
    masks (sample 0 with label 1). The copy is now refused as it loads, naming the index."""
    out = tmp_path / "p"
    prepare(index_data, out, pack_size=3, progress=False)
    damage(out / "packs")
    with pytest.raises(DataError, match=f"{out / 'packs'}/{says}"):
        shards(out)


def test_a_pack_cut_short_fails_with_dalis_cause_in_words(index_data, tmp_path):
    """A pack cut short (a copy interrupted) is refused as the copy loads, naming the tar; cut after the
    load, the LoadError said "failed (Error DALI_ERROR_INVALID_OPERATION:)", DALI's cause 20 lines further
    down; it now says the cause, then what to run."""
    out = tmp_path / "p"
    prepare(index_data, out, pack_size=5, progress=False)
    tar = out / "packs" / "00001.tar"
    whole = tar.read_bytes()
    tar.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=f"{tar} holds {len(whole) // 2} bytes, where its index .*00001.idx puts "
                                        "members up to byte \\d+: the pack is truncated: .*daliloader verify"):
        shards(out)
    tar.write_bytes(whole)
    data = shards(out)
    tar.write_bytes(whole[: len(whole) // 2])
    require_tf()
    with pytest.raises(LoadError, match=f"packs in {out / 'packs'} failed \\(Malformed index file at "
                                        f"\"{out / 'packs' / '00001.idx'}\" line \\d+ - offset is outside of the "
                                        f"archive file\\). Check the prepared copy .*daliloader verify {out}"):
        for _ in dl.tf_dataset(data, batch_size=5, shuffle=False, backend="dali-cpu", **KW):
            pass


@pytest.mark.parametrize("product", ["tf_dataset", "dali_pipeline"])
def test_a_damaged_index_is_named_when_the_pipeline_is_built(index_data, tmp_path, product):
    """DALI's pack reader reads its index files when the pipeline is built: an index whose last sample
    line lost its members failed there with DALI's raw RuntimeError; now the LoadError that names the
    packs' folder and what to run. (An index short of a line, or with a line short of its members, is
    refused as the copy is loaded: damaged after it.)"""
    out = tmp_path / "p"
    prepare(index_data, out, pack_size=5, progress=False)
    index = out / "packs" / "00000.idx"
    lines = index.read_text().splitlines()
    index.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DataError, match=f"{index} lists 4 samples where its header says 5: .*daliloader verify"):
        shards(out)
    index.write_text("\n".join(lines[:-1] + ["jpg"]) + "\n")
    with pytest.raises(DataError, match=f"{index}, line 6: not the 'ext offset size name' of each member: .*verify"):
        shards(out)
    index.write_text("\n".join(lines) + "\n")
    data = shards(out)
    index.write_text("\n".join(lines[:-1] + ["jpg"]) + "\n")
    if product == "tf_dataset":
        require_tf()
    with pytest.raises(LoadError, match=f"packs in {out / 'packs'} failed \\(Malformed index file at "
                                        f"\"{index}\" line \\d+ - Could not find all necessary component "
                                        "parameters .*\\)\\. "
                                        f"Check the prepared copy .*daliloader verify {out}"):
        getattr(dl, product)(data, batch_size=5, shuffle=False, backend="dali-cpu", **KW)


def _set_sample_number(packs: Path, sample: int, number: int) -> None:
    """Write ``number`` into sample ``sample``'s index member (in the first pack), as damage would."""
    words = (packs / "00000.idx").read_text().splitlines()[1 + sample].split()
    offset = int(words[words.index("index") + 1])
    raw = bytearray((packs / "00000.tar").read_bytes())
    raw[offset:offset + 8] = np.int64(number).astype("<i8").tobytes()
    (packs / "00000.tar").write_bytes(bytes(raw))


@pytest.mark.parametrize("number", [-5, 2**40])
def test_a_damaged_sample_number_stops_the_load_not_the_sample(index_data, tmp_path, number):
    """A pack's index member read as no sample number: -5 made its sample padding (lost from an evaluation
    without a word: 9 samples of 10), 2**40 broke ``predict`` with a raw IndexError. Either now stops the
    load with the LoadError that points to ``verify``."""
    out = tmp_path / "p"
    prepare(index_data, out, pack_size=5, progress=False)
    _set_sample_number(out / "packs", 1, number)
    require_tf()
    with pytest.raises(LoadError, match=f"packs in {out / 'packs'} failed.*daliloader verify {out}"):
        for _ in dl.tf_dataset(shards(out), batch_size=5, drop_remainder=False, shuffle=False, backend="dali-cpu",
                               **KW):
            pass


def test_predict_tells_packs_whose_sample_numbers_repeat_from_a_bug(index_data, tmp_path):
    """Sample 1's index member saying 3 (a number of the packs, so no check of the graph stops it): sample 3
    came back twice and sample 1 not at all, and ``predict`` called it a bug in daliloader; it now says
    which sample numbers repeat and to run ``verify``."""
    out = tmp_path / "p"
    prepare(index_data, out, pack_size=5, progress=False)
    _set_sample_number(out / "packs", 1, 3)

    class Zeros:
        def predict_on_batch(self, x):
            return np.zeros((*np.shape(x)[:3], 32), np.float32)

    with pytest.raises(DataError, match="predict: the packs of .* hold sample 3 more than once and sample 1 not at "
                                        f"all: their sample numbers are damaged; run `daliloader verify {out}`"):
        dl.predict(Zeros(), shards(out), batch_size=5, image_size=(24, 32), backend="dali-cpu")


def test_a_corrupt_shard_fails_with_a_message_that_names_it(index_data, tmp_path, capsys):
    out = tmp_path / "p"
    prepare(index_data, out, pack_size=5, progress=False)
    tar = out / "packs" / "00000.tar"
    line = (out / "packs" / "00000.idx").read_text().splitlines()[2]  # sample 1: "png OFFSET SIZE name ..."
    offset, size = (int(v) for v in line.split()[1:3])
    raw = bytearray(tar.read_bytes())
    raw[offset + 40: offset + size] = bytes(size - 40)  # the PNG's pixel data zeroed: header intact
    tar.write_bytes(bytes(raw))
    require_tf()
    with pytest.raises(LoadError, match=f"packs in {out / 'packs'} failed.*daliloader verify {out}"):
        ds = dl.tf_dataset(shards(out), batch_size=5, shuffle=False, backend="dali-cpu", **KW)
        for _ in ds:
            pass
    assert cli(["verify", str(out), "--quiet"]) == 1
    assert "0000001.png differs from" in capsys.readouterr().out
