"""SegmentationData: the image/mask pairs of a dataset and its ClassMap."""

from __future__ import annotations

import functools
import os
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

import numpy as np
from PIL import UnidentifiedImageError

from . import buckets, layouts, tfrecord
from .cache import PACK_INDEXES
from .classes import (
    ClassMap,
    as_classmap,
    catalogue_name,
    catalogue_of,
    check_class_count,
    ending_table,
    family_of,
    is_named,
    mask_ending,
    remap_advice,
)
from .draws import is_integer
from .environment import cache_dir, dali_s3_safe
from .errors import DataError, empty_dataset
from .forms import VOID_IN_EVERY_PICTURE, beyond_count, other_form, refuse_other_form, sample
from .manifest import check_pack_index, load_manifest
from .pairing import LOSSY_WHY, Pairing, pair_files, refuse_incomplete
from .parallel import threaded_map
from .parts import SINGLE_CHANNEL_MODES, SIXTEEN_BIT_MODES, as_part, in_bucket, open_image
from .tfrecord import RecordPart, RecordProblem, Records


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
    gpu_mask_ext: str | None = None  # the masks' GPU form (LZ4), in packs written since it exists


class Container(Enum):
    """How a dataset's pairs are stored, which says how the DALI backends read them: files, each read by
    path, and TFRecord records, each read by the guard and checked against its index, in the order of
    one :class:`~daliloader.sampler.Sampler`; or packs (webdataset tars of a prepared copy), which
    DALI's own reader walks through, shuffling within its buffer (:class:`~daliloader.sampler.ReaderEpochs`).

    A container is read in one place per backend, a table keyed by this enum (``dali_graph.READERS``,
    ``dali_tf.STREAMS``, ``tfdata.READINGS``; a test checks that each has every container), and its
    parts, where they are no files, in :mod:`daliloader.parts`: adding a container is a member here, an
    entry in each table and its parts."""

    FILES = "files"
    PACKS = "packs"
    TFRECORD = "tfrecord"
    #: pairs in an S3-compatible bucket (:mod:`daliloader.buckets`): objects, or records of TFRecord objects,
    #: each pair fetched in Python and checked against the listing or the index, in the sampler's order like
    #: files; the graphs are fed their bytes as records'
    OBJECTS = "objects"

    @property
    def read_by_reader(self) -> bool:
        """Whether DALI's own reader decides the order (packs), not the sampler."""
        return self is Container.PACKS

    @property
    def caches_masks(self) -> bool:
        """Whether colour masks may be decoded once into the mask cache (:mod:`daliloader.maskcache`):
        files and objects (records in a bucket aside: see :func:`daliloader.maskcache.wanted`). A prepared
        copy's masks are class indices already, and a record's mask is read with its record, which no cached
        file can stand in for."""
        return self in (Container.FILES, Container.OBJECTS)


