"""The bench's report, for people and machines: tables in the terminal (rich), a bar chart (matplotlib),
and JSON.

Every function here takes a :class:`~daliloader.bench.record.Report` (or its JSON object, of any
version, read through :func:`daliloader.bench.record.migrate`); :func:`read_report` reads one from a file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .bench.record import PREPARED_KEY, Data, FigureKey, Ratio, RatioKind, Report, on_prepared, read
from .bench.timing import NOISY, noisy, spread

#: Short names of the ceilings in the table.
CEILING_NAMES = {"cpu_decode_pairs": "CPU pairs", "cpu_decode_images": "CPU images", "cpu_decode_masks": "CPU masks",
                 "nvjpeg_images": "nvJPEG images", "cpu_decode_pairs_cached": "CPU pairs, masks from the cache",
                 "cpu_decode_masks_cached": "CPU masks from the cache"}
#: The chart's ceiling lines, in the order of the report's ceilings: these colours, dashed, then again
#: in the next dash.
CEILING_COLOURS = ("#c44e52", "#dd8452", "#55a868", "#8172b3", "#937860")
CEILING_DASHES = ("--", ":", "-.")


def write_json(report, out: Path) -> None:
    """A report (a bench :class:`~daliloader.bench.record.Report`, or a benchmark script's dict) as indented
    JSON, its folder made if needed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report.to_json() if isinstance(report, Report) else report, indent=2))


def read_report(path: Path, data=None) -> Report:
    """A report written by ``daliloader bench --json`` (of any version), keeping only the figures on
    ``data`` (names of :data:`~daliloader.bench.record.DATA`: original, prepared, packs, tfrecord, files,
    local; None: all), to print or chart it again. DataError naming the file if it holds no report."""
    return read(path).only(data)


def as_report(report) -> Report:
    """``report`` as a :class:`~daliloader.bench.record.Report` (a JSON object is migrated and read)."""
    return report if isinstance(report, Report) else Report.from_json(report)


def share(r) -> str:
    """A figure's share of its ceiling, or why there is none (judged again here: older reports stored a
    share for figures that are now called noisy). ``r``: a figure, or its JSON object."""
    fraction = r.get("fraction_of_ceiling") if isinstance(r, Mapping) else r.fraction_of_ceiling
    if fraction is None or noisy(r):
        return "noisy"
    return f"{100 * fraction:.0f}%"


# ---------------------------------------------------------------- tables
def _table(**kw):
    """A rich table without vertical rules: the columns fit 80 characters."""
    from rich import box
    from rich.table import Table

    return Table(box=box.SIMPLE_HEAD, **kw)


def print_report(console, report) -> None:
    """The tables, laid out to fit 80 columns: the stage breakdowns, the main table (ceilings and
    figures), the training table, then what augmentation and the other container keep and the warnings.
    A figure too noisy to divide by says "noisy" (its share is left out), a stage cost below zero (noise
    between two cuts' windows) too."""
    report = as_report(report)
    for name, rows in report.stages.items():
        console.print(_stage_table(name, rows))
    console.print(_main_table(report))  # the main table last (after the breakdowns), unless --train adds its own
    if report.train is not None:
        console.print(_train_table(report.train))
    for line in _closing_lines(report):
        console.print(line)


def _title(report: Report) -> str:
    """The main table's title: the settings and the machine (its GPU and DALI build where known)."""
    m, st = report.machine, report.settings
    return (f"images/s, batch {st.batch_size}, {st.image_size[0]}x{st.image_size[1]} crops; "
            f"{m.cpu_count} CPU cores{'; ' + m.gpu[0].split(',')[0] if m.gpu else ''}"
            f"{'; ' + m.dali_build if m.dali_build else ''}")


