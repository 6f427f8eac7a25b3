"""Where `dali-gpu`'s time goes, on a machine with a GPU: one run, one JSON report, figures in images/s
(median of timed windows after a warm-up, as the bench takes them). Each figure is measured in a process
of its own (on an H200 the same graph ran markedly slower as a process's fifteenth pipeline than as its
first: docs/gpu.md, "Where the time goes"). The groups below are measured in an interleaved order (see
``figures``): the loader, the expert and nvJPEG's ceiling first, so that a time-boxed call keeps the
ratios the GPU issue asks for from one run; then the ratio at batch 32 with the hardware JPEG engines;
then, with the engines, what binds at batch 8 once the decoder does not (the graph alone, by stage, with
its window fixed); then the figures without the engines, dali-cpu against its ceiling on every core,
and the feed.

  tf           the loader through tf_dataset, as model.fit reads it: int and one-hot at batch 8, with
               DALI's prefetch depth 2 (the default) and 4, every JPEG on the hardware engines, and at
               batch 32; and on a prepared copy of the data (LZ4 masks), read from its packs by DALI's
               reader with DALI's own draws (a training pipeline fed no input at all) and from its files
               (the inputs fed): what the feed costs the loader itself
  feed         how the graph's inputs reach a GPU DALIDatasetWithInputs: a graph that only reads three
               inputs like the loader's (two paths, nine draws per sample), fed per sample or per batch
               (Input(batch=True), the loader's way), each copied to the GPU as the plugin requires; the
               same bytes in one input per batch; and a graph of no input (the plugin's floor)
  expert       the expert's tf.data on every core (daliloader.bench.expert), int labels, batch 8 and 32:
               the reference of the ratios
  alone        the loader's DALI graph through pipeline.run (no TensorFlow), int labels, at batch 8 and 32,
               at batch 8 with every JPEG on the hardware engines (dali_graph.HW_DECODER_LOAD = 1), and at
               batch 8 with a fixed window in place of its arithmetic (with the engines too, and through
               tf_dataset): what DALI's per-batch costs take at the loader's batch
  stages       that graph at batch 8 cut after each stage (the bench's stage cuts; one process for all),
               with DALI's share of the hardware engines and with every JPEG on them
  cpu          dali-cpu through tf_dataset on every core (int labels, batch 8) and the ceiling of as many
               OpenCV threads reading and decoding pairs, nothing else (benchmarks/cpu_scaling.py's figures
               at every core): the GPU issue's target for dali-cpu on the GPU machine's 16 cores
  decoder      DALI's nvJPEG decoder alone on the embedded photos held in memory (no file reading), at the
               loader's batch and at a large one, with and without jpeg_fancy_upsampling, and with the
               share of JPEGs sent to the GPU's hardware JPEG engines (hw_decoder_load) at 0 and 1 beside
               DALI's default: what decoding alone allows; and what nvImageCodec logs about its hardware
               decoder at its most verbose (engines, batch, where each picture went), for one batch

A figure that fails is recorded with its error; no figure runs past ``--budget`` seconds from the start
(a child still measuring then is stopped, and recorded so), and those not started are listed as skipped,
so that the report still comes back from a time-boxed device call: it lists every figure planned first,
and is rewritten after every figure.

    usage: python benchmarks/gpu_where.py --json OUT [--seconds 1] [--repeats 3] [--budget 240]
           [--only GROUP]   (--figure K: measure figure K here and print it; what each child runs)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from functools import partial
from pathlib import Path

import numpy as np
from cpu_scaling import rate as dali_cpu_rate  # (a script beside this one: dali-cpu on T threads)

import daliloader as dl
from daliloader.backends import Device, dali_graph
from daliloader.bench import EXPERT, bench_plan, cpu_decode_ceiling, endless, machine_info, measure
from daliloader.bench.sources import backend_stream
from daliloader.bench.stages import dali_stages
from daliloader.bench.timing import epoch_batches, touched
from daliloader.parallel import cores
from daliloader.report import write_json
from daliloader.synthetic import default_dataset

CROP = (512, 512)


def decoder_rate(files: list[str], batch: int, seconds: float, repeats: int, **decoder_args) -> list[float]:
    """nvJPEG ("mixed") whole-photo decodes per second of ``files`` held in memory, ``batch`` per run."""
    from nvidia.dali import fn, pipeline_def, types

    encoded = [np.fromfile(f, dtype=np.uint8) for f in files]
    position = {"next": 0}

    def next_batch():
        start = position["next"]
        position["next"] = (start + batch) % len(encoded)
        return [encoded[(start + k) % len(encoded)] for k in range(batch)]

    @pipeline_def(batch_size=batch, num_threads=cores(), device_id=0, prefetch_queue_depth=2)
    def decode():
        jpegs = fn.external_source(source=next_batch, batch=True, dtype=types.UINT8, ndim=1)
        return fn.decoders.image(jpegs, device="mixed", output_type=types.RGB, **decoder_args)

    pipe = decode()
    pipe.build()
    return measure(pipe.run, batch, seconds, repeats, warmup_batches=epoch_batches(len(files), batch))


#: What nvImageCodec says at log level 4 about its hardware decoder, one batch of the loader's size decoded.
DECODER_LOG = """
import sys, numpy as np
from nvidia.dali import fn, pipeline_def, types
files = sys.argv[1:]
@pipeline_def(batch_size=len(files), num_threads=4, device_id=0)
def decode():
    jpegs, _ = fn.readers.file(files=files)
    return fn.decoders.image(jpegs, device="mixed", output_type=types.RGB, jpeg_fancy_upsampling=True)
