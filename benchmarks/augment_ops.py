"""What each augmentation costs per 512x512 sample, kernel by kernel, in the libraries the backends use:
DALI's CPU (and, with a GPU, GPU) operators, OpenCV, and TensorFlow. The loaders' own throughput with
and without augmentation comes from ``daliloader bench --augment``; this says where the difference goes.

Each row runs one kernel over batches of 8 identical inputs on all cores (DALI: a pipeline of that one
operator with ``num_threads`` = cores; OpenCV: a thread per core; TensorFlow: its own thread pools),
median of ``--repeats`` windows of ``--seconds`` after a warm-up, reported in ms per sample (wall
time, all cores together), as the loaders would spend it:
  colour     DALI fn.color_twist (uint8), fn.coord_transform with the same 3x3 map and offset (uint8 out:
             rounded and clamped, bit-exact), fn.hsv (saturation and hue only: part of the map);
             cv2.transform with the 3x4 colour map, tf tensordot + round
  rotate     DALI as the graph turns image and labels (dali_graph.rotate: the image framed by one pixel
             of fill and turned with a clamped border, labels nearest with a fill value), and the image
             alone with fn.rotate's fill_value and without one; cv2.warpAffine; TF
             ImageProjectiveTransformV3
  zoom       DALI fn.resize 724->512 (antialias) + labels (nearest), cv2.resize (INTER_AREA)
  reference  DALI fn.brightness_contrast (per-channel, no channel mixing) and a copy, for scale

  usage: python benchmarks/augment_ops.py [--seconds 2] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
from nvidia.dali import fn, pipeline_def, types

from daliloader import stages
from daliloader.backends import dali_gpu_count, dali_graph
from daliloader.bench import machine_info
from daliloader.classes import ClassMap
from daliloader.parallel import cores
from daliloader.report import write_json

BATCH, SIZE, ZOOMED = 8, 512, 724
FACTORS, ANGLE = (1.2, 0.9, 1.1, 5.0), 10.0


def timed(run, seconds: float, repeats: int) -> float:
    """ms per sample: median of ``repeats`` windows, ``run()`` processing one batch."""
    for _ in range(3):
        run()
    rates = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            run()
            n += 1
        rates.append(1000 * (time.perf_counter() - start) / (n * BATCH))
    return statistics.median(rates)


def dali_row(define, inputs, device: str, seconds: float, repeats: int) -> float:
    @pipeline_def(batch_size=BATCH, num_threads=cores(), device_id=0 if device == "gpu" else None,
                  prefetch_queue_depth=2)
    def pipe():
        nodes = [fn.external_source(source=[[a] * BATCH], cycle=True, batch=True, layout="HWC") for a in inputs]
        return define(*[n.gpu() for n in nodes] if device == "gpu" else nodes)

    p = pipe()
    p.build()
    return timed(p.run, seconds, repeats)


def threaded(work, seconds: float, repeats: int) -> float:
    with ThreadPoolExecutor(cores()) as pool:
        return timed(lambda: list(pool.map(lambda _: work(), range(BATCH))), seconds, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (SIZE, SIZE, 3), np.uint8)
    labels = rng.integers(0, 32, (SIZE, SIZE, 1), np.uint8)
    big, big_labels = cv2.resize(image, (ZOOMED, ZOOMED)), cv2.resize(labels, (ZOOMED, ZOOMED))[..., None]
    b, c, s, h = FACTORS
    matrix, offset = stages.colour_matrix(*FACTORS)
    rows = {}

    def row(stage, library, ms):
        rows.setdefault(stage, {})[library] = round(ms, 2)
        print(f"{stage:10s} {library:34s} {ms:6.2f} ms/sample", flush=True)

    def dali_rows(device: str) -> None:  # the lambdas are built and timed in this call
        def d(define, *inputs):
            return dali_row(define, inputs or (image,), device, args.seconds, args.repeats)

        row("reference", f"DALI {device} copy",
            d(lambda x: x + 0 if device == "gpu" else fn.cast(x, dtype=types.UINT8)))
        row("reference", f"DALI {device} brightness_contrast", d(lambda x: fn.brightness_contrast(x, brightness=b,
                                                                                                  contrast=c)))
        row("colour", f"DALI {device} color_twist", d(lambda x: fn.color_twist(x, brightness=b, contrast=c,
                                                                               saturation=s, hue=h)))
        row("colour", f"DALI {device} coord_transform, the same map", d(lambda x: fn.coord_transform(
            x, M=matrix.astype(np.float32).ravel().tolist(), T=[offset] * 3, dtype=types.UINT8)))
        row("colour", f"DALI {device} hsv, saturation and hue only", d(lambda x: fn.hsv(x, saturation=s, hue=h)))
        row("rotate", f"DALI {device} rotate image+labels", d(lambda x, y: dali_graph.rotate(
            x, y, types.Constant(ANGLE), ClassMap.from_ids(32), framed=device == "cpu"), image, labels))
        row("rotate", f"DALI {device} rotate image, fill_value", d(lambda x: fn.rotate(x, angle=ANGLE, keep_size=True,
                                                                                      fill_value=0)))
        row("rotate", f"DALI {device} rotate image, no fill", d(lambda x: fn.rotate(x, angle=ANGLE, keep_size=True)))
        row("zoom", f"DALI {device} resize image+labels", d(lambda x, y: (
            fn.resize(x, resize_x=SIZE, resize_y=SIZE, antialias=True),
            fn.resize(y, resize_x=SIZE, resize_y=SIZE, interp_type=types.INTERP_NN, antialias=False)), big, big_labels))

    for device in ["cpu"] + (["gpu"] if dali_gpu_count() else []):
        dali_rows(device)
    m34 = np.concatenate([matrix, np.full((3, 1), offset)], 1)
    row("colour", "OpenCV transform", threaded(lambda: cv2.transform(image, m34), args.seconds, args.repeats))
    row("rotate", "OpenCV warpAffine image+labels", threaded(lambda: (
        stages.rotate(image, ANGLE, 0, labels=False), stages.rotate(labels, ANGLE, 255, labels=True)),
        args.seconds, args.repeats))
    row("zoom", "OpenCV resize image+labels", threaded(lambda: (
        stages.resize(big, (SIZE, SIZE), labels=False), stages.resize(big_labels, (SIZE, SIZE), labels=True)),
        args.seconds, args.repeats))
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow as tf

        from daliloader.backends import tfops
    except ImportError:
        print("TensorFlow is not installed: its rows are skipped")
    else:
        images, label_batch = tf.constant(np.stack([image] * BATCH)), tf.constant(np.stack([labels] * BATCH))
        colour = tf.function(lambda x: tf.map_fn(lambda im: tfops.colour(im, FACTORS), x, fn_output_signature=tf.uint8))
        turn = tf.function(lambda x, y: tf.map_fn(lambda a: tfops.rotate(a[0], a[1], ANGLE, 255), (x, y),
                                                  fn_output_signature=(tf.uint8, tf.uint8)))
        row("colour", "TensorFlow tfops.colour", timed(lambda: colour(images).numpy(), args.seconds, args.repeats))
        row("rotate", "TensorFlow tfops.rotate image+labels",
            timed(lambda: turn(images, label_batch)[0].numpy(), args.seconds, args.repeats))
    if args.json:
        report = {"machine": machine_info(), "batch": BATCH, "size": SIZE, "zoomed_from": ZOOMED, "factors": FACTORS,
                  "angle": ANGLE, "seconds": args.seconds, "repeats": args.repeats, "ms_per_sample": rows}
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
