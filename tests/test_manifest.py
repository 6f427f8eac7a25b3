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
                              "source 'masks' lists 0 entries for 6 pairs"),
            "no images entry": (without("images"), "'images' is missing or not a dict"),
            "seconds as text": (json.dumps({**manifest, "seconds": "1.5"}), "'seconds' is missing or not a number"),
            "no unknown count": (without("masks", "unknown_pixels"), "masks 'unknown_pixels' is missing"),
            "a kind of no map": (json.dumps({**manifest, "classes": {**manifest["classes"], "kind": "palette"}}),
                                 "classes 'kind' is 'palette', none of 'rgb', 'id'"),
            "three keys": (json.dumps({**manifest, "source": {**manifest["source"], "keys": ["a", "b", "c"]}}),
                           "source 'keys' lists 3 features, not the image's and the mask's")}


@pytest.mark.parametrize("damage", ["cut short", "not JSON", "no pairs", "no class names", "no pack list",
                                    "no pack size", "pack size 0", "another pack size", "pairs of numbers",
                                    "fewer sources", "no images entry", "seconds as text", "no unknown count",
                                    "a kind of no map", "three keys"])
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


# ---------------------------------------------------------------- the records: read, written back, as the dicts read
@pytest.fixture(scope="module")
def other_copies(tmp_path_factory) -> dict[str, Path]:
    """Copies of the manifest's other shapes: an id table (with mask_channel), the caller's source keys,
    photos re-encoded, no GPU form; pairs read from a TFRecord file (records and keys), the GPU form
    left out (every mask over the limit)."""
    import cv2
    import numpy as np

    import daliloader.preparation as module
    from daliloader import tfrecord

    root = tmp_path_factory.mktemp("others")
    rng = np.random.default_rng(5)
    for folder in ("images", "masks"):
        (root / folder).mkdir()
    with tfrecord.Writer(root / "pairs.tfrecord") as records:
        for i in range(3):
            cv2.imwrite(str(root / "images" / f"{i}.png"), rng.integers(0, 256, (16, 24, 3), np.uint8))
            cv2.imwrite(str(root / "masks" / f"{i}.png"), rng.choice([0, 1, 7, 9], (16, 24, 3)).astype(np.uint8))
            records.write({"image/encoded": (root / "images" / f"{i}.png").read_bytes(),
                           "image/segmentation/class/encoded": (root / "masks" / f"{i}.png").read_bytes(),
                           "image/filename": f"pair{i}".encode()})
    table = dl.ClassMap.from_ids({0: 0, 1: 1, 7: 2, 9: 255}, ["road", "car", "sky"], ignore_index=255)
    ids = dl.SegmentationData.from_dirs(root / "images", root / "masks", classes=table, mask_channel=1)
    prepare(ids, root / "ids", jpeg_quality=90, gpu_masks=False, progress=False,
            source={"data": "somewhere", "split": "train", "made_by": {"tool": "me", "runs": [1, 2]}})
    records = dl.SegmentationData.from_tfrecord([str(root / "pairs.tfrecord")], classes=table, mask_channel=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "LZ4_MAX_BYTES", 100)
        prepare(records, root / "records", pack_size=2, progress=False)
    return {"ids": root / "ids", "records": root / "records"}


@pytest.mark.parametrize("copy", ["prepared", "ids", "records"])
def test_a_manifest_read_and_written_back_is_the_same_json(prepared, other_copies, copy):
    """Manifest.to_json gives back the file's JSON, byte for byte as prepare writes it (indent 1), the keys
    the caller added to source included, in their place."""
    out = prepared if copy == "prepared" else other_copies[copy]
    text = (out / MANIFEST).read_text()
    manifest = read_manifest(out / MANIFEST)
    assert json.dumps(manifest.to_json(), indent=1) == text
    assert read_manifest(out / MANIFEST) == manifest  # (one manifest, whichever reading)
    if copy == "ids":
        assert manifest.source.extra == {"data": "somewhere", "split": "train",
                                         "made_by": {"tool": "me", "runs": [1, 2]}}
        assert (manifest.source.data, manifest.source.split) == ("somewhere", "train")
        assert list(json.loads(text)["source"])[:3] == ["data", "split", "made_by"]


def _plain(value):
    """A record's value as JSON holds it: records as objects, tuples as lists, enums as their values,
    keys as strings."""
    import dataclasses
    import enum

    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


