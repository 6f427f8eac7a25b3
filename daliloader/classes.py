"""ClassMap: how mask pixels become class indices.

Masks in the wild come as (:class:`MaskKind`):

* ``RGB``: colour masks, one colour per class (CamVid's ``class_dict.csv``).
* ``ID``:  single-channel masks holding an integer id per pixel, 8 or 16 bits, optionally remapped
  (Cityscapes ``labelIds`` -> ``trainIds``, with ignore 255; ADE20K's 1-150 -> 0-149).
* palette PNGs whose *indices* are the labels (Pascal VOC): a map built with
  :meth:`ClassMap.from_palette_indices` reads them by index. Every decoder daliloader uses (DALI,
  TensorFlow, OpenCV) expands a palette into its colours, so such a map is a colour map of the
  palette's colours (kind ``RGB``), and every mask must carry that same palette, which the loaders
  check (``palette_masks``).

Every backend maps with the same tables, built here once. A pixel whose colour/id is not in the
map becomes ``ignore_index``: never a wrong class. In one-hot mode ``ignore_index`` (which is
always ``>= num_classes``) gives an all-zero row.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from . import buckets
from .catalog import (
    ADE20K_CLASSES,
    ADE20K_INSTANCE_CLASSES,
    CAMVID_CLASSES,
    CITYSCAPES,
    OXFORD_PETS_CLASSES,
    VOC_CLASSES,
    VOC_IGNORE,
    voc_colormap,
)
from .draws import is_integer
from .errors import DataError, SpecError, ValueEnum

#: DALI's ``fn.lookup_table`` accepts keys in [0, 65535] only.
_LUT_KEYS = 65536


class MaskKind(ValueEnum):
    """How a class map reads masks: their colours, or their integer ids."""

    RGB = "rgb"
    ID = "id"


#: (r, g) pairs of the palette per group of :class:`RGBTables`: a pair's number in its group times 256,
#: plus b, is a key of the group's second table; 255 numbers fill its 16 bits and leave the 256th for
#: the pairs outside the group.
PAIRS_PER_GROUP = 255


@dataclass(frozen=True)
class LookupTable:
    """One DALI ``fn.lookup_table``: ``keys`` (16-bit) to ``values``, ``default`` for every other key."""

    keys: tuple[int, ...]
    values: tuple[int, ...]
    default: int


@dataclass(frozen=True)
class RGBGroup:
    """The two tables of one group of at most :data:`PAIRS_PER_GROUP` (r, g) pairs of a palette:
    ``pairs`` maps ``r*256 + g`` to the pair's number in the group times 256 (a pair outside the group
    to ``PAIRS_PER_GROUP * 256``), and ``colours`` maps that plus ``b`` to the class (anything else
    to the ignore index)."""

    pairs: LookupTable
    colours: LookupTable


@dataclass(frozen=True)
class RGBTables:
    """Integer lookup tables that map an RGB colour to a class, exactly, within DALI's 16-bit keys.

    A 24-bit colour does not fit one DALI lookup table, so the colour is split: the palette's distinct
    (r, g) pairs (``num_pairs``) are cut into groups, each with two tables (:class:`RGBGroup`), and a
    group's class is ``colours[pairs[r*256 + g] + b]``. Every key and every sum stays within 16 bits, so
    the graph computes them in uint16 from the uint8 channels (on DALI's CPU, the same sums on the mask
    cast to int32 were slower, measured in docs/design.md, "What makes the CPU graph fast"). A known
    colour is found in its own group alone, everything else gives the ignore index, which is above every
    class: the class is the least of the groups'. A palette of up to 255 (r, g) pairs is one group: two
    table reads per pixel whatever the number of classes.
    """

    groups: tuple[RGBGroup, ...]
    num_pairs: int


@dataclass(frozen=True, eq=False)
class ClassMap:
    """The classes of a dataset and how mask pixels map to them.

    Build one with :meth:`from_csv`, :meth:`from_palette`, :meth:`from_palette_indices` or
    :meth:`from_ids`, or take a known dataset's: :meth:`cityscapes`, :meth:`voc`, :meth:`ade20k`,
    :meth:`camvid`, :meth:`oxford_iiit_pet` (by name: :meth:`named`).
    """

    names: tuple[str, ...]
    kind: MaskKind
    colors: np.ndarray | None = field(default=None, repr=False)  # (C, 3) uint8: RGB: class i's colour; ID: drawing only
    id_to_class: Mapping[int, int] | None = field(default=None, repr=False)  # kind ID
    ignore_index: int = 255
    source: str = ""
    #: RGB: colours that mean ignore_index on purpose (not unknown values), such as VOC's borders.
    ignore_colors: np.ndarray | None = field(default=None, repr=False)
    #: The palette (256, 3) every mask must carry: masks are palette PNGs read by index (VOC).
    palette_masks: np.ndarray | None = field(default=None, repr=False)
    #: ID: the masks are colour pictures whose channel ``mask_channel`` (0 red, 1 green, 2 blue) holds the
    #: id (TFDS's scene_parse150: red the class, green the instance); None: single-channel masks.
    mask_channel: int | None = None
    #: The catalogue name of the published table this map is (:data:`CATALOGUE`), None for any other map:
    #: a published table is checked against the masks at load time (:mod:`daliloader.forms`).
    catalogue: str | None = field(default=None, repr=False)

    def __eq__(self, other) -> bool:
        """Every field equal, the colour arrays by value (a dataclass's own ``==`` compared them as numpy
        does, element by element, and raised asking which truth value was meant)."""
        if not isinstance(other, ClassMap):
            return NotImplemented
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    def __hash__(self) -> int:
        return hash((self.names, self.kind, self.ignore_index, self.source, self.mask_channel, self.catalogue))

    def __post_init__(self):
        object.__setattr__(self, "kind", MaskKind(self.kind))
        if self.mask_channel is not None and (self.kind is not MaskKind.ID or isinstance(self.mask_channel, bool)
                                              or self.mask_channel not in (0, 1, 2)):
            raise DataError(f"mask_channel={self.mask_channel!r}: the channel of colour masks that holds the class "
                            "id is 0 (red), 1 (green) or 2 (blue), for an id map (a class count, a remap table or "
                            "a catalogue name), not a colour map")
        # here, not in each constructor: every way to a ClassMap (from_palette, from_ids, replace, ...) passes
        seen: dict[str, int] = {}
        for i, name in enumerate(self.names):
            if str(name).lower() in seen:
                raise DataError(f"{self.source or 'class names'}: the class name {name!r} is given to classes "
                                f"{seen[str(name).lower()]} and {i}; give each class its own name")
            seen[str(name).lower()] = i

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_csv(cls, path: str | Path, ignore_index: int | None = None) -> ClassMap:
        """Read a CamVid-style ``class_dict.csv`` with a header ``name,r,g,b`` (``ignore_index``: see
        :meth:`from_palette`); ``path`` may be an ``s3://`` URL."""
        path = buckets.object_path(path) if buckets.is_url(path) else path if isinstance(path, buckets.BucketPath) \
            else Path(path)
        rows = _csv_rows(path)
        names, colors = [], []
        for lineno, row in rows:
            name, rgb = _csv_class(path, lineno, row)
            names.append(name)
            colors.append(rgb)
        _refuse_repeated_names(path, [lineno for lineno, _ in rows], names)
        return cls.from_palette(colors, names, ignore_index=ignore_index, source=str(path))

    @classmethod
    def from_palette(
        cls,
        colors: Sequence[Sequence[int]] | np.ndarray,
        names: Sequence[str] | None = None,
        ignore_index: int | None = None,
        source: str = "palette",
        ignore_colors: Sequence[Sequence[int]] | None = None,
    ) -> ClassMap:
        """Colour masks: class ``i`` is drawn in ``colors[i]`` (RGB); ``ignore_colors`` mean ``ignore_index``
        (default: 255, or 65535 with more than 255 classes, as for id maps: :func:`default_ignore`)."""
        arr = np.asarray(colors, dtype=np.int64)
        if arr.ndim != 2 or arr.shape[1] != 3 or len(arr) == 0:
            raise DataError(f"a palette is a list of (r, g, b) triples; got shape {arr.shape}")
        if arr.min() < 0 or arr.max() > 255:
            raise DataError("palette colours must lie in 0-255")
        codes = _pack(arr.astype(np.uint8))
        uniq, first, counts = np.unique(codes, return_index=True, return_counts=True)
        if (counts > 1).any():
            dup = arr[first[counts > 1][0]].tolist()
            raise DataError(f"{source}: colour {dup} is given to more than one class")
        names = _names(names, len(arr), "colours")
        ignored = None if ignore_colors is None else np.asarray(ignore_colors, dtype=np.uint8).reshape(-1, 3)
        if ignored is not None and np.isin(_pack(ignored), codes).any():
            raise DataError(f"{source}: a colour is given both to a class and to ignore_colors")
        ignore_index = default_ignore(len(arr)) if ignore_index is None else ignore_index
        cm = cls(names=names, kind=MaskKind.RGB, colors=arr.astype(np.uint8), ignore_index=ignore_index, source=source,
                 ignore_colors=ignored)
        cm._check_ignore()
        return cm

    @classmethod
    def from_palette_indices(
        cls,
        palette: Sequence[Sequence[int]] | np.ndarray,
        num_classes: int,
        names: Sequence[str] | None = None,
        ignore_index: int = 255,
        source: str = "palette indices",
    ) -> ClassMap:
        """Palette PNG masks read by index: index ``i < num_classes`` is class ``i``; the index
        ``ignore_index`` (VOC's 255) and every other index mean ``ignore_index``. ``palette`` is the (up
        to 256, 3) palette the masks carry; the decoders expand it into colours, which map back to
        their indices, so every mask must carry this palette (the loaders check), and the classes and
        the ignore index need colours of their own. Other indices may share a colour (exported
        palettes are often padded with black): ``daliloader check`` reports pixels that use them."""
        pal = np.asarray(palette, dtype=np.int64).reshape(-1, 3)
        if not 0 < num_classes <= len(pal) or len(pal) > 256:
            raise DataError(f"{source}: a palette of {len(pal)} colours cannot hold {num_classes} classes")
        codes = _pack(pal.astype(np.uint8))
        told = list(range(num_classes)) + ([ignore_index] if ignore_index < len(pal) else [])
        for k, i in enumerate(told):
            same = [j for j in told[:k] if codes[j] == codes[i]]
            if same:
                what = "the ignore index" if i == ignore_index else "class"
                raise DataError(f"{source}: palette index {i} ({what}) has the colour {pal[i].tolist()} of index "
                                f"{same[0]}, so the decoders, which expand indices into colours, cannot tell them "
                                "apart; give the masks a palette with distinct colours, or convert them to 8-bit ids")
        taken = set(codes[:num_classes].tolist())
        others = [c for i, c in enumerate(pal) if i >= num_classes and codes[i] not in taken]
        cm = cls.from_palette(pal[:num_classes], names, ignore_index=ignore_index, source=source,
                              ignore_colors=np.unique(np.asarray(others, np.int64).reshape(-1, 3), axis=0))
        return replace(cm, palette_masks=pal.astype(np.uint8))

    @classmethod
    def from_ids(
        cls,
        id_to_class: Mapping[int, int] | int,
        names: Sequence[str] | None = None,
        ignore_index: int | None = None,
        source: str = "ids",
    ) -> ClassMap:
        """Integer-id masks.

        ``id_to_class`` is either the number of classes ``C`` (ids ``0..C-1`` are the classes) or a
        remap table ``{raw_id: class}`` such as Cityscapes' labelIds -> trainIds. Ids mapped to
        ``ignore_index`` or absent from the table become ``ignore_index``. ``ignore_index`` defaults
        to 255, or 65535 when there are more than 255 classes; it lies above the classes, so an ignore
        index that is one of them is refused. With a class count, masks may hold the ignore index itself
        (the common convention: VOC, Cityscapes trainIds); it is not an unknown id.
        """
        if is_integer(id_to_class):
            table, ignore_index = _count_table(int(id_to_class), ignore_index)
        elif isinstance(id_to_class, Mapping):
            table, ignore_index = _remap_table(id_to_class, ignore_index)
        else:
            raise DataError(f"{source}: id_to_class is a class count (an int: ids 0..N-1) or a mapping "
                            f"{{mask id: class}}; got {type(id_to_class).__name__} {id_to_class!r:.60}. For the ids "
                            "0..N-1 pass N; to remap, a dict such as {7: 0, 26: 1}")
        n = _class_count(table, ignore_index)
        names = _names(names, n, "classes")
        cm = cls(names=names, kind=MaskKind.ID, id_to_class=table, ignore_index=ignore_index, source=source)
        cm._check_ignore()
        return cm

    @classmethod
    def cityscapes(cls, ids: str = "label") -> ClassMap:
        """Cityscapes' 19 training classes (see :data:`daliloader.catalog.CITYSCAPES`), from the masks'
        ``ids``: ``"label"``, the ``*_gtFine_labelIds.png`` of the download (and TFDS's ``cityscapes``):
        labelIds 0-33, the 19 trained ones -> their trainIds, every other labelId -> 255; ``"train"``,
        the ``*_gtFine_labelTrainIds.png`` that cityscapesScripts' ``createTrainIdLabelImgs`` writes (and
        DeepLab's ``build_cityscapes_data.py`` stores in its TFRecords): trainIds 0-18, 255 ignored.
        By name: ``"cityscapes"`` and ``"cityscapes-trainids"``."""
        if ids not in ("label", "train"):
            raise SpecError(f"ids={ids!r}: Cityscapes masks hold 'label' ids (labelIds, 0-33) or 'train' ids "
                            "(trainIds, 0-18 and 255)")
        trained = sorted((train_id, name, color) for name, _, train_id, color in CITYSCAPES if train_id != 255)
        if ids == "train":
            table = {**{t: t for t, _, _ in trained}, 255: 255}  # 255: the masks' own void (ignored), no unknown id
            source, name = "cityscapes (trainIds)", "cityscapes-trainids"
        else:
            table, source, name = {label: t for _, label, t, _ in CITYSCAPES}, "cityscapes", "cityscapes"
        cm = cls.from_ids(table, [n for _, n, _ in trained], ignore_index=255, source=source)
        return replace(cm, colors=np.array([c for _, _, c in trained], dtype=np.uint8), catalogue=name)

    @classmethod
    def voc(cls, indexed: bool = True, form: str | None = None) -> ClassMap:
        """Pascal VOC 2012 ``SegmentationClass`` masks: palette PNGs whose indices 0-20 are the classes
        and whose index 255 (object borders) is ignored (see :data:`daliloader.catalog.VOC_CLASSES`).
        ``indexed=False``: the same classes in single-channel id masks (0-20, 255 ignored), as DeepLab's
        ``SegmentationClassRaw`` and the TFRecords of DeepLab and TF Model Garden store them.
        ``form="colours"``: the masks are colour pictures of the palette's colours (a palette expanded,
        as some copies of VOC store them), read by colour, the border colour (index 255's) ignored. By
        name: ``"voc"`` (any of them, by the masks: palette PNGs, colours, or ids) and ``"voc-ids"``."""
        if form == "colours":
            pal = voc_colormap()
            cm = cls.from_palette(pal[:len(VOC_CLASSES)], VOC_CLASSES, ignore_index=VOC_IGNORE,
                                  source="Pascal VOC 2012 (colours)", ignore_colors=pal[VOC_IGNORE:VOC_IGNORE + 1])
            return replace(cm, catalogue="voc")
        if form not in (None, "palette", "ids"):
            raise SpecError(f"form={form!r}: VOC's masks are palette PNGs ('palette'), colour pictures ('colours') "
                            "or ids ('ids')")
        if not indexed or form == "ids":
            cm = cls.from_ids(len(VOC_CLASSES), VOC_CLASSES, ignore_index=VOC_IGNORE, source="Pascal VOC 2012 (ids)")
            return replace(cm, catalogue="voc-ids")
        cm = cls.from_palette_indices(voc_colormap(), len(VOC_CLASSES), VOC_CLASSES, ignore_index=VOC_IGNORE,
                                      source="Pascal VOC 2012")
        return replace(cm, catalogue="voc")

    @classmethod
    def ade20k(cls, reduced: bool = False) -> ClassMap:
        """ADE20K (``ADEChallengeData2016``, and TFDS's ``scene_parse150``) masks: 8-bit values 1-150 are
        the classes 0-149, and 0 ("other objects") is ignored (see
        :data:`daliloader.catalog.ADE20K_CLASSES`). ``reduced=True``: masks whose values were already
        shifted down (mmsegmentation's ``reduce_zero_label``): 0-149 the classes, 255 ignored. By name:
        ``"ade20k"`` and ``"ade20k-reduced"``."""
        if reduced:
            cm = cls.from_ids(len(ADE20K_CLASSES), ADE20K_CLASSES, ignore_index=255, source="ADE20K (reduced)")
            return replace(cm, catalogue="ade20k-reduced")
        table = {0: 255, **{k: k - 1 for k in range(1, len(ADE20K_CLASSES) + 1)}}
        return replace(cls.from_ids(table, ADE20K_CLASSES, ignore_index=255, source="ADE20K"), catalogue="ade20k")

    @classmethod
    def ade20k_instances(cls) -> ClassMap:
        """ADE20K's 100 instance categories (see :data:`daliloader.catalog.ADE20K_INSTANCE_CLASSES`), as the
        red channel of MIT's ``annotations_instance`` masks, which TFDS's ``scene_parse150`` stores, holds
        them: 1-100 -> classes 0-99; 0 (no instance: the "stuff" classes such as wall, floor and sky) is
        ignored. By name: ``"ade20k-instances"``; with ``mask_channel=0`` for those masks."""
        table = {0: 255, **{k: k - 1 for k in range(1, len(ADE20K_INSTANCE_CLASSES) + 1)}}
        cm = cls.from_ids(table, ADE20K_INSTANCE_CLASSES, ignore_index=255, source="ADE20K instance categories")
        return replace(cm, catalogue="ade20k-instances")

    @classmethod
    def camvid(cls) -> ClassMap:
        """CamVid's 32 classes in colour masks, as its ``class_dict.csv`` gives them (see
        :data:`daliloader.catalog.CAMVID_CLASSES`)."""
        cm = cls.from_palette([c[1:] for c in CAMVID_CLASSES], [c[0] for c in CAMVID_CLASSES], source="CamVid palette")
        return replace(cm, catalogue="camvid")

    @classmethod
    def oxford_iiit_pet(cls) -> ClassMap:
        """The Oxford-IIIT Pet trimaps (TFDS's ``oxford_iiit_pet``): 1 pet, 2 background, 3 border ->
        classes 0-2, as TensorFlow's segmentation tutorial reads them (see
        :data:`daliloader.catalog.OXFORD_PETS_CLASSES`); to ignore the border instead, pass
        ``ClassMap.from_ids({1: 0, 2: 1}, ["pet", "background"])``."""
        cm = cls.from_ids({k + 1: k for k in range(len(OXFORD_PETS_CLASSES))}, OXFORD_PETS_CLASSES,
                          ignore_index=255, source="Oxford-IIIT Pet trimaps")
        return replace(cm, catalogue="oxford_iiit_pet")

    @classmethod
    def named(cls, name: str) -> ClassMap:
        """A published class table by its catalogue name (:data:`CATALOGUE`, case and ``-`` or ``_``
        aside); an unknown name is refused, listing the names."""
        key = catalogue_name(name)
        if key is None:
            raise DataError(f"no class table is named {name!r}; the known ones: {', '.join(CATALOGUE)} (or give a "
                            "class_dict.csv, a class count or a ClassMap)")
        table = CATALOGUE[key]
        return getattr(cls, table.make)(**table.options)

    def _check_ignore(self) -> None:
        if not self.num_classes <= self.ignore_index < _LUT_KEYS:
            raise DataError(
                f"ignore_index must be >= the number of classes ({self.num_classes}) and < 65536; "
                f"got {self.ignore_index}"
            )

    # ----------------------------------------------------------------- properties
    @property
    def num_classes(self) -> int:
        return len(self.names)

    @property
    def label_dtype(self) -> np.dtype:
        """Smallest dtype that holds every class and the ignore index (``ignore_index < 65536``): the
        labels' type through every backend's graph, in which DALI's ``lookup_table`` gives them and the
        host hand-over (``GraphSpec.host_finish``) passes them to TensorFlow, a byte per pixel where it can."""
        return np.dtype(np.uint8) if self.ignore_index <= 255 else np.dtype(np.uint16)

    @property
    def mask_channels(self) -> int:
        """The channels the masks are read with: 3 (colours, or ids in one channel of colour masks), or 1."""
        return 3 if self.kind is MaskKind.RGB or self.mask_channel is not None else 1

    def palette(self) -> np.ndarray:
        """(C, 3) uint8 colours for drawing masks; id maps get a fixed distinct palette."""
        if self.colors is not None:
            return self.colors
        rng = np.random.default_rng(12345)
        return rng.integers(40, 256, size=(self.num_classes, 3), dtype=np.uint8)

    # ----------------------------------------------------------------- tables
    def rgb_tables(self) -> RGBTables:
        """The lookup tables DALI uses for colour masks (see :class:`RGBTables`)."""
        if self.kind is not MaskKind.RGB:
            raise SpecError(f"{self.source}: rgb_tables() is for colour masks; this map reads ids (id_table())")
        c = self.colors.astype(np.int64)
        rg = c[:, 0] * 256 + c[:, 1]
        pairs = [int(p) for p in np.unique(rg)]
        groups = []
        for first in range(0, len(pairs), PAIRS_PER_GROUP):
            number = {p: i * 256 for i, p in enumerate(pairs[first:first + PAIRS_PER_GROUP])}
            colours = {number[int(k)] + int(b): cls for cls, (k, b) in enumerate(zip(rg, c[:, 2])) if int(k) in number}
            groups.append(RGBGroup(
                LookupTable(tuple(number), tuple(number.values()), PAIRS_PER_GROUP * 256),
                LookupTable(tuple(colours), tuple(colours.values()), self.ignore_index)))
        return RGBTables(tuple(groups), len(pairs))

    def id_table(self) -> LookupTable:
        """The id lookup table (kind ``ID``): each known id to its class, every other id to the ignore index."""
        if self.kind is not MaskKind.ID:
            raise SpecError(f"{self.source}: id_table() is for id masks; this map reads colours (rgb_tables())")
        keys = tuple(sorted(self.id_to_class))
        return LookupTable(keys, tuple(self.id_to_class[k] for k in keys), self.ignore_index)

    # ----------------------------------------------------------------- numpy
    @cached_property
    def lookup_table(self) -> np.ndarray:
        """Packed colour (:func:`packed_colour`, or id) -> class index, ``ignore_index`` elsewhere.

        Built on first use (16 MB for colour maps) and kept: the CPU backends' one read per pixel.
        """
        size = 1 << 24 if self.kind is MaskKind.RGB else _LUT_KEYS
        lut = np.full(size, self.ignore_index, dtype=self.label_dtype)
        if self.kind is MaskKind.RGB:
            lut[_pack(self.colors)] = np.arange(self.num_classes)
        else:
            table = self.id_table()
            lut[list(table.keys)] = table.values
        return lut

    def map_mask(self, mask: np.ndarray) -> np.ndarray:
        """Map a decoded mask (H, W, 3) RGB or (H, W) ids to class indices, in numpy.

        This is the reference the DALI graph is tested against, and the OpenCV backend's kernel.
        """
        if self.kind is MaskKind.RGB:
            if mask.ndim != 3 or mask.shape[2] < 3:
                raise DataError(f"expected an RGB colour mask, got shape {mask.shape}")
            return self.lookup_table[_pack(mask[..., :3])]
        return self.lookup_table[self.ids(mask)]

    def ids(self, mask: np.ndarray) -> np.ndarray:
        """The (H, W) ids of a decoded id mask: itself, or its channel :attr:`mask_channel` (else 0)."""
        return mask if mask.ndim == 2 else mask[..., self.mask_channel or 0]

    def unknown_values(self, mask: np.ndarray) -> list[tuple[tuple[int, ...] | int, int]]:
        """Mask colours (or ids) that the map does not know, with their pixel counts, most frequent first.

        Ids that the map sends to ``ignore_index`` on purpose (Cityscapes' void ids) are known.
        """
        codes = _pack(mask[..., :3]) if self.kind is MaskKind.RGB else self.ids(mask)
        codes = codes[self.lookup_table[codes] == self.ignore_index]
        if self.kind is MaskKind.ID and codes.size:
            codes = codes[~np.isin(codes, list(self.id_to_class))]
        if self.kind is MaskKind.RGB and self.ignore_colors is not None and codes.size:
            codes = codes[~np.isin(codes, _pack(self.ignore_colors))]
        values, counts = np.unique(codes, return_counts=True)
        order = np.argsort(-counts, kind="stable")
        if self.kind is MaskKind.RGB:
            return [((int(v) >> 16, (int(v) >> 8) & 255, int(v) & 255), int(c))
                    for v, c in zip(values[order], counts[order])]
        return [(int(v), int(c)) for v, c in zip(values[order], counts[order])]

    def ignore_colour(self) -> np.ndarray:
        """The colour ignored pixels are drawn in: of black, white, magenta, cyan, yellow and grey, the one
        farthest from every class colour (black next to Cityscapes' dark blue truck, (0, 0, 70), would
        look like it); where a palette holds all six, the first colour it does not hold. Never a class
        colour, so that a mask drawn with it reads back as ignored (:meth:`to_mask`)."""
        candidates = np.array([(0, 0, 0), (255, 255, 255), (255, 0, 255), (0, 255, 255), (255, 255, 0),
                               (128, 128, 128)], np.int64)
        palette = self.palette().astype(np.int64)
        nearest = np.sqrt(((candidates[:, None] - palette[None]) ** 2).sum(-1)).min(axis=1)
        if nearest.max() == 0:
            taken = set(map(tuple, palette.tolist()))
            return np.array(next(c for c in itertools.product(range(256), repeat=3) if c not in taken), np.uint8)
        return candidates[int(np.argmax(nearest))].astype(np.uint8)

    def reading(self) -> list:
        """What decides the labels this map reads from a mask, as JSON values: its kind, its id table or
        colours, ignore index and ignored colours, the channel it reads, the palette it expects. What is
        kept of masks read with a map (the mask cache, the bench's copies) is keyed by it."""
        table = self.colors.tolist() if self.kind is MaskKind.RGB else sorted(self.id_to_class.items())
        return [str(self.kind), table, self.ignore_index, self.mask_channel,
                None if self.ignore_colors is None else self.ignore_colors.tolist(),
                None if self.palette_masks is None else self.palette_masks.tolist()]

    def to_mask(self, labels: np.ndarray) -> np.ndarray:
        """Class indices (H, W) -> a mask in this map's own encoding, which :meth:`map_mask` reads back to
        the same indices: the class colours (RGB), or the raw ids (the smallest id of each class: for
        Cityscapes, train ids back to label ids, as its evaluation scripts read them). The ignore index
        becomes the map's first ignore colour (else :meth:`ignore_colour`), or :meth:`ignore_id`: never a
        class's colour or id (binary masks read with ``{0: 0, 255: 1}`` must not write ignored pixels as
        255, the foreground)."""
        idx = np.where(labels < self.num_classes, labels, self.num_classes)
        if self.kind is MaskKind.RGB:
            ignore = self.ignore_colors[0] if self.ignore_colors is not None and len(self.ignore_colors) else \
                self.ignore_colour()
            return np.concatenate([self.colors, np.asarray(ignore, np.uint8)[None]])[idx]
        first = {}
        for raw in sorted(self.id_to_class):
            first.setdefault(self.id_to_class[raw], raw)
        table = [first.get(k, k) for k in range(self.num_classes)] + [self.ignore_id()]
        return np.asarray(table, np.uint16 if max(table) > 255 else np.uint8)[idx]

    def ignore_id(self) -> int:
        """The raw id :meth:`to_mask` writes for ignored pixels, which :meth:`map_mask` reads back as
        ignored: the smallest id the map ignores (Cityscapes' 0, "unlabeled"), else the ignore index where
        it is no class's id, else the smallest id no class has (ids not in the map read as ignored)."""
        ignored = [raw for raw, index in self.id_to_class.items() if index == self.ignore_index]
        if ignored:
            return min(ignored)
        if self.ignore_index not in self.id_to_class:
            return self.ignore_index
        return next(raw for raw in itertools.count() if raw not in self.id_to_class)

    def colorize(self, labels: np.ndarray) -> np.ndarray:
        """Class indices (H, W) -> RGB image; the ignore index in :meth:`ignore_colour`."""
        pal = np.concatenate([self.palette(), self.ignore_colour()[None]])
        idx = np.where(labels < self.num_classes, labels, self.num_classes)
        return pal[idx]


