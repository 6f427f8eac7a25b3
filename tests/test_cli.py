"""The command line (daliloader.cli): a smoke test per command, the parser, the errors, and the filter of
the native libraries' stderr.

These runs use tiny settings to check what the commands produce, not how fast anything is.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from daliloader import cli as cli_module
from daliloader import environment, synthetic
from daliloader.cli import build_parser, native_noise_filtered
from daliloader.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "benchmarks" / "results" / "h100-16cores-cuda120-tf-bench.json"
CPU_BACKENDS = "dali-cpu,tfdata,opencv,tfdata-naive"
COMMANDS = ("bench", "report", "preview", "check", "prepare", "verify", "cache", "synth")


@pytest.fixture(scope="module")
def root(synth_data) -> str:
    return str(Path(synth_data.images[0]).parent.parent)


# ---------------------------------------------------------------- a smoke test per command
def test_bench_measures_writes_json_and_plot(root, tmp_path, capsys):
    pytest.importorskip("tensorflow")
    out, png = tmp_path / "r" / "bench.json", tmp_path / "bench.png"
    assert cli(["bench", root, "--backends", CPU_BACKENDS, "--batch-size", "2", "--image-size", "16", "--seconds",
                "0.05", "--repeats", "1", "--no-stages", "--json", str(out), "--plot", str(png)]) == 0
    said = capsys.readouterr().out
    assert "measuring 4 figures" in said and "4/4 tfdata-naive / onehot / original:" in said
    assert f"wrote {out}" in said.replace("\n", "") and "loader" in said and "share" in said
    report = json.loads(out.read_text())
    assert report["schema"] >= 2 and report["machine"]["cpu_count"] >= 1
    assert "tensorflow" in report["machine"]["versions"]
    assert report["settings"]["backends"] == CPU_BACKENDS.split(",")
    assert set(report["ceilings"]) == {"cpu_decode_pairs", "cpu_decode_images", "cpu_decode_masks",
                                      "cpu_decode_pairs_cached"}  # colour masks: the mask cache's too
    assert [(r["name"], r["label_mode"]) for r in report["results"]] == [(b, "onehot") for b in CPU_BACKENDS.split(",")]
    assert all(len(r["rates"]) == 1 and r["median"] > 0 for r in report["results"]) and report["stages"] == {}
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_report_prints_and_charts_a_saved_report_and_names_a_bad_one(tmp_path, capsys):
    """`daliloader report` reads what `bench --json` wrote (here the committed H100 report): the same
    tables, only the data asked for, a chart; a file that is no report is named, with what to pass."""
    assert cli(["report", str(COMMITTED), "--data", "original", "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "dali-gpu" in out and "447.1" in out and "prepared" not in out and "packs" not in out
    assert (tmp_path / "c.png").stat().st_size > 10_000 and f"wrote {tmp_path / 'c.png'}" in out.replace("\n", "")
    assert cli(["report", str(COMMITTED), "--data", "packs"]) == 0
    out = capsys.readouterr().out
    assert "1117.8" in out and "447.1" not in out
    (tmp_path / "bad.json").write_text('{"results": []}')
    (tmp_path / "number.json").write_text("3")
    for bad in (tmp_path / "bad.json", tmp_path / "number.json", tmp_path / "none.json", ROOT / "benchmarks" /
                "cpu_vs_gpu.sh"):
        assert cli(["report", str(bad)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and "bench --json" in err and err.count("\n") == 1, err


def test_preview_writes_a_grid(root, tmp_path, capsys):
    png = tmp_path / "grid.png"
    assert cli(["preview", root, "-o", str(png), "--batches", "1", "--batch-size", "2", "--image-size", "64"]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out == (f"wrote {png}: 2 samples of the training recipe from dali-cpu, 1 batches\n")


def test_check_lists_no_problem_in_a_good_dataset_and_writes_json(root, tmp_path, capsys):
    assert cli(["check", root, "--quiet", "--json", str(tmp_path / "check.json")]) == 0
    out = capsys.readouterr().out
    assert "no problems" in out and f"wrote {tmp_path / 'check.json'}" in out
    assert json.loads((tmp_path / "check.json").read_text())["ok"] is True


def test_prepare_then_verify_a_copy(root, tmp_path, capsys):
    out = tmp_path / "copy"
    assert cli(["prepare", root, str(out), "--packs", "4", "--quiet"]) == 0
    assert (out / "manifest.json").exists() and str(out) in capsys.readouterr().out
    assert cli(["verify", str(out), "--quiet"]) == 0
    assert "differ" not in capsys.readouterr().out


def test_synth_writes_a_dataset(tmp_path):
    assert cli(["synth", "--image-size", "48,64", str(tmp_path / "s"), "--n", "3", "--format", "png"]) == 0
    files = list((tmp_path / "s" / "train").glob("*.png"))
    assert len(files) == 3 and Image.open(files[0]).size == (64, 48)  # HEIGHT,WIDTH as image_size; PIL: (w, h)
    assert cli(["synth", str(tmp_path / "q"), "--n", "1", "--image-size", "40", "--format", "png"]) == 0
    assert Image.open(next((tmp_path / "q" / "train").glob("*.png"))).size == (40, 40)


# ---------------------------------------------------------------- the parser
def test_image_size_is_size_or_height_width_everywhere():
    commands = build_parser().commands
    for command, rest in (("bench", ["DATA"]), ("preview", ["DATA", "-o", "x.png"]), ("synth", ["OUT"])):
        args = commands[command].parse_intermixed_args(["--image-size", "24,32"] + rest)  # DATA may follow
        assert args.image_size == (24, 32)
        assert Path(rest[0]) in (getattr(args, "data", None), getattr(args, "out", None))
        assert commands[command].parse_intermixed_args(["--image-size", "24"] + rest).image_size == (24, 24)


@pytest.mark.parametrize("text, classes", [
    ("0:0,255:1", {0: 0, 255: 1}),
    (" 0 : 255, 1:0 ,2:1", {0: 255, 1: 0, 2: 1}),
    ("7", 7),
    ("voc", "voc"),
    ("my_classes.csv", "my_classes.csv"),
    ("s3://bucket/class_dict.csv", "s3://bucket/class_dict.csv"),
])
def test_classes_takes_a_file_a_count_a_name_or_a_table_of_values(text, classes):
    assert build_parser().parse_args(["check", "--classes", text]).classes == classes


@pytest.mark.parametrize("text, message", [
    ("0:0,255", "expected mask VALUE:CLASS pairs of whole numbers, comma-separated (binary masks: 0:0,255:1), got "
                "'255' in '0:0,255'"),
    ("0:0,255:one", "got '255:one'"),
    ("0:0,", "got ''"),
    ("0:0,0:1", "the mask value 0 is given twice in '0:0,0:1'"),
    ("-1", "a class count is a whole number from 1, got -1"),  # (was read as a file name, not found)
])
def test_a_malformed_table_of_classes_is_refused_as_an_argument(text, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli(["check", "DATA", "--classes", text])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "daliloader check: error: argument --classes: " in err and message in err, err


@pytest.mark.parametrize("argv, said", [
    (["--rotate", "-500,500"], "argument --rotate: (-500, 500) must satisfy -360 <= min <= max <= 360 (degrees)"),
    (["--scale", "0,2"], "argument --scale: (0, 2) must satisfy 0 < min <= max <= 10"),
    (["--rotate", "500"], "argument --rotate: 500 (the range (-500, 500)) must satisfy -360 <= min <= max <= 360"),
    (["--brightness", "-1"], "argument --brightness: -1.0 must be >= 0"),
])
def test_a_loader_option_refused_is_said_of_its_flag(tmp_path, argv, said, capsys):
    """The loaders' refusal of an option came in the Python API's words (rotate=(-500, 500) must ...) where
    the command was given --rotate -500,500: it is said of the flag, as argparse says its own."""
    assert cli(["preview", *argv, "-o", str(tmp_path / "p.png")]) == 2
    assert f"daliloader preview: error: {said}" in capsys.readouterr().err


def test_what_is_no_dataset_is_named_for_what_it_is(tmp_path, capsys):
    """An image given as the dataset was "not a TFRecord file"; a prepared copy that is not there was "not a
    prepared dataset: manifest.json is missing"; classes=0 on colour masks "reads ids 0..-1"."""
    data = synthetic.make_dataset(tmp_path / "data", n=2, image_size=(24, 32))
    for argv, said in ((["check", data.images[0]], f"{data.images[0]} is one image: a dataset is a folder"),
                       (["verify", str(tmp_path / "nowhere")], f"{tmp_path / 'nowhere'} does not exist or is not a "
                                                                "folder: a prepared dataset is the folder"),
                       (["check", str(tmp_path / "data"), "--classes", "0"],
                        "the number of classes must be in 1..65535, got 0")):
        assert cli(argv) == 2
        assert said in capsys.readouterr().err, argv


