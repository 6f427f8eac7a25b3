"""Helpers for the tests of prepared copies and of the folders they are written into: small datasets, a
prepared copy rewritten as format version 2 wrote it, and child processes (the command line as a
terminal runs it, children that begin together, a prepare that pauses mid-copy until released)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import PALETTE, block_labels, write_pairs

import daliloader as dl

PY = sys.executable
#: A child process's start: it says it is ready (a file beside the start file, named by its first
#: argument), then waits for the start file, so that two processes begin their work together.
WAIT = ("import os, sys, time\nopen(f'{sys.argv[1]}.ready.{os.getpid()}', 'w').close()\n"
        "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.005)\n")
#: The command line as a user's terminal runs it: Ctrl-C raises KeyboardInterrupt even where this test
#: process inherited SIGINT ignored (a shell's background job does that), which Python would keep.
AS_FROM_A_TERMINAL = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"
CLI = "import runpy; runpy.run_module('daliloader.cli', run_name='__main__', alter_sys=True)"
#: Code that makes the ``prepare`` of this process pause after writing its ``DALILOADER_TEST_PAUSE_AFTER``-th
#: file (the env names the count and the files), saying so (it makes the file ``DALILOADER_TEST_PAUSED``),
#: until the file ``DALILOADER_TEST_RELEASE`` exists, a Ctrl-C reaches the main thread, or a minute
#: passed: a signal sent then lands mid-copy, however fast or loaded the machine is.
PAUSE = """
import os, signal, threading, time
import daliloader.preparation as _prepare
_real, _count, _lock, _interrupted = _prepare.write_file, [0], threading.Lock(), threading.Event()
def _paused(path, blob):
    _real(path, blob)
    with _lock:
        _count[0] += 1
        now = _count[0] == int(os.environ["DALILOADER_TEST_PAUSE_AFTER"])
    if now:
        open(os.environ["DALILOADER_TEST_PAUSED"], "w").close()
        deadline = time.time() + 60
        while not (os.path.exists(os.environ["DALILOADER_TEST_RELEASE"]) or _interrupted.is_set()
                   or time.time() > deadline):
            time.sleep(0.005)
def _on_ctrl_c(signum, frame):
    _interrupted.set()
    raise KeyboardInterrupt
_prepare.write_file = _paused
signal.signal(signal.SIGINT, _on_ctrl_c)
"""


def dataset(root: Path, n: int, seed: int, size=(48, 64)) -> dl.SegmentationData:
    """``n`` JPEG photos with RGB colour masks of blocks, CamVid's layout, in ``root``."""
    rng = np.random.default_rng(seed)
    labels = [block_labels(rng, *size) for _ in range(n)]
    images = [rng.integers(0, 256, size + (3,), np.uint8) for _ in range(n)]
    return write_pairs(root, images, [PALETTE[lab] for lab in labels], image_ext="jpg")


def colour_dataset(root: Path) -> dl.SegmentationData:
    """PNG photos with RGB colour masks; one mask carries a colour outside the palette (35 pixels)."""
    rng = np.random.default_rng(3)
    labels = [block_labels(rng, 40, 56) for _ in range(6)]
    masks = [PALETTE[lab] for lab in labels]
    masks[2][:5, :7] = (3, 2, 1)  # unknown colour: 35 pixels
    images = [rng.integers(0, 256, (40, 56, 3), dtype=np.uint8) for _ in labels]
    return write_pairs(root, images, masks)


def src(data: dl.SegmentationData) -> Path:
    """The dataset's root folder."""
    return Path(data.images[0]).parent.parent


def env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(Path.cwd()), **extra}


def run_cli(*args, cwd=None, code: str = "", **kw) -> subprocess.Popen:
    """``daliloader ARGS`` in a child process, as a terminal runs it, after ``code`` (e.g. :data:`PAUSE`)."""
    return subprocess.Popen([PY, "-c", "\n".join((AS_FROM_A_TERMINAL, code, CLI)), *map(str, args)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kw.pop("env", env()), **kw)


def paused_prepare(tmp_path: Path, data: dl.SegmentationData, out: Path, *args, after: int = 2) -> subprocess.Popen:
    """``daliloader prepare DATA OUT ARGS`` in a child process that pauses after writing ``after`` files
    (:data:`PAUSE`); returns once it has paused (release it with :func:`release`)."""
    paused, release_file = tmp_path / "paused", tmp_path / "release"
    paused.unlink(missing_ok=True)
    release_file.unlink(missing_ok=True)
    run = run_cli("prepare", src(data), out, *args, code=PAUSE,
                  env=env(DALILOADER_TEST_PAUSE_AFTER=str(after), DALILOADER_TEST_PAUSED=str(paused),
                          DALILOADER_TEST_RELEASE=str(release_file)))
    deadline = time.time() + 120
    while not paused.exists() and run.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert paused.exists(), run.stderr.read() if run.poll() is not None else "the child never paused"
    return run


def release(tmp_path: Path) -> None:
    """Let the child that :func:`paused_prepare` started go on."""
    (tmp_path / "release").touch()


def together(setup: str, code: str, runs: list[tuple], tmp_path: Path, **kw) -> list[subprocess.Popen]:
    """Start ``setup`` (imports), then ``code``, in one new Python per ``runs`` entry (its ``sys.argv[2:]``),
    all beginning ``code`` at one moment; the processes, running."""
    go = tmp_path / "go"
    started = [subprocess.Popen([PY, "-c", setup + "\n" + WAIT + code, str(go), *map(str, args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=kw.get("env", env())) for args in runs]
    deadline = time.time() + 60
    while len(list(tmp_path.glob("go.ready.*"))) < len(runs) and time.time() < deadline:
        time.sleep(0.01)
    go.touch()
    return started


def finished(run: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a child, once it ends."""
    out, err = run.communicate(timeout=timeout)
    return run.returncode, out, err


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
    fh = open(disk / "filler", "wb", buffering=0)  # noqa: SIM115  (closing a full disk's file may fail)
    try:
        while True:
            fh.write(block)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        with contextlib.suppress(OSError):
            fh.close()


def as_version_2(copy: Path) -> dict:
    """Rewrite the prepared copy ``copy`` (format version 3) as format version 2 wrote it: the packs in
    ``shards/``, under the manifest key "shards", their size "samples_per_shard"; returns the manifest."""
    manifest = json.loads((copy / "manifest.json").read_text())
    packs = manifest.pop("packs")
    if packs is not None:
        os.rename(copy / "packs", copy / "shards")
        packs = {("samples_per_shard" if k == "samples_per_pack" else k): v for k, v in packs.items()}
        for key in ("tars", "indexes"):
            packs[key] = [p.replace("packs/", "shards/", 1) for p in packs[key]]
    manifest = {**manifest, "version": 2, "shards": packs}
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def copy_of(prepared: Path, to: Path) -> Path:
    shutil.copytree(prepared, to)
    return to
