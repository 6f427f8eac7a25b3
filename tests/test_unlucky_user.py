"""Nothing lost, nothing mixed: what a careless or unlucky user does to the loader, with real processes
where the case is about processes. prepare is atomic and exclusive; symlinked folders are followed;
corrupt image data is caught by check; verify reports instead of crashing; the smaller traps say
what is wrong and what to do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

import daliloader as dl
from conftest import PALETTE, block_labels, write_pairs
from daliloader.prepare import MANIFEST, prepare, verify

PY = sys.executable


def dataset(root: Path, n: int, seed: int, size=(48, 64)) -> dl.SegmentationData:
    rng = np.random.default_rng(seed)
    labels = [block_labels(rng, *size) for _ in range(n)]
    images = [rng.integers(0, 256, size + (3,), np.uint8) for _ in range(n)]
    return write_pairs(root, images, [PALETTE[lab] for lab in labels], image_ext="jpg")


def run_cli(*args, cwd=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "daliloader.cli", *map(str, args)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())}, **kw)


# ---------------------------------------------------------------- prepare: atomic and exclusive
def test_two_concurrent_prepares_into_one_folder_exactly_one_succeeds(tmp_path):
    a, b = dataset(tmp_path / "a", 40, 1), dataset(tmp_path / "b", 40, 2)
    out = tmp_path / "out"
    runs = [run_cli("prepare", Path(d.images[0]).parent.parent, out, "--packs", "8", "--quiet") for d in (a, b)]
    results = [(r.wait(timeout=300), r.stderr.read()) for r in runs]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], results
    loser = next(err for rc, err in results if rc == 2)
    assert "is being written by daliloader prepare, pid" in loser or "already holds a prepared dataset" in loser
    assert verify(out, progress=False).ok  # one dataset, whole: no image of one beside the mask of the other
    assert not list(tmp_path.glob("out.incomplete-*"))


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_an_interrupted_prepare_leaves_nothing_a_loader_or_check_accepts(tmp_path, how):
    data = dataset(tmp_path / "src", 600, 3, size=(96, 128))
    out = tmp_path / "out"
    run = run_cli("prepare", Path(data.images[0]).parent.parent, out, "--quiet", "--workers", "1")
    deadline = time.time() + 120
    while not list(tmp_path.glob("out.incomplete-*/masks/*.png")) and time.time() < deadline:
        time.sleep(0.05)
    run.send_signal(getattr(signal, how))
    rc = run.wait(timeout=60)
    err = run.stderr.read()
    assert rc == (-9 if how == "SIGKILL" else 130), err
    if how == "SIGINT":
        assert "interrupted" in err and "Traceback" not in err
    assert not out.exists()
    for leftover in tmp_path.glob("out.incomplete-*"):  # SIGKILL leaves one: marked, refused everywhere
        with pytest.raises(dl.DataError, match="unfinished output of a `daliloader prepare`"):
            dl.SegmentationData.from_folder(leftover)
        with pytest.raises(dl.DataError, match="unfinished output"):
            dl.check(leftover)
        with pytest.raises(dl.DataError, match="unfinished output"):
            dl.SegmentationData.from_dirs(leftover / "images", leftover / "masks", 32)
    with pytest.warns(UserWarning, match="the leftover of an interrupted") if how == "SIGKILL" else nullcontext():
        prepare(data, out, progress=False)  # the rerun cleans up, says so, and succeeds
    assert not list(tmp_path.glob("out.incomplete-*")) and verify(out, progress=False).ok


def nullcontext():
    from contextlib import nullcontext as null

    return null()


def test_the_bench_cache_left_unfinished_by_an_older_version_is_made_again(tmp_path, monkeypatch):
    from daliloader.bench import prepared_copy

    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    data = dataset(tmp_path / "src", 6, 4)
    first = prepared_copy(data, "cache")
    (first / MANIFEST).unlink()  # as an interrupted older version left it
    with pytest.warns(UserWarning, match="unfinished prepared copy in the cache"):
        again = prepared_copy(data, "cache")
    assert again == first and (again / MANIFEST).exists()


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
    with pytest.raises(dl.DataError, match=r"broken link: .*gone\.jpg -> .*nowhere\.jpg"):
        dl.SegmentationData.from_folder(root)
    report = dl.check(root)
    assert not report.ok and [p.kind for p in report.problems] == ["broken_link"]


# ---------------------------------------------------------------- corrupt data
def test_check_catches_corrupt_jpeg_data(tmp_path, capsys):
    from daliloader.cli import main as cli

    data = dataset(tmp_path / "d", 3, 7, size=(240, 320))
    path = Path(data.images[1])
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 2000] = np.random.default_rng(0).integers(0, 256, 2000, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(raw))  # header and end marker intact
    assert cv2.imdecode(np.frombuffer(bytes(raw), np.uint8), cv2.IMREAD_COLOR) is not None  # decoders accept it
    report = dl.check(data)
    assert [(p.kind, p.path) for p in report.problems] == [("corrupt", str(path))]
    assert cli(["check", str(tmp_path / "d"), "--quiet"]) == 1
    assert str(path) in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata", "opencv"])
def test_a_file_changed_since_it_was_vetted_is_vetted_again(tmp_path, backend):
    """Replaced between epochs by a valid image of another size: refused, naming it, before it is read
    (or, on dali-cpu, within the few batches the loader reads ahead: a chunk of positions at most)."""
    data = dataset(tmp_path / "d", 12, 8)
    kw = dict(batch_size=3, image_size=(48, 64), training=False)
    ds = dl.keras_sequence(data, **kw) if backend == "opencv" else dl.tf_dataset(data, backend=backend, **kw)
    assert len(list(ds)) == 4
    mask = Path(data.masks[7])
    # Valid, but of another size, and swapped in whole: the DALI loader vets ahead in the background, so a
    # file written in place could be seen half-written (and refused, rightly, as empty).
    cv2.imwrite(str(mask.with_suffix(".new.png")), np.zeros((30, 30, 3), np.uint8))
    os.replace(mask.with_suffix(".new.png"), mask)
    tf = pytest.importorskip("tensorflow")
    # (tfdata raises it inside tf.data, which wraps it in an UnknownError, message intact)
    with pytest.raises((dl.LoadError, tf.errors.UnknownError), match=f"{mask}.*(size|but its image is)"):
        for _ in range(3):
            list(ds) if backend != "opencv" else [ds[i] for i in range(len(ds))]


# ---------------------------------------------------------------- verify never crashes
def test_verify_reports_from_anywhere_after_sources_moved_and_on_a_truncated_pack(tmp_path):
    data = dataset(tmp_path / "src", 12, 9)
    out = tmp_path / "out"
    run = run_cli("prepare", Path(data.images[0]).parent.parent, out, "--packs", "5", "--quiet", cwd=tmp_path)
    assert run.wait(timeout=120) == 0, run.stderr.read()
    manifest = json.loads((out / MANIFEST).read_text())
    assert all(os.path.isabs(p) for p in manifest["source"]["images"] + manifest["source"]["masks"])
    check = run_cli("verify", out, "--quiet", cwd="/")  # from another folder
    assert check.wait(timeout=120) == 0, check.stderr.read()
    os.rename(tmp_path / "src", tmp_path / "moved")  # the originals move
    tar = out / manifest["shards"]["tars"][1]
    tar.write_bytes(tar.read_bytes()[:3000])  # a pack breaks off
    report = verify(out, progress=False)
    assert not report.ok and report.masks_checked == report.gpu_masks_checked == 12
    text = "\n".join(report.mismatches)
    assert "the originals of 12 of 12 pairs are not where the manifest says" in text
    assert f"{tar}: breaks at byte" in text and "of 3000" in text
    check = run_cli("verify", out, "--quiet", cwd="/")
    assert check.wait(timeout=120) == 1 and "Traceback" not in check.stderr.read()


# ---------------------------------------------------------------- the smaller traps
def test_a_full_disk_is_named_not_trusted(tmp_path):
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.decode().strip() or mounted.returncode})")
    try:
        data = dataset(tmp_path / "d", 40, 10, size=(120, 160))
        with pytest.raises(dl.LoadError, match=r"cannot write .*(No space left|disk full)"):
            prepare(data, disk / "out", progress=False)
        assert not (disk / "out").exists()
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_an_unwritable_cache_names_the_variable(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(dl.DataError, match="DALILOADER_CACHE"):
        dl.synthetic.default_dataset(n=2, image_size=(16, 16))


def test_a_long_file_name_is_prepared(tmp_path):
    data = dataset(tmp_path / "d", 2, 11)
    long = "x" * (255 - len("_L.png"))  # the mask's name is 255 bytes, the image's 253
    for path, name in ((data.images[0], long + ".jpg"), (data.masks[0], long + "_L.png")):
        os.rename(path, Path(path).parent / name)
    data = dl.SegmentationData.from_folder(tmp_path / "d")
    manifest = prepare(data, tmp_path / "out", pack_size=2, progress=False)
    assert all(len(Path(f).name.encode()) <= 255 for pair in manifest["pairs"] for f in pair)
    assert verify(tmp_path / "out", progress=False).ok


def test_smaller_argument_traps_say_what_is_wrong(tmp_path, index_data):
    with pytest.raises(dl.SpecError, match="num_shards=64 is more than the 10 samples"):
        dl.make_plan(index_data, batch_size=2, num_shards=64)
    (tmp_path / "header.csv").write_text("name,r,g,b\n")
    with pytest.raises(dl.DataError, match=r"header\.csv: a header and no class"):
        dl.ClassMap.from_csv(tmp_path / "header.csv")
    (tmp_path / "twice.csv").write_text("name,r,g,b\nroad,1,2,3\nsky,4,5,6\nRoad,7,8,9\n")
    with pytest.raises(dl.DataError, match=r"twice\.csv:4: the class name 'Road' is already on line 2"):
        dl.ClassMap.from_csv(tmp_path / "twice.csv")
