"""The bench report as records (daliloader.bench.record): its JSON, with a schema version, and the one
migration that reads every older report."""

import copy
import json
from pathlib import Path

import pytest

from daliloader.bench.record import (
    DATA,
    SCHEMA,
    About,
    BenchWarning,
    Ceiling,
    Data,
    Dataset,
    Figure,
    FigureKey,
    Machine,
    Ratio,
    RatioKind,
    Report,
    RunSettings,
    StageCut,
    StageTime,
    TrainRow,
    migrate,
    read,
)
from daliloader.errors import DataError

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
#: Every committed report that ``daliloader bench --json`` wrote (the others are benchmark scripts').
REPORTS = sorted(p.name for p in RESULTS.glob("*.json") if {"results", "ceilings"} <= set(json.loads(p.read_text())))


def current() -> Report:
    """A report as a run makes it: every part filled, older forms absent."""
    rates = Figure.summary([90.0, 100.0, 110.0])
    return Report(
        machine=Machine(host="h", platform="Linux", python="3.11.7", cpu_count=2, cpu="EPYC", gpu=None,
                        versions={"numpy": "2.0"}, dali_build="nvidia-dali-cuda120 2.4.0", daliloader="0.1.0 abc"),
        dataset=Dataset(images="/data/train", pairs=8, classes=32, prepared="/cache/prepared", tfrecord="/cache/t"),
        settings=RunSettings(batch_size=8, image_size=[512, 512], label_modes=["onehot"], seconds=3.0, repeats=3,
                             workers=2, backends=["dali-cpu"], augment={"scale": [0.5, 2.0], "rotate": 15},
                             mask_cache=True),
        ceilings={"cpu_decode_pairs": Ceiling.measured("cpu_decode_pairs", [200.0, 210.0, 220.0], "pairs/s")},
        results=[Figure(name="dali-cpu", label_mode="onehot", **rates, data=which, via="tf.data", noisy=False,
                        fraction_of_ceiling=0.476) for which in ("original", "packs")],
        stages={"dali-cpu": [StageCut(stage="read", cumulative_img_per_s=900.0, ms_per_img=1.11),
                             StageCut(stage="one-hot (TensorFlow)", cumulative_img_per_s=None, ms_per_img=0.5)],
                "opencv (1 thread)": [StageTime(stage="decode", ms_per_img=4.2)]},
        warnings=[BenchWarning(about=About.FIGURE, figure=FigureKey("dali-cpu", "onehot", Data.PACKS), text="noisy"),
                  BenchWarning(about=About.CEILING, ceiling="cpu_decode_pairs", text="a timed window"),
                  BenchWarning(about=About.EXPERT, data=Data.PACKS, text="not measured: why"),
                  BenchWarning(about=About.RUN, text="stages of dali-cpu: crop")],
        ratios=[Ratio(kind=RatioKind.AUGMENT_KEPT, over=FigureKey("dali-cpu", "onehot", augment="full"),
                      under=FigureKey("dali-cpu", "onehot"), value=0.5),
                Ratio(kind=RatioKind.TFRECORD_VS_FILES, over=FigureKey("dali-cpu", "onehot", Data.TFRECORD),
                      under=FigureKey("dali-cpu", "onehot"), value=0.98)],
        train={"dali-cpu": TrainRow(step_ms=30.0, floor_ms=20.0, waiting_share=0.333)})


