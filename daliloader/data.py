"""SegmentationData: the image/mask pairs of a dataset and its ClassMap."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from .classes import ClassMap, as_classmap
from .errors import DataError
from .manifest import PACKS, index_samples, load_manifest, prepared_classes

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
MASK_EXTENSIONS = (".png", ".bmp", ".tif", ".tiff")
#: Mask-name suffixes tried, in this order, when ``mask_suffix`` is not given.
COMMON_MASK_SUFFIXES = ("", "_L", "_mask", "_masks", "_label", "_labels", "_gt", "_seg",
                        "_segmentation", "_labelIds", "_gtFine_labelIds", "-mask", "-label")


@dataclass(frozen=True)
class Packs:
    """Webdataset tars ("packs") holding every pair of a prepared dataset (see :mod:`daliloader.manifest`):
    sample ``i`` is ``NNNNNNN.<image ext>``, ``NNNNNNN.<mask_ext>`` and ``NNNNNNN.<index_ext>`` (int64
    ``i``), and the tars hold the samples in index order; ``indexes`` are DALI's index files, one per tar.

    (A "shard", in daliloader, is a worker's part of the data: ``shard_id`` of ``num_shards``.)"""

    tars: tuple[str, ...]
    indexes: tuple[str, ...]
    image_exts: tuple[str, ...]
    mask_ext: str
    index_ext: str


@dataclass(frozen=True)
class SegmentationData:
    """Paired image and mask files plus the ClassMap that reads the masks.

    ``images[i]`` and ``masks[i]`` belong together; the order is sorted by the images' relative paths.
    ``packs``: the same pairs packed in webdataset tars, which the DALI backends then read instead of
    the files (:meth:`from_prepared` with ``packs=True``).
    """

    images: tuple[str, ...]
    masks: tuple[str, ...]
    classes: ClassMap
    packs: Packs | None = None

    def __post_init__(self):
        if len(self.images) != len(self.masks):
            raise DataError(f"{len(self.images)} images but {len(self.masks)} masks")
        if not self.images:
            raise DataError("the dataset is empty: no image/mask pairs")

    def __len__(self) -> int:
        return len(self.images)

    @property
    def shards(self) -> Packs | None:
        """The packs, under their former name."""
        return self.packs

    def __repr__(self) -> str:
        packed = f", {len(self.packs.tars)} packs" if self.packs else ""
        return (f"SegmentationData({len(self)} pairs, {self.classes.num_classes} classes, "
                f"kind={self.classes.kind}{packed})")

    @classmethod
    def from_dirs(
        cls,
        images: str | Path,
        masks: str | Path,
        classes: "ClassMap | str | Path | int | dict",
        mask_suffix: str | None = None,
        image_suffix: str = "",
    ) -> "SegmentationData":
        """Pair every image under ``images`` with the mask of the same name under ``masks``.

        Files are matched by relative folder and stem. A mask may carry a suffix (CamVid's
        ``f001_L.png`` for ``f001.png``): pass ``mask_suffix``, or leave it ``None`` to detect one of
        :data:`COMMON_MASK_SUFFIXES`. ``image_suffix`` is stripped from image stems before matching
        (Cityscapes: ``image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds"``).
        Any file left without a partner is an error that lists it.
        """
        pairing = pair_files(images, masks, mask_suffix, image_suffix)
        classmap = as_classmap(classes)
        if pairing.unpaired_images or pairing.unpaired_masks:
            lines = [f"  image without mask: {p}" for p in pairing.unpaired_images[:20]]
            lines += [f"  mask without image: {p}" for p in pairing.unpaired_masks[:20]]
            more = len(pairing.unpaired_images) + len(pairing.unpaired_masks) - len(lines)
            if more > 0:
                lines.append(f"  ... and {more} more")
            hint = (f"mask suffix {pairing.mask_suffix!r} was detected; pass mask_suffix= if that is wrong"
                    if mask_suffix is None else f"mask_suffix={mask_suffix!r}")
            raise DataError(
                f"{len(pairing.unpaired_images)} image(s) and {len(pairing.unpaired_masks)} mask(s) have no "
                f"partner ({hint}):\n" + "\n".join(lines)
            )
        pairs = pairing.pairs
        return cls(tuple(i for i, _ in pairs), tuple(m for _, m in pairs), classmap)

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[str, str]], classes) -> "SegmentationData":
        """Explicit (image, mask) pairs, for layouts that ``from_dirs`` does not cover."""
        for img, mask in pairs:
            for f in (img, mask):
                if not Path(f).is_file():
                    raise DataError(f"file {f} does not exist")
        return cls(tuple(str(i) for i, _ in pairs), tuple(str(m) for _, m in pairs), as_classmap(classes))

    @classmethod
    def from_folder(cls, root: str | Path, split: str = "train") -> "SegmentationData":
        """A dataset in one of the common layouts under ``root`` (see :func:`find_layout`)."""
        return cls.from_dirs(**find_layout(root, split))

    @classmethod
    def from_prepared(cls, root: str | Path, packs: bool = False, *, shards: bool | None = None) -> "SegmentationData":
        """A dataset written by ``daliloader prepare`` / :func:`daliloader.prepare.prepare`: 8-bit
        class-index masks (ids ``0..C-1`` are the classes, ``ignore_index`` stays), read by every backend.

        ``packs=True`` (a copy prepared with ``--packs N``): the DALI backends read the webdataset tars
        with one ``fn.readers.webdataset`` (sequential reads, image and mask from the same record), which
        shuffles within a buffer of samples instead of drawing a permutation of the whole dataset per
        epoch. ``opencv`` and ``tfdata`` read the files. ``shards=`` is the former name of ``packs=``.
        """
        packs = packs or bool(shards)
        manifest = load_manifest(root)
        root = Path(root)
        data = cls.from_pairs([(str(root / i), str(root / m)) for i, m in manifest["pairs"]],
                              prepared_classes(manifest))
        if not packs:
            return data
        p = manifest[PACKS]
        if not p:
            raise DataError(f"{root} was prepared without shards, the webdataset packs: run `daliloader prepare DATA "
                            "NEW_OUT --packs N` to write them, or load it with packs=False")
        found = Packs(tuple(str(root / t) for t in p["tars"]), tuple(str(root / x) for x in p["indexes"]),
                      tuple(p["image_exts"]), p["mask_ext"], p["index_ext"])
        for f in found.tars + found.indexes:
            if not Path(f).is_file():
                raise DataError(f"pack file {f} is missing: the prepared copy {root} is incomplete")
        packed_samples = sum(index_samples(f) for f in found.indexes)
        if packed_samples != len(data):
            raise DataError(f"the pack indexes under {root / PACKS} list {packed_samples} samples, the manifest "
                            f"{len(data)} pairs: run `daliloader prepare DATA NEW_OUT --packs N --verify` again")
        return replace(data, packs=found)

    def subset(self, indices: Sequence[int]) -> "SegmentationData":
        """The pairs at ``indices``, read from their files (packs hold the whole dataset)."""
        return SegmentationData(tuple(self.images[i] for i in indices),
                                tuple(self.masks[i] for i in indices), self.classes)


