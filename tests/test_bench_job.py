"""The job behind `daliloader bench` (daliloader.bench.job), its measurements faked: which figures it takes
and how it groups them, the report it fills, what it says as it goes. One run without TensorFlow measures
for real (tiny), in this process, with TensorFlow, Keras and DALI's plugin hidden."""

import sys

import pytest

import daliloader as dl
from daliloader.bench import job
from daliloader.bench.record import (
    SCHEMA,
    About,
    BenchWarning,
    Data,
    FigureKey,
    Ratio,
    RatioKind,
    StageCut,
    StageTime,
    TrainRow,
)
from daliloader.bench.timing import Rates
from daliloader.parallel import cores

CPU_BACKENDS = ("dali-cpu", "tfdata", "opencv", "tfdata-naive")
#: Fake rates (one per repeat) of each backend; the pair-decode ceiling is 100 images/s.
RATES = {"dali-cpu": [40.0, 41.0], "tfdata": [60.0, 90.0], "opencv": [120.0, 121.0], "tfdata-naive": [10.0, 10.0],
         "tf-expert": [20.0, 20.5]}
CEILING = [100.0, 100.0]


class Fakes:
    """Every measurement of a run, faked: the ceilings and figures give fixed rates, the streams record
    how they were measured (in groups) and closed."""

    def __init__(self, monkeypatch):
        self.groups, self.closed, self.trained, self.said = [], [], [], []
        monkeypatch.setattr(job, "machine_info", lambda: {"host": "h", "cpu_count": 2, "gpu": None,
                                                          "versions": {}, "dali_build": None, "daliloader": "0"})
        monkeypatch.setattr(job, "cpu_decode_ceiling", lambda data, workers, seconds, repeats, what:
                            Rates(CEILING[:repeats], [10] * repeats))
        monkeypatch.setattr(job, "backend_stream", self.stream)
        monkeypatch.setattr(job, "measure_in_turn", self.measure_in_turn)
        monkeypatch.setattr(job, "dali_stages", lambda plan, device, seconds, repeats: [
            StageCut(stage="read", cumulative_img_per_s=500.0, ms_per_img=2.0),
            StageCut(stage="crop", cumulative_img_per_s=510.0, ms_per_img=-0.04)])
        monkeypatch.setattr(job, "opencv_stages", lambda plan: [StageTime(stage="decode", ms_per_img=3.0)])
        monkeypatch.setattr(job, "train_bound", self.train_bound)

    def stream(self, name, plan, workers, guard=None):
        def batches():
            try:
                while True:
                    yield name, plan
            finally:
                self.closed.append(name)
        return batches()

    def measure_in_turn(self, sources, batch_size, seconds, repeats, warmup_batches):
        cells = []
        for source in sources:  # each opened, read once (its batch says what it is) and closed
            stream = source()
            cells.append(next(stream))
            stream.close()
        self.groups.append([(name, plan.spec.label_mode) for name, plan in cells])
        return [Rates(RATES[name][:repeats], [10] * repeats, steady=name != "tfdata-naive") for name, _ in cells]

    def train_bound(self, plan, names, steps, workers):
        self.trained.append((list(names), steps))
        return {name: TrainRow(step_ms=30.0, floor_ms=20.0, waiting_share=0.333) for name in names}

    def run(self, data, **settings):
        settings = {"seconds": 0.5, "repeats": 2, "batch_size": 2, "image_size": 32, **settings}
        return job.run(data, job.Settings(**settings), say=self.said.append)


@pytest.fixture
def fakes(monkeypatch):
    return Fakes(monkeypatch)


