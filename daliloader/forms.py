"""Which published form of a dataset's class table its masks are in, checked before they load.

Several datasets ship their masks in two forms that one table cannot both read (``PublishedTable.other_form``):
Cityscapes' labelIds (0-33) and trainIds (0-18, 255); ADE20K's raw values (0 "other", 1-150) and the
same values reduced by one (0-149, 255); VOC's palette PNGs and its raw id masks. Either form read with
the other's table loads without an error and with wrong labels (Cityscapes' trainIds read as labelIds
turn road, building and sky into the ignore index and a person into a building). So a map that is a
published table (``ClassMap.catalogue``) is checked here against a sample of the masks, and a form that
fits them far better is named (:func:`refuse_other_form` at load time, :func:`other_form` for ``check``).

"Fits" is measured on the sampled masks' ids: the shares of pixels whose id the table does not know at
all (``unknown``), that it maps to a class (``labelled``), and that it ignores on purpose (``ignored``:
void ids, "other"). The other form fits far better when (1) the given table leaves at least
:data:`UNKNOWN_SHARE` of the pixels unknown and the other at most a tenth of that; or (2), for ADE20K's
raw and reduced forms only (:data:`VOID_IN_EVERY_PICTURE`), with at least :data:`RULE_2_MASKS` masks
sampled: the other knows every id the given table knows, the given table ignores no pixel while the
other ignores at least :data:`IGNORED_SHARE` of them, and labels no more than :data:`LABELLED_LOSS`
fewer. Masks of the right form leave nothing unknown; of the wrong form, whole classes go unknown
(Cityscapes' trainIds read as labelIds leave its 255 unknown, labelIds read as trainIds its ids above
18). ADE20K's raw masks read with the reduced table leave nothing unknown, but hold no 255 where every
real ADE20K picture holds some "other objects" (0): rule 2. A form that labels more pixels is not enough
by itself, nor rule 2 on a few masks or other datasets: a crop or a small set without void pixels would
be refused for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .classes import ClassMap, MaskKind, published_table
from .errors import DataError, StorageError
from .parts import SINGLE_CHANNEL_MODES, open_image

#: Masks read to judge the form, spread evenly over the dataset.
SAMPLE = 16
#: The share of pixels of no known id above which the given table is suspect.
UNKNOWN_SHARE = 0.001
#: The share of pixels the other form must ignore where the given table ignores none (rule 2).
IGNORED_SHARE = 0.01
#: The forms rule 2 tells apart.
VOID_IN_EVERY_PICTURE = frozenset({"ade20k", "ade20k-reduced"})
#: The fewest sampled masks rule 2 judges.
RULE_2_MASKS = 4
#: How many fewer of the pixels (a share) the other form may label and still fit far better by rule 2.
LABELLED_LOSS = 0.25


@dataclass(frozen=True)
class Fit:
    """How a table reads a sample of masks: the shares of pixels of no id it knows, mapped to a class, and
    ignored on purpose."""

    unknown: float
    labelled: float
    ignored: float

    @classmethod
    def of(cls, classes: ClassMap, counts: np.ndarray) -> Fit:
        """The fit of an id map to ``counts``, the pixels of each id in the sample."""
        total = max(int(counts.sum()), 1)
        ids = np.flatnonzero(counts)
        known = np.isin(ids, list(classes.id_to_class))
        labelled = (classes.lookup_table[ids] < classes.num_classes) & known
        ignored = known & ~labelled
        return cls(*(float(counts[ids[which]].sum()) / total for which in (~known, labelled, ignored)))

    def far_better(self, other: Fit, void_rule: bool = False) -> bool:
        """Whether this fit is far better than ``other`` (see the module's docstring; ``void_rule``: rule 2
        applies)."""
        return ((other.unknown >= UNKNOWN_SHARE and self.unknown <= other.unknown / 10)
                or (void_rule and other.ignored == 0 and self.ignored >= IGNORED_SHARE
                    and self.unknown <= other.unknown and self.labelled >= other.labelled - LABELLED_LOSS))


@dataclass(frozen=True)
class OtherForm:
    """The published table that fits the masks far better than the one given, and why, in words."""

    name: str
    why: str

    def message(self, given: ClassMap, where: str) -> str:
        return (f"{where}: the masks do not look like {given.catalogue!r} ({given.source}) but like "
                f"{self.name!r}: {self.why}. Pass classes={self.name!r} (--classes {self.name}). If they really are "
                f"{given.catalogue!r}, pass the table as a map of your own: "
                f"dataclasses.replace(ClassMap.named({given.catalogue!r}), catalogue=None)")


def sample(masks: Sequence) -> list:
    """Up to :data:`SAMPLE` masks spread evenly over ``masks``."""
    step = max(1, len(masks) // SAMPLE)
    return list(masks[::step][:SAMPLE])


def other_form(classes: ClassMap, masks: Sequence) -> OtherForm | None:
    """The other form of ``classes``'s published table (``PublishedTable.other_form``) where it fits a sample of
    ``masks`` far better, else None (also for maps that are no published table, and masks that cannot
    be read: the loaders and ``check`` name those)."""
    table = published_table(classes.catalogue)
    name = table.other_form if table is not None else None
    if name is None or not masks:
        return None
    other = ClassMap.named(name)
    try:
        if classes.palette_masks is not None or other.palette_masks is not None:
            return _palette_form(classes, other, name, sample(masks))
        sampled = sample(masks)
        counts = _id_counts(sampled, classes.mask_channel)
    except StorageError:
        raise  # the bucket's faults say nothing of the mask: named now
    except (OSError, ValueError, DataError):
        return None
    given, alternative = Fit.of(classes, counts), Fit.of(other, counts)
    void_rule = {classes.catalogue, name} <= VOID_IN_EVERY_PICTURE and len(sampled) >= RULE_2_MASKS
    if not alternative.far_better(given, void_rule):
        return None
    return OtherForm(name, f"{given.unknown:.1%} of the sampled pixels hold ids {classes.catalogue!r} does not know "
                           f"and {given.labelled:.1%} load as a class, against {alternative.unknown:.1%} and "
                           f"{alternative.labelled:.1%} with {name!r}")


def refuse_other_form(classes: ClassMap, masks: Sequence, where: str = "the dataset") -> None:
    """Raise a DataError naming the published table that fits ``masks`` far better (:func:`other_form`)."""
    found = other_form(classes, masks)
    if found is not None:
        raise DataError(found.message(classes, where))


#: The values that mean "ignored" by convention, whatever the count (8-bit masks' 255, 16-bit masks' 65535,
#: which the ids read from the masks also take for the ignore index): not weighed as ids a count leaves out.
IGNORE_VALUES = (255, 65535)


@dataclass(frozen=True)
class BeyondCount:
    """What a map read from a class count leaves out of a sample of masks: the ids (palette indices) it
    loads as ignored though they are not the ignore index, with their pixels, and the sampled masks that
    hold them."""

    pixels: dict[int, int]
    masks: list[str]
    sampled: int

    def ids(self) -> str:
        """The ids, for messages: at most eight, with their pixels."""
        shown = [f"{i} ({n} pixels)" for i, n in sorted(self.pixels.items())[:8]]
        return ", ".join(shown) + (", ..." if len(self.pixels) > 8 else "")


def beyond_count(classes: ClassMap, masks: Sequence) -> BeyondCount | None:
    """A map read from a class count ``N`` (ids or palette indices ``0..N-1``, the others ignored:
    ``ClassMap.from_ids(N)``, ``from_palette_indices``) weighed against a sample of ``masks``: the ids
    besides the ignore index (and :data:`IGNORE_VALUES`) that it loads as ignored, as the map itself maps
    them (a palette index of a class's colour loads as that class), else None (also for masks that cannot
    be read: the loaders and ``check`` name those). VOC's 21 classes read with ``classes=20`` lose
    tvmonitor (20) this way."""
    pixels: dict[int, int] = {}
    holding = []
    sampled = sample(masks)
    try:
        for mask in sampled:
            counts = _id_counts([mask], classes.mask_channel)
            ids = np.flatnonzero(counts)
            lost = ids[~np.isin(ids, IGNORE_VALUES + (classes.ignore_index,))
                       & (_loaded_as(classes, ids) == classes.ignore_index)]
            for i in lost.tolist():
                pixels[i] = pixels.get(i, 0) + int(counts[i])
            if lost.size:
                holding.append(str(mask))
    except StorageError:
        raise  # the bucket's faults say nothing of the mask: named now
    except (OSError, ValueError, DataError):
        return None
    return BeyondCount(pixels, holding, len(sampled)) if pixels else None


def _loaded_as(classes: ClassMap, ids: np.ndarray) -> np.ndarray:
    """The label each id (palette index, for maps that read the masks through their palette) loads as;
    an index past the palette's end loads as ignored (``check`` names such masks)."""
    if classes.palette_masks is None:
        return classes.map_mask(ids[None])[0]
    palette = classes.palette_masks
    labels = np.full(ids.shape, classes.ignore_index, np.int64)
    inside = ids < len(palette)
    labels[inside] = classes.map_mask(palette[ids[inside]][None])[0]
    return labels