@dataclass(frozen=True)
class SegmentationData:
    r"""Paired image and mask files plus the ClassMap that reads the masks.

    ``images[i]`` and ``masks[i]`` belong together; the order is sorted by the images' relative paths.
    ``packs``: the same pairs packed in webdataset tars, which the DALI backends then read instead of
    the files (:meth:`from_prepared` with ``packs=True``). ``mask_depth``: 8 or 16 bits per mask value
    (id masks above 255 need 16), found from the first mask; the loaders check every other one.
    ``gpu_masks``: a prepared copy's masks in the form the GPU decodes (LZ4, see
    :func:`daliloader.manifest.read_lz4_mask`), ``gpu_masks[i]`` the same indices as ``masks[i]``;
    dali-gpu reads them, the CPU backends the PNG masks. ``records``: the pairs are records of
    TFRecord files (:meth:`from_tfrecord`, :meth:`from_tfds`); ``images[i]`` and ``masks[i]`` are then
    :class:`~daliloader.tfrecord.RecordPart`\ s where they are paths otherwise, and ``str()`` of one
    names the file, the record and its byte offset. ``mask_channel``: the masks are colour pictures whose
    channel ``mask_channel`` (0 red, 1 green, 2 blue) holds the class id, read by an id map (TFDS's
    ``scene_parse150``: red the ADE20K class, green the instance); None: masks are read whole.
    """

    images: tuple[str | RecordPart, ...]
    masks: tuple[str | RecordPart, ...]
    classes: ClassMap
    packs: Packs | None = None
    mask_depth: int = 8
    gpu_masks: tuple[str, ...] | None = None
    records: Records | None = None
    mask_channel: int | None = None
    #: The masks are class indices from the mask cache (:class:`daliloader.maskcache.MaskCache`), which
    #: the loaders' vetting keeps fresh; None: the masks are the dataset's own.
    mask_cache: object = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        # one place says how masks are read: the class map (mask_channel is its public spelling here too)
        if self.mask_channel != self.classes.mask_channel:
            channel = self.classes.mask_channel if self.mask_channel is None else self.mask_channel
            object.__setattr__(self, "classes", replace(self.classes, mask_channel=channel))
            object.__setattr__(self, "mask_channel", channel)
        if len(self.images) != len(self.masks):
            raise DataError(f"{len(self.images)} images but {len(self.masks)} masks")
        if not self.images:
            raise empty_dataset()

    def __len__(self) -> int:
        return len(self.images)

    @property
    def container(self) -> Container:
        """How the pairs are stored (see :class:`Container`)."""
        if self.packs:
            return Container.PACKS
        if in_bucket(self.images[0]):
            return Container.OBJECTS
        return Container.TFRECORD if self.records else Container.FILES

    @functools.cached_property
    def image_sizes(self) -> Counter:
        """How many images have each size ``(height, width)``, read from their headers (all cores)."""
        def size(path: str) -> tuple[int, int]:
            try:
                with open_image(path) as im:
                    return im.size[1], im.size[0]
            except UnidentifiedImageError:
                raise DataError(f"cannot read the size of image {path}: not an image in a format Pillow knows. Run "
                                "`daliloader check` on the dataset") from None
            except (OSError, ValueError) as e:
                raise DataError(f"cannot read the size of image {path}: {e}. Run `daliloader check` on the "
                                "dataset") from None

        return Counter(threaded_map(size, self.images, None, None))

    def image_size(self) -> tuple[int, int]:
        """The images' own ``(height, width)``, which they must all share: what a loader's ``image_size``
        is when left out. Images of several sizes raise a DataError that names them: pass ``image_size``."""
        if len(self.image_sizes) == 1:
            return next(iter(self.image_sizes))
        found = ", ".join(f"{h}x{w} ({n} image{'s' * (n != 1)})" for (h, w), n in self.image_sizes.most_common(4))
        more = f" and {len(self.image_sizes) - 4} more sizes" if len(self.image_sizes) > 4 else ""
        raise DataError(f"image_size was left out, so the loader would take the images' own size, but they have "
                        f"{len(self.image_sizes)} sizes: {found}{more}. Pass image_size=(height, width): with "
                        "crop='fit' (evaluation: whole images scaled and padded) or crop='random' (training)")

    def __repr__(self) -> str:
        packed = f", {len(self.packs.tars)} packs" if self.packs else ""
        if self.records:
            empty = self.records.empty_files
            files = len({p.file for p in self.images} | set(empty))
            packed += f", {files} TFRecord files" + (f" ({len(empty)} empty)" if empty else "")
        depth = ", 16-bit masks" if self.mask_depth == 16 else ""
        return (f"SegmentationData({len(self)} pair{'s' if len(self) != 1 else ''}, "
                f"{self.classes.num_classes} classes, kind={self.classes.kind}{depth}{packed})")

    @classmethod
    def _of(cls, pairs: Sequence[tuple[str, str]], classes, progress: bool = True,
            mask_channel: int | None = None) -> SegmentationData:
        """The dataset of ``pairs`` read with ``classes`` (None: inferred from the masks), the ids in
        channel ``mask_channel`` of colour masks where given."""
        masks = tuple(as_part(m) for _, m in pairs)
        if not masks:
            raise empty_dataset()
        classmap = classes if isinstance(classes, ClassMap) else choose_classes(
            classes, masks, progress=progress, mask_channel=mask_channel)
        if mask_channel is not None:
            classmap = replace(classmap, mask_channel=mask_channel)
        refuse_other_form(classmap, masks)  # a published table read on masks of its other form: wrong labels
        return cls(tuple(as_part(i) for i, _ in pairs), masks, classmap, mask_depth=mask_depth(masks[0]),
                   mask_channel=mask_channel)

    @classmethod
    def from_dirs(
        cls,
        images: str | Path,
        masks: str | Path,
        classes: ClassMap | str | Path | int | dict | None,
        mask_suffix: str | None = None,
        image_suffix: str = "",
        *,
        mask_channel: int | None = None,
    ) -> SegmentationData:
        """Pair every image under ``images`` with the mask of the same name under ``masks``.

        Files are matched by relative folder and stem; the pairs are sorted by the images' relative
        paths. With an explicit ``mask_suffix``, files of the mask folder without it are not masks
        (Cityscapes' gtFine holds colour, instance and polygon files beside the labelIds). Any file left
        without a partner is an error that lists it.

        Args:
            images: the folder of the images.
            masks: the folder of the masks.
            classes: the class map that reads the masks: see :func:`choose_classes`; None reads the ids in
                the masks. A class count on masks whose name ending says which table their ids follow
                (Cityscapes' ``*_gtFine_labelIds``, ``*_gtFine_labelTrainIds``) must be that table's, and
                reads them through it, as :meth:`from_folder` does.
            mask_suffix: the suffix a mask's stem carries (CamVid's ``f001_L.png`` for ``f001.png``); None:
                detect one of :data:`daliloader.pairing.COMMON_MASK_SUFFIXES`.
            image_suffix: stripped from image stems before matching (Cityscapes:
                ``image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds"``).
            mask_channel: the masks are colour pictures whose channel 0, 1 or 2 holds the ids.

        Returns:
            The dataset of the pairs.

        Raises:
            daliloader.errors.DataError: a folder that does not exist, holds no images or masks, or cannot
                all be listed (links that lead nowhere, folders that cannot be read); files without a
                partner, listed; or a ``classes`` that cannot read the masks.
        """
        images, masks = as_path(images, "images"), as_path(masks, "masks")
        pairing = pair_files(images, masks, mask_suffix, image_suffix, only_suffixed=mask_suffix is not None,
                             prefer=mask_ending(classes))
        detected = ([f"image suffix {pairing.image_suffix!r}"] if pairing.image_suffix != image_suffix else []) + (
            [f"mask suffix {pairing.mask_suffix!r}"] if mask_suffix is None else [])
        hint = (f"{' and '.join(detected)} {'were' if len(detected) > 1 else 'was'} detected; pass image_suffix=/"
                f"mask_suffix= if that is wrong" if detected else f"mask_suffix={mask_suffix!r}")
        _refuse_unpaired(pairing, hint)
        published = ending_table(pairing.mask_suffix)  # (Cityscapes' files name what their ids are)
        if published is not None and is_integer(classes):
            classes = choose_classes(classes, [m for _, m in pairing.pairs], published,
                                     f"masks named *{pairing.mask_suffix}")
        return cls._of(pairing.pairs, classes, mask_channel=mask_channel)

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[str, str]],
                   classes: ClassMap | str | Path | int | dict | None) -> SegmentationData:
        """Explicit (image, mask) pairs, for layouts that ``from_dirs`` does not cover.

        Args:
            pairs: ``(image, mask)`` paths, kept in their order.
            classes: the class map that reads the masks, as for :meth:`from_dirs` (None: the ids in the
                masks).

        Returns:
            The dataset of the pairs.

        Raises:
            daliloader.errors.DataError: a file that does not exist, a path that is no ``str``,
                ``pathlib.Path`` or ``bytes``, a file inside the unfinished output of ``daliloader
                prepare``, no pairs, or a ``classes`` that cannot read the masks.
        """
        pairs = [(as_path(img, "an image of pairs"), as_path(mask, "a mask of pairs")) for img, mask in pairs]
        buckets.refuse_mixed([f for pair in pairs for f in pair], "pairs")
        if pairs and buckets.is_url(pairs[0][0]):  # objects of a bucket, as they are now (a HEAD request each)
            found = list(threaded_map(buckets.head, [f for pair in pairs for f in pair], buckets.FETCHES))
            return cls._of(list(zip(found[::2], found[1::2])), classes)
        for img, mask in pairs:
            for f in (img, mask):
                if not Path(f).is_file():
                    raise DataError(f"file {f} does not exist")
        for folder in {Path(f).parent for pair in pairs for f in pair}:
            refuse_incomplete(folder)  # files inside an unfinished `daliloader prepare` are no dataset
        return cls._of(pairs, classes)

    @classmethod
    def from_folder(cls, root: str | Path, split: str | None = None,
                    classes: ClassMap | str | Path | int | dict | None = None, *, image_key: str | None = None,
                    mask_key: str | None = None, mask_channel: int | None = None) -> SegmentationData:
        """A dataset folder as shipped, with the class map its layout publishes.

        Cityscapes, Pascal VOC 2012, ADE20K, CamVid, images/ + masks/, a folder prepared by TensorFlow
        Datasets or a folder of TFRecord files (see :mod:`daliloader.layouts`).

        Args:
            root: the dataset folder; may also be a TFRecord file or a glob of them.
            split: the layout's split (None: its training split; a folder without splits, such as a
                prepared copy or a flat images/ + masks/, is read whole, and an explicit split there is
                refused).
            classes: replaces the layout's map, or gives one where the layout has none (images/ + masks/
                without class_dict.csv, TFRecords: a class count, a catalogue name, or None to read the
                ids in the masks).
            image_key: the feature of TFRecord files holding the encoded image (see
                :meth:`from_tfrecord`).
            mask_key: the feature of TFRecord files holding the encoded mask (see :meth:`from_tfrecord`).
            mask_channel: the masks are colour pictures whose channel 0, 1 or 2 holds the ids (a layout
                that publishes one, TFDS's scene_parse150, sets it itself).

        Returns:
            The dataset of the split's pairs, read with the layout's class map or ``classes``.

        Raises:
            daliloader.errors.DataError: a folder that does not exist or is in no known layout (the
                message lists every layout), a split it does not have, files without a partner, records
                that cannot be read, a layout that needs ``classes``, or a ``classes`` that cannot read
                the masks.
        """
        found = layouts.find(as_path(root, "root"), split, image_key, mask_key, mask_channel)
        return cls._of_found(found if mask_channel is None else replace(found, mask_channel=mask_channel), classes)

    @classmethod
    def _of_found(cls, found: layouts.Found, classes) -> SegmentationData:
        """The dataset of a folder as :mod:`daliloader.layouts` recognised it, read with ``classes`` (None:
        the layout's own table, else the ids in the masks)."""
        _refuse_unpaired(found.pairing, f"{found.layout} layout in {found.root}")
        tfrecord.refuse(found.record_problems)
        if classes is None and found.needs_classes:
            raise DataError(found.needs_classes)
        if not found.pairing.pairs:
            raise empty_dataset(found.looked_in)
        masks = [m for _, m in found.pairing.pairs]
        data = cls._of(found.pairing.pairs, choose_classes(classes, masks, found.classes, found.layout,
                                                           mask_channel=found.mask_channel,
                                                           dataset=found.every_split),
                       mask_channel=found.mask_channel)
        return replace(data, records=found.records)

    @classmethod
    def from_tfrecord(cls, files: str | Path | list[str | Path] | tuple[str | Path, ...], *,
                      classes: ClassMap | str | Path | int | dict | None = None, image_key: str | None = None,
                      mask_key: str | None = None, mask_channel: int | None = None,
                      index: str | None = None) -> SegmentationData:
        """The pairs stored in TFRecord files of ``tf.train.Example``, uncompressed.

        Each file is indexed once (every record's offset, size and CRCs), and again when it changes
        (:func:`daliloader.tfrecord.indexed`). Every read of a record is checked against the index: a
        file that changed since it was loaded is refused on every backend. The DALI backends and
        ``opencv`` read the records in Python (:meth:`~daliloader.guard.PairGuard.read`), ``tfdata``
        with ``tf.data.TFRecordDataset``.

        Args:
            files: a path, a glob pattern or a list of either (read in that order, each glob's matches
                sorted).
            classes: as for :meth:`from_folder` (a ClassMap, a catalogue name such as ``"voc"``, a
                class_dict.csv, a class count, or None to read the ids in the masks).
            image_key: the feature holding the encoded image, as ``mask_key`` holds the mask; both are found
                by themselves for the known layouts (TF Model Garden and DeepLab: ``image/encoded`` +
                ``image/segmentation/class/encoded``; TFDS: ``image`` + ``segmentation_mask``,
                ``image_left`` + ``segmentation_label``).
            mask_key: the feature holding the encoded mask (see ``image_key``).
            mask_channel: as for :meth:`from_dirs`.
            index: where the index is kept: in the cache, nothing written beside the data, unless
                ``index="beside"`` (or, where ``index`` is None, ``$DALILOADER_INDEX=beside``) asks for it.

        Returns:
            The dataset of the records' pairs, in the order of ``files``.

        Raises:
            daliloader.errors.DataError: a damaged record, a record without the keys or a compressed file,
                naming the file, the record and its byte offset (``daliloader check`` lists every one); a
                file or pattern that names no TFRecord file; an ``index`` that is neither ``"cache"`` nor
                ``"beside"``; or a ``classes`` that cannot read the masks.
        """
        found = tfrecord.expand(files)
        buckets.refuse_mixed(found, "files")
        scans = [tfrecord.indexed(f, index) for f in found]
        return cls._of_records(scans, classes, image_key, mask_key, mask_channel)

    @classmethod
    def from_tfds(cls, path_or_name: str | Path, split: str = "train", *, data_dir: str | Path | None = None,
                  classes: ClassMap | str | Path | int | dict | None = None, image_key: str | None = None,
                  mask_key: str | None = None, mask_channel: int | None = None) -> SegmentationData:
        """A split of a dataset prepared by TensorFlow Datasets, read without importing it.

        The pairs are the records ``tfds.load(split=split, shuffle_files=False)`` gives, in its order
        (``images[i]`` is the i-th example it yields); see docs/tfrecord.md.

        Args:
            path_or_name: a version folder (``~/tensorflow_datasets/oxford_iiit_pet/4.0.0``), a dataset
                folder holding versions (the newest is read), or ``"name[/config][:version]"`` found under
                ``data_dir``.
            split: a split expression in TFDS's grammar (``"train"``, ``"train[:10%]"``, ``"test[-5:]"``,
                ``"train[:50%]+test[:10]"``).
            data_dir: where a ``"name[/config][:version]"`` is found, as ``tfds.load`` finds it (None:
                ``$TFDS_DATA_DIR``, else ``~/tensorflow_datasets``).
            classes: as for :meth:`from_tfrecord`; None: the table TFDS's dataset is published with
                (oxford_iiit_pet: pet, background, border; cityscapes: the 19 train ids; scene_parse150:
                ADE20K's 100 instance categories in the annotation's red channel), else the ids in the
                masks.
            image_key: the image feature (None: from the dataset's ``features.json``).
            mask_key: the mask feature (None: from the dataset's ``features.json``).
            mask_channel: the channel of colour masks that holds the class, where TFDS publishes none.

        Returns:
            The dataset of the split's records.

        Raises:
            daliloader.errors.DataError: a dataset that is not found or not prepared as TFRecord files, a
                split expression it cannot read, records that cannot be read, or a ``classes`` that cannot
                read the masks, named.
        """
        searched = data_dir or os.environ.get("TFDS_DATA_DIR") or ""
        if buckets.is_url(str(searched)) and not buckets.is_url(str(path_or_name)):
            raise DataError(f"data_dir (or $TFDS_DATA_DIR) {searched}: a data_dir in a bucket is not searched by name; "
                            "pass the dataset's folder itself: s3://bucket/tensorflow_datasets/NAME[/CONFIG][/VERSION]")
        found = layouts.tfds(as_path(path_or_name, "path_or_name"), split, data_dir, image_key, mask_key,
                             mask_channel)
        return cls._of_found(found, classes)

    @classmethod
    def _of_records(cls, scans: list, classes, image_key: str | None, mask_key: str | None,
                    mask_channel: int | None = None) -> SegmentationData:
        """The dataset of the records that ``scans`` found (see :meth:`from_tfrecord`)."""
        keys = tfrecord.keys_of(scans, image_key, mask_key)
        pairs, problems = tfrecord.record_pairs(scans, keys)
        tfrecord.refuse(problems)
        return replace(cls._of(pairs, classes, mask_channel=mask_channel), records=keys)

    @classmethod
    def from_prepared(cls, root: str | Path, packs: bool = False) -> SegmentationData:
        """A dataset written by ``daliloader prepare`` / :func:`daliloader.preparation.prepare`.

        Its masks are 8-bit class indices (ids ``0..C-1`` are the classes, ``ignore_index`` stays), read
        by every backend.

        Args:
            root: the prepared copy's folder.
            packs: (a copy prepared with ``--packs N``) the DALI backends read the webdataset tars with
                one ``fn.readers.webdataset`` (sequential reads, image and mask from the same record),
                which shuffles within a buffer of samples instead of drawing a permutation of the whole
                dataset per epoch. ``opencv`` and ``tfdata`` read the files.

        Returns:
            The dataset of the copy's pairs, with its masks' GPU form where the copy has one.

        Raises:
            daliloader.errors.DataError: a folder that is no prepared copy, or is the unfinished output of
                a ``prepare``, or whose manifest cannot be read; with ``packs=True``, a copy prepared
                without packs, or packs that are missing or do not match the manifest.
        """
        if buckets.is_url(root):
            return cls._from_prepared_bucket(root, packs)
        manifest = load_manifest(root)
        root = Path(root)
        data = cls.from_pairs([(str(root / i), str(root / m)) for i, m in manifest.pairs],
                              manifest.classes.prepared_map())  # 8-bit class-index masks
        gpu_masks = manifest.masks.gpu_files
        if gpu_masks:
            data = replace(data, gpu_masks=tuple(str(root / m) for m in gpu_masks))
        if not packs:
            return data
        p = manifest.packs
        if not p:
            raise DataError(f"{root} was prepared without packs (webdataset tars): run `daliloader prepare DATA "
                            "NEW_OUT --packs N` to write them, or load it with packs=False")
        found = Packs(tuple(str(root / t) for t in p.tars), tuple(str(root / x) for x in p.indexes), p.image_exts,
                      p.mask_ext, p.index_ext, p.gpu_mask_ext)
        for f in found.tars + found.indexes:
            if not Path(f).is_file():
                raise DataError(f"pack file {f} is missing: the prepared copy {root} is incomplete; load it with "
                                "packs=False to read its files, or prepare it again")
        _check_indexes(found, p.samples_per_pack, len(data), [Path(t).stat().st_size for t in found.tars])
        return replace(data, packs=found)

    @classmethod
    def _from_prepared_bucket(cls, url: str, packs: bool) -> SegmentationData:
        """A prepared copy in a bucket: its files read as objects, the masks' PNG form (their GPU form is
        not read from buckets yet); with ``packs``, the tars read by DALI's own S3 reader, their index files
        copied into the cache (:func:`daliloader.buckets.cached_copy`)."""
        root = buckets.as_path(url)
        manifest = load_manifest(root)
        pairs = [(buckets.member(root / i), buckets.member(root / m)) for i, m in manifest.pairs]
        data = cls._of(pairs, manifest.classes.prepared_map())
        if not packs:
            return data
        p = manifest.packs
        if not p:
            raise DataError(f"{url} was prepared without packs: load it with packs=False")
        if not dali_s3_safe():
            raise DataError(f"{url} with packs=True: DALI reads the packs itself, and its S3 client aborts a process "
                            "where TensorFlow was imported before DALI. Import daliloader before nvidia.dali (it "
                            "loads DALI's S3 client safely), or load the copy with packs=False")
        indexes = tuple(str(buckets.cached_copy((root / x).part, cache_dir() / PACK_INDEXES)) for x in p.indexes)
        tars = tuple((root / t).part.url for t in p.tars)  # (a missing tar: a StorageError naming it)
        found = Packs(tars, indexes, p.image_exts, p.mask_ext, p.index_ext, None)
        _check_indexes(found, p.samples_per_pack, len(data), shown=[(root / x).part.url for x in p.indexes])
        return replace(data, packs=found)

    def without_gpu_form(self) -> SegmentationData:
        """The same pairs with the masks read as PNG everywhere, their GPU form (``gpu_masks``, the packs'
        LZ4 members) left out: what a graph that needs the masks' classes on the CPU reads."""
        packs = replace(self.packs, gpu_mask_ext=None) if self.packs is not None else None
        return replace(self, gpu_masks=None, packs=packs)

    def subset(self, indices: Sequence[int]) -> SegmentationData:
        """The pairs at ``indices``, read from their files (packs hold the whole dataset) or records; of data
        whose masks come from the mask cache, the user's own pairs (a loader makes their cache)."""
        if self.mask_cache is not None:
            return self.mask_cache.original.subset(indices)
        gpu_masks = None if self.gpu_masks is None else tuple(self.gpu_masks[i] for i in indices)
        return replace(self, images=tuple(self.images[i] for i in indices),
                       masks=tuple(self.masks[i] for i in indices), packs=None, gpu_masks=gpu_masks)

    def split(self, fraction: float, seed: int = 0) -> tuple[SegmentationData, SegmentationData]:
        """``(train, val)``: ``val`` holds ``round(fraction * len(self))`` pairs drawn with ``seed``, ``train``
        the rest; disjoint, together every pair, the same for the same seed (each keeps the dataset's
        order). Both read the files (packs hold the whole dataset)."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
            raise DataError(f"fraction is the validation share, in (0, 1); got {fraction!r}")
        n_val = round(fraction * len(self))
        if not 0 < n_val < len(self):
            n = len(self)
            empty, fix = (("validation", f"{1 / n:.3g} gives 1") if n_val == 0 else
                          ("training", f"{1 - 1 / n:.3g} gives {n - 1}"))
            raise DataError(f"fraction={fraction} of {n} pairs gives round({fraction * n:g}) = {n_val} validation "
                            f"pairs, which leaves no {empty} pair; {fix}" if n > 1 else
                            f"a dataset of {n} pair cannot be split")
        val = np.sort(np.random.default_rng(seed).permutation(len(self))[:n_val])
        train = np.setdiff1d(np.arange(len(self)), val)
        return self.subset(train.tolist()), self.subset(val.tolist())


def _refuse_unpaired(pairing: Pairing, hint: str) -> None:
    # (links that lead nowhere and unreadable folders were refused by pair_files itself)
    if not (pairing.unpaired_images or pairing.unpaired_masks or pairing.missing):
        return
    lines = [f"  listed in {where} but missing: {p}" for p, where in pairing.missing[:20]]
    lines += [f"  {pairing.unpaired_image(p)}: {p}" for p in pairing.unpaired_images[:20]]
    lines += [f"  mask without image: {p}" for p in pairing.unpaired_masks[:20]]
    more = len(pairing.unpaired_images) + len(pairing.unpaired_masks) + len(pairing.missing) - len(lines)
    if more > 0:
        lines.append(f"  ... and {more} more")
    if pairing.lossy_masks:
        lines.append(f"Masks cannot be stored in a lossy format: {LOSSY_WHY}")
    what = f"{len(pairing.unpaired_images)} image(s) and {len(pairing.unpaired_masks)} mask(s) have no partner"
    if pairing.missing:
        what = f"{len(pairing.missing)} listed file(s) are missing, " + what
    raise DataError(f"{what} ({hint}):\n" + "\n".join(lines))


def as_path(value, argument: str) -> str:
    """A path argument as a string: a ``str``, an ``os.PathLike`` or ``bytes`` (names that are no UTF-8, as
    ``os.listdir(b".")`` gives them); anything else is a DataError naming the argument."""
    if isinstance(value, (str, bytes, os.PathLike)):
        return os.fsdecode(value)
    raise DataError(f"{argument} is a path (a str, pathlib.Path or bytes), got {type(value).__name__} {value!r:.60}")


def mask_depth(path: str | Path | RecordPart) -> int:
    """Bits per value of a mask: 16 for 16-bit single-channel images, else 8 (from its header)."""
    from PIL import UnidentifiedImageError

    try:
        with open_image(path) as im:
            return 16 if im.mode in SIXTEEN_BIT_MODES else 8
    except (OSError, UnidentifiedImageError, RecordProblem):  # (a bucket's faults pass on, named)
        return 8  # an unreadable mask is reported, with its name, when it is loaded or checked


def _check_indexes(packs: Packs, samples_per_pack: int, pairs: int, tar_sizes: list[int] | None = None,
                   shown: Sequence[str] | None = None) -> None:
    """Refuse packs whose index files do not describe them as ``prepare`` wrote them: ``samples_per_pack``
    samples per tar, in order, ``pairs`` in all (:func:`~daliloader.manifest.check_pack_index`; the tars'
    sizes where known; the indexes named as ``shown``, where they are copies)."""
    for k, (tar, index) in enumerate(zip(packs.tars, packs.indexes, strict=True)):
        first = k * samples_per_pack
        check_pack_index(index, tar, first, min(samples_per_pack, pairs - first),
                         tar_sizes[k] if tar_sizes is not None else None, shown[k] if shown is not None else None)


def choose_classes(given, masks: Sequence[str], published: ClassMap | str | Path | None = None,
                   layout: str = "", progress: bool = True, mask_channel: int | None = None, *,
                   dataset: Callable[[], Sequence] | None = None, unreadable: list | None = None,
                   vet_count: bool = True) -> ClassMap | None:
    """The class map that reads ``masks``: what the user gave, else the layout's ``published`` map (in
    the form its masks are stored in, where copies of a download differ: ``_as_stored``), else the ids
    in the masks (:func:`infer_classes`): in those of the whole ``dataset`` where given (every split of a
    folder, :attr:`daliloader.layouts.Found.every_split`, so that each split gets the same map), read
    once, unreadable masks skipped or refused as :func:`infer_classes` says.

    A class count ``N`` means ids 0..N-1. On palette PNGs those ids are the palette indices (read
    through the masks' palette). On a layout whose published table remaps its ids (Cityscapes
    labelIds, ADE20K), ``N`` must be that table's class count: reading the raw ids as classes would
    give wrong labels without an error. ``vet_count``: a count that would load ids of a sample of the
    masks as ignored is refused (:func:`~daliloader.forms.beyond_count`; ``check`` reports them per mask
    instead).
    Anything else goes to :func:`~daliloader.classes.as_classmap`.
    """
    published = _published_as_stored(published, given, masks, mask_channel, dataset)
    if given is None:
        given, published = published, None
        if given is None:
            return infer_classes(masks if dataset is None else dataset(), progress, mask_channel, unreadable)
    if is_named(given) and catalogue_name(given) == "voc" and masks and mask_channel is None:
        given = _voc_as_stored(masks)
    refuse_other_member(given, published, layout)
    if not is_integer(given):
        return as_classmap(given)
    counted = _counted_classes(int(given), masks, published, layout, mask_channel)
    if vet_count and counted is not published:
        _refuse_ids_beyond(counted if mask_channel is None else replace(counted, mask_channel=mask_channel), masks,
                           published)
    return counted


def _published_as_stored(published, given, masks: Sequence, mask_channel: int | None, dataset):
    """``published`` in the form the masks are stored in (:func:`_as_stored`), judged on every split's
    masks where ``dataset`` lists them (one form for all), where the masks decide what ``given`` reads:
    not for a map of one's own, nor for ids read from a channel."""
    if published is not None and mask_channel is None and masks and (
            given is None or is_named(given) or is_integer(given)):
        return _as_stored(published, masks if dataset is None else dataset() or masks)
    return published


