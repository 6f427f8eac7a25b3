"""Running a function over many files on all cores, with a progress bar: what check, prepare, verify
and class inference do (OpenCV, Pillow and file reads release the GIL, so threads suffice)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor


def threaded_map(fn, items, workers: int | None = None, description: str | None = None):
    """``fn`` over ``items`` on ``workers`` threads (default: all cores), in order, with a transient
    progress bar when a ``description`` is given."""
    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        results = pool.map(fn, items)
        if description:
            from rich.progress import track

            results = track(results, total=len(items), description=description, transient=True)
        yield from results