def test_a_current_report_round_trips_through_its_json():
    report = current()
    written = json.loads(json.dumps(report.to_json()))
    assert written["schema"] == SCHEMA and list(written)[0] == "schema"
    again = Report.from_json(written)
    assert again == report and again.to_json() == written
    assert "floor_cached" not in written["train"]["dali-cpu"]  # the current floor: nothing to say
    assert written["stages"]["opencv (1 thread)"] == [{"stage": "decode", "ms_per_img": 4.2}]
    assert written["stages"]["dali-cpu"][1] == {"stage": "one-hot (TensorFlow)", "cumulative_img_per_s": None,
                                                "ms_per_img": 0.5}
    figure = written["results"][0]
    assert list(figure) == ["name", "label_mode", "rates", "unit", "extra", "median", "min", "max", "data", "via",
                            "augment", "noisy", "fraction_of_ceiling", "ceiling"]
    assert list(written["ceilings"]["cpu_decode_pairs"]) == list(figure)[:8]
    assert written["ceilings"]["cpu_decode_pairs"]["name"] == "cpu-decode-pairs"
    packs = {"name": "dali-cpu", "label_mode": "onehot", "data": "packs", "augment": "none"}
    assert written["warnings"] == [  # each subject in fields of its own, only the field that names it
        {"about": "figure", "figure": packs, "text": "noisy"},
        {"about": "ceiling", "ceiling": "cpu_decode_pairs", "text": "a timed window"},
        {"about": "expert", "data": "packs", "text": "not measured: why"},
        {"about": "run", "text": "stages of dali-cpu: crop"}]
    assert written["ratios"][1] == {"kind": "tfrecord_vs_files", "over": dict(packs, data="tfrecord"),
                                    "under": dict(packs, data="original"), "value": 0.98}


def test_optional_parts_are_left_out_while_unset():
    report = current()
    report.train = None
    report.dataset.prepared = report.dataset.tfrecord = None
    report.settings.augment = None
    written = report.to_json()
    assert "train" not in written and not {"augment_kept", "tfrecord_vs_files", "bucket_vs_local", "vs_expert"} & set(
        written)  # (version 3's ratios: now records in "ratios")
    assert list(written["dataset"]) == ["images", "pairs", "classes"] and "augment" not in written["settings"]
    assert Report.from_json(written) == report


@pytest.mark.parametrize("name", REPORTS)
def test_every_committed_report_reads(name):
    raw = json.loads((RESULTS / name).read_text())
    before = copy.deepcopy(raw)
    report = read(RESULTS / name)
    assert raw == before  # (read from its own copy; migrate leaves its argument alone)
    assert migrate(copy.deepcopy(raw)) == migrate(raw) and raw == before
    assert report.schema == SCHEMA and len(report.results) == len(raw["results"])
    assert {r.data for r in report.results} <= set(DATA) and list(report.ceilings) == list(raw["ceilings"])
    for figure, old in zip(report.results, raw["results"], strict=True):
        assert (figure.name, figure.median, figure.min, figure.max) == (old["name"], old["median"], old["min"],
                                                                        old["max"])
        assert figure.data == {"shards": "packs"}.get(old.get("data"), old.get("data", "original"))
    for key, ceiling in report.ceilings.items():
        assert ceiling.unit.endswith("/s") and ceiling.median == raw["ceilings"][key]["median"]
    assert Report.from_json(json.loads(json.dumps(report.to_json()))) == report  # and round-trips once migrated


def test_the_migration_renames_shards_and_keeps_an_older_floor_for_what_it_was():
    old = json.loads((RESULTS / "h100-16cores-cuda120-tf-bench.json").read_text())
    assert "schema" not in old and any(r["data"] == "shards" for r in old["results"])
    assert all("cached_batch_floor_ms" in row for row in old["train"].values())
    report = Report.from_json(old)
    assert [r.data for r in report.results].count("packs") == [r["data"] for r in old["results"]].count("shards")
    assert report.train["dali-gpu"] == TrainRow(step_ms=22.7, floor_ms=48.3, waiting_share=0.0, floor_cached=True)
    written = report.to_json()
    assert written["train"]["dali-gpu"] == {"step_ms": 22.7, "floor_ms": 48.3, "waiting_share": 0.0,
                                            "floor_cached": True}
    assert report.machine.dali_build is None and report.machine.daliloader is None  # not recorded then


