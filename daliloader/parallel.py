"""Running a function over many files on all cores, with a progress bar: what check, prepare, verify
and class inference do (OpenCV, Pillow and file reads release the GIL, so threads suffice)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


def cores() -> int:
    """The cores this process may run on: what "every core" means in each default of threads. That is its
    CPU affinity where the platform has one (``taskset``, a container's cpuset, a batch scheduler's
    share), which can be far fewer than the machine's (``os.cpu_count()``, the fallback; 1 where it
    cannot tell): threads beyond it only wait for each other."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


#: The pools of :func:`mapped`, by thread count, kept for the process.
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def mapped(fn, items, workers: int = 1) -> list:
    """``fn`` over ``items``, in order, for the streams TensorFlow calls back into (a chunk of a tf.data
    pipeline at a time): in the calling thread where ``workers`` is 1 (local reads, which wait on
    nothing), else on a pool of ``workers`` threads kept for the process (fetches, which wait on the
    network). No pool is made and shut down per call: that is what two of TensorFlow's threads were doing
    when a test run hung, one waiting inside ``ThreadPoolExecutor.submit`` on a lock the other held
    (docs/design.md, "A hang in the streams")."""
    if workers <= 1:
        return [fn(item) for item in items]
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix=f"daliloader-{workers}")
    return list(pool.map(fn, items))


def threaded_map(fn, items, workers: int | None = None, description: str | None = None):
    """``fn`` over ``items`` on ``workers`` threads (default: all cores), in order, with a transient
    progress bar when a ``description`` is given (see :func:`progress`).

    Left early (an error, Ctrl-C, the caller closing it), the items not started are cancelled and those
    running are waited for: nothing runs on behind the caller's back (the cleanup of an interrupted
    ``prepare`` raced its workers' writes). A caller that does work of its own between items closes it
    on leaving (``contextlib.closing``): an interrupt in its own code leaves the generator suspended."""
    pool = ThreadPoolExecutor(workers or cores())
    try:
        yield from progress(pool.map(fn, items), len(items), description)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def progress(items, total: int, description: str | None):
    """``items``, with a transient progress bar of ``description`` on stderr where stderr is a terminal
    (or a notebook); elsewhere, and without a description, ``items`` as they are. The bar writes nothing
    where it is not shown (rich's bar ends a non-terminal output with a blank line), and nothing to
    stdout, so that a command's output piped or captured holds only its results."""
    if not description:
        return items
    from rich.console import Console
    from rich.progress import track

    console = Console(stderr=True)
    if not (console.is_interactive or console.is_jupyter):
        return items
    return track(items, total=total, description=description, transient=True, console=console)
