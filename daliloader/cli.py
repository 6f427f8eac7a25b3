"""The ``daliloader`` command line: argument parsing and dispatch only. The jobs live in
:mod:`daliloader.bench`, :mod:`daliloader.report`, :mod:`daliloader.preparation`, :mod:`daliloader.verification`,
:mod:`daliloader.checks`, :mod:`daliloader.previews` and :mod:`daliloader.synthetic`; every daliloader
error ends as a message and exit status 2.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import sys
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path

from daliloader import augment, spec
from daliloader.bench import AUGMENT, BENCH_BACKENDS, DATA, REFERENCES
from daliloader.classes import CATALOGUE
from daliloader.environment import BEFORE_LOGGING, filtered_stderr, quiet_tensorflow_warnings, show_native_warnings
from daliloader.errors import DaliloaderError, OptionError, SpecError, flag


def cmd_bench(args) -> int:
    """``daliloader bench``: measure (each figure said as it comes), print the tables, write the JSON and
    chart asked for; 0."""
    from rich.console import Console

    from daliloader import bench, report

    console = Console()
    for path, option in ((args.json, "--json"), (args.plot, "--plot")):
        refuse_unwritable(path, option)  # before anything is measured, not after
    data = load_data(args)
    console.print(f"dataset: {data}, {bench.dataset_place(data)}")

    def status(what: str, fn):
        with console.status(f"measuring {what} ..."):
            return fn()

    result = bench.run(data, bench_settings(args), status=status, say=console.print)
    if args.json:
        report.write_json(result, args.json)
    return show_report(console, result, args.plot, written=args.json)


def bench_settings(args):
    """What bench's options ask for, as :class:`daliloader.bench.Settings`."""
    from daliloader import bench

    return bench.Settings(backends=tuple(args.backends) if args.backends else None, batch_size=args.batch_size,
                          image_size=args.image_size, label_modes=tuple(args.label_mode), seconds=args.seconds,
                          repeats=args.repeats, workers=args.workers, stages=not args.no_stages, train=args.train,
                          train_steps=args.train_steps, prepared=prepared_where(args), augment=args.augment,
                          tfrecord=args.tfrecord, memory=args.memory)


def cmd_report(args) -> int:
    """``daliloader report``: a saved report's tables (the data asked for) and chart; 0. A --data that keeps
    no figure is refused, naming the data the report holds."""
    from rich.console import Console

    from daliloader import report

    refuse_unwritable(args.plot, "--plot")  # before the tables are printed, not after
    whole = report.read_report(args.report)
    shown = whole.only(args.data)
    if not shown.results and whole.results:
        held = ", ".join(dict.fromkeys(r.data for r in whole.results))
        raise SpecError(f"--data {','.join(args.data)}: {args.report} holds no figure on that data; its figures are "
                        f"on {held}")
    return show_report(Console(), shown, args.plot)


def refuse_unwritable(path: Path | None, option: str) -> None:
    """Refuse an output file that could not be written (``option`` names it), before a run that would then
    be lost: a folder, a file that is not writable, or a place where no file can be made (the nearest
    folder that exists is tried with a temporary file, removed at once; missing folders are made later)."""
    import tempfile

    if path is None:
        return
    path = path.absolute()
    if path.is_dir():
        raise SpecError(f"{option} {path}: a folder; name the file to write")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise SpecError(f"{option} {path}: this file cannot be written; name another file")
        return
    folder = next(p for p in path.parents if p.exists())
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise SpecError(f"{option} {path}: no file can be written in {folder} ({e.strerror or e}); name a file in a "
                        "folder you can write") from None


def show_report(console, result, plot: Path | None, written: Path | None = None) -> int:
    """A bench report's tables, the chart (``plot``), and what was written."""
    from daliloader import report

    report.print_report(console, result)
    if plot:
        report.plot_report(result, plot)
    for path in (written, plot):
        if path:
            console.print(f"wrote {path}")
    return 0


def prepared_where(args) -> str | None:
    """--prepared [--prepared-dir DIR]: where the bench's prepared copy lives ("cache", a folder, or None)."""
    if args.prepared_dir is not None and not args.prepared:
        raise SpecError("--prepared-dir names the folder of --prepared's copy: add --prepared")
    return (str(args.prepared_dir) if args.prepared_dir is not None else "cache") if args.prepared else None


#: preview's options that are the loaders' options of the same name: the crop, the prologue's
#: (:data:`daliloader.spec.PROLOGUE`) and the declared stages' (:data:`daliloader.augment.OPTIONS`), all of them.
RECIPE_OPTIONS = ("crop",) + tuple(spec.PROLOGUE) + tuple(augment.OPTIONS)
#: What preview's training recipe takes where its flag is not given (the loaders' own default: no zoom).
PREVIEW_DEFAULTS = {"scale": AUGMENT["scale"]}


def described(options: dict) -> str:
    """Loader options as the help says them: ``scale 0.5-2, rotate 15, ...``."""
    def said(value) -> str:
        return "-".join(f"{v:g}" for v in value) if isinstance(value, tuple) else f"{value:g}"

    return ", ".join(f"{name} {said(value)}" for name, value in options.items())


def cmd_preview(args) -> int:
    """``daliloader preview``: the grid of a recipe's samples, and what it holds; 0."""
    from daliloader.previews import preview

    options = preview_recipe(args)
    n = preview(load_data(args), args.output, batches=args.batches, batch_size=args.batch_size,
                image_size=args.image_size, seed=args.seed, view=args.view, backend=args.backend, **options)
    recipe = "evaluation" if args.eval else "training"
    print(f"wrote {args.output}: {n} samples of the {recipe} recipe from {args.backend}, {args.batches} batches")
    return 0


