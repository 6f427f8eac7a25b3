"""Folders prepared by TensorFlow Datasets (what ``tfds.load`` reads), read without importing it.

A prepared TFDS dataset is a version folder, ``DATA_DIR/NAME[/CONFIG]/VERSION/``, holding
``dataset_info.json`` (the name, the splits, each split's shard lengths and file-name template),
``features.json`` (each feature's class and shape) and the splits' TFRecord shards
(``NAME-SPLIT.tfrecord-00000-of-00004``). Image features are stored as encoded bytes under their own
key (nested feature dicts join their keys with ``/``); a segmentation mask is an ``Image`` feature of
one channel.

:func:`find` resolves what a user names (a version folder, a dataset folder holding versions, or
``"name[/config][:version]"`` under ``data_dir`` as ``tfds.load`` finds it) and reads a split's files
and keys. :data:`PUBLISHED` names the class tables of the segmentation datasets TFDS ships.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import DataError
from .tfrecord import Records

#: What TFDS calls its files.
INFO, FEATURES = "dataset_info.json", "features.json"
IMAGE_CLASS = "tensorflow_datasets.core.features.image_feature.Image"
#: Mask features of TFDS's segmentation datasets and the catalogue name of their class table
#: (:func:`daliloader.classes.ClassMap.named`): oxford_iiit_pet's trimaps, cityscapes' labelIds.
PUBLISHED = {"oxford_iiit_pet": "oxford_iiit_pet", "cityscapes": "cityscapes"}
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


@dataclass(frozen=True)
class TFDSSplit:
    """One split of a prepared TFDS dataset: its files in shard order, the image and mask keys, the
    dataset's name and version, the splits it has, and the catalogue name of its class table (None
    where TFDS's dataset has none that daliloader knows)."""

    name: str
    version: str
    folder: Path
    split: str
    files: tuple[str, ...]
    keys: Records
    splits: tuple[str, ...]
    classes: str | None


def data_dir(given: str | os.PathLike | None) -> Path:
    """Where ``tfds.load`` looks: ``data_dir``, else ``$TFDS_DATA_DIR``, else ``~/tensorflow_datasets``."""
    return Path(given or os.environ.get("TFDS_DATA_DIR") or Path.home() / "tensorflow_datasets").expanduser()


def find(path_or_name: str | os.PathLike, split: str = "train", data_dir_: str | os.PathLike | None = None,
         image_key: str | None = None, mask_key: str | None = None) -> TFDSSplit:
    """The split ``split`` of the TFDS dataset at ``path_or_name`` (see the module's docstring); its image
    and mask features, or those named."""
    folder = version_folder(path_or_name, data_dir_)
    info = _read_json(folder / INFO)
    splits = {s.get("name"): s for s in info.get("splits", []) if isinstance(s, dict)}
    if split not in splits:
        raise DataError(f"{folder} has no split {split!r}; its splits: {', '.join(sorted(splits)) or 'none'}")
    file_format = info.get("fileFormat", "tfrecord")
    if file_format != "tfrecord":
        raise DataError(f"{folder} stores its examples as {file_format}, not TFRecord: prepare it again with "
                        "tfds.builder(...).download_and_prepare(file_format='tfrecord')")
    files = split_files(folder, info.get("name", folder.parent.name), split, splits[split], file_format)
    name = info.get("name", "")
    return TFDSSplit(name, info.get("version", folder.name), folder, split, tuple(files),
                     image_and_mask(folder, name, image_key, mask_key), tuple(splits), PUBLISHED.get(name))


def version_folder(path_or_name: str | os.PathLike, data_dir_: str | os.PathLike | None = None) -> Path:
    """The version folder that ``path_or_name`` names: itself, the newest version inside a dataset (or
    config) folder, or ``name[/config][:version]`` under :func:`data_dir`."""
    path = named_folder(path_or_name, data_dir_)
    if (path / INFO).is_file():
        return path
    versions = sorted((p for p in path.iterdir() if _is_version(p)), key=lambda p: tuple(map(int, p.name.split("."))))
    if versions:
        return versions[-1]
    configs = sorted(p.name for p in path.iterdir() if p.is_dir() and any(map(_is_version, p.iterdir())))
    if configs:
        raise DataError(f"{path} holds {', '.join(configs)}, each with version folders: the configs of a TFDS dataset, "
                        f"or the datasets of a TFDS data_dir. Name one ({path / configs[0]})")
    raise DataError(f"{path} is no prepared TFDS dataset: no {INFO} in it nor in a version folder (such as 1.0.0/) "
                    "inside it")


