"""How the bench times a stream of batches: steady-state windows after a warm-up, and what makes a figure
doubtful.

A figure is items per second over timed windows of at least ``seconds`` each, taken after a warm-up
(``warmup_batches`` batches, then short windows until two in a row agree within :data:`STEADY`). A batch
is counted once it exists (:func:`touch` reads one element back). Nothing here knows a backend: a stream
is any callable that yields the next batch.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np

#: A timed window should hold at least this many batches for its rate to mean much.
MIN_BATCHES = 5
#: Warm-up goes on until two consecutive windows agree within this share, for at most STEADY_WINDOWS.
STEADY, STEADY_WINDOWS = 0.10, 8
#: A figure whose repeats spread by more than this share of its median is too noisy to divide by.
NOISY = 0.25
#: The shortest warm-up window and untimed drain window, in seconds.
SHORTEST_WINDOW = 0.05


class Rates(list):
    """Items/s of the timed windows, with how they were taken: batches per window, and whether the
    warm-up reached a steady rate."""

    def __init__(self, rates=(), batches=(), steady: bool = True):
        super().__init__(rates)
        self.batches, self.steady = list(batches), steady


def window(next_batch, batch_size: int, seconds: float, clock=time.perf_counter) -> tuple[float, int]:
    """Items/s and batches of one window: ``next_batch()`` called until ``seconds`` have passed on
    ``clock`` (at least once)."""
    n, start = 0, clock()
    while True:
        next_batch()
        n += 1
        elapsed = clock() - start
        if elapsed >= seconds:
            return n * batch_size / elapsed, n


def epoch_batches(pairs: int, batch_size: int) -> int:
    """The warm-up every figure takes first: one epoch's batches (at least one)."""
    return max(1, pairs // batch_size)


def short_window(seconds: float) -> float:
    """The length of a warm-up or drain window for timed windows of ``seconds``."""
    return max(seconds / 4, SHORTEST_WINDOW)


def least_warm_up(seconds: float) -> float:
    """The shortest :func:`warm_up` after its batches, for timed windows of ``seconds``: two short windows,
    since it compares two in a row."""
    return 2 * short_window(seconds)


def warm_up(next_batch, batch_size: int, seconds: float, warmup_batches: int, clock=time.perf_counter) -> bool:
    """``warmup_batches`` batches, then short windows until two in a row agree within :data:`STEADY` (at
    most :data:`STEADY_WINDOWS`); whether they did."""
    for _ in range(warmup_batches):
        next_batch()
    previous = None
    for _ in range(STEADY_WINDOWS):
        rate, _ = window(next_batch, batch_size, short_window(seconds), clock)
        if previous is not None and abs(rate - previous) <= STEADY * max(rate, previous):
            return True
        previous = rate
    return False


def measure(next_batch, batch_size: int, seconds: float, repeats: int, warmup_batches: int,
            clock=time.perf_counter) -> Rates:
    """Items/s of ``repeats`` windows of about ``seconds`` each, after :func:`warm_up`."""
    steady = warm_up(next_batch, batch_size, seconds, warmup_batches, clock)
    windows = [window(next_batch, batch_size, seconds, clock) for _ in range(repeats)]
    return Rates([r for r, _ in windows], [n for _, n in windows], steady)


def measure_in_turn(sources: list, batch_size: int, seconds: float, repeats: int, warmup_batches: int,
                    clock=time.perf_counter) -> list[Rates]:
    """:func:`measure` for several sources whose ratios matter (every loader of a label mode, the expert's
    among them), round by round, A B C A B C ...: each round opens each source in turn (``source()``
    gives an endless stream, closed once used), warms it up (:func:`warm_up`) and takes one timed window,
    so that a machine that slows down or speeds up during the run weighs on all of them alike, and no
    stream runs beside the one timed (a stream left open goes on filling its prefetch buffers, tf.data's
    up to a share of the machine's memory, which slowed the next one timed: docs/benchmarks.md). One
    :class:`Rates` per source, in order; it is steady where every warm-up was."""
    windows: list[list] = [[] for _ in sources]
    steady = [True for _ in sources]
    for _ in range(repeats):
        for k, source in enumerate(sources):
            stream = source()
            try:
                next_batch = partial(touched, stream)
                steady[k] = warm_up(next_batch, batch_size, seconds, warmup_batches, clock) and steady[k]
                windows[k].append(window(next_batch, batch_size, seconds, clock))
            finally:
                stream.close()
                gc.collect()  # what the stream left in cycles, freed here and not on a thread of the next one
    return [Rates([r for r, _ in w], [n for _, n in w], ok) for w, ok in zip(windows, steady)]


def timing_warnings(rates: Rates) -> list[str]:
    """What makes a measurement's figure doubtful, said plainly: a window of fewer than
    :data:`MIN_BATCHES` batches, a warm-up that never settled. The texts name no measurement: the bench
    makes each a warning about the figure or ceiling it measured (``record.BenchWarning``)."""
    found = []
    if rates.batches and min(rates.batches) < MIN_BATCHES:
        found.append(f"a timed window held {min(rates.batches)} batches (fewer than {MIN_BATCHES}): the figure is "
                     "noisy; raise --seconds")
    if not rates.steady:
        found.append(f"the warm-up did not reach a steady rate (two windows within {STEADY:.0%}): the machine is "
                     "busy or the loader still warming; raise --seconds or --repeats")
    return found


def noisy(measurement) -> bool:
    """Whether a figure's repeats spread by more than :data:`NOISY` of its median (:func:`spread`): too
    noisy to read as a ratio (its percentages are left out, and the report marks the ratios that divide
    it). ``measurement``: a mapping or a record with ``median``, ``min`` and ``max``."""
    m = measurement if isinstance(measurement, Mapping) else vars(measurement)
    return m["max"] - m["min"] > NOISY * m["median"]


def spread(measurement) -> float:
    """How far a figure's repeats spread: (max - min) / median (as :func:`noisy` takes it)."""
    m = measurement if isinstance(measurement, Mapping) else vars(measurement)
    return (m["max"] - m["min"]) / m["median"] if m["median"] else float("inf")


def touch(batch) -> None:
    """Wait until every tensor of a batch exists (reads back one element, not the batch). DALI's own
    outputs exist once ``pipeline.run()`` has returned them."""
    for t in batch:
        if type(t).__module__.startswith("nvidia.dali"):
            continue
        if hasattr(t, "numpy"):
            t[(0,) * len(t.shape)].numpy()
        else:
            np.asarray(t).flat[0]


def touched(stream) -> None:
    """The next batch of ``stream``, waited for (:func:`touch`): one step of a timed stream."""
    touch(next(stream))


def endless(dataset):
    """Batches of a Keras-style dataset forever, starting a new epoch when one ends."""
    while True:
        yield from dataset


def ordered_parallel(batch_of, steps: int, workers: int):
    """``batch_of(epoch, i)`` for epoch 0, 1, ... and ``i`` in ``range(steps)``, computed by ``workers``
    threads, in order: what Keras does with ``PyDataset(workers=N)`` (threads), except that the next
    epoch's first batches are computed while this one's last are read. Each batch is submitted with its
    own epoch (no state read when it runs: a sequence's ``self[i]`` read its epoch then, and the next
    epoch's first batches, submitted before the epoch's end, repeated the last epoch's). Closing the
    generator stops its workers: the items not started are dropped, those under way finished (at most
    ``workers``), so that none runs on while the next stream is timed."""
    pool = ThreadPoolExecutor(workers)
    order = ((epoch, i) for epoch in itertools.count() for i in range(steps))
    try:
        pending = deque(pool.submit(batch_of, *next(order)) for _ in range(2 * workers))
        while True:
            item = pending.popleft()
            pending.append(pool.submit(batch_of, *next(order)))
            yield item.result()
    finally:  # the stream is dropped: stop its workers
        pool.shutdown(wait=True, cancel_futures=True)
