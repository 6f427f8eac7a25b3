"""``check``: every pair of a dataset looked at before training, and the report of what is wrong.

DALI cannot skip a bad file: a truncated JPEG stops the pipeline with an error that names no file, and
the pipeline is dead afterwards. So daliloader looks at files itself, at two depths: ``check(data)``
(``daliloader check DATA``) decodes every pair fully, in parallel (:func:`daliloader.inspection.check_pair`:
JPEGs by libjpeg-turbo in strict mode, which fails on the corrupt data the loaders' decoders only warn
about, other formats by Pillow, the masks' values by OpenCV), and lists files without a partner,
symbolic links that lead nowhere, folders that cannot be read and TFRecord records that cannot be read;
every loader runs the cheap part of the same checks on each pair before it reads it
(:class:`daliloader.guard.PairGuard`).

Nothing here imports TensorFlow or DALI.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from . import maskcache
from .classes import ClassMap
from .data import SegmentationData, choose_classes
from .data import mask_depth as data_mask_depth
from .errors import DataError, empty_dataset
from .forms import other_form
from .guard import PairGuard
from .inspection import MIN_SIDE, Expect, Problem, ProblemKind, check_pair, quick_problems, record_problem_kind
from .layouts import find
from .pairing import Pairing, listing_problems, pair_files
from .parallel import cores, threaded_map
from .parts import in_record
from .spec import check_workers

__all__ = ["check", "Report", "Problem", "ProblemKind", "PairGuard", "Expect", "quick_problems", "check_pair"]


# ---------------------------------------------------------------- the whole dataset
@dataclass
class Report:
    """What ``check`` found. ``ok`` is true when nothing is wrong."""

    source: str
    pairs: int
    problems: list[Problem]
    seconds: float
    workers: int
    #: what is worth knowing and is no problem (TFRecord files that hold no record)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds if self.seconds > 0 else float("inf")

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.problems:
            out[p.kind] = out.get(p.kind, 0) + 1
        return out

    def to_dict(self) -> dict:
        return {"source": self.source, "pairs": self.pairs, "ok": self.ok, "seconds": round(self.seconds, 3),
                "pairs_per_second": round(self.pairs_per_second, 1), "workers": self.workers,
                "counts": self.counts(), "problems": [asdict(p) for p in self.problems], "notes": self.notes}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        head = (f"checked {self.pairs} pairs in {self.seconds:.1f} s ({self.pairs_per_second:.0f} pairs/s, "
                f"{self.workers} threads): ")
        notes = "".join(f"\n  note: {n}" for n in self.notes)
        if self.ok:
            return head + "no problems" + notes
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts().items()))
        return head + f"{len(self.problems)} problem(s): {counts}{notes}\n" + "\n".join(f"  {p}" for p in self.problems)


def check(data: SegmentationData | str | Path | dict, *, split: str | None = None,
          classes: ClassMap | str | Path | int | dict | None = None, workers: int | None = None,
          min_side: int = MIN_SIDE, progress: bool = False, image_key: str | None = None,
          mask_key: str | None = None, mask_channel: int | None = None) -> Report:
    """Check every pair of ``data``, decoding both files fully, and report what is wrong.

    Folders are paired leniently: files without a partner are reported instead of raised, and so are
    TFRecord records that cannot be read or lack the keys (named by file, record and byte offset).

    Args:
        data: a SegmentationData, a dataset folder in a known layout (see :mod:`daliloader.layouts`:
            TFRecord files and TFDS folders too, whose features ``image_key`` and ``mask_key`` may name),
            or the ``from_dirs`` arguments as a dict.
        split: the split of a dataset folder, as :func:`daliloader.layouts.find` takes it (None: the
            layout's training split, or the whole folder where it has no split folders).
        classes: replaces the class map, as in ``from_folder`` (:func:`~daliloader.data.choose_classes`;
            None: the layout's, or the ids in the masks).
        workers: threads that decode in parallel (default: every core).
        min_side: images with a side shorter than this, in pixels, are reported as tiny.
        progress: show a progress bar.
        image_key: the feature of TFRecord files that holds the encoded image (None: found by itself).
        mask_key: the feature of TFRecord files that holds the encoded mask (None: found by itself).
        mask_channel: the channel of colour masks that holds the ids (None: the data's or the layout's
            own).

    Returns:
        The :class:`Report` of the pairs checked, every problem found (each naming its file), the notes
        and the time taken; ``ok`` when nothing is wrong.

    Raises:
        daliloader.errors.DataError: ``data`` that cannot be listed at all, named (a folder that does
            not exist or is in no known layout, no images or masks under it, a split without pairs (an
            empty split list), a layout that needs ``classes``), or a ``classes`` that cannot read the
            masks. Masks that cannot be decoded are reported, not raised, also where ``classes=None``
            reads the ids in the masks: the inference leaves them out.
        daliloader.errors.SpecError: a ``workers`` that is not a positive count this machine can use.
    """
    if isinstance(data, SegmentationData):
        listed = _Listed(Pairing(list(zip(data.images, data.masks)), [], [], ""), repr(data),
                         data.classes if classes is None else classes, notes=_empty_files(data.records),
                         mask_channel=data.mask_channel if mask_channel is None else mask_channel)
        depth = data.mask_depth
    else:
        listed = _listed(data, split, classes, image_key, mask_key, mask_channel)
        depth = data_mask_depth(listed.pairing.pairs[0][1]) if listed.pairing.pairs else 8
    pairs, source = listed.pairing.pairs, listed.source
    if not pairs and not listed.problems:  # nothing to check is no clean dataset
        raise empty_dataset(listed.looked_in)
    classes = listed.read_with([m for _, m in pairs], progress)
    workers = check_workers(workers) or cores()
    start = time.perf_counter()
    problems = list(listed.problems) + _table_problems(classes, [m for _, m in pairs], source)
    cached = classes is not None and maskcache.wanted_for(classes) and _caches_masks(data, pairs)
    with closing(threaded_map(lambda pair: check_pair(*pair, classes, min_side, depth, cached), pairs, workers,
                              "checking pairs" if progress else None)) as checked:
        for found in checked:
            problems.extend(found)
    return Report(source, len(pairs), problems, time.perf_counter() - start, workers, listed.notes)


def _empty_files(records) -> list[str]:
    """A note on the TFRecord files that hold no record (DeepLab's scripts write empty shards)."""
    empty = records.empty_files if records is not None else ()
    if not empty:
        return []
    return [f"{len(empty)} TFRecord file(s) hold no record and were read as empty: {', '.join(empty[:5])}"
            + (" ..." if len(empty) > 5 else "")]


def _caches_masks(data, pairs: list) -> bool:
    """Whether the loaders would read masks of ``data`` (its ``pairs``, where it is no SegmentationData) from
    the mask cache, class maps aside (:func:`daliloader.maskcache.caches`): files or objects, not records."""
    if isinstance(data, SegmentationData):
        return maskcache.caches(data)
    return bool(pairs) and not in_record(pairs[0][1])


def _table_problems(classes, masks: list, source: str) -> list[Problem]:
    """The published table given where the masks are in its other form (:mod:`daliloader.forms`)."""
    found = other_form(classes, masks) if classes is not None else None
    if found is None:
        return []
    return [Problem(ProblemKind.CLASS_TABLE, source, found.message(classes, "the class map").split(": ", 1)[1],
                    details={"fits": found.name})]


@dataclass
class _Listed:
    """A folder (or ``from_dirs`` dict) paired leniently: its pairs, what the pairing found wrong, and
    the classes to read it with (given, or the layout's ``published`` ones)."""

    pairing: Pairing
    source: str
    classes: object = None
    published: object = None
    layout: str = ""
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mask_channel: int | None = None
    #: where the pairs were looked for, and the masks of every split (see daliloader.layouts.Found)
    looked_in: str = ""
    every_split: Callable[[], list] | None = None

    def read_with(self, masks: list, progress: bool):
        """The class map that reads ``masks``: the one given, else the published one (else the ids in the
        masks of every split, those that cannot be decoded left out: check_pair reports those of ``masks``,
        and :attr:`problems` gets those of the other splits, which stop the loaders of this split too), with
        the channel of colour masks where there is one; None without masks, or where no mask can be read."""
        if not masks:
            return None
        unreadable: list = []
        classes = choose_classes(self.classes, masks, self.published, self.layout, progress,
                                 mask_channel=self.mask_channel, dataset=self.every_split, unreadable=unreadable,
                                 vet_count=False)  # (check_pair reports ids of no class, mask by mask)
        own = {str(m) for m in masks}
        self.problems += [Problem(ProblemKind.CORRUPT, m.path, f"{m.why}: a mask of another split, whose class ids "
                                  "classes=None reads too (every split gets one class map), so the loaders of "
                                  "this split refuse it as well. Repair or remove it, or pass classes=N "
                                  "(--classes N)") for m in unreadable if m.path not in own]
        if classes is None or self.mask_channel is None:
            return classes
        return replace(classes, mask_channel=self.mask_channel)


def _listed(data: str | Path | dict, split: str | None, classes, image_key: str | None,
            mask_key: str | None, mask_channel: int | None = None) -> _Listed:
    """Pair ``data`` with every listing problem reported, not raised."""
    if isinstance(data, dict):
        suffix = data.get("mask_suffix")
        with listing_problems():
            pairing = pair_files(data["images"], data["masks"], suffix, data.get("image_suffix", ""),
                                 only_suffixed=suffix is not None)
        listed = _Listed(pairing, f"{data['images']} + {data['masks']}",
                         data.get("classes") if classes is None else classes,
                         mask_channel=data.get("mask_channel") if mask_channel is None else mask_channel)
    else:
        with listing_problems():
            found = find(data, split, image_key, mask_key, mask_channel)
        if classes is None and found.needs_classes:
            raise DataError(found.needs_classes)
        listed = _Listed(found.pairing, f"{data} ({found.layout})", classes, found.classes, found.layout,
                         [Problem(record_problem_kind(p.kind), f"{p.file} [record {p.record} at byte {p.offset}]",
                                  p.what) for p in found.record_problems], _empty_files(found.records),
                         mask_channel=found.mask_channel if mask_channel is None else mask_channel,
                         looked_in=found.looked_in, every_split=found.every_split)
    listed.problems += _pairing_problems(listed.pairing)
    return listed


def _pairing_problems(pairing: Pairing) -> list[Problem]:
    """What pairing a folder found: broken links, unreadable folders, listed files missing, files alone."""
    return ([Problem(ProblemKind.BROKEN_LINK, p, f"a symbolic link to {why}") for p, why in pairing.broken_links]
            + [Problem(ProblemKind.UNREADABLE, folder, f"this folder cannot be read ({why}): the files in it were "
                                                       "not checked; make it readable")
               for folder, why in pairing.unreadable]
            + [Problem(ProblemKind.MISSING, p, f"listed in {where}, but missing") for p, where in pairing.missing]
            + [Problem(ProblemKind.UNPAIRED_IMAGE, p, pairing.unpaired_image(p)) for p in pairing.unpaired_images]
            + [Problem(ProblemKind.UNPAIRED_MASK, p, "mask without an image") for p in pairing.unpaired_masks])
