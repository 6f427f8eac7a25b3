"""The prepared format's reading side: the manifest checked key by key (a damaged one is named by verify
and every loader, never a traceback), format version 2 copies read through one migration into version
3's shape (files where they are), versions it cannot migrate refused."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from copies import as_version_2, colour_dataset, copy_of, dataset

import daliloader as dl
from daliloader.cli import main as cli
from daliloader.errors import DataError
from daliloader.manifest import (
    PACKS,
    PACKS_FOLDER,
    READABLE,
    VERSION,
    load_manifest,
    migrate_v2,
    read_manifest,
)
from daliloader.preparation import MANIFEST, prepare, verify


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A copy (format version 3) of six colour-mask pairs, in packs of 4."""
    out = tmp_path_factory.mktemp("prepared") / "out"
    prepare(colour_dataset(tmp_path_factory.mktemp("colour")), out, pack_size=4, progress=False)
    return out


@pytest.fixture(scope="module")
def version_2(prepared, tmp_path_factory) -> Path:
    """The same copy as format version 2 wrote it: packs in shards/, under "shards"."""
    old = copy_of(prepared, tmp_path_factory.mktemp("v2") / "old")
    as_version_2(old)
    return old


# ---------------------------------------------------------------- a damaged copy: reports, never tracebacks
def damaged_manifests(manifest: dict) -> dict:
    """Manifests as a damaged disk, a cut-short copy or a careless edit leave them: (text, what is named)."""
    def without(*keys):
        m = json.loads(json.dumps(manifest))
        entry = m
        for key in keys[:-1]:
            entry = entry[key]
        del entry[keys[-1]]
        return json.dumps(m)

    text = json.dumps(manifest, indent=1)
    return {"cut short": (text[:len(text) // 2], "not valid JSON .* where the file ends: cut short"),
            "not JSON": ("\x00\x01garbage", "not valid JSON"),
            "no pairs": (without("pairs"), "'pairs' is missing or not a list"),
            "no class names": (without("classes", "names"), "classes 'names' is missing"),
            "no pack list": (without("packs", "tars"), "'packs' 'tars' is missing"),
            "no pack size": (without("packs", "samples_per_pack"), "'packs' 'samples_per_pack' is missing"),
            "pack size 0": (json.dumps({**manifest, "packs": {**manifest["packs"], "samples_per_pack": 0}}),
                            "'packs' lists 2 tars for 6 pairs of 0 per pack"),
            "another pack size": (json.dumps({**manifest, "packs": {**manifest["packs"], "samples_per_pack": 2}}),
                                  "'packs' lists 2 tars for 6 pairs of 2 per pack"),
            "pairs of numbers": (json.dumps({**manifest, "pairs": [[1, 2]] * len(manifest["pairs"])}),
                                 "'pairs' holds entries of the wrong type"),
            "fewer sources": (json.dumps({**manifest, "source": {**manifest["source"], "masks": []}}),
                              "source 'masks' lists 0 entries for 6 pairs")}


@pytest.mark.parametrize("damage", ["cut short", "not JSON", "no pairs", "no class names", "no pack list",
                                    "no pack size", "pack size 0", "another pack size", "pairs of numbers",
                                    "fewer sources"])
def test_a_damaged_manifest_is_named_by_verify_and_every_loader(prepared, tmp_path, damage, capsys):
    copy = copy_of(prepared, tmp_path / "copy")
    text, why = damaged_manifests(json.loads((copy / MANIFEST).read_text()))[damage]
    (copy / MANIFEST).write_text(text)
    pattern = f"{copy / MANIFEST}: {why}.*the manifest is damaged; prepare the copy again"
    for attempt in (lambda: verify(copy, progress=False), lambda: dl.SegmentationData.from_prepared(copy),
                    lambda: dl.SegmentationData.from_prepared(copy, packs=True),
                    lambda: dl.SegmentationData.from_folder(copy), lambda: dl.check(copy)):
        with pytest.raises(DataError, match=pattern):
            attempt()
    assert cli(["verify", str(copy), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"daliloader verify: error: {copy / MANIFEST}: ") and err.count("\n") == 1


def test_a_damaged_version_2_manifest_says_how_it_was_read(version_2, tmp_path):
    copy = copy_of(version_2, tmp_path / "copy")
    manifest = json.loads((copy / MANIFEST).read_text())
    del manifest["shards"]["tars"]
    (copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"'packs' 'tars' is missing or not a list \(format version 2, read as version "
                                        r"3: its 'shards' is 'packs'\): the manifest is damaged"):
        load_manifest(copy)


def test_a_copy_whose_gpu_masks_were_left_out_loads(tmp_path):
    """Masks over nvCOMP's limit leave the GPU form out, with the reason in the manifest: the copy loads
    without it (the loaders then read the PNG masks)."""
    out = tmp_path / "out"
    prepare(dataset(tmp_path / "d", 3, 12), out, progress=False)
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["masks"]["gpu"] = {"left_out": "3 masks are over nvCOMP's 16 MiB"}
    (out / MANIFEST).write_text(json.dumps(manifest))
    copy = dl.SegmentationData.from_prepared(out)
    assert len(copy) == 3 and copy.gpu_masks is None
    masks = load_manifest(out).masks
    assert masks.gpu_files is None and masks.gpu_left_out == "3 masks are over nvCOMP's 16 MiB"
    (out / MANIFEST).write_text(json.dumps({**manifest, "masks": {**manifest["masks"], "gpu": None}}))
    masks = load_manifest(out).masks
    assert masks.gpu_files is None and masks.gpu_left_out is None


# ---------------------------------------------------------------- format versions
def test_version_2_is_migrated_into_version_3s_shape_and_nothing_else_changes():
    v2 = {"format": "daliloader-prepared", "version": 2, "daliloader": "0.1.0", "created": "c", "seconds": 1.0,
          "source": {"images": ["/a/1.jpg"], "masks": ["/a/1_L.png"], "made_by": "me"}, "classes": {"names": []},
          "masks": {"gpu": None}, "images": {"reencoded": 0}, "pairs": [["images/1.jpg", "masks/1.png"]],
          "shards": {"format": "webdataset", "samples_per_shard": 4, "tars": ["shards/00000.tar"],
                     "indexes": ["shards/00000.idx"], "image_exts": ["jpg"], "mask_ext": "labels.png",
                     "index_ext": "index", "gpu_mask_ext": None}}
    before = json.loads(json.dumps(v2))
    v3 = migrate_v2(v2, "/copies/old")
    assert v2 == before  # left as it was
    assert list(v3) == [k if k != "shards" else "packs" for k in v2]  # the key where it was
    assert v3["version"] == VERSION == 3 and PACKS == "packs" and PACKS_FOLDER == "packs" and READABLE == (2, 3)
    assert v3["packs"] == {"format": "webdataset", "samples_per_pack": 4, "tars": ["shards/00000.tar"],
                           "indexes": ["shards/00000.idx"], "image_exts": ["jpg"], "mask_ext": "labels.png",
                           "index_ext": "index", "gpu_mask_ext": None}  # the files stay in shards/
    assert {k: v for k, v in v3.items() if k not in ("version", "packs")} == \
        {k: v for k, v in v2.items() if k not in ("version", "shards")}
    assert migrate_v2({**v2, "shards": None}, "/x")["packs"] is None
    with pytest.raises(ValueError, match="not version 3"):
        migrate_v2(v3, "/x")


def test_relative_sources_of_early_version_2_copies_are_found_where_verify_found_them(tmp_path, monkeypatch):
    """Version 2 copies made before sources were recorded as absolute paths hold them as given to prepare:
    the migration looks for them from the current folder, then beside the copy (as verify did)."""
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "a.jpg").touch()
    (tmp_path / "b_L.png").touch()
    monkeypatch.chdir(tmp_path / "here")
    v2 = {"version": 2, "source": {"images": ["a.jpg", "gone.jpg", "/abs/c.jpg"], "masks": ["b_L.png", "x", "/d.png"]}}
    source = migrate_v2(v2, tmp_path / "copy")["source"]
    assert source == {"images": [str(tmp_path / "here" / "a.jpg"), "gone.jpg", "/abs/c.jpg"],
                      "masks": [str(tmp_path / "b_L.png"), "x", "/d.png"]}
    records = {"version": 2, "source": {"images": ["r-0"], "masks": ["r-0"], "records": [["/f", 0, 0, 1]]}}
    assert migrate_v2(records, tmp_path)["source"] == records["source"]  # records name no files


def test_a_version_2_copy_loads_packed_and_unpacked_and_verifies(prepared, version_2):
    assert sorted(p.name for p in version_2.iterdir()) == ["images", "manifest.json", "masks", "masks_lz4", "shards"]
    manifest = load_manifest(version_2)
    assert manifest.version == 3 and manifest.packs.samples_per_pack == 4
    assert manifest.packs.tars == ("shards/00000.tar", "shards/00001.tar")
    files, new = dl.SegmentationData.from_prepared(version_2), dl.SegmentationData.from_prepared(prepared)
    assert len(files) == len(new) == 6 and files.classes.names == new.classes.names
    assert [Path(p).relative_to(version_2) for p in files.masks] == [Path(p).relative_to(prepared) for p in new.masks]
    packed = dl.SegmentationData.from_prepared(version_2, packs=True)
    assert packed.packs.tars == tuple(str(version_2 / "shards" / f"0000{p}.tar") for p in range(2))
    assert packed.packs.gpu_mask_ext == "labels.lz4"
    assert len(dl.SegmentationData.from_folder(version_2)) == 6
    report = verify(version_2, progress=False)
    assert report.ok and report.pack_members_checked == 24 and report.indexes_checked == 2, str(report)


def test_a_version_2_copy_reads_on_a_dali_backend_as_the_new_one(prepared, version_2):
    from conftest import one_epoch

    kw = dict(batch_size=3, image_size=(32, 48), crop="center", label_mode="int", shuffle=False)
    for packs in (False, True):
        old = one_epoch("dali-cpu", dl.SegmentationData.from_prepared(version_2, packs=packs), **kw)
        new = one_epoch("dali-cpu", dl.SegmentationData.from_prepared(prepared, packs=packs), **kw)
        assert len(old) == len(new) == 2
        for a, b in zip(old, new, strict=True):
            for x, y in zip(a, b, strict=True):
                assert (x == y).all()


@pytest.mark.parametrize("version", [1, 4, "2", None])
def test_versions_it_cannot_migrate_are_refused(prepared, tmp_path, version):
    old = tmp_path / "old"
    old.mkdir()
    (old / MANIFEST).write_text(json.dumps({**json.loads((prepared / MANIFEST).read_text()), "version": version}))
    with pytest.raises(DataError, match=f"{old / MANIFEST}: version {version} of the prepared format; this daliloader "
                                        "reads versions 2 to 3: run `daliloader prepare DATA NEW_OUT` again"):
        dl.SegmentationData.from_prepared(old)
    (old / MANIFEST).write_text(json.dumps({"version": 3}))
    with pytest.raises(DataError, match="not a daliloader-prepared manifest"):
        read_manifest(old / MANIFEST)


def test_a_missing_manifest_or_an_unreadable_one_is_named(tmp_path):
    with pytest.raises(DataError, match=f"{tmp_path} is not a prepared dataset: {MANIFEST} is missing"):
        load_manifest(tmp_path)
    (tmp_path / MANIFEST).mkdir()
    with pytest.raises(DataError, match=f"cannot read {tmp_path / MANIFEST}"):
        read_manifest(tmp_path / MANIFEST)
    shutil.rmtree(tmp_path / MANIFEST)
    (tmp_path / MANIFEST).write_bytes(b"\xff\xfe{}")
    with pytest.raises(DataError, match=f"{tmp_path / MANIFEST}: it is not text: the manifest is damaged"):
        read_manifest(tmp_path / MANIFEST)
    assert os.path.exists(tmp_path / MANIFEST)


@pytest.mark.parametrize("end", ['{"a": "some/pa', '{"a": [1, 2', '{"a": tr', '{"a": nul', '{"a": 1}  \n'])
def test_a_manifest_cut_anywhere_is_called_cut_short(tmp_path, end):
    """Where the cut falls (inside a string, a number, a literal) decided whether the message said "cut
    short": a string cut off is reported where it starts. Each says so; a whole file is read."""
    from daliloader.manifest import _parse

    path = tmp_path / "manifest.json"
    path.write_text(end)
    if end.strip().endswith("}"):
        assert _parse(path) == {"a": 1}
        return
    with pytest.raises(dl.DataError, match="where the file ends: cut short"):
        _parse(path)