@dataclass(frozen=True)
class PublishedTable:
    """A published class table, as ``classes="NAME"`` names it: the :class:`ClassMap` constructor that
    makes it (``make``, with ``options``); the dataset it is a form of (``family``: tables of one dataset
    are checked against each other, a layout that publishes one refusing another:
    ``daliloader.data.refuse_other_member``); the other form of that dataset's table, in which its masks
    are also found (``other_form``: a map of one form is checked at load time against masks of the other,
    :mod:`daliloader.forms`); and the name ending of the mask files it reads, where its dataset ships
    several id forms side by side (``mask_ending``: gtFine after cityscapesScripts'
    createTrainIdLabelImgs holds labelIds and labelTrainIds)."""

    make: str
    options: Mapping = field(default_factory=dict)
    family: str | None = None
    other_form: str | None = None
    mask_ending: str = ""


#: The published class tables by name: what ``classes="cityscapes"`` (``--classes cityscapes``) means.
#: Names match with case, ``-`` and ``_`` aside.
CATALOGUE = {
    "cityscapes": PublishedTable("cityscapes", family="cityscapes", other_form="cityscapes-trainids",
                                 mask_ending="_gtFine_labelIds"),
    "cityscapes-trainids": PublishedTable("cityscapes", {"ids": "train"}, family="cityscapes", other_form="cityscapes",
                                          mask_ending="_gtFine_labelTrainIds"),
    "voc": PublishedTable("voc", family="voc", other_form="voc-ids"),
    "voc-ids": PublishedTable("voc", {"indexed": False}, family="voc", other_form="voc"),
    "ade20k": PublishedTable("ade20k", family="ade20k", other_form="ade20k-reduced"),
    "ade20k-reduced": PublishedTable("ade20k", {"reduced": True}, family="ade20k", other_form="ade20k"),
    "ade20k-instances": PublishedTable("ade20k_instances", family="ade20k"),
    "camvid": PublishedTable("camvid"),
    "oxford_iiit_pet": PublishedTable("oxford_iiit_pet"),
}


