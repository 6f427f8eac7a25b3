"""Printing, charting and writing the bench's report (daliloader.report), on the committed reports."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from daliloader.bench.record import Report, TrainRow, read
from daliloader.report import (
    MASK_CACHE_LINE,
    chart,
    plot_report,
    print_report,
    read_report,
    share,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: Every committed report that ``daliloader bench --json`` wrote (the others are benchmark scripts').
REPORTS = sorted(p.name for p in RESULTS.glob("*.json") if {"results", "ceilings"} <= set(json.loads(p.read_text())))


def printed(report, width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    print_report(console, report)
    return console.export_text().splitlines()


@pytest.mark.parametrize("name", ["h100-16cores-cuda120-tf-bench.json", "vm-2cores-augment.json"])
def test_the_bench_tables_fit_80_columns_and_mark_noise(name):
    """A committed report (the widest: GPU, prepared data, packs, training; and one with augmentation)
    printed at 80 columns: no line longer, one line per row, a stage cost below zero shown as noisy."""
    report = json.loads((RESULTS / name).read_text())  # its JSON object, as older callers passed it
    lines = printed(report)
    assert max(len(line) for line in lines) <= 80
    for r in report["results"]:  # every row on one line: its median is on a line with its loader's name
        assert any(r["name"] in line and f"{r['median']:.1f}" in line for line in lines), r
    negative = [row for rows in report["stages"].values() for row in rows if row["ms_per_img"] < 0]
    assert not negative or any(line.strip().startswith(negative[0]["stage"]) and "noisy" in line for line in lines)
    assert printed(Report.from_json(report)) == lines  # the record prints as its JSON object did


def test_the_vm_table_is_the_one_the_benchmarks_page_shows():
    """`daliloader report benchmarks/results/vm-2cores-vs-expert-2026-11-27-v2.json --data original` prints the
    main table that docs/benchmarks.md quotes, line for line."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    name = "vm-2cores-vs-expert-2026-11-27-v2.json"
    command = f"$ daliloader report benchmarks/results/{name} --data original\n"
    quoted = page.split(command, 1)[1].split("```", 1)[0].splitlines()
    lines = [line.rstrip() for line in printed(read_report(RESULTS / name, data=["original"]))]
    start = lines.index(quoted[0])
    assert lines[start:start + len(quoted)] == quoted


def test_share_is_judged_again_and_says_noisy_where_there_is_none():
    steady = {"median": 100, "min": 95, "max": 110}
    assert share({**steady, "fraction_of_ceiling": None}) == "noisy"
    assert share({**steady, "fraction_of_ceiling": 0.5}) == "50%"
    assert share({"median": 100, "min": 77, "max": 186, "fraction_of_ceiling": 0.5}) == "noisy"  # an older report's
    figure = read(RESULTS / "vm-2cores.json").results[0]
    assert share(figure) == share(json.loads((RESULTS / "vm-2cores.json").read_text())["results"][0])


def test_each_training_floor_is_named_for_what_it_was():
    """The H100 report's floor was a tf.data-cached batch (an older report), the VM's a batch resident
    on the device; the table's title says which."""
    older = " ".join(" ".join(printed(read(RESULTS / "h100-16cores-cuda120-tf-bench.json"))).split())
    assert "on one tf.data-cached batch (an older report's floor, copied to the device every step)" in older
    current = printed(read(RESULTS / "vm-2cores.json"))
    assert "fed and on one batch resident on the device" in " ".join(" ".join(current).split())
    assert any(re.match(r"\s+dali-cpu\s+1783\.2\s+1678\.0\s+6%", line) for line in current)


def test_the_closing_lines_say_what_augmentation_and_the_container_keep_and_warn():
    augment = printed(read(RESULTS / "vm-2cores-augment.json"), width=200)
    assert "full augmentation keeps 48% of dali-cpu onehot's throughput (same run)" in augment
    records = printed(read(RESULTS / "vm-2cores-tfrecord.json"), width=200)
    assert "dali-cpu onehot on TFRecords: 98% of its throughput on the same pairs as files (same run)" in records
    assert any(line.startswith("warning: tfdata / onehot / original: the warm-up") for line in records)


