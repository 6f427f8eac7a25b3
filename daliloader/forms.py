"""Which published form of a dataset's class table its masks are in, checked before they load.

Several datasets ship their masks in two forms that one table cannot both read (``classes.OTHER_FORM``):
Cityscapes' labelIds (0-33) and trainIds (0-18, 255); ADE20K's raw values (0 "other", 1-150) and the
same values reduced by one (0-149, 255); VOC's palette PNGs and its raw id masks. Either form read with
the other's table loads without an error and with wrong labels (Cityscapes' trainIds read as labelIds
turn road, building and sky into the ignore index and a person into a building). So a map that is a
published table (``ClassMap.catalogue``) is checked here against a sample of the masks, and a form that
fits them far better is named (:func:`refuse_other_form` at load time, :func:`other_form` for ``check``).

"Fits" is measured on the sampled masks' ids: the shares of pixels whose id the table does not know at
all (``unknown``), that it maps to a class (``labelled``), and that it ignores on purpose (``ignored``:
void ids, "other"). The other form fits far better when (1) the given table leaves at least
:data:`UNKNOWN_SHARE` of the pixels unknown and the other at most a tenth of that; or (2) the other
knows every id the given table knows, the given table ignores no pixel while the other ignores at least
:data:`IGNORED_SHARE` of them, and labels no more than :data:`LABELLED_LOSS` fewer. Real masks of the
right form leave nothing unknown and hold some void (every form here has void pixels in nearly every
picture: Cityscapes' ego vehicle and borders, ADE20K's "other objects", VOC's object borders); of the
wrong form, whole classes go unknown. Rule 2 tells ADE20K's raw masks (0 "other") from reduced ones,
which a reduced table reads without an unknown id. A form that labels more pixels is not enough by
itself: masks of blank or unusual content would be refused for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .classes import OTHER_FORM, ClassMap, MaskKind
from .errors import DataError
from .parts import open_image

#: Masks read to judge the form, spread evenly over the dataset.
SAMPLE = 16
#: The share of pixels of no known id above which the given table is suspect.
UNKNOWN_SHARE = 0.001
#: The share of pixels the other form must ignore where the given table ignores none (rule 2).
IGNORED_SHARE = 0.01
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

    def far_better(self, other: Fit) -> bool:
        """Whether this fit is far better than ``other`` (see the module's docstring)."""
        return ((other.unknown >= UNKNOWN_SHARE and self.unknown <= other.unknown / 10)
                or (other.ignored == 0 and self.ignored >= IGNORED_SHARE and self.unknown <= other.unknown
                    and self.labelled >= other.labelled - LABELLED_LOSS))


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
    """The other form of ``classes``'s published table (``classes.OTHER_FORM``) where it fits a sample of
    ``masks`` far better, else None (also for maps that are no published table, and masks that cannot
    be read: the loaders and ``check`` name those)."""
    name = OTHER_FORM.get(classes.catalogue or "")
    if name is None or not masks:
        return None
    other = ClassMap.named(name)
    try:
        if classes.palette_masks is not None or other.palette_masks is not None:
            return _palette_form(classes, other, name, sample(masks))
        counts = _id_counts(sample(masks), classes.mask_channel)
    except (OSError, ValueError, DataError):
        return None
    given, alternative = Fit.of(classes, counts), Fit.of(other, counts)
    if not alternative.far_better(given):
        return None
    return OtherForm(name, f"{given.unknown:.1%} of the sampled pixels hold ids {classes.catalogue!r} does not know "
                           f"and {given.labelled:.1%} load as a class, against {alternative.unknown:.1%} and "
                           f"{alternative.labelled:.1%} with {name!r}")


def refuse_other_form(classes: ClassMap, masks: Sequence, where: str = "the dataset") -> None:
    """Raise a DataError naming the published table that fits ``masks`` far better (:func:`other_form`)."""
    found = other_form(classes, masks)
    if found is not None:
        raise DataError(found.message(classes, where))


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
    """VOC's two forms are told apart by the masks themselves: palette PNGs, or single-channel ids."""
    with open_image(masks[0]) as im:
        palette = im.mode == "P"
    if (classes.palette_masks is not None) == palette or (other.kind is not MaskKind.ID and not palette):
        return None
    what = "palette PNGs, whose indices are the labels" if palette else f"single-channel {im.mode} id masks"
    return OtherForm(name, f"they are {what}")