def test_a_run_measures_every_backend_and_label_mode_and_fills_the_report(synth_data, fakes):
    from datetime import datetime, timezone

    report = fakes.run(synth_data, backends=CPU_BACKENDS, label_modes=("onehot", "int"), train=True)
    assert report.schema == SCHEMA and report.machine.cpu_count == 2
    assert abs((datetime.now(timezone.utc) - datetime.fromisoformat(report.started)).total_seconds()) < 60
    assert report.to_json()["started"] == report.started  # written, for the dates quoted next to its figures
    assert report.settings.backends == list(CPU_BACKENDS) and report.settings.image_size == [32, 32]
    assert report.dataset.pairs == len(synth_data) and report.dataset.images == str(
        synth_data.images[0].rsplit("/", 1)[0])
    assert set(report.ceilings) == {"cpu_decode_pairs", "cpu_decode_images", "cpu_decode_masks",
                                    "cpu_decode_pairs_cached"}  # colour masks: the backends read the mask cache
    assert {(r.name, r.label_mode) for r in report.results} == {(b, m) for b in CPU_BACKENDS for m in ("onehot", "int")}
    assert fakes.groups == [[(b, "onehot") for b in CPU_BACKENDS], [(b, "int") for b in CPU_BACKENDS]]  # in turn
    assert sorted(fakes.closed) == sorted(name for group in fakes.groups for name, _ in group)  # every stream closed
    for r in report.results:
        assert len(r.rates) == 2 and r.min <= r.median <= r.max
        bound = "cpu_decode_pairs" if r.name == "tfdata-naive" else "cpu_decode_pairs_cached"
        ratio = r.median / report.ceilings[bound].median
        if r.noisy or ratio > 1:  # too noisy to divide by, or above its ceiling: no share
            assert r.fraction_of_ceiling is None
        else:
            assert r.fraction_of_ceiling == pytest.approx(ratio, abs=1e-3)
    by_name = {r.name: r for r in report.results}
    assert by_name["tfdata"].noisy and not by_name["dali-cpu"].noisy
    assert by_name["dali-cpu"].fraction_of_ceiling == 0.405
    assert by_name["opencv"].via == "keras PyDataset" and by_name["tfdata-naive"].via == "tf.data"
    assert BenchWarning(about=About.FIGURE, figure=FigureKey("opencv", "onehot"), text=(
        "120% of its ceiling, which is then no ceiling (the ceiling ran while the machine was busier?); raise "
        "--seconds or --repeats")) in report.warnings
    unsteady = [w for w in report.warnings if w.text.startswith("the warm-up did not reach")]
    assert [w.figure for w in unsteady] == [FigureKey("tfdata-naive", m) for m in ("onehot", "int")]
    assert unsteady[1].line.startswith("tfdata-naive / int / original: the warm-up did not reach")
    assert list(report.stages) == ["dali-cpu", "opencv (1 thread)"]
    assert BenchWarning(about=About.RUN, text="stages of dali-cpu: crop came out below zero, which is noise between "
                        "the cuts' windows; raise --seconds for a breakdown to read") in report.warnings
    assert fakes.trained == [(["dali-cpu", "tfdata", "opencv"], 8)] and set(report.train) == {"dali-cpu", "tfdata",
                                                                                               "opencv"}
    assert report.ratios == []  # none asked for: no augmentation, one container, no expert


def test_a_short_window_warns_about_the_ceiling_or_figure_it_measured(synth_data, fakes, monkeypatch):
    """Too few batches in a window: a warning about the ceiling by its key, and about each figure by its key."""
    monkeypatch.setattr(job, "cpu_decode_ceiling", lambda data, workers, seconds, repeats, what:
                        Rates(CEILING[:repeats], [2] * repeats))
    report = fakes.run(synth_data, backends=("opencv",), label_modes=("int",), stages=False)
    short = [w for w in report.warnings if w.text.startswith("a timed window held 2 batches")]
    assert {w.ceiling for w in short} == set(report.ceilings) and {w.about for w in short} == {About.CEILING}
    assert short[0].line.startswith("ceiling cpu_decode_pairs: a timed window held 2 batches (fewer than 5)")