def test_the_migration_fills_what_the_oldest_reports_lack():
    """A version-1 report as small as read_report ever took: ceilings without unit or name, figures
    without data, augmentation, via, noise or share."""
    oldest = {"machine": {"cpu_count": 2, "gpu": None, "versions": {"nvidia.dali": "1.0"}},
              "settings": {"batch_size": 8, "image_size": [512, 512], "label_modes": ["onehot"], "seconds": 3,
                           "repeats": 3},
              "ceilings": {"cpu_decode_pairs": {"rates": [1.0], "median": 100, "min": 95, "max": 110},
                           "nvjpeg_images": {"rates": [1.0], "median": 900, "min": 890, "max": 910},
                           "cpu_decode_masks_prepared": {"rates": [1.0], "median": 300, "min": 290, "max": 310}},
              "results": [{"name": "dali-cpu", "label_mode": "int", "rates": [1.0], "median": 100, "min": 77,
                           "max": 186}]}
    report = Report.from_json(oldest)
    assert [(c.name, c.unit) for c in report.ceilings.values()] == [
        ("cpu-decode-pairs", "pairs/s"), ("nvjpeg-images", "images/s"), ("cpu-decode-masks-prepared", "masks/s")]
    figure = report.results[0]
    assert (figure.data, figure.augment, figure.via, figure.fraction_of_ceiling) == ("original", "none", None, None)
    assert figure.noisy  # judged from its spread
    assert report.stages == {} and report.warnings == [] and report.dataset == Dataset() and report.train is None
    assert report.settings.crop == "random" and report.settings.workers is None


def test_a_newer_report_and_reports_that_are_none_are_refused_saying_what_to_pass(tmp_path):
    newer = dict(current().to_json(), schema=SCHEMA + 1)
    with pytest.raises(DataError, match=f"a report of schema {SCHEMA + 1}, which a newer daliloader wrote .*upgrade"):
        Report.from_json(newer)
    with pytest.raises(DataError, match="its schema is 'two'"):
        Report.from_json(dict(current().to_json(), schema="two"))
    for name, text, why in (("bad.json", '{"results": []}', "it lacks machine, settings, ceilings"),
                            ("number.json", "3", "not a JSON object"), ("broken.json", '{"machine": ', "not a JSON "),
                            ("none.json", None, "no such file"),
                            ("malformed.json", json.dumps(dict(current().to_json(), results=[{"name": "x"}])),
                             "malformed"),
                            ("old-malformed.json", json.dumps({"machine": [], "settings": {}, "results": [],
                                                               "ceilings": {}}), "malformed")):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(DataError) as e:
            read(path)
        assert str(e.value).startswith(f"{path}: ") and why in str(e.value), e.value
        assert str(e.value).endswith("pass a report written by `daliloader bench --json`")


def test_only_keeps_the_figures_on_the_data_asked_for_and_the_ceilings_that_bound_them():
    report = read(RESULTS / "h100-16cores-cuda120-tf-bench.json")
    original = report.only(["original"])
    assert {r.data for r in original.results} == {"original"}
    assert not any(k.endswith("_prepared") for k in original.ceilings)
    packs = report.only(["packs"])
    assert {r.data for r in packs.results} == {"packs"} and all(k.endswith("_prepared") for k in packs.ceilings)
    assert report.only(None) is report and len(report.only(DATA).results) == len(report.results)


def test_the_migration_says_whether_the_loaders_read_the_mask_cache_where_the_ceilings_show_it():
    """Schema 2 did not record the mask cache: a report whose ceilings include one of the cache's read it;
    of another, it is not known."""
    cached = json.loads((RESULTS / "vm-2cores-vs-expert.json").read_text())
    assert cached["schema"] == 2 and "mask_cache" not in cached["settings"]
    assert read(RESULTS / "vm-2cores-vs-expert.json").settings.mask_cache is True
    before = json.loads((RESULTS / "vm-2cores.json").read_text())
    assert not any(key.endswith("_cached") for key in before["ceilings"])
    assert read(RESULTS / "vm-2cores.json").settings.mask_cache is None
    assert current().to_json()["settings"]["mask_cache"] is True and SCHEMA >= 3


