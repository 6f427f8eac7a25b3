"""What a colour mask costs each loader per sample, on one CPU thread: its PNG decoded whole, and its crop's
colours turned into classes.

Colour to class, on a crop of each mask (every way checked against ``ClassMap.map_mask`` first):
  dali-uint16     the DALI graph's mapping (``dali_graph.map_labels``): two lookup tables per group of
                  the palette's (r, g) pairs, the keys computed in uint16 from the uint8 channels
  dali-int32      the same tables with the keys computed in int32 from a cast mask, as the graph computed
                  them until 2026-11-27 (its tables then differed a little: one table of (r, g) pairs for
                  every group, and one more multiplication per pixel), kept here to measure the change
  tf-gather       the tfdata backend's (``tfdata.map_labels``): one gather per pixel from the 16 MB table
  tf-hash         the expert's (``bench.expert``): ``tf.lookup.StaticHashTable`` of packed colours
  numpy           the reference (``ClassMap.map_mask``, the OpenCV backend's): one read per pixel, 16 MB table
Decoding the whole colour PNG: DALI's CPU decoder (nvImageCodec), ``tf.io.decode_png``, ``cv2.imdecode``.

One thread each (DALI ``num_threads=1``, TensorFlow's pools of 1, OpenCV's 1), so that the figures are
the cost per sample on a core; a batch of the embedded dataset's masks per call; the median of
``--repeats`` windows of ``--seconds`` after a warm-up; ms per mask.

  usage: python benchmarks/label_lookup.py [--n 32] [--crop 512 512] [--seconds 1] [--repeats 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import cv2
import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def ms_per_mask(step: Callable[[], object], count: int, seconds: float, repeats: int) -> float:
    """The median over ``repeats`` windows of ``seconds`` of ``step()``'s time per mask (``count`` per
    call), after two calls of warm-up."""
    step(), step()
    found = []
    for _ in range(repeats):
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            step()
            calls += 1
        found.append(1000 * (time.perf_counter() - start) / (calls * count))
    return statistics.median(found)


def dali_run(inputs: list[np.ndarray], define: Callable, layout: str | None = "HWC"):
    """A one-thread DALI CPU pipeline over the batch ``inputs``: ``define(node)`` of it; returns ``run``."""
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=len(inputs), num_threads=1, device_id=None, prefetch_queue_depth=1)
    def pipe():
        return define(fn.external_source(source=[inputs], cycle=True, batch=True, layout=layout))

    p = pipe()
    p.build()
    return lambda: [np.asarray(t) for t in p.run()[0]]


def int32_chain(mask, classes):
    """dali-int32: the same tables as ``map_labels``, the keys computed in int32 from a cast mask."""
    from nvidia.dali import fn, types
    from nvidia.dali import math as dmath

    from daliloader.backends.dali_graph import _lookup

    out = types.UINT8 if classes.label_dtype == np.uint8 else types.UINT16
    rgb = fn.cast(mask, dtype=types.INT32)
    pair = rgb[:, :, 0:1] * 256 + rgb[:, :, 1:2]
    labels = None
    for group in classes.rgb_tables().groups:
        found = _lookup(_lookup(pair, group.pairs, types.INT32) + rgb[:, :, 2:3], group.colours, out)
        labels = found if labels is None else dmath.min(labels, found)
    return labels


def tf_ways(classes, crops: list[np.ndarray], encoded: list[bytes]) -> tuple[dict[str, Callable], Callable]:
    """The TensorFlow ways, on one thread: the label ways (tf-gather, tf-hash), and ``decode_png``."""
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    from daliloader.backends import tfdata
    from daliloader.bench.expert import _class_table

    table, lut = _class_table(classes), tf.constant(classes.lookup_table)
    tensors, pngs = [tf.constant(c) for c in crops], [tf.constant(e) for e in encoded]

    @tf.function
    def hashed(crop):
        m = tf.cast(crop, tf.int32)
        return table.lookup(m[..., 0] * 65536 + m[..., 1] * 256 + m[..., 2])

    gather = tf.function(lambda crop: tfdata.map_labels(crop, classes, lut))
    decode = tf.function(lambda png: tf.io.decode_png(png, channels=3))
    return ({"tf-gather": lambda: [gather(t).numpy() for t in tensors],
             "tf-hash": lambda: [hashed(t).numpy() for t in tensors]},
            lambda: [decode(p).numpy() for p in pngs])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32, help="masks of the embedded dataset (960x720)")
    parser.add_argument("--crop", type=int, nargs=2, default=(512, 512), metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from nvidia.dali import fn, types

    from daliloader.backends import dali_graph
    from daliloader.bench import machine_info
    from daliloader.report import write_json
    from daliloader.synthetic import default_dataset

    cv2.setNumThreads(1)
    data = default_dataset()
    classes, (h, w) = data.classes, args.crop
    encoded = [Path(m).read_bytes() for m in data.masks[:args.n]]
    crops = [np.ascontiguousarray(cv2.imdecode(np.frombuffer(e, np.uint8), cv2.IMREAD_COLOR)[:h, :w, ::-1])
             for e in encoded]
    want = [classes.map_mask(c) for c in crops]
    tf_labels, tf_decode = tf_ways(classes, crops, encoded)
    labels = {"dali-uint16": dali_run(crops, lambda m: dali_graph.map_labels(m, classes)),
              "dali-int32": dali_run(crops, lambda m: int32_chain(m, classes)),
              **tf_labels, "numpy": lambda: [classes.map_mask(c) for c in crops]}
    raw = [np.frombuffer(e, np.uint8) for e in encoded]
    decodes = {"decode dali": dali_run(raw, lambda e: fn.decoders.image(e, device="cpu", output_type=types.RGB),
                                       layout=None),
               "decode tf.io.decode_png": tf_decode,
               "decode cv2.imdecode": lambda: [cv2.imdecode(r, cv2.IMREAD_COLOR) for r in raw]}
    for name, way in labels.items():
        got = way()
        if not all(np.array_equal(np.reshape(g, x.shape), x) for g, x in zip(got, want)):
            raise SystemExit(f"{name}: labels differ from ClassMap.map_mask")
    report = {"machine": machine_info(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "masks": len(crops), "mask_size": list(cv2.imdecode(raw[0], 1).shape[:2]),
              "crop": [h, w], "classes": classes.num_classes,
              "method": f"one thread each; median of {args.repeats} windows of {args.seconds} s after a warm-up; "
                        "ms per mask", "labels_ms": {}, "decode_ms": {}}
    for key, group in (("labels_ms", labels), ("decode_ms", decodes)):
        for name, way in group.items():
            report[key][name] = round(ms_per_mask(way, len(crops), args.seconds, args.repeats), 3)
            print(f"{name:24} {report[key][name]:7.3f} ms per mask")
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