pipe = decode()
pipe.build()
pipe.run()
"""
#: The nvImageCodec log lines kept: the hardware decoder's set-up and where each picture went.
DECODER_LOG_KEYS = ("hw decoder", "hw_decoder", "num_hw_engines", "max batch size", "assigned to",
                    "supported", "fancy")


def decoder_log(files: list[str]) -> dict:
    """nvImageCodec's own account (DALI_NVIMGCODEC_LOG_LEVEL=4) of one batch of 8 decoded in a fresh process."""
    env = {**os.environ, "DALI_NVIMGCODEC_LOG_LEVEL": "4"}
    done = subprocess.run([sys.executable, "-c", DECODER_LOG, *files[:8]], env=env, capture_output=True, text=True,
                          timeout=60)
    lines = (done.stdout + done.stderr).splitlines()
    kept = [line[:240] for line in lines if any(key in line.lower() for key in DECODER_LOG_KEYS)]
    return {"exit_status": done.returncode, "lines": len(lines), "kept": kept[:40]}


def with_share(share: float, thunk):
    """``thunk()`` with the loader's graphs built meanwhile sending ``share`` of their JPEGs to the hardware
    engines (``dali_graph.HW_DECODER_LOAD``)."""
    default, dali_graph.HW_DECODER_LOAD = dali_graph.HW_DECODER_LOAD, share
    try:
        return thunk()
    finally:
        dali_graph.HW_DECODER_LOAD = default


def fixed_window(extent, spec, u=None):
    """:func:`dali_graph.crop_window`'s outputs without its arithmetic: one window inside every embedded
    photo, flipped by a draw (so that the draws stay an input of the graph)."""
    from nvidia.dali import types

    return (types.Constant(np.array([100, 200], np.int32), device="cpu"), np.array(spec.image_size, np.int32),
            u[0] < 0.5)


def with_fixed_window(thunk):
    """``thunk()`` with the loader's graphs built meanwhile taking :func:`fixed_window` for their window: what
    the window's arithmetic costs (a share of the GPU graph's CPU operators, each run once per batch:
    docs/gpu.md, "On an H200, 2026-11-27, third")."""
    drawn, dali_graph.crop_window = dali_graph.crop_window, fixed_window
    try:
        return thunk()
    finally:
        dali_graph.crop_window = drawn


def alone_rate(data, batch: int, seconds: float, repeats: int) -> list[float]:
    """The loader's DALI graph (int labels) through ``pipeline.run``, ``batch`` samples per run."""
    pipe, _ = dl.dali_pipeline(data, batch_size=batch, image_size=CROP, label_mode="int", backend="dali-gpu", seed=0)
    return measure(pipe.run, batch, seconds, repeats, warmup_batches=epoch_batches(len(data), batch))


def tf_rate(data, batch: int, label_mode: str, seconds: float, repeats: int, **options) -> list[float]:
    """The loader through ``tf_dataset`` on the GPU, read as the bench reads every loader."""
    ds = dl.tf_dataset(data, batch_size=batch, image_size=CROP, label_mode=label_mode, backend="dali-gpu", seed=0,
                       **options)
    stream = endless(ds)
    try:
        return measure(partial(touched, stream), batch, seconds, repeats,
                       warmup_batches=epoch_batches(len(data), batch))
    finally:
        stream.close()


