"""Where time goes: the DALI graph cut after each stage and timed like a backend (a stage's cost is the
growth of wall time per image), and the OpenCV loader's stages timed one by one on one thread."""

from __future__ import annotations

import statistics
import time

import numpy as np

from ..plan import Plan
from .record import StageCut, StageTime
from .sources import has_tensorflow
from .timing import epoch_batches, measure, touch


def dali_stages(plan: Plan, device: str, seconds: float, repeats: int) -> list[StageCut]:
    """The DALI graph cut after each stage; a stage's cost is the growth of wall time per image.

    As in ``tf_dataset``, a graph that hands its batches over on the CPU ends with uint8 pixels (flipped,
    not normalized: the ``normalize`` cut is named ``flip``) and class indices, and TensorFlow's
    normalization and encoding of the batch is timed on its own (the last row); and it runs as many
    samples per DALI batch as ``tf_dataset`` does (:func:`~daliloader.backends.dali_graph.host_batch_size`).
    """
    from ..backends.dali_graph import CUTS, graph_spec, host_batch_size, outputs_on

    run = graph_spec(plan.spec, outputs_on(device, plan))
    finished_in_tf = run.host_finish
    renamed = {"normalize": "flip", "encode": "indices"} if finished_in_tf else {}
    batch = host_batch_size(plan, device)
    rows, previous = [], 0.0
    for stage in CUTS + ("encode",):
        rate = _cut_rate(plan, device, run, None if stage == "encode" else stage, batch, seconds, repeats)
        ms = 1000.0 / rate
        rows.append(StageCut(stage=renamed.get(stage, stage), cumulative_img_per_s=round(rate, 1),
                             ms_per_img=round(ms - previous, 2)))
        previous = ms
    if finished_in_tf and has_tensorflow():
        rows.append(StageCut(stage=f"normalize, {plan.spec.label_mode} (TensorFlow)", cumulative_img_per_s=None,
                             ms_per_img=round(1000.0 / _finish_rate(plan, seconds, repeats), 2)))
    return rows


def _cut_rate(plan: Plan, device: str, run, stage: str | None, batch: int, seconds: float,
              repeats: int) -> float:
    """Images/s (median of the repeats) of the graph cut after ``stage`` (None: the whole graph)."""
    from ..backends.dali_graph import SegmentationPipeline

    pipe = SegmentationPipeline(plan, device, spec=run, stage=stage, batch_size=batch)
    pipe.build()
    return statistics.median(measure(pipe.run, batch, seconds, repeats,
                                     warmup_batches=epoch_batches(len(plan.data), batch)))


def _finish_rate(plan: Plan, seconds: float, repeats: int) -> float:
    """Images/s (median) of TensorFlow normalizing a batch of random uint8 pixels and encoding one of
    random class indices, as ``tf_dataset`` does after a graph that hands its batches over on the CPU."""
    import tensorflow as tf

    from ..backends.tfops import encode, normalize

    num_classes = plan.data.classes.num_classes
    shape = (plan.batch_size, *plan.spec.image_size)
    rng = np.random.default_rng(0)
    pixels = tf.constant(rng.integers(0, 256, (*shape, 3), dtype=np.uint8))
    labels = tf.constant(rng.integers(0, num_classes, shape, dtype=np.uint8))

    def finish() -> None:
        touch([normalize(pixels, plan.spec), encode(labels, plan.spec, num_classes)])

    return statistics.median(measure(finish, plan.batch_size, seconds, repeats, warmup_batches=1))


class StageClock:
    """The clock the OpenCV loader's ``sample`` calls after each stage: adds the time since the last
    call (or :meth:`start`) to that stage's total, in seconds."""

    def __init__(self, stages):
        self.totals = dict.fromkeys(stages, 0.0)
        self.last = time.perf_counter()

    def start(self) -> None:
        """Start timing a sample (the time since the last call is no stage's)."""
        self.last = time.perf_counter()

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        self.totals[stage] += now - self.last
        self.last = now


def opencv_stages(plan: Plan, samples: int = 32) -> list[StageTime]:
    """The opencv backend's stages timed one by one on one thread, ms per image: the loader's own
    ``sample`` with a clock, then its ``encode``; stages that are off (no rotation, no declared stages, no flips)
    are left out."""
    from ..backends.opencv import SAMPLE_STAGES, OpenCVLoader

    loader = OpenCVLoader(plan)
    rng = np.random.default_rng(0)
    clock = StageClock(SAMPLE_STAGES + ("encode",))
    for i in range(samples):
        clock.start()
        _, labels = loader.sample(i % len(plan.data), rng, clock)
        loader.encode(labels)
        clock("encode")
    off = {"rotate": not plan.spec.rotates, "augment": not plan.spec.augment, "flip": plan.spec.flip == 0}
    return [StageTime(stage=name, ms_per_img=round(1000 * v / samples, 2)) for name, v in clock.totals.items()
            if not off.get(name, False)]
