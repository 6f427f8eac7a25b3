"""The command line: bench (JSON, plot, stages, --train), preview, synth and argument errors.

These runs use tiny settings to check what the commands produce, not how fast anything is.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import daliloader as dl
from daliloader.bench import noisy
from daliloader.cli import main as cli

pytest.importorskip("tensorflow")
CPU_BACKENDS = "dali-cpu,tfdata,opencv,tfdata-naive"


@pytest.fixture(scope="module")
def root(synth_data) -> str:
    return str(Path(synth_data.images[0]).parent.parent)


def test_bench_writes_json_and_plot(root, tmp_path):
    out, png = tmp_path / "r" / "bench.json", tmp_path / "bench.png"
    code = cli(["bench", root, "--backends", CPU_BACKENDS, "--label-mode", "onehot,int", "--batch-size", "2",
                "--image-size", "48", "--seconds", "0.2", "--repeats", "2", "--json", str(out), "--plot", str(png)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["machine"]["cpu_count"] >= 1 and "tensorflow" in report["machine"]["versions"]
    assert report["settings"]["backends"] == CPU_BACKENDS.split(",")
    assert set(report["ceilings"]) == {"cpu_decode_pairs", "cpu_decode_images", "cpu_decode_masks"}
    got = {(r["name"], r["label_mode"]) for r in report["results"]}
    assert got == {(b, m) for b in CPU_BACKENDS.split(",") for m in ("onehot", "int")}
    for r in report["results"]:
        assert len(r["rates"]) == 2 and r["min"] <= r["median"] <= r["max"] and r["median"] > 0
        ceiling = report["ceilings"]["cpu_decode_pairs"]
        ratio = r["median"] / ceiling["median"]
        if r["noisy"] or noisy(ceiling) or ratio > 1:  # too noisy to divide by: no share, and the table says so
            assert r["fraction_of_ceiling"] is None
        else:
            assert r["fraction_of_ceiling"] == pytest.approx(ratio, abs=1e-3)
    stages = report["stages"]
    # one-hot first: the CPU graph ends with int labels and TensorFlow's one-hot is timed on its own
    assert [s["stage"] for s in stages["dali-cpu"]] == ["read", "decode", "labels", "crop", "normalize", "encode (int)",
                                                        "one-hot (TensorFlow)"]
    assert [s["stage"] for s in stages["opencv (1 thread)"]][:3] == ["read", "decode", "labels"]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_bench_train_reports_waiting_share(root, tmp_path):
    out = tmp_path / "train.json"
    assert cli(["bench", root, "--backends", "dali-cpu,opencv", "--batch-size", "2", "--image-size", "32",
                "--seconds", "0.1", "--repeats", "1", "--no-stages", "--train", "--train-steps", "2",
                "--json", str(out)]) == 0
    train = json.loads(out.read_text())["train"]
    assert set(train) == {"dali-cpu", "opencv"}
    for row in train.values():
        assert row["step_ms"] > 0 and row["floor_ms"] > 0 and 0 <= row["waiting_share"] < 1


def test_the_training_floor_runs_the_step_on_a_batch_resident_on_the_training_device(synth_data, monkeypatch):
    """The floor is the model's own step on one batch that already lives where the model trains (not a
    tf.data-cached batch, which TF copies from the host every step): the tensors given to the step are
    the resident ones, on that device."""
    import keras
    import tensorflow as tf

    from daliloader import bench
    from daliloader.plan import make_plan

    given = []
    original = keras.Model.train_on_batch

    def recording(self, x, y=None, *args, **kwargs):
        given.append((x, y))
        return original(self, x, y, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "train_on_batch", recording)
    plan = make_plan(synth_data, batch_size=2, image_size=(32, 32), label_mode="int", seed=0)
    rows = bench.train_bound(plan, ["dali-cpu"], steps=2, workers=1)
    assert rows["dali-cpu"]["floor_ms"] > 0
    device = bench.training_device()
    assert len(given) == 4 and all(x is given[0][0] and y is given[0][1] for x, y in given)
    for t in given[0]:
        assert isinstance(t, tf.Tensor) and tf.DeviceSpec.from_string(t.device).device_type == \
            tf.DeviceSpec.from_string(device).device_type


def test_preview_writes_a_grid(root, tmp_path):
    png = tmp_path / "grid.png"
    assert cli(["preview", root, "-o", str(png), "--batches", "1", "--batch-size", "2", "--image-size", "64"]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata", "opencv"])
def test_preview_shows_any_recipe_from_any_backend(synth_data, tmp_path, backend):
    """The evaluation recipe (fit crops of a wide size) and a training recipe, side by side and as overlays:
    the panels hold the loader's own samples, and wide samples get wide panels."""
    from daliloader.preview import mask_picture, overlay, preview, samples

    for view, options in (("both", dict(training=False, image_size=(32, 64))),
                          ("overlay", dict(image_size=48, rotate=10, brightness=0.2))):
        out = tmp_path / f"{view}.png"
        assert preview(synth_data, out, batches=1, batch_size=2, view=view, backend=backend, **options) == 2
        width, height = Image.open(out).size
        assert width > height if view == "both" else height > width
    rows, plan = samples(synth_data, 1, 2, backend, dict(training=False, image_size=(32, 64)))
    image, labels = rows[0]
    assert image.shape == (32, 64, 3) and 0 <= image.min() and image.max() <= 1 and labels.shape == (32, 64)
    assert (labels == 255).any()  # fit pads the wide window: ignored pixels
    picture = mask_picture(labels, synth_data.classes)
    assert len({tuple(p) for p in picture[labels == 255]}) == 2  # stripes of two colours
    blended = overlay(image, labels, synth_data.classes)
    np.testing.assert_array_equal(blended[labels == 255], image[labels == 255])
    with pytest.raises(dl.SpecError, match="view='grid'"):
        preview(synth_data, tmp_path / "x.png", view="grid")


