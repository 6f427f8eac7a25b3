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
    assert err.startswith(f"daliloader synth: error: cannot write {disk}/s/train") and \
        "no space left on the device" in err, err