def feed_rate(path: str, batch: int, batched: bool, seconds: float, repeats: int, device: str = "gpu",
              inputs: int = 3) -> list[float]:
    """Positions/s of a ``DALIDatasetWithInputs`` on ``device`` whose graph only reads inputs shaped like
    the loader's: ``inputs`` 3, the loader's three (two paths, the draws); 1, the same bytes in one row per
    position (what the loader's inputs would cost packed into one stream); 0, none (the graph draws its
    own: the plugin's floor per batch without a feed). Fed one element per sample or one per batch
    (``Input(batch=True)``, as the loader feeds them since this figure), each stream copied to the GPU as
    the plugin requires (``device="cpu"``: left on the host, for a check without a GPU). ``path``: what
    every position's paths hold (one length, so that a batch of them is a dense tensor; the loader pads
    its paths per batch to the longest: ``dali_graph.pack_pair``). The inputs are
    constants: this times the plugin's feed and the copies alone, not how the loader makes its inputs
    (its chunks of sampler positions, the vetting, the path tables)."""
    import tensorflow as tf
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline
    from nvidia.dali.plugin.tf.experimental import DALIDatasetWithInputs, Input

    on_gpu = device == "gpu"
    pipe = Pipeline(batch_size=batch, num_threads=cores(), device_id=0 if on_gpu else None,
                    exec_dynamic=True)
    draw_bytes = 9 * 4
    with pipe:
        if inputs == 3:
            image, mask = (fn.external_source(name=n, batch=False, dtype=types.UINT8, ndim=1)
                           for n in ("image", "mask"))
            draws = fn.external_source(name="draws", batch=False, dtype=types.FLOAT, ndim=1)
            outputs = (image.shape()[0] + mask.shape()[0], draws)
        elif inputs == 1:  # the draws' bytes, then the two paths
            row = fn.external_source(name="row", batch=False, dtype=types.UINT8, ndim=1)
            outputs = (row.shape()[0] - draw_bytes, fn.reinterpret(row[0:draw_bytes], dtype=types.FLOAT))
        else:
            draws = fn.random.uniform(range=(0.0, 1.0), shape=[9])
            outputs = (fn.cast(draws[0] * 0, dtype=types.INT64), draws)
        pipe.set_outputs(*(o.gpu() for o in outputs) if on_gpu else outputs)
    path_bytes = tf.constant(np.frombuffer(os.fsencode(path), np.uint8))

    def the_path(_):
        return path_bytes

    def the_draws(position):
        return tf.random.stateless_uniform([9], seed=tf.stack([position, position]))

    def the_row(position):
        draws = tf.reshape(tf.bitcast(the_draws(position), tf.uint8), [-1])
        return tf.concat([draws, path_bytes, path_bytes], 0)

    with tf.device("/cpu:0"):
        positions = tf.data.Dataset.range(np.iinfo(np.int64).max)
        streams = ({"image": positions.map(the_path), "mask": positions.map(the_path),
                    "draws": positions.map(the_draws)} if inputs == 3 else
                   {"row": positions.map(the_row)} if inputs == 1 else {})
        if batched:
            streams = {k: v.batch(batch) for k, v in streams.items()}
    where = "/gpu:0" if on_gpu else "/cpu:0"
    if on_gpu:
        streams = {k: v.apply(tf.data.experimental.copy_to_device(where)) for k, v in streams.items()}
    with tf.device(where):
        ds = DALIDatasetWithInputs(pipeline=pipe, batch_size=batch, device_id=pipe.device_id,
                                   num_threads=pipe.num_threads,
                                   input_datasets={k: Input(v, batch=batched) for k, v in streams.items()},
                                   output_dtypes=(tf.int64, tf.float32), output_shapes=((batch,), (batch, 9)))
    stream = iter(ds)
    return measure(partial(touched, stream), batch, seconds, repeats, warmup_batches=8)


def prepared_copy(data) -> Path:
    """The data prepared once with packs (the LZ4 masks in them), in the temporary folder, where the
    figures after the first, each in a process of its own, find it (``prepare`` writes a copy whole)."""
    out = Path(tempfile.gettempdir()) / f"daliloader-gpu-where-prepared-{dl.__version__}-{len(data)}"
    if not (out / "manifest.json").is_file():
        dl.prepare(data, out, pack_size=16, progress=False)
    return out