def test_a_backend_that_decodes_crop_windows_keeps_its_share_above_a_ceiling_of_whole_pictures(synth_data, fakes,
                                                                                              monkeypatch):
    """The CPU ceiling decodes whole pictures; dali-cpu (DALI's region decode) and tfdata (decode_and_crop_jpeg)
    decode the crop window only and pass it on large pictures: their figure was blamed on a busier machine
    and lost its share. Their share is kept as measured, each figure names the ceiling it divides by, and
    the report's share column gives that ceiling's letter."""
    from rich.console import Console

    from daliloader.report import print_report

    monkeypatch.setitem(RATES, "dali-cpu", [150.0, 151.0])
    report = fakes.run(synth_data, backends=("dali-cpu", "opencv", "tfdata-naive"), label_modes=("int",))
    by_name = {r.name: r for r in report.results}
    assert by_name["dali-cpu"].fraction_of_ceiling == 1.505 and by_name["opencv"].fraction_of_ceiling is None
    about = [w.figure for w in report.warnings if w.about is About.FIGURE]
    assert FigureKey("dali-cpu", "int") not in about and FigureKey("opencv", "int") in about
    assert any(w.line.startswith("opencv / int / original: 120% of its ceiling") for w in report.warnings)
    assert {r.name: r.ceiling for r in report.results} == {
        "dali-cpu": "cpu_decode_pairs_cached", "opencv": "cpu_decode_pairs_cached", "tfdata-naive": "cpu_decode_pairs"}
    console = Console(width=100, record=True)
    print_report(console, report)
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    letter = {key: f"({chr(ord('a') + i)})" for i, key in enumerate(report.ceilings)}
    assert any(f"ceiling {letter['cpu_decode_pairs']}: CPU pairs " in line for line in lines)
    assert any(line.split()[:2] == ["dali-cpu", "int"] and line.endswith(f"150% {letter['cpu_decode_pairs_cached']}")
               for line in lines)
    assert any(line.split()[:2] == ["tfdata-naive", "int"] and line.endswith(f"10% {letter['cpu_decode_pairs']}")
               for line in lines)


def test_the_ceilings_decode_on_every_core_whatever_workers_opencv_gets(synth_data, fakes, monkeypatch):
    """--workers lowered the ceilings (and opencv's threads) but not DALI's threads or tf.data's: with one
    worker, tf-expert and dali-cpu passed a ceiling decoded on one thread. The ceilings bound every
    backend on every core; --workers is opencv's."""

    used = []
    monkeypatch.setattr(job, "cpu_decode_ceiling", lambda data, workers, seconds, repeats, what:
                        used.append(workers) or Rates(CEILING[:repeats], [10] * repeats))
    report = fakes.run(synth_data, backends=("dali-cpu", "opencv"), label_modes=("int",), workers=1)
    assert used and set(used) == {cores()} and report.settings.workers == 1


def test_a_bad_mask_stops_the_bench_before_the_ceilings_naming_the_users_file(tmp_path, fakes):
    """A truncated colour mask got no entry in the mask cache, and the cached ceiling then failed on the
    cache's missing file ("masks-v1-.../0000001.png: No such file"). The pairs are vetted first, as the
    loaders vet them: the error names the user's mask."""
    data = dl.synthetic.make_dataset(tmp_path / "d", n=3, image_size=(40, 48))
    bad = data.masks[1]
    with open(bad, "r+b") as fh:
        fh.truncate(200)
    with pytest.raises(dl.LoadError, match=f"{bad}: truncated PNG"):
        fakes.run(dl.SegmentationData.from_folder(tmp_path / "d"), backends=("dali-cpu",), label_modes=("int",))


def test_every_figure_is_divided_by_the_experts_of_the_same_run_and_labels(synth_data, fakes, monkeypatch):
    monkeypatch.setattr(job, "other_container", lambda data, status: (Data.TFRECORD, synth_data))
    report = fakes.run(synth_data, backends=("dali-cpu", "tf-expert"), label_modes=("onehot", "int"), tfrecord=True,
                       stages=False)
    assert fakes.groups == [[("dali-cpu", m), ("tf-expert", m), ("dali-cpu", m), ("tf-expert", m)]
                            for m in ("onehot", "int")]  # every figure of a label mode in turn
    assert report.ratios_of(RatioKind.VS_EXPERT) == [
        Ratio(kind=RatioKind.VS_EXPERT, over=FigureKey(b, m, d), under=FigureKey("tf-expert", m), value=value)
        for m in ("onehot", "int") for b, d, value in (
            ("dali-cpu", Data.ORIGINAL, 2.0), ("dali-cpu", Data.TFRECORD, 2.0), ("tf-expert", Data.TFRECORD, 1.0))]
    assert [q.kind for q in report.ratios] == [RatioKind.TFRECORD_VS_FILES] * 4 + [RatioKind.VS_EXPERT] * 6
    from rich.console import Console

    from daliloader.report import print_report

    console = Console(width=200, record=True, color_system=None)
    print_report(console, report)
    assert "dali-cpu onehot: 2.00x the expert's tf.data on the original pairs (same run)" in console.export_text()


