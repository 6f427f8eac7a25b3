"""How dali-cpu scales with the cores it is given, beside the ceiling of the same cores decoding.

For each thread count T (1, 2, 4, ... up to every core): dali-cpu through ``tf_dataset`` (what users
run) with ``num_threads=T``, once with DALI running several batches at once (at least
``SAMPLES_PER_THREAD`` samples per thread, split again by tf.data: what daliloader does) and once with
one DALI batch per batch; and the pair-decode ceiling of T OpenCV threads doing nothing else.
All in one run, on the embedded dataset (or DATA), int labels, random 512x512 crops.

  usage: python benchmarks/cpu_scaling.py [DATA] [--batch-size 8] [--seconds 2] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import daliloader as dl
import daliloader.backends.dali_graph as graph
from daliloader.backends import Device
from daliloader.bench import bench_plan, cpu_decode_ceiling, endless, machine_info, measure, touch
from daliloader.report import write_json
from daliloader.synthetic import default_dataset


def thread_counts(cores: int) -> list[int]:
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return counts + [cores]


def rate(data, batch_size: int, threads: int, samples_per_thread: int, seconds: float, repeats: int) -> list[float]:
    graph.SAMPLES_PER_THREAD = samples_per_thread
    plan = bench_plan(data, batch_size, (512, 512), "int", num_threads=threads)
    stream = endless(dl.tf_dataset(plan, backend="dali-cpu"))
    return measure(lambda: touch(next(stream)), batch_size, seconds, repeats, warmup_batches=max(1, plan.steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, help="a dataset folder (default: the embedded one)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    data = dl.SegmentationData.from_folder(args.data) if args.data else default_dataset()
    grouped = graph.SAMPLES_PER_THREAD
    report = {"machine": machine_info(), "pairs": len(data), "batch_size": args.batch_size, "label_mode": "int",
              "image_size": [512, 512], "samples_per_thread": grouped,
              "method": "images/s, median of repeats after a one-epoch warm-up; dali-cpu through tf_dataset; "
                        "ceiling: T OpenCV threads reading and decoding pairs, nothing else", "rows": []}
    print(f"{'threads':>7} {'ceiling':>9} {'dali-cpu':>9} {'one/batch':>9} {'share':>6}")
    for threads in thread_counts(os.cpu_count() or 1):
        ceiling = statistics.median(cpu_decode_ceiling(data, threads, args.seconds, args.repeats))
        now = statistics.median(rate(data, args.batch_size, threads, grouped, args.seconds, args.repeats))
        dali_batch = graph.host_batch_size(bench_plan(data, args.batch_size, (512, 512), "int", num_threads=threads),
                                           Device.CPU)
        before = statistics.median(rate(data, args.batch_size, threads, 0, args.seconds, args.repeats))
        row = {"threads": threads, "dali_batch": dali_batch, "ceiling_pairs_per_s": round(ceiling, 1),
               "dali_cpu": round(now, 1), "one_dali_batch_per_batch": round(before, 1),
               "share_of_ceiling": round(now / ceiling, 3)}
        report["rows"].append(row)
        print(f"{threads:7d} {ceiling:9.1f} {now:9.1f} {before:9.1f} {row['share_of_ceiling']:6.0%}")
    graph.SAMPLES_PER_THREAD = grouped
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
