"""The progress bars of the threaded jobs (check, prepare, verify, reading class ids, the synthetic
dataset): shown on a terminal, where they leave nothing behind, and absent, not even as a blank line,
where the output is piped or captured (a script, a CI log, a notebook's captured cell)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import cv2
import numpy as np
import pytest

import daliloader as dl
from daliloader.cli import main
from daliloader.parallel import threaded_map


def test_a_map_keeps_the_order_and_writes_nothing_where_no_terminal_watches(capfd):
    assert list(threaded_map(lambda x: x * 2, range(5), 2, "doubling")) == [0, 2, 4, 6, 8]
    assert capfd.readouterr() == ("", "")


def test_reading_the_class_ids_of_the_masks_prints_nothing(tmp_path, capfd):
    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    for i in range(3):
        cv2.imwrite(str(tmp_path / "images" / f"{i}.png"), np.zeros((8, 8, 3), np.uint8))
        cv2.imwrite(str(tmp_path / "masks" / f"{i}.png"), np.full((8, 8), i, np.uint8))
    data = dl.SegmentationData.from_dirs(tmp_path / "images", tmp_path / "masks", classes=None)  # scanned
    assert data.classes.num_classes == 3
    assert capfd.readouterr() == ("", "")


def test_commands_piped_print_their_results_and_no_blank_line(tmp_path, capfd):
    assert main(["synth", str(tmp_path / "d"), "--n", "3", "--image-size", "16,24"]) == 0
    out, err = capfd.readouterr()
    assert out.splitlines() == [f"wrote SegmentationData(3 pairs, 32 classes, kind=rgb) to {tmp_path / 'd'}"]
    assert main(["check", str(tmp_path / "d")]) == 0
    out, err = capfd.readouterr()
    assert out.startswith("checked 3 pairs in ") and len(out.splitlines()) == 1, out


def test_on_a_terminal_the_bar_shows_and_leaves_no_blank_line(tmp_path):
    dl.synthetic.make_dataset(tmp_path / "d", n=3, image_size=(16, 24))
    raw = in_a_terminal([sys.executable, "-m", "daliloader.cli", "check", str(tmp_path / "d")])
    assert "checking pairs" in raw  # the bar was drawn
    shown = screen(raw)
    assert shown[0].startswith("checked 3 pairs in ") and not any(line.strip() for line in shown[1:]), shown


def in_a_terminal(argv: list[str]) -> str:
    """What a command writes to a pseudo terminal (stdout and stderr both), decoded."""
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"}
    process = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command ended and closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        process.wait(timeout=120)
    return b"".join(chunks).decode(errors="replace")


def screen(raw: str) -> list[str]:
    """The lines a terminal shows once it has printed ``raw``: text, carriage returns, newlines, and the
    cursor-up and erase-line sequences a transient bar uses; other sequences (colours, the cursor's
    visibility) change no text."""
    rows, row, col = [""], 0, 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", raw):
        if token == "\n":
            row, col = row + 1, 0
            rows += [""] * (row + 1 - len(rows))
        elif token == "\r":
            col = 0
        elif token.startswith("\x1b[") and token.endswith("A"):
            row = max(0, row - int(token[2:-1] or 1))
        elif token.startswith("\x1b[") and token.endswith("K"):
            rows[row] = "" if token[2:-1] == "2" else rows[row][:col]
        elif not token.startswith("\x1b"):
            rows[row] = rows[row][:col].ljust(col) + token + rows[row][col + len(token):]
            col += len(token)
    return rows


def test_a_map_left_early_cancels_what_has_not_started_and_waits_for_what_runs():
    """An interrupted prepare removed what it had written while its workers went on writing, leaving a
    part behind: leaving the map (closing it, an error, Ctrl-C) now cancels the items not started and
    waits for those running, so nothing runs on behind the caller's back."""
    import threading
    import time
    from contextlib import closing

    from daliloader.parallel import threaded_map

    started, running, lock = [], [0], threading.Lock()

    def slow(i):
        with lock:
            started.append(i)
            running[0] += 1
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return i

    with closing(threaded_map(slow, range(100), workers=2)) as results:
        assert next(results) == 0
    assert running[0] == 0 and len(started) <= 6, started  # the rest cancelled, none left running
    done = len(started)
    time.sleep(0.2)
    assert len(started) == done


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_every_core_means_the_cores_the_process_may_run_on():
    """Under ``taskset`` or a container's cpuset a process may use fewer cores than the machine has: the
    threads' defaults (DALI's, the thread pools') and the bench's report count those, not the machine's."""
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "from daliloader.parallel import cores\nfrom daliloader.bench.machine import machine_info\n"
            "print(cores(), machine_info()['cpu_count'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]
