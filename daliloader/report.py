"""The bench's report, for people and machines: tables in the terminal (rich), a bar chart (matplotlib),
and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import DataError


def write_json(report: dict, out: Path) -> None:
    """A report (bench, benchmark scripts) as indented JSON, its folder made if needed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))

#: How the report names each data column ("shards" in the JSON is the packs; "tfrecord" and "files": the
#: original pairs in the other container, ``bench --tfrecord``).
DATA_NAMES = {"original": "original", "prepared": "prepared", "shards": "packs", "tfrecord": "tfrecord",
              "files": "files"}


def read_report(path: Path, data=None) -> dict:
    """A report written by ``daliloader bench --json``, keeping only the figures on ``data`` (names of
    :data:`DATA_NAMES`' values: original, prepared, packs, tfrecord, files; None: all), to print or chart it
    again."""
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; pass a report written by `daliloader bench --json`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not a JSON report ({e}); pass a report written by `daliloader bench "
                        "--json`") from None
    if not isinstance(report, dict):  # (JSON may hold a number or a list)
        raise DataError(f"{path}: not a bench report (not a JSON object); pass a report written by `daliloader "
                        "bench --json`")
    missing = [key for key in ("machine", "settings", "results", "ceilings") if key not in report]
    if missing:
        raise DataError(f"{path}: not a bench report (it lacks {', '.join(missing)}); pass a report written by "
                        "`daliloader bench --json`")
    if data is not None:
        wanted = {key for key, name in DATA_NAMES.items() if name in data}
        prepared = bool(wanted & {"prepared", "shards"})
        original = bool(wanted & {"original", "tfrecord", "files"})  # the same bytes: the same ceilings
        report = dict(report, results=[r for r in report["results"] if r.get("data", "original") in wanted],
                      ceilings={k: c for k, c in report["ceilings"].items()  # each with the data it bounds
                                if (prepared if k.endswith("_prepared") else original)})
    return report


#: Short names of the ceilings in the table.
CEILING_NAMES = {"cpu_decode_pairs": "CPU pairs", "cpu_decode_images": "CPU images", "cpu_decode_masks": "CPU masks",
                 "nvjpeg_images": "nvJPEG images"}


def share(r: dict) -> str:
    """A figure's share of its ceiling, or why there is none (judged again here: older reports stored a
    share for figures that are now called noisy)."""
    if r.get("fraction_of_ceiling") is None or _noisy(r):
        return "noisy"
    return f"{100 * r['fraction_of_ceiling']:.0f}%"


