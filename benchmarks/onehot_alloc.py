"""What TensorFlow's CPU allocator costs a batch of one-hot labels: ``TF_CPU_ALLOCATOR_USE_BFC`` on (the
default ``import daliloader`` sets) and off (the system's allocator, TensorFlow's own default).

A one-hot batch of 8 samples of 512x512 and 32 classes is 268 MB of float32, made anew at every step. The
system's allocator hands such a tensor fresh pages from the kernel each time, and writing them costs the
page faults; TensorFlow's caching (BFC) allocator reuses its own. Each setting is timed in a process of its
own (TensorFlow reads the variable when it starts), in turn, ``--rounds`` times: the median of each
process's timed windows of ``daliloader.backends.tfops.one_hot`` on the same batch of class indices, and
the same for the normalization of a uint8 image batch (``tfops.normalize``), in ms per sample.

  usage: python benchmarks/onehot_alloc.py [--batch 8] [--size 512] [--classes 32] [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys, time
import numpy as np
import daliloader
import tensorflow as tf
from daliloader.backends.tfops import normalize, one_hot
from daliloader.spec import make_spec
batch, size, classes = (int(v) for v in sys.argv[1:4])
rng = np.random.default_rng(0)
labels = tf.constant(rng.integers(0, classes, (batch, size, size), dtype=np.uint8))
pixels = tf.constant(rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8))
spec = make_spec(image_size=(size, size))
def ms_per_sample(step):
    for _ in range(3):  # warm-up
        step()
    found = []
    for _ in range(5):
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < 1.0:
            step()
            n += 1
        found.append(1000 * (time.perf_counter() - start) / (n * batch))
    return sorted(found)[2]
print(json.dumps({"one_hot": ms_per_sample(lambda: one_hot(labels, classes).numpy()[0, 0, 0]),
                  "normalize": ms_per_sample(lambda: normalize(pixels, spec).numpy()[0, 0, 0])}))
"""


def timed(bfc: bool, batch: int, size: int, classes: int) -> dict:
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true" if bfc else "false"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(batch), str(size), str(classes)], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--classes", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from daliloader.bench import machine_info

    found = {setting: [] for setting in ("bfc", "system")}
    for _ in range(args.rounds):  # in turn: a drift of the machine touches both alike
        for setting in found:
            found[setting].append(timed(setting == "bfc", args.batch, args.size, args.classes))
    result = {setting: {op: round(statistics.median(r[op] for r in runs), 2) for op in ("one_hot", "normalize")}
              for setting, runs in found.items()}
    for op in ("one_hot", "normalize"):
        print(f"{op}: {result['system'][op]} ms per sample with the system's allocator, {result['bfc'][op]} with "
              f"TensorFlow's BFC allocator")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine_info(), "settings": vars(args) | {"json": str(args.json)},
                                         "ms_per_sample": result, "runs": found}, indent=1) + "\n")


if __name__ == "__main__":
    main()
