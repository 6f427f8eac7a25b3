"""Folders written whole or not at all (daliloader.folders): a lock that refuses a second writer naming
the first, a marked temporary folder renamed into place (or an empty folder written in place), an
interruption that leaves nothing any loader accepts and leftovers the next run removes; caches made
once while a second process waits; full disks, read-only folders and long names in one clear line.
Real processes where the case is about processes (a kill midway, two benches at once)."""

from __future__ import annotations

import os
import socket
import subprocess
from contextlib import nullcontext
from pathlib import Path

import pytest
from copies import PY, dataset, env, fill, finished, paused_prepare, refused_everywhere, src, together

import daliloader as dl
from daliloader.cli import main as cli
from daliloader.folders import _beside, atomic_folder, exclusive
from daliloader.pairing import INCOMPLETE_MARKER
from daliloader.preparation import MANIFEST, prepare, verify


@pytest.mark.parametrize("kind", ["mount point", "link to an empty folder"])
def test_prepare_into_an_existing_empty_folder_that_cannot_be_renamed(tmp_path, tmpfs, kind, capsys):
    """An empty mount point, or a link to an empty folder: written in place (no rename can replace
    them), marked until done. Killed midway (it pauses after its first files), it loads nowhere; the
    rerun empties it, says so in one line, and succeeds."""
    data = dataset(tmp_path / "src", 12, 12, size=(96, 128))
    out = tmp_path / "out"
    if kind == "mount point":
        tmpfs(out, "size=64m")
        (out / "lost+found").mkdir()  # as on a freshly made ext4: still an empty disk
    else:
        (tmp_path / "target").mkdir()
        out.symlink_to(tmp_path / "target")
    run = paused_prepare(tmp_path, data, out, "--quiet", "--workers", "1")
    assert list(out.glob("masks/*.png"))
    run.kill()
    assert finished(run, timeout=60)[0] == -9
    assert (out / INCOMPLETE_MARKER).exists() and not list(tmp_path.glob("out.incomplete-*"))
    refused_everywhere(out)
    assert cli(["prepare", str(src(data)), str(out), "--quiet"]) == 0  # the rerun, here: its stderr is the point
    err = capsys.readouterr().err
    assert err == f"daliloader prepare: warning: emptied {out}: it held the leftover of an interrupted daliloader " \
                  "prepare\n", err
    assert not (out / INCOMPLETE_MARKER).exists() and verify(out, progress=False).ok
    assert len(dl.SegmentationData.from_folder(out)) == 12
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

        with pytest.raises(KeyboardInterrupt), atomic_folder(out) as folder:
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
        warned = pytest.warns(UserWarning, match="leftover of an interrupted") if marked else nullcontext()
        with warned, atomic_folder(out):  # the next run removes it
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
    warned = pytest.warns(UserWarning, match=rf"could not remove {stuck}, the leftover .*busy.*: delete it")
    with warned as seen, atomic_folder(out) as folder:
        (folder / "done").touch()
    assert not any("removed" in str(w.message) and "could not" not in str(w.message) for w in seen)
    assert (foreign / "notes.txt").exists() and (stuck / INCOMPLETE_MARKER).exists() and (out / "done").exists()


def test_a_second_writer_is_refused_naming_the_first(tmp_path):
    """The lock on its own, in one process: what a second prepare into the same OUT meets."""
    out = tmp_path / "out"
    holder = f"daliloader prepare, pid {os.getpid()} on {socket.gethostname()}, since "
    lock = f"{tmp_path}/.out.lock".replace(".", r"\.")
    refused = pytest.raises(dl.DataError, match=rf"^{out} is being written by {holder}.* \(lock {lock}\); wait for it "
                                                "to finish, or choose another OUT$")
    with exclusive(out, "daliloader prepare"), refused, exclusive(out, "daliloader prepare"):
        pass
    with exclusive(out):  # released: the next one takes it
        pass
    assert not list(tmp_path.glob(".out.lock.owner*"))


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


# ---------------------------------------------------------------- caches: made once
def test_two_benches_wait_for_the_cached_copies_instead_of_failing(tmp_path):
    """Two `bench` runs at once on a fresh cache: the embedded dataset and the prepared copy are each
    made by one, while the other waits, then uses them."""
    runs = together("from daliloader.bench import prepared_copy\nfrom daliloader.synthetic import default_dataset",
                    "data = default_dataset(n=120, image_size=(48, 64))\nprint(prepared_copy(data, 'cache'))",
                    [(), ()], tmp_path, env=env(DALILOADER_CACHE=str(tmp_path / "cache")))
    results = [finished(run) for run in runs]
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


# ---------------------------------------------------------------- full and read-only disks, long names
def test_an_already_full_disk_is_one_line_and_leaves_nothing(tmp_path, tmpfs, capsys):
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


@pytest.mark.parametrize("length", [237, 246, 255])
def test_long_out_names_get_their_lock_and_temporary_folder(tmp_path, length):
    data = dataset(tmp_path / "d", 2, 17)
    out = tmp_path / ("o" * length)
    prepare(data, out, pack_size=2, progress=False)
    assert verify(out, progress=False).ok
    assert all(len(p.name.encode()) <= 255 for p in tmp_path.iterdir())
    with pytest.raises(dl.DataError, match="already holds a prepared dataset"):
        prepare(data, out, progress=False)


def test_names_beside_out_fit_and_stay_apart():
    short = Path("/x/out")
    assert _beside(short, ".", ".lock") == ".out.lock"
    a, b = Path("/x/" + "a" * 250 + "1"), Path("/x/" + "a" * 250 + "2")
    cut_a, cut_b = _beside(a, "", ".incomplete-", room=8), _beside(b, "", ".incomplete-", room=8)
    assert len(cut_a.encode()) + 8 == 255 and cut_a != cut_b and cut_a.endswith(".incomplete-")
    assert len(_beside(Path("/x/" + "é" * 127), ".", ".lock.owner").encode()) <= 255
