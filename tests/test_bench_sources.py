"""The backends as the bench builds and reads them (daliloader.bench.sources), and the copies it
measures besides the pairs given (daliloader.bench.copies)."""

import itertools
import os
from pathlib import Path

import numpy as np
import pytest
from trees import voc_tree

from daliloader import backends
from daliloader.bench import copies, sources
from daliloader.bench.timing import touch

pytest.importorskip("tensorflow")


def test_each_backend_is_read_as_keras_reads_it_here():
    assert sources.has_tensorflow()
    assert [sources.via(b) for b in ("dali-cpu", "tfdata", "opencv", "tfdata-naive")] == [
        "tf.data", "tf.data", "keras PyDataset", "tf.data"]
    assert sources.sequence_like("opencv") and not sources.sequence_like("dali-cpu")
    assert sources.reads_packs("dali-cpu") and not sources.reads_packs("opencv") and not sources.reads_packs(
        "tfdata-naive")
    assert sources.on_gpu("dali-gpu") and not sources.on_gpu("dali-cpu") and not sources.on_gpu("tfdata-naive")
    if not backends.dali_gpu_count():
        assert sources.product("dali-gpu") is None and sources.lacks("dali-gpu") == ["gpu"]


@pytest.mark.parametrize("name, label_mode", [("dali-cpu", "onehot"), ("tfdata", "onehot"), ("opencv", "onehot"),
                                              ("tfdata-naive", "onehot"), ("tfdata-naive", "int"),
                                              ("tf-expert", "onehot"), ("tf-expert", "int")])
