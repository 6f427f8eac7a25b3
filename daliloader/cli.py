"""The ``daliloader`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from daliloader.bench import BENCH_BACKENDS


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


def cmd_bench(args) -> int:
    from rich.console import Console

    import daliloader as dl
    from daliloader import bench
    from daliloader.loaders import dali_gpu_count
    from daliloader.prepare import load_manifest

    console = Console()
    data = load_data(args)
    gpu, tf = dali_gpu_count() > 0, bench.has_tensorflow()
    backends = args.backends or [b for b in bench.BENCH_BACKENDS
                                 if (gpu or b != "dali-gpu") and (tf or b not in bench.TF_ONLY)]
    if "dali-gpu" in backends and not gpu:
        raise ValueError("--backends: dali-gpu needs a CUDA GPU that DALI can see; none was found")
    if not tf:
        if set(backends) & set(bench.TF_ONLY) or args.train:
            raise ValueError(f"{', '.join(sorted(set(backends) & set(bench.TF_ONLY))) or '--train'} needs TensorFlow, "
                             "Keras and DALI's TF plugin (`make install`); without them bench measures "
                             "dali-gpu, dali-cpu and opencv")
        console.print("TensorFlow is not installed: DALI backends are timed through pipeline.run, opencv "
                      "without Keras")
    workers = args.workers or os.cpu_count() or 1
    size = (args.image_size, args.image_size)
    console.print(f"dataset: {data}, {Path(data.images[0]).parent}")
    report = {"machine": bench.machine_info(), "dataset": {"images": str(Path(data.images[0]).parent), "pairs": len(data),
                                                           "classes": data.classes.num_classes},
              "settings": {"batch_size": args.batch_size, "image_size": list(size), "crop": "random",
                           "label_modes": args.label_mode, "seconds": args.seconds, "repeats": args.repeats,
                           "workers": workers, "backends": backends},
              "method": "median of repeats after a one-epoch warm-up; images/s", "ceilings": {}, "results": [],
              "stages": {}}

    def run(what: str, fn):
        with console.status(f"measuring {what} ..."):
            return fn()

    ceil = report["ceilings"]
    for what in ("pairs", "images", "masks"):
        rates = run(f"CPU decode ceiling ({what})",
                    lambda: bench.cpu_decode_ceiling(data, workers, args.seconds, args.repeats, what))
        ceil[f"cpu_decode_{what}"] = bench.Measurement(f"cpu-decode-{what}", None, rates, f"{what}/s").to_dict()
    if gpu:
        rates = run("nvJPEG decode ceiling", lambda: bench.nvjpeg_ceiling(data, args.batch_size, args.seconds, args.repeats))
        ceil["nvjpeg_images"] = bench.Measurement("nvjpeg-images", None, rates, "images/s").to_dict()

    datasets = {"original": data}
    if args.prepared is not None:
        out = prepared_copy(data, args.prepared, console)
        report["dataset"]["prepared"] = str(out)
        datasets["prepared"] = dl.SegmentationData.from_prepared(out)
        if load_manifest(out)["shards"]:
            datasets["shards"] = dl.SegmentationData.from_prepared(out, shards=True)
        else:
            console.print(f"{out} has no shards (`daliloader prepare --shards N` writes them): not measured")
        for what in ("pairs", "masks") if gpu else ("pairs",):  # masks: what binds dali-gpu next to nvJPEG
            rates = run(f"CPU decode ceiling (prepared {what})", lambda: bench.cpu_decode_ceiling(
                datasets["prepared"], workers, args.seconds, args.repeats, what))
            ceil[f"cpu_decode_{what}_prepared"] = bench.Measurement(f"cpu-decode-{what}-prepared", None, rates,
                                                                    f"{what}/s").to_dict()
    for which, source in datasets.items():
        suffix = "" if which == "original" else "_prepared"
        # shards are read by DALI's webdataset reader; opencv and tfdata read the prepared files
        for backend in (b for b in backends if which != "shards" or b.startswith("dali")):
            for mode in args.label_mode:
                stream = bench.backend_stream(backend, source, args.batch_size, size, mode, workers)
                warmup = max(1, len(source) // args.batch_size)
                rates = run(f"{backend} / {mode} / {which}", lambda: bench.measure(
                    lambda: bench.touch(next(stream)), args.batch_size, args.seconds, args.repeats, warmup))
                m = {**bench.Measurement(backend, mode, rates).to_dict(), "data": which, "via": bench.via(backend)}
                bound = ceil[f"cpu_decode_pairs{suffix}"]["median"]
                if backend == "dali-gpu":
                    bound = min(ceil["nvjpeg_images"]["median"], ceil[f"cpu_decode_masks{suffix}"]["median"])
                m["fraction_of_ceiling"] = round(m["median"] / bound, 3)
                report["results"].append(m)
                del stream

    if not args.no_stages:
        mode = args.label_mode[0]
        for device in (["gpu"] if gpu else []) + ["cpu"]:
            report["stages"][f"dali-{device}"] = run(f"dali-{device} stages", lambda: bench.dali_stages(
                data, device, args.batch_size, size, mode, args.seconds / 2, args.repeats))
        report["stages"]["opencv (1 thread)"] = run("opencv stages", lambda: bench.opencv_stages(data, size, mode))

    if args.train:
        trained = [b for b in backends if b != "tfdata-naive"]
        report["train"] = run("training step times", lambda: bench.train_bound(
            data, trained, args.batch_size, size, args.label_mode[0], args.train_steps, workers))

    print_report(console, report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        console.print(f"wrote {args.json}")
    if args.plot:
        plot_report(report, args.plot)
        console.print(f"wrote {args.plot}")
    return 0


#: Samples per webdataset tar in the bench's prepared copy.
BENCH_SHARD_SIZE = 256


def prepared_copy(data, where: str, console) -> Path:
    """The folder of the prepared copy (with shards) the bench compares with: ``where`` names one
    (made there if absent), or is ``"cache"``: made once for this dataset in the cache folder."""
    import hashlib

    from daliloader.prepare import MANIFEST, VERSION, prepare

    if where == "cache":
        digest = hashlib.sha1("\n".join(data.images + data.masks).encode()).hexdigest()[:12]
        out = cache_dir() / f"prepared-v{VERSION}-{Path(data.images[0]).parent.name}-n{len(data)}-{digest}"
    else:
        out = Path(where)
    if not (out / MANIFEST).exists():
        with console.status(f"preparing {len(data)} pairs into {out} ..."):
            prepare(data, out, shard_size=BENCH_SHARD_SIZE, progress=False,
                    source={"made_by": "daliloader bench --prepared"})
    return out


def print_report(console, report: dict) -> None:
    from rich.table import Table

    m, st = report["machine"], report["settings"]
    title = (f"images/s, batch {st['batch_size']}, {st['image_size'][0]}x{st['image_size'][1]} random crops; "
             f"{m['cpu_count']} CPU cores ({m['cpu']}){'; GPU ' + m['gpu'][0] if m['gpu'] else ''}")
    table = Table(title=title)
    prepared = any(r.get("data", "original") != "original" for r in report["results"])
    for col in ("loader", "labels") + (("data",) if prepared else ()) + ("median", "min-max", "of ceiling"):
        table.add_column(col, justify="left" if col in ("loader", "labels", "data") else "right")
    data_cell = (lambda value: (value,)) if prepared else (lambda value: ())
    for key, c in report["ceilings"].items():
        which = "prepared" if key.endswith("_prepared") else "original"
        table.add_row(f"[dim]ceiling: {key.removesuffix('_prepared').replace('_', ' ')}[/dim]", "", *data_cell(which),
                      f"{c['median']:.1f}", f"{c['min']:.1f}-{c['max']:.1f}", "")
    for r in report["results"]:
        table.add_row(r["name"], r["label_mode"], *data_cell(r.get("data", "original")), f"{r['median']:.1f}",
                      f"{r['min']:.1f}-{r['max']:.1f}", f"{100 * r['fraction_of_ceiling']:.0f}%")
    for name, rows in report.get("stages", {}).items():
        stages = Table(title=f"where time goes: {name}, ms per image")
        stages.add_column("stage")
        stages.add_column("ms/img", justify="right")
        for row in rows:
            stages.add_row(row["stage"], f"{row['ms_per_img']:.2f}")
        console.print(stages)
    console.print(table)  # the main table last (after the breakdowns), unless --train adds its own
    if "train" in report:
        train = Table(title="small U-Net training: step time per loader vs one cached batch")
        for col in ("loader", "step ms", "cached-batch floor ms", "waiting for input"):
            train.add_column(col, justify="left" if col == "loader" else "right")
        for name, row in report["train"].items():
            train.add_row(name, f"{row['step_ms']:.1f}", f"{row['cached_batch_floor_ms']:.1f}",
                          f"{100 * row['waiting_share']:.0f}%")
        console.print(train)


def plot_report(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    data = {"prepared": ", prepared", "shards": ", prepared shards"}
    labels = [f"{r['name']} ({r['label_mode']}{data.get(r.get('data'), '')})" for r in results]
    med = [r["median"] for r in results]
    err = [[r["median"] - r["min"] for r in results], [r["max"] - r["median"] for r in results]]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(results) + 1.8))
    ax.barh(labels, med, xerr=err, color="#4c72b0", capsize=3)
    colors = ("#c44e52", "#dd8452", "#55a868", "#8172b3", "#937860")
    for (key, c), color in zip(report["ceilings"].items(), colors):
        ax.axvline(c["median"], color=color, linestyle="--", label=f"ceiling: {key.replace('_', ' ')}")
    ax.invert_yaxis()
    m, st = report["machine"], report["settings"]
    ax.set_xlabel("images/s (median of repeats; bars: min-max)")
    ax.set_title(f"{st['image_size'][0]}x{st['image_size'][1]} crops, batch {st['batch_size']}; "
                 f"{m['cpu_count']} CPU cores{', ' + m['gpu'][0].split(',')[0] if m['gpu'] else ', no GPU'}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def cmd_preview(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import daliloader as dl

    data = load_data(args)
    size = (args.image_size, args.image_size)
    pipe, _ = dl.dali_pipeline(data, batch_size=args.batch_size, image_size=size, crop="random",
                               scale=tuple(args.scale), label_mode="int", backend="dali-cpu",
                               seed=args.seed)
    from daliloader.dali.graph import to_numpy

    rows = []
    for _ in range(args.batches):
        images, labels = to_numpy(pipe.run())
        rows += list(zip(images, labels))
    fig, axes = plt.subplots(len(rows), 2, figsize=(5, 2.5 * len(rows)), squeeze=False)
    for (image, labels), (a, b) in zip(rows, axes):
        a.imshow(np.clip(image, 0, 1))
        b.imshow(data.classes.colorize(labels))
        a.axis("off")
        b.axis("off")
    axes[0][0].set_title("image", fontsize=9)
    axes[0][1].set_title("mask (class palette; ignore = black)", fontsize=9)
    fig.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=100)
    print(f"wrote {args.output}: {len(rows)} augmented samples from {args.batches} batches")
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


def cmd_prepare(args) -> int:
    from daliloader.prepare import prepare

    data = load_data(args)
    source = {"data": str(args.data or ""), "split": args.split}
    m = prepare(data, args.out, jpeg_quality=args.jpeg_quality, shard_size=args.shards, workers=args.workers,
                progress=not args.quiet, source=source)
    print(f"prepared {len(m['pairs'])} pairs into {args.out} in {m['seconds']} s: masks as 8-bit class indices "
          f"({m['masks']['unknown_pixels']} pixels of unknown values -> ignore index "
          f"{m['classes']['ignore_index']}, in {len(m['masks']['pairs_with_unknown_values'])} masks)")
    images = m["images"]
    if images["reencoded"]:
        print(f"  {images['reencoded']} photos re-encoded as JPEG: PSNR mean {images['psnr_db']['mean']} dB, "
              f"min {images['psnr_db']['min']} dB")
    else:
        print("  images copied byte for byte")
    if m["shards"]:
        print(f"  {len(m['shards']['tars'])} webdataset shard(s) of up to {m['shards']['samples_per_shard']} samples")
    print(f"  load it with dl.SegmentationData.from_prepared({str(args.out)!r}"
          f"{', shards=True' if m['shards'] else ''})")
    if args.verify:
        return cmd_verify(args)
    return 0


def cmd_verify(args) -> int:
    from daliloader.prepare import verify

    report = verify(args.out, workers=args.workers, progress=not args.quiet)
    print(report)
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


def _choices(allowed):
    """A comma-separated list of names from ``allowed``."""
    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)} (comma-separated)")
        return names
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daliloader", description="GPU data loading for Keras segmentation.")
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="throughput of every loader, CPU vs GPU, next to the decode ceilings",
                           description="Measure each backend's steady-state throughput on the same data and "
                                       "settings (one warm-up epoch, then the median and spread of timed repeats), "
                                       "the decode-only ceilings of this machine (all CPU cores decoding the same "
                                       "files; nvJPEG alone with a GPU), and where time goes stage by stage. With "
                                       "no DATA it generates the embedded CamVid-like dataset (960x720 JPEG + PNG "
                                       "colour masks) once in $DALILOADER_CACHE or ~/.cache/daliloader.")
    add_data_arguments(bench, required=False)
    bench.add_argument("--n", type=_positive_int, default=64, help="pairs in the embedded dataset (default 64)")
    bench.add_argument("--backends", type=_choices(BENCH_BACKENDS), default=None,
                       help=f"comma-separated, from {','.join(BENCH_BACKENDS)} (default: all this machine has)")
    bench.add_argument("--batch-size", type=_positive_int, default=8)
    bench.add_argument("--image-size", type=_positive_int, default=512, help="square crop side (default 512)")
    bench.add_argument("--label-mode", type=_choices(("onehot", "int")), default=["onehot"],
                       help="onehot, int or onehot,int (default onehot)")
    bench.add_argument("--seconds", type=_positive_float, default=3.0, help="length of one timed repeat (default 3)")
    bench.add_argument("--repeats", type=_positive_int, default=3, help="timed repeats per figure (default 3)")
    bench.add_argument("--workers", type=_positive_int, default=None,
                       help="threads for opencv and the CPU ceilings (default: all cores)")
    bench.add_argument("--no-stages", action="store_true", help="skip the per-stage breakdown")
    bench.add_argument("--train", action="store_true",
                       help="also train a small U-Net fed by each backend and by one cached batch: input-bound analysis")
    bench.add_argument("--prepared", nargs="?", const="cache", default=None, metavar="DIR",
                       help="also measure every backend on a prepared copy (8-bit class-index masks, see "
                            "`daliloader prepare`), and the DALI backends reading its webdataset shards: DIR "
                            "(made there, with shards, if absent); alone: made once in the cache")
    bench.add_argument("--train-steps", type=_positive_int, default=8, help="timed training steps (default 8)")
    bench.add_argument("--json", type=Path, help="write the full report (machine, versions, settings, figures) here")
    bench.add_argument("--plot", type=Path, help="write a bar chart PNG here")
    bench.set_defaults(func=cmd_bench)

    preview = sub.add_parser("preview", help="a picture of augmented samples beside their coloured masks",
                             description="Run the DALI CPU pipeline with random crops and write a grid: each "
                                         "augmented image beside its mask coloured with the class palette.")
    add_data_arguments(preview, required=False)
    preview.add_argument("-o", "--output", type=Path, required=True, help="PNG file to write")
    preview.add_argument("--n", type=_positive_int, default=64, help="pairs in the embedded dataset (default 64)")
    preview.add_argument("--batches", type=_positive_int, default=2)
    preview.add_argument("--batch-size", type=_positive_int, default=3)
    preview.add_argument("--image-size", type=_positive_int, default=256)
    preview.add_argument("--scale", type=_positive_float, nargs=2, default=(0.5, 2.0), metavar=("MIN", "MAX"),
                         help="zoom range (default 0.5 2.0)")
    preview.add_argument("--seed", type=int, default=0)
    preview.set_defaults(func=cmd_preview)

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

    prep = sub.add_parser("prepare", help="one-time conversion: 8-bit class-index masks, packed shards",
                          description="Write a prepared copy of DATA into OUT that every loader reads faster, "
                                      "without changing a label: masks re-encoded as single-channel 8-bit class-index "
                                      "PNGs (the colour/id mapping done once; unknown values -> ignore index), images "
                                      "copied byte for byte, a manifest.json recording the class map and how it was "
                                      "made, and optionally webdataset shards with their DALI index files. Load it "
                                      "with SegmentationData.from_prepared(OUT).")
    add_data_arguments(prep, required=True)
    prep.add_argument("out", type=Path, metavar="OUT", help="new (or empty) folder for the prepared copy")
    prep.add_argument("--jpeg-quality", type=_positive_int, default=None, metavar="Q",
                      help="re-encode non-JPEG photos as JPEG of quality Q (1-100), decodable by nvJPEG on the GPU; "
                           "the quality lost (PSNR) is reported. Default: images are copied unchanged")
    prep.add_argument("--shards", type=_positive_int, default=None, metavar="N",
                      help="also write webdataset shards of N samples (image + mask in one tar, with .idx files)")
    prep.add_argument("--verify", action="store_true",
                      help="afterwards decode every prepared mask and compare it with the mapping of the original, "
                           "bit for bit (and copied images and shard members byte for byte); exit 1 on a difference")
    prep.add_argument("--workers", type=_positive_int, default=None, help="threads (default: all cores)")
    prep.add_argument("--quiet", action="store_true", help="no progress bar")
    prep.set_defaults(func=cmd_prepare)

    ver = sub.add_parser("verify", help="check a prepared copy against its originals",
                         description="Decode every mask of the prepared copy OUT and compare it with the mapping "
                                     "of its original, bit for bit; compare copied images and shard members "
                                     "byte for byte. Exit status 1 on any difference.")
    ver.add_argument("out", type=Path, metavar="OUT", help="a folder written by `daliloader prepare`")
    ver.add_argument("--workers", type=_positive_int, default=None, help="threads (default: all cores)")
    ver.add_argument("--quiet", action="store_true", help="no progress bar")
    ver.set_defaults(func=cmd_verify)

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
