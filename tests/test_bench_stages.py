"""Where time goes (daliloader.bench.stages): the DALI graph cut after each stage, each cut built and
run (its rate faked: the arithmetic is what is checked), and the OpenCV stages timed one by one."""

import pytest

from daliloader.backends import Device
from daliloader.bench import stages
from daliloader.bench.sources import bench_plan
from daliloader.bench.timing import Rates


@pytest.fixture
def cut_rates(monkeypatch):
    """Each cut's pipeline is built and run once; its rate comes from ``rates`` in order (images/s)."""
    rates, ran = [], []

    def measure(next_batch, batch_size, seconds, repeats, warmup_batches):
        ran.append(next_batch())
        return Rates([rates.pop(0)] * repeats)

    monkeypatch.setattr(stages, "measure", measure)
    return rates, ran


def test_the_cpu_graph_is_cut_after_each_stage_and_tensorflows_finish_timed_alone(synth_data, cut_rates):
    """On the CPU the graph ends with uint8 pixels and class indices, and TensorFlow's normalization and
    one-hot encoding are timed on their own; a stage costs the growth of ms per image from the cut before
    it (below zero: noise, kept as it came)."""
    pytest.importorskip("tensorflow")
    rates, ran = cut_rates
    rates.extend([1000.0, 500.0, 400.0, 250.0, 260.0, 200.0, 2000.0])
    rows = stages.dali_stages(bench_plan(synth_data, 2, (32, 32), "onehot"), Device.CPU, seconds=0.1, repeats=2)
    assert [r.stage for r in rows] == ["read", "decode", "labels", "crop", "flip", "indices",
                                       "normalize, onehot (TensorFlow)"]
    assert len(ran) == 7 and not rates
    assert [r.cumulative_img_per_s for r in rows] == [1000.0, 500.0, 400.0, 250.0, 260.0, 200.0, None]
    assert [r.ms_per_img for r in rows] == [1.0, 1.0, 0.5, 1.5, -0.15, 1.15, 0.5]


def test_a_graph_that_encodes_its_own_labels_ends_with_encode(synth_data, cut_rates, monkeypatch):
    """A graph whose batches stay on the GPU normalizes and encodes in DALI (cut here on the CPU, with the
    GPU graph's outputs)."""
    from daliloader.backends import dali_graph

    monkeypatch.setattr(dali_graph, "outputs_on", lambda device, plan: Device.GPU)
    rates, _ = cut_rates
    rates.extend([100.0] * 6)
    rows = stages.dali_stages(bench_plan(synth_data, 2, (16, 16), "int"), Device.CPU, seconds=0.1, repeats=1)
    assert [r.stage for r in rows] == ["read", "decode", "labels", "crop", "normalize", "encode"]
    assert [r.ms_per_img for r in rows] == [10.0] + [0.0] * 5


def test_opencv_stages_that_are_off_are_not_listed(synth_data):
    rows = stages.opencv_stages(bench_plan(synth_data, 2, (32, 32), "int"), samples=2)
    names = [row.stage for row in rows]
    assert "rotate" not in names and "flip" in names  # random crops flip by default; nothing rotates
    assert names[:3] == ["read", "decode", "labels"] and names[-1] == "encode"
    assert all(row.ms_per_img >= 0 for row in rows)
    assert "rotate" in [row.stage for row in stages.opencv_stages(bench_plan(synth_data, 2, (32, 32), "int", rotate=5),
                                                                  samples=2)]


def test_the_stage_clock_adds_the_time_since_its_last_call(monkeypatch):
    now = iter([0.0, 1.0, 1.5, 10.0, 12.0, 12.25])
    monkeypatch.setattr(stages.time, "perf_counter", lambda: next(now))
    clock = stages.StageClock(("read", "decode"))
    clock("read")
    clock("decode")
    clock.start()
    clock("read")
    clock("decode")
    assert clock.totals == {"read": 3.0, "decode": 0.75}
