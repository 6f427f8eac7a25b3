"""Dataset folders as they are shipped: which layouts ``SegmentationData.from_folder`` recognises, how
each pairs its images with its masks, and which class map its masks need.

====================  =============================================  ================================
layout                detected by                                    masks, classes
====================  =============================================  ================================
Cityscapes            ``leftImg8bit/`` and ``gtFine/``               ``*_gtFine_labelIds.png`` -> the
                                                                     19 train ids (the other gtFine
                                                                     files are not masks)
Pascal VOC 2012       ``JPEGImages/``, ``SegmentationClass/``,       palette PNGs read by index: 21
                      ``ImageSets/Segmentation/`` (in ``VOC2012``,   classes, 255 ignored
                      also below ``VOCdevkit``; SBD's                (``SegmentationObject/`` unused);
                      ``SegmentationClassAug/`` for ``train_aug``)   colour or id masks as stored
ADE20K                ``images/`` and ``annotations/`` (in           8-bit 1-150 -> 0-149, 0 ignored;
                      ``ADEChallengeData2016``, also below it, or    masks reduced by one as stored
                      beside a file the download ships)
CamVid                ``{split}/``, ``{split}_labels/``,             colour masks, ``class_dict.csv``
                      ``class_dict.csv``
images + masks        ``images/`` and ``masks/`` (flat, or split     ``class_dict.csv`` if present,
                      folders ``images/train/`` + ``masks/train/``,  else id masks (``classes=``)
                      named for a split in any case: ``Val``,
                      ``training``, ``val2017``)
prepared copy         ``manifest.json`` (``daliloader prepare``)     8-bit class indices
====================  =============================================  ================================
"""

from __future__ import annotations

import glob
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import buckets, tfds_folder, tfrecord
from .classes import CATALOGUE, ClassMap
from .errors import DataError, user_stacklevel
from .manifest import MANIFEST, load_manifest
from .pairing import IMAGE_EXTENSIONS, Pairing, listing_problems, pair_files, refuse_incomplete

#: ADE20K names its splits "training" and "validation"; these names are accepted too.
_ADE_SPLITS = {"train": "training", "training": "training", "val": "validation", "validation": "validation",
               "test": "testing", "testing": "testing"}
#: What the ADE20K download (``ADEChallengeData2016.zip``) holds beside images/ and annotations/: one of
#: them, or the folder's own name, tells it from a folder of one's own with those two subfolders.
_ADE_MARKERS = ("objectInfo150.txt", "objectInfo150.csv", "sceneCategories.txt")
#: The words that make a subfolder of images/ + masks/ a split, in any case and with a year or number
#: after them (``Train``, ``val2017``), each word with those that name the same split (other subfolders
#: are part of the data: classes, sources).
_SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
                "test": "test", "testing": "test", "trainval": "trainval"}


@dataclass(frozen=True)
class Found:
    """A dataset folder as recognised: its layout, pairs, files without a partner, class map (None when
    the layout ships none: images + masks without ``class_dict.csv``) and the split read (None: the
    folder holds one). ``needs_classes``: why the folder cannot be read without ``classes=``."""

    layout: str
    root: Path
    pairing: Pairing
    classes: ClassMap | str | Path | None
    split: str | None = None
    needs_classes: str | None = None
    #: TFRecord layouts: the keys of image and mask (the pairs are RecordParts), and the records that
    #: are no pair (damaged, or without the keys), which the loaders refuse and ``check`` lists
    records: tfrecord.Records | None = None
    record_problems: list = field(default_factory=list)
    #: masks whose class is one channel of a colour picture (see ``SegmentationData.mask_channel``)
    mask_channel: int | None = None
    #: where the pairs were looked for, as the end of "no image/mask pairs ..." (the split's list file,
    #: the folders), for the message of an empty dataset (:func:`daliloader.errors.empty_dataset`)
    looked_in: str = ""
    #: the masks of every split the folder holds (the whole dataset), listed when called: what
    #: ``classes=None`` reads, and where ADE20K's form (raw or reduced) is judged, so that every split of
    #: one folder gets the same class map. None: the folder holds one split, or its layout publishes its
    #: classes in one form
    every_split: Callable[[], list] | None = field(default=None, compare=False, repr=False)