def _as_stored(published, masks: Sequence):
    """A layout's published table in the form its masks are stored in, where copies of the download
    differ: VOC's ``SegmentationClass`` as palette PNGs, colour pictures or ids (:func:`_voc_as_stored`),
    ADE20K's values raw or already reduced by one (the form that fits a sample of them far better:
    :func:`~daliloader.forms.other_form`). Others as they are: Cityscapes' files name their form
    (``*_gtFine_labelIds``), and a TFDS dataset's features theirs."""
    name = published.catalogue if isinstance(published, ClassMap) else None
    if name == "voc":
        return _voc_as_stored(masks)
    if name == "ade20k":
        other = other_form(published, masks)
        return published if other is None else ClassMap.named(other.name)
    return published


def _voc_as_stored(masks: Sequence) -> ClassMap:
    """``classes="voc"`` for the form VOC's masks are stored in: palette PNGs (read by index), colour
    pictures (the palette expanded: read by VOC's colours), or single-channel ids (DeepLab's
    ``SegmentationClassRaw``), as the first mask of a sample of them that can be read is; palette PNGs,
    VOC's own form, where none can (the loaders and ``check`` name them)."""
    for mask in sample(masks):
        try:
            with open_image(mask) as im:
                mode = im.mode
        except (OSError, UnidentifiedImageError, RecordProblem):  # (a bucket's faults pass on, named)
            continue
        if mode == "P":
            return ClassMap.voc()
        return ClassMap.voc(form="colours") if mode in ("RGB", "RGBA") else ClassMap.voc(indexed=False)
    return ClassMap.voc()


