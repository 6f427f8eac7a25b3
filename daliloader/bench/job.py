"""The job behind ``daliloader bench``: every figure the settings ask for, measured in one run, into one
:class:`~daliloader.bench.record.Report`.

The order is fixed: the decode ceilings; the prepared copy and its ceilings (``--prepared``); the same
pairs in the other container (``--tfrecord``); every figure (a backend on the original pairs and on
them in the other container timed in turn, every other figure alone); the stage breakdowns; training
(``--train``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

from .. import backends, maskcache
from ..backends import Need
from ..data import Container, SegmentationData
from ..errors import SpecError
from ..parallel import cores
from ..plan import Plan
from .ceilings import CPU_DECODES, cpu_decode_ceiling, nvjpeg_ceiling
from .copies import dataset_place, local_copy, other_container, prepared_copy, quiet
from .machine import machine_info
from .record import (
    About,
    BenchWarning,
    Ceiling,
    Data,
    Dataset,
    Figure,
    FigureKey,
    Machine,
    Measured,
    Ratio,
    RatioKind,
    Report,
    RunSettings,
    ceiling_key,
    plain,
)
from .sources import (
    BENCH_BACKENDS,
    EXPERT,
    REFERENCES,
    backend_stream,
    bench_plan,
    decodes_windows,
    has_tensorflow,
    lacks,
    on_gpu,
    product,
    reads_packs,
    reference_data,
    vetted,
    via,
)
from .stages import dali_stages, opencv_stages
from .timing import Rates, epoch_batches, least_warm_up, measure_in_turn, noisy, timing_warnings
from .training import train_bound

#: ``--augment``: every photometric option, rotation and zoom on (a typical training recipe).
AUGMENT = dict(scale=(0.5, 2.0), rotate=15, brightness=0.3, contrast=0.3, saturation=0.3, hue=10)


@dataclass(frozen=True)
class Settings:
    """What ``daliloader bench`` measures (its command-line options)."""

    backends: tuple[str, ...] | None = None  # None: every backend this machine can run
    batch_size: int = 8
    image_size: int | tuple[int, int] = 512  # a side (square crops) or (height, width)
    label_modes: tuple[str, ...] = ("onehot",)
    seconds: float = 3.0
    repeats: int = 3
    workers: int | None = None  # opencv's threads (None: all cores); the ceilings use all cores
    stages: bool = True
    train: bool = False
    train_steps: int = 8
    prepared: str | None = None  # a folder for the prepared copy, "cache" for one in the cache, or None
    augment: bool = False  # also measure each backend with AUGMENT on
    tfrecord: bool = False  # also measure the same pairs in the other container (TFRecords, or files)
    memory: bool = False  # also measure each loader's peak memory, alone in a process

    def __post_init__(self):
        """Each backend and label mode once, in the order first given (``opencv,opencv`` is ``opencv``:
        one name given twice would be measured twice, as two rows)."""
        if self.backends is not None:
            object.__setattr__(self, "backends", tuple(dict.fromkeys(self.backends)))
        object.__setattr__(self, "label_modes", tuple(dict.fromkeys(self.label_modes)))

    @property
    def crop_size(self) -> tuple[int, int]:
        """The crops' (height, width)."""
        return (self.image_size,) * 2 if isinstance(self.image_size, int) else tuple(self.image_size)


@dataclass(frozen=True)
class Cell:
    """One figure of the bench: a backend on some data (which: original, prepared, packs, tfrecord,
    files, local), with labels and augmentation, and the plan it is built from."""

    which: Data
    name: str
    mode: str
    augment: str
    plan: Plan

    @property
    def key(self) -> FigureKey:
        """What names the figure this cell measures."""
        return FigureKey(self.name, self.mode, self.which, self.augment)

    @property
    def what(self) -> str:
        """How the figure is named as it is measured (as in its warnings: ``FigureKey.what``)."""
        return self.key.what

    @property
    def bounds(self) -> list[str]:
        """The keys of the ceilings that bound this figure: the CPU's pair decode (of the prepared copy
        for its data), or for a GPU backend nvJPEG or the masks, whichever binds."""
        cached = self.plan.data.mask_cache is not None and self.name not in REFERENCES  # (they read the masks)
        if on_gpu(self.name):
            return ["nvjpeg_images", ceiling_key("cpu_decode_masks", self.which, cached)]
        return [ceiling_key("cpu_decode_pairs", self.which, cached)]