def prepared_rate(data, batch: int, packs: bool, seconds: float, repeats: int) -> list[float]:
    """The loader through tf_dataset (int labels) on the prepared copy of ``data``: from its ``packs``
    (DALI's reader, DALI's draws: no input fed), or from its files (paths and draws fed)."""
    return tf_rate(dl.SegmentationData.from_prepared(prepared_copy(data), packs=packs), batch, "int", seconds,
                   repeats)


def expert_rate(data, batch: int, seconds: float, repeats: int) -> list[float]:
    """The expert's tf.data (int labels), built as the bench builds it (on the user's own masks)."""
    stream = backend_stream(EXPERT, bench_plan(data, batch, CROP, "int"), cores())
    try:
        return measure(partial(touched, stream), batch, seconds, repeats,
                       warmup_batches=epoch_batches(len(data), batch))
    finally:
        stream.close()


def figures(data, seconds: float, repeats: int):
    """(group, name, thunk) of every figure, in the order measured."""
    files = list(data.images)
    timing = dict(seconds=seconds, repeats=repeats)
    # first what a time-boxed call must not lose: the loader as fit reads it, the expert's reference and
    # the decoder's ceiling at the loader's settings (a time-boxed call measures the first few: docs/gpu.md);
    # then, with every JPEG on the hardware engines, the loader fed no input (packs) against the loader
    # fed its inputs (files) on one prepared copy: whether the feed binds at batch 8 (docs/gpu.md); then
    # the ratio at batch 32 with the engines (which raise the decoder's ceiling:
    # docs/gpu.md); then, with the engines, what binds at batch 8 once the decoder
    # does not (docs/gpu.md, "For the next run"): the graph without TensorFlow, by stage, and with its
    # window fixed; then the figures measured before (batch 32 without the engines, dali-cpu on every core)
    yield "tf", "int, batch 8, prefetch 2", partial(tf_rate, data, 8, "int", **timing)
    yield "expert", "int, batch 8", partial(expert_rate, data, 8, **timing)
    yield "decoder", "batch 8, fancy on", partial(decoder_rate, files, 8, jpeg_fancy_upsampling=True, **timing)
    for packs, how in ((True, "packs, no input"), (False, "files, inputs fed")):
        yield "tf", f"prepared copy from its {how}, int, batch 8, hw_decoder_load 1", partial(
            with_share, 1.0, partial(prepared_rate, data, 8, packs, **timing))
    yield "tf", "int, batch 32, hw_decoder_load 1", partial(
        with_share, 1.0, partial(tf_rate, data, 32, "int", **timing))
    yield "expert", "int, batch 32", partial(expert_rate, data, 32, **timing)
    yield "alone", "int, batch 8, hw_decoder_load 1", partial(with_share, 1.0, partial(alone_rate, data, 8, **timing))
    yield "stages", "int, batch 8, hw_decoder_load 1", partial(
        with_share, 1.0, partial(dali_stages, bench_plan(data, 8, CROP, "int"), Device.GPU, seconds, repeats))
    yield "alone", "int, batch 8, hw_decoder_load 1, window fixed", partial(
        with_share, 1.0, partial(with_fixed_window, partial(alone_rate, data, 8, **timing)))
    # the plugin's own cost per batch, which the graph's work must beat at batch 8: its three inputs as
    # the loader feeds them, the same bytes in one input, and no input at all
    for inputs, name in ((3, "inputs per batch"), (1, "one input per batch"), (0, "no input")):
        yield "feed", f"batch 8, {name}", partial(feed_rate, files[0], 8, True, inputs=inputs, **timing)
    yield "tf", "int, batch 8, hw_decoder_load 1", partial(with_share, 1.0, partial(tf_rate, data, 8, "int", **timing))
    yield "tf", "int, batch 32, prefetch 2", partial(tf_rate, data, 32, "int", **timing)
    yield "alone", "int, batch 8", partial(alone_rate, data, 8, **timing)
    yield "tf", "int, batch 8, window fixed", partial(with_fixed_window, partial(tf_rate, data, 8, "int", **timing))
    yield "stages", "int, batch 8", partial(dali_stages, bench_plan(data, 8, CROP, "int"), Device.GPU, seconds, repeats)
    yield "alone", "int, batch 32", partial(alone_rate, data, 32, **timing)
    yield "decoder", "batch 8, fancy on, hw_decoder_load 1", partial(
        decoder_rate, files, 8, jpeg_fancy_upsampling=True, hw_decoder_load=1.0, **timing)
    yield "cpu", "pair-decode ceiling, every core", partial(cpu_decode_ceiling, data, cores(), **timing)
    yield "cpu", "dali-cpu, int, batch 8, every core", partial(  # benchmarks/cpu_scaling.py's figure
        dali_cpu_rate, data, 8, cores(), dali_graph.SAMPLES_PER_THREAD, **timing)
    yield "tf", "onehot, batch 8, prefetch 2", partial(tf_rate, data, 8, "onehot", **timing)
    yield "feed", "batch 8, inputs per sample", partial(feed_rate, files[0], 8, False, **timing)
    yield "tf", "int, batch 8, prefetch 4", partial(tf_rate, data, 8, "int", prefetch=4, **timing)
    yield "decoder", "batch 8, fancy off", partial(decoder_rate, files, 8, jpeg_fancy_upsampling=False, **timing)
    for fancy in (True, False):
        yield "decoder", f"batch 64, fancy {'on' if fancy else 'off'}", partial(
            decoder_rate, files, 64, jpeg_fancy_upsampling=fancy, **timing)
    yield "decoder", "batch 8, fancy on, hw_decoder_load 0", partial(
        decoder_rate, files, 8, jpeg_fancy_upsampling=True, hw_decoder_load=0.0, **timing)
    yield "decoder-log", "batch 8, fancy on, DALI_NVIMGCODEC_LOG_LEVEL=4", partial(decoder_log, files)