def preview_recipe(args) -> dict:
    """The loaders' options that preview's options ask for: the evaluation recipe (--eval) with those named,
    or --augment's, then those named, then for random crops :data:`PREVIEW_DEFAULTS`."""
    named = {name: value for name in RECIPE_OPTIONS if (value := getattr(args, name)) is not None}
    if args.eval:
        refuse_draws_in_evaluation(args.augment, named)
        return named | {"training": False}
    options = ({k: v for k, v in AUGMENT.items() if k not in PREVIEW_DEFAULTS} if args.augment else {}) | named
    return (PREVIEW_DEFAULTS | options) if options.get("crop", "random") == "random" else options


def refuse_draws_in_evaluation(augment: bool, named: dict) -> None:
    """--eval previews the evaluation recipe, which draws nothing at random: --augment, --crop random and the
    options ``named`` (name -> value) that would draw (:func:`daliloader.spec.drawn_options`) are refused
    by their flags, before the loader would refuse them by its keywords."""
    drawn = ((["--augment"] if augment else []) + (["--crop random"] if named.get("crop") == "random" else [])
             + [flag(name) for name in spec.drawn_options(named)])
    if drawn:
        raise SpecError("--eval previews the evaluation recipe, which draws nothing at random: leave out "
                        + " and ".join(drawn))


def data_source(args):
    """What DATA / --images --masks --classes name: a folder (any known layout, or a prepared copy; a
    TFDS name resolved to its version folder, :func:`data_path`), or the from_dirs arguments."""
    if args.data_dir is not None and args.data is None:
        raise SpecError("--data-dir is where DATA, the name of a TFDS dataset, is prepared: give DATA (such as "
                        "oxford_iiit_pet, or cityscapes/semantic_segmentation:1.0.0)")
    if args.images or args.masks:
        if not (args.images and args.masks):
            raise SpecError("--images and --masks go together (with --classes CSV|N, or without to read the ids in "
                            "the masks), or give DATA, a dataset folder")
        if args.data is not None:
            raise SpecError("give either DATA or --images/--masks, not both")
        if args.split is not None:
            raise SpecError("--split picks a split of DATA, a dataset folder; with --images/--masks, name the "
                            "split's folders")
        if args.image_key or args.mask_key:
            raise SpecError("--image-key and --mask-key name the features of TFRecord files (DATA); --images/--masks "
                            "are folders of files")
        return dict(images=args.images, masks=args.masks, classes=args.classes, mask_suffix=args.mask_suffix,
                    image_suffix=args.image_suffix)
    if args.mask_suffix is not None or args.image_suffix:
        raise SpecError("--mask-suffix and --image-suffix pair --images with --masks; a dataset folder (DATA) pairs "
                        "its files as its layout says")
    return data_path(args)


def data_path(args) -> Path | None:
    """DATA as a path: itself where it exists or reads as no TFDS name (a glob, ./x, /x), else a TFDS name,
    ``name[/config][:version]`` as ``tfds.load`` takes it, prepared under --data-dir (else $TFDS_DATA_DIR,
    else ~/tensorflow_datasets), resolved to its version folder; where --data-dir is given and prepares
    that name, the name wins (see :func:`daliloader.tfds_folder.resolve`). An ``s3://`` URL as it is. None
    without DATA."""
    from daliloader import tfds_folder
    from daliloader.buckets import is_url

    if args.data is None or is_url(args.data):
        return args.data
    return tfds_folder.resolve(args.data, args.data_dir)


def location(value: str) -> Path | str:
    """A dataset argument: a local path, or an ``s3://`` URL kept as written (a Path would fold its ``//``)."""
    from daliloader.buckets import is_url

    return value if is_url(value) else Path(value)


def load_data(args, default: bool = True):
    """The SegmentationData the command runs on; the embedded default when no DATA is given."""
    import daliloader as dl

    source = data_source(args)
    if source is None:
        if not default:
            raise SpecError(f"name the dataset to {args.command}: DATA (a dataset folder) or --images/--masks")
        return dl.synthetic.default_dataset(args.n)
    if isinstance(source, dict):
        return dl.SegmentationData.from_dirs(**source, mask_channel=args.mask_channel)
    return dl.SegmentationData.from_folder(source, split=args.split, classes=args.classes, image_key=args.image_key,
                                           mask_key=args.mask_key, mask_channel=args.mask_channel)


def cmd_check(args) -> int:
    """``daliloader check``: every pair decoded, the problems listed (and written as JSON); 0 when there
    are none, else 1."""
    from daliloader.cache import write_whole
    from daliloader.checks import check

    source = data_source(args)
    if source is None:
        raise SpecError("name the dataset to check: DATA (a dataset folder) or --images/--masks")
    refuse_unwritable(args.json, "--json")  # before the check, not after it
    report = check(source, split=args.split, classes=None if isinstance(source, dict) else args.classes,
                   workers=args.workers, progress=not args.quiet, image_key=args.image_key, mask_key=args.mask_key,
                   mask_channel=args.mask_channel)
    print(report)
    if args.json:  # (whole, through a temporary file: a reader never sees half of it)
        Path(args.json).absolute().parent.mkdir(parents=True, exist_ok=True)
        write_whole(Path(args.json), report.to_json().encode())
        print(f"wrote {args.json}")
    return 0 if report.ok else 1