def _main_table(report: Report):
    """Ceilings, then figures: loader, labels, data (where not all original), augmentation (where any),
    median, min-max and share, with the letter of the ceiling it is a share of (adjacent figures may be
    bound by different ceilings: the references by the pairs as they are, the loaders by the pairs with
    the masks from the mask cache); a report older than these letters shows none."""
    with_data = any(r.data is not Data.ORIGINAL for r in report.results)
    with_augment = any(r.augment != "none" for r in report.results)
    table = _table(title=_title(report))
    for col in (("loader", "labels") + (("data",) if with_data else ()) + (("aug.",) if with_augment else ())
                + ("median", "min-max", "share")):
        table.add_column(col, justify="left" if col in ("loader", "labels", "data", "aug.") else "right")

    def row(loader, labels, data, augment, *figures):
        table.add_row(loader, labels, *((data,) if with_data else ()), *((augment,) if with_augment else ()),
                      *figures)

    letters = _ceiling_letters(report)
    for key, c in report.ceilings.items():
        name = CEILING_NAMES.get(key.removesuffix(PREPARED_KEY), key)
        data = Data.PREPARED if on_prepared(key) else Data.ORIGINAL
        row(f"[dim]ceiling{letters.get(key, '')}: {name}[/dim]", "", str(data), "", f"{c.median:.0f}",
            f"{c.min:.0f}-{c.max:.0f}", "noisy" if noisy(c) else "")
    for r in report.results:
        row(r.name, r.label_mode, str(r.data), r.augment, f"{r.median:.1f}", f"{r.min:.0f}-{r.max:.0f}",
            share(r) + letters.get(r.ceiling, ""))
    return table


def _ceiling_letters(report: Report) -> dict[str, str]:
    """Each ceiling's letter, `` (a)``, `` (b)``..., in the order of the report's ceilings; none where no
    figure names its ceiling (a report older than ``Figure.ceiling``)."""
    if all(r.ceiling is None for r in report.results):
        return {}
    return {key: f" ({chr(ord('a') + i)})" for i, key in enumerate(report.ceilings)}


def _stage_table(name: str, rows):
    """A breakdown's table: ms per image of each stage, "noisy" below zero."""
    stages = _table(title=f"where time goes: {name}, ms per image", min_width=46)  # the title on one line
    stages.add_column("stage")
    stages.add_column("ms/img", justify="right")
    for row in rows:
        stages.add_row(row.stage, "noisy" if row.ms_per_img < 0 else f"{row.ms_per_img:.2f}")
    return stages


def _train_table(train: dict):
    """The training table, titled for the floor its rows hold."""
    cached = any(row.floor_cached for row in train.values())  # an older report's floor
    table = _table(title="small U-Net: step time, fed and " + (
        "on one tf.data-cached batch (an older report's floor, copied to the device every step)" if cached
        else "on one batch resident on the device"))
    for col in ("loader", "step ms", "floor ms", "waiting for input"):
        table.add_column(col, justify="left" if col == "loader" else "right")
    for name, row in train.items():
        table.add_row(name, f"{row.step_ms:.1f}", f"{row.floor_ms:.1f}", f"{100 * row.waiting_share:.0f}%")
    return table


def _named(key: FigureKey, data: bool = False) -> str:
    """A figure as a ratio's line names it: ``<backend> <labels>``, then its data where ``data`` asks and it
    is not the original pairs."""
    return f"{key.name} {key.label_mode}" + (f" {key.data}" if data and key.data is not Data.ORIGINAL else "")


#: How each kind of ratio (:class:`~daliloader.bench.record.RatioKind`) is said, from the ratio; the closing
#: lines add "(same run)", with a mark where it divides a noisy figure (:func:`noise_mark`).
RATIO_LINES = {
    RatioKind.AUGMENT_KEPT: lambda q: f"full augmentation keeps {100 * q.value:.0f}% of {_named(q.over)}'s throughput",
    RatioKind.TFRECORD_VS_FILES: lambda q: f"{_named(q.over)} on TFRecords: {100 * q.value:.0f}% of its throughput on "
                                           "the same pairs as files",
    RatioKind.BUCKET_VS_LOCAL: lambda q: f"{_named(q.over)} from the bucket: {100 * q.value:.0f}% of its throughput on "
                                         "the same pairs copied to the local disk",
    RatioKind.VS_EXPERT: lambda q: f"{_named(q.over, data=True)}: {q.value:.2f}x the expert's tf.data on the original "
                                   "pairs",
}
#: Said before the ratios to the expert where the loaders read the mask cache.
MASK_CACHE_LINE = ("ratios to the expert: on the original pairs the loaders read the masks' class indices from "
                   "daliloader's mask cache (made once, before timing); the expert decodes the original masks every "
                   "epoch")