def find(root: str | Path, split: str | None = None, image_key: str | None = None,
         mask_key: str | None = None, mask_channel: int | None = None) -> Found:
    """Recognise the dataset under ``root`` and pair its ``split`` (None: the layout's training split,
    or the whole folder where it has no split folders; a TFDS folder takes TFDS's split expressions,
    see :func:`tfds`); a folder in no known layout is an error that lists every layout. ``root`` may
    also be a TFRecord file or a glob of them; ``image_key`` and ``mask_key`` name the features of
    TFRecord layouts (see :meth:`~daliloader.data.SegmentationData.from_tfrecord`), and
    ``mask_channel`` the channel of a TFDS folder's colour masks that holds the class (which lets a mask
    feature of three channels be found)."""
    keys = (image_key, mask_key)
    if buckets.is_url(root) and (glob.has_magic(str(root)) or _TFRECORD_NAME.search(str(root))):
        return _records(tfrecord.expand(str(root)), root, None, keys, "TFRecord files")
    root = buckets.as_path(root)
    _refuse_one_image(root)
    if root.is_file() or (not root.exists() and glob.has_magic(str(root))):
        return _records(tfrecord.expand(str(root)), root, None, keys, "TFRecord files")
    if not root.is_dir():
        raise DataError(f"dataset folder {root} does not exist or is not a folder")
    refuse_incomplete(root)
    for detect in (_prepared, _cityscapes, _voc, _ade20k, _camvid, _images_masks):
        found = detect(root, split)
        if found is not None:
            if keys != (None, None):
                raise DataError(f"{root} is a {found.layout} folder: image_key and mask_key (--image-key, "
                                "--mask-key) name the features of TFRecord files; leave them out")
            return found
    found = _tfds(root, split, keys, mask_channel)
    if found is None:
        found = _tfrecord_folder(root, split, keys)
    if found is not None:
        return found
    split = split or "train"
    raise DataError(
        f"{root}: unknown dataset layout. daliloader recognises:\n"
        f"  Cityscapes: leftImg8bit/{split}/ + gtFine/{split}/ (*_gtFine_labelIds.png)\n"
        f"  Pascal VOC 2012: VOC2012/ (or VOCdevkit/VOC2012/) with JPEGImages/, SegmentationClass/ and "
        f"ImageSets/Segmentation/{split}.txt\n"
        f"  ADE20K: ADEChallengeData2016/ (or a folder holding its objectInfo150.txt or sceneCategories.txt) "
        f"with images/{_ADE_SPLITS.get(split, split)}/ + annotations/{_ADE_SPLITS.get(split, split)}/\n"
        f"  CamVid: {split}/ + {split}_labels/ + class_dict.csv\n"
        f"  images/ + masks/ (+ class_dict.csv for colour masks), with or without split folders (images/{split}/)\n"
        f"  a prepared copy: {MANIFEST} (daliloader prepare)\n"
        f"  TFDS: a folder prepared by TensorFlow Datasets ({tfds_folder.INFO}, or version folders holding it)\n"
        f"  TFRecord files: a folder of them (a split: the files whose name holds it), a file or a glob\n"
        "or give the folders explicitly (SegmentationData.from_dirs, or --images/--masks/--classes)")


def _missing_split(root: Path, name: str, split: str, where: Path, available) -> DataError:
    splits = ", ".join(sorted(available)) or "none"
    return DataError(f"{root} is {name}, but has no split {split!r} ({where} is missing); its splits: {splits}")


def _refuse_missing_split(root: Path, name: str, split: str, images: Path, masks: Path, available) -> None:
    """Refuse ``split`` of a layout of split folders where its image or mask folder is missing, naming the
    one that is (the first where both are)."""
    for folder in (images, masks):
        if not folder.is_dir():
            raise _missing_split(root, name, split, folder, available)


def _prepared(root: Path, split: str | None) -> Found | None:
    if not (root / MANIFEST).is_file():
        return None
    manifest = load_manifest(root)
    made_from = manifest.source.split
    if split is not None and split != made_from and not (made_from and _split_word(split) and
                                                         _split_word(split) == _split_word(made_from)):
        of = f"split {made_from!r} of {manifest.source.data or 'its source'}" if made_from else "one split"
        raise DataError(f"{root} is a prepared copy of {of}, and holds only that: drop split={split!r}, or prepare "
                        f"split {split!r} into a folder of its own (daliloader prepare DATA OUT --split {split})")
    pairs = [(buckets.member(root / i), buckets.member(root / m)) for i, m in manifest.pairs]
    return Found("prepared copy", root, Pairing(pairs, [], [], ""), manifest.classes.prepared_map(), made_from)