def cmd_prepare(args) -> int:
    """``daliloader prepare``: the prepared copy written and summed up (then verified with --verify); 0,
    or verify's status."""
    from daliloader.layouts import find
    from daliloader.preparation import prepare, summary

    data = load_data(args, default=False)
    data_at = data_path(args)
    # the split actually read (a layout's default, or none for a folder of one split)
    split = find(data_at, args.split, args.image_key, args.mask_key).split if data_at is not None else None
    source = {"data": str(data_at or ""), "split": split}
    manifest = prepare(data, args.out, jpeg_quality=args.jpeg_quality, pack_size=args.packs, workers=args.workers,
                       progress=not args.quiet, source=source, gpu_masks=not args.no_gpu_masks)
    print(summary(manifest, args.out))
    return cmd_verify(args) if args.verify else 0


def cmd_verify(args) -> int:
    """``daliloader verify``: a prepared copy checked against its originals; 0 when it matches, else 1."""
    from daliloader.verification import verify

    report = verify(args.out, workers=args.workers, progress=not args.quiet)
    print(report)
    return 0 if report.ok else 1


def cmd_cache(args) -> int:
    """``daliloader cache``: what the cache holds, or (``--clean``) what was removed from it; 0."""
    from daliloader import cache

    if not args.clean:
        if args.older_than is not None:
            raise SpecError("--older-than says which entries --clean removes: pass --clean too")
        print(cache.describe(cache.entries()))
        return 0
    removed = cache.clean(args.older_than)
    print(f"removed {len(removed)} entries ({cache.size_in_words(sum(e.size for e in removed))})" if removed else
          "nothing to remove")
    return 0


def cmd_synth(args) -> int:
    """``daliloader synth``: the embedded synthetic dataset written to OUT; 0."""
    import daliloader as dl

    data = dl.synthetic.make_dataset(args.out, n=args.n, image_format=args.format, image_size=args.image_size,
                                     seed=args.seed, progress=True)
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


#: The pictures that preview -o and the --plot options write, by the file's extension (any case): those
#: matplotlib writes that a viewer or a document shows as they are, raster or vector.
PICTURES = ("png", "jpg", "jpeg", "pdf", "svg")
PICTURES_HELP = ("the file's extension names its format: "
                 + ", ".join("." + p for p in PICTURES[:-1]) + " or ." + PICTURES[-1])


def _picture(text: str) -> Path:
    """A picture file to write (argparse's ``type``): a path whose extension is one of :data:`PICTURES`, else
    refused before anything runs."""
    path = Path(text)
    if path.suffix[1:].lower() not in PICTURES:
        raise argparse.ArgumentTypeError(f"{text!r} is no picture daliloader writes; {PICTURES_HELP}")
    return path


def add_image_size(parser: argparse.ArgumentParser, default: tuple[int, int], what: str) -> None:
    """--image-size SIZE or HEIGHT,WIDTH: the loaders' image_size (one value: square). One token, so
    that DATA may follow it."""
    parser.add_argument("--image-size", type=_image_size, default=default, metavar="SIZE|HEIGHT,WIDTH",
                        help=f"{what}: one side (square) or HEIGHT,WIDTH, in the order of image_size "
                             f"(default {default[0]},{default[1]})")


def _image_size(text: str) -> tuple[int, int]:
    sides = [_positive_int(t) for t in text.replace(" ", "").split(",")]
    if len(sides) > 2:
        raise argparse.ArgumentTypeError(f"expected SIZE or HEIGHT,WIDTH, got {text!r}")
    return tuple(sides) * (3 - len(sides))


def add_data_arguments(parser: argparse.ArgumentParser, default: bool) -> None:
    """DATA and the options that name or read a dataset (``default``: DATA may be left out for the
    embedded dataset)."""
    parser.add_argument("data", nargs="?", type=location, default=None, metavar="DATA",
                        help="a dataset folder as shipped: Cityscapes, Pascal VOC 2012 (VOC2012 or VOCdevkit), ADE20K "
                             "(ADEChallengeData2016), CamVid (SPLIT/ + SPLIT_labels/ + class_dict.csv), images/ + "
                             "masks/ (+ class_dict.csv), a prepared copy, a folder prepared by TensorFlow Datasets, "
                             "TFRecord files (a file, a quoted glob, or a folder of them), or the name of a TFDS "
                             "dataset prepared under --data-dir, as tfds.load takes it: NAME[/CONFIG][:VERSION]"
                             + ("; default: the embedded synthetic dataset" if default else ""))
    parser.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                        help="where DATA, a TFDS name, is prepared (default: $TFDS_DATA_DIR, else "
                             "~/tensorflow_datasets); a name prepared there wins over a folder of that name here")
    parser.add_argument("--split", default=None, help="the split to read in DATA (default: train, or the whole "
                                                      "folder where it has no split folders; ADE20K's training/"
                                                      "validation and VOC's train/val/trainval too; TFDS: a split "
                                                      "expression as tfds.load takes it, 'train[:10%%]+test')")
    parser.add_argument("--images", type=location, help="image folder (instead of DATA)")
    parser.add_argument("--masks", type=location, help="mask folder (instead of DATA)")
    parser.add_argument("--classes", type=_classes, default=None, metavar="CSV|N|NAME|VALUE:CLASS,...",
                        help="the classes: a class_dict.csv (name,r,g,b) for colour masks, N for id masks whose "
                             "ids 0..N-1 are the classes (others ignored), a published table by name ("
                             f"{', '.join(CATALOGUE)}), or the id masks' values mapped to classes, VALUE:CLASS "
                             "pairs comma-separated (0:0,255:1 for binary masks; values not listed are ignored). "
                             "With DATA it replaces the layout's own; with --images/--masks and no --classes, the "
                             "ids in the masks are read")
    parser.add_argument("--mask-channel", type=int, choices=(0, 1, 2), default=None, metavar="0|1|2",
                        help="the masks are colour pictures whose channel 0 (red), 1 or 2 holds the class id "
                             "(TFDS's scene_parse150 sets it by itself)")
    parser.add_argument("--mask-suffix", default=None, help="with --images/--masks: the masks' name suffix, e.g. _L "
                                                            "(default: detected); with it, files without it are not "
                                                            "masks")
    parser.add_argument("--image-suffix", default="", help="with --images/--masks: a suffix stripped from image "
                                                           "names before pairing (Cityscapes: _leftImg8bit)")
    parser.add_argument("--image-key", default=None, help="with TFRecord files: the feature holding the encoded image "
                                                          "(default: found for Model Garden/DeepLab and TFDS layouts)")
    parser.add_argument("--mask-key", default=None, help="with TFRecord files: the feature holding the encoded mask "
                                                         "(default: found as --image-key is)")