#: Warnings of every form a version-3 report wrote, with what each is about; the last said nothing of its
#: subject (a backend left out for its formats): the run's, shown with the original pairs.
V3_WARNINGS = {
    "dali-cpu / int / packs: 114% of its ceiling": (About.FIGURE, FigureKey("dali-cpu", "int", Data.PACKS)),
    "opencv / onehot / prepared: the warm-up": (About.FIGURE, FigureKey("opencv", "onehot", Data.PREPARED)),
    "ceiling cpu_decode_pairs_prepared: a timed window": (About.CEILING, "cpu_decode_pairs_prepared"),
    "tf-expert on prepared: not measured: x": (About.EXPERT, Data.PREPARED),
    "dali-cpu / int / original / augmented: a timed window": (
        About.FIGURE, FigureKey("dali-cpu", "int", Data.ORIGINAL, "full")),
    "stages of dali-cpu: crop": (About.RUN, None),
    "tfdata: not measured: its decoders do not read TIFF (x.tif)": (About.RUN, None),
}


def test_a_version_3_reports_warnings_keep_what_each_is_about():
    """A version-3 report's warnings were text, their subject found again by a pattern whenever ``report
    --data`` filtered them; the migration reads each into a record once, with what it is about, said as it
    was written, and --data keeps exactly the warnings about that data."""
    raw = json.loads((RESULTS / "vm-2cores-vs-expert-2026-11-27-v2.json").read_text())
    assert raw["schema"] == 3
    raw["warnings"] = list(V3_WARNINGS)
    report = Report.from_json(raw)
    assert [w.line for w in report.warnings] == list(V3_WARNINGS)  # said word for word as before
    for w, (about, subject) in zip(report.warnings, V3_WARNINGS.values(), strict=True):
        assert w.about is about and {About.FIGURE: w.figure, About.CEILING: w.ceiling, About.EXPERT: w.data,
                                     About.RUN: None}[about] == subject
    assert report.warnings[1].text == "the warm-up" and report.warnings[3].text == "not measured: x"
    lines = {name: [w.line for w in report.only([name]).warnings] for name in ("packs", "prepared", "original")}
    assert lines["packs"] == ["dali-cpu / int / packs: 114% of its ceiling",
                              "ceiling cpu_decode_pairs_prepared: a timed window"]
    assert lines["prepared"] == ["opencv / onehot / prepared: the warm-up",
                                 "ceiling cpu_decode_pairs_prepared: a timed window",
                                 "tf-expert on prepared: not measured: x"]
    assert lines["original"] == ["dali-cpu / int / original / augmented: a timed window", "stages of dali-cpu: crop",
                                 "tfdata: not measured: its decoders do not read TIFF (x.tif)"]
    again = Report.from_json(json.loads(json.dumps(report.to_json())))  # written as records, read back as such
    assert again == report and again.schema == SCHEMA


def test_only_keeps_the_ratios_of_the_figures_on_the_data_asked_for():
    """vm-2cores-vs-expert.json: ratios to the expert of figures on the original pairs, the prepared copy
    and its packs, all divided by the expert's on the original pairs; a breakdown's warning (the original
    pairs')."""
    report = read(RESULTS / "vm-2cores-vs-expert.json")
    packs = report.only(["packs"])
    assert [(q.over.name, q.over.label_mode) for q in packs.ratios] == [("dali-cpu", "int"), ("dali-cpu", "onehot")]
    assert {q.over.data for q in packs.ratios} == {"packs"} and {q.under for q in packs.ratios} == {
        FigureKey("tf-expert", mode) for mode in ("int", "onehot")}  # the divisor named, though left out
    assert packs.stages == {} and packs.memory_mb is None  # measured on the original pairs
    original = report.only(["original"])
    assert {(q.over.name, q.over.label_mode) for q in original.ratios} == {
        (b, m) for b in ("dali-cpu", "tfdata", "opencv") for m in ("int", "onehot")}
    assert [w.about for w in original.warnings] == [About.FIGURE, About.RUN]
    assert original.stages == report.stages and original.memory_mb == report.memory_mb


