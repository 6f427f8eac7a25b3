"""daliloader/pairing.py: how the files of an image folder pair with those of a mask folder, seen through
SegmentationData.from_dirs, check and the command line: mask suffixes detected, image suffixes and
subfolders, tails detected where names differ by more (Cityscapes' gtFine), files without a partner listed,
missing and empty folders named; symbolic links followed (a loop read once) and links that lead nowhere
reported; folders that cannot be read reported, not skipped; file names that are no UTF-8.

Dataset layouts (from_folder, which pairs through these): tests/test_layouts.py.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import one_epoch
from copies import dataset

import daliloader as dl
from daliloader.cli import main as cli
from daliloader.errors import DataError


# ---------------------------------------------------------------- pairs by relative folder and stem
def _touch_png(path, value=0, shape=(4, 4, 3)):
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full(shape, value, np.uint8))


@pytest.fixture
def csv_path(tmp_path):
    p = tmp_path / "class_dict.csv"
    p.write_text("name,r,g,b\nA,0,0,0\n")
    return p


@pytest.mark.parametrize("suffix", ["_L", "", "_mask", "_gtFine_labelIds"])
def test_pairs_detect_mask_suffix(tmp_path, csv_path, suffix):
    for stem in ("b", "a", "c"):
        _touch_png(tmp_path / "img" / f"{stem}.png")
        _touch_png(tmp_path / "lab" / f"{stem}{suffix}.png")
    d = dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)
    assert [p.split("/")[-1] for p in d.images] == ["a.png", "b.png", "c.png"]
    assert [p.split("/")[-1] for p in d.masks] == [f"{s}{suffix}.png" for s in "abc"]


def test_pairs_in_subfolders_with_image_suffix(tmp_path):
    """Cityscapes layout: city folders, *_leftImg8bit.png images and *_gtFine_labelIds.png masks."""
    for city, n in (("aachen", 2), ("bonn", 1)):
        for i in range(n):
            _touch_png(tmp_path / "leftImg8bit" / city / f"{city}_{i:06d}_leftImg8bit.png")
            _touch_png(tmp_path / "gtFine" / city / f"{city}_{i:06d}_gtFine_labelIds.png", shape=(4, 4))
    d = dl.SegmentationData.from_dirs(tmp_path / "leftImg8bit", tmp_path / "gtFine", dl.ClassMap.cityscapes(),
                                      image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds")
    assert len(d) == 3 and d.classes.kind == "id"
    assert all(m.replace("gtFine_labelIds", "leftImg8bit").replace("gtFine", "leftImg8bit") == i
               for i, m in zip(d.images, d.masks))


def test_unpaired_files_are_listed(tmp_path, csv_path):
    for stem in ("a", "b", "c"):
        _touch_png(tmp_path / "img" / f"{stem}.jpg")
    _touch_png(tmp_path / "lab" / "a_L.png")
    _touch_png(tmp_path / "lab" / "b_L.png")
    _touch_png(tmp_path / "lab" / "zzz_L.png")
    with pytest.raises(DataError) as e:
        dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)
    msg = str(e.value)
    assert "image without a mask: " in msg and "c.jpg" in msg
    assert "mask without image: " in msg and "zzz_L.png" in msg
    assert "'_L' was detected" in msg


def test_one_jpeg_mask_among_png_masks_is_named(tmp_path, csv_path, capsys):
    """A mask saved as JPEG among PNG masks: its image was "without a mask", and the JPEG never named."""
    for stem in ("a", "b"):
        _touch_png(tmp_path / "img" / f"{stem}.png")
    _touch_png(tmp_path / "lab" / "a.png")
    _touch_png(tmp_path / "lab" / "b.jpg")
    why = f"image without a mask (its mask's name is there as {tmp_path / 'lab' / 'b.jpg'}: a lossy format"
    with pytest.raises(DataError, match=f"{re.escape(why)}.*: {tmp_path / 'img' / 'b.png'}\nMasks cannot be stored in "
                                        "a lossy format: compression changes"):
        dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)
    assert cli(["check", "--images", str(tmp_path / "img"), "--masks", str(tmp_path / "lab"), "--classes",
                str(csv_path), "--quiet"]) == 1
    assert why in capsys.readouterr().out


def test_missing_folders_and_empty(tmp_path, csv_path):
    with pytest.raises(DataError, match="images folder .* does not exist"):
        dl.SegmentationData.from_dirs(tmp_path / "nope", tmp_path, csv_path)
    (tmp_path / "img").mkdir()
    (tmp_path / "lab").mkdir()
    with pytest.raises(DataError, match="no images"):
        dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)


def test_jpeg_masks_are_named_as_lossy(tmp_path, csv_path):
    """A mask folder of JPEGs holds no masks: the message says the JPEGs are there, that compression
    changes the class ids, and what to do."""
    for stem in ("a", "b"):
        _touch_png(tmp_path / "img" / f"{stem}.png")
        _touch_png(tmp_path / "lab" / f"{stem}.jpg")
    with pytest.raises(DataError, match=r"no masks \(.png, .bmp, .tif, .tiff\) found under .*lab, but 2 JPEG/WebP "
                                        r"file\(s\) are there \(.*a.jpg, \.\.\.\)\. .*lossy format: compression "
                                        r"changes the class ids.* Save the masks as PNG"):
        dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)
    (tmp_path / "lab" / "a.jpg").unlink()
    (tmp_path / "lab" / "b.jpg").unlink()
    with pytest.raises(DataError, match=r"no masks \(.png, .bmp, .tif, .tiff\) found under \S*lab$"):
        dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)


# ---------------------------------------------------------------- names that differ by more than a suffix
def test_cityscapes_from_dirs_and_the_cli_with_suffixes(cityscapes, tmp_path, capsys):
    """The explicit recipe: with mask_suffix given, gtFine's other files are not masks."""
    root, truth = cityscapes
    data = dl.SegmentationData.from_dirs(root / "leftImg8bit" / "val", root / "gtFine" / "val",
                                         dl.ClassMap.cityscapes(), mask_suffix="_gtFine_labelIds",
                                         image_suffix="_leftImg8bit")
    assert len(data) == 2
    args = ["--images", str(root / "leftImg8bit" / "val"), "--masks", str(root / "gtFine" / "val"),
            "--mask-suffix", "_gtFine_labelIds", "--image-suffix", "_leftImg8bit", "--classes", "34", "--quiet"]
    assert cli(["check", *args]) == 0, capsys.readouterr().out
    assert cli(["check", str(root), "--mask-suffix", "_x"]) == 2
    assert "--mask-suffix and --image-suffix pair --images with --masks" in capsys.readouterr().err
    assert cli(["check", *args, "--split", "val"]) == 2
    assert "--split picks a split of DATA" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="test labels are not public"):
        shutil_tree = tmp_path / "cs"
        (shutil_tree / "leftImg8bit" / "test").mkdir(parents=True)
        (shutil_tree / "gtFine" / "test").mkdir(parents=True)
        with pytest.raises(dl.DataError, match="no images"):
            dl.SegmentationData.from_folder(shutil_tree, split="test")