def test_the_expert_skips_data_its_random_crop_cannot_take_saying_so_once_per_data(synth_data, fakes, monkeypatch):
    """Two label modes on two data: the expert left out four times, one warning per data, which names it."""
    monkeypatch.setattr(job, "other_container", lambda data, status: (Data.TFRECORD, synth_data))
    report = fakes.run(synth_data, backends=("dali-cpu", "tf-expert"), label_modes=("int", "onehot"), image_size=4096,
                       tfrecord=True, stages=False)
    assert {r.name for r in report.results} == {"dali-cpu"} and report.ratios_of(RatioKind.VS_EXPERT) == []
    left_out = [w for w in report.warnings if w.about is About.EXPERT]
    assert [w.data for w in left_out] == [Data.ORIGINAL, Data.TFRECORD]
    assert left_out[0].line.startswith("tf-expert on original: not measured: its random crop needs pictures of at "
                                       "least 4096x4096")
    assert [w.line for w in report.only(["tfrecord"]).warnings if w.about is About.EXPERT] == [left_out[1].line]


def test_by_default_what_cannot_decode_the_datas_formats_is_left_out_saying_so(tmp_path, fakes):
    """A dataset with a TIFF image: bench's default backends stopped at it, before any figure, as tfdata
    and the references (TensorFlow's decoders) read no TIFF; they are left out, saying so, and the others
    measured. Asked for by name, such a backend still stops at the file."""
    import cv2
    import numpy as np

    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    for i, ext in enumerate((".jpg", ".tif")):
        cv2.imwrite(str(tmp_path / "images" / f"{i}{ext}"), np.full((40, 48, 3), 90, np.uint8))
        cv2.imwrite(str(tmp_path / "masks" / f"{i}.png"), np.zeros((40, 48), np.uint8))
    data = dl.SegmentationData.from_dirs(tmp_path / "images", tmp_path / "masks", 2)
    report = fakes.run(data, stages=False)
    tiff = f"its decoders do not read TIFF ({tmp_path / 'images' / '1.tif'})"
    assert {r.name for r in report.results} - {"dali-gpu"} == {"dali-cpu", "opencv"}  # (dali-gpu with a GPU)
    for name in ("tfdata", "tf-expert", "tfdata-naive"):
        said = f"{name}: not measured: {tiff}; asked for by --backends, it stops at that file"
        assert BenchWarning(about=About.RUN, text=said) in report.warnings
        assert any(line.startswith(f"{name}: not measured: {tiff}") for line in fakes.said)
    assert [b for b in report.settings.backends if b != "dali-gpu"] == ["dali-cpu", "opencv"]
    assert {r.name for r in fakes.run(data, backends=("tfdata",), stages=False).results} == {"tfdata"}  # (faked)


def test_a_run_says_how_many_figures_and_each_as_it_is_measured(synth_data, fakes):
    fakes.run(synth_data, backends=("dali-cpu", "opencv"), stages=False)
    assert fakes.said == [("measuring 2 figures, each 2 windows of 0.5 s after a warm-up epoch and at least two "
                           "shorter windows: 2.5 s or more"),
                          "  1/2 dali-cpu / onehot / original: 40.5 images/s",
                          "  2/2 opencv / onehot / original: 120.5 images/s"]
    fakes.said.clear()
    fakes.run(synth_data, backends=("opencv",), seconds=0.2, repeats=1, stages=False)
    assert fakes.said[0] == ("measuring 1 figure, each 1 window of 0.2 s after a warm-up epoch and at least two "
                            "shorter windows: 0.3 s or more")
    assert [job.duration(s) for s in (0.04, 2.0, 9.6, 12.4, 120.0)] == ["0.04", "2", "9.6", "12", "120"]


def test_a_backend_or_label_mode_given_twice_is_measured_once(synth_data, fakes):
    report = fakes.run(synth_data, backends=("opencv", "dali-cpu", "opencv"), label_modes=("int", "onehot", "int"),
                       stages=False)
    assert [(r.name, r.label_mode) for r in report.results] == [("opencv", "int"), ("dali-cpu", "int"),
                                                                ("opencv", "onehot"), ("dali-cpu", "onehot")]
    assert report.settings.backends == ["opencv", "dali-cpu"] and report.settings.label_modes == ["int", "onehot"]


