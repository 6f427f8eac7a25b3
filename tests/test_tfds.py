"""TFDS folders as TFDS's own builders prepare them (tests/tfds_trees.py), against ``tfds.load`` itself.

What a TensorFlow user expects of ``from_tfds`` where ``tfds.load`` reads the same folder: the same
records for a split expression (``"train[:10%]+test"``), in the same order; TFDS's segmentation datasets
with their published class tables (scene_parse150's colour annotations included); the command line taking
TFDS names; and malformed metadata refused with the file and what is wrong, quickly.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import BACKENDS, one_epoch

import daliloader as dl
from daliloader import layouts, tfds_folder, tfrecord

tf = pytest.importorskip("tensorflow")
tfds = pytest.importorskip("tensorflow_datasets")
import tfds_trees  # noqa: E402  (after the skips: it builds with TFDS)

PETS = "oxford_iiit_pet"


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    """oxford_iiit_pet by TFDS's builder: train 80 records and test 70, each in 4 shards."""
    return tfds_trees.many_pets(tmp_path_factory.mktemp("pets"))


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """scene_parse150 by TFDS's builder (train 3, test 2): RGB annotations, red the ADE20K class."""
    return tfds_trees.scene_parse(tmp_path_factory.mktemp("scenes"))


@pytest.fixture(scope="module")
def city(tmp_path_factory):
    """cityscapes/semantic_segmentation by TFDS's builder (train 3, validation 2)."""
    return tfds_trees.cityscapes(tmp_path_factory.mktemp("city"))


def tfds_names(data_dir: Path, split: str, name: str = PETS) -> list[str]:
    """The file names of the examples ``tfds.load(split=split, shuffle_files=False)`` yields, in its order."""
    skip = tfds.decode.SkipDecoding()
    ds = tfds.load(name, split=split, data_dir=str(data_dir), shuffle_files=False,
                   decoders={"image": skip, "segmentation_mask": skip})
    return [example["file_name"].decode() for example in tfds.as_numpy(ds)]


def eval_labels(backend: str, data: dl.SegmentationData) -> np.ndarray:
    """The labels of an evaluation epoch, in the data's order, the padding left out."""
    batches = one_epoch(backend, data, tf=True, batch_size=4, training=False, label_mode="int")
    labels = np.concatenate([b[1] for b in batches])
    weights = np.concatenate([b[2] for b in batches])
    return labels[weights.reshape(len(weights), -1).max(axis=1) > 0]


# ---------------------------------------------------------------- scene_parse150 and cityscapes
@pytest.mark.parametrize("backend", BACKENDS)
def test_scene_parse150_loads_with_no_arguments_as_the_red_channel_of_its_instance_categories(scenes, backend):
    """scene_parse150's annotation is an RGB PNG (red the instance category, green the instance): it loads
    as is, with ADE20K's 100 instance categories (0 none, ignored; 1-100 -> 0-99) on the red channel, equal
    to TFDS's own decode."""
    data_dir, truth = scenes
    data = dl.SegmentationData.from_tfds("scene_parse150", "train", data_dir=data_dir)
    assert data.records == tfrecord.Records("image", "annotation") and data.mask_channel == 0
    assert data.classes.catalogue == "ade20k-instances" and data.classes.num_classes == 100
    assert data.classes.names[:4] == ("bed", "windowpane", "cabinet", "person")
    annotations = [ex["annotation"] for ex in tfds.as_numpy(tfds.load("scene_parse150", split="train",
                                                                      data_dir=str(data_dir), shuffle_files=False))]
    expected = [np.where(a[..., 0] == 0, 255, a[..., 0].astype(np.int64) - 1) for a in annotations]
    assert len(expected) == len(truth["train"]) == len(data)
    assert all(any(np.array_equal(e, t) for t in truth["train"].values()) for e in expected)
    for got, want in zip(eval_labels(backend, data), expected):
        np.testing.assert_array_equal(got, want)
    folder = dl.SegmentationData.from_folder(data_dir / "scene_parse150", "test")
    assert folder.mask_channel == 0 and folder.classes.catalogue == "ade20k-instances" and len(folder) == 2