def _id_counts(masks: Sequence, channel: int | None) -> np.ndarray:
    """The pixels of each id over ``masks`` (single-channel masks, or channel ``channel`` of colour ones)."""
    counts = np.zeros(1 << 16, np.int64)
    for mask in masks:
        with open_image(mask) as im:
            values = np.asarray(im.convert("RGB"))[..., channel] if channel is not None else np.asarray(im)
        if values.ndim != 2:
            raise ValueError("not an id mask")  # a colour mask: the map cannot read it; the vetting says so
        counts += np.bincount(values.ravel().astype(np.int64), minlength=1 << 16)[: 1 << 16]
    return counts


def _palette_form(classes: ClassMap, other: ClassMap, name: str, masks: list) -> OtherForm | None:
    """VOC's two forms are told apart by the masks themselves: palette PNGs, or single-channel ids (masks
    of other modes are neither: the loaders' vetting names them)."""
    with open_image(masks[0]) as im:
        mode = im.mode
    if classes.palette_masks is not None and mode in SINGLE_CHANNEL_MODES:
        return OtherForm(name, f"they are single-channel {mode} id masks, not palette PNGs")
    if other.palette_masks is not None and classes.kind is MaskKind.ID and mode == "P":
        return OtherForm(name, "they are palette PNGs, whose indices are the labels")
    return None