@dataclass(frozen=True)
class Pairing:
    """The outcome of matching the files of an image folder with those of a mask folder."""

    pairs: list[tuple[str, str]]
    unpaired_images: list[str]
    unpaired_masks: list[str]
    mask_suffix: str


def pair_files(images: str | Path, masks: str | Path, mask_suffix: str | None = None,
               image_suffix: str = "") -> Pairing:
    """Match images and masks by relative folder and stem (see :meth:`SegmentationData.from_dirs`).

    Files left without a partner are listed, not raised: ``daliloader check`` reports them.
    """
    image_dir, mask_dir = Path(images), Path(masks)
    for what, d in (("images", image_dir), ("masks", mask_dir)):
        if not d.is_dir():
            raise DataError(f"{what} folder {d} does not exist or is not a folder")
    image_files = _list(image_dir, IMAGE_EXTENSIONS)
    mask_files = _list(mask_dir, MASK_EXTENSIONS)
    if not image_files:
        raise DataError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) found under {image_dir}")
    if not mask_files:
        raise DataError(f"no masks ({', '.join(MASK_EXTENSIONS)}) found under {mask_dir}")

    image_keys = {_key(p, image_dir, image_suffix): p for p in image_files}
    if len(image_keys) != len(image_files):
        raise DataError(f"{image_dir}: two images share a name (differing only in extension)")
    suffixes = [mask_suffix] if mask_suffix is not None else list(COMMON_MASK_SUFFIXES)
    best = max(suffixes, key=lambda s: _count_pairs(mask_files, mask_dir, s, image_keys))
    mask_keys = {}
    for p in mask_files:
        k = _key(p, mask_dir, best)
        if k is not None:
            mask_keys.setdefault(k, []).append(p)

    pairs, unpaired_images = [], []
    for k, img in sorted(image_keys.items()):
        found = mask_keys.pop(k, None)
        if not found:
            unpaired_images.append(str(img))
        elif len(found) > 1:
            raise DataError(f"image {img} has several masks: {', '.join(map(str, found))}")
        else:
            pairs.append((str(img), str(found[0])))
    paired_masks = {m for _, m in pairs}
    unpaired_masks = [str(p) for p in mask_files if str(p) not in paired_masks]
    return Pairing(pairs, unpaired_images, unpaired_masks, best)