def published_table(name: str | None) -> PublishedTable | None:
    """The :data:`CATALOGUE` entry of a catalogue name as the catalogue spells it (``ClassMap.catalogue``),
    None for None or any other name."""
    return CATALOGUE.get(name or "")


def family_of(name: str | None) -> str | None:
    """The dataset whose table the catalogue name ``name`` is a form of (``PublishedTable.family``)."""
    table = published_table(name)
    return table.family if table is not None else None


def catalogue_of(classes) -> str | None:
    """The catalogue name of ``classes``: a catalogue name, or a ClassMap of a published table; else None."""
    if isinstance(classes, ClassMap):
        return classes.catalogue
    return catalogue_name(classes) if is_named(classes) else None


def _normal(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def catalogue_name(name) -> str | None:
    """The :data:`CATALOGUE` name that ``name`` spells (case, ``-`` and ``_`` aside), or None."""
    if not isinstance(name, str):
        return None
    return next((key for key in CATALOGUE if _normal(key) == _normal(name)), None)


def is_named(classes) -> bool:
    """Whether ``classes`` is a catalogue name (:data:`CATALOGUE`) rather than a file."""
    return catalogue_name(classes) is not None and not Path(classes).is_file()


def mask_ending(classes) -> str:
    """The name ending of the masks ``classes`` (a ClassMap or a catalogue name, as ``classes=`` takes it)
    reads, where the pairing must choose between forms (``PublishedTable.mask_ending``); "" for any
    other."""
    table = published_table(classes.catalogue if isinstance(classes, ClassMap) else catalogue_name(classes))
    return table.mask_ending if table is not None else ""


def ending_table(suffix: str) -> ClassMap | None:
    """The published table whose masks carry this name ending (``PublishedTable.mask_ending``:
    Cityscapes' labelIds and trainIds), None for any other ending."""
    names = [name for name, table in CATALOGUE.items() if table.mask_ending and table.mask_ending == suffix]
    return ClassMap.named(names[0]) if names else None


def default_ignore(num_classes: int) -> int:
    """The ignore index of a map that names none: 255, or 65535 where 255 would be a class."""
    return 255 if num_classes <= 255 else _LUT_KEYS - 1


def remap_advice(table: Mapping[int, int]) -> str:
    """The remap ``table`` as a message advises it, in the Python API's words and the command line's:
    ``classes={0: 0, 255: 1} (--classes 0:0,255:1)`` (``--classes`` reads ``VALUE:CLASS`` pairs,
    comma-separated)."""
    return f"classes={dict(table)!r} (--classes {','.join(f'{k}:{v}' for k, v in table.items())})"


def _refuse_ignore_as_class(table: Mapping[int, int], ignore_index: int) -> None:
    """A remap table whose classes would run through ``ignore_index`` (``{7: 0, 26: 1}`` with
    ``ignore_index=1``): the ids mapped there are meant as a class, and would load as ignored."""
    values = set(table.values())
    if ignore_index in values and ignore_index < len(values):
        ids = sorted(k for k, v in table.items() if v == ignore_index)
        raise DataError(f"ignore_index={ignore_index} is also the class that the table gives to id(s) "
                        f"{', '.join(map(str, ids[:5]))}: they would load as ignored. The classes are 0..C-1 and the "
                        "ignore index lies above them: leave ignore_index out (255), or map the ids you want ignored "
                        f"to it explicitly, e.g. {{{ids[0]}: 255}}")


def _csv_rows(path: Path) -> list[tuple[int, list[str]]]:
    """The ``(line number, fields)`` of a ``class_dict.csv``'s class rows, blank lines left out, after its
    header ``name,r,g,b`` is checked."""
    if not path.is_file():
        raise DataError(f"class map file {path} does not exist")
    with path.open(newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise DataError(f"{path}: the file is empty; expected a header 'name,r,g,b' and one row per class")
    header = [h.strip().lower() for h in rows[0]]
    if header[:4] != ["name", "r", "g", "b"]:
        raise DataError(f"{path}:1: expected the header 'name,r,g,b', found {','.join(rows[0])!r}")
    classes = [(lineno, row) for lineno, row in enumerate(rows[1:], start=2) if any(c.strip() for c in row)]
    if not classes:
        raise DataError(f"{path}: a header and no class: expected one row 'name,r,g,b' per class")
    return classes


def _csv_class(path: Path, lineno: int, row: list[str]) -> tuple[str, list[int]]:
    """One class row's name and colour, or an error naming the line."""
    if len(row) < 4:
        raise DataError(f"{path}:{lineno}: expected 4 fields 'name,r,g,b', found {len(row)}: {row!r}")
    try:
        rgb = [int(c) for c in row[1:4]]
    except ValueError:
        raise DataError(f"{path}:{lineno}: r,g,b must be integers 0-255, found {row[1:4]!r}") from None
    if not all(0 <= c <= 255 for c in rgb):
        raise DataError(f"{path}:{lineno}: r,g,b must lie in 0-255, found {rgb}")
    return row[0].strip(), rgb


def _refuse_repeated_names(path: Path, lines: list[int], names: list[str]) -> None:
    """A class name given twice (case aside), named by both of its lines."""
    seen: dict[str, int] = {}
    for lineno, name in zip(lines, names):
        if name.lower() in seen:
            raise DataError(f"{path}:{lineno}: the class name {name!r} is already on line {seen[name.lower()]}; "
                            "give each class its own name")
        seen[name.lower()] = lineno


def _names(names: Sequence[str] | None, count: int, of: str) -> tuple[str, ...]:
    """The class names given (one per class: ``of`` says of what, for the message), or ``class_0``..."""
    if names is None:
        return tuple(f"class_{i}" for i in range(count))
    names = tuple(names)  # any iterable, a generator included
    if len(names) != count:
        raise DataError(f"{len(names)} names for {count} {of}")
    return names


def _same(a, b) -> bool:
    """Two field values equal: arrays by shape, type and value, anything else by ``==``."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and np.array_equal(a, b))
    return a == b


def check_class_count(count: int) -> None:
    """A number of classes a map can hold, else a DataError."""
    if not 0 < count < _LUT_KEYS:
        raise DataError(f"the number of classes must be in 1..65535, got {count}")


def _count_table(count: int, ignore_index: int | None) -> tuple[dict[int, int], int]:
    """The id table of ``count`` classes (ids ``0..count-1``) and its ignore index, which lies above them."""
    check_class_count(count)
    if ignore_index is None:
        ignore_index = default_ignore(count)
    if not is_integer(ignore_index) or not count <= ignore_index < _LUT_KEYS:
        raise DataError(f"ignore_index={ignore_index!r} with {count} classes: the ignore index is no "
                        f"class, so it must lie in {count}..65535. Leave it out (255), or, where an id "
                        f"below {count} means 'ignore' (ADE20K's 0), map the ids yourself: "
                        "ClassMap.from_ids({0: 255, 1: 0, 2: 1, ...})")
    table = {i: i for i in range(count)}
    table[ignore_index] = ignore_index
    return table, ignore_index


def _remap_table(id_to_class: Mapping[int, int], ignore_index: int | None) -> tuple[dict[int, int], int]:
    """A remap table ``{raw_id: class}`` as ints, and its ignore index: 255 where none is given (also
    where the table maps ids to 255), 65535 above 255 classes. Without an ignore index, a table that maps
    ids to 255 while its other classes reach 254 is refused (:func:`_refuse_ambiguous_255`)."""
    given = dict(id_to_class)
    if not all(is_integer(k) and is_integer(v) for k, v in given.items()):
        bad = next((k, v) for k, v in given.items() if not (is_integer(k) and is_integer(v)))
        raise DataError(f"a remap table maps integer mask ids to integer classes; got {bad[0]!r}: {bad[1]!r} in "
                        f"{given!r:.80}")
    table = {int(k): int(v) for k, v in given.items()}
    if ignore_index is None:
        _refuse_ambiguous_255(table)
        ignore_index = default_ignore(max((v for v in table.values() if v != 255), default=0) + 1)
    else:
        _refuse_ignore_as_class(table, ignore_index)
    for k in table:
        if not 0 <= k < _LUT_KEYS:
            raise DataError(f"mask id {k} is outside 0-65535")
    return table, ignore_index


def _refuse_ambiguous_255(table: Mapping[int, int]) -> None:
    """Refuse a table (without an ignore index) that maps ids to 255 while its other classes reach 254:
    255 is then a class as much as the usual ignore value. ``{i: i for i in range(256)}`` read as 255
    classes and ignored id 255, and ADE20K's ``{0: 255, k: k - 1}`` over 300 classes merged id 0 into
    class 255, both silently."""
    ids = sorted(k for k, v in table.items() if v == 255)
    top = max((v for v in table.values() if v != 255), default=0)
    if ids and top >= 254:
        raise DataError(f"the remap table maps id(s) {', '.join(map(str, ids[:5]))} to 255, and its other classes "
                        f"reach {top}: is 255 a class, or the ignore value? If those ids are to be ignored, leave "
                        "them out of the table (ids it does not list are ignored); if 255 is a class, pass "
                        "ClassMap.from_ids(table, ignore_index=65535)")


def _class_count(table: Mapping[int, int], ignore_index: int) -> int:
    """The number of classes an id table maps to, which must be ``0..C-1`` without gaps."""
    classes = sorted({v for v in table.values() if v != ignore_index})
    if not classes or classes != list(range(len(classes))):
        gaps = sorted(set(range(max(classes, default=0) + 1)) - set(classes))[:10]
        raise DataError(f"class indices must be 0..C-1 without gaps (ignore_index={ignore_index} aside); got "
                        f"{len(classes)} classes from {classes[0] if classes else None} to "
                        f"{classes[-1] if classes else None}" + (f", missing {gaps}" if gaps else ""))
    return len(classes)


def packed_colour(rgb):
    """Each pixel's colour as one integer, ``r * 65536 + g * 256 + b``: the key of
    :attr:`ClassMap.lookup_table`. ``rgb``: integers of at least 32 bits ``[..., 3]`` (numpy or TensorFlow)."""
    return rgb[..., 0] * 65536 + rgb[..., 1] * 256 + rgb[..., 2]


def _pack(rgb: np.ndarray) -> np.ndarray:
    return packed_colour(rgb.astype(np.int64))


def as_classmap(classes: ClassMap | str | Path | int | Mapping[int, int] | Sequence) -> ClassMap:
    """Accept what users naturally pass: a ClassMap, a catalogue name (:data:`CATALOGUE`), a
    class_dict.csv path, a class count or a remap."""
    if isinstance(classes, ClassMap):
        return classes
    if is_named(classes):
        return ClassMap.named(classes)
    if isinstance(classes, (str, Path, buckets.BucketPath)):
        return ClassMap.from_csv(classes)
    if isinstance(classes, (int, np.integer, Mapping)):
        return ClassMap.from_ids(classes)
    if isinstance(classes, Sequence | np.ndarray) and len(classes) and all(isinstance(c, str) for c in classes):
        raise DataError(f"classes={list(classes)[:4]}{'...' if len(classes) > 4 else ''} looks like class names: "
                        f"{CLASSES_TAKES}. Names go with a table: ClassMap.from_ids({len(classes)}, "
                        f"names=[...]) for id masks, ClassMap.from_palette(colours, names=[...]) for colour masks")
    if not isinstance(classes, Sequence | np.ndarray):
        raise DataError(f"classes={classes!r} ({type(classes).__name__}): {CLASSES_TAKES}")
    return ClassMap.from_palette(classes)


#: What ``classes=`` takes, for the messages that refuse something else.
CLASSES_TAKES = ("classes takes a ClassMap, a catalogue name (e.g. 'cityscapes', 'voc'), a class_dict.csv path, "
                 "a class count (an integer), an id table {id: class} or a palette [(r, g, b), ...]")
