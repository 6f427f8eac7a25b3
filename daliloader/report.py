"""The bench's report, for people and machines: tables in the terminal (rich), a bar chart (matplotlib),
and JSON."""

from __future__ import annotations

import json
from pathlib import Path



def write_json(report: dict, out: Path) -> None:
    """A report (bench, benchmark scripts) as indented JSON, its folder made if needed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))

#: How the report names each data column.
DATA_NAMES = {"original": "original", "prepared": "prepared", "shards": "prepared packs"}


def print_report(console, report: dict) -> None:
    from rich.table import Table

    m, st = report["machine"], report["settings"]
    title = (f"images/s, batch {st['batch_size']}, {st['image_size'][0]}x{st['image_size'][1]} random crops; "
             f"{m['cpu_count']} CPU cores ({m['cpu']}){'; GPU ' + m['gpu'][0] if m['gpu'] else ''}")
    table = Table(title=title)
    prepared = any(r.get("data", "original") != "original" for r in report["results"])
    augmented = any(r.get("augment", "none") != "none" for r in report["results"])
    for col in (("loader", "labels") + (("data",) if prepared else ()) + (("augment",) if augmented else ())
                + ("median", "min-max", "of ceiling")):
        table.add_column(col, justify="left" if col in ("loader", "labels", "data", "augment") else "right")
    data_cell = (lambda value: (value,)) if prepared else (lambda value: ())
    augment_cell = (lambda value: (value,)) if augmented else (lambda value: ())
    for key, c in report["ceilings"].items():
        which = "prepared" if key.endswith("_prepared") else "original"
        table.add_row(f"[dim]ceiling: {key.removesuffix('_prepared').replace('_', ' ')}[/dim]", "", *data_cell(which),
                      *augment_cell(""), f"{c['median']:.1f}", f"{c['min']:.1f}-{c['max']:.1f}", "")
    for r in report["results"]:
        table.add_row(r["name"], r["label_mode"], *data_cell(DATA_NAMES[r.get("data", "original")]),
                      *augment_cell(r.get("augment", "none")), f"{r['median']:.1f}", f"{r['min']:.1f}-{r['max']:.1f}",
                      f"{100 * r['fraction_of_ceiling']:.0f}%")
    for name, rows in report.get("stages", {}).items():
        stages = Table(title=f"where time goes: {name}, ms per image")
        stages.add_column("stage")
        stages.add_column("ms/img", justify="right")
        for row in rows:
            stages.add_row(row["stage"], f"{row['ms_per_img']:.2f}")
        console.print(stages)
    console.print(table)  # the main table last (after the breakdowns), unless --train adds its own
    if "train" in report:
        train = Table(title="small U-Net training: step time per loader vs one batch resident on the device")
        for col in ("loader", "step ms", "floor ms", "waiting for input"):
            train.add_column(col, justify="left" if col == "loader" else "right")
        for name, row in report["train"].items():
            train.add_row(name, f"{row['step_ms']:.1f}", f"{row['floor_ms']:.1f}",
                          f"{100 * row['waiting_share']:.0f}%")
        console.print(train)
    for key, kept in report.get("augment_kept", {}).items():
        console.print(f"full augmentation keeps {100 * kept:.0f}% of {key}'s throughput (same run)")
    for warning in report.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}")


def plot_report(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    labels = [f"{r['name']} ({r['label_mode']}"
              f"{'' if r.get('data', 'original') == 'original' else ', ' + DATA_NAMES[r['data']]})" for r in results]
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
