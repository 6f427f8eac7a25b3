"""Small dataset trees laid out like the downloads of Cityscapes, Pascal VOC 2012 and ADE20K: the file
names, the files that ship beside the masks, the split lists. Each builder writes one tree under a parent
folder and returns its root with the labels each split should load, computed here from the dataset's own
conventions, independently of daliloader's tables. Used by the dataset tests and the documentation's
examples.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

H, W = 24, 40
#: Cityscapes' labelId -> trainId (cityscapesScripts helpers/labels.py); every other labelId is ignored.
CITYSCAPES_TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11, 25: 12,
                        26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18}


def blocks(rng, values, block: int = 4) -> np.ndarray:
    small = rng.choice(values, size=(-(-H // block), -(-W // block)))
    return np.kron(small, np.ones((block, block), dtype=small.dtype))[:H, :W]


def photo(rng) -> np.ndarray:
    return rng.integers(0, 256, (H, W, 3), dtype=np.uint8)


def voc_palette() -> list[int]:
    """The VOC devkit's colormap (VOClabelcolormap.m), written out here independently of daliloader."""
    cmap = []
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        cmap += [r, g, b]
    return cmap


def cityscapes_tree(parent: Path):
    """parent/cityscapes/{leftImg8bit,gtFine}/{train,val}/<city>/..., with gtFine's colour, instance and
    polygon files beside each labelIds mask; returns (root, {split: {image: expected labels}})."""
    root = parent / "cityscapes"
    rng = np.random.default_rng(1)
    truth = {}
    for split, cities in (("train", ("aachen", "bochum")), ("val", ("frankfurt",))):
        truth[split] = {}
        for city in cities:
            for k in range(2):
                stem = f"{city}_{k:06d}_000019"
                img_dir, gt_dir = root / "leftImg8bit" / split / city, root / "gtFine" / split / city
                img_dir.mkdir(parents=True, exist_ok=True)
                gt_dir.mkdir(parents=True, exist_ok=True)
                label_ids = blocks(rng, np.arange(34)).astype(np.uint8)
                cv2.imwrite(str(img_dir / f"{stem}_leftImg8bit.png"), photo(rng))
                cv2.imwrite(str(gt_dir / f"{stem}_gtFine_labelIds.png"), label_ids)
                cv2.imwrite(str(gt_dir / f"{stem}_gtFine_color.png"), photo(rng))
                cv2.imwrite(str(gt_dir / f"{stem}_gtFine_instanceIds.png"), (label_ids.astype(np.uint16) * 1000 + k))
                (gt_dir / f"{stem}_gtFine_polygons.json").write_text(json.dumps({"objects": []}))
                expected = np.vectorize(lambda i: CITYSCAPES_TRAIN_IDS.get(int(i), 255))(label_ids)
                truth[split][str(img_dir / f"{stem}_leftImg8bit.png")] = expected
    (root / "license.txt").write_text("test tree")
    return root, truth


def voc_tree(parent: Path):
    """parent/VOCdevkit/VOC2012 with more JPEGImages than SegmentationClass masks (palette PNGs: indices
    0-20, 255 on borders), SegmentationObject, Annotations and the ImageSets/Segmentation split lists;
    returns (VOCdevkit, {split: {image: expected labels}})."""
    base = parent / "VOCdevkit" / "VOC2012"
    rng = np.random.default_rng(2)
    for d in ("JPEGImages", "SegmentationClass", "SegmentationObject", "Annotations", "ImageSets/Segmentation"):
        (base / d).mkdir(parents=True)
    names = [f"2007_{i:06d}" for i in range(6)]
    truth = {}
    for i, name in enumerate(names):
        Image.fromarray(photo(rng)).save(base / "JPEGImages" / f"{name}.jpg", quality=95)
        (base / "Annotations" / f"{name}.xml").write_text("<annotation/>")
        if i >= 4:
            continue  # only the segmented subset has masks
        indices = blocks(rng, np.arange(21)).astype(np.uint8)
        indices[::7, :] = 255  # object borders
        for folder, values in (("SegmentationClass", indices), ("SegmentationObject", (indices % 3).astype(np.uint8))):
            mask = Image.fromarray(values, mode="P")
            mask.putpalette(voc_palette())
            mask.save(base / folder / f"{name}.png")
        truth[str(base / "JPEGImages" / f"{name}.jpg")] = indices
    lists = base / "ImageSets" / "Segmentation"
    (lists / "train.txt").write_text("\n".join(names[:3]) + "\n")
    (lists / "val.txt").write_text(names[3] + "\n")
    (lists / "trainval.txt").write_text("\n".join(names[:4]) + "\n")
    splits = {"train": names[:3], "val": names[3:4], "trainval": names[:4]}
    return base.parent, {split: {k: v for k, v in truth.items() if Path(k).stem in ids}
                         for split, ids in splits.items()}