def cell_groups(datasets: dict, names: list[str], settings: Settings) -> list[list[Cell]]:
    """Every figure to measure, in groups measured together, window by window
    (:func:`~daliloader.bench.timing.measure_in_turn`): every figure of one label mode without
    augmentation forms one group (every backend and the expert, on every data), so that their ratios
    (to the expert, between containers) come from windows taken in turn; each augmented figure is a
    group of its own. Packs are read by DALI's webdataset reader only; the references (the expert, the
    naive pipeline) read the user's own containers only."""
    groups: dict[tuple, list[Cell]] = {}
    for which, source in datasets.items():
        for name in (b for b in names if measured_on(b, which)):
            for mode, augment in itertools.product(settings.label_modes, augments(settings, which, name)):
                plan = bench_plan(source, settings.batch_size, settings.crop_size, mode,
                                  **(AUGMENT if augment == "full" else {}))
                key = (mode, augment) if augment == "none" else (which, name, mode, augment)
                groups.setdefault(key, []).append(Cell(which, name, mode, augment, plan))
    return list(groups.values())


def measured_on(name: str, which: Data) -> bool:
    """Whether backend ``name`` is measured on the data ``which``: packs by DALI's webdataset reader only,
    the prepared copy by the backends only (the references read what a user has: files or TFRecords)."""
    if which is Data.PACKS:
        return reads_packs(name)
    return not which.prepared or name not in REFERENCES


def augments(settings: Settings, which: Data, name: str) -> tuple[str, ...]:
    """How a backend is measured on some data: as is ("none") and, with ``--augment``, on the original
    pairs, with :data:`AUGMENT` ("full"); the references never augment."""
    return ("none", "full") if settings.augment and which is Data.ORIGINAL and name not in REFERENCES else ("none",)


def figure(cell: Cell, rates: Rates, ceilings: dict[str, Ceiling], warned: list[BenchWarning]) -> Figure:
    """A figure of the report: the rates and their spread, and its share of the ceiling that binds it
    (the lowest of its bounds), read only where both figures hold still. A backend that decodes only
    each photo's crop window may pass that ceiling of whole pictures decoded: its share is then above
    1, as measured; any other figure above its ceiling has no share, and adds a warning to ``warned``."""
    summary = Measured.summary(rates)
    figure_noisy = noisy(summary)
    ceiling_noisy = any(noisy(ceilings[k]) for k in cell.bounds)
    bound = min(cell.bounds, key=lambda k: ceilings[k].median)
    share = summary["median"] / ceilings[bound].median
    beyond = share > 1 and not decodes_windows(cell.name)
    if beyond and not (figure_noisy or ceiling_noisy):
        warned.append(BenchWarning(about=About.FIGURE, figure=cell.key, text=(
            f"{share:.0%} of its ceiling, which is then no ceiling (the ceiling ran while the machine was busier?); "
            "raise --seconds or --repeats")))
    return Figure(name=cell.name, label_mode=cell.mode, **summary, data=cell.which, via=via(cell.name),
                  augment=cell.augment, noisy=figure_noisy, ceiling=bound,
                  fraction_of_ceiling=None if figure_noisy or ceiling_noisy or beyond else round(share, 3))


def ratios(kind: RatioKind, results: list[Figure]) -> list[Ratio]:
    """The run's ratios of ``kind``, in the order of its figures: each figure over the figure of the same run
    that ``kind`` divides it by (``RatioKind.divisor``), where the run has that one."""
    measured = {r.key: r for r in results}
    return [Ratio.between(kind, r, measured[under]) for r in results if (under := kind.divisor(r.key)) in measured]


def timing_doubts(rates: Rates, about: About, **subject) -> list[BenchWarning]:
    """What makes a measurement doubtful (:func:`~.timing.timing_warnings`), as warnings ``about`` a figure or
    a ceiling, named by ``subject`` (``figure=`` or ``ceiling=``)."""
    return [BenchWarning(about=about, **subject, text=text) for text in timing_warnings(rates)]


def stage_warnings(stages: dict) -> list[BenchWarning]:
    """A warning per breakdown with a stage cost below zero (noise between the cuts' windows), about the run
    (its text names the breakdown)."""
    found = []
    for name, rows in stages.items():
        negative = [row.stage for row in rows if row.ms_per_img < 0]
        if negative:
            found.append(BenchWarning(about=About.RUN, text=(
                f"stages of {name}: {', '.join(negative)} came out below zero, which is noise between the cuts' "
                "windows; raise --seconds for a breakdown to read")))
    return found


