"""daliloader/synthetic.py: the embedded dataset. Its pictures compress like photos and its colour masks
hold exact CamVid colours; the default dataset is made once in the cache (DALILOADER_CACHE) and reused;
an unwritable cache names the variable; a disk that fills while ``daliloader synth`` writes is one line.

Full disks are small tmpfs mounts: the test that needs one skips, saying why, where mounting is not allowed.
"""

from __future__ import annotations

import cv2
import pytest

import daliloader as dl


def test_synthetic_images_compress_like_photos(tmp_path):
    """960x720 JPEG q90 must be 100-300 KB (realistic), masks are exact CamVid colours."""
    d = dl.synthetic.make_dataset(tmp_path, n=2, image_size=(720, 960))
    for img, mask in zip(d.images, d.masks):
        kb = (tmp_path / img).stat().st_size / 1024
        assert 100 <= kb <= 300, f"{img}: {kb:.0f} KB"
        m = cv2.imread(mask)[..., ::-1]
        assert m.shape == (720, 960, 3)
        assert (d.classes.map_mask(m) < 32).all()


@pytest.mark.parametrize("size", [(48, 64), (64, 64), (96, 128)])
def test_small_synthetic_photos_are_not_blank(tmp_path, size):
    """The examples' small datasets: the lighting's blobs used a fixed width of 60 pixels, nearly constant
    on a small picture, whose normalised value then clipped most photos to black or white (7 of 8 at
    64x64)."""
    data = dl.synthetic.make_dataset(tmp_path / "d", n=8, image_size=size)
    assert all(cv2.imread(str(p)).std() > 20 for p in data.images)


def test_the_embedded_dataset_is_made_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "cache"))
    first = dl.synthetic.default_dataset(n=2, image_size=(16, 16))
    assert len(first) == 2 and first.images == dl.synthetic.default_dataset(n=2, image_size=(16, 16)).images
    assert not list((tmp_path / "cache").glob("*.incomplete-*"))


def test_an_unwritable_cache_names_the_variable(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(dl.DataError, match=r"file is a file, not a folder; set DALILOADER_CACHE"):
        dl.synthetic.default_dataset(n=2, image_size=(16, 16))


def test_a_disk_that_fills_while_synth_writes_is_one_line(tmp_path, tmpfs, capsys):
    from daliloader.cli import main as cli

    disk = tmpfs(tmp_path / "small", "size=64k")
    assert cli(["synth", str(disk / "s"), "--n", "40", "--image-size", "120,160"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"daliloader synth: error: cannot write {disk}/s/") and \
        "no space left on the device" in err, err
    assert not (disk / "s" / "train").exists() and not list((disk / "s").glob(".train.incomplete-*"))  # nothing left


def test_synth_writes_a_split_whole_or_not_at_all_and_never_over_another(tmp_path, monkeypatch):
    """synth wrote into OUT in place: over an existing dataset (2 new pairs among 4 stale ones of another
    size), and an interrupted run left a part of the pairs, which check called clean. A split is now
    written under a temporary name and renamed; one that holds files is refused; another split beside
    it is welcome; sizes and seeds are checked as the loaders check them."""
    from daliloader import synthetic

    out = tmp_path / "d"
    dl.synthetic.make_dataset(out, n=3, image_size=(32, 48))
    with pytest.raises(dl.DataError, match=r"d/train holds files already"):
        dl.synthetic.make_dataset(out, n=2, image_size=(16, 16))
    assert len(dl.synthetic.make_dataset(out, n=3, image_size=(32, 48))) == 3  # a script run again: as it is
    assert len(dl.synthetic.make_dataset(out, n=2, image_size=(32, 48), split="val", seed=1)) == 2
    assert len(dl.SegmentationData.from_folder(out)) == 3  # the training split as it was

    calls = []

    def interrupted(rng, labels, palette, real=synthetic._render_photo):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(rng, labels, palette)

    monkeypatch.setattr(synthetic, "_render_photo", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dl.synthetic.make_dataset(tmp_path / "e", n=4, image_size=(16, 16))
    assert [p.name for p in (tmp_path / "e").iterdir()] in ([], ["class_dict.csv"])  # no split, no leftovers
    for bad, message in (({"image_size": (100_000, 8)}, "each side must be an integer in 1..16384"),
                         ({"seed": -1}, "seed must be an integer >= 0")):
        with pytest.raises(dl.SpecError, match=message):
            dl.synthetic.make_dataset(tmp_path / "f", n=1, **bad)