def refuse_other_member(given, published, layout: str) -> None:
    """A published table given for a layout that publishes another table of the same dataset
    (``PublishedTable.family``: ``classes="ade20k"`` on TFDS's scene_parse150, whose masks hold
    ADE20K's instance categories; ``"cityscapes-trainids"`` on the Cityscapes download's labelIds): the
    layout knows its masks, and the other table would read them into wrong labels. Not between ADE20K's
    raw and reduced forms: which one the masks are in is a judgement on a sample of them, so the form
    given by name is weighed against them instead (``refuse_other_form``, in ``SegmentationData._of``)."""
    mine, theirs = catalogue_of(given), catalogue_of(published)
    if {mine, theirs} <= VOID_IN_EVERY_PICTURE:
        return
    if mine and theirs and mine != theirs and family_of(mine) == family_of(theirs) is not None:
        raise DataError(f"classes={mine!r} on {layout or 'this dataset'}, whose masks hold {theirs!r} "
                        f"({ClassMap.named(theirs).source}): {mine!r} is another form of that dataset's table and "
                        f"would read them into wrong labels. Leave classes out, or pass classes={theirs!r}")


def _counted_classes(given: int, masks: Sequence[str], published, layout: str, mask_channel: int | None = None
                     ) -> ClassMap:
    """A class count: the published id table where it has that many classes (else an error: the raw
    ids are no classes), else palette indices 0..N-1 on palette masks, else ids 0..N-1 (of single-channel
    masks, or of channel ``mask_channel``: colour masks without it are refused, by the first)."""
    check_class_count(given)
    if isinstance(published, ClassMap) and published.palette_masks is None:
        if given != published.num_classes:
            raise DataError(f"classes={given} on {layout or published.source}: its masks hold ids that its published "
                            f"table ({published.source}) maps to {published.num_classes} classes, and classes={given} "
                            "would read the raw ids as classes instead, which gives wrong labels. "
                            f"{_published_way(published)} (or pass a ClassMap, e.g. ClassMap.from_ids({{raw_id: "
                            "class}), to map the ids yourself)")
        return published
    if isinstance(published, ClassMap):  # a layout of palette masks (VOC): read through its palette
        return ClassMap.from_palette_indices(published.palette_masks, given, source=f"{given} palette indices")
    mode, palette = _mode_and_palette(masks[0]) if masks else (None, None)
    if palette is not None:
        return ClassMap.from_palette_indices(palette, given, source=f"{given} palette indices")
    if mask_channel is None and mode in ("RGB", "RGBA"):  # refused here, not at the first batch
        raise DataError(f"classes={given} reads ids 0..{given - 1} from single-channel masks, but {masks[0]} is a "
                        f"colour picture: colour masks need their colours' table (classes='class_dict.csv', "
                        "name,r,g,b), or mask_channel=K where channel K holds the ids")
    return ClassMap.from_ids(given)


