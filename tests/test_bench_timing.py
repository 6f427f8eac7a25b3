"""The bench's clock work (daliloader.bench.timing) on fake streams and a fake clock: windows, warm-up,
figures taken in turn, what makes a figure doubtful, and the streams the bench reads."""

import itertools
import threading

import numpy as np
import pytest

from daliloader.bench import timing
from daliloader.bench.record import Figure
from daliloader.bench.timing import (
    MIN_BATCHES,
    STEADY_WINDOWS,
    Rates,
    endless,
    measure,
    measure_in_turn,
    noisy,
    ordered_parallel,
    timing_warnings,
    touch,
    warm_up,
    window,
)


class Clock:
    """A clock that only moves when a batch is taken: each batch costs ``cost(n)`` seconds (n: its number)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stream(clock: Clock, cost, log: list | None = None, name: str = ""):
    """A next_batch() that advances ``clock`` by ``cost(n)`` for the n-th batch, and logs ``name``."""
    counter = itertools.count()

    def next_batch():
        clock.now += cost(next(counter))
        if log is not None:
            log.append(name)
    return next_batch


def test_a_window_counts_batches_until_its_seconds_have_passed():
    clock = Clock()
    rate, batches = window(stream(clock, lambda n: 0.1), batch_size=4, seconds=0.35, clock=clock)
    assert batches == 4 and rate == pytest.approx(4 * 4 / 0.4)
    rate, batches = window(stream(clock, lambda n: 2.0), batch_size=4, seconds=0.35, clock=clock)
    assert batches == 1 and rate == pytest.approx(2.0)  # at least one batch, however slow


def test_warm_up_takes_its_batches_then_stops_once_two_windows_agree():
    clock, log = Clock(), []
    assert warm_up(stream(clock, lambda n: 2 ** -6, log), 2, seconds=0.5, warmup_batches=5, clock=clock)
    # 5 warm-up batches, then two short windows (0.125 s: 8 batches each) that agree
    assert len(log) == 5 + 2 * 8
    slow_first = stream(clock, lambda n: 0.05 if n < 10 else 0.01)  # a loader that speeds up, then holds
    assert warm_up(slow_first, 2, seconds=0.4, warmup_batches=0, clock=clock)


def test_a_warm_up_that_never_settles_says_so_after_its_last_window():
    clock, log = Clock(), []
    # every short window (0.05 s) holds one batch, alternately of 0.06 s and 0.1 s: never two within 10%
    swinging = stream(clock, lambda n: 0.06 if n % 2 else 0.1, log)
    assert not warm_up(swinging, 1, seconds=0.2, warmup_batches=1, clock=clock)
    assert len(log) == 1 + STEADY_WINDOWS


def test_measure_gives_a_rate_and_a_count_per_repeat_and_whether_it_warmed_up():
    clock = Clock()
    rates = measure(stream(clock, lambda n: 2 ** -6), batch_size=8, seconds=0.25, repeats=3, warmup_batches=2,
                    clock=clock)
    assert isinstance(rates, Rates) and len(rates) == 3 and rates.steady
    assert rates.batches == [16, 16, 16] and rates == [512.0] * 3


def test_figures_measured_in_turn_open_each_source_for_each_of_its_windows(monkeypatch):
    """Round by round, A B A B: each source opened afresh for its window (warmed up, then timed), closed
    after it, so that no other stream runs beside the one timed; each source's rate is its own."""
    clock, log, opened, closed = Clock(), [], [], []

    def source(name, cost):
        def make():
            opened.append(name)
            batches = stream(clock, cost, log, name)

            def generate():
                try:
                    while True:
                        yield batches()
                finally:
                    closed.append(name)
            return generate()
        return make

    monkeypatch.setattr(timing, "touched", next)
    found = measure_in_turn([source("A", lambda n: 0.01), source("B", lambda n: 0.02)], batch_size=2, seconds=0.2,
                            repeats=2, warmup_batches=1, clock=clock)
    assert [name for name, _ in itertools.groupby(log)] == ["A", "B", "A", "B"]
    assert opened == closed == ["A", "B", "A", "B"]
    assert [len(r) for r in found] == [2, 2] and found[0] == pytest.approx([200.0] * 2)
    assert found[1] == pytest.approx([100.0] * 2) and all(r.steady for r in found)


def test_timing_warnings_name_a_short_window_and_an_unsettled_warm_up():
    """The texts only: the bench makes each a warning about what it measured (tests/test_bench_job.py)."""
    assert timing_warnings(Rates([10.0], [MIN_BATCHES], True)) == []
    few, unsteady = timing_warnings(Rates([10.0, 11.0], [9, MIN_BATCHES - 2], False))
    assert few == (f"a timed window held {MIN_BATCHES - 2} batches (fewer than {MIN_BATCHES}): the figure is noisy; "
                   "raise --seconds")
    assert unsteady.startswith("the warm-up did not reach a steady rate (two windows within 10%)")
    assert unsteady.endswith("raise --seconds or --repeats")
    assert STEADY_WINDOWS >= 2


def test_noisy_reads_mappings_and_records():
    assert noisy({"median": 100, "min": 77, "max": 186}) and not noisy({"median": 100, "min": 95, "max": 110})
    figure = Figure(name="x", rates=[95.0, 110.0], median=100.0, min=95.0, max=110.0)
    assert not noisy(figure) and noisy(Figure(name="x", rates=[1.0], median=100.0, min=77.0, max=186.0))


def test_touch_reads_one_element_of_each_tensor_and_passes_over_dalis_own():
    read = []

    class Tensor:
        shape = (2, 3)

        def __getitem__(self, index):
            read.append(index)
            return self

        def numpy(self):
            return 0

    class DaliTensorList:  # DALI's outputs exist once pipeline.run() returned them
        def __getitem__(self, index):
            raise AssertionError("a DALI output is not read back")

    DaliTensorList.__module__ = "nvidia.dali.tensors"
    touch([Tensor(), np.zeros((2, 2)), DaliTensorList()])
    assert read == [(0, 0)]


def test_endless_starts_a_new_epoch_when_one_ends():
    assert list(itertools.islice(endless([1, 2, 3]), 7)) == [1, 2, 3, 1, 2, 3, 1]


def test_ordered_parallel_reads_in_order_on_its_threads_each_batch_of_its_own_epoch():
    """Each batch is computed for the epoch it was submitted in, also the next epoch's first batches,
    submitted (4 ahead) before this epoch's last are read: no (epoch, i) twice, none left out."""
    threads = set()

    def batch_of(epoch, i):
        threads.add(threading.get_ident())
        return epoch, i

    items = ordered_parallel(batch_of, steps=3, workers=2)
    assert list(itertools.islice(items, 8)) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    assert threads and threading.get_ident() not in threads
    items.close()  # the stream dropped: its workers stop


def test_short_windows_have_a_floor():
    assert timing.short_window(1.0) == 0.25 and timing.short_window(0.01) == timing.SHORTEST_WINDOW