def _refuse_one_image(root: Path) -> None:
    if root.is_file() and root.suffix.lower() in IMAGE_EXTENSIONS:
        raise DataError(f"{root} is one image: a dataset is a folder (or TFRecord files); for folders of images "
                        "and masks of your own, give both (SegmentationData.from_dirs, or --images/--masks)")


def _cityscapes(root: Path, split: str | None) -> Found | None:
    images, masks = root / "leftImg8bit", root / "gtFine"
    if not (images.is_dir() and masks.is_dir()):
        return None
    split = split or "train"
    _refuse_missing_split(root, "Cityscapes", split, images / split, masks / split,
                          {p.name for p in images.iterdir() if p.is_dir() and (masks / p.name).is_dir()})
    if split == "test":
        warnings.warn("Cityscapes' test labels are not public: the gtFine/test masks hold no classes, so every pixel "
                      "loads as the ignore index", stacklevel=user_stacklevel())
    pairing, table = _cityscapes_pairing(images / split, masks / split)
    return Found("Cityscapes", root, pairing, ClassMap.named(table), split,
                 looked_in=_under(images / split, masks / split))


def _cityscapes_pairing(images: Path, masks: Path) -> tuple[Pairing, str]:
    """The pairs of a Cityscapes split and the table of their masks. gtFine also holds *_color.png,
    *_instanceIds.png, *_polygons.json: the *_labelIds.png are the masks, or, in a copy that kept only
    what cityscapesScripts' createTrainIdLabelImgs made, the *_labelTrainIds.png."""
    try:
        ending = CATALOGUE["cityscapes"].mask_ending
        return pair_files(images, masks, ending, "_leftImg8bit", only_suffixed=True), "cityscapes"
    except DataError as labelids:
        try:
            ending = CATALOGUE["cityscapes-trainids"].mask_ending
            return (pair_files(images, masks, ending, "_leftImg8bit", only_suffixed=True),
                    "cityscapes-trainids")
        except DataError:
            raise labelids from None


def _voc(root: Path, split: str | None) -> Found | None:
    base = next((b for b in (root, root / "VOC2012", root / "VOCdevkit" / "VOC2012") if (b / "JPEGImages").is_dir()
                 and any((b / m).is_dir() for m in _VOC_MASKS)), None)
    if base is None:
        return None
    split = split or "train"
    listed = _voc_list(root, base, split)
    samples = [_voc_sample(line) for line in listed.read_text().splitlines() if line.strip()]
    pairs, missing = _voc_pairs(base, _voc_mask_folder(base, samples), samples, listed)
    if split == "test" and not pairs and missing:
        raise DataError(f"{root} is Pascal VOC, whose test masks are not public ({listed} lists images without "
                        "masks in SegmentationClass): there are no pairs to load; use split='val' to evaluate")
    return Found("Pascal VOC 2012", base, Pairing(pairs, [], [], "", missing), ClassMap.voc(), split,
                 looked_in=f"listed in {listed}")


def _voc_pairs(base: Path, masks: Path, samples: list[str], listed: Path) -> tuple[list, list]:
    """The pairs of VOC's ``samples`` (their masks in ``masks``), and the files missing of the others,
    each with the list that names it."""
    pairs, missing = [], []
    for sample in samples:
        image, mask = base / "JPEGImages" / f"{sample}.jpg", masks / f"{sample}.png"
        lacking = [(str(f), str(listed)) for f in (image, mask) if not f.is_file()]
        if lacking:
            missing += lacking
        else:
            pairs.append((buckets.member(image), buckets.member(mask)))
    return pairs, missing


def _voc_list(root: Path, base: Path, split: str) -> Path:
    """The list of VOC's ``split`` (in either folder of :data:`_VOC_LISTS`); a missing one is refused,
    naming the splits there are."""
    listed = next((f for f in (base / folder / f"{split}.txt" for folder in _VOC_LISTS) if f.is_file()), None)
    if listed is None:
        held = {p.stem for folder in _VOC_LISTS for p in (base / folder).glob("*.txt")}
        raise _missing_split(root, "Pascal VOC", split, base / _VOC_LISTS[0] / f"{split}.txt", held)
    return listed


