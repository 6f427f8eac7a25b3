"""Nothing lost, nothing mixed: what a careless or unlucky user does to the loader. Symlinked folders are
followed; an unreadable folder is reported; corrupt image data is caught by check; a file changed since it
was vetted is vetted again; full disks and read-only caches get one clear line.

Full disks are small tmpfs mounts: the tests that need one skip, saying why, where mounting is not
allowed. (prepare, verify and the folders they write: tests/test_prepare.py, test_verify.py,
test_folders.py, test_manifest.py.)"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from copies import dataset

import daliloader as dl
from daliloader.pairing import INCOMPLETE_MARKER


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
    assert line == f"  broken link: {root / 'images/part1/gone.jpg'} -> {tmp_path / 'nowhere.jpg'}, which does not exist"
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


# ---------------------------------------------------------------- corrupt data
def test_check_catches_corrupt_jpeg_data_whatever_the_damage(tmp_path, capsys):
    """2000 random bytes in the middle of a JPEG, header and end marker intact, 20 draws of them: the
    loaders' decoders accept every one (they only warn); check flags every one, naming the file."""
    from daliloader.cli import main as cli

    data = dataset(tmp_path / "d", 3, 7, size=(240, 320))
    path = Path(data.images[1])
    clean = path.read_bytes()
    for seed in range(20):
        raw = bytearray(clean)
        middle = len(raw) // 2
        raw[middle:middle + 2000] = np.random.default_rng(seed).integers(0, 256, 2000, dtype=np.uint8).tobytes()
        path.write_bytes(bytes(raw))
        assert cv2.imdecode(np.frombuffer(bytes(raw), np.uint8), cv2.IMREAD_COLOR) is not None  # decoders accept it
        report = dl.check(data, workers=1)
        assert [(p.kind, p.path) for p in report.problems] == [("corrupt", str(path))], seed
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


def test_a_same_size_replacement_with_its_old_mtime_is_vetted_again(tmp_path):
    """cp -p, rsync -t and tar carry the modification time over: a replacement of the same size, with
    the old mtime, is still a new file (inode, change time), vetted again."""
    from daliloader.guard import PairGuard

    data = dataset(tmp_path / "d", 2, 14)
    guard = PairGuard(data)
    guard.verify(1)
    mask = Path(data.masks[1])
    old = mask.stat()
    small = cv2.imencode(".png", np.zeros((30, 30, 3), np.uint8))[1].tobytes()
    assert len(small) < old.st_size
    mask.with_suffix(".new").write_bytes(small + bytes(old.st_size - len(small)))  # padded to the same size
    os.utime(mask.with_suffix(".new"), ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(mask.with_suffix(".new"), mask)
    assert (mask.stat().st_size, mask.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    with pytest.raises(dl.LoadError, match=f"{mask}: mask is 30x30 but its image is 64x48"):
        guard.verify(1)


# ---------------------------------------------------------------- full disks, unwritable caches
def test_a_disk_that_fills_while_synth_writes_is_one_line(tmp_path, tmpfs, capsys):
    from daliloader.cli import main as cli

    disk = tmpfs(tmp_path / "small", "size=64k")
    assert cli(["synth", str(disk / "s"), "--n", "40", "--image-size", "120,160"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"daliloader synth: error: cannot write {disk}/s/train") and \
        "no space left on the device" in err, err


def test_an_unwritable_cache_names_the_variable(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(dl.DataError, match=r"file is a file, not a folder; set DALILOADER_CACHE"):
        dl.synthetic.default_dataset(n=2, image_size=(16, 16))


def test_the_embedded_dataset_is_made_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    first = dl.synthetic.default_dataset(n=2, image_size=(16, 16))
    assert len(first) == 2 and first.images == dl.synthetic.default_dataset(n=2, image_size=(16, 16)).images
    assert not list((tmp_path / "cache").glob("*.incomplete-*"))


def test_smaller_argument_traps_say_what_is_wrong(tmp_path, index_data):
    with pytest.raises(dl.SpecError, match="num_shards=64 is more than the 10 samples"):
        dl.make_plan(index_data, batch_size=2, num_shards=64)
    (tmp_path / "header.csv").write_text("name,r,g,b\n")
    with pytest.raises(dl.DataError, match=r"header\.csv: a header and no class"):
        dl.ClassMap.from_csv(tmp_path / "header.csv")
    (tmp_path / "twice.csv").write_text("name,r,g,b\nroad,1,2,3\nsky,4,5,6\nRoad,7,8,9\n")
    with pytest.raises(dl.DataError, match=r"twice\.csv:4: the class name 'Road' is already on line 2"):
        dl.ClassMap.from_csv(tmp_path / "twice.csv")


def test_explicit_pairs_inside_an_unfinished_prepare_are_refused(tmp_path):
    data = dataset(tmp_path / "d", 3, 11)
    (Path(data.images[0]).parent.parent / INCOMPLETE_MARKER).write_text("")
    with pytest.raises(dl.DataError, match="unfinished output of a `daliloader prepare`"):
        dl.SegmentationData.from_pairs(list(zip(data.images, data.masks)), data.classes)
