"""Published class tables read on masks of their other form are refused at load time, naming the form that
fits, and ``check`` says the same: Cityscapes' labelIds and trainIds, ADE20K raw and reduced, VOC's palette
PNGs and raw ids; on folders and on TFRecord files as DeepLab's conversion scripts write them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from trees import CITYSCAPES_TRAIN_IDS, blocks, photo, voc_palette

import daliloader as dl

tf = pytest.importorskip("tensorflow")

#: Each form: how its masks are made from a seed, and the labels they hold (independently of daliloader).
CITYSCAPES_NAMES = ("road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign",
                    "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train",
                    "motorcycle", "bicycle")


def cityscapes_label_ids(rng):
    ids = blocks(rng, np.arange(34)).astype(np.uint8)
    ids[-4:] = 1  # the ego vehicle, at the bottom of every frame
    return ids, np.vectorize(lambda i: CITYSCAPES_TRAIN_IDS.get(int(i), 255))(ids)


def cityscapes_train_ids(rng):
    _, train = cityscapes_label_ids(rng)  # what createTrainIdLabelImgs writes: trainIds, 255 for the rest
    return train.astype(np.uint8), train


def ade20k_raw(rng):
    values = blocks(rng, np.arange(151)).astype(np.uint8)
    values[:4, :8] = 0  # "other objects", in nearly every ADE20K picture
    return values, np.where(values == 0, 255, values.astype(np.int64) - 1)


def ade20k_reduced(rng):
    _, labels = ade20k_raw(rng)
    return labels.astype(np.uint8), labels


def voc_ids(rng):
    ids = blocks(rng, np.arange(21)).astype(np.uint8)
    ids[::7, :] = 255
    return ids, ids


#: form name -> (mask maker, palette PNG or not)
FORMS = {"cityscapes": (cityscapes_label_ids, False), "cityscapes-trainids": (cityscapes_train_ids, False),
         "ade20k": (ade20k_raw, False), "ade20k-reduced": (ade20k_reduced, False),
         "voc-ids": (voc_ids, False), "voc": (voc_ids, True)}
#: (masks' form, table given) for every pair of forms, both ways
MIXED = [("cityscapes-trainids", "cityscapes"), ("cityscapes", "cityscapes-trainids"),
         ("ade20k-reduced", "ade20k"), ("ade20k", "ade20k-reduced"), ("voc", "voc-ids"), ("voc-ids", "voc")]


def encode_mask(values: np.ndarray, palette: bool) -> bytes:
    import io

    image = Image.fromarray(values, mode="P" if palette else "L")
    if palette:
        image.putpalette(voc_palette())
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def write_folder(root: Path, form: str, n: int = 4) -> tuple[Path, list[np.ndarray]]:
    """images/ + masks/ of ``form``: (root, the labels of each pair in order)."""
    make, palette = FORMS[form]
    rng = np.random.default_rng(len(form))
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    labels = []
    for i in range(n):
        values, expected = make(rng)
        Image.fromarray(photo(rng)).save(root / "images" / f"{i:03d}.png")
        (root / "masks" / f"{i:03d}.png").write_bytes(encode_mask(values, palette))
        labels.append(expected)
    return root, labels


def write_records(path: Path, form: str, n: int = 4) -> list[np.ndarray]:
    """DeepLab's records of ``form`` (build_cityscapes_data.py / build_voc2012_data.py's keys), written by
    tf.io.TFRecordWriter: the labels of each record in order."""
    make, palette = FORMS[form]
    rng = np.random.default_rng(len(form) + 100)
    labels = []
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(n):
            values, expected = make(rng)
            feature = {"image/encoded": tf.io.encode_png(photo(rng)).numpy(),
                       "image/filename": f"{i:06d}".encode(), "image/format": b"png",
                       "image/segmentation/class/encoded": encode_mask(values, palette),
                       "image/segmentation/class/format": b"png"}
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v])) for k, v in feature.items()})
            ).SerializeToString())
            labels.append(expected)
    return labels


def load(container: str, tmp_path: Path, form: str, classes):
    """The dataset of ``form`` in ``container`` read with ``classes``, and its labels."""
    if container == "folder":
        root, labels = write_folder(tmp_path / form, form)
        return (lambda: dl.SegmentationData.from_folder(root, classes=classes)), labels, root
    path = tmp_path / f"{form}.tfrecord"
    labels = write_records(path, form)
    return (lambda: dl.SegmentationData.from_tfrecord(path, classes=classes)), labels, path


def table(name: str):
    """A catalogue table as a user passes it: by name, except VOC's palette form, which ``"voc"`` picks by the
    masks themselves (its explicit map is how a wrong one reaches the loader)."""
    return dl.ClassMap.voc() if name == "voc" else name


@pytest.mark.parametrize("container", ["folder", "records"])
@pytest.mark.parametrize("form, given", MIXED)
def test_a_table_read_on_masks_of_its_other_form_is_refused_naming_the_form_that_fits(tmp_path, container, form,
                                                                                       given):
    loader, _, source = load(container, tmp_path, form, table(given))
    with pytest.raises(dl.DataError, match=f"do not look like '{given}'.* but like '{form}'.*classes='{form}'"):
        loader()
    report = dl.check(source, classes=table(given))
    kinds = [p.kind for p in report.problems]
    assert kinds[0] == "class_table" and report.problems[0].details["fits"] == form, report


@pytest.mark.parametrize("container", ["folder", "records"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_loads_its_own_labels_on_dali_cpu(tmp_path, container, form):
    loader, labels, source = load(container, tmp_path, form, table(form))
    data = loader()
    assert data.classes.catalogue == form
    batches = dl.dali_pipeline(data, batch_size=2, training=False, label_mode="int", backend="dali-cpu")
    pipe, steps = batches
    from conftest import dali_numpy

    got = np.concatenate([dali_numpy(pipe.run())[1] for _ in range(steps)])
    for want, have in zip(labels, got):
        np.testing.assert_array_equal(have, want)
    assert not [p for p in dl.check(source, classes=table(form)).problems if p.kind == "class_table"]


def test_cityscapes_train_ids_have_the_19_names_by_name_and_by_constructor():
    by_name, made = dl.ClassMap.named("cityscapes-trainids"), dl.ClassMap.cityscapes(ids="train")
    assert by_name.names == made.names == CITYSCAPES_NAMES
    assert by_name.map_mask(np.array([[0, 11, 13, 255]], np.uint8)).tolist() == [[0, 11, 13, 255]]
    assert dl.ClassMap.cityscapes().map_mask(np.array([[7, 24, 26, 0]], np.uint8)).tolist() == [[0, 11, 13, 255]]
    with pytest.raises(dl.SpecError, match="ids='trainids'"):
        dl.ClassMap.cityscapes(ids="trainids")


def test_a_map_of_ones_own_is_not_second_guessed(tmp_path):
    import dataclasses

    root, _ = write_folder(tmp_path / "cs", "cityscapes-trainids")
    mine = dataclasses.replace(dl.ClassMap.cityscapes(), catalogue=None)  # the escape the message names
    assert len(dl.SegmentationData.from_folder(root, classes=mine)) == 4


def test_the_cli_check_names_the_form_that_fits(tmp_path, capsys):
    from daliloader.cli import main

    path = tmp_path / "train.tfrecord"
    write_records(path, "cityscapes-trainids")
    assert main(["check", str(path), "--classes", "cityscapes", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "class_table" in out and "classes='cityscapes-trainids'" in out


def test_a_few_masks_without_void_are_not_refused(tmp_path):
    """A single reduced ADE20K mask without 'other' (255), a Cityscapes trainIds crop without 255: legitimate,
    read with their own table."""
    for form, values in (("ade20k-reduced", np.where(np.arange(24 * 40).reshape(24, 40) % 7 == 0, 0, 3)),
                         ("cityscapes-trainids", np.where(np.arange(24 * 40).reshape(24, 40) % 3 == 0, 8, 13))):
        root = tmp_path / form
        (root / "images").mkdir(parents=True)
        (root / "masks").mkdir()
        Image.fromarray(np.zeros((24, 40, 3), np.uint8)).save(root / "images" / "0.png")
        Image.fromarray(values.astype(np.uint8)).save(root / "masks" / "0.png")
        assert dl.SegmentationData.from_folder(root, classes=form).classes.catalogue == form


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata", "opencv"])
def test_voc_masks_stored_as_colours_are_read_by_vocs_colours(tmp_path, backend):
    """Some copies of VOC store SegmentationClass with the palette expanded into RGB: classes='voc' reads
    them by VOC's colours (the border colour ignored), not as ids."""
    from conftest import one_epoch

    rng = np.random.default_rng(5)
    ids, _ = voc_ids(rng)
    palette = np.array(voc_palette(), np.uint8).reshape(256, 3)
    root = tmp_path / "voc-rgb"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    Image.fromarray(photo(rng)).save(root / "images" / "0.png")
    Image.fromarray(palette[ids]).save(root / "masks" / "0.png")
    data = dl.SegmentationData.from_folder(root, classes="voc")
    assert data.classes.kind == "rgb" and data.classes.catalogue == "voc"
    labels = one_epoch(backend, data, tf=True, batch_size=1, training=False, label_mode="int")[0][1][0]
    np.testing.assert_array_equal(labels, ids)