#: VOC's mask folders: its own (palette PNGs), and the one SBD's extra masks are added in (grey ids:
#: DeepLab's and mmsegmentation's ``train_aug`` setup, 10582 training masks).
_VOC_MASKS = ("SegmentationClass", "SegmentationClassAug")
#: Where VOC's split lists are: its own folder (also where ``train_aug.txt`` is usually put), then the
#: one some conversions of SBD write.
_VOC_LISTS = ("ImageSets/Segmentation", "ImageSets/SegmentationAug")


def _voc_sample(line: str) -> str:
    """A split list's sample name: the line (``2007_000032``), or the stem of its first path where it
    names the files (``/JPEGImages/2007_000032.jpg /SegmentationClassAug/2007_000032.png``)."""
    first = line.split()[0]
    return Path(first).stem if "/" in first or "." in first else first


def _voc_mask_folder(base: Path, samples: list[str]) -> Path:
    """The mask folder of a split: the one that holds the most of its listed masks, VOC's own first among
    equals (a split it serves whole; SBD's for ``train_aug``), in which the masks still missing are named.
    One folder, whose masks are of one form, for the whole split."""
    folders = [base / m for m in _VOC_MASKS if (base / m).is_dir()]
    return max(folders, key=lambda f: sum((f / f"{s}.png").is_file() for s in samples))


def _ade20k(root: Path, split: str | None) -> Found | None:
    # images/ + annotations/ alone is common (Oxford Pets, one's own data): ADE20K is the folder of that
    # name, or one holding the files it ships with (a copy renamed)
    for base in (root, root / "ADEChallengeData2016"):
        if (base / "images").is_dir() and (base / "annotations").is_dir() and (
                base.name == "ADEChallengeData2016" or any((base / m).is_file() for m in _ADE_MARKERS)):
            break
    else:
        return None
    split = split or "train"
    folder = _ADE_SPLITS.get(split, split)
    if folder == "testing" and (base / "images" / folder).is_dir() and not (base / "annotations" / folder).is_dir():
        raise DataError(f"{root} is ADE20K, whose test images ship without annotations (its test labels are not "
                        "public): there are no pairs to load; use split='validation' to evaluate")
    _refuse_missing_split(root, "ADE20K", split, base / "images" / folder, base / "annotations" / folder,
                          {p.name for p in (base / "images").iterdir() if p.is_dir()})
    pairing = pair_files(base / "images" / folder, base / "annotations" / folder, "")
    return Found("ADE20K", base, pairing, ClassMap.ade20k(), folder,
                 looked_in=_under(base / "images" / folder, base / "annotations" / folder),
                 every_split=lambda: _paired_masks(_annotated(base)))


def _annotated(base: Path) -> list[tuple[Path, Path]]:
    """ADE20K's (images, annotations) folder pairs, one per split that has annotations."""
    return [(base / "images" / p.name, p) for p in sorted((base / "annotations").iterdir(), key=lambda p: p.name)
            if p.is_dir()]


def _camvid(root: Path, split: str | None) -> Found | None:
    splits = {p.name[:-len("_labels")] for p in root.glob("*_labels") if p.is_dir()}
    splits = {name for name in splits if (root / name).is_dir()}
    split = split or "train"
    if not splits or (split not in splits and not (root / "class_dict.csv").is_file()):
        return None
    if split not in splits:
        raise _missing_split(root, "CamVid", split, root / split, splits)
    csv_path = root / "class_dict.csv"
    pairing = pair_files(root / split, root / f"{split}_labels")
    looked_in = _under(root / split, root / f"{split}_labels")
    if csv_path.is_file():
        return Found("CamVid", root, pairing, csv_path, split, looked_in=looked_in)
    return Found("CamVid", root, pairing, None, split, looked_in=looked_in, needs_classes=(
        f"{root}: found {split}/ and {split}_labels/ (CamVid) but no class_dict.csv (a header 'name,r,g,b' and one "
        "row per class): add it, or pass classes= (--classes)"))