def duration(seconds: float) -> str:
    """Seconds as said to the user: whole seconds from 10 on, else two significant digits (0.4, 2.5)."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


def batch_within(settings: Settings, pairs: int, say) -> Settings:
    """``settings``, with the batch size lowered to ``pairs`` where the dataset holds fewer pairs than
    a batch, so that a tiny dataset is measured on batches of all its pairs instead of refused; says so
    in one line (the report records the batch size measured)."""
    if settings.batch_size <= pairs:
        return settings
    say(f"batch size {pairs} instead of {settings.batch_size}: the dataset holds only {pairs} pairs")
    return replace(settings, batch_size=pairs)


def choose_backends(settings: Settings) -> list[str]:
    """The backends to measure: those asked for, or every one this machine can run; refuses what it cannot."""
    chosen = list(settings.backends or [b for b in BENCH_BACKENDS if product(b) is not None])
    for name in chosen:
        if product(name) is None:
            lacking = lacks(name)
            how = ("dali-cpu runs the same graph on the CPU" if Need.GPU in lacking else
                   "`make install` installs DALI, TensorFlow, Keras and DALI's TF plugin")
            raise SpecError(f"--backends: {name} needs {' and '.join(n.words for n in lacking) or 'what it needs'}, "
                            f"which this machine lacks ({how})")
    if settings.train and not has_tensorflow():
        raise SpecError("--train needs TensorFlow, Keras and DALI's TF plugin (`make install`)")
    return chosen


def unread_formats(name: str, data: SegmentationData) -> str | None:
    """Why backend ``name`` is left out of a bench of ``data`` by default, as the report's warning: its
    decoders do not read a format of the data's files (by their names). None where they read them all.
    The references decode with TensorFlow's ops, as tfdata does."""
    formats = backends.BACKENDS[name].formats if name in backends.BACKENDS else backends.TF_FORMATS
    unread = backends.unread_format(formats, (*data.images, *data.masks))
    if unread is None:
        return None
    return (f"{name}: not measured: its decoders do not read {unread[0]} ({unread[1]}); asked for by --backends, "
            "it stops at that file")