def named_folder(path_or_name: str | os.PathLike, data_dir_: str | os.PathLike | None) -> Path:
    """The folder ``path_or_name`` names: ``name[/config][:version]`` under :func:`data_dir` where that
    is a folder and data_dir is given (or the path is none), else the path itself; neither is refused,
    listing what the data_dir holds."""
    path = Path(path_or_name).expanduser()
    name, _, version = str(path_or_name).partition(":")
    root = data_dir(data_dir_)
    under = root / name / version if version else root / name
    if under.is_dir() and (data_dir_ is not None or not path.is_dir()):
        return under
    if path.is_dir():
        return path
    held = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "downloads") if root.is_dir() else []
    raise DataError(f"no TFDS dataset {str(path_or_name)!r}: neither a folder nor prepared under {root} "
                    f"({', '.join(held) or 'which holds no dataset'}). daliloader reads prepared datasets only: "
                    "prepare it first (tfds.builder(name, data_dir=...).download_and_prepare()), or pass data_dir=")


def _is_version(path: Path) -> bool:
    """Whether ``path`` is a version folder (``1.0.0/``) of a prepared dataset."""
    return path.is_dir() and bool(_VERSION.match(path.name)) and (path / INFO).is_file()


def split_files(folder: Path, name: str, split: str, info: dict, file_format: str) -> list[str]:
    """The split's shards, as its ``filepathTemplate`` names them, in shard order; every one must be there."""
    shards = len(info.get("shardLengths", [])) or int(info.get("numShards", 1))  # (numShards: older TFDS)
    template = info.get("filepathTemplate") or "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
    files = [str(folder / template.format(DATASET=name, SPLIT=split, FILEFORMAT=file_format,
                                          SHARD_X_OF_Y=f"{i:05d}-of-{shards:05d}", SHARD_INDEX=i, NUM_SHARDS=shards))
             for i in range(shards)]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise DataError(f"{folder}: {len(missing)} of the {shards} shards of split {split!r} are missing, such as "
                        f"{missing[0]}: the dataset is incomplete; prepare it again")
    return files


def features(folder: Path) -> dict[str, dict]:
    """``features.json`` flattened: each feature's key (nested dicts joined with ``/``) -> its description."""
    def walk(node: dict, prefix: str) -> dict:
        found = {}
        inner = node.get("featuresDict", {}).get("features")
        if inner is None:
            return {prefix: node} if prefix else {}
        for key, value in inner.items():
            found.update(walk(value, f"{prefix}/{key}" if prefix else key))
        return found

    return walk(_read_json(folder / FEATURES), "")


#: Words in the name of a one-channel Image feature that mark it as a segmentation mask.
MASK_WORDS = ("segmentation", "mask", "label", "trimap", "annotation")


def image_and_mask(folder: Path, name: str, image_key: str | None = None, mask_key: str | None = None) -> Records:
    """The keys of the image (an Image feature of three channels) and of the mask (an Image feature of
    one channel whose name says so: :data:`MASK_WORDS`), or the keys given; a dataset without such a pair
    is refused, listing its features (a one-channel Image may be something else: cityscapes'
    disparity maps)."""
    found = features(folder)
    photo, mask = image_key or _photo(found), mask_key or _mask(found)
    if photo is None or mask is None:
        listed = ", ".join(_described(k, v) for k, v in found.items())
        raise DataError(f"{folder} ({name}) holds no image and segmentation mask (an Image feature of 3 channels, and "
                        f"one of 1 channel named as a mask); its features: {listed}. TFDS's voc, for one, holds boxes "
                        "only: read the VOC download with SegmentationData.from_folder. Or name the features: "
                        "image_key=, mask_key=")
    for key in (photo, mask):
        if key not in found:
            raise DataError(f"{folder} ({name}) has no feature {key!r}; its features: {', '.join(found)}")
    return Records(photo, mask)


def _images(found: dict[str, dict], channels: int) -> list[str]:
    """The Image features of ``channels`` channels."""
    return [k for k, v in found.items() if v.get("pythonClassName") == IMAGE_CLASS and _channels(v) == channels]


def _photo(found: dict[str, dict]) -> str | None:
    """The photo's feature: ``image`` or ``image_left`` where there, else the first Image of 3 channels."""
    photos = _images(found, 3)
    return next((k for k in ("image", "image_left") if k in photos), photos[0] if photos else None)


def _mask(found: dict[str, dict]) -> str | None:
    """The mask's feature: the first Image of one channel named as a mask (:data:`MASK_WORDS`)."""
    return next((k for k in _images(found, 1) if any(w in k.lower() for w in MASK_WORDS)), None)


def _described(key: str, feature: dict) -> str:
    """A feature in a message: its key, class and, for an Image, its channels."""
    kind = feature.get("pythonClassName", "?").rsplit(".", 1)[-1]
    return f"{key} ({kind}, {_channels(feature)} channel(s))" if "image" in feature else f"{key} ({kind})"


def _channels(feature: dict) -> int | None:
    """The channels of an Image feature's description in ``features.json`` (None where it gives none)."""
    dims = feature.get("image", {}).get("shape", {}).get("dimensions", [])
    return int(dims[-1]) if dims else None


def _read_json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"cannot read {path} ({e.strerror or e})") from None
    except ValueError as e:
        raise DataError(f"{path} is damaged: not valid JSON ({e}); prepare the dataset again") from None
    if not isinstance(found, dict):
        raise DataError(f"{path} is damaged: not a JSON object; prepare the dataset again")
    return found