def _classes(text: str):
    """--classes: a number of classes; a remap table, ``VALUE:CLASS`` pairs comma-separated (``0:0,255:1``,
    the Python API's ``{0: 0, 255: 1}``: any text that starts with a number and a colon, read by
    :func:`_class_table`); else a class_dict.csv, or a published table's name (see
    :data:`daliloader.classes.CATALOGUE`; a file of that name wins)."""
    if text.strip().isdigit():
        return int(text)
    if re.fullmatch(r"\s*-\d+\s*", text):
        raise argparse.ArgumentTypeError(f"a class count is a whole number from 1, got {text.strip()}")
    return _class_table(text) if re.match(r"\s*\d+\s*:", text) else text


def _class_table(text: str) -> dict[int, int]:
    """``VALUE:CLASS,...`` as a dict, each a whole number and each value once; else argparse's refusal
    (the table's classes are checked where it is read, by :meth:`daliloader.classes.ClassMap.from_ids`)."""
    table: dict[int, int] = {}
    for pair in text.split(","):
        value, _, cls = (part.strip() for part in pair.partition(":"))
        if not (value.isdigit() and cls.isdigit()):
            raise argparse.ArgumentTypeError(f"expected mask VALUE:CLASS pairs of whole numbers, comma-separated "
                                             f"(binary masks: 0:0,255:1), got {pair.strip()!r} in {text!r}")
        if int(value) in table:
            raise argparse.ArgumentTypeError(f"the mask value {value} is given twice in {text!r}: give each value "
                                             "one class")
        table[int(value)] = int(cls)
    return table


def _choices(allowed):
    """A comma-separated list of names from ``allowed``."""
    def parse(text: str) -> list[str]:
        names = [t.strip() for t in text.split(",") if t.strip()]
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)} (comma-separated)")
        return names
    return parse


