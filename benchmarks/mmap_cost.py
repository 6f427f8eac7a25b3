"""What reading files with plain I/O instead of memory maps costs DALI's CPU graph.

DALI's readers (``fn.io.file.read`` for files, ``fn.readers.webdataset`` for packs) memory-map the files
they read by default; a file truncated or rewritten while it is mapped kills the process with SIGBUS
(exit 135), which no error handler sees. daliloader passes ``dont_use_mmap=True``
(``daliloader.backends.dali_graph.USE_MMAP = False``). This times dali-cpu through ``dali_pipeline``
with and without memory maps, interleaved round by round, on the embedded dataset's files and on its
prepared copy's packs (made in a temporary folder), with the bench's own timing (warm-up, windows).

  usage: python benchmarks/mmap_cost.py [--n 64] [--image-size 720 960] [--crop 512] [--seconds 2]
                                        [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import daliloader as dl
from daliloader.backends import dali_graph
from daliloader.bench import machine_info, measure
from daliloader.report import write_json
from daliloader.synthetic import make_dataset


def rate(data, use_mmap: bool, crop: int, seconds: float) -> float:
    """Images/s of dali-cpu on ``data`` (one pipeline, the default training recipe) with or without maps."""
    dali_graph.USE_MMAP = use_mmap
    pipe, steps = dl.dali_pipeline(data, batch_size=8, image_size=(crop, crop), backend="dali-cpu", seed=0,
                                   label_mode="int")
    found = measure(pipe.run, 8, seconds, repeats=1, warmup_batches=steps)
    del pipe
    return found[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--image-size", type=int, nargs=2, default=(720, 960))
    parser.add_argument("--crop", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = make_dataset(Path(tmp) / "data", n=args.n, image_size=tuple(args.image_size))
        dl.prepare(files, Path(tmp) / "prepared", pack_size=16, progress=False)
        datasets = {"files": files, "packs": dl.SegmentationData.from_prepared(Path(tmp) / "prepared", packs=True)}
        found = {f"{name} {'mmap' if m else 'plain I/O'}": [] for name in datasets for m in (True, False)}
        for _ in range(args.rounds):  # interleaved: a drift of the machine touches both alike
            for name, data in datasets.items():
                for use_mmap in (True, False):
                    found[f"{name} {'mmap' if use_mmap else 'plain I/O'}"].append(
                        rate(data, use_mmap, args.crop, args.seconds))
    medians = {k: statistics.median(v) for k, v in found.items()}
    for name in datasets:
        plain, mapped = medians[f"{name} plain I/O"], medians[f"{name} mmap"]
        print(f"{name}: memory maps {mapped:.1f} img/s, plain I/O {plain:.1f} img/s ({plain / mapped:.1%}); "
              f"rounds {found[f'{name} mmap']} / {found[f'{name} plain I/O']}")
    if args.json:
        write_json({"machine": machine_info(), "settings": vars(args) | {"json": str(args.json)},
                    "images_per_second": found, "median": medians}, args.json)


if __name__ == "__main__":
    main()
