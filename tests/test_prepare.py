"""Prepared datasets: 8-bit class-index masks, byte-identical images, shards, manifest, verification,
and every backend giving the same batches from the prepared copy as from the original."""

import json
import tarfile
from pathlib import Path

import cv2
import numpy as np
import pytest

import daliloader as dl
from conftest import PALETTE, block_labels, one_epoch, write_pairs
from daliloader.cli import main as cli
from daliloader.errors import DataError, LoadError
from daliloader.prepare import MANIFEST, prepare, verify


@pytest.fixture(scope="module")
def colour_data(tmp_path_factory) -> dl.SegmentationData:
    """PNG photos with RGB colour masks; one mask carries a colour outside the palette."""
    rng = np.random.default_rng(3)
    labels = [block_labels(rng, 40, 56) for _ in range(6)]
    masks = [PALETTE[lab] for lab in labels]
    masks[2][:5, :7] = (3, 2, 1)  # unknown colour: 35 pixels
    images = [rng.integers(0, 256, (40, 56, 3), dtype=np.uint8) for _ in labels]
    return write_pairs(tmp_path_factory.mktemp("colour"), images, masks)


@pytest.fixture(scope="module")
def prepared(colour_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "out"
    prepare(colour_data, out, pack_size=4, progress=False)
    return out


def test_masks_become_8bit_class_indices_and_images_stay_byte_identical(colour_data, prepared):
    manifest = json.loads((prepared / MANIFEST).read_text())
    assert len(manifest["pairs"]) == len(colour_data)
    assert manifest["classes"]["colors"] == colour_data.classes.colors.tolist()
    assert manifest["masks"]["unknown_pixels"] == 35 and len(manifest["masks"]["pairs_with_unknown_values"]) == 1
    for i, (image, mask) in enumerate(manifest["pairs"]):
        got = cv2.imread(str(prepared / mask), cv2.IMREAD_UNCHANGED)
        assert got.dtype == np.uint8 and got.ndim == 2
        original = cv2.cvtColor(cv2.imread(colour_data.masks[i]), cv2.COLOR_BGR2RGB)
        np.testing.assert_array_equal(got, colour_data.classes.map_mask(original))
        assert (prepared / image).read_bytes() == Path(colour_data.images[i]).read_bytes()
    assert (cv2.imread(str(prepared / manifest["pairs"][2][1]), cv2.IMREAD_UNCHANGED)[:5, :7] == 255).all()


def test_verify_passes_and_catches_a_changed_label(colour_data, tmp_path):
    out = tmp_path / "p"
    prepare(colour_data, out, pack_size=4, progress=False)
    report = verify(out, progress=False)
    assert report.ok and report.masks_checked == report.images_checked == len(colour_data)
    assert report.pack_members_checked == 4 * len(colour_data)  # image, mask, its GPU form, index
    mask = out / json.loads((out / MANIFEST).read_text())["pairs"][4][1]
    labels = cv2.imread(str(mask), cv2.IMREAD_UNCHANGED)
    labels[0, 0] = (labels[0, 0] + 1) % 32
    cv2.imwrite(str(mask), labels)
    report = verify(out, progress=False)
    assert not report.ok
    assert any(str(mask) in m and "1 pixels differ" in m for m in report.mismatches), report.mismatches
    assert any("shards" in m and "differs" in m for m in report.mismatches)  # the shard kept the old mask


@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_every_backend_reads_the_prepared_copy_identically(colour_data, prepared, backend, label_mode):
    kw = dict(batch_size=3, image_size=(32, 48), crop="random", scale=(0.7, 1.3), flip=0.5, label_mode=label_mode,
              seed=11, shuffle=True)
    original = one_epoch(backend, colour_data, **kw)
    again = one_epoch(backend, dl.SegmentationData.from_prepared(prepared), **kw)
    assert len(original) == len(again) == 2
    for a, b in zip(original, again):
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0], b[0])


def test_jpeg_reencoding_reports_the_quality_lost(colour_data, tmp_path):
    out = tmp_path / "jpeg"
    manifest = prepare(colour_data, out, jpeg_quality=95, progress=False)
    assert all(image.endswith(".jpg") for image, _ in manifest["pairs"])
    assert manifest["images"]["reencoded"] == len(colour_data)
    psnr = manifest["images"]["psnr_db"]  # random-noise photos: JPEG loses a lot, and says so
    assert 5 < psnr["min"] <= psnr["mean"] < 60
    report = verify(out, progress=False)
    assert report.ok and report.images_checked == 0 and report.masks_checked == len(colour_data)


