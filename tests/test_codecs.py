"""daliloader/codecs.py: OpenCV's decoding and encoding as the checks, prepare and the opencv backend use
it, unit by unit, without TensorFlow or DALI: 16-bit samples rounded to the nearest 8-bit level
(round(x / 257), not OpenCV's high byte), a palette PNG read as its colours, id masks read as stored,
corrupt data decoded to None and named by the decoders that raise, EXIF orientation ignored, files
written whole, or the one a full disk did not take named.

That every backend rounds 16-bit pictures alike: tests/test_backends.py.
"""

from __future__ import annotations

import errno
import io
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

import daliloader as dl
from daliloader import codecs


def png(image: Image.Image) -> np.ndarray:
    """A Pillow picture encoded as PNG, as :func:`codecs.read` returns a file's bytes."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return np.frombuffer(buffer.getvalue(), np.uint8)


def test_16_bit_samples_round_to_the_nearest_8_bit_level():
    every = np.arange(65536, dtype=np.uint16)
    rounded = codecs.to_8bit(every)
    assert rounded.dtype == np.uint8
    np.testing.assert_array_equal(rounded, np.rint(every / 257).astype(np.uint8))
    assert (rounded != every >> 8).sum() == 16256  # where the high byte is one level lower
    assert codecs.to_8bit(np.array([0, 128, 129, 385, 65535], np.uint16)).tolist() == [0, 0, 1, 1, 255]
    eight = np.arange(256, dtype=np.uint8)
    assert codecs.to_8bit(eight) is eight  # 8-bit samples as they are


def test_a_16_bit_colour_png_is_read_as_rounded_rgb():
    """A 16-bit BGR PNG (as OpenCV writes it): the image and a colour mask come out RGB, 8 bits, rounded."""
    rng = np.random.default_rng(0)
    rgb16 = rng.integers(0, 65536, (6, 5, 3), dtype=np.uint16)
    encoded = np.frombuffer(codecs.encode(".png", rgb16[..., ::-1]), np.uint8)
    want = np.rint(rgb16 / 257).astype(np.uint8)
    np.testing.assert_array_equal(codecs.decode_image(encoded, "x.png"), want)
    mask = codecs.mask_pixels(encoded, dl.synthetic.camvid_classmap())
    assert mask.dtype == np.uint8
    np.testing.assert_array_equal(mask, want)


def test_a_palette_png_is_read_as_its_colours():
    """Every decoder expands a palette: a colour map reads a palette mask's colours (RGB), and so does an id
    map (three channels, BGR), never its indices: which is why the checks refuse palette masks with id maps."""
    indices = np.array([[0, 1], [2, 255]], np.uint8)
    mask = Image.fromarray(indices, mode="P")
    mask.putpalette([0, 0, 0, 200, 30, 30, 30, 200, 30] + [0, 0, 0] * 252 + [255, 255, 255])
    encoded = png(mask)
    colours = [[[0, 0, 0], [200, 30, 30]], [[30, 200, 30], [255, 255, 255]]]
    assert codecs.mask_pixels(encoded, dl.synthetic.camvid_classmap()).tolist() == colours
    as_ids = codecs.mask_pixels(encoded, dl.ClassMap.from_ids(3))
    assert as_ids.shape == (2, 2, 3) and as_ids[..., ::-1].tolist() == colours


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_id_masks_are_read_as_stored(dtype):
    ids = np.array([[0, 7, 200], [255, 1, 3]] if dtype == np.uint8 else [[0, 7, 300], [1000, 65000, 65535]], dtype)
    decoded = codecs.mask_pixels(np.frombuffer(codecs.encode(".png", ids), np.uint8), dl.ClassMap.from_ids(4))
    assert decoded.dtype == dtype
    np.testing.assert_array_equal(decoded, ids)


def test_rgba_tiffs_are_read_with_their_colours_as_stored():
    """OpenCV multiplies the colours of an 8-bit TIFF with unassociated alpha by their alpha (libtiff's RGBA
    interface): such a TIFF is read by Pillow, its colours as stored, as DALI reads them; a 16-bit one, which
    OpenCV reads as stored and Pillow would cut to its high byte, is rounded as every 16-bit picture is
    (a closing review: Pillow's path had taken it too)."""
    from conftest import raw_tiff

    rgba = np.zeros((2, 3, 4), np.uint8)
    rgba[..., 0], rgba[..., 1], rgba[..., 3] = 200, [[0, 40, 80]], 200
    decoded = codecs.decode_image(np.frombuffer(raw_tiff(rgba, (2,)), np.uint8), "a.tif")
    np.testing.assert_array_equal(decoded, rgba[..., :3])
    rgba16 = (rgba.astype(np.uint16) * 257 - 100).clip(0).astype(np.uint16)  # rounds up to the 8-bit levels
    decoded = codecs.decode_image(np.frombuffer(raw_tiff(rgba16, (2,)), np.uint8), "a.tif")
    np.testing.assert_array_equal(decoded, codecs.to_8bit(rgba16[..., :3]))


def test_a_tiff_past_pillows_pixel_limit_is_named_not_a_decompression_bomb():
    """Pillow checks its pixel limit again when a TIFF's pixels are read: a TIFF of over 179 million pixels
    (its header says 14000 x 14000; OpenCV, DALI and TensorFlow decode such sizes) escaped as Pillow's
    DecompressionBombError where a LoadError naming the file is promised (a closing review)."""
    from conftest import raw_tiff

    huge = np.frombuffer(raw_tiff(np.zeros((1, 1, 4), np.uint8), (2,), size=(14000, 14000)), np.uint8)
    with pytest.raises(dl.LoadError, match="cannot decode image a.tif"):
        codecs.decode_image(huge, "a.tif")


def test_corrupt_data_decodes_to_none_and_the_decoders_name_the_file():
    whole = np.frombuffer(codecs.encode(".png", np.full((8, 8, 3), 90, np.uint8)), np.uint8)
    for bad in (np.frombuffer(b"<html>404 Not Found</html>\n", np.uint8), whole[: len(whole) // 2].copy()):
        assert codecs.decode(bad, cv2.IMREAD_COLOR) is None
        assert codecs.mask_pixels(bad, dl.ClassMap.from_ids(3)) is None
        with pytest.raises(dl.LoadError, match=r"cannot decode image /d/x\.png: corrupt, truncated or not an image"):
            codecs.decode_image(bad, "/d/x.png")
        with pytest.raises(dl.LoadError, match=r"cannot decode mask /d/m\.png: corrupt, truncated or not an image"):
            codecs.decode_mask(bad, "/d/m.png", dl.ClassMap.from_ids(3))


def test_exif_orientation_is_ignored(tmp_path):
    """A JPEG whose EXIF says "rotate 90 degrees": read as stored, 40 high and 64 wide, as every backend reads it
    (OpenCV's own imread would turn it)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (64, 40), (200, 30, 30)).save(tmp_path / "x.jpg", exif=exif)
    assert cv2.imread(str(tmp_path / "x.jpg")).shape == (64, 40, 3)
    image = codecs.decode_image(codecs.read(tmp_path / "x.jpg"), tmp_path / "x.jpg")
    assert image.shape == (40, 64, 3) and abs(image[20, 32].astype(int) - (200, 30, 30)).max() <= 3


def test_a_file_is_written_whole_and_reads_back(tmp_path):
    pixels = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    blob = codecs.encode(".png", pixels)
    codecs.write_file(tmp_path / "a.png", blob)
    assert (tmp_path / "a.png").read_bytes() == blob
    np.testing.assert_array_equal(codecs.decode_file(tmp_path / "a.png", cv2.IMREAD_COLOR), pixels)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_write_the_disk_did_not_take_names_the_file(tmp_path):
    """/dev/full stands in for a full disk: the OSError says ENOSPC and names the file."""
    (tmp_path / "full.png").symlink_to("/dev/full")
    with pytest.raises(OSError) as e:
        codecs.write_file(tmp_path / "full.png", codecs.encode(".png", np.zeros((4, 4, 3), np.uint8)))
    assert (e.value.errno, e.value.filename) == (errno.ENOSPC, str(tmp_path / "full.png"))