def test_a_ratio_of_a_noisy_figure_says_so_and_the_mask_cache_is_said_before_the_experts():
    """vm-2cores-vs-expert.json: opencv int spread 41% (122-189), the expert's int figure held still; the
    loaders read the mask cache (its ceilings show it) and the expert the original colour masks."""
    lines = printed(read(RESULTS / "vm-2cores-vs-expert.json"), width=300)
    assert "opencv int: 1.98x the expert's tf.data on the original pairs (same run; noisy: spread 41%)" in lines
    assert "tfdata int: 1.63x the expert's tf.data on the original pairs (same run)" in lines
    cache = lines.index(MASK_CACHE_LINE)
    assert cache == next(i for i, line in enumerate(lines) if "the expert's tf.data" in line) - 1
    records = printed(read(RESULTS / "vm-2cores-tfrecord.json"), width=300)
    assert "tfdata int on TFRecords: 143% of its throughput on the same pairs as files (same run; noisy: spread " \
           "43%)" in records and MASK_CACHE_LINE not in records
    prepared = printed(read_report(RESULTS / "vm-2cores-vs-expert.json", data=["prepared"]), width=300)
    assert MASK_CACHE_LINE not in prepared  # no ratio of the original pairs: nothing read from the cache


def test_the_chart_is_written_from_a_report_or_its_json(tmp_path):
    report = read_report(RESULTS / "h100-16cores-cuda120-tf-bench.json", data=["original"])
    plot_report(report, tmp_path / "sub" / "c.png")
    assert (tmp_path / "sub" / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "sub" / "c.png").stat().st_size > 10_000
    plot_report(json.loads((RESULTS / "vm-2cores.json").read_text()), tmp_path / "v.png")
    assert (tmp_path / "v.png").stat().st_size > 10_000


def test_the_chart_draws_every_ceiling():
    """A line and a legend entry per ceiling, however many (the colours come again in another dash)."""
    import matplotlib.pyplot as plt

    report = read(RESULTS / "h100-16cores-cuda120-tf-bench.json")
    first = next(iter(report.ceilings.values()))
    report.ceilings = {f"ceiling_{k}": replace(first, median=100.0 + k) for k in range(8)}
    fig = chart(report)
    ax = fig.axes[0]
    lines = [line for line in ax.get_lines() if line.get_label().startswith("ceiling: ")]
    assert sorted(line.get_xdata()[0] for line in lines) == [100.0 + k for k in range(8)]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"ceiling: ceiling {k}" for k in range(8)]
    assert len({(line.get_color(), line.get_linestyle()) for line in lines}) == 8  # each its own look
    plt.close(fig)


def test_write_json_writes_a_report_or_a_scripts_dict(tmp_path):
    report = read(RESULTS / "vm-2cores.json")
    report.train["opencv"] = TrainRow(step_ms=1.0, floor_ms=1.0, waiting_share=0.0)
    write_json(report, tmp_path / "a" / "r.json")
    assert Report.from_json(json.loads((tmp_path / "a" / "r.json").read_text())) == report
    write_json({"rows": [1, 2]}, tmp_path / "s.json")  # the benchmark scripts write dicts of their own
    assert json.loads((tmp_path / "s.json").read_text()) == {"rows": [1, 2]}
    assert (tmp_path / "s.json").read_text() == json.dumps({"rows": [1, 2]}, indent=2)


@pytest.mark.parametrize("name", REPORTS)
def test_a_committed_report_written_again_as_records_prints_as_it_did(name):
    """A report of an older schema, read (its warnings and ratios made records), written in the current form
    and read back, prints the same lines, whole and for each data it holds: nothing a line says is lost on
    the way."""
    report = read(RESULTS / name)
    written = json.loads(json.dumps(report.to_json()))
    again = Report.from_json(written)
    assert isinstance(written["ratios"], list) and all(isinstance(w, dict) for w in written["warnings"])
    assert printed(again, width=200) == printed(report, width=200)
    for data in {r.data for r in report.results}:
        assert printed(again.only([data]), width=200) == printed(report.only([data]), width=200)