def test_a_ratio_knows_the_two_figures_it_divides():
    report = read(RESULTS / "vm-2cores-vs-expert.json")
    ratio = next(q for q in report.ratios_of(RatioKind.VS_EXPERT) if q.over == FigureKey("dali-cpu", "int",
                                                                                         Data.PREPARED))
    over, under = report.divided(ratio)
    assert (over.name, over.label_mode, over.data) == ("dali-cpu", "int", "prepared")
    assert (under.name, under.label_mode, under.data) == ("tf-expert", "int", "original")
    records = read(RESULTS / "vm-2cores-tfrecord.json")
    over, under = records.divided(records.ratios_of("tfrecord_vs_files")[2])
    assert (over.name, over.data, under.data) == ("tfdata", "tfrecord", "original")
    augment = read(RESULTS / "vm-2cores-augment.json")
    over, under = augment.divided(augment.ratios_of(RatioKind.AUGMENT_KEPT)[-1])
    assert (over.name, over.augment, under.augment) == ("opencv", "full", "none")


def test_each_kind_divides_a_figure_by_its_own_divisor():
    """``RatioKind.divisor``, the one statement of each kind's pairing: the bench builds its ratios by it and
    the migration names version 3's divisors by it."""
    key = FigureKey("dali-cpu", "int")
    assert RatioKind.AUGMENT_KEPT.divisor(FigureKey("dali-cpu", "int", augment="full")) == key
    assert RatioKind.AUGMENT_KEPT.divisor(key) is None
    assert RatioKind.VS_EXPERT.divisor(FigureKey("dali-cpu", "int", Data.PACKS)) == FigureKey("tf-expert", "int")
    assert RatioKind.VS_EXPERT.divisor(FigureKey("tf-expert", "int", Data.TFRECORD)) == FigureKey("tf-expert", "int")
    assert RatioKind.VS_EXPERT.divisor(FigureKey("tf-expert", "int")) is None
    assert RatioKind.VS_EXPERT.divisor(FigureKey("dali-cpu", "int", augment="full")) is None
    assert RatioKind.BUCKET_VS_LOCAL.divisor(key) == FigureKey("dali-cpu", "int", Data.LOCAL)
    # on TFRecords over files: the original pairs are files (against "tfrecord") or TFRecords (against "files")
    assert RatioKind.TFRECORD_VS_FILES.divisor(FigureKey("dali-cpu", "int", Data.TFRECORD)) == key
    assert RatioKind.TFRECORD_VS_FILES.divisor(key) == FigureKey("dali-cpu", "int", Data.FILES)
    assert RatioKind.TFRECORD_VS_FILES.divisor(FigureKey("dali-cpu", "int", Data.PACKS)) is None


def _v3_key(ratio: Ratio) -> str:
    """How version 3 keyed a ratio: ``"<backend> <labels>"``, with `` <data>`` for the expert's where not the
    original pairs."""
    over = ratio.over
    shown = ratio.kind is RatioKind.VS_EXPERT and over.data is not Data.ORIGINAL
    return f"{over.name} {over.label_mode}" + (f" {over.data}" if shown else "")


def _subject_held(report: Report, warning: BenchWarning):
    """What the report holds of a warning's subject: the figure, the ceiling, the data the expert was left
    out on, or for the run (in the committed reports, a breakdown's warning) the breakdown; None if none."""
    if warning.about is About.FIGURE:
        return report.figure(warning.figure)
    if warning.about is About.CEILING:
        return report.ceilings.get(warning.ceiling)
    if warning.about is About.EXPERT:
        return warning.data
    return report.stages.get(warning.text.split(":")[0].removeprefix("stages of "))