def test_two_folders_without_suffixes_pair_by_their_tails_and_take_a_table_by_name(cityscapes, capsys, backend):
    """Issue 27: `check --images leftImg8bit/val --masks gtFine/val` paired nothing (every file unpaired), and
    `--classes cityscapes` was read as a file name: the tails are detected (labelIds among gtFine's files)
    and the catalogue's names are taken wherever a class map is."""
    root, truth = cityscapes
    images, masks = root / "leftImg8bit" / "val", root / "gtFine" / "val"
    assert cli(["check", "--images", str(images), "--masks", str(masks), "--classes", "cityscapes", "--quiet"]) == 0, \
        capsys.readouterr().out
    data = dl.SegmentationData.from_dirs(images, masks, "cityscapes")
    assert all(m.endswith("_gtFine_labelIds.png") for m in data.masks) and len(data) == len(truth["val"])
    _, labels, _ = one_epoch(backend, data, tf=True, batch_size=2, training=False, label_mode="int")[0]
    for image, got in zip(data.images, labels):
        np.testing.assert_array_equal(got, truth["val"][image])


def test_a_class_count_on_masks_named_by_their_table_reads_them_through_it(cityscapes):
    """from_dirs(..., classes=19) on Cityscapes' labelIds read the raw ids 0-18 as the classes (road, id 7,
    as class 7; sky and car as ignored), where from_folder maps them: the masks' name ending says which
    table their ids follow, so a count of that table's classes reads them through it, and another count
    is refused as from_folder refuses it."""
    root, truth = cityscapes
    images, masks = root / "leftImg8bit" / "val", root / "gtFine" / "val"
    data = dl.SegmentationData.from_dirs(images, masks, 19)
    assert data.classes.source == dl.ClassMap.cityscapes().source and data.classes.num_classes == 19
    _, labels, _ = one_epoch("dali-cpu", data, batch_size=2, training=False, label_mode="int")[0]
    for image, got in zip(data.images, labels):
        np.testing.assert_array_equal(got, truth["val"][image])
    with pytest.raises(DataError, match="classes=20 on masks named \\*_gtFine_labelIds: .*would read the raw ids as "
                                        "classes instead, which gives wrong labels. Pass classes='cityscapes'"):
        dl.SegmentationData.from_dirs(images, masks, 20)


