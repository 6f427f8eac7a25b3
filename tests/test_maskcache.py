"""The mask cache (daliloader/maskcache.py): colour masks decoded once into class indices that every loader
reads in their place. It must never change a label, never serve a mask older than the file, and never name
its own files where the user's are meant."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import PALETTE, block_labels, one_epoch, write_pairs

import daliloader as dl
from daliloader import maskcache
from daliloader.environment import cache_dir
from daliloader.errors import DataError
from daliloader.manifest import LZ4_HEADER
from daliloader.tfrecord import file_stamp

H, W = 24, 32
OPTIONS = dict(batch_size=2, image_size=(H, W), crop="center", label_mode="int", shuffle=False)


def colour_pairs(root: Path, n: int = 4, seed: int = 0) -> dl.SegmentationData:
    rng = np.random.default_rng(seed)
    labels = [block_labels(rng, H, W) for _ in range(n)]
    return write_pairs(root, [PALETTE[lab] for lab in labels], [PALETTE[lab] for lab in labels])


def caches() -> list[Path]:
    return sorted(cache_dir().glob(f"{maskcache.PREFIX}*"))


def labels_of(backend: str, data) -> np.ndarray:
    return np.concatenate([batch[1] for batch in one_epoch(backend, data, **OPTIONS)])


def test_labels_are_the_same_with_and_without_the_cache(tmp_path, backend, monkeypatch):
    data = colour_pairs(tmp_path)
    made = len(caches())
    cached = one_epoch(backend, data, **OPTIONS)
    assert len(caches()) == made + 1  # colour masks: cached by default
    monkeypatch.setenv("DALILOADER_MASK_CACHE", "0")
    direct = one_epoch(backend, data, **OPTIONS)
    for (x1, y1), (x2, y2) in zip(cached, direct, strict=True):
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(x1, x2)


def test_a_mask_changed_after_the_cache_was_made_is_read_as_it_is_now(tmp_path, backend):
    """Written again with other classes (a relabelled mask): the next loader reads the new labels, not the
    cached ones; the other masks' entries are kept."""
    data = colour_pairs(tmp_path)
    before = labels_of(backend, data)
    cv2.imwrite(data.masks[1], np.full((H, W, 3), PALETTE[5][::-1], np.uint8))  # BGR for OpenCV
    after = labels_of(backend, data)
    assert (after[1] == 5).all() and not (before[1] == 5).all()
    np.testing.assert_array_equal(after[[0, 2, 3]], before[[0, 2, 3]])


def test_a_mask_that_does_not_decode_fails_at_its_pair_naming_the_users_file(tmp_path, backend):
    """The cache is made without its entry; loading stops at that pair with the user's mask named (never
    the cache's file), as it would without the cache."""
    data = colour_pairs(tmp_path)
    blob = Path(data.masks[2]).read_bytes()
    Path(data.masks[2]).write_bytes(blob[: len(blob) // 2])
    with pytest.raises(Exception) as err:
        one_epoch(backend, data, **OPTIONS)
    assert data.masks[2] in str(err.value) and "daliloader check" in str(err.value)
    assert maskcache.PREFIX not in str(err.value)
    (folder,) = [c for c in caches() if json.loads((c / maskcache.ENTRIES).read_text())["stamps"][0]
                 == list(file_stamp(data.masks[0]))]
    assert json.loads((folder / maskcache.ENTRIES).read_text())["stamps"][2] is None


def test_the_setting_turns_it_off_on_for_id_masks_or_is_refused(tmp_path, monkeypatch):
    colours = colour_pairs(tmp_path / "colours")
    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    for i in range(2):
        cv2.imwrite(str(tmp_path / "images" / f"{i}.png"), np.zeros((H, W, 3), np.uint8))
        cv2.imwrite(str(tmp_path / "masks" / f"{i}.png"), np.full((H, W), i, np.uint8))
    ids = dl.SegmentationData.from_dirs(tmp_path / "images", tmp_path / "masks", dl.ClassMap.from_ids({0: 1, 1: 0}))
    indices = dl.SegmentationData.from_dirs(tmp_path / "images", tmp_path / "masks", 2)
    monkeypatch.setenv("DALILOADER_MASK_CACHE", "0")
    assert not maskcache.wanted(colours)
    monkeypatch.setenv("DALILOADER_MASK_CACHE", "1")
    assert maskcache.wanted(colours) and maskcache.wanted(ids)
    assert not maskcache.wanted(indices)  # class indices already: nothing to map
    monkeypatch.delenv("DALILOADER_MASK_CACHE")
    assert maskcache.wanted(colours) and not maskcache.wanted(ids)
    monkeypatch.setenv("DALILOADER_MASK_CACHE", "yes")
    with pytest.raises(DataError, match="DALILOADER_MASK_CACHE='yes'"):
        dl.make_plan(colours, batch_size=2, image_size=(H, W))


def test_the_gpu_form_holds_the_same_indices_and_only_where_they_fit_8_bits(tmp_path):
    """Made where no GPU was seen, the LZ4 form is added when dali-gpu asks, entry for entry equal to the
    PNG entries; a class map whose ignore index needs 16 bits gets none, so dali-gpu reads the PNGs."""
    import lz4.block

    data = colour_pairs(tmp_path)
    assert not maskcache.MaskCache.made_for(data).gpu
    cache = maskcache.MaskCache.made_for(data, gpu=True)
    view = cache.view()
    assert cache.gpu and len(view.gpu_masks) == len(data)
    for png, lz4_path in zip(view.masks, view.gpu_masks, strict=True):
        blob = Path(lz4_path).read_bytes()
        indices = np.frombuffer(lz4.block.decompress(blob[LZ4_HEADER:], uncompressed_size=H * W), np.uint8)
        np.testing.assert_array_equal(indices.reshape(H, W), cv2.imread(png, cv2.IMREAD_UNCHANGED))
    assert json.loads((cache.folder / maskcache.ENTRIES).read_text())["gpu"]  # said for the next run

    wide = replace(data, classes=dl.ClassMap.from_csv(data.classes.source, ignore_index=300))
    cache = maskcache.MaskCache.made_for(wide, gpu=True)
    assert not cache.gpu and cache.view().gpu_masks is None and cache.view().mask_depth == 16


def test_an_entry_removed_under_a_run_is_written_again(tmp_path, backend):
    """A cache cleaned (or damaged) after it was made: the next loader writes the entry again from the
    user's mask, with the same labels, instead of failing on the cache's file."""
    data = colour_pairs(tmp_path)
    before = labels_of(backend, data)
    (folder,) = [c for c in caches() if json.loads((c / maskcache.ENTRIES).read_text())["stamps"][0]
                 == list(file_stamp(data.masks[0]))]
    (folder / "masks" / "0000001.png").unlink()
    np.testing.assert_array_equal(labels_of(backend, data), before)
    assert (folder / "masks" / "0000001.png").exists()


def test_a_subset_of_cached_data_is_the_users_pairs(tmp_path):
    """A plan's data reads the cache; a subset or split of it is the user's own pairs again (which a loader
    caches and vets), never cache files cut loose from the masks they came from."""
    data = colour_pairs(tmp_path)
    cached = dl.make_plan(data, batch_size=2, image_size=(H, W)).data
    assert cached.mask_cache is not None and maskcache.PREFIX in cached.masks[0]
    assert cached.subset([2, 0]).masks == (data.masks[2], data.masks[0])
    train, val = cached.split(0.5)
    assert set(train.masks) | set(val.masks) == set(data.masks)
