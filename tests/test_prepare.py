"""Prepared datasets, the writer: 8-bit class-index masks, byte-identical images, packs, the manifest,
every backend giving the same batches from the prepared copy as from the original; a prepare is
atomic and exclusive (real processes: two at once, killed or interrupted midway), and a full disk or
a long name gets one clear line. The checking side is tests/test_verify.py, the reading side
tests/test_manifest.py, the packs tests/test_packs.py."""

from __future__ import annotations

import dataclasses
import json
import signal
import tarfile
import time
from contextlib import nullcontext
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import PALETTE, one_epoch, write_pairs
from copies import colour_dataset, dataset, env, finished, paused_prepare, refused_everywhere, release, src, together

import daliloader as dl
from daliloader.cli import main as cli
from daliloader.errors import DataError, LoadError
from daliloader.manifest import PACKS, VERSION, ImagesEntry, Psnr, read_manifest
from daliloader.preparation import (
    MANIFEST,
    PreparedPair,
    PrepareOptions,
    file_stem,
    prepare,
    prepare_cached,
    summary,
    verify,
)


@pytest.fixture(scope="module")
def colour_data(tmp_path_factory) -> dl.SegmentationData:
    """PNG photos with RGB colour masks; one mask carries a colour outside the palette."""
    return colour_dataset(tmp_path_factory.mktemp("colour"))


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


def test_format_version_3_names_the_packs_packs(prepared):
    """Version 3 writes "packs" (key), packs/ (folder) and "samples_per_pack", where version 2 said
    shards; the manifest's keys, in order, are what they were."""
    manifest = json.loads((prepared / MANIFEST).read_text())
    assert VERSION == 3 and manifest["version"] == 3 and PACKS == "packs"
    assert list(manifest) == ["format", "version", "daliloader", "created", "seconds", "source", "classes", "masks",
                              "images", "pairs", "packs"]
    packs = manifest["packs"]
    assert packs == {"format": "webdataset", "samples_per_pack": 4, "tars": ["packs/00000.tar", "packs/00001.tar"],
                     "indexes": ["packs/00000.idx", "packs/00001.idx"],
                     "image_exts": ["jpg", "jpeg", "png", "bmp", "tif", "tiff", "webp"], "mask_ext": "labels.png",
                     "index_ext": "index", "gpu_mask_ext": "labels.lz4"}
    assert sorted(p.name for p in prepared.iterdir()) == ["images", "manifest.json", "masks", "masks_lz4", "packs"]
    assert read_manifest(prepared / MANIFEST).to_json() == manifest


@pytest.mark.parametrize("label_mode", ["int", "onehot"])
def test_every_backend_reads_the_prepared_copy_identically(colour_data, prepared, backend, label_mode):
    kw = dict(batch_size=3, image_size=(32, 48), crop="random", scale=(0.7, 1.3), flip=0.5, label_mode=label_mode,
              seed=11, shuffle=True)
    original = one_epoch(backend, colour_data, **kw)
    again = one_epoch(backend, dl.SegmentationData.from_prepared(prepared), **kw)
    assert len(original) == len(again) == 2
    for a, b in zip(original, again, strict=True):
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0], b[0])


def test_jpeg_reencoding_reports_the_quality_lost(colour_data, tmp_path):
    out = tmp_path / "jpeg"
    manifest = prepare(colour_data, out, jpeg_quality=95, progress=False)
    assert all(image.endswith(".jpg") for image, _ in manifest.pairs)
    assert manifest.images.reencoded == len(colour_data)
    psnr = manifest.images.psnr_db  # random-noise photos: JPEG loses a lot, and says so
    assert 5 < psnr.min <= psnr.mean < 60
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
    with pytest.raises(DataError, match="out does not exist or is not a folder: a prepared dataset is the folder"):
        dl.SegmentationData.from_prepared(tmp_path / "out")  # (nothing left behind: the copy was never renamed in)


