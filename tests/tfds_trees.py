"""Folders prepared by TensorFlow Datasets' own builders (TFDS 4.9): each builder here subclasses the real
one (its name, version, configs and features) and generates a few made-up examples instead of reading the
download. Pictures are tiny (24x40) so that the tests stay fast. Each function prepares one dataset under
``parent/tensorflow_datasets`` and returns that data_dir with what its examples hold, computed here from
the dataset's own conventions, independently of daliloader.

- :func:`many_pets`: oxford_iiit_pet with splits of several shards (more than 16 records each, so that
  ``tfds.load``'s interleave of the shards shows), each record named by its ``file_name``.
- :func:`scene_parse`: scene_parse150 (ADE20K), whose ``annotation`` is an RGB PNG: red the instance
  category (0 none, 1-100 the categories of MIT's ``annotations_instance``), green the instance.
- :func:`cityscapes`: cityscapes' ``semantic_segmentation`` config: ``image_left`` and the
  ``segmentation_label`` that holds gtFine's labelIds.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
from trees import CITYSCAPES_TRAIN_IDS, H, W, blocks, photo


def _pkg_dir(builder):
    """The real builder's folder, where TFDS finds its metadata (description, citation, checksums)."""
    from etils import epath

    return epath.Path(inspect.getfile(builder)).parent


def _prepare(builder, data_dir: Path, num_shards: int | None) -> None:
    """``builder`` written under ``data_dir`` as ``download_and_prepare`` writes it, in ``num_shards`` shards
    per split (None: as many as TFDS chooses, one for data this small)."""
    import tensorflow_datasets as tfds

    config = tfds.download.DownloadConfig(num_shards=num_shards) if num_shards else None
    builder.download_and_prepare(download_config=config)


def many_pets(parent: Path, splits: dict[str, int] | None = None, num_shards: int = 4):
    """parent/tensorflow_datasets/oxford_iiit_pet/4.0.0 by TFDS's oxford_iiit_pet builder, each split in
    ``num_shards`` shards (default: train 80 records, test 70). Returns (data_dir, {file_name: trimap})."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.datasets.oxford_iiit_pet.oxford_iiit_pet_dataset_builder import Builder

    splits = splits or {"train": 80, "test": 70}
    truth = {}

    class Pets(Builder, skip_registration=True):
        name = "oxford_iiit_pet"

        @classmethod
        def _get_pkg_dir_path(cls):
            return _pkg_dir(Builder)

        def _split_generators(self, dl_manager):
            return {split: self._generate_examples(split, n) for split, n in splits.items()}

        def _generate_examples(self, split, n):
            rng = np.random.default_rng(len(split))
            for i in range(n):
                trimap = blocks(rng, np.array([1, 2, 3])).astype(np.uint8)
                name = f"{split}_{i:03d}.jpg"
                truth[name] = trimap
                yield name, {"image": photo(rng), "label": i % 37, "species": i % 2, "file_name": name,
                             "segmentation_mask": trimap[..., None],
                             "head_bbox": tfds.features.BBox(0.1, 0.1, 0.5, 0.5)}

    data_dir = parent / "tensorflow_datasets"
    _prepare(Pets(data_dir=str(data_dir)), data_dir, num_shards)
    return data_dir, truth


def scene_parse(parent: Path, splits: dict[str, int] | None = None):
    """parent/tensorflow_datasets/scene_parse150/1.0.0 by TFDS's scene_parse150 builder: ``image`` (JPEG)
    and ``annotation``, an RGB PNG whose red channel is the ADE20K instance category (0 none, 1-100) and
    green the instance, as MIT's ``annotations_instance`` that TFDS reads. Returns (data_dir, {split:
    [expected labels of each example in the order TFDS wrote them]}): red 0 ignored (255), 1-100 -> 0-99."""
    from tensorflow_datasets.datasets.scene_parse150.scene_parse150_dataset_builder import Builder

    splits = splits or {"train": 3, "test": 2}
    truth = {split: {} for split in splits}

    class SceneParse(Builder, skip_registration=True):
        name = "scene_parse150"

        @classmethod
        def _get_pkg_dir_path(cls):
            return _pkg_dir(Builder)

        def _split_generators(self, dl_manager):
            return {split: self._generate_examples(split, n) for split, n in splits.items()}

        def _generate_examples(self, split, n):
            rng = np.random.default_rng(10 + len(split))
            for i in range(n):
                red = blocks(rng, np.arange(101)).astype(np.uint8)
                green = blocks(rng, np.arange(1, 40)).astype(np.uint8)
                blue = np.zeros_like(red)
                key = f"ADE_{split}_{i:08d}"
                truth[split][key] = np.where(red == 0, 255, red.astype(np.int64) - 1)
                yield key, {"image": photo(rng), "annotation": np.stack([red, green, blue], axis=-1)}

    data_dir = parent / "tensorflow_datasets"
    _prepare(SceneParse(data_dir=str(data_dir)), data_dir, None)
    return data_dir, truth


def cityscapes(parent: Path, splits: dict[str, int] | None = None):
    """parent/tensorflow_datasets/cityscapes/semantic_segmentation/1.0.0 by TFDS's cityscapes builder (config
    ``semantic_segmentation``): ``image_id``, ``image_left`` and ``segmentation_label`` (gtFine's labelIds,
    one channel). The features are TFDS's but 24x40 instead of 1024x2048, so that the test stays small.
    Returns (data_dir, {image_id: expected train ids}), labelIds that are no train id ignored (255)."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.datasets.cityscapes.cityscapes_dataset_builder import Builder

    splits = splits or {"train": 3, "validation": 2}
    truth = {}

    class Cityscapes(Builder, skip_registration=True):
        name = "cityscapes"

        @classmethod
        def _get_pkg_dir_path(cls):
            return _pkg_dir(Builder)

        def _info(self):
            real = super()._info()  # the real features, their shapes made small
            features = {key: tfds.features.Image(shape=(H, W, feature.shape[-1]), encoding_format="png",
                                                 use_colormap=key == "segmentation_label")
                        if isinstance(feature, tfds.features.Image) else feature
                        for key, feature in real.features.items()}
            return self.dataset_info_from_configs(features=tfds.features.FeaturesDict(features),
                                                  homepage=real.homepage)

        def _split_generators(self, dl_manager):
            return {split: self._generate_examples(split, n) for split, n in splits.items()}

        def _generate_examples(self, split, n):
            rng = np.random.default_rng(20 + len(split))
            for i in range(n):
                image_id = f"{split}city_{i:06d}_000019"
                label_ids = blocks(rng, np.arange(34)).astype(np.uint8)
                truth[image_id] = np.vectorize(lambda v: CITYSCAPES_TRAIN_IDS.get(int(v), 255))(label_ids)
                yield image_id, {"image_id": image_id, "image_left": photo(rng),
                                 "segmentation_label": label_ids[..., None]}

    data_dir = parent / "tensorflow_datasets"
    _prepare(Cityscapes(data_dir=str(data_dir), config="semantic_segmentation"), data_dir, None)
    return data_dir, truth