def summary(value):
    """A figure as the report holds it: rates with their median, the stage rows as plain records, or a log."""
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and value and not isinstance(value[0], (int, float)):
        return {"stages": [vars(row) for row in value]}
    rates = [round(r, 1) for r in value]
    return {"median": round(statistics.median(rates), 1), "rates": rates}


#: A figure is not started with less of the budget left than this (a TensorFlow import and a warm-up).
MIN_LEFT_S = 15.0


def measured(group: str, name: str, thunk) -> dict:
    """One figure as the report holds it, or the error that stopped it."""
    t0 = time.monotonic()
    try:
        row = {"group": group, "name": name, **summary(thunk())}
    except Exception as e:  # noqa: BLE001 - a figure that fails is reported, and the others still run
        row = {"group": group, "name": name, "error": "".join(traceback.format_exception_only(e)).strip()}
    row["took_s"] = round(time.monotonic() - t0, 1)
    return row


def in_child(k: int, args, timeout: float) -> dict:
    """Figure ``k`` measured in a process of its own: the last line it prints that is a JSON row, with its
    exit status where that is not 0 (a process that failed after printing its figure keeps the figure)."""
    command = [sys.executable, __file__, "--figure", str(k), "--seconds", str(args.seconds), "--repeats",
               str(args.repeats)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:.0f} s (the budget's end)"}
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        return row if done.returncode == 0 else {**row, "exit_status": done.returncode}
    return {"error": f"exit status {done.returncode}, no figure: {done.stderr.strip().splitlines()[-1:]}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="the report to write")
    parser.add_argument("--seconds", type=float, default=1.0, help="each timed window (default 1)")
    parser.add_argument("--repeats", type=int, default=3, help="timed windows per figure (default 3)")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds after which figures are skipped")
    parser.add_argument("--only", help="measure this group's figures only")
    parser.add_argument("--figure", type=int, help=argparse.SUPPRESS)  # a child: figure K, printed as JSON
    args = parser.parse_args()
    started = time.monotonic()
    data = default_dataset()
    plan = list(figures(data, args.seconds, args.repeats))
    if args.figure is not None:
        print(json.dumps(measured(*plan[args.figure])), flush=True)
        return 0
    if args.json is None:
        parser.error("--json is needed")
    report = {"machine": machine_info(), "dataset": f"{len(data)} pairs of 960x720 JPEG + RGB masks (embedded)",
              "crop": list(CROP), "method": f"median of {args.repeats} windows of {args.seconds:g} s after a "
              "one-epoch warm-up and until steady, each figure in a process of its own; images/s",
              "planned": [f"{group}: {name}" for group, name, _ in plan if not args.only or group == args.only],
              "figures": [], "skipped": []}
    deadline = started + args.budget
    for k, (group, name, _) in enumerate(plan):
        if args.only and group != args.only:
            continue
        left = deadline - time.monotonic()
        if left < MIN_LEFT_S:
            report["skipped"].append(f"{group}: {name}")
            continue
        row = {"group": group, "name": name, **in_child(k, args, timeout=left)}
        report["figures"].append(row)
        print(row, flush=True)
        write_json(report, args.json)
    write_json(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