@pytest.mark.parametrize("image_ext, mask_ext", [(".jpg", ".png"), (".tif", ".tif")])
def test_images_and_masks_side_by_side_in_one_folder_pair_by_the_mask_suffix(tmp_path, image_ext, mask_ext, capsys):
    """Kaggle's layouts keep a.tif beside a_mask.tif in one folder: from_dirs(folder, folder) took the masks
    for images too, and refused them as images without a mask, even with mask_suffix= given."""
    rng = np.random.default_rng(0)
    labels = {}
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"case_{i}{image_ext}"), rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
        labels[i] = rng.integers(0, 3, (24, 32)).astype(np.uint8)
        cv2.imwrite(str(tmp_path / f"case_{i}_mask{mask_ext}"), labels[i])
    for suffix in (None, "_mask"):
        data = dl.SegmentationData.from_dirs(tmp_path, tmp_path, 3, mask_suffix=suffix)
        assert [Path(m).name for m in data.masks] == [f"case_{i}_mask{mask_ext}" for i in range(3)]
        assert [Path(m).name for m in data.images] == [f"case_{i}{image_ext}" for i in range(3)]
    _, y, _ = one_epoch("dali-cpu", data, batch_size=3, training=False, label_mode="int")[0]
    np.testing.assert_array_equal(y, np.stack(list(labels.values())))
    assert cli(["check", "--images", str(tmp_path), "--masks", str(tmp_path), "--classes", "3", "--quiet"]) == 0, \
        capsys.readouterr().out
    for i in range(3):
        (tmp_path / f"case_{i}_mask{mask_ext}").rename(tmp_path / f"case_{i}_seg_{mask_ext}")
    with pytest.raises(DataError, match="images and masks are both in .*, and no file there carries a mask suffix"):
        dl.SegmentationData.from_dirs(tmp_path, tmp_path, 3)
    with pytest.raises(DataError, match="mask_suffix='' tells no mask from an image"):
        dl.SegmentationData.from_dirs(tmp_path, tmp_path, 3, mask_suffix="")


def test_a_mask_folder_inside_the_image_folder_holds_no_images(tmp_path, monkeypatch):
    """data/ + data/masks/: the masks were listed as images too, each an image without a mask (an outside
    review). Spelled relative or absolute alike."""
    for i in range(2):
        _touch_png(tmp_path / "data" / f"{i}.jpg")
        _touch_png(tmp_path / "data" / "masks" / f"{i}.png", shape=(4, 4))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link").symlink_to(tmp_path / "data")
    for images, masks in ((tmp_path / "data", tmp_path / "data" / "masks"), ("data", "data/masks"),
                          (tmp_path / "data", "data/masks"), ("link", "data/masks"), ("data", "link/masks")):
        data = dl.SegmentationData.from_dirs(images, masks, 3)
        assert [Path(i).name for i in data.images] == ["0.jpg", "1.jpg"], (images, masks)


def _gtfine(tmp_path, endings, image_tail="_leftImg8bit"):
    """Two Cityscapes-named images, and beside each in gtFine one mask file per name ending."""
    for i in range(2):
        _touch_png(tmp_path / "images" / f"aachen_{i:06d}_000019{image_tail}.png")
        for ending in endings:
            _touch_png(tmp_path / "masks" / f"aachen_{i:06d}_000019{ending}.png", shape=(4, 4))
    return tmp_path / "images", tmp_path / "masks"


def test_train_id_masks_pair_beside_instance_ids(tmp_path):
    """gtFine after cityscapesScripts' createTrainIdLabelImgs, its labelIds left out: the labelTrainIds are
    the masks (the instance ids, first by name, were paired as masks without a word)."""
    images, masks = _gtfine(tmp_path, ["_gtFine_color", "_gtFine_instanceIds", "_gtFine_labelTrainIds"])
    data = dl.SegmentationData.from_dirs(images, masks, "cityscapes-trainids")
    assert len(data) == 2 and all(m.endswith("_gtFine_labelTrainIds.png") for m in data.masks)