def test_prepare_command(colour_data, tmp_path, capsys):
    root = str(Path(colour_data.images[0]).parent.parent)
    assert cli(["prepare", root, str(tmp_path / "cli"), "--verify", "--packs", "5", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "prepared 6 pairs" in out and "35 pixels of unknown values" in out and "verified 6 pairs" in out
    assert "2 pack(s) (webdataset tars) of up to 5 samples" in out
    with tarfile.open(tmp_path / "cli" / "packs" / "00001.tar") as tar:
        assert tar.getnames() == ["0000005.png", "0000005.labels.png", "0000005.labels.lz4", "0000005.index"]
        assert tar.extractfile("0000005.index").read() == (5).to_bytes(8, "little")
    assert cli(["verify", str(tmp_path / "cli"), "--quiet"]) == 0
    assert "24 pack members identical" in capsys.readouterr().out
    assert cli(["prepare", root, str(tmp_path / "cli")]) == 2  # already prepared: a clear error, exit 2
    assert "already holds a prepared dataset" in capsys.readouterr().err


def test_the_gpu_form_of_the_masks_holds_the_same_indices(colour_data, prepared, monkeypatch):
    """The LZ4 masks dali-gpu inflates, inflated on the CPU: the PNG masks' indices bit for bit; the CPU
    backends keep reading the PNG masks, dali-gpu reads the LZ4 ones (files and packs)."""
    from daliloader.backends import Device
    from daliloader.backends.dali_graph import mask_files
    from daliloader.manifest import read_lz4_mask

    data = dl.SegmentationData.from_prepared(prepared)
    assert len(data.gpu_masks) == len(data) and all(m.endswith(".lz4") for m in data.gpu_masks)
    for png, lz4 in zip(data.masks, data.gpu_masks, strict=True):
        np.testing.assert_array_equal(read_lz4_mask(lz4), cv2.imread(png, cv2.IMREAD_UNCHANGED))
        assert Path(lz4).stat().st_size < 4 * Path(png).stat().st_size
    assert mask_files(data, Device.CPU) == data.masks and mask_files(data, Device.GPU) == data.gpu_masks
    assert dl.SegmentationData.from_prepared(prepared, packs=True).packs.gpu_mask_ext == "labels.lz4"
    _, val = data.split(0.5)
    assert val.gpu_masks == tuple(data.gpu_masks[data.masks.index(m)] for m in val.masks)
    import daliloader.backends.dali_graph as graph

    monkeypatch.setattr(graph, "nvcomp_loads", lambda: False)  # no nvCOMP to inflate them: the PNG masks
    assert mask_files(data, Device.GPU) == data.masks


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


def test_prepare_can_leave_the_gpu_form_out(colour_data, tmp_path):
    manifest = prepare(colour_data, tmp_path / "none", gpu_masks=False, progress=False)
    assert manifest.masks.gpu is None and manifest.masks.gpu_left_out is None
    assert not (tmp_path / "none" / "masks_lz4").exists()
    assert dl.SegmentationData.from_prepared(tmp_path / "none").gpu_masks is None


def test_masks_past_nvcomps_chunk_leave_the_gpu_form_out_and_the_manifest_says_why(colour_data, tmp_path,
                                                                                   monkeypatch):
    """A mask over nvCOMP's largest LZ4 chunk (16 MiB, lowered here so that the small masks are over it):
    no GPU form for any mask, neither as files nor in the packs; the manifest and the summary say why,
    and the copy loads with its PNG masks on every device."""
    import daliloader.preparation as module
    from daliloader.backends import Device
    from daliloader.backends.dali_graph import mask_files

    monkeypatch.setattr(module, "LZ4_MAX_BYTES", 1000)
    out = tmp_path / "big"
    manifest = prepare(colour_data, out, pack_size=4, progress=False)
    left_out = manifest.masks.gpu_left_out
    assert manifest.masks.gpu is None and manifest.masks.gpu_files is None
    assert left_out.startswith(f"{len(colour_data)} masks are over nvCOMP's 0 MiB (first: ") and \
        left_out.endswith("dali-gpu reads the PNG masks") and not list(out.glob("masks_lz4/*"))
    assert f"no GPU form of the masks: {left_out}" in summary(manifest, out)
    data = dl.SegmentationData.from_prepared(out)
    assert data.gpu_masks is None and mask_files(data, Device.GPU) == data.masks
    packed = dl.SegmentationData.from_prepared(out, packs=True)
    assert packed.packs.gpu_mask_ext is None
    for tar in packed.packs.tars:
        with tarfile.open(tar) as members:
            assert not [m.name for m in members if m.name.endswith(".labels.lz4")]


# ---------------------------------------------------------------- the options and the rows, on fakes
def test_the_options_are_one_frozen_value_checked_before_anything_is_written(colour_data, tmp_path, monkeypatch):
    import daliloader.preparation as module

    options = PrepareOptions(jpeg_quality=90, pack_size=2, workers=1, progress=False, source={"by": "me"},
                             gpu_masks=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.pack_size = 3
    assert PrepareOptions() == PrepareOptions(None, None, None, True, None, True)
    for bad, why in ((PrepareOptions(jpeg_quality=0), "jpeg_quality must lie in 1-100, got 0"),
                     (PrepareOptions(jpeg_quality=101), "jpeg_quality must lie in 1-100, got 101"),
                     (PrepareOptions(pack_size=0), "pack_size must be a positive number of samples, got 0")):
        with pytest.raises(DataError, match=why):
            bad.check(colour_data)
        with pytest.raises(DataError, match=why):  # prepare refuses them before making OUT
            prepare(colour_data, tmp_path / "never", jpeg_quality=bad.jpeg_quality, pack_size=bad.pack_size)
    assert not (tmp_path / "never").exists()
    wide = dataclasses.replace(colour_data, classes=dl.ClassMap.from_ids(3, ignore_index=1000))
    with pytest.raises(DataError, match="ignore_index=1000 does not fit an 8-bit mask"):
        options.check(wide)

    seen = []
    monkeypatch.setattr(module, "_write", lambda data, folder, options: seen.append(options) or {})
    prepare(colour_data, tmp_path / "a", jpeg_quality=90, pack_size=2, workers=1, progress=False,
            source={"by": "me"}, gpu_masks=False)
    prepare_cached(colour_data, tmp_path / "b", "choose another cache", pack_size=7, source={"by": "bench"})
    assert seen == [options, PrepareOptions(pack_size=7, progress=False, source={"by": "bench"})]


def test_each_pair_becomes_a_row_or_an_error(colour_data, tmp_path):
    """_convert on single pairs: a row of the files it wrote (relative to the copy), or, for a pair that
    cannot be read, the error and no file."""
    from daliloader.preparation import _convert

    out = tmp_path / "copy"
    for sub in ("images", "masks", "masks_lz4"):
        (out / sub).mkdir(parents=True)
    row = _convert(colour_data, 2, out, "0000002-x", PrepareOptions())
    assert row == PreparedPair(image="images/0000002-x.png", mask="masks/0000002-x.png",
                               lz4="masks_lz4/0000002-x.lz4", psnr=None, unknown_pixels=35)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.*")) == sorted([row.image, row.mask, row.lz4])
    assert (out / row.image).read_bytes() == Path(colour_data.images[2]).read_bytes()

    jpeg = _convert(colour_data, 0, out, "0000000-y", PrepareOptions(jpeg_quality=80, gpu_masks=False))
    assert jpeg.image == "images/0000000-y.jpg" and jpeg.lz4 is None and 5 < jpeg.psnr < 60
    assert jpeg.unknown_pixels == 0 and jpeg.error is None

    broken = write_pairs(tmp_path / "broken", [np.zeros((20, 20, 3), np.uint8)],
                         [np.broadcast_to(PALETTE[1], (20, 20, 3)).copy()])
    Path(broken.masks[0]).write_bytes(Path(broken.masks[0]).read_bytes()[:60])
    failed = _convert(broken, 0, tmp_path / "nowhere", "0000000-z", PrepareOptions())
    assert failed.error.startswith(f"{broken.images[0]} + {broken.masks[0]}: ") and failed.image == ""
    assert not (tmp_path / "nowhere").exists()


def test_the_summary_says_what_was_made(prepared, tmp_path, colour_data):
    manifest = read_manifest(prepared / MANIFEST)
    lines = summary(manifest, prepared).splitlines()
    assert lines[0].startswith(f"prepared 6 pairs into {prepared} in ") and "35 pixels of unknown values" in lines[0]
    assert lines[1] == "  images copied byte for byte"
    assert lines[2].startswith("  masks also LZ4-compressed for dali-gpu") and lines[3].startswith(
        "  2 pack(s) (webdataset tars) of up to 4 samples: ")
    assert lines[4] == f"  load it with dl.SegmentationData.from_prepared({str(prepared)!r}, packs=True)"
    left_out = dataclasses.replace(
        manifest, masks=dataclasses.replace(manifest.masks, gpu=None, gpu_left_out="1 masks are over nvCOMP's 16 MiB"),
        packs=None, images=ImagesEntry(encoding="re-encoded", reencoded=6, psnr_db=Psnr(mean=30.5, min=28.1)))
    assert summary(left_out, prepared).splitlines()[1:] == [
        "  6 photos re-encoded as JPEG: PSNR mean 30.5 dB, min 28.1 dB",
        "  no GPU form of the masks: 1 masks are over nvCOMP's 16 MiB",
        f"  load it with dl.SegmentationData.from_prepared({str(prepared)!r})"]


def test_file_stems_fit_a_file_name():
    assert file_stem(3, "/data/train/0001.png") == "0000003-0001"
    long = file_stem(12, "/d/" + "é" * 200 + ".png")
    assert long.startswith("0000012-é") and len((long + ".labels.jpeg").encode()) <= 255


# ---------------------------------------------------------------- atomic and exclusive: real processes
def test_two_concurrent_prepares_into_one_folder_exactly_one_succeeds(tmp_path):
    """Both start at one moment (a start file); the first to take the lock pauses after its first files
    until the other has ended, so the second always finds the first at work."""
    from copies import PAUSE

    a, b = dataset(tmp_path / "a", 12, 1), dataset(tmp_path / "b", 12, 2)
    out = tmp_path / "out"
    pause = env(DALILOADER_TEST_PAUSE_AFTER="2", DALILOADER_TEST_PAUSED=str(tmp_path / "paused"),
                DALILOADER_TEST_RELEASE=str(tmp_path / "release"))
    runs = together("from daliloader.cli import main\nimport daliloader.preparation\n" + PAUSE,
                    "sys.exit(main(sys.argv[2:]))",
                    [("prepare", src(d), out, "--packs", "5", "--quiet") for d in (a, b)], tmp_path, env=pause)
    deadline = time.time() + 120
    while all(run.poll() is None for run in runs) and time.time() < deadline:
        time.sleep(0.01)
    release(tmp_path)
    results = [finished(run) for run in runs]
    assert sorted(rc for rc, _, _ in results) == [0, 2], results
    loser = next(err for rc, _, err in results if rc == 2)
    assert f"{out} is being written by daliloader prepare, pid" in loser and loser.count("\n") == 1, loser
    assert verify(out, progress=False).ok  # one dataset, whole: no image of one beside the mask of the other
    assert not list(tmp_path.glob("out.incomplete-*")) and not list(tmp_path.glob(".out.lock.owner*"))


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_an_interrupted_prepare_leaves_nothing_a_loader_or_check_accepts(tmp_path, how):
    """The signal lands mid-copy: the child pauses after writing its first files until it is sent."""
    data = dataset(tmp_path / "src", 12, 3, size=(96, 128))
    out = tmp_path / "out"
    run = paused_prepare(tmp_path, data, out, "--quiet", "--workers", "1")
    assert list(tmp_path.glob("out.incomplete-*/masks/*.png"))
    run.send_signal(getattr(signal, how))
    release(tmp_path)
    rc, _, err = finished(run, timeout=60)
    assert rc == (-9 if how == "SIGKILL" else 130), err
    if how == "SIGINT":
        assert "interrupted" in err and "Traceback" not in err
    assert not out.exists()
    leftovers = list(tmp_path.glob("out.incomplete-*"))
    assert len(leftovers) == (1 if how == "SIGKILL" else 0)
    for leftover in leftovers:  # SIGKILL leaves one: marked, refused everywhere
        refused_everywhere(leftover)
    warned = pytest.warns(UserWarning, match="the leftover of an interrupted") if how == "SIGKILL" else nullcontext()
    with warned as seen:
        prepare(data, out, progress=False)  # the rerun cleans up, says so, and succeeds
    if seen is not None:  # the warning points at the caller's line, not at contextlib's
        assert [Path(w.filename).name for w in seen] == [Path(__file__).name]
    assert not list(tmp_path.glob("out.incomplete-*")) and verify(out, progress=False).ok


# ---------------------------------------------------------------- full disks, long names
def test_a_disk_that_fills_midway_stops_the_run_at_once_with_one_line(tmp_path, tmpfs):
    disk = tmpfs(tmp_path / "small", "size=64k")
    data = dataset(tmp_path / "d", 40, 10, size=(120, 160))
    with pytest.raises(dl.LoadError) as e:
        prepare(data, disk / "out", progress=False)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"cannot write {disk}/out.incomplete-"), message
    assert "no space left on the device (the disk or your quota is full): free some space, or choose another OUT" \
        in message and "daliloader check" not in message
    assert sorted(p.name for p in disk.iterdir()) == [".out.lock"]  # nothing else left


def test_a_long_file_name_is_prepared(tmp_path):
    data = dataset(tmp_path / "d", 2, 11)
    long = "x" * (255 - len("_L.png"))  # the mask's name is 255 bytes, the image's 253
    for path, name in ((data.images[0], long + ".jpg"), (data.masks[0], long + "_L.png")):
        Path(path).rename(Path(path).parent / name)
    data = dl.SegmentationData.from_folder(tmp_path / "d")
    manifest = prepare(data, tmp_path / "out", pack_size=2, progress=False)
    assert all(len(Path(f).name.encode()) <= 255 for pair in manifest.pairs for f in pair)
    assert verify(tmp_path / "out", progress=False).ok


def test_a_copy_inside_the_datasets_own_folders_is_refused(tmp_path):
    """prepare DATA DATA/train/sub wrote the copy among the dataset's images, whose loaders and check
    then refused it (12 unpaired images): refused before anything is written. A copy beside the
    dataset's folders, inside its root, is fine."""
    data = dl.synthetic.make_dataset(tmp_path / "d", n=2, image_size=(16, 16))
    for inside in (tmp_path / "d" / "train" / "sub", tmp_path / "d" / "train_labels"):
        with pytest.raises(dl.DataError, match=r"is inside \S*/d/train(_labels)?, which holds the dataset's files"):
            prepare(data, inside, progress=False)
        assert not inside.exists() or inside == tmp_path / "d" / "train_labels"
    assert len(dl.SegmentationData.from_folder(tmp_path / "d")) == 2
    prepare(data, tmp_path / "d" / "prepared", progress=False)  # beside them: nothing of it is paired
    assert len(dl.SegmentationData.from_folder(tmp_path / "d")) == 2


def test_a_copy_is_refused_only_inside_the_folders_that_hold_the_pairs(tmp_path):
    """Pairs from two places had their common folder (/) taken as the dataset's, which refused every OUT."""
    first = dl.synthetic.make_dataset(tmp_path / "a", n=1, image_size=(16, 16))
    second = dl.synthetic.make_dataset(tmp_path / "b", n=1, image_size=(16, 16), seed=1)
    both = dl.SegmentationData.from_pairs([(first.images[0], first.masks[0]), (second.images[0], second.masks[0])],
                                          first.classes)
    prepare(both, tmp_path / "out", progress=False)
    assert len(dl.SegmentationData.from_prepared(tmp_path / "out")) == 2
