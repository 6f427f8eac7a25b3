"""Throughput benchmarks: every backend on the same files, next to the decode ceilings that bound it.

Method (see docs/benchmarks.md): each figure is the median of ``repeats`` timed windows of ``seconds`` each,
after a warm-up of one epoch and then until the rate is steady (two windows within 10%); batches are
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
names; :mod:`daliloader.report` prints and plots a report.
"""

from .ceilings import CPU_DECODES, cpu_decode_ceiling, nvjpeg_ceiling
from .copies import BENCH_PACK_SIZE, dataset_digest, dataset_place, other_container, place_name, prepared_copy
from .job import (
    AUGMENT,
    Cell,
    Job,
    Settings,
    augment_kept,
    cell_groups,
    choose_backends,
    container_kept,
    figure,
    run,
    stage_warnings,
)
from .machine import code_version, dali_build, machine_info
from .record import (
    DATA,
    SCHEMA,
    Ceiling,
    Dataset,
    Figure,
    Machine,
    Measured,
    Report,
    RunSettings,
    StageCut,
    StageTime,
    TrainRow,
    migrate,
    read,
)
from .sources import (
    BASELINE,
    BENCH_BACKENDS,
    NEEDS,
    PRODUCTS,
    VIA,
    backend_source,
    backend_stream,
    bench_plan,
    has_tensorflow,
    lacks,
    naive_tfdata,
    product,
    sequence_like,
    via,
)
from .stages import dali_stages, opencv_stages
from .timing import (
    MIN_BATCHES,
    NOISY,
    STEADY,
    STEADY_WINDOWS,
    Rates,
    endless,
    measure,
    measure_in_turn,
    noisy,
    ordered_parallel,
    timing_warnings,
    touch,
)
from .training import resident, small_unet, train_bound, training_device

__all__ = [
    "AUGMENT", "BASELINE", "BENCH_BACKENDS", "BENCH_PACK_SIZE", "CPU_DECODES", "DATA", "MIN_BATCHES", "NEEDS",
    "NOISY", "PRODUCTS", "SCHEMA", "STEADY", "STEADY_WINDOWS", "VIA", "Ceiling", "Cell", "Dataset", "Figure", "Job",
    "Machine", "Measured", "Rates", "Report", "RunSettings", "Settings", "StageCut", "StageTime", "TrainRow",
    "augment_kept", "backend_source", "backend_stream", "bench_plan", "cell_groups", "choose_backends", "code_version",
    "container_kept", "cpu_decode_ceiling", "dali_build", "dali_stages", "dataset_digest", "dataset_place", "endless",
    "figure", "has_tensorflow", "lacks", "machine_info", "measure", "measure_in_turn", "migrate", "naive_tfdata",
    "noisy", "nvjpeg_ceiling", "opencv_stages", "ordered_parallel", "other_container", "place_name", "prepared_copy",
    "product", "read", "resident", "run", "sequence_like", "small_unet", "stage_warnings", "timing_warnings", "touch",
    "train_bound", "training_device", "via",
]