@pytest.mark.parametrize("endings, named", [
    (["_gtFine_color", "_gtFine_instanceIds", "_gtFine_labelIds", "_gtFine_labelTrainIds"],
     "'_gtFine_labelIds', '_gtFine_labelTrainIds'"),  # which ids: the table differs
    (["_gtFine_color", "_gtFine_instanceIds"], "'_gtFine_color', '_gtFine_instanceIds'"),  # no mask ending known
    (["", "_L"], "'', '_L'"),  # a.png and a_L.png beside a.png's image
])
def test_name_endings_that_pair_alike_are_not_guessed(tmp_path, endings, named):
    """Mask name endings that each pair every image: which files are the masks is asked, with an example
    that pairs them, not guessed (the first by name was taken)."""
    image_tail = "_leftImg8bit" if endings[0] else ""
    images, masks = _gtfine(tmp_path, endings, image_tail)
    python = f"mask_suffix={endings[-1]!r}" + (f", image_suffix={image_tail!r}" if image_tail else "")
    shell = f"--mask-suffix={endings[-1]}" + (f" --image-suffix={image_tail}" if image_tail else "")
    with pytest.raises(DataError, match=f"carry several name endings that each pair 2 images \\({named}\\): say "
                                        f"which files are the masks, for example {python} \\({shell}\\), or name"):
        dl.SegmentationData.from_dirs(images, masks, 34)
    data = dl.SegmentationData.from_dirs(images, masks, None, mask_suffix=endings[-1], image_suffix=image_tail)
    assert all(m.endswith(f"{endings[-1]}.png") for m in data.masks)


@pytest.mark.parametrize("classes, ending", [("cityscapes", "_gtFine_labelIds"),
                                             ("Cityscapes-TrainIds", "_gtFine_labelTrainIds"),
                                             (dl.ClassMap.cityscapes("train"), "_gtFine_labelTrainIds")])
def test_the_table_given_chooses_between_cityscapes_id_forms(tmp_path, classes, ending):
    """gtFine after createTrainIdLabelImgs holds labelIds and labelTrainIds: the published table given says
    which are its masks (before the refusal of ties, labelIds were taken, whatever the table)."""
    images, masks = _gtfine(tmp_path, ["_gtFine_color", "_gtFine_instanceIds", "_gtFine_labelIds",
                                       "_gtFine_labelTrainIds"])
    data = dl.SegmentationData.from_dirs(images, masks, classes)
    assert len(data) == 2 and all(m.endswith(f"{ending}.png") for m in data.masks)