def ade20k_tree(parent: Path):
    """parent/ADEChallengeData2016/{images,annotations}/{training,validation}, 8-bit masks 0-150, and the
    files that ship beside them; returns (root, {split: {image: expected labels}})."""
    root = parent / "ADEChallengeData2016"
    rng = np.random.default_rng(3)
    truth = {}
    for split, prefix, n in (("training", "ADE_train", 3), ("validation", "ADE_val", 2)):
        truth[split] = {}
        (root / "images" / split).mkdir(parents=True)
        (root / "annotations" / split).mkdir(parents=True)
        for i in range(1, n + 1):
            values = blocks(rng, np.arange(151)).astype(np.uint8)
            image = root / "images" / split / f"{prefix}_{i:08d}.jpg"
            Image.fromarray(photo(rng)).save(image, quality=95)
            cv2.imwrite(str(root / "annotations" / split / f"{prefix}_{i:08d}.png"), values)
            truth[split][str(image)] = np.where(values == 0, 255, values.astype(np.int64) - 1)
    (root / "objectInfo150.csv").write_text("Idx,Ratio,Train,Val,Name\n1,0.1,1,1,wall\n")
    (root / "sceneCategories.txt").write_text("ADE_train_00000001 bathroom\n")
    return root, truth


def voc_tfrecords(parent: Path):
    """parent/voc-tfrecord/{train-0000k-of-00002,val-00000-of-00001}.tfrecord as DeepLab's
    ``build_voc2012_data.py`` (and TF Model Garden) write them, with ``tf.io.TFRecordWriter``: per record
    ``image/encoded`` (JPEG), ``image/filename``, ``image/format``, ``image/height``, ``image/width``,
    ``image/channels``, ``image/segmentation/class/encoded`` (a single-channel PNG of the class ids 0-20,
    255 on object borders: DeepLab's SegmentationClassRaw) and ``image/segmentation/class/format``.
    Returns (folder, {split: {image/filename: expected labels}}), the records in this order."""
    import tensorflow as tf

    def feature(value):
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    folder = parent / "voc-tfrecord"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(4)
    truth, number = {}, 0
    for split, files, per_file in (("train", 2, 3), ("val", 1, 2)):
        truth[split] = {}
        for f in range(files):
            with tf.io.TFRecordWriter(str(folder / f"{split}-{f:05d}-of-{files:05d}.tfrecord")) as writer:
                for _ in range(per_file):
                    name, number = f"2007_{number:06d}", number + 1
                    ids = blocks(rng, np.arange(21)).astype(np.uint8)
                    ids[::7, :] = 255
                    image = tf.io.encode_jpeg(photo(rng), quality=95).numpy()
                    mask = tf.io.encode_png(ids[..., None]).numpy()
                    example = {"image/encoded": image, "image/filename": name.encode(), "image/format": b"jpeg",
                               "image/height": H, "image/width": W, "image/channels": 3,
                               "image/segmentation/class/encoded": mask, "image/segmentation/class/format": b"png"}
                    writer.write(tf.train.Example(features=tf.train.Features(
                        feature={key: feature(value) for key, value in example.items()})).SerializeToString())
                    truth[split][name] = ids
    return folder, truth


def tfds_pets(parent: Path):
    """parent/tensorflow_datasets/oxford_iiit_pet/4.0.0, prepared by TFDS's own builder: TFDS's
    oxford_iiit_pet (its name, version and features: a JPEG image, the trimap as a one-channel PNG
    ``segmentation_mask`` of 1 pet, 2 background, 3 border, ``file_name``, labels, a box), generating a
    few made-up pets instead of reading the download. Returns (data_dir, {split: {file_name: trimap}})."""
    import inspect

    import tensorflow_datasets as tfds
    from etils import epath
    from tensorflow_datasets.datasets.oxford_iiit_pet.oxford_iiit_pet_dataset_builder import Builder

    truth = {"train": {}, "test": {}}

    class Pets(Builder, skip_registration=True):
        name = "oxford_iiit_pet"

        @classmethod
        def _get_pkg_dir_path(cls):  # the real builder's metadata (description, citation)
            return epath.Path(inspect.getfile(Builder)).parent

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples("train", 5), "test": self._generate_examples("test", 3)}

        def _generate_examples(self, split, n):
            rng = np.random.default_rng(len(split))
            for i in range(n):
                trimap = blocks(rng, np.array([1, 2, 3])).astype(np.uint8)
                name = f"{split.capitalize()}_Pet_{i}.jpg"
                truth[split][name] = trimap
                yield name, {"image": photo(rng), "label": i % 3, "species": i % 2, "file_name": name,
                             "segmentation_mask": trimap[..., None],
                             "head_bbox": tfds.features.BBox(0.1, 0.1, 0.5, 0.5)}

    data_dir = parent / "tensorflow_datasets"
    Pets(data_dir=str(data_dir)).download_and_prepare()
    return data_dir, truth