def _images_masks(root: Path, split: str | None) -> Found | None:
    """images/ + masks/, flat (one split: the whole folder) or with split folders inside
    (images/train/ + masks/train/, ...)."""
    images, masks = root / "images", root / "masks"
    if not (images.is_dir() and masks.is_dir()):
        return None
    csv_path = root / "class_dict.csv"
    classes = csv_path if csv_path.is_file() else None
    splits = {p.name for p in images.iterdir() if p.is_dir() and _split_word(p.name)}
    if not splits:
        if split is not None:
            raise DataError(f"{root} (images/ + masks/) has no split folders (images/{split}/ + masks/{split}/): it "
                            f"is one split, read whole; drop split={split!r}")
        return Found("images + masks", root, pair_files(images, masks), classes, looked_in=_under(images, masks))
    paired = sorted(s for s in splits if (masks / s).is_dir())
    folder = _split_of(root, split or "train", splits, paired)
    every_split = None if classes else lambda: _paired_masks([(images / s, masks / s) for s in paired])
    return Found("images + masks", root, pair_files(images / folder, masks / folder), classes, folder,
                 looked_in=_under(images / folder, masks / folder), every_split=every_split)


def _split_of(root: Path, split: str, splits: set[str], paired: list[str]) -> str:
    """The split folder of images/ + masks/ that holds ``split`` (:func:`_split_folder`), with its partner
    in masks/ (``paired``); a missing one is refused, naming the folder that is missing."""
    folder = _split_folder(split, splits)
    if folder not in paired:
        folder = folder or split
        _refuse_missing_split(root, "images/ + masks/ with split folders", folder, root / "images" / folder,
                              root / "masks" / folder, paired)
    return folder


def _split_word(name: str) -> str | None:
    """The split a folder of images/ + masks/ holds, by its name (:data:`_SPLIT_WORDS`: ``Train``,
    ``training``, ``val2017``, ``test-2``), as one word (``train``, ``val``, ``test``, ``trainval``); None
    for a folder of the data itself."""
    return _SPLIT_WORDS.get(re.sub(r"[-_]?\d+$", "", name.lower()))


def _split_folder(split: str, folders: set[str]) -> str | None:
    """The folder of ``folders`` that holds ``split``: the one of that name, else the one of that name in
    another case, else the only one for the same split (``train`` -> ``training``, ``val`` -> ``val2017``);
    None where none or several do."""
    for same in (lambda f: f == split, lambda f: f.lower() == split.lower(),
                 lambda f: _split_word(f) is not None and _split_word(f) == _split_word(split)):
        found = sorted(f for f in folders if same(f))
        if found:
            return found[0] if len(found) == 1 else None
    return None


def _under(images: Path, masks: Path) -> str:
    """Where a folder layout looked for its pairs, for :attr:`Found.looked_in`."""
    return f"under {images} + {masks}"


def _paired_masks(folders: list[tuple[Path, Path]]) -> list:
    """The masks of the pairs of each ``(images, masks)`` folder pair: the masks a folder's splits hold
    (:attr:`Found.every_split`). Paired leniently: what is wrong in a split is reported where that split
    is loaded or checked, and a split without masks (a test split shipped without labels) has none."""
    masks = []
    for image_dir, mask_dir in folders:
        try:
            with listing_problems():
                masks += [m for _, m in pair_files(image_dir, mask_dir).pairs]
        except DataError:  # no images or no masks there: no class ids to read
            continue
    return masks


def _records(files: list[str], root: Path, split: str | None, keys: tuple, layout: str,
             every_file: list[str] | None = None) -> Found:
    """The pairs of TFRecord ``files``: every record scanned (kept indexes), keys chosen, problems listed;
    ``every_file``: the files of every split of their folder, where ``files`` are one split of it."""
    scans = [tfrecord.indexed(f) for f in files]
    found = tfrecord.keys_of(scans, *keys)
    pairs, problems = tfrecord.record_pairs(scans, found)
    every_split = None if every_file is None else lambda: _record_masks(every_file, keys)
    return Found(layout, root, Pairing(pairs, [], [], ""), None, split, records=found, record_problems=problems,
                 looked_in=f"in the records of {', '.join(files[:3])}{' ...' if len(files) > 3 else ''}",
                 every_split=every_split)


def _record_masks(files: list[str], keys: tuple) -> list:
    """The masks of the records of ``files`` that hold a pair (those that do not are reported where
    their split is loaded or checked)."""
    return [m for _, m in _records(files, Path(), None, keys, "").pairing.pairs]


