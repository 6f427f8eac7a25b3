"""The ``daliloader`` command line."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("DALILOADER_CACHE", Path.home() / ".cache" / "daliloader"))


def default_dataset(n: int, image_format: str = "jpg", size=(960, 720)):
    """The embedded synthetic dataset, generated once into the cache folder."""
    import daliloader as dl

    root = cache_dir() / f"synthetic-{image_format}-{size[0]}x{size[1]}-n{n}"
    done = root / ".complete"
    if done.exists():
        return dl.SegmentationData.from_dirs(root / "train", root / "train_labels", root / "class_dict.csv")
    data = dl.synthetic.make_dataset(root, n=n, image_format=image_format, size=size, progress=True)
    done.touch()
    return data


def measure(dataset, batch_size: int, seconds: float, repeats: int) -> list[float]:
    """Images/s of ``repeats`` timed windows of about ``seconds`` each, after one warm-up epoch."""
    it = iter(dataset)
    for _ in range(len(dataset)):  # warm-up: the pipeline's first epoch, prefetch filled
        next(it)
    rates = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            try:
                batch = next(it)
            except StopIteration:
                it = iter(dataset)
                continue
            batch[0].numpy()[0, 0, 0]  # wait for the batch itself, not just its handle
            n += batch_size
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        rates.append(n / elapsed)
    return rates


def cmd_demo(args) -> int:
    import daliloader as dl
    from daliloader.loaders import dali_gpu_count
    from rich.console import Console
    from rich.table import Table

    console = Console()
    data = default_dataset(args.n)
    console.print(f"dataset: {data} in {Path(data.images[0]).parent.parent}")
    backends = ["dali-cpu"] + (["dali-gpu"] if dali_gpu_count() else [])
    table = Table(title=f"tf_dataset throughput, batch {args.batch_size}, {args.image_size}x{args.image_size} random crops, "
                        f"{platform.node() or 'this machine'}: {os.cpu_count()} CPU cores")
    for col in ("backend", "labels", "images/s (median)", "spread (min-max)", "repeats"):
        table.add_column(col, justify="right" if col != "backend" else "left")
    for backend in backends:
        for label_mode in ("onehot", "int"):
            ds = dl.tf_dataset(data, batch_size=args.batch_size, image_size=(args.image_size, args.image_size),
                               crop="random", label_mode=label_mode, backend=backend, seed=0)
            with console.status(f"measuring {backend} / {label_mode} ..."):
                rates = measure(ds, args.batch_size, args.seconds, args.repeats)
            table.add_row(backend, label_mode, f"{statistics.median(rates):.1f}",
                          f"{min(rates):.1f}-{max(rates):.1f}", str(len(rates)))
    console.print(table)
    return 0


def data_source(args):
    """What DATA / --images --masks --classes name: a folder in a known layout, or the from_dirs arguments."""
    explicit = [args.images, args.masks, args.classes]
    if any(explicit):
        if not all(explicit):
            raise ValueError("--images, --masks and --classes go together (or give DATA, a dataset folder)")
        if args.data is not None:
            raise ValueError("give either DATA or --images/--masks/--classes, not both")
        return dict(images=args.images, masks=args.masks, classes=args.classes, mask_suffix=args.mask_suffix)
    return args.data


def load_data(args):
    """The SegmentationData the command runs on; the embedded default when no DATA is given."""
    import daliloader as dl

    source = data_source(args)
    if source is None:
        return default_dataset(args.n)
    if isinstance(source, dict):
        return dl.SegmentationData.from_dirs(**source)
    return dl.SegmentationData.from_folder(source, split=args.split)


def cmd_check(args) -> int:
    from daliloader.checks import check

    source = data_source(args)
    if source is None:
        raise ValueError("name the dataset to check: DATA (a dataset folder) or --images/--masks/--classes")
    report = check(source, split=args.split, workers=args.workers, progress=not args.quiet)
    print(report)
    if args.json:
        Path(args.json).write_text(report.to_json())
        print(f"wrote {args.json}")
    return 0 if report.ok else 1


def cmd_synth(args) -> int:
    import daliloader as dl

    w, h = args.size
    data = dl.synthetic.make_dataset(args.out, n=args.n, image_format=args.format, size=(w, h), seed=args.seed,
                                     progress=True)
    print(f"wrote {data} to {args.out}")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def add_data_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("data", nargs=None if required else "?", type=Path, default=None, metavar="DATA",
                        help="dataset folder: SPLIT/ + SPLIT_labels/ + class_dict.csv (CamVid), images/ + masks/ + "
                             "class_dict.csv, or leftImg8bit/SPLIT + gtFine/SPLIT (Cityscapes)"
                             + ("" if required else "; default: the embedded synthetic dataset"))
    parser.add_argument("--split", default="train", help="split folder name in DATA (default: train)")
    parser.add_argument("--images", type=Path, help="image folder (instead of DATA)")
    parser.add_argument("--masks", type=Path, help="mask folder (instead of DATA)")
    parser.add_argument("--classes", type=Path, help="class_dict.csv (name,r,g,b) for --images/--masks")
    parser.add_argument("--mask-suffix", default=None, help="mask name suffix, e.g. _L (default: detected)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daliloader", description="GPU data loading for Keras segmentation.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="measure tf_dataset throughput on the embedded synthetic dataset",
                          description="Generate (once) the embedded CamVid-like dataset, 960x720 JPEG images with "
                                      "PNG colour masks, and measure tf_dataset throughput on every DALI backend "
                                      "this machine has: one warm-up epoch, then the median of timed repeats.")
    demo.add_argument("--n", type=_positive_int, default=64, help="images in the dataset (default 64)")
    demo.add_argument("--batch-size", type=_positive_int, default=8)
    demo.add_argument("--image-size", type=_positive_int, default=512, help="square crop side (default 512)")
    demo.add_argument("--seconds", type=_positive_float, default=3.0, help="length of one timed repeat")
    demo.add_argument("--repeats", type=_positive_int, default=3)
    demo.set_defaults(func=cmd_demo)

    check = sub.add_parser("check", help="find bad files before training",
                           description="Decode every image/mask pair in parallel and report, per file: missing, "
                                       "empty, unsupported, truncated or corrupt files, image/mask size "
                                       "mismatches, mask colours or ids not in the class map (with pixel "
                                       "counts), tiny images, lossy masks and unpaired files. Exit status 1 when "
                                       "anything is wrong, 0 when all is well.")
    add_data_arguments(check, required=False)
    check.add_argument("--workers", type=_positive_int, default=None, help="decoding threads (default: all cores)")
    check.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    check.add_argument("--quiet", action="store_true", help="no progress bar")
    check.set_defaults(func=cmd_check)

    synth = sub.add_parser("synth", help="write the synthetic dataset", description="Write the synthetic "
                           "CamVid-layout dataset: OUT/train, OUT/train_labels, OUT/class_dict.csv.")
    synth.add_argument("out", type=Path)
    synth.add_argument("--n", type=_positive_int, default=64)
    synth.add_argument("--format", choices=("jpg", "png"), default="jpg")
    synth.add_argument("--size", type=_positive_int, nargs=2, default=(960, 720), metavar=("WIDTH", "HEIGHT"))
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(func=cmd_synth)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return args.func(args)
    except (ImportError, ValueError) as e:  # DaliloaderError subclasses ValueError/RuntimeError
        print(f"daliloader {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
