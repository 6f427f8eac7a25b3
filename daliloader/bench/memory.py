"""Each loader's peak memory, alone in a process of its own (``bench --memory``).

A process that has imported TensorFlow, DALI and daliloader and loaded the dataset notes its resident
memory, builds one loader as the bench builds it, reads a few epochs of batches from it (the bench's
warm-up and more), and notes its peak resident memory (``VmHWM``): the loader's peak is the difference,
in MB. One process per loader, so that what one loader's libraries and buffers keep is not counted for
the next. Linux only (``/proc/self/status``).
"""

from __future__ import annotations

import itertools
import pickle
import subprocess
import sys
from dataclasses import dataclass

from ..data import SegmentationData

#: Batches each loader is read for: enough for its buffers to fill and its allocators to settle.
BATCHES = 40


@dataclass(frozen=True)
class Job:
    """What the child process measures: a loader (backend or reference) on ``data`` with the bench's recipe."""

    data: SegmentationData
    name: str
    batch_size: int
    image_size: tuple[int, int]
    label_mode: str
    workers: int


def peak_mb(job: Job, timeout: float = 600) -> float:
    """The loader's peak resident memory above the process's before it was built, in MB, measured in a
    child process; a RuntimeError says why where the child failed."""
    done = subprocess.run([sys.executable, "-m", "daliloader.bench.memory"], input=pickle.dumps(job),
                          capture_output=True, timeout=timeout)
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"measuring the memory of {job.name} failed (exit {done.returncode}): "
                           f"{done.stderr.decode(errors='replace').strip().splitlines()[-1:]}")
    return float(lines[-1])


def _status(field: str) -> float:
    """A ``/proc/self/status`` field in kB, as MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _child() -> None:
    """Measure the job read from stdin (see the module's docstring); print the peak in MB."""
    job = pickle.loads(sys.stdin.buffer.read())
    import tensorflow  # noqa: F401  (imported before the baseline: every loader's process has it)
    from nvidia.dali import fn  # noqa: F401

    from .sources import backend_stream, bench_plan
    from .timing import touch

    plan = bench_plan(job.data, job.batch_size, job.image_size, job.label_mode)
    with open("/proc/self/clear_refs", "w") as fh:  # the peak so far (imports, the dataset) forgotten
        fh.write("5")
    before = _status("VmRSS")
    stream = backend_stream(job.name, plan, job.workers)
    for batch in itertools.islice(stream, BATCHES):
        touch(batch)
    print(round(_status("VmHWM") - before, 1), flush=True)
    stream.close()


if __name__ == "__main__":
    _child()