def _closing_lines(report: Report) -> list[str]:
    """The ratios (what augmentation, the other container and the bucket keep; each figure over the
    expert's), each marked where a figure it divides is noisy (:func:`noise_mark`), with a line before the
    expert's where the loaders read the mask cache; the memory; then the warnings."""
    lines = []
    for kind, said in RATIO_LINES.items():
        ratios = report.ratios_of(kind)
        if kind is RatioKind.VS_EXPERT and report.settings.mask_cache and any(
                q.over.data is Data.ORIGINAL for q in ratios):
            lines.append(MASK_CACHE_LINE)
        lines += [f"{said(q)} (same run{noise_mark(report, q)})" for q in ratios]
    lines += [f"{key}: peak memory {mb:.0f} MB (alone in a process, above TensorFlow's)"
              for key, mb in (report.memory_mb or {}).items()]
    return lines + [f"[yellow]warning:[/yellow] {warning.line}" for warning in report.warnings]


def noise_mark(report: Report, ratio: Ratio) -> str:
    """``"; noisy: spread 45%"`` for a ratio of which either figure is too noisy to divide by
    (:func:`~daliloader.bench.timing.noisy`), with the wider spread of the two; "" otherwise."""
    spreads = [spread(f) for f in report.divided(ratio) if f is not None and noisy(f)]
    return f"; noisy: spread {max(spreads):.0%}" if spreads else ""


# ---------------------------------------------------------------- chart
def dali_named(machine) -> str:
    """The DALI build a report ran (older reports name only DALI's version)."""
    version = machine.versions.get("nvidia.dali", "?")
    return machine.dali_build or f"DALI {version} (build not recorded)"


def _bar_label(r) -> str:
    return (f"{r.name} ({r.label_mode}{'' if r.data == 'original' else ', ' + r.data}"
            f"{'' if r.augment == 'none' else ', augmented'})")


def _chart_title(report: Report) -> str:
    m, st, dataset = report.machine, report.settings, report.dataset
    return (f"{Path(str(dataset.images or '')).parent.name or 'data'}: "
            f"{'?' if dataset.pairs is None else dataset.pairs} pairs, "
            f"{st.image_size[0]}x{st.image_size[1]} crops, batch {st.batch_size}, labels "
            f"{'/'.join(st.label_modes)}\n{m.cpu_count} CPU cores"
            f"{', ' + m.gpu[0].split(',')[0] if m.gpu else ', no GPU'}"
            f", {dali_named(m)}")


def plot_report(report, out: Path) -> None:
    """A bar chart PNG of the figures (whiskers: min-max; grey: noisy) with the ceilings as lines
    (:func:`chart`)."""
    import matplotlib.pyplot as plt

    fig = chart(report)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def chart(report):
    """The matplotlib figure of :func:`plot_report`: a bar per figure, a line per ceiling (every one: past
    the colours of :data:`CEILING_COLOURS`, they come again in another dash, :func:`ceiling_style`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = as_report(report)
    results = report.results
    err = [[r.median - r.min for r in results], [r.max - r.median for r in results]]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(results) + 2.2))
    bars = ax.barh([_bar_label(r) for r in results], [r.median for r in results], xerr=err,
                   color=["#c9c9c9" if noisy(r) else "#4c72b0" for r in results], capsize=3)
    ax.bar_label(bars, labels=[f"{r.median:.0f}" + (" (noisy)" if noisy(r) else "") for r in results],
                 padding=4, fontsize=7)
    for k, (key, c) in enumerate(report.ceilings.items()):
        color, linestyle = ceiling_style(k)
        ax.axvline(c.median, color=color, linestyle=linestyle, label=f"ceiling: {key.replace('_', ' ')}")
    ax.invert_yaxis()
    ax.set_xlabel(f"images/s (median of repeats; whiskers: min-max; grey: spread over {NOISY:.0%}, noisy)")
    ax.set_title(_chart_title(report), fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def ceiling_style(k: int) -> tuple[str, str]:
    """The colour and dash of the chart's ``k``-th ceiling line: :data:`CEILING_COLOURS` in turn, each
    round of them in the next of ``CEILING_DASHES``."""
    return CEILING_COLOURS[k % len(CEILING_COLOURS)], CEILING_DASHES[k // len(CEILING_COLOURS) % len(CEILING_DASHES)]