#: What the code read of the manifest as a dict (``m``, of version 3's shape), beside what it reads now
#: of the records (``r``).
FORMER_READS = {
    'm["format"], m["version"]': (lambda m: [m["format"], m["version"]], lambda r: [r.format, r.version]),
    'm["daliloader"], m["created"], m["seconds"]': (lambda m: [m["daliloader"], m["created"], m["seconds"]],
                                                    lambda r: [r.daliloader, r.created, r.seconds]),
    'm["pairs"]': (lambda m: m["pairs"], lambda r: r.pairs),
    'm["source"]["images"], ["masks"]': (lambda m: [m["source"]["images"], m["source"]["masks"]],
                                         lambda r: [r.source.images, r.source.masks]),
    '"records" in m["source"], ["records"], ["keys"]': (
        lambda m: ["records" in m["source"], m["source"].get("records"), m["source"].get("keys")],
        lambda r: [r.source.records is not None, r.source.records, r.source.keys]),
    'm["source"].get("stamps", {})': (lambda m: m["source"].get("stamps", {}), lambda r: r.source.stamps or {}),
    'm["source"].get("split"), .get("data")': (lambda m: [m["source"].get("split"), m["source"].get("data")],
                                               lambda r: [r.source.split, r.source.data]),
    'm["classes"]': (lambda m: m["classes"], lambda r: r.classes.to_json()),
    'm["classes"][...] each': (
        lambda m: [m["classes"][k] for k in ("names", "ignore_index", "kind", "source")] +
        [m["classes"].get(k) for k in ("colors", "ids", "mask_channel")],
        lambda r: [r.classes.names, r.classes.ignore_index, r.classes.kind, r.classes.source, r.classes.colors,
                   r.classes.ids, r.classes.mask_channel]),
    'm["masks"][...] each': (
        lambda m: [m["masks"][k] for k in ("encoding", "how", "unknown_pixels", "pairs_with_unknown_values")],
        lambda r: [r.masks.encoding, r.masks.how, r.masks.unknown_pixels, r.masks.pairs_with_unknown_values]),
    'gpu_files(m)': (lambda m: (m["masks"].get("gpu") or {}).get("files"), lambda r: r.masks.gpu_files),
    'm["masks"]["gpu"]': (lambda m: m["masks"].get("gpu"), lambda r: r.masks.to_json()["gpu"]),
    'm["masks"]["gpu"]["left_out"]': (lambda m: (m["masks"].get("gpu") or {}).get("left_out"),
                                      lambda r: r.masks.gpu_left_out),
    'm["images"][...] each': (lambda m: [m["images"]["encoding"], m["images"]["reencoded"],
                                         m["images"].get("psnr_db")],
                              lambda r: [r.images.encoding, r.images.reencoded, r.images.psnr_db]),
    'm[PACKS]': (lambda m: m[PACKS], lambda r: r.packs),
    'm[PACKS].get("gpu_mask_ext")': (lambda m: m[PACKS] and m[PACKS].get("gpu_mask_ext"),
                                     lambda r: r.packs and r.packs.gpu_mask_ext),
}


@pytest.mark.parametrize("copy", ["prepared", "version 2", "ids", "records"])
def test_every_former_dict_read_reads_the_same_value_of_the_records(prepared, version_2, other_copies, copy):
    """Each value the code read by string keys, read as an attribute of the records, on copies of every
    shape the fixtures make (a version 2 copy through migrate_v2); and the class maps they make."""
    out = {"prepared": prepared, "version 2": version_2, **other_copies}[copy]
    raw = json.loads((out / MANIFEST).read_text())
    if raw["version"] == 2:
        raw = migrate_v2(raw, out)
    manifest = load_manifest(out)
    for read, (as_dict, as_record) in FORMER_READS.items():
        assert _plain(as_record(manifest)) == as_dict(raw), read
    assert manifest.to_json() == raw
    kinds = {"prepared": "rgb", "version 2": "rgb", "ids": "id", "records": "id"}
    assert manifest.classes.kind.value == kinds[copy] and (manifest.source.records is not None) == (copy == "records")
    if copy == "ids":  # (the shapes the fixtures promise)
        assert manifest.images.psnr_db is not None and manifest.masks.gpu is None and manifest.packs is None
    if copy == "records":
        assert manifest.masks.gpu_left_out.startswith("3 masks are over") and manifest.packs.gpu_mask_ext is None
    original, prepared_map = manifest.classes.original_map(), manifest.classes.prepared_map()
    assert original.names == prepared_map.names == tuple(raw["classes"]["names"])
    assert original.ignore_index == prepared_map.ignore_index == raw["classes"]["ignore_index"]
    if copy in ("ids", "records"):
        assert dict(original.id_to_class) == {int(k): v for k, v in raw["classes"]["ids"].items()}
        assert original.mask_channel == raw["classes"]["mask_channel"] == 1
    else:
        assert original.colors.tolist() == prepared_map.colors.tolist() == raw["classes"]["colors"]


def test_the_records_are_frozen_and_a_gpu_form_is_there_or_left_out():
    import dataclasses

    from daliloader.manifest import GpuForm, MasksEntry

    masks = MasksEntry(encoding="png", how="ids", unknown_pixels=0, pairs_with_unknown_values=(),
                       gpu=GpuForm(encoding="lz4", files=("a.lz4",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        masks.unknown_pixels = 3
    assert masks.gpu_files == ("a.lz4",) and masks.to_json()["gpu"] == {"encoding": "lz4", "files": ["a.lz4"]}
    left_out = dataclasses.replace(masks, gpu=None, gpu_left_out="too big")
    assert left_out.gpu_files is None and left_out.to_json()["gpu"] == {"left_out": "too big"}
    assert dataclasses.replace(left_out, gpu_left_out=None).to_json()["gpu"] is None
    with pytest.raises(ValueError, match="not both"):
        dataclasses.replace(masks, gpu_left_out="too big")