def test_the_settings_say_whether_the_loaders_read_the_mask_cache(synth_data, fakes, monkeypatch):
    assert fakes.run(synth_data, backends=("opencv",), stages=False).settings.mask_cache is True  # colour masks
    monkeypatch.setenv("DALILOADER_MASK_CACHE", "0")
    assert fakes.run(synth_data, backends=("opencv",), stages=False).settings.mask_cache is False


def test_augmentation_is_measured_beside_each_backend_but_the_baseline(synth_data, fakes):
    report = fakes.run(synth_data, backends=("dali-cpu", "tfdata-naive"), augment=True, stages=False)
    assert [(r.name, r.augment) for r in report.results] == [("dali-cpu", "none"), ("tfdata-naive", "none"),
                                                             ("dali-cpu", "full")]
    assert report.settings.augment == {"scale": [0.5, 2.0], "rotate": 15, "brightness": 0.3, "contrast": 0.3,
                                       "saturation": 0.3, "hue": 10}
    assert report.ratios == [Ratio(kind=RatioKind.AUGMENT_KEPT, over=FigureKey("dali-cpu", "onehot", augment="full"),
                                   under=FigureKey("dali-cpu", "onehot"), value=1.0)]
    assert "dali-cpu / onehot / original / augmented" in " ".join(fakes.said)


def test_the_other_container_is_measured_in_turn_with_the_original(synth_data, fakes, monkeypatch):
    made = []
    monkeypatch.setattr(job, "other_container", lambda data, status: made.append(data) or (Data.TFRECORD, synth_data))
    report = fakes.run(synth_data, backends=("dali-cpu", "opencv"), tfrecord=True, stages=False)
    assert made == [synth_data] and report.dataset.tfrecord == str(synth_data.images[0].rsplit("/", 1)[0])
    assert fakes.groups == [[("dali-cpu", "onehot"), ("opencv", "onehot")] * 2]  # A B C D A B C D: one group
    assert [(r.name, r.data) for r in report.results] == [("dali-cpu", "original"), ("opencv", "original"),
                                                          ("dali-cpu", "tfrecord"), ("opencv", "tfrecord")]
    assert report.ratios == [Ratio(kind=RatioKind.TFRECORD_VS_FILES, over=FigureKey(b, "onehot", Data.TFRECORD),
                                   under=FigureKey(b, "onehot"), value=1.0) for b in ("dali-cpu", "opencv")]


def test_the_ratios_pair_each_figure_with_its_kinds_divisor_in_the_run():
    """TFRecords over files whichever the original pairs are (files: against the "tfrecord" figures;
    TFRecords: against the "files" ones), a figure whose divisor the run lacks left out, each value the
    medians' quotient rounded to three places."""
    def fig(name, data, median, augment="none"):
        return job.Figure(name=name, label_mode="int", rates=[median], median=median, min=median, max=median,
                          data=data, augment=augment)

    as_files = [fig("dali-cpu", Data.ORIGINAL, 30.0), fig("dali-cpu", Data.TFRECORD, 20.0), fig("opencv", Data.TFRECORD,
                                                                                            7.0)]
    assert job.ratios(RatioKind.TFRECORD_VS_FILES, as_files) == [Ratio(
        kind=RatioKind.TFRECORD_VS_FILES, over=FigureKey("dali-cpu", "int", Data.TFRECORD),
        under=FigureKey("dali-cpu", "int"), value=0.667)]
    as_records = [fig("dali-cpu", Data.ORIGINAL, 20.0), fig("dali-cpu", Data.FILES, 30.0)]
    assert [(q.over.data, q.under.data) for q in job.ratios(RatioKind.TFRECORD_VS_FILES, as_records)] == [
        (Data.ORIGINAL, Data.FILES)]
    augmented = [fig("opencv", Data.ORIGINAL, 9.0, "full"), fig("opencv", Data.ORIGINAL, 10.0)]
    assert [q.value for q in job.ratios(RatioKind.AUGMENT_KEPT, augmented)] == [0.9]
    assert job.ratios(RatioKind.VS_EXPERT, augmented) == []  # no expert in the run