def test_a_colour_mask_is_taken_only_where_published_or_with_mask_channel(scenes, tmp_path):
    """An Image of three channels named as a mask is the mask of scene_parse150 (its published record);
    in another dataset it is taken where mask_channel= says which channel holds the class."""
    data_dir, _ = scenes
    other = tmp_path / "my_scenes" / "1.0.0"
    shutil.copytree(data_dir / "scene_parse150" / "1.0.0", other)
    for f in other.glob("scene_parse150-*"):
        f.rename(other / f.name.replace("scene_parse150", "my_scenes"))
    info = json.loads((other / "dataset_info.json").read_text())
    (other / "dataset_info.json").write_text(json.dumps({**info, "name": "my_scenes"}))
    with pytest.raises(dl.DataError, match=r"holds no image and segmentation mask.*annotation \(Image, 3 channel.*"
                                           r"mask_channel="):
        dl.SegmentationData.from_tfds(other)
    data = dl.SegmentationData.from_tfds(other, classes="ade20k", mask_channel=0)
    assert data.records == tfrecord.Records("image", "annotation") and data.mask_channel == 0 and len(data) == 3
    found = layouts.find(other, mask_channel=1)
    assert found.records == tfrecord.Records("image", "annotation") and found.mask_channel == 1
    green = dl.SegmentationData.from_tfds(data_dir / "scene_parse150", classes=40, mask_channel=1)
    assert green.mask_channel == 1 and green.classes.mask_channel == 1  # the instances, where asked for


@pytest.mark.parametrize("backend", BACKENDS)
def test_tfds_cityscapes_loads_its_label_ids_as_the_19_train_ids(city, backend):
    """TFDS's cityscapes (config semantic_segmentation): image_left and segmentation_label, gtFine's
    labelIds, read with the labelIds -> trainIds table."""
    data_dir, truth = city
    data = dl.SegmentationData.from_tfds("cityscapes/semantic_segmentation", "validation", data_dir=data_dir)
    assert data.records == tfrecord.Records("image_left", "segmentation_label") and data.mask_channel is None
    assert data.classes.num_classes == 19 and len(data) == 2
    for part, got in zip(data.images, eval_labels(backend, data)):
        np.testing.assert_array_equal(got, truth[part.name])
    assert len(dl.SegmentationData.from_tfds("cityscapes/semantic_segmentation:1.0.0", data_dir=data_dir)) == 3


def test_check_reads_scene_parse150s_red_channel_too(scenes, capsys):
    """`daliloader check` (and dl.check on the folder) reads the annotations as from_tfds does: the class in
    the red channel, no problem. (Needs checks.check to pass the layout's mask_channel to the class map.)"""
    from daliloader.cli import main as cli

    data_dir, _ = scenes
    assert dl.check(data_dir / "scene_parse150").ok
    assert cli(["check", "scene_parse150", "--data-dir", str(data_dir), "--quiet"]) == 0, capsys.readouterr().out


# ---------------------------------------------------------------- split expressions and order
EXPRESSIONS = ["train", "train[:10%]", "train[10:20]", "test[-5:]", "train+test", "train[:50%]+test[:10]",
               "test[:15%]", "test[33%:67%]", "test[:-5%]", "train[1shard]", "train[:2shard]+test[-1shard:]",
               "all", "test + train[75:]", "train[-0:]", "test[1_0:2_0]"]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_a_split_expression_gives_tfds_loads_records_in_its_order(pets, expression):
    """The records of tfds.load(split=expression, shuffle_files=False), in its order: TFDS's grammar, its
    rounding of percents (to the closest record, halves to even: test[:15%] of 70 is 10) and its
    interleave of the shards (16 files at once, 16 records of each in turn)."""
    data_dir, _ = pets
    data = dl.SegmentationData.from_tfds(PETS, expression, data_dir=data_dir)
    assert [p.name for p in data.images] == tfds_names(data_dir, expression)
    assert [p.name for p in data.masks] == [p.name for p in data.images]
    folder = dl.SegmentationData.from_folder(data_dir / PETS, expression)
    assert folder.images == data.images