def _tfds(root: Path, split: str | None, keys: tuple, mask_channel: int | None = None) -> Found | None:
    """A folder prepared by TensorFlow Datasets: a version folder, or a dataset (or config) folder of them."""
    marked = (root / tfds_folder.INFO).is_file() or any(
        (p / tfds_folder.INFO).is_file() or any((v / tfds_folder.INFO).is_file() for v in p.iterdir() if v.is_dir())
        for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not marked:
        return None
    return tfds(root, split or "train", None, *keys, mask_channel)


def tfds(path_or_name: str | Path, split: str = "train", data_dir: str | Path | None = None,
         image_key: str | None = None, mask_key: str | None = None, mask_channel: int | None = None) -> Found:
    """The records of a dataset prepared by TensorFlow Datasets (see :func:`daliloader.tfds_folder.find`:
    a folder, or ``name[/config][:version]`` under ``data_dir``) that the split expression ``split``
    selects (TFDS's grammar: ``"train[:10%]+test"``), paired in the order ``tfds.load(split=split,
    shuffle_files=False)`` yields them; the records that cannot be read before the end of what is read
    of their file are its ``record_problems``. The class map is the catalogue name TFDS's dataset is
    published with (None where daliloader knows none), ``mask_channel`` the published one or that
    given."""
    found = tfds_folder.find(path_or_name, split, data_dir, image_key, mask_key, mask_channel)
    scans = [tfrecord.indexed(f) for f in found.files]
    found.check_lengths(scans)
    keys = tfrecord.keys_of(scans, found.keys.image_key, found.keys.mask_key)
    pairs, problems = tfrecord.record_pairs(scans, keys)
    every_split = None if found.classes or split == "+".join(found.splits) else lambda: [
        m for _, m in tfds(found.folder, "+".join(found.splits), None, keys.image_key, keys.mask_key,
                           found.mask_channel).pairing.pairs]
    return Found(f"TFDS {found.name} {found.version}", found.folder, Pairing(found.in_order(pairs), [], [], ""),
                 found.classes, found.split, records=keys, record_problems=found.relevant(problems),
                 mask_channel=found.mask_channel, looked_in=f"in split {split!r} of {found.folder}",
                 every_split=every_split)


#: Names of TFRecord files: ``*.tfrecord``, ``*.tfrecord-00000-of-00004`` (TFDS), ``*.tfrec``, ``*.record``.
_TFRECORD_NAME = re.compile(rf"\.(tfrecords?|tfrec|record)({tfrecord.SHARD_NUMBERS})?$")


def _tfrecord_folder(root: Path, split: str | None, keys: tuple) -> Found | None:
    """A folder of TFRecord files; a split is the files whose name holds it as a word, the shard numbers
    and the extension aside (``train-00000-of-00004.tfrecord``, ``train_aug-...``, ``voc-val.tfrecord``),
    where names hold split words, else the whole folder."""
    files = sorted(str(p) for p in root.iterdir() if p.is_file() and _TFRECORD_NAME.search(p.name))
    if not files:
        return None
    words = {f: _name_words(Path(f).name) for f in files}
    splits = {w for held in words.values() for w in held if set(w.split("_")) & _SPLIT_WORDS.keys()}
    if not splits:
        if split is not None:
            raise DataError(f"{root} holds TFRecord files whose names name no split: it is one split, read whole; "
                            f"drop split={split!r}")
        return _records(tfrecord.refuse_partial_shards(files, str(root)), root, None, keys, "TFRecord files")
    split = split or "train"
    chosen = [f for f in files if split.lower() in words[f]]
    if not chosen:
        raise _missing_split(root, "a folder of TFRecord files", split, root / f"{split}-*.tfrecord", splits)
    chosen = tfrecord.refuse_partial_shards(chosen, f"split {split!r} of {root}")
    return _records(chosen, root, split, keys, "TFRecord files", every_file=files)


def _name_words(name: str) -> set[str]:
    """The words of a TFRecord file's name, its shard numbers and extension left out: ``train_aug-00001-of-
    00004.tfrecord`` -> {"train_aug"}, ``voc-val.tfrecord-00000-of-00001`` -> {"voc", "val"}."""
    stem = _TFRECORD_NAME.sub("", re.sub(tfrecord.SHARD_NUMBERS, "", name))
    return {w for w in re.split(r"[-.]", stem.lower()) if w}