def print_report(console, report: dict) -> None:
    """The tables, laid out to fit 80 columns: a figure too noisy to divide by says "noisy" (its share is
    left out), a stage cost below zero (noise between two cuts' windows) too."""
    from rich import box
    from rich.table import Table as RichTable

    def Table(**kw):  # noqa: N802  (no vertical rules: the columns fit 80 characters)
        return RichTable(box=box.SIMPLE_HEAD, **kw)

    m, st = report["machine"], report["settings"]
    title = (f"images/s, batch {st['batch_size']}, {st['image_size'][0]}x{st['image_size'][1]} crops; "
             f"{m['cpu_count']} CPU cores{'; ' + m['gpu'][0].split(',')[0] if m['gpu'] else ''}"
             f"{'; ' + m['dali_build'] if m.get('dali_build') else ''}")
    table = Table(title=title)
    prepared = any(r.get("data", "original") != "original" for r in report["results"])
    augmented = any(r.get("augment", "none") != "none" for r in report["results"])
    for col in (("loader", "labels") + (("data",) if prepared else ()) + (("aug.",) if augmented else ())
                + ("median", "min-max", "share")):
        table.add_column(col, justify="left" if col in ("loader", "labels", "data", "aug.") else "right")
    data_cell = (lambda value: (value,)) if prepared else (lambda value: ())
    augment_cell = (lambda value: (value,)) if augmented else (lambda value: ())
    for key, c in report["ceilings"].items():
        which = "prepared" if key.endswith("_prepared") else "original"
        name = CEILING_NAMES.get(key.removesuffix("_prepared"), key)
        table.add_row(f"[dim]ceiling: {name}[/dim]", "", *data_cell(which), *augment_cell(""),
                      f"{c['median']:.0f}", f"{c['min']:.0f}-{c['max']:.0f}", "noisy" if _noisy(c) else "")
    for r in report["results"]:
        table.add_row(r["name"], r["label_mode"], *data_cell(DATA_NAMES[r.get("data", "original")]),
                      *augment_cell(r.get("augment", "none")), f"{r['median']:.1f}", f"{r['min']:.0f}-{r['max']:.0f}",
                      share(r))
    for name, rows in report.get("stages", {}).items():
        stages = Table(title=f"where time goes: {name}, ms per image", min_width=46)  # the title on one line
        stages.add_column("stage")
        stages.add_column("ms/img", justify="right")
        for row in rows:
            stages.add_row(row["stage"], "noisy" if row["ms_per_img"] < 0 else f"{row['ms_per_img']:.2f}")
        console.print(stages)
    console.print(table)  # the main table last (after the breakdowns), unless --train adds its own
    if "train" in report:
        cached = any("floor_ms" not in row for row in report["train"].values())  # an older report's floor
        train = Table(title="small U-Net: step time, fed and " + ("on one tf.data-cached batch (an older report's "
                                                                  "floor, copied to the device every step)" if cached
                                                                  else "on one batch resident on the device"))
        for col in ("loader", "step ms", "floor ms", "waiting for input"):
            train.add_column(col, justify="left" if col == "loader" else "right")
        for name, row in report["train"].items():
            floor = row.get("floor_ms", row.get("cached_batch_floor_ms"))  # (older reports: a cached batch)
            train.add_row(name, f"{row['step_ms']:.1f}", f"{floor:.1f}",
                          f"{100 * row['waiting_share']:.0f}%")
        console.print(train)
    for key, kept in report.get("augment_kept", {}).items():
        console.print(f"full augmentation keeps {100 * kept:.0f}% of {key}'s throughput (same run)")
    for key, ratio in report.get("tfrecord_vs_files", {}).items():
        console.print(f"{key} on TFRecords: {100 * ratio:.0f}% of its throughput on the same pairs as files (same run)")
    for warning in report.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}")


def _noisy(measurement: dict) -> bool:
    from .bench import noisy

    return noisy(measurement)


def dali_named(machine: dict) -> str:
    """The DALI build a report ran (older reports name only DALI's version)."""
    version = machine.get("versions", {}).get("nvidia.dali", "?")
    return machine.get("dali_build") or f"DALI {version} (build not recorded)"


def plot_report(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    labels = [f"{r['name']} ({r['label_mode']}"
              f"{'' if r.get('data', 'original') == 'original' else ', ' + DATA_NAMES[r['data']]}"
              f"{'' if r.get('augment', 'none') == 'none' else ', augmented'})" for r in results]
    med = [r["median"] for r in results]
    err = [[r["median"] - r["min"] for r in results], [r["max"] - r["median"] for r in results]]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(results) + 2.2))
    bars = ax.barh(labels, med, xerr=err, color=["#c9c9c9" if _noisy(r) else "#4c72b0" for r in results],
                   capsize=3)
    ax.bar_label(bars, labels=[f"{r['median']:.0f}" + (" (noisy)" if _noisy(r) else "") for r in results],
                 padding=4, fontsize=7)
    colors = ("#c44e52", "#dd8452", "#55a868", "#8172b3", "#937860")
    for (key, c), color in zip(report["ceilings"].items(), colors):
        ax.axvline(c["median"], color=color, linestyle="--", label=f"ceiling: {key.replace('_', ' ')}")
    ax.invert_yaxis()
    m, st = report["machine"], report["settings"]
    ax.set_xlabel("images/s (median of repeats; whiskers: min-max; grey: spread over 25%, noisy)")
    dataset = report.get("dataset", {})
    ax.set_title(f"{Path(str(dataset.get('images', ''))).parent.name or 'data'}: {dataset.get('pairs', '?')} pairs, "
                 f"{st['image_size'][0]}x{st['image_size'][1]} crops, batch {st['batch_size']}, labels "
                 f"{'/'.join(st.get('label_modes', []))}\n{m['cpu_count']} CPU cores"
                 f"{', ' + m['gpu'][0].split(',')[0] if m['gpu'] else ', no GPU'}"
                 f", {dali_named(m)}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