@pytest.mark.parametrize("name", REPORTS)
def test_every_committed_reports_warnings_and_ratios_keep_their_subjects(name):
    """Each committed report (schemas 1-3) read: every warning said as written, about something the report
    holds (a figure, a ceiling, a breakdown); every ratio keyed as it was, with its value, and dividing two
    figures of the report whose medians give that value, paired as its kind says; ``report --data`` keeps
    the warnings and ratios of that data. (That they print as the code before version 4 printed them was
    checked once, on every report and filter, when version 4 came.)"""
    raw = json.loads((RESULTS / name).read_text())
    report = read(RESULTS / name)
    assert [w.line for w in report.warnings] == raw.get("warnings", [])
    for w in report.warnings:
        assert _subject_held(report, w) is not None, w
    old = {(kind.value, key): value for kind in RatioKind for key, value in raw.get(kind.value, {}).items()}
    assert {(q.kind.value, _v3_key(q)): q.value for q in report.ratios} == old and len(report.ratios) == len(old)
    for q in report.ratios:
        over, under = report.divided(q)
        assert abs(over.median / under.median - q.value) <= 5e-4 + 1e-9, q  # (the value rounded to 3 places)
        assert (over.label_mode, under.augment) == (under.label_mode, "none") and q.kind.divisor(q.over) == q.under
        assert over.name == under.name or (q.kind is RatioKind.VS_EXPERT and under.name == "tf-expert")
    for data in DATA:
        shown = report.only([data])
        assert shown.ratios == [q for q in report.ratios if q.over.data is Data(data)]
        assert shown.warnings == [w for w in report.warnings if Data(data) in w.on_data]


def test_a_version_4_report_edited_out_of_shape_is_refused():
    """A warning that names no subject or another than its kind's, a ratio of a kind not known or without
    its divisor: refused when read, as any malformed report."""
    for edit in ({"warnings": [{"about": "figure", "text": "x"}]},
                 {"warnings": [{"about": "run", "ceiling": "cpu_decode_pairs", "text": "x"}]},
                 {"warnings": [{"about": "the weather", "text": "x"}]},
                 {"warnings": ["a text, as version 3 wrote"]},
                 {"ratios": [{"kind": "vs_nothing", "over": {"name": "a", "label_mode": "int"},
                              "under": {"name": "b", "label_mode": "int"}, "value": 1.0}]},
                 {"ratios": [{"kind": "vs_expert", "over": {"name": "a", "label_mode": "int"}, "value": 1.0}]},
                 {"ratios": [{"kind": "vs_expert", "over": {"name": "a", "label_mode": "int"},
                              "under": {"name": "b", "label_mode": "int"}, "value": "fast"}]}):
        with pytest.raises(DataError, match="not a bench report .malformed"):
            Report.from_json({**current().to_json(), **edit})


@pytest.mark.parametrize("field, value", [("median", "fast"), ("median", None), ("rates", [1.0, "x"]),
                                          ("name", 3)])
def test_a_report_edited_into_other_types_is_refused_naming_the_field(field, value, tmp_path):
    """A figure's median edited to a string (or null) passed the reading and ended in a traceback where
    the report is printed; it is refused when read, naming the field."""
    import json

    from daliloader.report import read_report

    raw = json.loads((RESULTS / "vm-2cores-vs-expert-2026-11-27.json").read_text())  # (of schema 3)
    raw["results"][0][field] = value
    (tmp_path / "r.json").write_text(json.dumps(raw))
    with pytest.raises(DataError, match=f"not a bench report .*'{field}' is {value!r}".replace("[", r"\[")):
        read_report(tmp_path / "r.json")