def test_synth_writes_a_dataset(tmp_path):
    assert cli(["synth", "--image-size", "48,64", str(tmp_path / "s"), "--n", "3", "--format", "png"]) == 0
    files = list((tmp_path / "s" / "train").glob("*.png"))
    assert len(files) == 3 and Image.open(files[0]).size == (64, 48)  # HEIGHT,WIDTH as image_size; PIL: (w, h)
    assert cli(["synth", str(tmp_path / "q"), "--n", "1", "--image-size", "40", "--format", "png"]) == 0
    assert Image.open(next((tmp_path / "q" / "train").glob("*.png"))).size == (40, 40)


def test_image_size_is_size_or_height_width_everywhere():
    from daliloader.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    for command, rest in (("bench", ["DATA"]), ("preview", ["DATA", "-o", "x.png"]), ("synth", ["OUT"])):
        args = commands[command].parse_intermixed_args(["--image-size", "24,32"] + rest)  # DATA may follow
        assert args.image_size == (24, 32) and Path(rest[0]) in (getattr(args, "data", None), getattr(args, "out", None))
        assert commands[command].parse_intermixed_args(["--image-size", "24"] + rest).image_size == (24, 24)


@pytest.mark.parametrize("argv, hint", [
    (["bench", "--prepared", "copy", "camvid"], "name the prepared copy's folder with --prepared-dir DIR"),
    (["synth", "out", "--image-size", "720", "960"], "--image-size takes SIZE or HEIGHT,WIDTH as one argument"),
])
def test_former_forms_get_a_hint(argv, hint, capsys):
    with pytest.raises(SystemExit) as e:
        cli(argv)
    assert e.value.code == 2 and hint in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["bench", "--backends", "dali-cpu,nope"],
    ["bench", "--label-mode", "probabilities"],
    ["bench", "--batch-size", "0"],
    ["preview"],  # -o is required
    ["bench", "--image-size", "1,2,3"],
    ["bench", "--image-size", "0"],
])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err


def test_help_on_every_command(capsys):
    for command in ("bench", "check", "preview", "synth"):
        with pytest.raises(SystemExit) as e:
            cli([command, "--help"])
        assert e.value.code == 0
        assert f"usage: daliloader {command}" in capsys.readouterr().out