def test_the_order_is_tfds_loads_interleave_not_the_files_order(pets):
    """4 shards of 20 records: tfds.load yields 16 of the first, 16 of the second, ... then the rest; the
    same order on every backend's evaluation."""
    data_dir, truth = pets
    data = dl.SegmentationData.from_tfds(PETS, "train", data_dir=data_dir)
    files = sorted({p.file for p in data.images})
    by_file = [(files.index(p.file), p.record) for p in data.images]
    assert by_file != sorted(by_file) and len(files) == 4
    assert by_file[:17] == [(0, r) for r in range(16)] + [(1, 0)]
    assert tfds_folder.read_order([tfds_folder.ShardRead(0, 0, 20), tfds_folder.ShardRead(1, 2, 3)], 16, 2) == [
        (0, 0), (0, 1), (1, 2), (1, 3), (0, 2), (0, 3), (1, 4)] + [(0, r) for r in range(4, 20)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_evaluates_in_tfds_loads_order_across_shards_and_splits(pets, backend):
    data_dir, truth = pets
    data = dl.SegmentationData.from_tfds(PETS, "train[:50%]+test[:10]", data_dir=data_dir)
    names = tfds_names(data_dir, "train[:50%]+test[:10]")
    for name, got in zip(names, eval_labels(backend, data), strict=True):
        np.testing.assert_array_equal(got, truth[name] - 1)


def test_shards_read_one_after_the_other_where_tfds_disables_shuffling(pets, tmp_path):
    data_dir, _ = pets
    copy = tmp_path / PETS / "4.0.0"
    shutil.copytree(data_dir / PETS / "4.0.0", copy, ignore=shutil.ignore_patterns(".daliloader-index"))
    info = json.loads((copy / "dataset_info.json").read_text())
    (copy / "dataset_info.json").write_text(json.dumps({**info, "disableShuffling": True}))
    builder = tfds.builder_from_directory(str(copy))
    skip = tfds.decode.SkipDecoding()
    want = [ex["file_name"].decode() for ex in tfds.as_numpy(builder.as_dataset(
        split="train[5:60]", shuffle_files=False, decoders={"image": skip, "segmentation_mask": skip}))]
    data = dl.SegmentationData.from_tfds(copy, "train[5:60]")
    assert [p.name for p in data.images] == want
    assert [(p.file, p.record) for p in data.images] == sorted((p.file, p.record) for p in data.images)


def test_a_damaged_record_counts_only_where_the_expression_reads_up_to_it(pets, tmp_path):
    data_dir, _ = pets
    copy = tmp_path / PETS / "4.0.0"
    shutil.copytree(data_dir / PETS / "4.0.0", copy, ignore=shutil.ignore_patterns(".daliloader-index"))
    shard = copy / f"{PETS}-train.tfrecord-00000-of-00004"
    found = tfrecord.scan(str(shard))
    damaged = bytearray(shard.read_bytes())
    damaged[found.offsets[18] + 40] ^= 0xFF  # record 18's data fails its CRC
    shard.write_bytes(bytes(damaged))
    assert len(dl.SegmentationData.from_tfds(copy, "train[:10]")) == 10  # tfds.load reads records 0-9 only
    with pytest.raises(dl.DataError, match=f"{shard}: record 18 .* fails its CRC"):
        dl.SegmentationData.from_tfds(copy, "train[:20]")
    report = dl.check(copy, split="train[5:25]")
    assert report.pairs == 19 and len(report.problems) == 1 and "[record 18 at byte" in report.problems[0].path


@pytest.mark.parametrize("expression, message", [
    ("train[5]", r"one index picks a shard"),
    ("train[:]", r"no slice TFDS reads"),
    ("train[1:2:3]", r"no slice TFDS reads"),
    ("all[:10%]", r"'all' takes no slice"),
    ("train[1.5:3]", r"'1.5' is no whole number"),
    ("train[:101%]", r"percents lie in \[-100, 100\]"),
    ("train test", r"is no split name"),
    ("train[a:b]", r"no slice TFDS reads"),
    (["train"], r"a split is a string"),
])
def test_an_unsupported_split_form_is_refused_naming_the_grammar_and_subset(pets, expression, message):
    data_dir, _ = pets
    with pytest.raises(dl.DataError, match=f"(?s){message}.*TFDS's split grammar.*data.subset"):
        dl.SegmentationData.from_tfds(PETS, expression, data_dir=data_dir)


@pytest.mark.parametrize("expression, message", [
    ("train[70:90]", r"records \[70:90\] lie beyond split 'train' of 80 records"),
    ("train[20:10]", r"ends \(record 10\) before it starts \(record 20\)"),
    ("train[10:10]", r"selects no record"),
    ("validation[:5]", r"has no split 'validation'; its splits: test, train"),
])
def test_a_slice_tfds_load_refuses_is_refused(pets, expression, message):
    data_dir, _ = pets
    with pytest.raises(dl.DataError, match=message):
        dl.SegmentationData.from_tfds(PETS, expression, data_dir=data_dir)


# ---------------------------------------------------------------- the command line
def test_every_command_takes_a_tfds_name_with_data_dir_or_tfds_data_dir(pets, city, tmp_path, monkeypatch, capsys):
    from daliloader.cli import main as cli

    data_dir, _ = pets
    assert cli(["check", PETS, "--data-dir", str(data_dir), "--split", "test[:10]", "--quiet"]) == 0
    assert "checked 10 pairs" in capsys.readouterr().out
    monkeypatch.setenv("TFDS_DATA_DIR", str(data_dir))
    assert cli(["check", f"{PETS}:4.0.0", "--split", "train[:5]+test[-3:]", "--quiet"]) == 0
    assert "checked 8 pairs" in capsys.readouterr().out
    assert cli(["preview", PETS, "--split", "test[:2]", "-o", str(tmp_path / "p.png"), "--batches", "1",
                "--batch-size", "1", "--image-size", "16"]) == 0
    assert cli(["prepare", PETS, str(tmp_path / "copy"), "--split", "test[:4]", "--quiet"]) == 0
    copy = dl.SegmentationData.from_prepared(tmp_path / "copy")
    assert len(copy) == 4
    assert cli(["bench", PETS, "--split", "test[:2]", "--backends", "dali-cpu", "--batch-size", "1", "--image-size",
                "16", "--seconds", "0.05", "--repeats", "1", "--no-stages"]) == 0
    capsys.readouterr()
    assert cli(["check", "cityscapes/semantic_segmentation:1.0.0", "--data-dir", str(city[0]), "--quiet"]) == 0
    assert "checked 3 pairs" in capsys.readouterr().out


@pytest.mark.parametrize("name, message", [
    (f"{PETS}:3.2.0", r"no version 3.2.0 of TFDS dataset 'oxford_iiit_pet' is prepared under .*; its versions: "
                      r"4.0.0"),
    ("cityscapes/fine:1.0.0", r"TFDS dataset 'cityscapes' under .* has no config 'fine'; its configs: "
                              r"semantic_segmentation"),
    ("voc", r"no TFDS dataset 'voc': no folder of that name exists, and none is prepared under .*\(cityscapes, "
            r"oxford_iiit_pet\)"),
])
def test_the_command_line_refuses_a_name_listing_what_is_prepared(pets, city, tmp_path, name, message, capsys):
    from daliloader.cli import main as cli

    data_dir = tmp_path / "tensorflow_datasets"
    shutil.copytree(pets[0] / PETS, data_dir / PETS, ignore=shutil.ignore_patterns("*.tfrecord-*"))
    shutil.copytree(city[0] / "cityscapes", data_dir / "cityscapes", ignore=shutil.ignore_patterns("*.tfrecord-*"))
    assert cli(["check", name, "--data-dir", str(data_dir)]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_a_path_stays_a_path_unless_data_dir_prepares_that_name(pets, tmp_path, monkeypatch, capsys):
    from daliloader.cli import main as cli

    data_dir, _ = pets
    monkeypatch.chdir(tmp_path)
    (tmp_path / PETS).mkdir()  # a folder of that name here, not a dataset
    assert cli(["check", PETS, "--split", "test[:3]", "--quiet"]) == 2
    assert "unknown dataset layout" in capsys.readouterr().err
    assert cli(["check", PETS, "--data-dir", str(data_dir), "--split", "test[:3]", "--quiet"]) == 0


# ---------------------------------------------------------------- malformed metadata
def copy_of(scenes, tmp_path: Path) -> Path:
    """A copy of scene_parse150's version folder, to damage."""
    copy = tmp_path / "scene_parse150" / "1.0.0"
    shutil.copytree(scenes[0] / "scene_parse150" / "1.0.0", copy, ignore=shutil.ignore_patterns(".daliloader-index"))
    return copy


def edit(path: Path, change) -> None:
    found = json.loads(path.read_text())
    change(found)
    path.write_text(json.dumps(found))


def _features(found):
    return found["featuresDict"]["features"]


def _train(found):
    return next(s for s in found["splits"] if s["name"] == "train")


MALFORMED = [
    ("features.json", lambda f: f.update(featuresDict=[]), r"'featuresDict' is a list \(\[\]\), where an object"),
    ("features.json", lambda f: f["featuresDict"].update(features=[1]), r"'features' is a list"),
    ("features.json", lambda f: _features(f)["image"].update(image="jpeg"),
     r"feature 'image': 'image' is a string \(\"jpeg\"\)"),
    ("features.json", lambda f: _features(f)["image"]["image"]["shape"].update(dimensions=["-1", "x", "3"]),
     r"feature 'image': image dimension 1 is a string \(\"x\"\), not a whole number"),
    ("features.json", lambda f: _features(f)["image"]["image"]["shape"].update(dimensions=[24.5, 40, 3]),
     r"image dimension 0 is a number \(24.5\), not a whole number"),
    ("features.json", lambda f: _features(f).update(image=["Image"]), r"feature 'image': .* is a list"),
    ("dataset_info.json", lambda f: f.update(splits={"train": {}}), r"'splits' is an object.*where a list"),
    ("dataset_info.json", lambda f: f["splits"].append("train"), r"split 2 of 'splits' is a string"),
    ("dataset_info.json", lambda f: _train(f).update(name=["train"]), r"split \d: 'name' is a list"),
    ("dataset_info.json", lambda f: _train(f).update(shardLengths=3), r"split 'train': 'shardLengths' is a number"),
    ("dataset_info.json", lambda f: _train(f).update(shardLengths=["three"]),
     r"split 'train': shard length 0 is a string \(\"three\"\), not a whole number"),
    ("dataset_info.json", lambda f: (_train(f).pop("shardLengths"), _train(f).update(numShards="two")),
     r"split 'train': numShards is a string \(\"two\"\), not a whole number"),
    ("dataset_info.json", lambda f: _train(f).update(filepathTemplate="{DATASET}-{SPLIT}-{FOLD}"),
     r"filepathTemplate '\{DATASET\}-\{SPLIT\}-\{FOLD\}' has the field \{FOLD\}, which TFDS does not fill"),
    ("dataset_info.json", lambda f: _train(f).update(filepathTemplate="{}-{SPLIT}"),
     r"has a positional field \{\}"),
    ("dataset_info.json", lambda f: _train(f).update(filepathTemplate="{0}"), r"has a positional field \{\}"),
    ("dataset_info.json", lambda f: _train(f).update(filepathTemplate="{DATASET"), r"is no file-name template"),
    ("dataset_info.json", lambda f: _train(f).update(filepathTemplate="{DATASET.upper}"),
     r"has the field \{DATASET.upper\}"),
    ("dataset_info.json", lambda f: _train(f).update(filepathTemplate="{DATASET:>200000000}"),
     r"is no file-name template \(a field with a format spec"),
    ("dataset_info.json", lambda f: f.update(name=["scene_parse150"]), r"'name' is a list"),
    ("dataset_info.json", lambda f: f.update(disableShuffling="yes"), r"'disableShuffling' is a string"),
    ("dataset_info.json", lambda f: _train(f).update(shardLengths=["100000000000"]),
     r"gives .*scene_parse150-train.tfrecord-00000-of-00001 100000000000 records, more than its \d+ bytes can hold"),
    ("dataset_info.json", lambda f: _train(f).update(shardLengths=["2"]),
     r"scene_parse150-train.tfrecord-00000-of-00001 holds 3 records, but .*dataset_info.json gives it 2"),
]


@pytest.mark.parametrize("file, change, message", MALFORMED, ids=[m for _, _, m in MALFORMED])
def test_malformed_metadata_is_a_data_error_naming_the_file_and_what_is_wrong(scenes, tmp_path, file, change,
                                                                              message):
    copy = copy_of(scenes, tmp_path)
    edit(copy / file, change)
    with pytest.raises(dl.DataError, match=f"{copy / file}.*{message}" if "holds 3" not in message else message):
        dl.SegmentationData.from_tfds(copy, "train")
    with pytest.raises(dl.DataError):
        dl.check(copy, split="train")


@pytest.mark.parametrize("shards", [{"numShards": "100000000"}, {"shardLengths": ["1"] * 200_000}])
def test_an_absurd_shard_count_is_refused_at_once(scenes, tmp_path, shards):
    """numShards 100000000 once built that many file names (10+ minutes, 14 GB): the count is checked
    against the files in the folder first."""
    copy = copy_of(scenes, tmp_path)
    edit(copy / "dataset_info.json", lambda f: (_train(f).pop("shardLengths"), _train(f).update(shards)))
    start = time.perf_counter()
    with pytest.raises(dl.DataError, match=r"dataset_info.json is damaged: split 'train': it gives (100000000|200000) "
                                           r"shards, but .* holds only \d+ files"):
        dl.SegmentationData.from_tfds(copy, "train")
    assert time.perf_counter() - start < 5



def test_a_deeply_nested_metadata_file_is_named_not_a_recursion_error(scenes, tmp_path):
    copy = copy_of(scenes, tmp_path)
    (copy / "features.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(dl.DataError, match=r"features.json is damaged: not valid JSON \(RecursionError"):
        dl.SegmentationData.from_tfds(copy, "train")


def test_another_form_of_the_table_a_layout_publishes_is_refused_naming_it(scenes, city):
    """scene_parse150's red channel holds ADE20K's 100 instance categories: the 150-class table (and its
    reduced form) would read them into wrong labels with no error; TFDS's cityscapes holds labelIds."""
    for wrong in ("ade20k", "ade20k-reduced"):
        with pytest.raises(dl.DataError, match=f"classes='{wrong}' on .*scene_parse150.*whose masks hold "
                                               "'ade20k-instances'.*pass classes='ade20k-instances'"):
            dl.SegmentationData.from_tfds("scene_parse150", data_dir=scenes[0], classes=wrong)
        with pytest.raises(dl.DataError, match="whose masks hold 'ade20k-instances'"):
            dl.check(scenes[0] / "scene_parse150", classes=wrong)
    with pytest.raises(dl.DataError, match="classes='cityscapes-trainids' on .*whose masks hold 'cityscapes'"):
        dl.SegmentationData.from_tfds("cityscapes/semantic_segmentation", data_dir=city[0],
                                      classes="cityscapes-trainids")
    assert len(dl.SegmentationData.from_tfds("scene_parse150", data_dir=scenes[0], classes="ade20k-instances")) == 3


def test_a_version_pattern_takes_the_newest_version_it_matches_as_tfds_load_does(pets):
    data_dir, _ = pets
    for pattern in ("4.*.*", "4.0.*", "*.*.*"):
        data = dl.SegmentationData.from_tfds(f"oxford_iiit_pet:{pattern}", "test", data_dir=data_dir)
        assert len(data) == 70
    with pytest.raises(dl.DataError, match=r"no version 5.\*.\* .*its versions: 4.0.0"):
        dl.SegmentationData.from_tfds("oxford_iiit_pet:5.*.*", data_dir=data_dir)