def _refuse_ids_beyond(classes: ClassMap, masks: Sequence, published) -> None:
    """Refuse a class count ``N`` whose map would load ids of a sample of ``masks`` as ignored
    (:func:`~daliloader.forms.beyond_count`): those pixels would leave training and the metrics without
    a word. A map given as a ClassMap reads the rest as ignored on purpose, and is not weighed."""
    found = beyond_count(classes, masks)
    if found is None:
        return
    n, top = classes.num_classes, max(found.pixels) + 1
    palette = classes.palette_masks is not None
    what, one = ("palette indices", "palette index") if palette else ("ids", "id")
    named = (f"classes={published.catalogue!r} (--classes {published.catalogue}: its {published.num_classes} "
             "classes) or "
             if isinstance(published, ClassMap) and published.catalogue else "")
    own = (f"ClassMap.from_palette_indices(palette, {n})" if palette else
           f"ClassMap.from_ids({{i: i for i in range({n})}})")
    ignoring = f"a class map that ignores them ({own})"
    if set(range(n, top)) <= set(found.pixels):  # they run on from the classes: a count too small
        remedy = f"Pass {named}classes={top} (--classes {top}: {what} 0..{top - 1}); or, to ignore them, {ignoring}"
    else:  # scattered ids (a void value?): no count reads them right
        remedy = (f"If they are void, pass {ignoring}; if they are classes, a class map that maps each to its "
                  "class (ClassMap.from_ids({id: class, ...}))")
    raise DataError(f"classes={n} reads {what} 0..{n - 1} as classes and every other one as ignored, but "
                    f"{len(found.masks)} of the {found.sampled} masks sampled hold "
                    f"{one if len(found.pixels) == 1 else what} {found.ids()} (e.g. {found.masks[0]}): those pixels "
                    f"would load as ignored, left out of the loss and the metrics, without an error. {remedy}. "
                    "`daliloader check` lists them mask by mask")


