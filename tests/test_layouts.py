"""daliloader/layouts.py: datasets as they are shipped, which ``from_folder`` recognises. Cityscapes,
Pascal VOC 2012 and ADE20K in small trees laid out like the downloads (file names, the files beside the
masks, split lists; tests/trees.py), CamVid, images/ + masks/ folders of plain id masks (with split folders
or without) and prepared copies. ``from_folder`` loads each split unmodified on every backend, with labels
equal bit for bit to each dataset's convention, computed here independently of daliloader; each layout
brings its class table, or the class ids its masks hold are read; ``check`` passes each layout as shipped
and still finds broken files in it; the commands read every source.

Two folders paired by hand (from_dirs): tests/test_pairing.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import one_epoch
from PIL import Image
from trees import CITYSCAPES_TRAIN_IDS, H, W, ade20k_tree, blocks, photo, voc_palette, voc_tree

import daliloader as dl
from daliloader import tfrecord
from daliloader.cli import main as cli


# (cityscapes: a fixture of tests/conftest.py, which other test files use too)
@pytest.fixture(scope="module")
def voc(tmp_path_factory):
    return voc_tree(tmp_path_factory.mktemp("voc"))


@pytest.fixture(scope="module")
def ade20k(tmp_path_factory):
    return ade20k_tree(tmp_path_factory.mktemp("ade"))


DATASETS = {"cityscapes": ("train", "val"), "voc": ("train", "val", "trainval"), "ade20k": ("training", "validation")}
CASES = [(name, split) for name, splits in DATASETS.items() for split in splits]


@pytest.mark.parametrize("name, split", CASES)
def test_from_folder_loads_each_split_as_shipped(request, name, split, backend):
    root, truth = request.getfixturevalue(name)
    data = dl.SegmentationData.from_folder(root, split=split)
    assert sorted(data.images) == sorted(truth[split])
    batches = one_epoch(backend, data, batch_size=1, image_size=(H, W), crop="center", shuffle=False,
                        label_mode="int")
    assert len(batches) == len(data)
    for image, (_, labels) in zip(data.images, batches):
        np.testing.assert_array_equal(labels[0], truth[split][image], err_msg=f"{backend}: {image}")


@pytest.mark.parametrize("name", DATASETS)
def test_the_published_class_tables_come_with_the_layout(request, name):
    root, _ = request.getfixturevalue(name)
    classes = dl.SegmentationData.from_folder(root, split=DATASETS[name][0]).classes
    expected = {"cityscapes": (19, "road", "bicycle"), "voc": (21, "background", "tvmonitor"),
                "ade20k": (150, "wall", "flag")}[name]
    assert (classes.num_classes, classes.names[0], classes.names[-1]) == expected
    assert classes.ignore_index == 255 and classes.palette().shape == (classes.num_classes, 3)


@pytest.mark.parametrize("name, split", CASES)
def test_check_passes_each_layout_as_shipped(request, name, split, capsys):
    root, _ = request.getfixturevalue(name)
    assert cli(["check", str(root), "--split", split, "--quiet"]) == 0, capsys.readouterr().out


def test_check_still_finds_broken_files_in_a_layout(voc, tmp_path):
    """A truncated mask, a listed image without its mask, a mask with another palette."""
    import shutil

    root = tmp_path / "VOCdevkit"
    shutil.copytree(voc[0], root)
    base = root / "VOC2012"
    masks = sorted((base / "SegmentationClass").glob("*.png"))
    masks[0].write_bytes(masks[0].read_bytes()[:80])
    other = Image.open(masks[1])
    other.putpalette([255 - v for v in voc_palette()])
    other.save(masks[1])
    (base / "ImageSets" / "Segmentation" / "train.txt").write_text(
        "\n".join(p.stem for p in masks[:3]) + "\n2007_000005\n")
    report = dl.check(root, split="train")
    kinds = {(Path(p.path).name, p.kind) for p in report.problems}
    assert {(masks[0].name, "corrupt"), (masks[1].name, "mask_palette")} <= kinds  # cut inside its palette
    assert ("2007_000005.png", "missing") in kinds  # listed, with its image but without its mask
    with pytest.raises(dl.DataError, match="(?s)1 listed file\\(s\\) are missing.*listed in .*train.txt but missing: "
                                           ".*SegmentationClass/2007_000005.png"):
        dl.SegmentationData.from_folder(root)
    data = dl.SegmentationData.from_pairs([(str(base / "JPEGImages" / f"{masks[1].stem}.jpg"), str(masks[1]))],
                                          dl.ClassMap.voc())
    with pytest.raises(dl.LoadError, match=f"{masks[1]}.*its palette differs"):
        one_epoch("dali-cpu", data, batch_size=1, image_size=(H, W), crop="center")


def test_palette_masks_using_indices_past_their_palette_are_refused_on_every_backend(voc, tmp_path, backend):
    """A VOC mask saved with the 21 colours of its classes still marks its borders 255: every decoder shows
    an index past the palette as black, the background's colour, so the borders would train as background.
    Such a mask is refused by name, on every backend and by check; a short palette whose pixels stay
    within it is read as any other."""
    import shutil

    root = tmp_path / "VOCdevkit"
    shutil.copytree(voc[0], root)
    masks = sorted((root / "VOC2012" / "SegmentationClass").glob("*.png"))
    for mask in masks:
        ids = np.asarray(Image.open(mask))
        short = Image.fromarray(np.where(ids == 255, 0, ids).astype(np.uint8) if mask != masks[0] else ids, "P")
        short.putpalette(voc_palette()[:21 * 3])
        short.save(mask)
    assert np.asarray(Image.open(masks[0])).max() == 255 and len(Image.open(masks[0]).getpalette()) == 21 * 3
    pairs = [(str(root / "VOC2012" / "JPEGImages" / f"{m.stem}.jpg"), str(m)) for m in masks]
    data = dl.SegmentationData.from_pairs(pairs, dl.ClassMap.voc())
    with pytest.raises(dl.LoadError, match=f"{masks[0]}: its pixels use palette index 255, past the end of its "
                                           "palette \\(21 colours\\): every decoder reads such pixels as black"):
        one_epoch(backend, data, batch_size=1, image_size=(H, W), crop="center", training=False)
    within = dl.SegmentationData.from_pairs(pairs[1:], dl.ClassMap.voc())
    assert len(one_epoch(backend, within, batch_size=1, image_size=(H, W), crop="center", training=False)) == len(
        pairs) - 1
    kinds = {(Path(p.path).name, p.kind) for p in dl.check(root, split="trainval").problems}
    assert (masks[0].name, "short_palette") in kinds


def test_an_unknown_layout_lists_every_layout(tmp_path):
    (tmp_path / "stuff").mkdir()
    with pytest.raises(dl.DataError, match="(?s)Cityscapes.*Pascal VOC 2012.*ADE20K.*CamVid.*images/ \\+ masks/.*"
                                           "prepared copy"):
        dl.SegmentationData.from_folder(tmp_path)
    with pytest.raises(dl.DataError, match="is ADE20K, but has no split 'test'.*training, validation"):
        dl.SegmentationData.from_folder(_ade_root(tmp_path), split="test")


def test_splits_where_a_folder_has_them_and_none_where_it_has_not(tmp_path, sources):
    """images/ + masks/ with split folders reads the split asked for (default train); a flat one is one
    split, and so is a prepared copy: an explicit split there is refused rather than ignored; CamVid
    names its splits."""
    split_tree = tmp_path / "split"
    for split, n in (("train", 3), ("val", 2)):
        id_tree(split_tree, [0, 1], n=n, split=split)
    assert len(dl.SegmentationData.from_folder(split_tree, classes=2)) == 3
    assert len(dl.SegmentationData.from_folder(split_tree, split="val", classes=2)) == 2
    with pytest.raises(dl.DataError, match="has no split 'test'.*its splits: train, val"):
        dl.SegmentationData.from_folder(split_tree, split="test", classes=2)

    id_tree(tmp_path / "flat", [0, 1])
    assert len(dl.SegmentationData.from_folder(tmp_path / "flat", classes=2)) == 3
    with pytest.raises(dl.DataError, match="has no split folders.*drop split='val'"):
        dl.SegmentationData.from_folder(tmp_path / "flat", split="val", classes=2)

    prepared = sources["prepared"][0]  # VOC's train split, prepared without --split
    assert len(dl.SegmentationData.from_folder(prepared)) == 3
    assert len(dl.SegmentationData.from_folder(prepared, split="train")) == 3  # the split it records
    with pytest.raises(dl.DataError,
                       match="prepared copy of split 'train' of .*VOCdevkit.*drop split='val'.*--split val"):
        dl.SegmentationData.from_folder(prepared, split="val")

    dl.synthetic.make_dataset(tmp_path / "camvid", n=2)
    with pytest.raises(dl.DataError, match="is CamVid, but has no split 'test'.*its splits: train"):
        dl.SegmentationData.from_folder(tmp_path / "camvid", split="test")


def _ade_root(tmp_path) -> Path:
    root = tmp_path / "ADEChallengeData2016"
    for split in ("training", "validation"):
        (root / "images" / split).mkdir(parents=True)
        (root / "annotations" / split).mkdir(parents=True)
    return root


def test_palette_masks_with_a_class_count_are_read_by_index(voc, backend):
    """classes=21 on palette masks reads their indices (through their palette), as from_folder does for
    VOC. An id map cannot read them (next test): check says they are palette PNGs and names the
    indices, and the loaders refuse them instead of training on colour luminance."""
    root, truth = voc
    pairs = [(image, image.replace("JPEGImages", "SegmentationClass").replace(".jpg", ".png"))
             for image in truth["train"]]
    data = dl.SegmentationData.from_pairs(pairs, 21)
    assert dl.check(data).ok
    for image, (_, labels) in zip(data.images, one_epoch(backend, data, batch_size=1, image_size=(H, W),
                                                         crop="center", shuffle=False, label_mode="int")):
        np.testing.assert_array_equal(labels[0], truth["train"][image], err_msg=backend)


def test_an_id_map_refuses_palette_masks_and_names_their_indices(voc):
    root, truth = voc
    pairs = [(image, image.replace("JPEGImages", "SegmentationClass").replace(".jpg", ".png"))
             for image in truth["train"]]
    data = dl.SegmentationData.from_pairs(pairs, dl.ClassMap.from_ids(21))
    report = dl.check(data)
    assert {p.kind for p in report.problems} == {"palette_mask"}
    message = report.problems[0].message
    assert "palette PNG" in message and "classes=N" in message
    assert re.search(r"Its indices: 0-[0-9, -]*, 255$", message), message
    with pytest.raises(dl.LoadError, match="palette PNG"):
        one_epoch("dali-cpu", data, batch_size=1, image_size=(H, W), crop="center")


# ---------------------------------------------------------------- plain id masks
def id_tree(root: Path, values, depth: int = 8, n: int = 3, ext: str = "png", split: str = "") -> dict[str, np.ndarray]:
    """images/ + masks/ (or images/SPLIT/ + masks/SPLIT/) without a class table; masks of ``depth`` bits
    holding ``values``."""
    rng = np.random.default_rng(4)
    images, masks = root / "images" / split, root / "masks" / split
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    truth = {}
    for i in range(n):
        ids = blocks(rng, np.asarray(values)).astype(np.uint16 if depth == 16 else np.uint8)
        image = images / f"{i:03d}.{ext}"
        cv2.imwrite(str(image), photo(rng))
        cv2.imwrite(str(masks / f"{i:03d}.png"), ids)
        truth[str(image)] = ids
    return truth


def test_16_bit_id_masks_keep_their_ids_on_every_backend(tmp_path, backend):
    """Ids above 255 need 16-bit masks; every backend reads them as stored."""
    truth = id_tree(tmp_path, [0, 7, 300, 1000, 65000], depth=16)
    classes = dl.ClassMap.from_ids({0: 0, 300: 1, 1000: 2, 65000: 3})
    data = dl.SegmentationData.from_folder(tmp_path, classes=classes)
    assert data.mask_depth == 16
    for image, (_, labels) in zip(data.images, one_epoch(backend, data, batch_size=1, image_size=(H, W),
                                                         crop="center", shuffle=False, label_mode="int")):
        want = np.vectorize({0: 0, 7: 255, 300: 1, 1000: 2, 65000: 3}.get)(truth[image])
        np.testing.assert_array_equal(labels[0], want, err_msg=backend)


def test_classes_none_reads_the_ids_in_the_masks(tmp_path):
    id_tree(tmp_path, [0, 2, 5, 255])
    data = dl.SegmentationData.from_folder(tmp_path)  # images/ + masks/, no class_dict.csv
    assert data.classes.num_classes == 6 and data.classes.ignore_index == 255 and data.classes.kind == "id"
    with pytest.raises(dl.DataError, match="classes=None reads class ids from single-channel masks.*colour masks"):
        dl.SegmentationData.from_dirs(*_colour_tree(tmp_path / "colour"), classes=None)


def _as_split_records(files: Path, out: Path) -> Path:
    """The split folders of images/ + masks/ tree ``files`` as a folder of TFRecord files named by split."""
    out.mkdir()
    for split in ("train", "val"):
        with tfrecord.Writer(out / f"{split}-00000-of-00001.tfrecord") as writer:
            for image in sorted((files / "images" / split).iterdir()):
                writer.write({"image/encoded": image.read_bytes(), "image/segmentation/class/encoded":
                              (files / "masks" / split / image.with_suffix(".png").name).read_bytes()})
    return out


def test_every_split_of_a_folder_gets_the_class_map_inferred_from_all_of_them(tmp_path, backend):
    """classes=None reads the ids in the masks of every split of the folder, so the splits agree: val, whose
    masks hold ids 0 and 1 only, gets train's 4 classes (one-hot labels of one depth, metrics over one class
    set), as files in split folders and as TFRecord files named by split; check reads them alike."""
    files = tmp_path / "files"
    id_tree(files, [0, 1, 3], split="train")
    id_tree(files, [0, 1], split="val")
    for root in (files, _as_split_records(files, tmp_path / "records")):
        train, val = (dl.SegmentationData.from_folder(root, split=split) for split in ("train", "val"))
        assert train.classes.num_classes == val.classes.num_classes == 4, root
        assert val.classes.id_to_class == train.classes.id_to_class
        assert dl.check(root, split="val").ok
        (_, labels), *_ = one_epoch(backend, val, batch_size=len(val), image_size=(H, W), crop="center",
                                    shuffle=False)
        assert labels.shape[-1] == 4, (root, backend)


def test_an_empty_split_is_refused_naming_its_list(tmp_path, capsys):
    """A VOC split list without samples: every loader and check refuse the empty dataset, naming the list
    (check said "checked 0 pairs ... no problems", exit 0)."""
    root, _ = voc_tree(tmp_path)
    listed = root / "VOC2012" / "ImageSets" / "Segmentation" / "empty.txt"
    listed.write_text("\n")
    empty = f"the dataset is empty: no image/mask pairs listed in {re.escape(str(listed))}"
    with pytest.raises(dl.DataError, match=empty):
        dl.SegmentationData.from_folder(root, split="empty")
    with pytest.raises(dl.DataError, match=empty):
        dl.check(root, split="empty")
    assert cli(["check", str(root), "--split", "empty", "--quiet"]) == 2
    assert str(listed) in capsys.readouterr().err


def test_a_class_count_on_a_layout_keeps_its_published_table(cityscapes, ade20k, voc, tmp_path):
    """classes=N where the layout publishes a table: the table when N is its class count (Cityscapes 19,
    ADE20K 150); another N would read the raw ids as classes, which is refused; VOC reads N palette indices
    (a dataset of its own in VOC's layout, its masks holding indices 0..N-1)."""
    assert dl.SegmentationData.from_folder(cityscapes[0], classes=19).classes.id_to_class == \
        dl.ClassMap.cityscapes().id_to_class
    assert dl.SegmentationData.from_folder(ade20k[0], classes=150).classes.id_to_class == \
        dl.ClassMap.ade20k().id_to_class
    with pytest.raises(dl.DataError, match="classes=34 on Cityscapes.*maps to 19 classes.*wrong labels"):
        dl.SegmentationData.from_folder(cityscapes[0], classes=34)
    with pytest.raises(dl.DataError, match="classes=151 on ADE20K"):
        dl.check(ade20k[0], split="training", classes=151)
    own, _ = voc_tree(tmp_path)
    for mask in (own / "VOC2012" / "SegmentationClass").glob("*.png"):
        indices = np.asarray(Image.open(mask))
        small = Image.fromarray(np.where(indices == 255, 255, indices % 5).astype(np.uint8), mode="P")
        small.putpalette(voc_palette())
        small.save(mask)
    five = dl.SegmentationData.from_folder(own, classes=5).classes
    assert five.num_classes == 5 and five.palette_masks is not None and five.ignore_index == 255


@pytest.mark.parametrize("form", ["palette", "ids"])
def test_a_class_count_that_would_ignore_ids_of_the_masks_is_refused(voc, tmp_path, capsys, form):
    """classes=N on masks that hold ids (palette indices) N and above, besides the ignore index: those
    pixels would load as ignored without a word (VOC's 21 classes read with classes=20 lose tvmonitor).
    Refused by name, with the count that reads them; a class map given reads the rest as ignored on purpose;
    check reports them mask by mask instead of refusing."""
    if form == "palette":
        root, n, top, what = voc[0], 20, 21, "palette index 20"
    else:
        root, n, top, what = tmp_path, 9, 10, "id 9"
        id_tree(root, [0, 3, 9, 255])
    with pytest.raises(dl.DataError, match=f"classes={n} reads .* hold {what} .*Pass .*classes={top} "):
        dl.SegmentationData.from_folder(root, classes=n)
    assert cli(["check", str(root), "--classes", str(n), "--quiet"]) == 1  # (1: problems found)
    assert "unknown_values" in capsys.readouterr().out
    assert cli(["bench", str(root), "--classes", str(n), "--backends", "opencv", "--seconds", "0.1"]) == 2
    assert f"classes={top} (--classes {top}" in capsys.readouterr().err
    if form == "palette":
        mine = dl.ClassMap.from_palette_indices(voc_palette(), n)
        assert dl.SegmentationData.from_folder(root, classes=top).classes.num_classes == top
    else:
        mine = dl.ClassMap.from_ids({i: i for i in range(n)})
        assert dl.SegmentationData.from_folder(root, classes=top).classes.num_classes == top
    assert dl.SegmentationData.from_folder(root, classes=mine).classes.num_classes == n


def test_binary_masks_are_not_read_as_ignored_silently(tmp_path):
    """Masks of 0 and 255 (8-bit or 1-bit): classes=None refuses to guess; check flags classes=2, which
    would read 255 as the ignore index; classes={0: 0, 255: 1} reads the foreground."""
    for kind in ("8-bit", "1-bit"):
        root = tmp_path / kind
        truth = id_tree(root, [0, 255], n=2)
        if kind == "1-bit":
            for image in truth:
                mask = Path(image.replace("images", "masks"))
                Image.fromarray(truth[image] > 0).save(mask)
                assert Image.open(mask).mode == "1"
        with pytest.raises(dl.DataError, match="only the values 0 and 255.*classes=\\{0: 0, 255: 1\\}"):
            dl.SegmentationData.from_folder(root)
        report = dl.check(root, classes=2)
        assert {p.kind for p in report.problems} == {"binary_mask"}, report
        assert "pass classes={0: 0, 255: 1}" in report.problems[0].message
        data = dl.SegmentationData.from_folder(root, classes={0: 0, 255: 1})
        assert dl.check(data).ok
        for image, (_, labels) in zip(data.images, one_epoch("dali-cpu", data, batch_size=1, image_size=(H, W),
                                                             crop="center", shuffle=False, label_mode="int")):
            np.testing.assert_array_equal(labels[0], truth[image] // 255, err_msg=kind)


def test_more_than_255_classes(tmp_path):
    """A class count above 255 moves the ignore index to 65535; classes=None on 16-bit masks treats
    65535 as the ignore value, as 255 in 8-bit masks."""
    classes = dl.ClassMap.from_ids(1001)
    assert classes.ignore_index == 65535 and classes.num_classes == 1001
    id_tree(tmp_path, [0, 3, 1000, 65535], depth=16)
    inferred = dl.SegmentationData.from_folder(tmp_path).classes
    assert inferred.num_classes == 1001 and inferred.ignore_index == 65535
    assert dl.check(tmp_path, classes=1001).ok
    with pytest.raises(dl.DataError, match="without gaps.*got 2 classes from 0 to 5, missing \\[1, 2, 3, 4\\]"):
        dl.ClassMap.from_ids({0: 0, 9: 5})


def test_train_ids_saved_as_16_bit_masks_are_asked_about_255(tmp_path):
    """16-bit masks holding a few ids and 255 alone above them (train ids saved as 16-bit PNGs): classes=None
    made 255 a class of its own (256 classes, 250 never seen; an outside review); it is asked, and both
    answers load."""
    id_tree(tmp_path, [0, 3, 4, 255], depth=16)
    with pytest.raises(dl.DataError, match=r"16-bit masks hold ids 0-4 and 255 alone above them. The ignore value\? "
                                           r"Pass classes=5 \(--classes 5\).*A class of its own\? Pass classes=256"):
        dl.SegmentationData.from_folder(tmp_path)
    assert dl.SegmentationData.from_folder(tmp_path, classes=5).classes.num_classes == 5
    assert dl.SegmentationData.from_folder(tmp_path, classes=256).classes.num_classes == 256


@pytest.mark.parametrize("values, depth, every, below", [
    ([0, 128, 255], 8, "0:0,128:1,255:2", "0:0,128:1"),
    ([0, 85, 170, 255], 8, "0:0,85:1,170:2,255:3", "0:0,85:1,170:2"),
    ([0, 1000, 2000, 3000], 16, "0:0,1000:1,2000:2,3000:3", None)])
def test_ids_spread_evenly_apart_as_grey_levels_are_asked_about(tmp_path, values, depth, every, below):
    """Masks of 0, 128 and 255 made 129 classes, 127 never seen, and check said nothing (a review): three
    or more levels from 0, evenly spaced, read as grey levels spread apart for viewing, so they are asked
    about (255 among them: a class, or the ignore value?), and every answer loads."""
    id_tree(tmp_path, values, depth=depth)
    count = max(v for v in values if v != (255 if depth == 8 else 65535)) + 1
    either = (f" \\({values[-1]} a class\\), classes=.* \\(--classes {below}\\) if 255 marks ignored pixels"
              if below else "")
    with pytest.raises(dl.DataError, match=f"the masks hold the values {', '.join(map(str, values))}: grey levels "
                                           f"spread evenly apart for viewing\\? A class per id would make {count} "
                                           f"classes.*\\(--classes {every}\\) to number them{either}, or "
                                           f"classes={count}"):
        dl.SegmentationData.from_folder(tmp_path)
    assert cli(["check", str(tmp_path), "--quiet"]) == 2
    assert dl.SegmentationData.from_folder(tmp_path, classes=count).classes.num_classes == count
    numbered = dl.SegmentationData.from_folder(tmp_path, classes={v: k for k, v in enumerate(values)})
    assert numbered.classes.num_classes == len(values)


@pytest.mark.parametrize("values", [[0, 15, 255], [0, 13], [0, 8], [0, 8, 16, 40], [10, 20, 30]])
def test_ids_of_a_subset_of_classes_are_not_taken_for_grey_levels(tmp_path, values):
    """A VOC subset of background and person (0, 15, 255), a Cityscapes subset of road and car (0, 13):
    the first version of that question refused any two ids with a common step (an outside review)."""
    id_tree(tmp_path, values)
    assert dl.SegmentationData.from_folder(tmp_path).classes.num_classes == max(v for v in values if v != 255) + 1


def test_binary_16_bit_masks_are_asked_about_as_8_bit_ones(tmp_path):
    """16-bit masks of 0 and 255 alone: binary masks or background and ignore, as 8-bit ones (not 256
    classes, which the lone-255 refusal would have offered)."""
    id_tree(tmp_path, [0, 255], depth=16)
    with pytest.raises(dl.DataError, match=r"only the values 0 and 255. Binary masks \(foreground 255\)\? Pass "
                                           r"classes=\{0: 0, 255: 1\}"):
        dl.SegmentationData.from_folder(tmp_path)


def test_palette_masks_of_any_dataset(tmp_path, capsys):
    """Palette PNGs padded with black (as exported): --classes N reads their indices; an index outside the
    classes is reported by check, also one whose colour is a class's; an ignore index coloured like a
    class is refused."""
    rng = np.random.default_rng(5)
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    palette = [0, 0, 0, 200, 30, 30, 30, 200, 30] + [0, 0, 0] * 252 + [255, 255, 255]  # padded with black
    truth = {}
    for i in range(2):
        ids = blocks(rng, np.array([0, 1, 2, 255])).astype(np.uint8)
        mask = Image.fromarray(ids, mode="P")
        mask.putpalette(palette)
        mask.save(tmp_path / "masks" / f"{i}.png")
        cv2.imwrite(str(tmp_path / "images" / f"{i}.png"), photo(rng))
        truth[str(tmp_path / "images" / f"{i}.png")] = ids
    args = [str(tmp_path), "--classes", "3", "--quiet"]
    assert cli(["check", *args]) == 0, capsys.readouterr().out
    data = dl.SegmentationData.from_folder(tmp_path, classes=3)
    for image, (_, labels) in zip(data.images, one_epoch("opencv", data, batch_size=1, image_size=(H, W),
                                                         crop="center", shuffle=False, label_mode="int")):
        np.testing.assert_array_equal(labels[0], truth[image])
    stray = np.asarray(Image.open(tmp_path / "masks" / "0.png")).copy()
    stray[:4, :4], stray[-4:, -4:] = 7, 9
    mask = Image.fromarray(stray, mode="P")
    mask.putpalette(palette[:27] + [1, 2, 3] + palette[30:])  # index 9 gets a colour of its own
    mask.save(tmp_path / "masks" / "0.png")
    assert cli(["check", *args]) == 1
    out = capsys.readouterr().out
    assert "palette indices that are not classes (0-2) nor the ignore index 255: 7 x16 (the colour of class 0: " \
           "loads as that class), 9 x16" in out, out
    with pytest.raises(dl.DataError,
                       match="palette index 255 \\(the ignore index\\) has the colour \\[0, 0, 0\\] of index 0"):
        dl.ClassMap.from_palette_indices(np.asarray(palette[:-3] + [0, 0, 0]).reshape(-1, 3), 3)


def test_camvid_without_its_table_takes_classes(tmp_path):
    dl.synthetic.make_dataset(tmp_path, n=2)
    (tmp_path / "class_dict.csv").rename(tmp_path / "elsewhere.csv")
    with pytest.raises(dl.DataError, match="no class_dict.csv.*or pass classes="):
        dl.SegmentationData.from_folder(tmp_path)
    assert len(dl.SegmentationData.from_folder(tmp_path, classes=tmp_path / "elsewhere.csv")) == 2


def test_grey_id_masks_under_a_colour_table_are_refused_on_every_backend(tmp_path, backend):
    """CamVid as SegNet ships it: grey masks of class ids beside a class_dict.csv of colours. Every backend
    loaded id 0 as the class drawn in black (Void) and most other pixels as ignored, without an error:
    a grey mask whose levels are no colour of the table is refused by name, and read as ids where asked.
    A grey mask whose levels are all grey colours of the table (all Void, as an optimiser may store it)
    is read as any other (an outside review: the first version of this refusal took it too)."""
    data = dl.synthetic.make_dataset(tmp_path, n=2, image_size=(24, 32))
    Image.fromarray(np.zeros((24, 32), np.uint8), "L").save(data.masks[1])  # all Void, (0, 0, 0)
    void = one_epoch(backend, dl.SegmentationData.from_folder(tmp_path), batch_size=2, image_size=(24, 32),
                     crop="center", training=False, label_mode="int")[0][1]
    assert (void[1] == data.classes.colors.tolist().index([0, 0, 0])).all()  # CamVid's Void is a class
    ids = np.random.default_rng(1).integers(0, 12, (24, 32)).astype(np.uint8)
    for mask in data.masks:
        Image.fromarray(ids, "L").save(mask)
    data = dl.SegmentationData.from_folder(tmp_path)
    with pytest.raises(dl.LoadError, match=f"{data.masks[0]}: a single-channel \\(L\\) mask under a colour table "
                                           ".* whose grey levels 1, 2, 3, 4, 5, 6, 7, 8, ... are no colour of it: are "
                                           "its values class ids\\? They would load as ignored. Pass the class count"):
        one_epoch(backend, data, batch_size=1, image_size=(24, 32), crop="center", training=False)
    assert {p.kind for p in dl.check(data, progress=False).problems} == {"mask_mode"}
    as_ids = dl.SegmentationData.from_folder(tmp_path, classes=12)
    _, y = one_epoch(backend, as_ids, batch_size=1, image_size=(24, 32), crop="center", training=False,
                     label_mode="int")[0][:2]
    np.testing.assert_array_equal(y[0], ids)


def test_cityscapes_with_only_its_train_ids_reads_them(cityscapes, tmp_path, backend):
    """A copy of Cityscapes that kept only what cityscapesScripts' createTrainIdLabelImgs made
    (*_gtFine_labelTrainIds.png) was "no masks found under gtFine/val", with PNG masks there: it is read
    with the trainIds table."""
    import shutil

    root = tmp_path / "cityscapes"
    shutil.copytree(cityscapes[0], root)
    for mask in root.glob("gtFine/*/*/*_gtFine_labelIds.png"):
        ids = cv2.imread(str(mask), cv2.IMREAD_UNCHANGED)
        train_ids = np.vectorize(lambda i: CITYSCAPES_TRAIN_IDS.get(int(i), 255))(ids).astype(np.uint8)
        cv2.imwrite(str(mask).replace("_labelIds", "_labelTrainIds"), train_ids)
        mask.unlink()
    data = dl.SegmentationData.from_folder(root, split="val")
    assert data.classes.catalogue == "cityscapes-trainids"
    batches = one_epoch(backend, data, batch_size=1, training=False, label_mode="int")
    for image, batch in zip(data.images, batches):
        np.testing.assert_array_equal(batch[1][0], cityscapes[1]["val"][image.replace(str(root), str(cityscapes[0]))])


def test_images_and_annotations_alone_are_not_ade20k(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "annotations").mkdir()
    with pytest.raises(dl.DataError, match="unknown dataset layout"):
        dl.SegmentationData.from_folder(tmp_path)


def _colour_tree(root: Path):
    from conftest import write_pairs

    data = write_pairs(root, [np.zeros((8, 8, 3), np.uint8)], [np.full((8, 8, 3), 64, np.uint8)])
    return Path(data.images[0]).parent, Path(data.masks[0]).parent


def test_a_mask_of_another_depth_is_refused_by_name(tmp_path):
    truth = id_tree(tmp_path, [0, 1, 2], n=2)
    odd = Path(sorted(truth)[1].replace("images", "masks"))
    cv2.imwrite(str(odd), cv2.imread(str(odd), cv2.IMREAD_UNCHANGED).astype(np.uint16))
    data = dl.SegmentationData.from_folder(tmp_path, classes=3)
    with pytest.raises(dl.LoadError, match=f"{odd}.*16-bit mask in a dataset of 8-bit masks"):
        one_epoch("dali-cpu", data, batch_size=1, image_size=(H, W), crop="center", shuffle=False)


def test_a_format_a_backend_cannot_decode_is_refused_by_name(tmp_path):
    """TIFF images: tf.image has no TIFF decoder; tfdata refuses them by name, before decoding, and names
    the backends that read them (inside tf.data, TensorFlow wraps the message in its own error); those do."""
    truth = id_tree(tmp_path, [0, 1], ext="tif")
    data = dl.SegmentationData.from_folder(tmp_path, classes=2)
    with pytest.raises(Exception, match=f"(?s){sorted(truth)[0]}: TIFF cannot be decoded by backend='tfdata'; "
                                        "dali-gpu, dali-cpu, opencv can"):
        one_epoch("tfdata", data, batch_size=1, image_size=(H, W), crop="center", shuffle=False)
    assert len(one_epoch("dali-cpu", data, batch_size=1, image_size=(H, W), crop="center")) == 3


# ---------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def sources(cityscapes, voc, ade20k, tmp_path_factory):
    """Every way of naming a dataset on the command line: each layout, --images/--masks/--classes N, and
    a prepared copy."""
    plain = tmp_path_factory.mktemp("plain")
    id_tree(plain, [0, 1, 2, 3])
    prepared = tmp_path_factory.mktemp("prep") / "voc-prepared"
    assert cli(["prepare", str(voc[0]), str(prepared), "--quiet"]) == 0
    return {"cityscapes": [str(cityscapes[0])], "voc": [str(voc[0]), "--split", "trainval"],
            "ade20k": [str(ade20k[0]), "--split", "validation"],
            "ids": ["--images", str(plain / "images"), "--masks", str(plain / "masks"), "--classes", "4"],
            "prepared": [str(prepared)]}


@pytest.mark.parametrize("source", ["cityscapes", "voc", "ade20k", "ids", "prepared"])
def test_the_commands_read_every_source(sources, source, tmp_path, capsys):
    args = sources[source]
    assert cli(["check", *args, "--quiet"]) == 0, capsys.readouterr().out
    assert cli(["preview", *args, "-o", str(tmp_path / "p.png"), "--batches", "1", "--batch-size", "1",
                "--image-size", "16"]) == 0
    assert cli(["prepare", *args, str(tmp_path / "copy"), "--quiet", "--verify"]) == 0, capsys.readouterr()
    pytest.importorskip("tensorflow")
    assert cli(["bench", *args, "--backends", "dali-cpu", "--batch-size", "1", "--image-size", "16",
                "--seconds", "0.05", "--repeats", "1", "--no-stages", "--json", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["results"][0]["median"] > 0


def test_voc_prepared_keeps_its_labels(voc, sources):
    """prepare reads the palette masks by index too: the copy's 8-bit masks equal the indices."""
    root, truth = voc
    data = dl.SegmentationData.from_folder(sources["prepared"][0])
    by_name = {Path(image).stem: labels for image, labels in truth["trainval"].items()}
    for mask in data.masks:
        np.testing.assert_array_equal(cv2.imread(mask, cv2.IMREAD_UNCHANGED), by_name[Path(mask).stem.split("-", 1)[1]])


def test_the_bench_names_a_multi_city_split_and_shows_its_progress(cityscapes, capsys):
    """Issue 27: the bench's header named one city's folder for Cityscapes' train split (two cities), and a
    short bench ran for a minute without a sign: it names the split's folder and prints each figure."""
    pytest.importorskip("tensorflow")
    root, _ = cityscapes
    assert cli(["bench", str(root), "--backends", "dali-cpu", "--batch-size", "1", "--image-size", "16",
                "--seconds", "0.05", "--repeats", "1", "--no-stages"]) == 0
    out = capsys.readouterr().out
    header = out.split("dataset: ", 1)[1].split("measuring", 1)[0].replace("\n", "")  # (rich wraps at 80 columns)
    assert header.endswith(f", {root / 'leftImg8bit' / 'train'}")
    assert "measuring 1 figure," in out and "1/1 dali-cpu / onehot / original:" in out


def test_split_folders_of_ones_own_beside_annotations_are_not_ade20k(tmp_path):
    """images/{training,validation} + annotations/: a folder of one's own was read as ADE20K, its class 0
    ignored and every other id shifted by one, without a word. ADE20K is the folder of that name, or one
    holding a file the download ships beside them."""
    own = tmp_path / "own"
    for split in ("training", "validation"):
        (own / "images" / split).mkdir(parents=True)
        (own / "annotations" / split).mkdir(parents=True)
    with pytest.raises(dl.DataError, match="unknown dataset layout"):
        dl.SegmentationData.from_folder(own)
    renamed, _ = ade20k_tree(tmp_path / "ade")
    renamed = renamed.rename(tmp_path / "ade20k")  # a copy renamed keeps the files it shipped with
    assert dl.SegmentationData.from_folder(renamed).classes.catalogue == "ade20k"


@pytest.mark.parametrize("train, val", [("Train", "Val"), ("training", "validation"), ("train2017", "val2017"),
                                        ("TRAIN", "valid")])
def test_split_folders_in_any_case_or_with_a_year_stay_apart(tmp_path, train, val):
    """Split folders named otherwise than train/val were no splits: both were read as one dataset, the
    validation images trained on. Now each is its split: the training one by default, the other by its
    name, in any case, or by the common name of its split."""
    id_tree(tmp_path, [0, 1], n=3, split=train)
    id_tree(tmp_path, [0, 1], n=2, split=val)
    assert len(dl.SegmentationData.from_folder(tmp_path, classes=2)) == 3
    for name in (val, val.lower(), "val", "validation"):
        data = dl.SegmentationData.from_folder(tmp_path, split=name, classes=2)
        assert len(data) == 2 and all(Path(i).parent.name == val for i in data.images), name
    with pytest.raises(dl.DataError, match="has no split 'test'"):
        dl.SegmentationData.from_folder(tmp_path, split="test", classes=2)


def test_a_missing_split_names_the_folder_that_is_missing(tmp_path, cityscapes):
    id_tree(tmp_path / "own", [0, 1], n=2, split="val")
    (tmp_path / "own" / "masks" / "val").rename(tmp_path / "own" / "masks" / "valid")
    with pytest.raises(dl.DataError, match=r"no split 'val' \(\S*own/masks/val is missing\)"):
        dl.SegmentationData.from_folder(tmp_path / "own", split="val", classes=2)
    root, _ = cityscapes
    (root / "leftImg8bit" / "train_extra").mkdir(exist_ok=True)
    with pytest.raises(dl.DataError, match=r"no split 'train_extra' \(\S*gtFine/train_extra is missing\)"):
        dl.SegmentationData.from_folder(root, split="train_extra")


def test_test_splits_shipped_without_labels_say_so(tmp_path, voc):
    import shutil

    ade, _ = ade20k_tree(tmp_path / "ade")
    (ade / "images" / "testing").mkdir()
    Image.fromarray(np.zeros((H, W, 3), np.uint8)).save(ade / "images" / "testing" / "ADE_test_00000001.jpg")
    with pytest.raises(dl.DataError, match="ADE20K, whose test images ship without annotations.*'validation'"):
        dl.SegmentationData.from_folder(ade, split="test")
    root = tmp_path / "VOCdevkit"
    shutil.copytree(voc[0], root)
    (root / "VOC2012" / "ImageSets" / "Segmentation" / "test.txt").write_text("2007_000004\n2007_000005\n")
    with pytest.raises(dl.DataError, match="Pascal VOC, whose test masks are not public.*split='val'"):
        dl.SegmentationData.from_folder(root, split="test")


def test_ade20k_masks_already_reduced_are_read_as_such_by_the_layout(tmp_path, backend):
    """The load-time check named classes='ade20k-reduced' for masks reduced by one, and the layout then
    refused it (another form of its table): no way forward. The layout now reads its masks in the form
    they are stored in, judged on every split's masks: a validation split of two masks without a void
    pixel was read as raw (every pixel wrong) beside a training split read as reduced. The other form,
    given, is refused naming the one that works."""
    root, truth = ade20k_tree(tmp_path)
    for split in ("training", "validation"):
        for mask in (root / "annotations" / split).glob("*.png"):
            values = cv2.imread(str(mask), cv2.IMREAD_UNCHANGED)
            cv2.imwrite(str(mask), np.where(values == 0, 255, values - 1).astype(np.uint8))
    assert all(255 not in cv2.imread(str(m), cv2.IMREAD_UNCHANGED)  # (the case: nothing in it says "reduced")
               for m in (root / "annotations" / "validation").glob("*.png"))
    for split in ("training", "validation"):
        data = dl.SegmentationData.from_folder(root, split=split)
        assert data.classes.catalogue == "ade20k-reduced"
        assert dl.SegmentationData.from_folder(root, split=split, classes="ade20k-reduced").classes == data.classes
        batches = one_epoch(backend, data, batch_size=1, image_size=(H, W), crop="center", shuffle=False,
                            label_mode="int")
        for image, (_, labels) in zip(data.images, batches):
            np.testing.assert_array_equal(labels[0], truth[split][image], err_msg=f"{backend}: {image}")
    with pytest.raises(dl.DataError, match="do not look like 'ade20k'.*but like 'ade20k-reduced'.*Pass "
                                           "classes='ade20k-reduced'"):
        dl.SegmentationData.from_folder(root, classes="ade20k")
    with pytest.raises(dl.DataError, match="classes='ade20k-instances' on ADE20K.*another form of that dataset's"):
        dl.SegmentationData.from_folder(root, classes="ade20k-instances")  # (not one of the two judged forms)


@pytest.mark.parametrize("form", ["colours", "ids"])
def test_voc_masks_stored_otherwise_are_read_by_the_layout(tmp_path, voc, form, backend):
    """VOC's layout read SegmentationClass as palette PNGs whatever they were: colour pictures or grey ids
    then failed at the first batch, though classes='voc' read them. The layout reads them as stored, and
    takes the name of that form (classes='voc-ids' on ids)."""
    import shutil

    root = tmp_path / "VOCdevkit"
    shutil.copytree(voc[0], root)
    for mask in (root / "VOC2012" / "SegmentationClass").glob("*.png"):
        im = Image.open(mask)
        (im.convert("RGB") if form == "colours" else Image.fromarray(np.asarray(im))).save(mask)
    data = dl.SegmentationData.from_folder(root)
    assert data.classes.catalogue == ("voc" if form == "colours" else "voc-ids")
    if form == "ids":
        assert dl.SegmentationData.from_folder(root, classes="voc-ids").classes == data.classes
        assert dl.SegmentationData.from_folder(root, classes="voc").classes == data.classes
    batches = one_epoch(backend, data, batch_size=1, image_size=(H, W), crop="center", shuffle=False,
                        label_mode="int")
    truth = {Path(image).name: labels for image, labels in voc[1]["train"].items()}
    for image, (_, labels) in zip(data.images, batches):
        np.testing.assert_array_equal(labels[0], truth[Path(image).name], err_msg=f"{backend}: {image}")


def test_images_without_the_layouts_name_ending_are_listed_not_a_type_error(cityscapes, tmp_path):
    """A stray file beside Cityscapes' images (no ``_leftImg8bit``) ended the pairing in a TypeError; two
    of them in a wrong "two images share a name". Both are images without a partner, named."""
    import shutil

    root = tmp_path / "cs"
    shutil.copytree(cityscapes[0], root)
    city = next((root / "leftImg8bit" / "train").iterdir())
    for name in ("preview.png", "preview2.png"):
        cv2.imwrite(str(city / name), np.zeros((H, W, 3), np.uint8))
        with pytest.raises(dl.DataError, match=f"(?s)have no partner.*image without a mask: \\S*{name}"):
            dl.SegmentationData.from_folder(root)
    kinds = {(Path(p.path).name, p.kind) for p in dl.check(root, progress=False).problems}
    assert {("preview.png", "unpaired_image"), ("preview2.png", "unpaired_image")} <= kinds


def test_vocs_train_aug_split_reads_sbds_masks(tmp_path, voc, backend):
    """DeepLab's and mmsegmentation's VOC setup adds SBD's masks (grey ids) in SegmentationClassAug and
    lists the 10582 training samples in train_aug.txt, some in two columns of paths: its samples were all
    "missing". The split reads the mask folder that holds its masks, in their form (voc-ids)."""
    import shutil

    root = tmp_path / "VOCdevkit"
    shutil.copytree(voc[0], root)
    base = root / "VOC2012"
    (base / "SegmentationClassAug").mkdir()
    truth = {}
    rng = np.random.default_rng(9)
    for image in sorted((base / "JPEGImages").glob("*.jpg")):  # every image: those of SegmentationClass too
        ids = blocks(rng, np.arange(21)).astype(np.uint8)
        ids[::5, :] = 255
        cv2.imwrite(str(base / "SegmentationClassAug" / f"{image.stem}.png"), ids)
        truth[image.name] = ids
    names = sorted(truth)
    (base / "ImageSets" / "Segmentation" / "train_aug.txt").write_text(
        f"{Path(names[0]).stem}\n" + "".join(f"/JPEGImages/{n} /SegmentationClassAug/{Path(n).stem}.png\n"
                                             for n in names[1:]))
    data = dl.SegmentationData.from_folder(root, split="train_aug")
    assert len(data) == len(names) and data.classes.catalogue == "voc-ids"
    assert all(Path(m).parent.name == "SegmentationClassAug" for m in data.masks)
    assert dl.SegmentationData.from_folder(root, split="train").classes.catalogue == "voc"  # VOC's own, as shipped
    batches = one_epoch(backend, data, batch_size=1, image_size=(H, W), crop="center", shuffle=False,
                        label_mode="int")
    for image, (_, labels) in zip(data.images, batches):
        np.testing.assert_array_equal(labels[0], truth[Path(image).name], err_msg=f"{backend}: {image}")


def test_a_prepared_split_answers_to_the_common_name_of_its_split(tmp_path):
    """prepare --split val on images/val2017 records 'val2017'; from_folder(OUT, split='val') was refused."""
    from daliloader.preparation import prepare

    id_tree(tmp_path / "own", [0, 1], n=2, split="val2017")
    data = dl.SegmentationData.from_folder(tmp_path / "own", split="val", classes=2)
    prepare(data, tmp_path / "out", progress=False, source={"split": "val2017"})
    assert len(dl.SegmentationData.from_folder(tmp_path / "out", split="val")) == 2
    with pytest.raises(dl.DataError, match="prepared copy of split 'val2017'.*drop split='train'"):
        dl.SegmentationData.from_folder(tmp_path / "out", split="train")


def test_a_class_count_spares_the_ignore_values_and_weighs_the_masks_channel(tmp_path):
    """The check of a class count against the masks: 16-bit id masks whose void is 65535 load with
    classes=4 (65535 is the 16-bit ignore value, as the ids read from masks take it; it was refused, asking
    for classes=65536, which no map takes); ids in a colour mask's channel (mask_channel) are weighed too
    (they loaded as ignored); scattered ids (a void value) are not told to become classes by a count."""
    sixteen = tmp_path / "sixteen"
    id_tree(sixteen, [0, 1, 2, 3, 65535], depth=16)
    assert dl.SegmentationData.from_folder(sixteen, classes=4).classes.num_classes == 4
    scattered = tmp_path / "scattered"
    id_tree(scattered, [0, 1, 2, 254])
    with pytest.raises(dl.DataError, match=r"hold id 254 .*If they are void, pass a class map that ignores them"):
        dl.SegmentationData.from_folder(scattered, classes=3)
    channel = tmp_path / "channel"
    for split in ("images", "masks"):
        (channel / split).mkdir(parents=True)
    rng = np.random.default_rng(5)
    for i in range(2):
        cv2.imwrite(str(channel / "images" / f"{i}.png"), photo(rng))
        ids = blocks(rng, np.arange(6)).astype(np.uint8)
        cv2.imwrite(str(channel / "masks" / f"{i}.png"), np.stack([np.zeros_like(ids), ids // 2, ids], -1))  # BGR
    with pytest.raises(dl.DataError, match="classes=3 reads ids 0..2 .* hold ids 3"):
        dl.SegmentationData.from_folder(channel, classes=3, mask_channel=0)
    assert dl.SegmentationData.from_folder(channel, classes=6, mask_channel=0).classes.num_classes == 6