# ---------------------------------------------------------------- a folder is what it looks like
def test_symlinked_subfolders_are_followed_and_broken_links_reported(tmp_path):
    root = tmp_path / "data"
    dataset(root / "part1", 3, 5)
    dataset(tmp_path / "elsewhere", 4, 6)
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    os.rename(root / "part1" / "train", root / "images" / "part1")
    os.rename(root / "part1" / "train_labels", root / "masks" / "part1")
    os.rename(root / "part1" / "class_dict.csv", root / "class_dict.csv")
    (root / "images" / "part2").symlink_to(tmp_path / "elsewhere" / "train")
    (root / "masks" / "part2").symlink_to(tmp_path / "elsewhere" / "train_labels")
    (root / "images" / "loop").symlink_to(root / "images")  # a loop: read once, no hang
    data = dl.SegmentationData.from_folder(root)
    assert len(data) == 7
    (root / "images" / "part1" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    with pytest.raises(dl.DataError) as e:
        dl.SegmentationData.from_folder(root)
    head, line = str(e.value).splitlines()[:2]
    assert head.startswith("1 symbolic link(s) lead nowhere under ") and "no partner" not in str(e.value)
    assert line == f"  broken link: {root / 'images/part1/gone.jpg'} -> {tmp_path / 'nowhere.jpg'}, which does not exist"  # noqa: E501
    report = dl.check(root)
    assert not report.ok and [p.kind for p in report.problems] == ["broken_link"]
    (root / "images" / "part1" / "gone.jpg").unlink()
    (root / "masks" / "a.png").symlink_to(root / "masks" / "b.png")  # links that lead to each other
    (root / "masks" / "b.png").symlink_to(root / "masks" / "a.png")
    with pytest.raises(dl.DataError, match=r"broken link: .*a\.png -> .*b\.png, a loop of links"):
        dl.SegmentationData.from_dirs(root / "images", root / "masks", root / "class_dict.csv")
    messages = [p.message for p in dl.check(root).problems]
    assert len(messages) == 2 and all("a loop of links that never reaches a file" in m for m in messages)


def test_a_folder_that_cannot_be_read_is_reported_not_skipped(tmp_path, monkeypatch):
    data = dataset(tmp_path / "d", 4, 13)
    hidden = tmp_path / "d" / "train" / "more"
    hidden.mkdir()
    cv2.imwrite(str(hidden / "x.jpg"), np.zeros((48, 64, 3), np.uint8))
    if os.geteuid() == 0:  # root reads every folder: the refusal the OS gives a user, given here
        scandir = os.scandir

        def refuse(path="."):
            if Path(path) == hidden:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return scandir(path)

        monkeypatch.setattr(os, "scandir", refuse)
    else:
        hidden.chmod(0)
    try:
        with pytest.raises(dl.DataError, match=rf"1 folder\(s\) cannot be read .*\n  unreadable folder: {hidden} "
                                               r"\(Permission denied\)"):
            dl.SegmentationData.from_folder(tmp_path / "d")
        report = dl.check(tmp_path / "d")
        assert [(p.kind, p.path) for p in report.problems] == [("unreadable", str(hidden))]
        assert len(data) == report.pairs
    finally:
        hidden.chmod(0o755)


# ---------------------------------------------------------------- file names
def test_a_file_name_that_is_no_utf8_loads_checks_and_prepares(tmp_path, backend):
    """Issue 27: a Latin-1 name (b"caf\\xe9.png"): check said "no problems", then tfdata failed converting it
    to a TensorFlow string, naming no file, and prepare crashed at the copy's file name."""
    import cv2

    root = os.fsencode(tmp_path)
    for folder in (b"images", b"masks"):
        os.makedirs(root + b"/" + folder)
    for name in (b"caf\xe9", b"plain"):  # written by Python: OpenCV's file functions crash on such names
        with open(root + b"/images/" + name + b".png", "wb") as fh:
            fh.write(cv2.imencode(".png", np.full((32, 40, 3), 90, np.uint8))[1].tobytes())
        with open(root + b"/masks/" + name + b".png", "wb") as fh:
            fh.write(cv2.imencode(".png", np.ones((32, 40), np.uint8))[1].tobytes())
    data = dl.SegmentationData.from_dirs(os.fsdecode(root + b"/images"), os.fsdecode(root + b"/masks"), classes=3)
    assert dl.check(data).ok
    batches = one_epoch(backend, data, tf=True, batch_size=2, training=False, label_mode="int")
    assert [b[1].tolist() for b in batches] == [np.ones((2, 32, 40), np.int32).tolist()]
    if backend == "dali-cpu":  # prepare and verify once
        out = tmp_path / "prepared"
        assert cli(["prepare", "--images", data.images[0].rsplit("/", 1)[0], "--masks",
                    data.masks[0].rsplit("/", 1)[0], "--classes", "3", str(out), "--quiet", "--verify"]) == 0
        assert sorted(os.listdir(out / "images")) == ["0000000-caf.png", "0000001-plain.png"]  # UTF-8 names


def test_a_folder_that_cannot_be_read_is_named_not_its_marker(tmp_path, monkeypatch):
    """A mask folder without read permission was reported as '.../.daliloader-incomplete: Permission
    denied' (looking for the marker of an unfinished prepare raised): the folder is named as unreadable
    where it is listed."""
    from daliloader.pairing import INCOMPLETE_MARKER, refuse_incomplete

    real = Path.exists

    def exists(path, *args, **kwargs):
        if path.name == INCOMPLETE_MARKER and path.parent.name == "masks":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    (tmp_path / "masks").mkdir()
    monkeypatch.setattr(Path, "exists", exists)
    refuse_incomplete(tmp_path / "masks")  # no marker known: the listing says what cannot be read


def test_a_suffix_with_its_extension_is_refused_by_name(tmp_path):
    """mask_suffix='.png' (the extension, not the suffix) matched no file: "no masks found" in a folder of
    PNG masks. Now said for what it is."""
    from daliloader.pairing import pair_files

    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.png").write_bytes(b"")
    with pytest.raises(dl.DataError, match=r"mask_suffix='\.png' ends with a file extension: .* '_mask'"):
        pair_files(tmp_path / "images", tmp_path / "masks", mask_suffix=".png")
    with pytest.raises(dl.DataError, match=r"image_suffix='_leftImg8bit\.PNG' ends with a file extension"):
        pair_files(tmp_path / "images", tmp_path / "masks", image_suffix="_leftImg8bit.PNG")