def test_every_backend_streams_batches_of_the_plan(synth_data, name, label_mode):
    """Each product read as the bench reads it (tf.data endlessly, a PyDataset by index on threads), past
    an epoch's end; the baseline's labels made by its own code (int: 255 where no class matches)."""
    plan = sources.bench_plan(synth_data, 2, (16, 24), label_mode)
    stream = sources.backend_stream(name, plan, workers=2)
    for x, y in itertools.islice(stream, len(synth_data) // 2 + 1):  # past an epoch's end
        touch((x, y))
    x, y = (np.asarray(t) for t in (x, y))
    assert x.shape == (2, 16, 24, 3) and x.dtype == np.float32 and x.min() >= 0 and x.max() <= 1
    assert y.shape == ((2, 16, 24, synth_data.classes.num_classes) if label_mode == "onehot" else (2, 16, 24))
    if label_mode == "int" and name == "tfdata-naive":
        assert set(np.unique(y)) <= set(range(synth_data.classes.num_classes)) | {255}
    stream.close()


def test_the_copies_are_named_after_their_pairs(synth_data, tmp_path):
    assert copies.place_name(synth_data) == "train" and len(copies.dataset_digest(synth_data)) == 12
    assert copies.dataset_place(synth_data) == os.path.dirname(os.path.abspath(synth_data.images[0]))
    shown = []

    def status(what, fn):
        shown.append(what)
        return fn()

    out = copies.prepared_copy(synth_data, str(tmp_path / "copy"), status)
    assert out == tmp_path / "copy" and (out / "manifest.json").exists()
    assert shown == [f"preparing {len(synth_data)} pairs into {out}"]
    assert copies.prepared_copy(synth_data, str(out), status) == out and len(shown) == 1  # kept, not made again


def test_a_copy_is_used_only_for_the_pairs_and_classes_it_was_made_of(tmp_path, monkeypatch):
    """The cached copies were named after the pairs' paths as given: a folder of the same relative name
    elsewhere, a mask edited in place and another class map all got the copy of the first (figures of
    other data); a --prepared-dir of another dataset was used as it was."""
    import shutil

    import daliloader as dl

    for name in ("a", "b"):
        dl.synthetic.make_dataset(tmp_path / name / "data", n=2, image_size=(16, 24), seed=len(name))
    monkeypatch.chdir(tmp_path / "a")
    first = dl.SegmentationData.from_folder("data")
    digest = copies.dataset_digest(first)
    monkeypatch.chdir(tmp_path / "b")
    assert copies.dataset_digest(dl.SegmentationData.from_folder("data")) != digest  # another folder, same name
    monkeypatch.chdir(tmp_path / "a")
    assert copies.dataset_digest(dl.SegmentationData.from_folder("data")) == digest  # the same: its copies kept
    other_classes = dl.SegmentationData.from_pairs(list(zip(first.images, first.masks)),
                                                   dl.ClassMap.from_palette(first.classes.colors[:3]))
    assert copies.dataset_digest(other_classes) != digest
    mask = Path(first.masks[0])
    shutil.copy(first.masks[1], mask)  # edited in place
    assert copies.dataset_digest(dl.SegmentationData.from_folder("data")) != digest

    out = copies.prepared_copy(first, str(tmp_path / "copy"))
    with pytest.raises(dl.DataError, match="--prepared-dir .*copy holds a prepared copy of other pairs"):
        copies.prepared_copy(other_classes, str(out))
    recoloured = dl.SegmentationData.from_pairs(list(zip(first.images, first.masks)), dl.ClassMap.from_palette(
        first.classes.colors[::-1].copy(), first.classes.names))  # the same names, other colours
    with pytest.raises(dl.DataError, match="--prepared-dir .*copy holds a prepared copy of other pairs"):
        copies.prepared_copy(recoloured, str(out))


@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_the_expert_gives_what_daliloader_gives(index_data, label_mode):
    """The expert's pipeline (bench/expert.py) outputs daliloader's default recipe: float32 images in [0, 1]
    and int32 or one-hot labels of the same shapes, each crop's labels the class of its mask's colour
    (index_data: pair i is the palette colour of class i, its red channel 10 * i)."""
    import tensorflow as tf

    import daliloader as dl
    from daliloader.bench.expert import expert_dataset

    plan = sources.bench_plan(index_data, 5, (16, 24), label_mode)
    expert = expert_dataset(plan)
    ours = dl.tf_dataset(index_data, batch_size=5, image_size=(16, 24), label_mode=label_mode, backend="tfdata")
    assert expert.element_spec == ours.element_spec
    for x, y in expert.take(4):
        index = np.rint(x.numpy()[:, 0, 0, 0] * 255 / 10).astype(int)
        labels = y.numpy() if label_mode == "int" else np.argmax(y.numpy(), -1)
        assert (labels == index[:, None, None]).all() and x.dtype == tf.float32


@pytest.mark.parametrize("name", ["tf-expert", "tfdata", "dali-cpu", "opencv"])
@pytest.mark.parametrize("form", ["jpg", "png"])
def test_every_crop_and_flip_keeps_image_and_labels_aligned(name, form, tmp_path):
    """Photos whose pixels say where they are (red 15 x row, blue 15 x column: a JPEG's decoders err by up
    to 5) and colour masks of 4x4 blocks
    of 4 classes: in every sample of every backend and of the expert (which decodes a JPEG's window alone
    and slices the mask at the same offset), each pixel's class is that of the block its position is in,
    flipped or not. A constant picture per pair, as in the expert's other test, would pass with the
    windows apart."""
    from PIL import Image

    import daliloader as dl

    palette = np.array([[0, 0, 0], [200, 0, 0], [0, 200, 0], [0, 0, 200]], np.uint8)
    rows, cols = np.mgrid[0:16, 0:16]
    blocks = (rows // 4 + cols // 4) % 4
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    photo = np.stack([rows * 15, np.full_like(rows, 128), cols * 15], -1).astype(np.uint8)
    for i in range(4):
        Image.fromarray(photo).save(tmp_path / "images" / f"{i}.{form}", **({"quality": 100, "subsampling": 0}
                                                                           if form == "jpg" else {}))
        Image.fromarray(palette[blocks]).save(tmp_path / "masks" / f"{i}.png")
    data = dl.SegmentationData.from_folder(tmp_path, classes=dl.ClassMap.from_palette(palette))
    plan = sources.bench_plan(data, 4, (8, 8), "int")
    stream = sources.backend_stream(name, plan, workers=1)
    flips = set()
    for x, y in itertools.islice(stream, 6):
        x, y = np.asarray(x), np.asarray(y)
        row, col = np.rint(x[..., 0] * 255 / 15).astype(int), np.rint(x[..., 2] * 255 / 15).astype(int)
        np.testing.assert_array_equal(y, (row // 4 + col // 4) % 4, err_msg=name)
        flips |= {bool(c[0, 0] > c[0, -1]) for c in col}
    stream.close()
    assert flips == {False, True}, name  # both seen: a flip of one of the two would show


@pytest.mark.parametrize("tree", ["cityscapes", "voc"])
@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_the_baseline_labels_every_kind_of_mask_as_the_loaders_do(tree, label_mode, cityscapes, tmp_path):
    """tfdata-naive on id masks (Cityscapes' labelIds) and colour masks (VOC's palette PNGs): each picture's
    labels, whole, equal tfdata's (the baseline shuffles: compared as a set of pictures' labels)."""
    import daliloader as dl

    root, split = (cityscapes[0], "train") if tree == "cityscapes" else (voc_tree(tmp_path)[0], "train")
    data = dl.SegmentationData.from_folder(root, split=split)
    (h, w), n = next(iter(data.image_sizes)), len(data)
    _, naive = next(iter(sources.naive_tfdata(data, n, (h, w), label_mode)))
    _, ours, _ = next(iter(dl.tf_dataset(data, batch_size=n, label_mode=label_mode, training=False,
                                         backend="tfdata")))
    assert sorted(y.tobytes() for y in naive.numpy()) == sorted(y.tobytes() for y in ours.numpy())
    assert (ours.numpy() != 255).any() if label_mode == "int" else ours.numpy().any()  # classes, not all ignored


def test_a_reference_names_the_file_its_decoder_failed_on(synth_data, tmp_path):
    """The references' pairs are vetted before they are timed (a bad pair: the guard's LoadError); a
    decoder that fails anyway on a file the vetting passed is explained by the guard, which names it."""
    import shutil

    import tensorflow as tf

    import daliloader as dl
    from daliloader.errors import LoadError

    root = shutil.copytree(Path(synth_data.images[0]).parent.parent, tmp_path / "copy")
    data = dl.SegmentationData.from_folder(root)
    guard = sources.vetted(data, workers=2)
    bad = Path(data.images[3])
    bad.write_bytes(bad.read_bytes()[:-500])  # after the vetting

    def failing():
        yield "a batch"
        raise tf.errors.InvalidArgumentError(None, None, "jpeg::Uncompress failed. Invalid JPEG data")

    stream = sources.explained(failing(), guard)
    assert next(stream) == "a batch"
    with pytest.raises(LoadError, match=f"{bad}: truncated JPEG") as refused:
        next(stream)
    assert "daliloader check" in str(refused.value)
    with pytest.raises(LoadError, match=f"cannot load sample 3 .*{bad}"):
        sources.vetted(data, workers=2)


def test_the_opencv_stream_repeats_no_batch_across_epochs(synth_data, monkeypatch):
    """The bench reads opencv's PyDataset on threads, the next epoch's first batches computed before this
    one's last are read: each is its own epoch's (no sampler step computed twice, and epochs' first
    batches differ), as Keras reads them."""
    from daliloader.backends.opencv import OpenCVLoader

    steps, batch = [], OpenCVLoader.batch
    monkeypatch.setattr(OpenCVLoader, "batch", lambda self, step: steps.append(step) or batch(self, step))
    plan = sources.bench_plan(synth_data, 2, (16, 24), "int")
    stream = sources.backend_stream("opencv", plan, workers=2)
    images = [np.asarray(x).tobytes() for x, _ in itertools.islice(stream, 3 * plan.steps)]
    stream.close()
    assert len(set(steps)) == len(steps) and set(range(3 * plan.steps)) <= set(steps)
    assert len({images[e * plan.steps] for e in range(3)}) == 3 and len(set(images)) == len(images)