class Job:
    """One bench run: the settings resolved, the data measured (by :class:`~.record.Data`), and the
    report it fills. ``status(what, fn)`` runs ``fn`` while showing ``what``; ``say`` prints a line."""

    def __init__(self, data: SegmentationData, settings: Settings, status, say):
        settings = batch_within(settings, len(data), say)
        self.data, self.settings, self.status, self.say = data, settings, status, say
        self.names = choose_backends(settings)
        # (a backend asked for by name is refused at the first file it cannot read, naming it)
        left_out = {} if settings.backends is not None else {
            name: why for name in self.names if (why := unread_formats(name, data)) is not None}
        self.names = [name for name in self.names if name not in left_out]
        for why in left_out.values():
            say(why)
        self.plan()  # settings the data cannot take fail here, before anything is measured
        if not has_tensorflow():
            say("TensorFlow is not installed: DALI backends are timed through pipeline.run, opencv without Keras")
        self.gpu = backends.dali_gpu_count() > 0
        # the ceilings decode on every core, as DALI's threads and tf.data's AUTOTUNE do: a bound of
        # them all; --workers sets opencv's threads (and the vetting's), which it then has, not the bound
        self.cores = cores()
        self.workers = settings.workers or self.cores
        self.datasets = {Data.ORIGINAL: data}
        self.guards: dict = {}  # the references' guards, by data (:meth:`guard`)
        place = dataset_place(data)
        self.report = Report(
            machine=Machine(**machine_info()), started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            dataset=Dataset(images=place, pairs=len(data), classes=data.classes.num_classes),
            settings=RunSettings(batch_size=settings.batch_size, image_size=list(settings.crop_size),
                                 label_modes=list(settings.label_modes), seconds=settings.seconds,
                                 repeats=settings.repeats, workers=self.workers, backends=self.names,
                                 augment=plain(AUGMENT) if settings.augment else None,
                                 mask_cache=maskcache.wanted(data)),
            warnings=[BenchWarning(about=About.RUN, text=why) for why in left_out.values()])

    def plan(self) -> Plan:
        """The plan of the stage breakdowns and training: the original pairs, the first labels."""
        s = self.settings
        return bench_plan(self.data, s.batch_size, s.crop_size, s.label_modes[0])

    def ceiling(self, key: str, unit: str, measured) -> None:
        """Measure a ceiling (``measured()`` gives its rates) into the report under ``key``
        (:func:`~.record.ceiling_key`)."""
        rates = self.status(f"ceiling: {key.replace('_', ' ')}", measured)
        self.report.warnings.extend(timing_doubts(rates, about=About.CEILING, ceiling=key))
        self.report.ceilings[key] = Ceiling.measured(key, rates, unit)

    def ceilings(self) -> None:
        """The CPU decode ceilings of the pairs, images and masks, and nvJPEG's with a GPU (of data in a
        bucket, on its local copy: a ceiling of decoding, not of fetching). The pairs are vetted first, as
        the loaders vet each pair they read: a bad file stops the bench naming it (the user's file, not
        the mask cache's entry that it left out), before any decoder reads it."""
        s, decoded = self.settings, self.datasets.get(Data.LOCAL, self.data)
        original = reference_data(self.plan())  # the user's own pairs (the references read them, vetted so)
        self.guards[Data.ORIGINAL] = self.status(f"vetting the {len(original)} pairs",
                                                 partial(vetted, original, self.workers))
        for what in CPU_DECODES:
            self.ceiling(ceiling_key(f"cpu_decode_{what}"), f"{what}/s",
                         partial(cpu_decode_ceiling, decoded, self.cores, s.seconds, s.repeats, what))
        if self.gpu:
            self.ceiling(ceiling_key("nvjpeg_images"), "images/s",
                         partial(nvjpeg_ceiling, decoded, s.batch_size, s.seconds, s.repeats))
        if maskcache.wanted(decoded):  # the backends read the masks' class indices from the mask cache
            cached = self.status("the mask cache", partial(maskcache.MaskCache.made_for, decoded,
                                                                maskcache.with_gpu_form(decoded, self.gpu))).view()
            for what in ("pairs", "masks") if self.gpu else ("pairs",):
                self.ceiling(ceiling_key(f"cpu_decode_{what}", cached=True), f"{what}/s",
                             partial(cpu_decode_ceiling, cached, self.cores, s.seconds, s.repeats, what))

    def prepared(self) -> None:
        """``--prepared``: the prepared copy (made if needed), its packs, and its decode ceilings."""
        from ..manifest import load_manifest

        s = self.settings
        out = prepared_copy(self.data, s.prepared, self.status)
        self.report.dataset.prepared = str(out)
        self.datasets[Data.PREPARED] = SegmentationData.from_prepared(out)
        if load_manifest(out).packs:
            self.datasets[Data.PACKS] = SegmentationData.from_prepared(out, packs=True)
        else:
            self.say(f"{out} has no packs (`daliloader prepare --packs N` writes them): not measured")
        for what in ("pairs", "masks") if self.gpu else ("pairs",):  # masks: what binds dali-gpu next to nvJPEG
            self.ceiling(ceiling_key(f"cpu_decode_{what}", Data.PREPARED), f"{what}/s", partial(
                cpu_decode_ceiling, self.datasets[Data.PREPARED], self.cores, s.seconds, s.repeats, what))

    def other_container(self) -> None:
        """``--tfrecord``: the same pairs in the other container (made once in the cache)."""
        from ..parts import part_file

        which, other = other_container(self.data, self.status)
        self.datasets[which] = other
        setattr(self.report.dataset, which.value, str(Path(part_file(other.images[0])).parent))

    def local_copy(self) -> None:
        """Data in a bucket: the same pairs copied once to the local disk, measured beside it."""
        from ..parts import part_file

        self.datasets[Data.LOCAL] = local_copy(self.data, self.status)
        self.report.dataset.local = str(Path(part_file(self.datasets[Data.LOCAL].images[0])).parent.parent)

    def figures(self) -> None:
        """Every figure, group by group, each said as it is measured; then the ratios between them that the
        run asked for (what augmentation, the other container and the bucket keep; each figure over the
        expert's), in the order of :class:`~.record.RatioKind`."""
        s = self.settings
        groups = [g for g in map(self.runnable, cell_groups(self.datasets, self.names, s)) if g]
        count = sum(map(len, groups))
        least = s.repeats * s.seconds + least_warm_up(s.seconds)  # and the warm-up epoch
        windows = f"{s.repeats} window{'s' * (s.repeats != 1)} of {s.seconds:g} s"
        self.say(f"measuring {count} figure{'s' * (count != 1)}, each {windows} after a warm-up epoch and at least "
                 f"two shorter windows: {duration(count * least)} s or more")
        for group in groups:
            for cell, rates in zip(group, self.measure(group)):
                self.report.warnings.extend(timing_doubts(rates, about=About.FIGURE, figure=cell.key))
                self.report.results.append(figure(cell, rates, self.report.ceilings, self.report.warnings))
                self.say(f"  {len(self.report.results)}/{count} {cell.what}: {self.report.results[-1].median:.1f} "
                         "images/s")
        asked = {RatioKind.AUGMENT_KEPT: s.augment, RatioKind.TFRECORD_VS_FILES: s.tfrecord,
                 RatioKind.BUCKET_VS_LOCAL: Data.LOCAL in self.datasets, RatioKind.VS_EXPERT: EXPERT in self.names}
        self.report.ratios = [q for kind in RatioKind if asked[kind] for q in ratios(kind, self.report.results)]

    def runnable(self, group: list[Cell]) -> list[Cell]:
        """The cells of a group that can run: the expert's pipeline is left out on data its ``random_crop``
        or its single decoder cannot take (:func:`daliloader.bench.expert.refuses`), with one warning per
        data saying why."""
        from .expert import refuses

        kept = []
        for cell in group:
            why = refuses(cell.plan.data, cell.plan) if cell.name == EXPERT else None
            if why is None:
                kept.append(cell)
            elif not any(w.about is About.EXPERT and w.data is cell.which for w in self.report.warnings):
                self.report.warnings.append(BenchWarning(about=About.EXPERT, data=cell.which,
                                                         text=f"not measured: {why}"))
        return kept

    def measure(self, group: list[Cell]) -> list[Rates]:
        """The rates of a group's figures, round by round (:func:`~.timing.measure_in_turn`): each stream
        opened for its window and closed after it (a generator: that stops its workers and drops its
        pipeline); the references' pairs vetted first (:meth:`guard`)."""
        s, first = self.settings, group[0].plan
        sources = [partial(backend_stream, c.name, c.plan, self.workers, self.guard(c)) for c in group]
        return self.status(" + ".join(c.what for c in group), partial(
            measure_in_turn, sources, first.batch_size, s.seconds, s.repeats,
            epoch_batches(len(first.data), first.batch_size)))

    def guard(self, cell: Cell):
        """For a reference, the guard of its data, which vetted every pair once (``sources.vetted``):
        the references read the files with TensorFlow's ops, which would fail on a bad file naming none,
        where the loaders vet each pair they read. None for a loader."""
        if cell.name not in REFERENCES:
            return None
        if cell.which not in self.guards:
            data = reference_data(cell.plan)
            self.guards[cell.which] = self.status(f"vetting the {len(data)} pairs the references read", partial(
                vetted, data, self.workers))
        return self.guards[cell.which]

    def stages(self) -> None:
        """The DALI graphs' stage breakdowns (the GPU's, with one, then the CPU's) and OpenCV's."""
        s, plan, stages = self.settings, self.plan(), self.report.stages
        for device in (["gpu"] if self.gpu else []) + ["cpu"]:
            stages[f"dali-{device}"] = self.status(f"dali-{device} stages", partial(
                dali_stages, plan, device, s.seconds / 2, s.repeats))
        stages["opencv (1 thread)"] = self.status("opencv stages", partial(opencv_stages, plan))
        self.report.warnings.extend(stage_warnings(stages))

    def memory(self) -> None:
        """``--memory``: each loader's peak memory on the original pairs, per label mode, alone in a process
        (:mod:`.memory`)."""
        from .memory import Job as MemoryJob
        from .memory import peak_mb

        s, found = self.settings, {}
        for name, mode in itertools.product(self.names, s.label_modes):
            job = MemoryJob(self.data, name, s.batch_size, s.crop_size, mode, self.workers)
            found[f"{name} {mode}"] = self.status(f"memory of {name} ({mode})", partial(peak_mb, job))
        self.report.memory_mb = found

    def train(self) -> None:
        """``--train``: the training step times of every backend but the baseline."""
        trained = [b for b in self.names if b not in REFERENCES]
        self.report.train = self.status("training step times", partial(
            train_bound, self.plan(), trained, self.settings.train_steps, self.workers))


def run(data: SegmentationData, settings: Settings, status=None, say=print) -> Report:
    """Measure everything ``settings`` asks for; returns the report (machine, settings, ceilings, results,
    stages, training). ``status(what, fn)`` runs ``fn`` while showing ``what``; ``say`` prints a line:
    a note, the number of figures, and each figure as it is measured."""
    job = Job(data, settings, status or quiet, say)
    if data.container is Container.OBJECTS:
        job.local_copy()
    job.ceilings()
    if settings.prepared is not None:
        job.prepared()
    if settings.tfrecord:
        job.other_container()
    job.figures()
    if settings.stages:
        job.stages()
    if settings.train:
        job.train()
    if settings.memory:
        job.memory()
    return job.report