def binary_masks(root: Path) -> Path:
    """images/ + masks/ of two pairs whose masks hold only 0 and 255 (binary masks)."""
    for i in range(2):
        for folder, picture in (("images", np.full((16, 16, 3), 90, np.uint8)),
                                ("masks", np.repeat([0, 255], 128).reshape(16, 16).astype(np.uint8))):
            (root / folder).mkdir(parents=True, exist_ok=True)
            Image.fromarray(picture).save(root / folder / f"{i}.png")
    return root


def test_binary_masks_take_the_advice_given_on_the_command_line(tmp_path, capsys):
    """The advice on binary masks names --classes as the command line takes it, and works as given."""
    root = str(binary_masks(tmp_path))
    assert cli(["check", root, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no --classes" in err and "(--classes 0:0,255:1)" in err and "(--classes 1)" in err, err
    assert cli(["check", root, "--quiet", "--classes", "2"]) == 1  # 255 would be ignored
    assert "pass classes={0: 0, 255: 1} (--classes 0:0,255:1)" in capsys.readouterr().out
    assert cli(["check", root, "--quiet", "--classes", "0:0,255:1"]) == 0
    assert cli(["check", "--images", f"{root}/images", "--masks", f"{root}/masks", "--quiet", "--classes",
                "0:0,255:1"]) == 0
    assert "no problems" in capsys.readouterr().out


def test_every_range_flag_takes_one_number_or_min_max_as_one_word_or_two():
    """A flag whose metavar ends in MIN,MAX (the prologue's ranges and the declared stages') takes one number,
    MIN,MAX or MIN MAX, DATA before or after it; a negative minimum too."""
    preview = build_parser().commands["preview"]
    ranges = sorted({a.option_strings[0] for a in preview.options.values() if cli_module.takes_range(a.metavar)})
    assert {"--scale", "--rotate", "--hue", "--blur", "--gamma", "--erase-scale", "--erase-ratio"} <= set(ranges)
    for flag in ranges:
        dest = flag[2:].replace("-", "_")
        for words, value in ((["0.5"], 0.5), (["0.5,2"], (0.5, 2.0)), (["0.5", "2"], (0.5, 2.0)),
                             (["-1", "2"], (-1.0, 2.0)), (["-1,2"], (-1.0, 2.0))):
            for argv in (["preview", "DATA", flag, *words, "-o", "x.png"],
                         ["preview", flag, *words, "DATA", "-o", "x.png"],
                         ["preview", "-o", "x.png", f"{flag}={','.join(words)}", "DATA"]):
                args = cli_module.parse_args(build_parser(), argv)
                assert (getattr(args, dest), args.data) == (value, Path("DATA")), argv
    args = cli_module.parse_args(build_parser(), ["preview", "--rotate", "10", "20x", "-o", "x.png"])
    assert (args.rotate, args.data) == (10.0, Path("20x"))  # a word that is no number is not joined


@pytest.mark.parametrize("argv, dest, value", [
    (["--rot", "-10", "20"], "rotate", (-10.0, 20.0)),  # argparse's abbreviation of a range flag
    (["--sca", "0.5", "2"], "scale", (0.5, 2.0)),
    (["--rot=-10,20"], "rotate", (-10.0, 20.0)),
    (["--erase-r", "0.3", "3"], "erase_ratio", (0.3, 3.0)),
])
def test_an_abbreviated_range_flag_takes_its_range_as_one_word_or_two(argv, dest, value):
    args = cli_module.parse_args(build_parser(), ["preview", *argv, "DATA", "-o", "x.png"])
    assert (getattr(args, dest), args.data) == (value, Path("DATA"))


def test_an_ambiguous_abbreviation_is_left_to_argparse(capsys):
    with pytest.raises(SystemExit):
        cli(["preview", "DATA", "-o", "x.png", "--s", "0.5", "2"])  # --saturation, --scale, --seed, --split
    assert "ambiguous option: --s could match" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["x", "1,2,3", "1,", "1,x"])
def test_a_range_that_is_none_is_refused_as_an_argument(value, capsys):
    with pytest.raises(SystemExit) as e:
        cli(["preview", "-o", "x.png", "--blur", value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument --blur: expected a number or MIN,MAX (two numbers, as one word or two), " \
                                 f"got {value!r}" in err, err


@pytest.mark.parametrize("argv, hint", [
    (["bench", "--prepared", "copy", "camvid"], "; bench reads one DATA folder, and --prepared takes no value: name "
                                                "the prepared copy's folder with --prepared-dir DIR"),
    (["synth", "out", "--image-size", "720", "960"], "; --image-size takes SIZE or HEIGHT,WIDTH as one argument"),
    (["synth", "out", "--image-size=720", "960"], "; --image-size takes SIZE or HEIGHT,WIDTH as one argument"),
    (["preview", "DATA", "-o", "x.png", "--seed", "1", "2"], "; --seed takes SEED as one argument"),
    (["preview", "DATA", "-o", "x.png", "--view", "side", "overlay"], "; --view takes side or overlay or both as "
                                                                     "one argument"),
    (["preview", "DATA", "-o", "x.png", "--blur", "1", "2", "3"], "; --blur takes SIGMA or MIN,MAX, or MIN MAX as "
                                                                  "two words"),
    (["preview", "DATA", "-o", "x.png", "--image-size", "64", "--augment", "stray"], ""),  # none stands out
    (["check", "a", "b"], ""),
])
def test_a_word_left_over_gets_a_hint_on_the_option_it_belongs_to(argv, hint, capsys):
    with pytest.raises(SystemExit) as e:
        cli(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.splitlines()[-1].endswith(f": unrecognized arguments: {argv[-1]}{hint}"), err


@pytest.mark.parametrize("argv", [
    ["preview", "-o", "x.txt"], ["preview", "-o", "grid"], ["bench", "--plot", "chart.gif"],
    ["report", "r.json", "--plot", "chart"],
])
def test_a_picture_of_a_format_not_written_is_refused_before_anything_runs(argv, capsys):
    """preview -o and the --plot options write what their extension names, of :data:`cli.PICTURES`; another
    is refused as an argument (matplotlib would refuse it with a traceback, after the work)."""
    with pytest.raises(SystemExit) as e:
        cli(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"'{argv[-1]}' is no picture daliloader writes; the file's extension names its " \
                                 "format: .png, .jpg, .jpeg, .pdf or .svg" in err, err


def test_a_picture_may_be_any_format_written(tmp_path):
    for name in ("grid.png", "grid.JPG", "grid.jpeg", "grid.pdf", "grid.svg"):
        assert build_parser().parse_args(["preview", "-o", name]).output == Path(name)
        assert build_parser().parse_args(["report", "r.json", "--plot", name]).plot == Path(name)


@pytest.mark.parametrize("argv", [
    ["bench", "--backends", "dali-cpu,nope"],
    ["bench", "--label-mode", "probabilities"],
    ["bench", "--batch-size", "0"],
    ["preview"],  # -o is required
    ["bench", "--image-size", "1,2,3"],
    ["bench", "--image-size", "0"],
    ["report", "r.json", "--data", "shards"],  # the packs are called packs
    ["bench", "--seconds", "nan"],  # no duration: a timed window never ended
    ["bench", "--seconds", "inf"],
    ["cache", "--clean", "--older-than", "inf"],
])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err


def test_help_on_every_command(capsys):
    assert tuple(build_parser().commands) == COMMANDS  # the order of the help
    for command in COMMANDS:
        with pytest.raises(SystemExit) as e:
            cli([command, "--help"])
        assert e.value.code == 0
        assert f"usage: daliloader {command}" in capsys.readouterr().out


def test_every_command_line_option_has_help():
    commands = build_parser().commands
    lacking = [f"{name} {a.option_strings or a.dest}" for name, sub in commands.items() for a in sub.arguments
               if not a.help]
    assert not lacking


def test_version_names_the_libraries(capsys):
    with pytest.raises(SystemExit) as e:
        cli(["--version"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("daliloader 0.") and "tensorflow" in out


def test_eval_takes_the_options_that_draw_nothing():
    args = build_parser().parse_args(["preview", "-o", "x.png", "--eval", "--rotate", "0", "--flip", "0", "--crop",
                                      "center", "--erase", "0"])
    assert cli_module.preview_recipe(args) == dict(rotate=0.0, flip=0.0, crop="center", erase=0, training=False)


@pytest.mark.parametrize("argv", [["--verbose", "synth", "out"], ["synth", "out", "--verbose"],
                                  ["synth", "--verbose", "out"], ["--verbose", "--verbose", "synth", "out"]])
def test_verbose_comes_before_the_command_or_after_it(argv, monkeypatch):
    ran, shown = [], []
    monkeypatch.setattr(cli_module, "cmd_synth", lambda args: ran.append((args.verbose, args.out)) or 0)
    monkeypatch.setattr(cli_module, "show_native_warnings", lambda: shown.append(True))
    assert cli(argv) == 0 and ran == [(True, Path("out"))] and shown == [True]


def test_the_top_level_help_lists_verbose(capsys):
    with pytest.raises(SystemExit):
        cli(["--help"])
    assert "--verbose" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli(["--verbose"])
    assert e.value.code == 2 and "the following arguments are required: command" in capsys.readouterr().err


def test_options_may_sit_between_data_and_out():
    args = cli_module.parse_args(build_parser(), ["prepare", "DATA", "--split", "val", "OUT"])
    assert (args.command, args.data, args.split, args.out) == ("prepare", Path("DATA"), "val", Path("OUT"))


# ---------------------------------------------------------------- errors, warnings, Ctrl-C
def test_missing_data_folder_is_a_clear_error(tmp_path, capsys, monkeypatch):
    assert cli(["bench", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)  # a bare name: a folder here, or a TFDS dataset; neither is, said in the flags' words
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tensorflow_datasets"))
    assert cli(["bench", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert "no folder of that name exists" in err and err.endswith("or pass --data-dir DIR\n"), err


def id_folder(root: Path, n: int = 6) -> Path:
    """images/*.jpg (48x64 photos) and masks/*.png (8-bit ids 0-3), as people keep their own data."""
    rng = np.random.default_rng(0)
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(root / "images" / f"{i:03d}.jpg")
        Image.fromarray(np.kron(rng.integers(0, 4, (6, 8)), np.ones((8, 8))).astype(np.uint8)).save(
            root / "masks" / f"{i:03d}.png")
    return root


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_an_output_that_cannot_be_written_is_refused_before_anything_is_measured(option, root, tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "folder.png").mkdir()
    for out, why in ((tmp_path / "a-file" / "r.png", "no file can be written in"), (tmp_path / "folder.png",
                                                                                   "a folder")):
        assert cli(["bench", root, "--backends", "opencv", "--no-stages", option, str(out)]) == 2
        said = capsys.readouterr()
        assert said.err.startswith(f"daliloader bench: error: {option} {out}: {why}") and said.err.count("\n") == 1
        assert "measuring" not in said.out  # nothing was


def test_report_refuses_a_chart_it_cannot_write_before_printing_its_tables(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "chart.png"
    assert cli(["report", str(ROOT / "benchmarks" / "results" / "vm-2cores-vs-expert.json"), "--plot", str(out)]) == 2
    said = capsys.readouterr()
    assert said.err.startswith(f"daliloader report: error: --plot {out}: no file can be written in") and not said.out


def test_report_says_when_the_data_asked_for_holds_no_figure(capsys):
    assert cli(["report", str(ROOT / "benchmarks" / "results" / "vm-2cores-vs-expert.json"), "--data", "local"]) == 2
    err = capsys.readouterr().err
    assert err == (f"daliloader report: error: --data local: {ROOT}/benchmarks/results/vm-2cores-vs-expert.json holds "
                   "no figure on that data; its figures are on original, prepared, packs\n")


@pytest.mark.parametrize("damage", ["truncated JPEG", "mask of another size"])
@pytest.mark.parametrize("reference", ["tf-expert", "tfdata-naive"])
def test_a_bad_file_stops_the_references_with_an_error_naming_it(damage, reference, tmp_path, capsys):
    """The references read the files with TensorFlow's ops: a bad file is named (the pairs vetted as the
    loaders vet them), with what to do, instead of TensorFlow's traceback."""
    pytest.importorskip("tensorflow")
    root = id_folder(tmp_path / "data")
    bad = root / "images" / "002.jpg" if damage == "truncated JPEG" else root / "masks" / "002.png"
    if damage == "truncated JPEG":
        bad.write_bytes(bad.read_bytes()[:-200])
    else:
        Image.fromarray(np.zeros((24, 32), np.uint8)).save(bad)
    assert cli(["bench", str(root), "--backends", reference, "--batch-size", "2", "--image-size", "16", "--seconds",
                "0.05", "--repeats", "1", "--no-stages", "--label-mode", "int"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("daliloader bench: error: cannot load sample 2") and f"{bad}: " in err, err
    assert "`daliloader check`" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["bench", "ROOT", "--prepared-dir", "x"], "daliloader bench: error: --prepared-dir names the folder of "
                                               "--prepared's copy: add --prepared"),
    (["preview", "nowhere", "-o", "x.png", "--eval", "--augment"], "daliloader preview: error: --eval previews the "
                                                                   "evaluation recipe, which draws nothing at random"),
    (["preview", "nowhere", "-o", "x.png", "--eval", "--cat-max-ratio", "0.75"],
     "daliloader preview: error: --eval previews the evaluation recipe, which draws nothing at random: leave out "
     "--cat-max-ratio\n"),
    (["preview", "nowhere", "-o", "x.png", "--eval", "--rotate", "10"],
     "daliloader preview: error: --eval previews the evaluation recipe, which draws nothing at random: leave out "
     "--rotate\n"),
    (["preview", "nowhere", "-o", "x.png", "--eval", "--crop", "random", "--flip", "0", "--blur", "1", "--hue", "5"],
     "daliloader preview: error: --eval previews the evaluation recipe, which draws nothing at random: leave out "
     "--crop random and --hue and --blur\n"),
    (["check"], "daliloader check: error: name the dataset to check: DATA (a dataset folder) or --images/--masks"),
])
def test_wrong_combinations_are_one_line(argv, message, root, capsys):
    assert cli([root if a == "ROOT" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def test_an_interrupted_command_says_so_and_a_warning_is_one_line(monkeypatch, capsys):
    def interrupted(args):
        warnings.warn("something to know", UserWarning, stacklevel=1)
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "cmd_synth", interrupted)
    assert cli(["synth", "out"]) == 130
    assert capsys.readouterr().err == ("daliloader synth: warning: something to know\n"
                                       "daliloader synth: interrupted\n")


def test_an_unexpected_refusal_of_the_system_is_one_line(monkeypatch, capsys):
    def refused(args):
        raise PermissionError(13, "Permission denied", "/somewhere")

    monkeypatch.setattr(cli_module, "cmd_verify", refused)
    assert cli(["verify", "out"]) == 2
    assert capsys.readouterr().err == "daliloader verify: error: /somewhere: Permission denied\n"


# ---------------------------------------------------------------- native noise
def test_the_command_line_hides_native_start_up_noise(root, tmp_path):
    """TensorFlow's and CUDA's start-up lines (written by native code, whatever TF_CPP_MIN_LOG_LEVEL says)
    are hidden from a command run from the shell, shown with --verbose. (preview on tfdata: the shortest
    command that starts TensorFlow and DALI's plugin.)"""
    pytest.importorskip("tensorflow")
    args = [sys.executable, "-m", "daliloader.cli", "preview", root, "--backend", "tfdata", "-o",
            str(tmp_path / "p.png"), "--batches", "1", "--batch-size", "1", "--image-size", "16"]
    quiet = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "absl::InitializeLog" not in quiet.stderr and not re.search(r"^I\d{4} ", quiet.stderr, re.M), quiet.stderr
    loud = subprocess.run(args + ["--verbose"], capture_output=True, text=True, timeout=300)
    assert loud.returncode == 0 and re.search(r"^[IWE]\d{4} |absl", loud.stderr, re.M), loud.stderr[-2000:]


@contextmanager
def stderr_to(path: Path):
    """File descriptor 2 (and sys.stderr) written to ``path`` (what the terminal would show), inside the test
    itself: pytest puts its own capture back on fd 2 between a fixture and the test."""
    saved, python_stderr = os.dup(2), sys.stderr
    with open(path, "wb") as target:
        os.dup2(target.fileno(), 2)
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115  (fd 2 itself, as Python's stderr is)
    try:
        yield path
    finally:
        sys.stderr.flush()
        sys.stderr = python_stderr
        os.dup2(saved, 2)
        os.close(saved)


def shown(path: Path, wanted: str, timeout: float = 10.0) -> str:
    """What ``path`` holds once ``wanted`` is in it (or ``timeout`` passed)."""
    end = time.monotonic() + timeout
    while wanted not in path.read_text() and time.monotonic() < end:
        time.sleep(0.01)
    return path.read_text()


def test_native_lines_pass_as_they_come_and_noise_is_dropped(tmp_path):
    with stderr_to(tmp_path / "stderr") as stderr_file:
        with native_noise_filtered():
            os.write(2, b"I0000 00:00:1.2 123 port.cc:153] oneDNN custom operations are on\n")
            os.write(2, b"a native line\n")
            assert shown(stderr_file, "a native line\n").endswith("a native line\n")  # before the command ends
            print("a Python line", file=sys.stderr)
            assert shown(stderr_file, "a Python line").endswith("a Python line\n")
            os.write(2, b"E0000 00:00:1.2 1 cuda_executor.cc:1] failed call to cuInit: UNKNOWN ERROR (303)\n"
                        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
            # a damaged PNG met by libpng (the commands name it themselves)
            os.write(2, b"libpng error: IDAT: invalid code lengths set\nlibpng warning: iCCP: known incorrect sRGB "
                        b"profile\n")
            # a corrupt JPEG the decoders go on with: outside check, this line is the only sign of it
            os.write(2, b"Corrupt JPEG data: premature end of data segment\n")
        assert os.fstat(2).st_ino == os.stat(stderr_file).st_ino  # fd 2 is the real one again
        print("Python's stderr again", file=sys.stderr)
        sys.stderr.flush()
    text = stderr_file.read_text()
    assert text == ("a native line\na Python line\nCorrupt JPEG data: premature end of data segment\n"
                    "Python's stderr again\n"), text


def test_libjpegs_warning_of_a_damaged_jpeg_comes_once_with_a_count(tmp_path):
    """bench on a dataset with one damaged JPEG printed libjpeg's line at every decode, 6783 times: each
    such line now comes once, and at the end how many more times it came and what to run."""
    with stderr_to(tmp_path / "stderr") as stderr_file, native_noise_filtered():
        for _ in range(500):
            os.write(2, b"Corrupt JPEG data: 77 extraneous bytes before marker 0xd9\n")
        os.write(2, b"Corrupt JPEG data: premature end of data segment\nanother line\n")
        os.write(2, b"Premature end of JPEG file\nPremature end of JPEG file")  # (the last without its newline)
    assert stderr_file.read_text().splitlines() == [
        "Corrupt JPEG data: 77 extraneous bytes before marker 0xd9",
        "Corrupt JPEG data: premature end of data segment", "another line", "Premature end of JPEG file",
        "daliloader: libjpeg wrote 'Corrupt JPEG data: 77 extraneous bytes before marker 0xd9' 499 more times: "
        "damaged JPEG data, decoded to garbage pixels each time it is read; `daliloader check DATA` names the file",
        "daliloader: libjpeg wrote 'Premature end of JPEG file' 1 more time: damaged JPEG data, decoded to garbage "
        "pixels each time it is read; `daliloader check DATA` names the file"]


def test_a_line_written_in_parts_is_judged_whole(tmp_path):
    """A native write after a partial line completes it: noise in two parts is dropped, a line in two
    parts passes once whole, and a last line without its newline is shown at the end."""
    with stderr_to(tmp_path / "stderr") as stderr_file, native_noise_filtered():
        os.write(2, b"I0000 00:00:1.2 port.cc")
        time.sleep(0.05)
        os.write(2, b":153] noise\nkept ")
        time.sleep(0.05)
        assert "kept" not in stderr_file.read_text()  # half a line: not judged yet
        os.write(2, b"whole\nno newline")
        assert shown(stderr_file, "kept whole\n") == "kept whole\n"
    assert stderr_file.read_text() == "kept whole\nno newline"


def test_the_filter_ends_and_fd_2_comes_back_when_the_command_is_interrupted(tmp_path, monkeypatch):
    started = []
    start = environment._start_filter
    monkeypatch.setattr(environment, "_start_filter",
                        lambda *args: started.append(start(*args)) or started[-1])
    with stderr_to(tmp_path / "stderr") as stderr_file:
        python_stderr = sys.stderr
        with pytest.raises(KeyboardInterrupt), native_noise_filtered():
            os.write(2, b"before Ctrl-C\n")
            raise KeyboardInterrupt
        assert started[0].poll() == 0 and sys.stderr is python_stderr
        assert os.fstat(2).st_ino == os.stat(stderr_file).st_ino
        os.write(2, b"after\n")
    assert stderr_file.read_text() == "before Ctrl-C\nafter\n"


CRASH = """
import os
from daliloader.cli import native_noise_filtered
with native_noise_filtered():
    os.write(2, b"I0000 00:00:1.2 1 port.cc:1] noise\\n")
    os.write(2, b"F0000 00:00:1.2 1 check.cc:1] Check failed: the last words\\n")
    os.abort()
"""


def test_a_native_crash_still_shows_its_last_lines():
    crashed = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True, timeout=60)
    assert crashed.returncode != 0
    assert crashed.stderr == "F0000 00:00:1.2 1 check.cc:1] Check failed: the last words\n", crashed.stderr


def test_a_bad_file_stops_a_command_in_its_own_words_alone(root, tmp_path):
    """A pair refused inside a tf.data graph: TensorFlow's warning of the failed step repeated the error with
    a Python traceback (80 lines on stderr, which a filter of lines cannot drop whole); a command runs
    TensorFlow at level 2 where the level is daliloader's default, so its one error is all that shows."""
    pytest.importorskip("tensorflow")
    bad = tmp_path / "bad"
    shutil.copytree(root, bad)
    image = sorted((bad / "train").glob("*.jpg"))[1]
    image.write_bytes(image.read_bytes()[:2000])
    args = [sys.executable, "-m", "daliloader.cli", "bench", str(bad), "--backends", "dali-cpu,tfdata", "--seconds",
            "0.1", "--repeats", "1", "--no-stages", "--label-mode", "int", "--image-size", "16", "--batch-size", "2"]
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    run = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 2 and run.stderr.startswith("daliloader bench: error: cannot load sample"), run.stderr
    assert f"{image}: truncated JPEG" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.splitlines()) == 3, run.stderr


def test_check_refuses_a_json_it_cannot_write_before_checking_and_makes_its_folder(root, tmp_path, capsys):
    """check --json into a place no file can be written was tried only after the whole check; a missing
    folder failed there too. The first is refused first; the second made."""
    (tmp_path / "a-file").write_text("")
    assert cli(["check", root, "--quiet", "--json", str(tmp_path / "a-file" / "c.json")]) == 2
    said = capsys.readouterr()
    assert "--json" in said.err and "no file can be written in" in said.err and "pairs" not in said.out
    out = tmp_path / "new" / "folder" / "c.json"
    assert cli(["check", root, "--quiet", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["pairs"] >= 1
