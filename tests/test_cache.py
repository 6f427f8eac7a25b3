"""daliloader/cache.py: the cache listed by kind, cleaned by age, TFRecord indexes pruned by themselves; and
nothing of it written beside the user's data."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import daliloader as dl
from daliloader import cache, tfrecord


@pytest.fixture
def own_cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("DALILOADER_CACHE", str(root))
    monkeypatch.setattr(cache, "_pruned", set())
    return root


def records(folder: Path, name: str = "a.tfrecord") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with tfrecord.Writer(folder / name) as writer:
        writer.write({"image/encoded": b"\xff\xd8\xff", "image/segmentation/class/encoded": b"\x89PNG"})
    return folder / name


def age(path: Path, days: float) -> None:
    """Every file under ``path`` last used ``days`` ago."""
    then = time.time() - days * 86400
    for base, _, files in os.walk(path):
        for name in files:
            os.utime(os.path.join(base, name), (then, then))


def test_indexes_live_in_the_cache_and_are_listed_by_kind(own_cache, tmp_path):
    data = tmp_path / "data"
    for name in ("a.tfrecord", "b.tfrecord"):
        tfrecord.indexed(records(data, name))
    assert sorted(p.name for p in data.iterdir()) == ["a.tfrecord", "b.tfrecord"]  # nothing beside the data
    (own_cache / "prepared-v3-camvid-n64-abc").mkdir()
    (own_cache / "prepared-v3-camvid-n64-abc" / "manifest.json").write_text("{}")
    found = cache.entries()
    assert sorted(e.kind for e in found) == ["TFRecord index", "TFRecord index", "bench: prepared copy"]
    assert "3 entries" in cache.describe(found)


def test_beside_is_an_explicit_choice(own_cache, tmp_path, monkeypatch):
    data = tmp_path / "data"
    tfrecord.indexed(records(data), index="beside")
    assert (data / tfrecord.INDEX_FOLDER / "a.tfrecord.json").is_file() and not cache.entries()
    monkeypatch.setenv("DALILOADER_INDEX", "beside")
    tfrecord.indexed(records(data, "b.tfrecord"))
    assert (data / tfrecord.INDEX_FOLDER / "b.tfrecord.json").is_file()
    monkeypatch.setenv("DALILOADER_INDEX", "nearby")
    with pytest.raises(dl.DataError, match="index='nearby' .*DALILOADER_INDEX.*'cache'.*'beside'"):
        tfrecord.indexed(records(data, "c.tfrecord"))


def test_clean_removes_what_was_not_used_for_so_long(own_cache, tmp_path):
    tfrecord.indexed(records(tmp_path / "data", "old.tfrecord"))
    tfrecord.indexed(records(tmp_path / "data", "new.tfrecord"))
    old = next(e for e in cache.entries() if list(e.path.glob("old.tfrecord.json")))
    age(old.path, 40)
    removed = cache.clean(30)
    assert [e.path for e in removed] == [old.path] and len(cache.entries()) == 1
    assert len(cache.clean()) == 1 and cache.entries() == []


def test_an_index_used_again_is_not_old_and_unused_ones_are_pruned_when_one_is_written(own_cache, tmp_path,
                                                                                       monkeypatch):
    used, unused = (records(tmp_path / "data", n) for n in ("used.tfrecord", "unused.tfrecord"))
    tfrecord.indexed(used)
    tfrecord.indexed(unused)
    for entry in cache.entries():
        age(entry.path, cache.INDEX_DAYS + 1)
    tfrecord.indexed(used)  # read again: its last use is now
    monkeypatch.setattr(cache, "_pruned", set())  # (pruning runs once per process: this is another one)
    tfrecord.indexed(records(tmp_path / "data", "third.tfrecord"))  # a new index prunes the stale ones
    kept = sorted(p.name for e in cache.entries() for p in e.path.glob("*.json"))
    assert kept == ["third.tfrecord.json", "used.tfrecord.json"]


def test_the_command_lists_and_cleans(own_cache, tmp_path, capsys):
    from daliloader.cli import main

    tfrecord.indexed(records(tmp_path / "data"))
    assert main(["cache"]) == 0
    assert "TFRecord index" in capsys.readouterr().out
    assert main(["cache", "--clean", "--older-than", "1"]) == 0
    assert "nothing to remove" in capsys.readouterr().out
    assert main(["cache", "--clean"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert main(["cache"]) == 0 and "is empty" in capsys.readouterr().out


def test_folders_daliloader_did_not_make_are_never_listed_nor_cleaned(own_cache, tmp_path):
    """The cache may be a folder other tools share ($DALILOADER_CACHE=~/.cache): only daliloader's entries
    are its to clean."""
    (own_cache / "my-models").mkdir(parents=True)
    (own_cache / "my-models" / "weights.h5").write_text("precious")
    tfrecord.indexed(records(tmp_path / "data"))
    assert [e.kind for e in cache.entries()] == ["TFRecord index"]
    assert len(cache.clean()) == 1 and (own_cache / "my-models" / "weights.h5").read_text() == "precious"


def test_the_index_being_written_is_never_pruned(own_cache, tmp_path, monkeypatch):
    """A dataset written again after months: its old index folder is stale by age, and the new index goes
    into that very folder, which pruning must leave."""
    path = records(tmp_path / "data")
    tfrecord.indexed(path)
    for entry in cache.entries():
        age(entry.path, cache.INDEX_DAYS + 10)
    records(tmp_path / "data")  # the file written again: a new index into the same folder
    monkeypatch.setattr(cache, "_pruned", set())
    assert len(tfrecord.indexed(path).offsets) == 1 and len(cache.entries()) == 1


def test_the_listing_names_each_indexs_file_and_older_than_needs_clean(own_cache, tmp_path, capsys):
    from daliloader.cli import main

    tfrecord.indexed(records(tmp_path / "data", "train-00000-of-00001.tfrecord"))
    assert "(train-00000-of-00001.tfrecord)" in cache.describe(cache.entries())
    assert main(["cache", "--older-than", "3"]) == 2
    assert "--older-than says which entries --clean removes: pass --clean too" in capsys.readouterr().err
