"""Throughput benchmarks: every backend on the same files, next to the decode ceilings that bound it.

Method (see docs/benchmarks.md): each figure is the median of ``repeats`` timed windows of ``seconds`` each,
after a warm-up of one epoch and then until the rate is steady (two windows within ``timing.STEADY``); batches are
forced to exist (one element read back) before the clock counts them. A report warns when windows
held too few batches for the figures they give, when a warm-up never settled, and when a stage cost
comes out negative (noise). Ceilings are all CPU cores decoding the same files and doing nothing else (and, with a
GPU, nvJPEG decoding the images alone). Stage breakdowns time the DALI graph cut after each stage,
and the OpenCV stages one by one. Every backend is built from one plan (:func:`daliloader.plan.make_plan`)
through the backend registry, so all of them run the same settings.

The modules, one job each: :mod:`~daliloader.bench.timing` (windows, warm-up, what makes a figure
doubtful), :mod:`~daliloader.bench.sources` (the backends as the bench builds and reads them),
:mod:`~daliloader.bench.ceilings` (CPU decode, nvJPEG), :mod:`~daliloader.bench.stages` (where time
goes), :mod:`~daliloader.bench.training` (a small U-Net's wait for input), :mod:`~daliloader.bench.copies`
(the prepared copy and the other container), :mod:`~daliloader.bench.machine` (where a report was
measured), :mod:`~daliloader.bench.record` (the report, its JSON and older reports) and
:mod:`~daliloader.bench.job` (the job behind ``daliloader bench``, :func:`run`). This package gives their
names that the command line and the scripts in benchmarks/ use; the rest is imported from its module.
:mod:`daliloader.report` prints and plots a report.
"""

from .ceilings import cpu_decode_ceiling
from .copies import dataset_place, prepared_copy
from .job import AUGMENT, Settings, run
from .machine import machine_info
from .record import DATA, SCHEMA, Report, read
from .sources import BASELINE, BENCH_BACKENDS, EXPERT, REFERENCES, bench_plan
from .timing import endless, measure, touch

__all__ = ["AUGMENT", "BASELINE", "BENCH_BACKENDS", "DATA", "EXPERT", "REFERENCES", "SCHEMA", "Report", "Settings",
           "bench_plan", "cpu_decode_ceiling", "dataset_place", "endless", "machine_info", "measure", "prepared_copy",
           "read", "run", "touch"]
