"""Nothing lost, nothing mixed: what a careless or unlucky user does to the loader, with real processes
where the case is about processes. prepare is atomic and exclusive (also into an empty mount point or
a link to an empty folder); symlinked folders are followed; corrupt image data is caught by check;
verify reports instead of crashing; full disks, read-only folders and long names get one clear line.

Full and read-only disks are small tmpfs mounts: the tests that need one skip, saying why, where
mounting is not allowed."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import cv2
import numpy as np
import pytest

import daliloader as dl
from conftest import PALETTE, block_labels, write_pairs
from daliloader.pairing import INCOMPLETE_MARKER
from daliloader.folders import atomic_folder
from daliloader.prepare import MANIFEST, prepare, verify

PY = sys.executable
#: A child process's start: it says it is ready (a file beside the start file, named by its first
#: argument), then waits for the start file, so that two processes begin their work together.
WAIT = ("import os, sys, time\nopen(f'{sys.argv[1]}.ready.{os.getpid()}', 'w').close()\n"
        "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.005)\n")


def dataset(root: Path, n: int, seed: int, size=(48, 64)) -> dl.SegmentationData:
    rng = np.random.default_rng(seed)
    labels = [block_labels(rng, *size) for _ in range(n)]
    images = [rng.integers(0, 256, size + (3,), np.uint8) for _ in range(n)]
    return write_pairs(root, images, [PALETTE[lab] for lab in labels], image_ext="jpg")


def env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(Path.cwd()), **extra}


#: The command line as a user's terminal runs it: Ctrl-C raises KeyboardInterrupt even where this test
#: process inherited SIGINT ignored (a shell's background job does that), which Python would keep.
AS_FROM_A_TERMINAL = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "runpy.run_module('daliloader.cli', run_name='__main__', alter_sys=True)")


def run_cli(*args, cwd=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([PY, "-c", AS_FROM_A_TERMINAL, *map(str, args)], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=kw.pop("env", env()), **kw)


def together(setup: str, code: str, runs: list[tuple], tmp_path: Path, **kw) -> list[tuple[int, str, str]]:
    """Run ``setup`` (imports), then ``code``, in one new Python per ``runs`` entry (its ``sys.argv[2:]``),
    all beginning ``code`` at one moment; their (exit status, stdout, stderr)."""
    go = tmp_path / "go"
    started = [subprocess.Popen([PY, "-c", setup + "\n" + WAIT + code, str(go), *map(str, args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=kw.get("env", env())) for args in runs]
    deadline = time.time() + 60
    while len(list(tmp_path.glob("go.ready.*"))) < len(runs) and time.time() < deadline:
        time.sleep(0.01)
    go.touch()
    return [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in started]


def src(data: dl.SegmentationData) -> Path:
    return Path(data.images[0]).parent.parent


def refused_everywhere(folder: Path) -> None:
    """No loader and no check accepts ``folder``: each names it as the unfinished output of a prepare."""
    for attempt in (lambda: dl.SegmentationData.from_folder(folder), lambda: dl.SegmentationData.from_prepared(folder),
                    lambda: dl.check(folder), lambda: dl.SegmentationData.from_dirs(folder / "images",
                                                                                    folder / "masks", 32)):
        with pytest.raises(dl.DataError, match="unfinished output of a `daliloader prepare`"):
            attempt()


def fill(disk: Path) -> None:
    """Write zeros into ``disk`` until it is full."""
    block = bytes(4096)
    fh = open(disk / "filler", "wb", buffering=0)
    try:
        while True:
            fh.write(block)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        try:
            fh.close()
        except OSError:
            pass


# ---------------------------------------------------------------- prepare: atomic and exclusive
def test_two_concurrent_prepares_into_one_folder_exactly_one_succeeds(tmp_path):
    """Both start at one moment (a start file) on 200 pairs: the second finds the first at work."""
    a, b = dataset(tmp_path / "a", 200, 1), dataset(tmp_path / "b", 200, 2)
    out = tmp_path / "out"
    results = together("from daliloader.cli import main\nimport daliloader.prepare", "sys.exit(main(sys.argv[2:]))",
                       [("prepare", src(d), out, "--packs", "50", "--quiet") for d in (a, b)], tmp_path)
    assert sorted(rc for rc, _, _ in results) == [0, 2], results
    loser = next(err for rc, _, err in results if rc == 2)
    assert f"{out} is being written by daliloader prepare, pid" in loser and loser.count("\n") == 1, loser
    assert verify(out, progress=False).ok  # one dataset, whole: no image of one beside the mask of the other
    assert not list(tmp_path.glob("out.incomplete-*")) and not list(tmp_path.glob(".out.lock.owner*"))


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_an_interrupted_prepare_leaves_nothing_a_loader_or_check_accepts(tmp_path, how):
    data = dataset(tmp_path / "src", 600, 3, size=(96, 128))
    out = tmp_path / "out"
    run = run_cli("prepare", src(data), out, "--quiet", "--workers", "1")
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
    leftovers = list(tmp_path.glob("out.incomplete-*"))
    assert len(leftovers) == (1 if how == "SIGKILL" else 0)
    for leftover in leftovers:  # SIGKILL leaves one: marked, refused everywhere
        refused_everywhere(leftover)
    with pytest.warns(UserWarning, match="the leftover of an interrupted") if how == "SIGKILL" else nullcontext() as seen:
        prepare(data, out, progress=False)  # the rerun cleans up, says so, and succeeds
    if seen is not None:  # the warning points at the caller's line, not at contextlib's
        assert [Path(w.filename).name for w in seen] == [Path(__file__).name]
    assert not list(tmp_path.glob("out.incomplete-*")) and verify(out, progress=False).ok


@pytest.mark.parametrize("kind", ["mount point", "link to an empty folder"])
def test_prepare_into_an_existing_empty_folder_that_cannot_be_renamed(tmp_path, tmpfs, kind):
    """An empty mount point, or a link to an empty folder: written in place (no rename can replace
    them), marked until done. Killed midway, it loads nowhere; the rerun empties it, says so in one
    line, and succeeds."""
    data = dataset(tmp_path / "src", 600, 12, size=(96, 128))
    out = tmp_path / "out"
    if kind == "mount point":
        tmpfs(out, "size=64m")
        (out / "lost+found").mkdir()  # as on a freshly made ext4: still an empty disk
    else:
        (tmp_path / "target").mkdir()
        out.symlink_to(tmp_path / "target")
    run = run_cli("prepare", src(data), out, "--quiet", "--workers", "1")
    deadline = time.time() + 120
    while not list(out.glob("masks/*.png")) and time.time() < deadline:
        time.sleep(0.05)
    run.kill()
    assert run.wait(timeout=60) == -9
    assert (out / INCOMPLETE_MARKER).exists() and not list(tmp_path.glob("out.incomplete-*"))
    refused_everywhere(out)
    again = run_cli("prepare", src(data), out, "--quiet")
    assert again.wait(timeout=120) == 0
    err = again.stderr.read()
    assert err == f"daliloader prepare: warning: emptied {out}: it held the leftover of an interrupted daliloader " \
                  "prepare\n", err
    assert not (out / INCOMPLETE_MARKER).exists() and verify(out, progress=False).ok
    assert len(dl.SegmentationData.from_folder(out)) == 600
    if kind == "link to an empty folder":
        assert out.is_symlink() and (tmp_path / "target" / MANIFEST).exists()
    else:
        assert (out / "lost+found").is_dir()


def test_a_second_ctrl_c_during_the_cleanup_leaves_only_a_marked_folder(tmp_path, monkeypatch):
    """The first Ctrl-C starts the removal of what was written; a second one may land at any point of it.
    Wherever it lands, what stays is marked (the marker goes last) or empty, and the next run removes it."""
    out = tmp_path / "out"

    def interrupted_at(k: int) -> bool:
        """Write a copy, interrupt it, and interrupt its cleanup at the k-th removal; False: the cleanup
        ended before."""
        calls = {"n": 0}
        unlink, rmdir = os.unlink, os.rmdir

        def counted(real):
            def call(*args, **kwargs):
                calls["n"] += 1
                if calls["n"] == k:
                    raise KeyboardInterrupt  # the second Ctrl-C
                return real(*args, **kwargs)
            return call

        with pytest.raises(KeyboardInterrupt):
            with atomic_folder(out) as folder:
                for sub in ("images", "masks"):
                    (folder / sub).mkdir()
                    for i in range(3):
                        (folder / sub / f"{i}.png").write_bytes(b"x")
                (folder / MANIFEST).write_text("{}")
                monkeypatch.setattr(os, "unlink", counted(unlink))
                monkeypatch.setattr(os, "rmdir", counted(rmdir))
                raise KeyboardInterrupt  # the first Ctrl-C
        monkeypatch.undo()
        return calls["n"] >= k

    k = 1
    while interrupted_at(k):
        left = list(tmp_path.glob("out.incomplete-*"))
        for folder in left:
            assert (folder / INCOMPLETE_MARKER).exists() or not any(folder.iterdir()), (k, sorted(folder.rglob("*")))
        marked = any((folder / INCOMPLETE_MARKER).exists() for folder in left)
        with pytest.warns(UserWarning, match="leftover of an interrupted") if marked else nullcontext():
            with atomic_folder(out):  # the next run removes it
                pass
        out.rmdir()
        assert not list(tmp_path.glob("out.incomplete-*"))
        k += 1
    assert k > 8  # the removal was interrupted at each of its steps


def test_leftovers_removed_only_when_marked_and_named_when_they_cannot_be(tmp_path, tmpfs):
    out = tmp_path / "out"
    foreign = tmp_path / "out.incomplete-mine1234"  # not made by daliloader: no marker
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    stuck = tmp_path / "out.incomplete-stuck123"  # marked, but holds a mount point: cannot be removed
    stuck.mkdir()
    (stuck / INCOMPLETE_MARKER).touch()
    tmpfs(stuck / "busy")
    with pytest.warns(UserWarning, match=rf"could not remove {stuck}, the leftover .*busy.*: delete it") as seen:
        with atomic_folder(out) as folder:
            (folder / "done").touch()
    assert not any("removed" in str(w.message) and "could not" not in str(w.message) for w in seen)
    assert (foreign / "notes.txt").exists() and (stuck / INCOMPLETE_MARKER).exists() and (out / "done").exists()


def test_a_refused_run_never_names_a_dead_holder(tmp_path):
    """A killed run leaves its note; the next holder replaces it a moment after taking the lock, and a
    run refused in between must not name the dead process."""
    from daliloader.folders import _holder

    gone = subprocess.Popen([PY, "-c", "pass"])
    gone.wait()
    owner = tmp_path / ".out.lock.owner"
    owner.write_text(f"daliloader prepare, pid {gone.pid} on {socket.gethostname()}, since 2026-01-01 00:00:00")
    assert _holder(owner, wait=0.2) == "another process"
    owner.write_text(f"daliloader prepare, pid {os.getpid()} on {socket.gethostname()}, since 2026-01-01 00:00:00")
    assert _holder(owner, wait=0.2).startswith(f"daliloader prepare, pid {os.getpid()}")


def test_two_benches_wait_for_the_cached_copies_instead_of_failing(tmp_path):
    """Two `bench` runs at once on a fresh cache: the embedded dataset and the prepared copy are each
    made by one, while the other waits, then uses them."""
    results = together("from daliloader.bench import prepared_copy\nfrom daliloader.synthetic import default_dataset",
                       "data = default_dataset(n=120, image_size=(48, 64))\nprint(prepared_copy(data, 'cache'))",
                       [(), ()], tmp_path, env=env(DALILOADER_CACHE=str(tmp_path / "cache")))
    assert [rc for rc, _, _ in results] == [0, 0], results
    made = [out.strip().splitlines()[-1] for _, out, _ in results]
    assert made[0] == made[1] and verify(made[0], progress=False).ok
    assert "is being written by" in results[0][2] + results[1][2] and "waiting for it to finish" in \
        results[0][2] + results[1][2]
    assert not list((tmp_path / "cache").glob("*.incomplete-*"))


def test_the_bench_cache_left_unfinished_by_an_older_version_is_made_again(tmp_path, monkeypatch):
    from daliloader.bench import prepared_copy

    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    data = dataset(tmp_path / "src", 6, 4)
    first = prepared_copy(data, "cache")
    (first / MANIFEST).unlink()  # as an interrupted older version left it
    with pytest.warns(UserWarning, match="an unfinished copy that an older daliloader left in the cache"):
        again = prepared_copy(data, "cache")
    assert again == first and verify(again, progress=False).ok


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
    from daliloader.checks import PairGuard

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


# ---------------------------------------------------------------- verify never crashes
def test_verify_reports_from_anywhere_after_sources_moved_and_on_a_truncated_pack(tmp_path):
    dataset(tmp_path / "src", 12, 9)
    out = tmp_path / "out"
    run = run_cli("prepare", "src", "out", "--packs", "5", "--quiet", cwd=tmp_path)  # relative to where it ran
    assert run.wait(timeout=120) == 0, run.stderr.read()
    manifest = json.loads((out / MANIFEST).read_text())
    assert all(os.path.isabs(p) for p in manifest["source"]["images"] + manifest["source"]["masks"])
    check = run_cli("verify", out, "--quiet", cwd="/")  # from another folder
    assert check.wait(timeout=120) == 0, check.stderr.read()
    assert "12 masks (and 12 of their LZ4 forms) equal the mapping of their originals" in check.stdout.read()
    os.rename(tmp_path / "src", tmp_path / "moved")  # the originals move
    tar = out / manifest["shards"]["tars"][1]
    tar.write_bytes(tar.read_bytes()[:3000])  # a pack breaks off
    report = verify(out, progress=False)
    assert not report.ok and report.originals_missing == 12 and report.masks_checked == 0
    assert report.gpu_masks_checked == 12  # against the prepared PNG masks, the originals gone
    text = "\n".join(report.mismatches)
    assert "the originals of 12 of 12 pairs are not where the manifest says" in text
    assert f"{tar}: breaks at byte" in text and "of 3000" in text
    assert "equal the mapping" not in str(report).splitlines()[0]
    assert "12 pairs not compared with their originals, which are missing" in str(report).splitlines()[0]
    check = run_cli("verify", out, "--quiet", cwd="/")
    assert check.wait(timeout=120) == 1 and "Traceback" not in check.stderr.read()


# ---------------------------------------------------------------- full and read-only disks, long names
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


def test_an_already_full_disk_is_one_line_and_leaves_nothing(tmp_path, tmpfs, capsys):
    from daliloader.cli import main as cli

    disk = tmpfs(tmp_path / "full", "size=64k")
    fill(disk)
    data = dataset(tmp_path / "d", 4, 15)
    with pytest.raises(dl.LoadError, match=rf"^cannot write {disk}/\.out\.lock\.owner\.\d+, the lock's note beside "
                                           rf"{disk}/out: no space left on the device .*choose another OUT$"):
        prepare(data, disk / "out", progress=False)
    assert sorted(p.name for p in disk.iterdir()) == [".out.lock", "filler"]
    assert cli(["prepare", str(src(data)), str(disk / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left on the device" in err
    assert cli(["synth", str(disk / "s"), "--n", "3", "--image-size", "48,64"]) == 2  # synth too
    err = capsys.readouterr().err
    assert err.startswith(f"daliloader synth: error: cannot write {disk}/s/") and err.count("\n") == 1, err
    assert "no space left on the device" in err


def test_a_disk_that_fills_while_synth_writes_is_one_line(tmp_path, tmpfs, capsys):
    from daliloader.cli import main as cli

    disk = tmpfs(tmp_path / "small", "size=64k")
    assert cli(["synth", str(disk / "s"), "--n", "40", "--image-size", "120,160"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"daliloader synth: error: cannot write {disk}/s/train") and \
        "no space left on the device" in err, err


def test_read_only_folders_and_files_in_the_way_are_named(tmp_path, tmpfs, monkeypatch):
    from daliloader.bench import prepared_copy

    ro = tmpfs(tmp_path / "ro", "ro", "size=64k")
    data = dataset(tmp_path / "d", 2, 16)
    monkeypatch.setenv("DALILOADER_CACHE", str(ro / "sub"))
    with pytest.raises(dl.DataError, match=rf"cannot make the folder {ro}/sub: the file system is read-only: set "
                                           rf"DALILOADER_CACHE to a writable folder .*now {ro}/sub\)$"):
        prepared_copy(data, "cache")
    with pytest.raises(dl.DataError, match="DALILOADER_CACHE"):
        dl.synthetic.default_dataset(n=2, image_size=(16, 16))
    for out in (ro / "sub" / "out", ro / "out"):  # no cache involved: no word of it
        with pytest.raises(dl.DataError, match="the file system is read-only: choose another OUT$") as e:
            prepare(data, out, progress=False)
        assert "DALILOADER_CACHE" not in str(e.value)
    (tmp_path / "k.out").write_text("a file")
    with pytest.raises(dl.DataError, match=rf"cannot make the folder {tmp_path}/k.out/x: {tmp_path}/k.out is a file, "
                                           "not a folder; choose another OUT"):
        prepare(data, tmp_path / "k.out" / "x" / "out", progress=False)


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


@pytest.mark.parametrize("length", [237, 246, 255])
def test_long_out_names_get_their_lock_and_temporary_folder(tmp_path, length):
    data = dataset(tmp_path / "d", 2, 17)
    out = tmp_path / ("o" * length)
    prepare(data, out, pack_size=2, progress=False)
    assert verify(out, progress=False).ok
    assert all(len(p.name.encode()) <= 255 for p in tmp_path.iterdir())
    with pytest.raises(dl.DataError, match="already holds a prepared dataset"):
        prepare(data, out, progress=False)


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


def test_explicit_pairs_inside_an_unfinished_prepare_are_refused(tmp_path):
    data = dataset(tmp_path / "d", 3, 11)
    (Path(data.images[0]).parent.parent / INCOMPLETE_MARKER).write_text("")
    with pytest.raises(dl.DataError, match="unfinished output of a `daliloader prepare`"):
        dl.SegmentationData.from_pairs(list(zip(data.images, data.masks)), data.classes)


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