def _published_way(published: ClassMap) -> str:
    """How to read masks with their published table: by its name, which every constructor takes."""
    return f"Pass classes={published.catalogue!r}" if published.catalogue else "Leave classes out"


def _mode_and_palette(path: str) -> tuple[str | None, np.ndarray | None]:
    """A mask's mode (Pillow's: "RGB", "L", "P", ...) and, for a palette PNG, its palette as (n, 3) uint8;
    (None, None) for an unreadable mask (reported later, named)."""
    from PIL import UnidentifiedImageError

    try:
        with open_image(path) as im:
            return im.mode, np.asarray(im.getpalette(), np.uint8).reshape(-1, 3) if im.mode == "P" else None
    except (OSError, UnidentifiedImageError, RecordProblem):  # (a bucket's faults pass on, named)
        return None, None


def mask_values(path: str, mask_channel: int | None = None) -> np.ndarray:
    """A single-channel mask's values as the decoders read them (a 1-bit mask as 0 and 255), or the
    values of channel ``mask_channel`` of a colour mask."""
    with open_image(path) as im:
        if mask_channel is not None:
            return np.asarray(im.convert("RGB"))[..., mask_channel]
        return np.asarray(im.convert("L") if im.mode == "1" else im)


@dataclass(frozen=True)
class UnreadableMask:
    """A mask that :func:`infer_classes` could not decode: its name, and what is wrong with it, in words."""

    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def _mask_ids(path, mask_channel: int | None) -> np.ndarray | UnreadableMask:
    """The distinct values of one mask for :func:`infer_classes`, or what keeps them from being read (a
    damaged file, named, never the decoder's bare error). A mask the inference cannot read by its mode
    (colour, palette) is a DataError: no class id is in it whatever its state."""
    try:
        with open_image(path) as im:
            mode = im.mode
        if mask_channel is None and mode not in SINGLE_CHANNEL_MODES:
            what = "a palette PNG (its indices are read with classes=N, N classes)" if mode == "P" else \
                f"a {mode} image (colour masks: classes='class_dict.csv', a name,r,g,b table)"
            raise DataError(f"classes=None reads class ids from single-channel masks, but {path} is {what}; "
                            "pass classes= (--classes on the command line)")
        return np.unique(mask_values(path, mask_channel))
    except RecordProblem as e:  # a damaged record, named by file, record and offset
        return UnreadableMask(str(path), str(e))
    except DataError:  # the mode's refusal; a bucket's faults (StorageError) pass on, named
        raise
    except UnidentifiedImageError:
        return UnreadableMask(str(path), "not an image in a format Pillow knows")
    except (OSError, ValueError, SyntaxError, EOFError, zlib.error) as e:  # Pillow's decoders raise each
        return UnreadableMask(str(path), f"cannot be decoded ({e or type(e).__name__})")