def test_refuses_a_used_folder_and_a_bad_pair_leaves_no_dataset(colour_data, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="not an empty folder"):
        prepare(colour_data, tmp_path / "used", progress=False)

    broken = write_pairs(tmp_path / "broken", [np.zeros((20, 20, 3), np.uint8)] * 3,
                         [np.broadcast_to(PALETTE[1], (20, 20, 3)).copy()] * 3)
    Path(broken.masks[1]).write_bytes(Path(broken.masks[1]).read_bytes()[:60])
    with pytest.raises(LoadError, match="1 of 3 pairs") as e:
        prepare(broken, tmp_path / "out", progress=False)
    assert broken.masks[1] in str(e.value)
    assert not (tmp_path / "out" / MANIFEST).exists()
    with pytest.raises(DataError, match="not a prepared dataset"):
        dl.SegmentationData.from_prepared(tmp_path / "out")


def test_prepare_command(colour_data, tmp_path, capsys):
    root = str(Path(colour_data.images[0]).parent.parent)
    assert cli(["prepare", root, str(tmp_path / "cli"), "--verify", "--packs", "5", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "prepared 6 pairs" in out and "35 pixels of unknown values" in out and "verified 6 pairs" in out
    with tarfile.open(tmp_path / "cli" / "shards" / "00001.tar") as tar:
        assert tar.getnames() == ["0000005.png", "0000005.labels.png", "0000005.labels.lz4", "0000005.index"]
        assert tar.extractfile("0000005.index").read() == (5).to_bytes(8, "little")
    assert cli(["verify", str(tmp_path / "cli"), "--quiet"]) == 0
    assert "24 pack members identical" in capsys.readouterr().out
    assert cli(["prepare", root, str(tmp_path / "cli")]) == 2  # already prepared: a clear error, exit 2
    assert "already holds a prepared dataset" in capsys.readouterr().err


def test_the_gpu_form_of_the_masks_holds_the_same_indices(colour_data, prepared, monkeypatch):
    """The LZ4 masks dali-gpu inflates, inflated on the CPU: the PNG masks' indices bit for bit; the CPU
    backends keep reading the PNG masks, dali-gpu reads the LZ4 ones (files and packs)."""
    from daliloader.backends.dali_graph import mask_files
    from daliloader.manifest import read_lz4_mask

    data = dl.SegmentationData.from_prepared(prepared)
    assert len(data.gpu_masks) == len(data) and all(m.endswith(".lz4") for m in data.gpu_masks)
    for png, lz4 in zip(data.masks, data.gpu_masks):
        np.testing.assert_array_equal(read_lz4_mask(lz4), cv2.imread(png, cv2.IMREAD_UNCHANGED))
        assert Path(lz4).stat().st_size < 4 * Path(png).stat().st_size
    assert mask_files(data, "cpu") == data.masks and mask_files(data, "gpu") == data.gpu_masks
    assert dl.SegmentationData.from_prepared(prepared, packs=True).packs.gpu_mask_ext == "labels.lz4"
    _, val = data.split(0.5)
    assert val.gpu_masks == tuple(data.gpu_masks[data.masks.index(m)] for m in val.masks)
    import daliloader.backends.dali_graph as graph

    monkeypatch.setattr(graph, "nvcomp_loads", lambda: False)  # no nvCOMP to inflate them: the PNG masks
    assert mask_files(data, "gpu") == data.masks


def test_dalis_cpu_side_of_the_gpu_form_reads_the_header_and_block(prepared):
    """The part of the GPU graph that runs on the CPU (the header read into the inflate's shape, the LZ4
    block cut out), run on DALI's CPU backend; the block inflated by python-lz4 is the PNG mask."""
    import lz4.block
    from nvidia.dali import fn, pipeline_def

    from daliloader.backends.dali_graph import lz4_header

    data = dl.SegmentationData.from_prepared(prepared)

    @pipeline_def(batch_size=len(data), num_threads=1, device_id=None)
    def header():
        encoded, _ = fn.readers.file(files=list(data.gpu_masks))
        return lz4_header(encoded)

    pipe = header()
    pipe.build()
    shapes, blocks = pipe.run()
    for i, png in enumerate(data.masks):
        want = cv2.imread(png, cv2.IMREAD_UNCHANGED)
        shape = np.array(shapes[i])
        assert shape.tolist() == [*want.shape, 1]
        raw = lz4.block.decompress(np.array(blocks[i]).tobytes(), uncompressed_size=want.size)
        np.testing.assert_array_equal(np.frombuffer(raw, np.uint8).reshape(want.shape), want)


def test_verify_names_a_damaged_gpu_mask_and_prepare_can_leave_the_form_out(colour_data, tmp_path):
    out = tmp_path / "p"
    prepare(colour_data, out, progress=False)
    lz4 = out / json.loads((out / MANIFEST).read_text())["masks"]["gpu"]["files"][3]
    lz4.write_bytes(lz4.read_bytes()[:-9])
    report = verify(out, progress=False)
    assert not report.ok and any(str(lz4) in m and "does not inflate" in m for m in report.mismatches)
    manifest = prepare(colour_data, tmp_path / "none", gpu_masks=False, progress=False)
    assert manifest["masks"]["gpu"] is None and not (tmp_path / "none" / "masks_lz4").exists()
    assert dl.SegmentationData.from_prepared(tmp_path / "none").gpu_masks is None


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
            "no pack list": (without("shards", "tars"), "'shards' 'tars' is missing"),
            "pairs of numbers": (json.dumps({**manifest, "pairs": [[1, 2]] * len(manifest["pairs"])}),
                                 "'pairs' holds entries of the wrong type"),
            "fewer sources": (json.dumps({**manifest, "source": {**manifest["source"], "masks": []}}),
                              "source 'masks' lists 0 entries for 6 pairs")}


@pytest.mark.parametrize("damage", ["cut short", "not JSON", "no pairs", "no class names", "no pack list",
                                    "pairs of numbers", "fewer sources"])
def test_a_damaged_manifest_is_named_by_verify_and_every_loader(prepared, tmp_path, damage, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
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


def test_verify_checks_the_pack_indexes(colour_data, tmp_path):
    """DALI's webdataset reader seeks by the .idx files: a missing or wrong one is reported, as the loader's
    own error tells the user to run verify."""
    out = tmp_path / "p"
    prepare(colour_data, out, pack_size=4, progress=False)
    assert verify(out, progress=False).indexes_checked == 2
    index = out / "shards" / "00001.idx"
    good = index.read_text()
    index.unlink()
    report = verify(out, progress=False)
    assert report.mismatches == [f"{index}: cannot read the index of {out / 'shards' / '00001.tar'} (No such file or "
                                 "directory): DALI's webdataset reader needs it; prepare the copy again"]
    with pytest.raises(DataError, match=f"pack file {index} is missing"):
        dl.SegmentationData.from_prepared(out, packs=True)
    for wrong in ("v1.2 8\n", good.replace(" 512 ", " 1024 ", 1), "\x00\xff" * 40):
        index.write_bytes(wrong.encode("latin-1"))
        (problem,) = verify(out, progress=False).mismatches
        assert problem.startswith(f"{index}: does not match {out / 'shards' / '00001.tar'}"), problem
    with pytest.raises(DataError, match=f"{index} is not a DALI webdataset index .*run `daliloader verify`"):
        dl.SegmentationData.from_prepared(out, packs=True)
    index.write_text(good)
    assert verify(out, progress=False).ok


def test_a_damaged_lz4_header_is_named_not_a_crash(colour_data, tmp_path):
    """A header that asks for a 1048576x1048576 mask: verify names the file; dali-gpu's guard refuses the
    pair (naming it) before the GPU inflater sees it."""
    from daliloader.checks import PairGuard

    out = tmp_path / "p"
    prepare(colour_data, out, progress=False)
    lz4 = out / json.loads((out / MANIFEST).read_text())["masks"]["gpu"]["files"][2]
    raw = bytearray(lz4.read_bytes())
    raw[4:12] = np.array([1 << 20, 1 << 20], "<i4").tobytes()
    lz4.write_bytes(bytes(raw))
    report = verify(out, progress=False)
    assert report.mismatches == [f"{lz4}: its header gives a 1048576x1048576 mask, which prepare never writes (1 to 16 "
                                 "MiB of indices): the prepared copy is damaged"]
    data = dl.SegmentationData.from_prepared(out)
    PairGuard(data, backend="dali-cpu").verify(2)  # reads the PNG masks
    with pytest.raises(LoadError, match=f"cannot load sample 2 .*\n  {lz4}: its header gives a 1048576x1048576 mask"):
        PairGuard(data, backend="dali-gpu").verify(2)
    raw[4:12] = np.array([7, 9], "<i4").tobytes()  # a size, but not the image's
    lz4.write_bytes(bytes(raw))
    with pytest.raises(LoadError, match=f"{lz4}: its header gives 9x7 but its image is 56x40"):
        PairGuard(data, backend="dali-gpu").verify(2)