def test_missing_data_folder_is_a_clear_error(tmp_path, capsys):
    assert cli(["bench", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bench_prepared_column(root, tmp_path):
    out = tmp_path / "prepared.json"
    assert cli(["bench", root, "--backends", "dali-cpu,opencv", "--label-mode", "int", "--batch-size", "2",
                "--image-size", "32", "--seconds", "0.2", "--repeats", "1", "--no-stages",
                "--prepared", "--prepared-dir", str(tmp_path / "p"), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {(r["name"], r["data"]) for r in report["results"]} == {
        (b, d) for b in ("dali-cpu", "opencv") for d in ("original", "prepared")} | {("dali-cpu", "shards")}
    assert "cpu_decode_pairs_prepared" in report["ceilings"]
    assert (tmp_path / "p" / "manifest.json").exists()


NO_TF = """
import sys
for m in ("tensorflow", "keras", "nvidia.dali_tf_plugin"):
    sys.modules[m] = None  # as on a GPU machine with DALI alone
from daliloader.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_bench_without_tensorflow(root, tmp_path):
    """Where only DALI is installed (benchmarks/gpu_check.sh on a bare GPU machine), bench times the DALI
    backends through pipeline.run and opencv without Keras, says so, and refuses what needs TensorFlow."""
    import subprocess
    import sys

    out = tmp_path / "bench.json"
    args = [root, "--batch-size", "2", "--image-size", "48", "--seconds", "0.2", "--repeats", "1", "--no-stages"]
    proc = subprocess.run([sys.executable, "-c", NO_TF, "bench", *args, "--prepared", "--prepared-dir",
                           str(tmp_path / "prepared"),
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TensorFlow is not installed" in proc.stdout
    report = json.loads(out.read_text())
    assert "tensorflow" not in report["machine"]["versions"]
    got = {(r["name"], r["data"]): r["via"] for r in report["results"]}
    assert got == {("dali-cpu", "original"): "DALI pipeline.run (no TensorFlow)",
                   ("opencv", "original"): "OpenCV loader (no Keras)",
                   ("dali-cpu", "prepared"): "DALI pipeline.run (no TensorFlow)",
                   ("opencv", "prepared"): "OpenCV loader (no Keras)",
                   ("dali-cpu", "shards"): "DALI pipeline.run (no TensorFlow)"}
    assert all(r["median"] > 0 for r in report["results"])
    refused = subprocess.run([sys.executable, "-c", NO_TF, "bench", *args, "--backends", "dali-cpu,tfdata"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "tfdata needs TensorFlow" in refused.stderr


def test_the_command_line_hides_native_start_up_noise(root, tmp_path):
    """TensorFlow's and CUDA's start-up lines (written by native code, whatever TF_CPP_MIN_LOG_LEVEL says)
    are hidden from a command run from the shell, shown with --verbose; --version names the libraries."""
    pytest.importorskip("tensorflow")
    args = [sys.executable, "-m", "daliloader.cli", "bench", root, "--backends", "tfdata", "--batch-size", "2",
            "--image-size", "32", "--seconds", "0.05", "--repeats", "1", "--no-stages"]
    quiet = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "absl::InitializeLog" not in quiet.stderr and not re.search(r"^I\d{4} ", quiet.stderr, re.M), quiet.stderr
    loud = subprocess.run(args + ["--verbose"], capture_output=True, text=True, timeout=300)
    assert loud.returncode == 0 and re.search(r"^[IWE]\d{4} |absl", loud.stderr, re.M), loud.stderr[-2000:]
    version = subprocess.run([sys.executable, "-m", "daliloader.cli", "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("daliloader 0.") and "tensorflow" in version.stdout


@pytest.mark.parametrize("name", ["h100-16cores-cuda120-tf-bench.json", "vm-2cores-augment.json"])
def test_the_bench_tables_fit_80_columns_and_mark_noise(name):
    """A committed report (the widest: GPU, prepared data, packs, training; and one with augmentation)
    printed at 80 columns: no line longer, one line per row, a stage cost below zero shown as noisy."""
    from rich.console import Console

    from daliloader.report import print_report

    report = json.loads((Path(__file__).parent.parent / "benchmarks" / "results" / name).read_text())
    console = Console(width=80, record=True, color_system=None)
    print_report(console, report)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    for r in report["results"]:  # every row on one line: its median is on a line with its loader's name
        assert any(r["name"] in line and f"{r['median']:.1f}" in line for line in lines), r
    negative = [row for rows in report["stages"].values() for row in rows if row["ms_per_img"] < 0]
    assert not negative or any(line.strip().startswith(negative[0]["stage"]) and "noisy" in line for line in lines)


def test_noisy_figures_and_stages_that_are_off(synth_data):
    from daliloader.bench import bench_plan, noisy, opencv_stages
    from daliloader.report import share

    assert noisy({"median": 100, "min": 77, "max": 186}) and not noisy({"median": 100, "min": 95, "max": 110})
    steady = {"median": 100, "min": 95, "max": 110}
    assert share({**steady, "fraction_of_ceiling": None}) == "noisy"
    assert share({**steady, "fraction_of_ceiling": 0.5}) == "50%"
    assert share({"median": 100, "min": 77, "max": 186, "fraction_of_ceiling": 0.5}) == "noisy"  # an older report's
    stages = [row["stage"] for row in opencv_stages(bench_plan(synth_data, 2, (32, 32), "int"), samples=2)]
    assert "rotate" not in stages and "flip" in stages  # random crops flip by default; nothing rotates
    assert "rotate" in [row["stage"] for row in opencv_stages(bench_plan(synth_data, 2, (32, 32), "int", rotate=5),
                                                              samples=2)]


def test_every_command_line_option_has_help():
    import argparse

    from daliloader.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    lacking = [f"{name} {a.option_strings or a.dest}" for name, sub in commands.items() for a in sub._actions
               if not a.help and not isinstance(a, argparse._HelpAction)]
    assert not lacking


def test_report_prints_and_charts_a_saved_report_and_names_a_bad_one(tmp_path, capsys):
    """`daliloader report` reads what `bench --json` wrote (here the committed H100 report): the same
    tables, only the data asked for, a chart; a file that is no report is named, with what to pass."""
    committed = Path(__file__).parent.parent / "benchmarks" / "results" / "h100-16cores-cuda120-tf-bench.json"
    assert cli(["report", str(committed), "--data", "original", "--plot", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "dali-gpu" in out and "447.1" in out and "prepared" not in out and "packs" not in out
    assert (tmp_path / "c.png").stat().st_size > 10_000
    assert cli(["report", str(committed), "--data", "packs"]) == 0
    out = capsys.readouterr().out
    assert "1117.8" in out and "447.1" not in out
    (tmp_path / "bad.json").write_text('{"results": []}')
    (tmp_path / "number.json").write_text("3")
    for bad in (tmp_path / "bad.json", tmp_path / "number.json", tmp_path / "none.json",
                committed.parent.parent / "cpu_vs_gpu.sh"):
        assert cli(["report", str(bad)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and "bench --json" in err, err