def _unreadable_masks(found: Sequence[UnreadableMask]) -> DataError:
    """The loaders' refusal of masks that class inference could not read, each named."""
    lines = [f"  {m}" for m in found[:10]] + ([f"  ... and {len(found) - 10} more"] if len(found) > 10 else [])
    return DataError(f"classes=None reads the class ids in every mask, but {len(found)} mask(s) cannot be read:\n"
                     + "\n".join(lines) + "\nRun `daliloader check` on the dataset to list every damaged file, "
                     "then repair or remove them")


def _readable_ids(masks: Sequence[str], progress: bool, mask_channel: int | None,
                  unreadable: list | None) -> list[np.ndarray]:
    """The distinct values of each mask that decodes (on all cores); those that do not are refused (a
    DataError naming each) or, where ``unreadable`` is a list, added to it (see :func:`infer_classes`)."""
    read = list(threaded_map(lambda path: _mask_ids(path, mask_channel), masks,
                             description="reading class ids" if progress else None))
    bad = [r for r in read if isinstance(r, UnreadableMask)]
    if bad and unreadable is None:
        raise _unreadable_masks(bad)
    if bad:
        unreadable.extend(bad)
    return [r for r in read if not isinstance(r, UnreadableMask)]


def _refuse_lone_255(ids: np.ndarray, ignore: int) -> None:
    """Refuse 16-bit masks whose ids are a few classes and 255 alone above them (train ids saved as 16-bit
    PNGs): 255 would be class 255 (65535 is their ignore value), with hundreds of classes that never
    occur, where it most likely marks ignored pixels as in 8-bit masks."""
    below = ids[ids < 255]
    if ignore == 65535 and 255 in ids and ids.max() == 255 and len(below) and below.max() < 254:
        top = int(below.max())
        raise DataError(f"classes=None (no --classes): the 16-bit masks hold ids 0-{top} and 255 alone above them. "
                        f"The ignore value? Pass classes={top + 1} (--classes {top + 1}): ids 0..{top} are the "
                        "classes, 255 is ignored. A class of its own? Pass classes=256")