def test_the_prepared_copy_is_measured_with_its_packs_by_the_dali_backends(synth_data, fakes, tmp_path):
    report = fakes.run(synth_data, backends=("dali-cpu", "opencv"), label_modes=("int",), stages=False,
                       prepared=str(tmp_path / "p"))
    assert {(r.name, r.data) for r in report.results} == {
        (b, d) for b in ("dali-cpu", "opencv") for d in ("original", "prepared")} | {("dali-cpu", "packs")}
    assert "cpu_decode_pairs_prepared" in report.ceilings and (tmp_path / "p" / "manifest.json").exists()
    assert report.dataset.prepared == str(tmp_path / "p")
    assert all(r.fraction_of_ceiling == 0.405 for r in report.results if r.name == "dali-cpu")


def test_a_prepared_copy_without_packs_is_measured_without_them(synth_data, fakes, tmp_path):
    from daliloader.preparation import prepare

    prepare(synth_data, tmp_path / "p", progress=False)
    report = fakes.run(synth_data, backends=("dali-cpu",), stages=False, prepared=str(tmp_path / "p"))
    assert [r.data for r in report.results] == ["original", "prepared"]
    assert f"{tmp_path / 'p'} has no packs (`daliloader prepare --packs N` writes them): not measured" in fakes.said


def test_what_the_machine_cannot_run_is_refused(synth_data, fakes, monkeypatch):
    monkeypatch.setattr(job, "has_tensorflow", lambda: False)
    with pytest.raises(dl.SpecError, match=r"--train needs TensorFlow, Keras and DALI's TF plugin \(`make install`\)"):
        fakes.run(synth_data, backends=("dali-cpu",), train=True)
    if not job.backends.dali_gpu_count():
        with pytest.raises(dl.SpecError, match=r"--backends: dali-gpu needs a CUDA GPU that DALI can see, which this "
                                               r"machine lacks \(dali-cpu runs the same graph on the CPU\)"):
            fakes.run(synth_data, backends=("dali-gpu",))


NO_TF = ("tensorflow", "keras", "nvidia.dali_tf_plugin")


def test_without_tensorflow_dali_is_timed_through_its_pipeline_and_opencv_without_keras(synth_data, tmp_path,
                                                                                        monkeypatch, capsys):
    """Where only DALI is installed (benchmarks/gpu_check.sh on a bare GPU machine), bench times the DALI
    backends through pipeline.run and opencv without Keras, says so, and refuses what needs TensorFlow.
    Measured for real, TensorFlow, Keras and the plugin hidden as if they were not installed."""
    for module in NO_TF:
        monkeypatch.setitem(sys.modules, module, None)
    said = []
    report = job.run(synth_data, job.Settings(batch_size=2, image_size=16, seconds=0.05, repeats=1, stages=False,
                                              prepared=str(tmp_path / "prepared")), say=said.append)
    assert said[0] == "TensorFlow is not installed: DALI backends are timed through pipeline.run, opencv without Keras"
    assert "tensorflow" not in report.machine.versions and "keras" not in report.machine.versions
    assert {(r.name, r.data): r.via for r in report.results} == {
        ("dali-cpu", "original"): "DALI pipeline.run (no TensorFlow)",
        ("opencv", "original"): "OpenCV loader (no Keras)",
        ("dali-cpu", "prepared"): "DALI pipeline.run (no TensorFlow)",
        ("opencv", "prepared"): "OpenCV loader (no Keras)",
        ("dali-cpu", "packs"): "DALI pipeline.run (no TensorFlow)"}
    assert all(r.median > 0 for r in report.results)
    from daliloader.cli import main as cli

    assert cli(["bench", str(tmp_path / "prepared"), "--backends", "dali-cpu,tfdata"]) == 2
    assert "--backends: tfdata needs TensorFlow" in capsys.readouterr().err


def test_a_dataset_smaller_than_a_batch_is_measured_on_batches_of_all_its_pairs():
    said = []
    assert job.batch_within(job.Settings(batch_size=8), 6, said.append).batch_size == 6
    assert said == ["batch size 6 instead of 8: the dataset holds only 6 pairs"]
    assert job.batch_within(job.Settings(batch_size=4), 6, said.append) == job.Settings(batch_size=4)
    assert len(said) == 1
