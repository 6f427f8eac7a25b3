import subprocess
import sys

import cv2
import numpy as np
import pytest

import daliloader as dl
from daliloader.errors import DataError


def _touch_png(path, value=0, shape=(4, 4, 3)):
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.full(shape, value, np.uint8))


@pytest.fixture
def csv_path(tmp_path):
    p = tmp_path / "class_dict.csv"
    p.write_text("name,r,g,b\nA,0,0,0\n")
    return p


@pytest.mark.parametrize("suffix", ["_L", "", "_mask", "_gtFine_labelIds"])
def test_pairs_detect_mask_suffix(tmp_path, csv_path, suffix):
    for stem in ("b", "a", "c"):
        _touch_png(tmp_path / "img" / f"{stem}.png")
        _touch_png(tmp_path / "lab" / f"{stem}{suffix}.png")
    d = dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)
    assert [p.split("/")[-1] for p in d.images] == ["a.png", "b.png", "c.png"]
    assert [p.split("/")[-1] for p in d.masks] == [f"{s}{suffix}.png" for s in "abc"]


def test_pairs_in_subfolders_with_image_suffix(tmp_path):
    """Cityscapes layout: city folders, *_leftImg8bit.png images and *_gtFine_labelIds.png masks."""
    for city, n in (("aachen", 2), ("bonn", 1)):
        for i in range(n):
            _touch_png(tmp_path / "leftImg8bit" / city / f"{city}_{i:06d}_leftImg8bit.png")
            _touch_png(tmp_path / "gtFine" / city / f"{city}_{i:06d}_gtFine_labelIds.png", shape=(4, 4))
    d = dl.SegmentationData.from_dirs(tmp_path / "leftImg8bit", tmp_path / "gtFine", dl.ClassMap.cityscapes(),
                                      image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds")
    assert len(d) == 3 and d.classes.kind == "id"
    assert all(m.replace("gtFine_labelIds", "leftImg8bit").replace("gtFine", "leftImg8bit") == i
               for i, m in zip(d.images, d.masks))


def test_unpaired_files_are_listed(tmp_path, csv_path):
    for stem in ("a", "b", "c"):
        _touch_png(tmp_path / "img" / f"{stem}.jpg")
    _touch_png(tmp_path / "lab" / "a_L.png")
    _touch_png(tmp_path / "lab" / "b_L.png")
    _touch_png(tmp_path / "lab" / "zzz_L.png")
    with pytest.raises(DataError) as e:
        dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)
    msg = str(e.value)
    assert "image without mask: " in msg and "c.jpg" in msg
    assert "mask without image: " in msg and "zzz_L.png" in msg
    assert "'_L' was detected" in msg


def test_missing_folders_and_empty(tmp_path, csv_path):
    with pytest.raises(DataError, match="images folder .* does not exist"):
        dl.SegmentationData.from_dirs(tmp_path / "nope", tmp_path, csv_path)
    (tmp_path / "img").mkdir()
    (tmp_path / "lab").mkdir()
    with pytest.raises(DataError, match="no images"):
        dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "lab", csv_path)


def test_import_is_cheap():
    code = ("import sys, daliloader as dl; dl.ClassMap.from_ids(3); "
            "bad = [m for m in ('tensorflow', 'nvidia.dali', 'keras') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_synthetic_images_compress_like_photos(tmp_path):
    """960x720 JPEG q90 must be 100-300 KB (realistic), masks are exact CamVid colours."""
    d = dl.synthetic.make_dataset(tmp_path, n=2, image_size=(720, 960))
    for img, mask in zip(d.images, d.masks):
        kb = (tmp_path / img).stat().st_size / 1024
        assert 100 <= kb <= 300, f"{img}: {kb:.0f} KB"
        m = cv2.imread(mask)[..., ::-1]
        assert m.shape == (720, 960, 3)
        assert (d.classes.map_mask(m) < 32).all()