#: The smallest gap between the levels of masks whose values read as grey levels spread evenly apart for
#: viewing (0/128/255, 0/85/170/255) rather than as class numbers.
SPREAD_STEP = 8


def _refuse_spread_ids(ids: np.ndarray, ignored: int | None) -> None:
    """Refuse masks whose values, the ignore value among them where present, are three or more levels from
    0 evenly spaced at least :data:`SPREAD_STEP` apart (0/128/255, 0/85/170/255, 0/1000/2000 in 16-bit
    masks): labels saved as grey levels spread apart for viewing, most likely, where a class per id would
    make a model of mostly classes that never occur (129 scores for 2 or 3 classes), and the top level
    may be a class rather than the ignore value. Two values are no such evidence (a VOC subset of
    background and person is 0 and 15)."""
    levels = sorted({int(v) for v in ids} | ({ignored} if ignored is not None else set()))
    gaps = np.diff(levels)
    if len(levels) < 3 or levels[0] != 0 or gaps.min() < SPREAD_STEP or gaps.max() - gaps.min() > 2:
        return
    count = int(ids.max()) + 1
    ways = f"Pass {remap_advice({v: k for k, v in enumerate(levels)})} to number them"
    if ignored is not None:
        below = remap_advice({int(v): k for k, v in enumerate(ids)})
        ways += f" ({ignored} a class), {below} if {ignored} marks ignored pixels"
    ways += ","
    raise DataError(f"classes=None (no --classes): the masks hold the values {', '.join(map(str, levels))}: grey "
                    f"levels spread evenly apart for viewing? A class per id would make {count} classes, "
                    f"{count - len(ids)} of which never occur. {ways} or classes={count} (--classes {count}) if "
                    "they are the class ids")


def infer_classes(masks: Sequence[str], progress: bool = True, mask_channel: int | None = None,
                  unreadable: list | None = None) -> ClassMap | None:
    """``classes=None``: the id masks' values, read from every mask given (on all cores), give the classes
    0..N-1, N one more than the largest id. The ignore value of the masks' depth (255 in 8-bit masks,
    65535 in 16-bit ones) stays the ignore index, as in every known dataset; masks holding only 0 and
    255 are refused as ambiguous (binary masks, or background and ignore?). Colour and palette masks
    name a class map instead, so they are refused, unless ``mask_channel`` names the channel that holds the
    ids.

    Masks that cannot be decoded are refused by a DataError that names each and what is wrong with it,
    or, where ``unreadable`` is a list (``check``, which reports each), added to it and left out: then
    None where no mask could be read. ``masks`` are those of the whole dataset where it has splits (see
    :func:`choose_classes`)."""
    if not masks:
        raise DataError("classes=None reads class ids from the masks, but there are no image/mask pairs")
    readable = _readable_ids(masks, progress, mask_channel, unreadable)
    if not readable:
        return None
    found = np.unique(np.concatenate(readable))
    ignore = 65535 if mask_channel is None and mask_depth(masks[0]) == 16 else 255
    ids = found[found != ignore]
    if set(found.tolist()) - {65535} == {0, 255}:  # (8-bit masks, or 16-bit ones)
        raise DataError("classes=None (no --classes): the masks hold only the values 0 and 255. Binary masks "
                        f"(foreground 255)? Pass {remap_advice({0: 0, 255: 1})}. Background and the ignore value? "
                        "Pass classes=1 (--classes 1)")
    if not len(ids):
        raise DataError(f"classes=None (no --classes): the masks hold no class id (only {ignore}, the ignore value); "
                        "pass classes=N (--classes N)")
    _refuse_lone_255(ids, ignore)
    _refuse_spread_ids(ids, ignore if ignore in found else None)
    count = int(ids.max()) + 1
    return ClassMap.from_ids(count, ignore_index=ignore, source=f"ids 0-{count - 1}, read from {len(masks)} masks")
