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