def version() -> str:
    """daliloader's version and those of the libraries it runs on (as installed; none is imported)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    import daliloader

    found = []
    for name in ("nvidia-dali-cuda120", "nvidia-dali-cuda130", "nvidia-dali-tf-plugin-cuda120",
                 "nvidia-dali-tf-plugin-cuda130", "tensorflow", "keras", "opencv-python-headless"):
        with suppress(PackageNotFoundError):
            found.append(f"{name} {installed(name)}")
    return f"daliloader {daliloader.__version__} ({', '.join(found) or 'no backend library installed'})"


#: Flags that took a value in an older form, and what to do now: the hint where one is given and a word
#: is left over.
FORMER_FORMS = {"--prepared": "bench reads one DATA folder, and --prepared takes no value: name the prepared "
                              "copy's folder with --prepared-dir DIR"}


def stray_hint(parser: Parser, words: list[str], stray: list[str]) -> str:
    """``"; HINT"`` on the option that the words ``stray`` (left over by ``parser`` from ``words``) most
    likely belong to, or "" where none stands out: the flag of one value whose value comes right before the
    first of them (``--image-size 720 960``: what it takes), or a flag of :data:`FORMER_FORMS`."""
    for i in range(1, len(words)):
        joined = words[i - 1].startswith("--") and "=" in words[i - 1]  # --flag=value
        given = words[i - 1].partition("=")[0] if joined else words[i - 2] if i > 1 else ""
        action = parser.option(given)
        if words[i] == stray[0] and action is not None and action.nargs is None:
            return f"; {given} takes {_value_form(action)}"
    return "".join(f"; {hint}" for name, hint in FORMER_FORMS.items()
                   if name in words and name in parser.options)


def _value_form(action: argparse.Action) -> str:
    """What a flag of one value takes, in words: its metavar's forms as one argument (a range, two words too)."""
    metavar = action.metavar or ("|".join(action.choices) if action.choices else action.dest.upper())
    forms = metavar.replace("|", " or ")
    return f"{forms}, or MIN MAX as two words" if takes_range(metavar) else f"{forms} as one argument"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that keeps in public fields what the parsing here reads of it, which argparse
    keeps only in private ones: its arguments (``arguments``, its parents' too), its flags by option string
    (``options``) and its commands by name (``commands``). Its commands are Parsers too (argparse makes them
    of the parser's class)."""

    def __init__(self, *args, parents: Sequence[Parser] = (), **kwargs):
        self.arguments: list[argparse.Action] = []  # before argparse's __init__, which adds -h
        self.options: dict[str, argparse.Action] = {}
        self.commands: dict[str, Parser] = {}
        super().__init__(*args, parents=parents, **kwargs)
        for parent in parents:
            self.arguments += parent.arguments
            self.options.update(parent.options)

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.arguments.append(action)
        self.options.update(dict.fromkeys(action.option_strings, action))
        return action

    def add_subparsers(self, **kwargs):
        commands = super().add_subparsers(**kwargs)
        self.commands = commands.choices  # the action's map of names to parsers, which add_parser fills
        return commands

    def option(self, word: str) -> argparse.Action | None:
        """The flag ``word`` names as argparse reads it: a flag, or the start of one flag alone (argparse's
        abbreviations: ``--rot`` for ``--rotate``); None for any other word."""
        if word in self.options:
            return self.options[word]
        if not (self.allow_abbrev and word.startswith("--")):
            return None
        started = [name for name in self.options if name.startswith(word)]
        return self.options[started[0]] if len(started) == 1 else None


def build_parser() -> Parser:
    """The parser of every command (each added by its ``_add_*`` function, in the order of the help)."""
    parser = Parser(prog="daliloader", description="GPU data loading for Keras segmentation.",
                    parents=[_verbose()], epilog="--verbose may come before the command or after it.")
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", required=True)
    parents = [_verbose()]
    for add in (_add_bench, _add_report, _add_preview, _add_check, _add_prepare, _add_verify, _add_cache,
                _add_synth):
        add(sub, parents)
    return parser


def _verbose() -> Parser:
    """The option every command takes: --verbose (also the top level's, which hands it to the command:
    :func:`parse_args`)."""
    verbose = Parser(add_help=False)
    verbose.add_argument("--verbose", action="store_true",
                         help="show what TensorFlow, XLA and CUDA print as they start and DALI's decoder warnings "
                              "(hidden by default)")
    return verbose


def _add_bench(sub, parents: list) -> None:
    """``daliloader bench``: the data, the settings of every figure, and what else to measure."""
    bench = sub.add_parser("bench", parents=parents,
                           help="throughput of every loader, CPU vs GPU, next to the decode ceilings",
                           description="Measure each backend's steady-state throughput on the same data and "
                                       "settings (one warm-up epoch, then the median and spread of timed repeats), "
                                       "the decode-only ceilings of this machine (all CPU cores decoding the same "
                                       "files; nvJPEG alone with a GPU), and where time goes stage by stage. With "
                                       "no DATA it generates the embedded CamVid-like dataset (960x720 JPEG + PNG "
                                       "colour masks) once in $DALILOADER_CACHE or ~/.cache/daliloader.")
    add_data_arguments(bench, default=True)
    bench.add_argument("--n", type=_positive_int, default=64, help="pairs in the embedded dataset (default 64)")
    bench.add_argument("--backends", type=_choices(BENCH_BACKENDS), default=None,
                       help=f"comma-separated, from {','.join(BENCH_BACKENDS)} (default: all this machine has, but "
                            "those whose decoders do not read the data's formats, which it names)")
    bench.add_argument("--batch-size", type=_positive_int, default=8, help="samples per batch (default: 8)")
    add_image_size(bench, (512, 512), "the crops' size")
    bench.add_argument("--label-mode", type=_choices(spec.LABEL_MODES), default=["onehot"],
                       help="onehot, int or onehot,int (default onehot)")
    bench.add_argument("--seconds", type=spec.positive_number, default=3.0,
                       help="length of one timed repeat (default 3)")
    bench.add_argument("--repeats", type=_positive_int, default=3, help="timed repeats per figure (default 3)")
    bench.add_argument("--workers", type=_positive_int, default=None,
                       help="threads for opencv (default: all cores); DALI, tf.data and the CPU ceilings use "
                            "every core")
    bench.add_argument("--no-stages", action="store_true", help="skip the per-stage breakdown")
    _add_bench_extras(bench)
    bench.set_defaults(func=cmd_bench)


def _add_bench_extras(bench: argparse.ArgumentParser) -> None:
    """bench's options that measure more (--train, --prepared, --augment, --tfrecord) and its outputs."""
    bench.add_argument("--train", action="store_true",
                       help="also train a small U-Net fed by each backend, against its step on one batch resident on "
                            "the device: how much of each step waits for input")
    bench.add_argument("--memory", action="store_true",
                       help="also measure each loader's peak memory, alone in a process of its own (Linux)")
    bench.add_argument("--prepared", action="store_true",
                       help="also measure every backend on a prepared copy (8-bit class-index masks, see "
                            "`daliloader prepare`), and the DALI backends reading its packs; the copy is made "
                            "once in the cache, or in --prepared-dir")
    bench.add_argument("--prepared-dir", type=Path, default=None, metavar="DIR",
                       help="with --prepared: the prepared copy's folder (made there, with packs, if absent)")
    bench.add_argument("--augment", action="store_true",
                       help="also measure each backend with every photometric option, rotation and zoom on "
                            f"({described(AUGMENT)}), and say how much of its throughput that keeps")
    bench.add_argument("--tfrecord", action="store_true",
                       help="also measure every backend on the same pairs in the other container: files written into "
                            "TFRecord files (or TFRecords written out as files), byte for byte, once in the cache; "
                            "says what the container costs or saves")
    bench.add_argument("--train-steps", type=_positive_int, default=8, help="timed training steps (default 8)")
    bench.add_argument("--json", type=Path, help="write the full report (machine, versions, settings, figures) here")
    bench.add_argument("--plot", type=_picture, metavar="OUT.png", help=f"write a bar chart here ({PICTURES_HELP})")


def _add_report(sub, parents: list) -> None:
    """``daliloader report``: a saved report printed and charted again."""
    rep = sub.add_parser("report", parents=parents, help="print or chart a report that bench wrote",
                         description="Print the tables of a report written by `daliloader bench --json` again, "
                                     "and chart it (--plot), for example one measured on another machine.")
    rep.add_argument("report", type=Path, metavar="REPORT", help="a JSON report written by bench --json")
    rep.add_argument("--data", type=_choices(DATA), default=None,
                     help="keep only the figures on these data, comma-separated (default: all)")
    rep.add_argument("--plot", type=_picture, metavar="OUT.png", help=f"write the bar chart here ({PICTURES_HELP})")
    rep.set_defaults(func=cmd_report)


def _add_preview(sub, parents: list) -> None:
    """``daliloader preview``: the data, a recipe, and how to lay out its samples."""
    preview = sub.add_parser("preview", parents=parents,
                           help="a picture of what a recipe makes: samples beside (or over) their coloured masks",
                             description="Run a loader with a recipe (the loaders' options; by default random crops "
                                         "with zoom 0.5-2, or --eval for the evaluation recipe) and write a grid: each "
                                         "sample's image beside its mask coloured with the class palette, the mask "
                                         "blended over the image, or both, with a legend. A flag whose value "
                                         "ends in MIN,MAX takes a range: one number (as the loaders' option "
                                         "reads one), MIN,MAX, or MIN MAX as two words.")
    add_data_arguments(preview, default=True)
    preview.add_argument("-o", "--output", type=_picture, required=True, metavar="OUT.png",
                         help=f"the picture to write ({PICTURES_HELP})")
    preview.add_argument("--n", type=_positive_int, default=64, help="pairs in the embedded dataset (default 64)")
    preview.add_argument("--batches", type=_positive_int, default=2,
                         help="batches to draw, a row per sample (default: 2)")
    preview.add_argument("--batch-size", type=_positive_int, default=3, help="samples per batch (default: 3)")
    add_image_size(preview, (256, 256), "the samples' size")
    preview.add_argument("--view", choices=("side", "overlay", "both"), default="side",
                         help="image beside the coloured mask, the mask blended over the image, or both "
                              "(default: side)")
    preview.add_argument("--backend", choices=[b for b in BENCH_BACKENDS if b not in REFERENCES], default="dali-cpu",
                         help="the loader that makes the samples (default: dali-cpu)")
    preview.add_argument("--eval", action="store_true",
                         help="the evaluation recipe (training=False): crop 'fit', nothing random, the dataset's order")
    preview.add_argument("--crop", choices=spec.CROPS, default=None,
                         help="as the loaders' crop= (default: random; with --eval: fit)")
    add_option_flags(preview)
    preview.add_argument("--seed", type=int, default=0, help="the seed of the order and the draws (default: 0)")
    preview.add_argument("--augment", action="store_true",
                         help="also rotation and colour jitter, as bench --augment ("
                              f"{described({k: v for k, v in AUGMENT.items() if k not in PREVIEW_DEFAULTS})})")
    preview.set_defaults(func=cmd_preview)


def add_option_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for each of the loaders' declared options, of its name: the prologue's
    (:data:`daliloader.spec.PROLOGUE`, read by the declaration's ``parse``) and the declared stages'
    (:data:`daliloader.augment.OPTIONS`, read by :func:`daliloader.augment.from_text`), but that a flag whose
    metavar ends in MIN,MAX takes a range, read by :func:`daliloader.spec.range_value` (as one word or two:
    :func:`joined_ranges`); left out, the option's default (or :data:`PREVIEW_DEFAULTS`'s)."""
    def add(name: str, metavar: str, parse, doc: str, form: str = "=") -> None:
        default = f" (default here: {','.join(f'{v:g}' for v in PREVIEW_DEFAULTS[name])})" \
            if name in PREVIEW_DEFAULTS else ""
        parser.add_argument(flag(name), type=spec.range_value if takes_range(metavar) else parse, default=None,
                            metavar=metavar, help=f"as the loaders' {name}{form}: {doc}{default}".replace("%", "%%"))

    for name, option in spec.PROLOGUE.items():
        add(name, option.metavar, option.parse, option.doc, option.form or "=")
    for name, stage_option in augment.OPTIONS.items():
        add(name, stage_option.metavar, augment.from_text, stage_option.doc)


def takes_range(metavar) -> bool:
    """Whether a flag of this metavar takes a range: one number, or MIN,MAX (:data:`daliloader.spec.RANGE_METAVAR`)."""
    return isinstance(metavar, str) and metavar.endswith(spec.RANGE_METAVAR)


def joined_ranges(parser: Parser, words: list[str]) -> list[str]:
    """``words`` with the value of each of ``parser``'s range flags (:func:`takes_range`) joined to the flag
    as one word: ``--scale 0.5 2`` and ``--scale 0.5,2`` both as ``--scale=0.5,2``, ``--rotate -10 10`` as
    ``--rotate=-10,10`` (argparse would read -10,10 as a flag), abbreviated flags alike (``--rot 10 20``).
    A value is what :func:`daliloader.spec.range_value` reads; the word after a flag that is none is left
    for argparse to refuse, and a second number joins a first only where the first is one number."""
    joined, rest = [], list(words)
    while rest:
        word = rest.pop(0)
        action = parser.option(word)
        if action is not None and takes_range(action.metavar) and rest and _reads_as_range(rest[0]):
            value = rest.pop(0)
            if "," not in value and rest and _reads_as_range(rest[0]) and "," not in rest[0]:
                value += "," + rest.pop(0)
            word = f"{word}={value}"
        joined.append(word)
    return joined


def _reads_as_range(word: str) -> bool:
    """Whether ``word`` is a range flag's value (:func:`daliloader.spec.range_value` reads it)."""
    try:
        spec.range_value(word)
    except argparse.ArgumentTypeError:
        return False
    return True


def _add_check(sub, parents: list) -> None:
    """``daliloader check``: the data and how to check it."""
    check = sub.add_parser("check", parents=parents,
                           help="find bad files before training",
                           description="Decode every image/mask pair in parallel and report, per file: missing, "
                                       "empty, unsupported, truncated or corrupt files, image/mask size "
                                       "mismatches, mask colours or ids not in the class map (with pixel "
                                       "counts), tiny images, lossy masks and unpaired files. Exit status 1 when "
                                       "anything is wrong, 0 when all is well.")
    add_data_arguments(check, default=False)
    check.add_argument("--workers", type=_positive_int, default=None, help="decoding threads (default: all cores)")
    check.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    check.add_argument("--quiet", action="store_true", help="no progress bar")
    check.set_defaults(func=cmd_check)


def _add_prepare(sub, parents: list) -> None:
    """``daliloader prepare``: the data, the copy's folder, and what the copy holds."""
    prep = sub.add_parser("prepare", parents=parents,
                           help="one-time conversion: 8-bit class-index masks, webdataset packs",
                          description="Write a prepared copy of DATA into OUT that every loader reads faster, "
                                      "without changing a label: masks re-encoded as single-channel 8-bit class-index "
                                      "PNGs (the colour/id mapping done once; unknown values -> ignore index) and, for "
                                      "dali-gpu, the same indices LZ4-compressed, images "
                                      "copied byte for byte, a manifest.json recording the class map and how it was "
                                      "made, and optionally packs (webdataset tars) with their DALI index files. "
                                      "Load it with SegmentationData.from_prepared(OUT).")
    add_data_arguments(prep, default=False)
    prep.add_argument("out", type=location, metavar="OUT", help="new (or empty) folder for the prepared copy")
    prep.add_argument("--jpeg-quality", type=_positive_int, default=None, metavar="Q",
                      help="re-encode non-JPEG photos as JPEG of quality Q (1-100), decodable by nvJPEG on the GPU; "
                           "the quality lost (PSNR) is reported. Default: images are copied unchanged")
    prep.add_argument("--packs", type=_positive_int, default=None, metavar="N",
                      help="also write packs of N samples: webdataset tars (image, mask and index of each sample "
                           "side by side) with their DALI .idx files")
    prep.add_argument("--no-gpu-masks", action="store_true",
                      help="leave out the masks' GPU form (LZ4 class indices, about as small as the PNG masks, which "
                           "dali-gpu inflates on the GPU instead of decoding PNG on the CPU)")
    prep.add_argument("--verify", action="store_true",
                      help="afterwards decode every prepared mask and compare it with the mapping of the original, "
                           "bit for bit (and copied images and pack members byte for byte); exit 1 on a difference")
    prep.add_argument("--workers", type=_positive_int, default=None, help="threads (default: all cores)")
    prep.add_argument("--quiet", action="store_true", help="no progress bar")
    prep.set_defaults(func=cmd_prepare)


def _add_verify(sub, parents: list) -> None:
    """``daliloader verify``: a prepared copy against its originals."""
    ver = sub.add_parser("verify", parents=parents,
                           help="check a prepared copy against its originals",
                         description="Decode every mask of the prepared copy OUT and compare it with the mapping "
                                     "of its original, bit for bit; compare copied images and pack members "
                                     "byte for byte. Exit status 1 on any difference.")
    ver.add_argument("out", type=location, metavar="OUT", help="a folder written by `daliloader prepare`")
    ver.add_argument("--workers", type=_positive_int, default=None, help="threads (default: all cores)")
    ver.add_argument("--quiet", action="store_true", help="no progress bar")
    ver.set_defaults(func=cmd_verify)


def _add_cache(sub, parents: list) -> None:
    """``daliloader cache``: the cache listed, or cleaned."""
    cached = sub.add_parser("cache", parents=parents, help="list or clean daliloader's cache",
                            description="List what daliloader keeps in its cache ($DALILOADER_CACHE, else "
                                        "~/.cache/daliloader): TFRecord indexes, the bench's copies of datasets, "
                                        "the embedded datasets; each is made again when needed. With --clean, "
                                        "remove them (those unused for --older-than DAYS only). TFRecord indexes "
                                        "unused for 90 days are also removed whenever a new one is written.")
    cached.add_argument("--clean", action="store_true", help="remove the entries (default: list them)")
    cached.add_argument("--older-than", type=spec.positive_number, default=None, metavar="DAYS",
                        help="with --clean: only those not used for DAYS days")
    cached.set_defaults(func=cmd_cache)


def _add_synth(sub, parents: list) -> None:
    """``daliloader synth``: the embedded synthetic dataset, written to a folder."""
    synth = sub.add_parser("synth", parents=parents,
                           help="write the synthetic dataset", description="Write the synthetic "
                           "CamVid-layout dataset: OUT/train, OUT/train_labels, OUT/class_dict.csv.")
    synth.add_argument("out", type=Path, help="the folder to write (CamVid's layout: train/, train_labels/, "
                                              "class_dict.csv)")
    synth.add_argument("--n", type=_positive_int, default=64, help="pairs to write (default: 64)")
    synth.add_argument("--format", choices=("jpg", "png"), default="jpg", help="the photos' format (default: jpg)")
    add_image_size(synth, (720, 960), "the images' size")
    synth.add_argument("--seed", type=int, default=0, help="the seed of the scenes (default: 0)")
    synth.set_defaults(func=cmd_synth)


#: Lines that TensorFlow, XLA and CUDA's stubs write to the process's stderr as they start, whatever
#: TF_CPP_MIN_LOG_LEVEL says (absl logs before it is initialised): informational on every machine. And
#: what libpng writes of a damaged PNG as a decoder meets it: every decoder refuses such a file, and the
#: commands name it in their own words (check lists it; the loaders' errors name it). Not libjpeg's
#: "Corrupt JPEG data" lines: the decoders go on with such a JPEG, and outside check that line is the
#: only sign of it (preview, bench); but each comes once (:data:`LIBJPEG_WARNINGS`).
NATIVE_NOISE = re.compile(rf"^({BEFORE_LOGGING}|[IW]\d{{4}} |"
                          r"E\d{4} .*(cuInit|cuda_platform|cuda_dnn|cuda_fft|cuda_blas|cuda_executor)|"
                          r"E\d{4} .*oneDNN supports|To enable the following instructions|"
                          r"This TensorFlow binary is optimized|libpng (error|warning): )")

#: What libjpeg writes of a damaged JPEG each time a decoder (OpenCV's, DALI's CPU one) reads it, which a
#: bench does thousands of times: written the first time, then counted (:data:`REPEATED`).
LIBJPEG_WARNINGS = re.compile(r"^(Corrupt JPEG data|Premature end of JPEG file|Invalid SOS parameters|"
                              r"Inconsistent progression sequence|Warning: unknown JFIF)")
REPEATED = ("daliloader: libjpeg wrote {line!r} {n} more time{s}: damaged JPEG data, decoded to garbage pixels "
            "each time it is read; `daliloader check DATA` names the file")


@contextmanager
def native_noise_filtered():
    """Run with the native libraries' stderr (file descriptor 2) filtered line by line as it comes: the
    lines of :data:`NATIVE_NOISE` are dropped, those of :data:`LIBJPEG_WARNINGS` written once each, the
    others written to the real stderr at once (:func:`daliloader.environment.filtered_stderr`)."""
    with filtered_stderr(NATIVE_NOISE, once=LIBJPEG_WARNINGS, note=REPEATED):
        yield


def parse_args(parser: Parser, argv: list[str]) -> argparse.Namespace:
    """The command's arguments: --verbose may come before the command too (daliloader --verbose check DATA),
    options may sit between DATA and OUT (prepare DATA --split val OUT), a range flag's value may be one word
    or two (:func:`joined_ranges`), and words left over are refused with a hint on the option they most
    likely belong to (:func:`stray_hint`)."""
    commands = parser.commands
    verbose = list(itertools.takewhile(lambda word: word == "--verbose", argv))  # handed to the command
    name, *rest = argv[len(verbose):] or [None]
    if name in commands:
        command = commands[name]
        words = joined_ranges(command, verbose + rest)
        args, stray = command.parse_known_intermixed_args(words)
        if stray:
            command.error(f"unrecognized arguments: {' '.join(stray)}{stray_hint(command, words, stray)}")
        args.command = name
        return args
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """The command line; ``argv`` None reads sys.argv and, unless --verbose, hides the start-up noise
    native libraries write to stderr (:func:`native_noise_filtered`). Returns the exit status: 0, 1
    where check or verify found a problem, 2 on an error (one line), 130 when interrupted."""
    from_shell = argv is None
    args = parse_args(build_parser(), list(sys.argv[1:] if from_shell else argv))
    if args.verbose:
        show_native_warnings()
    else:
        quiet_tensorflow_warnings()
    quiet = native_noise_filtered() if from_shell and not args.verbose else nullcontext()
    try:
        with quiet, one_line_warnings(f"daliloader {args.command}"):
            return args.func(args)
    except (DaliloaderError, ImportError) as e:
        print(f"daliloader {args.command}: error: {in_flag_words(e, args)}", file=sys.stderr)
        return 2
    except OSError as e:  # the system refused something daliloader did not expect to fail: still one line
        print(f"daliloader {args.command}: error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # what was being written is removed (prepare writes into a temporary folder)
        print(f"daliloader {args.command}: interrupted", file=sys.stderr)
        return 130


def in_flag_words(error: Exception, args: argparse.Namespace) -> str:
    """An error as the command line says it: a refusal of a loader's option that the command was given as
    a flag is said of the flag, as argparse says its own (``argument --rotate: (-500, 500) must satisfy
    ...``, not ``rotate=(-500, 500) must satisfy ...``); any other as it is."""
    if not isinstance(error, OptionError) or error.option not in RECIPE_OPTIONS \
            or getattr(args, error.option, None) is None:
        return str(error)
    return f"argument {flag(error.option)}: {error.after_name()}"


@contextmanager
def one_line_warnings(prefix: str):
    """Python's warnings as ``PREFIX: warning: message`` lines: on the command line, the file and line
    of the call that warned (a line of daliloader, or of the entry script) say nothing to the user."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prefix}: warning: {message}", file=file or sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


if __name__ == "__main__":
    sys.exit(main())