def find_layout(root: str | Path, split: str = "train") -> dict:
    """The ``from_dirs`` arguments of a dataset folder in one of the layouts daliloader knows.

    * CamVid:     ``root/{split}``, ``root/{split}_labels``, ``root/class_dict.csv`` (also what
      ``daliloader synth`` writes)
    * plain:      ``root/images``, ``root/masks``, ``root/class_dict.csv``
    * Cityscapes: ``root/leftImg8bit/{split}``, ``root/gtFine/{split}`` (``*_gtFine_labelIds.png``)
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"dataset folder {root} does not exist or is not a folder")
    csv_path = root / "class_dict.csv"
    if (root / "leftImg8bit" / split).is_dir() and (root / "gtFine" / split).is_dir():
        return dict(images=root / "leftImg8bit" / split, masks=root / "gtFine" / split,
                    classes=ClassMap.cityscapes(), image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds")
    for images, masks in ((split, f"{split}_labels"), ("images", "masks")):
        if (root / images).is_dir() and (root / masks).is_dir():
            if not csv_path.is_file():
                raise DataError(f"{root}: found {images}/ and {masks}/ but no class_dict.csv "
                                "(a header 'name,r,g,b' and one row per class)")
            return dict(images=root / images, masks=root / masks, classes=csv_path)
    raise DataError(
        f"{root}: unknown dataset layout. Expected {split}/ + {split}_labels/ + class_dict.csv (CamVid), "
        f"images/ + masks/ + class_dict.csv, or leftImg8bit/{split}/ + gtFine/{split}/ (Cityscapes); "
        "or give the folders explicitly (--images, --masks, --classes)"
    )


def _list(folder: Path, extensions: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in extensions)


def _key(path: Path, root: Path, suffix: str) -> str | None:
    """Relative folder + stem with ``suffix`` removed; None when the stem lacks the suffix."""
    stem = path.stem
    if suffix:
        if not stem.endswith(suffix):
            return None
        stem = stem[: -len(suffix)]
    return str(path.parent.relative_to(root) / stem)


def _count_pairs(masks: list[Path], root: Path, suffix: str, image_keys: dict) -> int:
    return sum(1 for p in masks if _key(p, root, suffix) in image_keys)
