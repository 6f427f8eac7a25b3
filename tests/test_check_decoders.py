"""`check` against what the loaders' decoders do (issue 33, item 8): check finds what a loader will fail on.

- PNGs whose compressed image data (IDAT) is cut short or damaged while the file keeps its end marker,
  built several ways: OpenCV, TensorFlow and DALI's CPU decoder (all libpng) refuse every one, Pillow
  (check's decoder for PNG until now) lets half of them pass. check reports each one, naming it, as
  truncated or corrupt, and every backend names it when it fails on it.
- Pictures too large for a backend's decoders: a valid 14000x14000 JPEG that TensorFlow refuses (its
  cap is width x height x components < 2^29, a crop or not) while DALI and OpenCV read it; OpenCV's own
  cap (OPENCV_IO_MAX_IMAGE_PIXELS, 2^30 by default), which DALI's copy of OpenCV shares for PNG, WebP
  and BMP. check reports them per backend, and a loader that cannot decode one says it is its limit and
  which backends read it.
- tfdata and WebP: TensorFlow decodes WebP only as uint8, and tfdata asks for uint16.

The huge pictures are made once per session (an all-grey 14000x14000 JPEG is 3 MB) and decoded whole
only where a test needs it; OpenCV's cap is tested on small pictures, in child processes whose
environment lowers it (OpenCV reads it once, when a process first decodes).

Tests marked "LEAD WIRING" need a change outside inspection.py (the guard, codecs or tfdata) and fail
until it is made.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import PALETTE, block_labels, one_epoch, write_pairs

import daliloader as dl
from daliloader.inspection import (
    SIZE_LIMITS,
    Header,
    ProblemKind,
    backend_limits,
    decode_problem,
    peek,
    size_problem,
    size_readers,
)

H, W = 48, 64
HUGE = 14000


# ---------------------------------------------------------------- PNGs cut short or damaged, end marker kept
def chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    """A PNG chunk; its checksum computed, or ``crc`` as given."""
    crc = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def png_parts(png: bytes) -> tuple[bytes, bytes]:
    """A PNG as (signature and the chunks before its image data, its image data: the IDAT bodies joined)."""
    pos, head, idat = 8, png[:8], b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            idat += png[pos + 8:pos + 8 + length]
        elif kind != b"IEND":
            head += png[pos:pos + 12 + length]
        pos += 12 + length
    return head, idat


IEND = chunk(b"IEND", b"")


def rows_of(pixels: np.ndarray) -> bytes:
    """An 8-bit RGB picture as PNG rows, unfiltered (filter byte 0)."""
    return b"".join(b"\0" + row.tobytes() for row in pixels)


def cut_fixed(head, idat, rows):  # IDAT cut in half, its length and checksum made right
    return head + chunk(b"IDAT", idat[:len(idat) // 2]) + IEND


def cut_old_crc(head, idat, rows):  # IDAT cut in half, its length made right, its old checksum kept
    return head + chunk(b"IDAT", idat[:len(idat) // 2], zlib.crc32(b"IDAT" + idat)) + IEND


def cut_old_length(head, idat, rows):  # bytes gone from the IDAT, its header left as it was: it runs into IEND
    return head + struct.pack(">I", len(idat)) + b"IDAT" + idat[:len(idat) // 2] + b"\0" * 4 + IEND


def half_the_rows(head, idat, rows):  # a whole, sound zlib stream of half the rows
    return head + chunk(b"IDAT", zlib.compress(rows[:len(rows) // 2])) + IEND


def no_adler(head, idat, rows):  # every row there, the zlib stream's checksum (its last 4 bytes) gone
    return head + chunk(b"IDAT", idat[:-4]) + IEND


def no_final_block(head, idat, rows):  # every row there, flushed but never finished (no final deflate block)
    stream = zlib.compressobj()
    return head + chunk(b"IDAT", stream.compress(rows) + stream.flush(zlib.Z_SYNC_FLUSH)) + IEND


def idat_chunks_dropped(head, idat, rows):  # written in chunks of 4 KiB; the later half of them lost
    pieces = [idat[i:i + 4096] for i in range(0, len(idat), 4096)]
    return head + b"".join(chunk(b"IDAT", p) for p in pieces[:len(pieces) // 2]) + IEND


def idat_crc_only(head, idat, rows):  # the data whole, one bit of the IDAT's checksum flipped
    return head + chunk(b"IDAT", idat, zlib.crc32(b"IDAT" + idat) ^ 1) + IEND


# (how, the kind check reports, whether Pillow loads it)
DAMAGED_PNGS = [
    (cut_fixed, ProblemKind.TRUNCATED, False),
    (cut_old_crc, ProblemKind.CORRUPT, False),
    (cut_old_length, ProblemKind.TRUNCATED, False),
    (half_the_rows, ProblemKind.TRUNCATED, True),
    (no_adler, ProblemKind.TRUNCATED, True),
    (no_final_block, ProblemKind.TRUNCATED, True),
    (idat_chunks_dropped, ProblemKind.TRUNCATED, False),
    (idat_crc_only, ProblemKind.CORRUPT, True),
]
IDS = [how.__name__ for how, _, _ in DAMAGED_PNGS]
#: The damage Pillow lets pass, which check missed.
PILLOW_PASSES = [d for d in DAMAGED_PNGS if d[2]]


def noisy(rng, height: int = H, width: int = W) -> np.ndarray:
    """Blocks of class colours with noise on the right half: a PNG of several IDAT chunks of 4 KiB."""
    pixels = PALETTE[block_labels(rng, height, width)]
    pixels[:, width // 2:] = rng.integers(0, 256, (height, width - width // 2, 3), np.uint8)
    return pixels


def damage(path: str, how) -> None:
    """Rewrite the PNG at ``path`` with its image data damaged by ``how``; the end marker stays."""
    pixels = cv2.cvtColor(cv2.imread(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    head, idat = png_parts(Path(path).read_bytes())
    Path(path).write_bytes(how(head, idat, rows_of(pixels)))


@pytest.fixture
def png_data(tmp_path) -> dl.SegmentationData:
    """Two PNG pairs, images noisy enough to fill several IDAT chunks (each its own mask: lossless)."""
    rng = np.random.default_rng(3)
    images = [noisy(rng) for _ in range(2)]
    masks = [PALETTE[block_labels(rng, H, W)] for _ in range(2)]
    return write_pairs(tmp_path / "d", images, masks, image_ext="png")


def pillow_loads(data: bytes) -> bool:
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
        return True
    except (OSError, SyntaxError, ValueError):
        return False


def dali_cpu_decodes(data: bytes, window: bool = False) -> bool:
    """Whether DALI's CPU decoder (``fn.decoders.image``, or ``image_slice`` as dali-cpu uses it) decodes
    ``data``, in a pipeline of its own."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, exec_dynamic=True)
    def decoding():
        encoded = fn.external_source(source=lambda: [np.frombuffer(data, np.uint8)], batch=True, device="cpu")
        if window:
            return fn.decoders.image_slice(encoded, np.array([0, 0], np.int32), np.array([8, 8], np.int32),
                                           axis_names="HW", normalized_anchor=False, normalized_shape=False,
                                           device="cpu", output_type=types.RGB)
        return fn.decoders.image(encoded, device="cpu", output_type=types.RGB)

    pipe = decoding()
    try:
        pipe.build()
        pipe.run()
        return True
    except RuntimeError:
        return False


@pytest.mark.parametrize("how, kind, pillow", DAMAGED_PNGS, ids=IDS)
def test_the_loaders_decoders_refuse_each_damaged_png(png_data, how, kind, pillow):
    """What each decoder does (docs/bad-input.md has the table): OpenCV, TensorFlow and DALI's CPU decoder
    refuse every one; Pillow loads some of them without a word."""
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("nvidia.dali")
    path = png_data.images[1]
    damage(path, how)
    data = Path(path).read_bytes()
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED) is None
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_png(data, channels=3, dtype=tf.uint16)
    assert not dali_cpu_decodes(data) and not dali_cpu_decodes(data, window=True)
    assert pillow_loads(data) is pillow
    assert peek(path).format == "PNG"  # the quick checks pass it: its end marker is there


@pytest.mark.parametrize("which", ["image", "mask"])
@pytest.mark.parametrize("how, kind, pillow", DAMAGED_PNGS, ids=IDS)
def test_check_reports_each_damaged_png(png_data, how, kind, pillow, which):
    """check names each one, as truncated or corrupt (not garbage pixels: every loader fails on it), and says
    what to do; a mask's values are not read after that."""
    path = png_data.images[1] if which == "image" else png_data.masks[1]
    damage(path, how)
    report = dl.check(png_data, workers=1)
    assert [(p.kind, p.path) for p in report.problems] == [(kind, path)], str(report)
    assert "libpng" in report.problems[0].message and "copy or download it again" in report.problems[0].message


@pytest.mark.parametrize("cache", ["0", ""])
def test_check_lists_the_pictures_a_backend_would_read_otherwise(tmp_path, monkeypatch, cache):
    """check lists what a loader refuses for its backend's decoders (the loader's refusal says to run check):
    a palette BMP, whose indices TensorFlow's BMP decoder returns, and a palette TIFF whose colours DALI
    rounds, naming the backends. A colour mask read from the mask cache (the default) is decoded by
    OpenCV for every backend: not listed then; an image is listed whatever the cache."""
    from PIL import Image

    monkeypatch.setenv("DALILOADER_MASK_CACHE", cache)
    colours = [(0, 0, 0), (100, 20, 20), (200, 200, 200)]
    labels = np.tile(np.arange(24) % 3, (16, 1)).astype(np.uint8)
    palette = Image.fromarray(labels, "P")
    palette.putpalette([level for colour in colours for level in colour])
    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    palette.convert("RGB").save(tmp_path / "images" / "a.png")
    palette.save(tmp_path / "masks" / "a.tif")
    palette.save(tmp_path / "images" / "b.tif")
    palette.save(tmp_path / "masks" / "b.bmp")
    (tmp_path / "table.csv").write_text("name,r,g,b\n" + "".join(f"c{i},{r},{g},{b}\n"
                                                                for i, (r, g, b) in enumerate(colours)))
    report = dl.check(dl.SegmentationData.from_dirs(tmp_path / "images", tmp_path / "masks", tmp_path / "table.csv"))
    found = {Path(p.path).name: p.message for p in report.problems if p.kind.value == "undecodable"}
    dali = "palette TIFF whose 16-bit colours DALI's TIFF decoder rounds .*dali-cpu and dali-gpu would read"
    assert sorted(found) == (["a.tif", "b.bmp", "b.tif"] if cache == "0" else ["b.tif"]), report.problems
    assert re.search(dali, found["b.tif"])
    if cache == "0":
        assert re.search(dali, found["a.tif"])
        assert re.search("a palette BMP, whose palette TensorFlow's BMP decoder does not apply .tfdata would",
                         found["b.bmp"])


@pytest.mark.parametrize("where", ["image", "mask"])
def test_a_palette_tiff_past_pillows_pixel_limit_is_a_problem_named(tmp_path, where):
    """Pillow loads a palette TIFF's pixels to give its palette, and checks its pixel limit again there: a
    palette TIFF of over 179 million pixels escaped the loaders' vetting and check as Pillow's
    DecompressionBombError (a review), where a problem naming the file is promised."""
    from conftest import stretched_tiff
    from PIL import Image

    from daliloader.inspection import FileProblem, peek

    palette = Image.fromarray(np.zeros((4, 4), np.uint8), "P")
    palette.putpalette([200, 200, 200] * 256)
    huge = tmp_path / "huge.tif"
    huge.write_bytes(stretched_tiff(palette, 14000))
    with pytest.raises(FileProblem):
        peek(huge)
    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    other = tmp_path / ("masks" if where == "image" else "images") / "a.png"
    Image.new("L" if where == "image" else "RGB", (16, 16)).save(other)
    huge.rename(tmp_path / f"{where}s" / "a.tif")
    report = dl.check({"images": str(tmp_path / "images"), "masks": str(tmp_path / "masks"), "classes": 2})
    assert ("a.tif", "corrupt") in [(Path(p.path).name, p.kind.value) for p in report.problems], report.problems


def test_check_names_a_tiff_past_pillows_pixel_limit(tmp_path):
    """check decodes TIFFs whole with Pillow, which checks its pixel limit again there: a TIFF whose header
    says 14000 x 14000 (over 179 million pixels) stopped check with Pillow's DecompressionBombError instead
    of a problem naming the file (a closing review)."""
    from conftest import raw_tiff
    from PIL import Image

    for folder in ("images", "masks"):
        (tmp_path / folder).mkdir()
    (tmp_path / "images" / "a.tif").write_bytes(raw_tiff(np.zeros((1, 1, 3), np.uint8), size=(14000, 14000)))
    Image.new("L", (16, 16)).save(tmp_path / "masks" / "a.png")  # (a mask of another size: said beside)
    report = dl.check(dl.SegmentationData.from_dirs(tmp_path / "images", tmp_path / "masks", 2), progress=False)
    assert ("corrupt", "a.tif") in [(p.kind.value, Path(p.path).name) for p in report.problems], report.problems


def test_how_a_cut_png_is_told(png_data):
    """The message says how much of the picture is there."""
    path = png_data.images[0]
    damage(path, half_the_rows)
    kind, message = decode_problem(path)
    assert kind is ProblemKind.TRUNCATED and f"holds {H // 2} of its {H} rows" in message, message


@pytest.mark.parametrize("mode", ["1", "L", "LA", "RGB", "RGBA", "P", "I;16"])
def test_sound_pngs_pass(tmp_path, mode):
    """Every kind of PNG the loaders read passes the strict decode, and so does each cut short here."""
    from PIL import Image

    path = tmp_path / "x.png"
    picture = Image.fromarray(noisy(np.random.default_rng(2)))
    picture = picture.convert("I").point(lambda v: v * 200).convert(mode) if mode == "I;16" else picture.convert(mode)
    picture.save(path)
    assert decode_problem(str(path)) is None
    head, idat = png_parts(path.read_bytes())
    path.write_bytes(cut_fixed(head, idat, b""))
    assert decode_problem(str(path))[0] is ProblemKind.TRUNCATED


def test_interlaced_pngs_are_measured_by_their_passes(tmp_path):
    """An interlaced (Adam7) PNG cut short is truncated too; a sound one passes."""
    from PIL import Image

    path = tmp_path / "i.png"
    Image.fromarray(noisy(np.random.default_rng(4))).save(path, interlace=1)
    assert decode_problem(str(path)) is None
    head, idat = png_parts(path.read_bytes())
    path.write_bytes(half_the_rows(head, idat, zlib.decompress(idat)))
    assert decode_problem(str(path))[0] is ProblemKind.TRUNCATED


@pytest.mark.parametrize("how, kind, pillow", PILLOW_PASSES, ids=[d[0].__name__ for d in PILLOW_PASSES])
def test_every_backend_names_a_damaged_png(png_data, backend, how, kind, pillow):
    """A loader that fails on one names the file and what is wrong with it: none says "nothing is wrong
    here" (dali-cpu and tfdata did, as check's decoder, Pillow, loaded it)."""
    path = png_data.images[1]
    damage(path, how)
    with pytest.raises(Exception) as err:
        one_epoch(backend, png_data, batch_size=2, image_size=(32, 32), shuffle=False, training=False)
    message = str(err.value)
    assert path in message and "nothing is wrong here" not in message, message
    if backend != "opencv":  # the opencv backend's own message: "cannot decode image PATH: corrupt, truncated..."
        assert f"{kind.value} PNG" in message, message


# ---------------------------------------------------------------- pictures too large for a decoder
def write_grey_png(path: Path, width: int, height: int) -> None:
    """An all-zero 8-bit grey PNG, compressed row by row (no picture in memory)."""
    stream = zlib.compressobj(9)
    row = bytes(width + 1)
    data = b"".join(stream.compress(row) for _ in range(height)) + stream.flush()
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", data) + IEND)


def grey_jpeg(path: Path, size: int) -> None:
    """An all-grey RGB JPEG of size x size (a few MB; Pillow holds 4 bytes a pixel while it writes)."""
    from PIL import Image

    Image.new("RGB", (size, size), (128, 128, 128)).save(path, quality=90)


@pytest.fixture(scope="session")
def huge(tmp_path_factory) -> dl.SegmentationData:
    """One pair of 14000x14000: an all-grey JPEG (3 MB; 588 MB decoded) and an all-zero id mask."""
    root = tmp_path_factory.mktemp("huge")
    (root / "images").mkdir()
    (root / "masks").mkdir()
    grey_jpeg(root / "images" / "big.jpg", HUGE)
    write_grey_png(root / "masks" / "big.png", HUGE, HUGE)
    return dl.SegmentationData.from_dirs(root / "images", root / "masks", classes=2)


@pytest.fixture(scope="session")
def tf_edge(tmp_path_factory) -> tuple[str, str]:
    """All-grey RGB JPEGs at either side of TensorFlow's cap: 13377^2 x 3 < 2^29 <= 13378^2 x 3."""
    root = tmp_path_factory.mktemp("edge")
    for size in (13377, 13378):
        grey_jpeg(root / f"{size}.jpg", size)
    return str(root / "13377.jpg"), str(root / "13378.jpg")


def test_tensorflows_jpeg_cap_is_width_height_components_under_2_to_29(tf_edge, huge):
    """TensorFlow refuses the JPEGs at or over the cap before decoding anything, a crop as well (the cap
    counts the whole picture), with an error that says nothing of size; it reads their header."""
    tf = pytest.importorskip("tensorflow")
    under, over = tf_edge
    window = [0, 0, 64, 64]
    assert tf.io.decode_and_crop_jpeg(Path(under).read_bytes(), window, channels=3).shape == (64, 64, 3)
    for path in (over, huge.images[0]):
        data = Path(path).read_bytes()
        assert tf.io.extract_jpeg_shape(data).numpy()[:2].tolist() == [peek(path).height, peek(path).width]
        for decode in (lambda d: tf.io.decode_and_crop_jpeg(d, window, channels=3),
                       lambda d: tf.io.decode_jpeg(d, channels=3),
                       lambda d: tf.io.decode_image(d, channels=3, dtype=tf.uint16, expand_animations=False)):
            with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid JPEG data or crop window"):
                decode(data)
    assert backend_limits(peek(under), "tfdata") is None
    assert "2^29 (536870912)" in backend_limits(peek(over), "tfdata") and "536912652" in backend_limits(peek(over),
                                                                                                         "tfdata")


def test_backend_limits_of_the_14000_jpeg(huge):
    """From the header alone: tfdata cannot decode it, and says why; the others read it."""
    header = peek(huge.images[0])
    assert (header.format, header.width, header.height, header.mode) == ("JPEG", HUGE, HUGE, "RGB")
    why = backend_limits(header, "tfdata")
    assert why.startswith(f"tfdata cannot decode a JPEG of {HUGE}x{HUGE} (TensorFlow's JPEG decoder"), why
    assert "588000000" in why
    assert [backend_limits(header, b) for b in ("dali-gpu", "dali-cpu", "opencv")] == [None] * 3
    assert size_readers(header) == ["dali-gpu", "dali-cpu", "opencv"]


def test_check_reports_what_tfdata_cannot_decode(huge):
    """check names the picture, the backend that cannot decode it and why, and the backends that read it."""
    report = dl.check(huge, workers=1)
    assert [(p.kind, p.path) for p in report.problems] == [(ProblemKind.UNDECODABLE, huge.images[0])], str(report)
    problem = report.problems[0]
    assert f"tfdata cannot decode a JPEG of {HUGE}x{HUGE}" in problem.message
    assert problem.message.endswith("dali-gpu, dali-cpu and opencv read it: load it with one of them, or make the "
                                    "picture smaller")
    assert problem.details["readers"] == ["dali-gpu", "dali-cpu", "opencv"] and list(problem.details["cannot"]) == [
        "tfdata"]


def test_a_loader_names_its_own_limit_and_the_backends_that_read_it(huge, backend):
    """tfdata stops naming the picture, its limit and the backends that read it (it said "nothing is wrong
    here"); the backends named read it. [LEAD WIRING, optional: passes through PairGuard.explain, which
    runs check_pair; with the vetting wired (quick_check: size_problem for the guard's backend), tfdata
    refuses the pair before decoding anything.]"""
    kw = dict(batch_size=1, image_size=(64, 64), shuffle=False, training=False)
    if backend != "tfdata":
        ((x, *_),) = one_epoch(backend, huge, **kw)
        assert x.shape == (1, 64, 64, 3)
        return
    with pytest.raises(dl.LoadError) as err:
        one_epoch(backend, huge, **kw)
    message = str(err.value)
    assert huge.images[0] in message and "nothing is wrong here" not in message, message
    assert f"tfdata cannot decode a JPEG of {HUGE}x{HUGE}" in message and "opencv read it" in message, message


@pytest.mark.parametrize("header, cannot", [
    (Header("JPEG", 13377, 13377, "RGB"), []),
    (Header("JPEG", 13378, 13378, "RGB"), ["tfdata"]),
    (Header("JPEG", 14000, 14000, "L"), []),  # one component: under TensorFlow's cap
    (Header("JPEG", 11586, 11586, "CMYK"), ["tfdata"]),  # four
    (Header("PNG", 23170, 23170, "L"), []),
    (Header("PNG", 23171, 23171, "L"), ["tfdata"]),  # 2^29 pixels, whatever the channels
    (Header("PNG", 1 << 27, 1, "L"), ["dali-gpu", "dali-cpu", "tfdata", "opencv"]),  # a side
    (Header("BMP", 16384, 16385, "RGB"), ["tfdata"]),
    (Header("PNG", 32768, 32768, "L"), ["tfdata"]),  # 2^30 pixels: OpenCV's cap, reached
    (Header("PNG", 32768, 32769, "L"), ["dali-gpu", "dali-cpu", "tfdata", "opencv"]),
    (Header("WEBP", 32768, 32769, "RGB"), ["dali-gpu", "dali-cpu", "opencv"]),
    (Header("TIFF", 32768, 32769, "L"), ["opencv"]),  # DALI reads TIFF with libtiff
    (Header("JPEG", 32768, 32769, "L"), ["dali-cpu", "tfdata", "opencv"]),  # nvJPEG on the GPU: no cap known
])
def test_each_backends_size_limit(header, cannot):
    """Where each cap bites, from the header alone (the caps are the decoders' own: the tests above and
    below measure them on real files)."""
    assert [b for b in SIZE_LIMITS if backend_limits(header, b)] == cannot
    problem = size_problem("x.png", "y.png", header)
    assert (problem is None) == (not cannot)
    if problem is not None:
        assert problem.kind is ProblemKind.UNDECODABLE and all(f"{b} cannot decode" in problem.message for b in cannot)


def test_opencvs_limit_follows_the_environment(monkeypatch):
    """OPENCV_IO_MAX_IMAGE_PIXELS as OpenCV parses it (a number, or one with KB or MB after it)."""
    header = Header("PNG", 40000, 40000, "L")
    assert "OPENCV_IO_MAX_IMAGE_PIXELS" in backend_limits(header, "opencv")
    monkeypatch.setenv("OPENCV_IO_MAX_IMAGE_PIXELS", str(40000 * 40000))
    assert backend_limits(header, "opencv") is None and backend_limits(header, "dali-cpu") is None
    monkeypatch.setenv("OPENCV_IO_MAX_IMAGE_PIXELS", "1525MB")  # 1525 x 2^20 < 40000^2
    assert "1599078400 pixels" in backend_limits(header, "opencv")
    monkeypatch.setenv("OPENCV_IO_MAX_IMAGE_PIXELS", "1526MB")
    assert backend_limits(header, "opencv") is None
    monkeypatch.setenv("OPENCV_IO_MAX_IMAGE_WIDTH", "39999")
    assert "OPENCV_IO_MAX_IMAGE_WIDTH" in backend_limits(header, "opencv")


def test_the_size_limits_name_every_backend():
    from daliloader.backends import BACKENDS as REGISTRY

    assert set(SIZE_LIMITS) == set(REGISTRY)


def test_size_readers_know_formats_where_told():
    header = Header("TIFF", 32768, 32769, "L")
    decoders = {"dali-gpu": ("TIFF",), "dali-cpu": ("TIFF",), "tfdata": ("PNG",), "opencv": ("TIFF",)}
    assert size_readers(header) == ["dali-gpu", "dali-cpu", "tfdata"]
    assert size_readers(header, decoders) == ["dali-gpu", "dali-cpu"]


# ---------------------------------------------------------------- OpenCV's cap, lowered in a child process
#: Under it, a 48x64 picture (3072 pixels) is too large for OpenCV.
LOW_CAP = {"OPENCV_IO_MAX_IMAGE_PIXELS": "3000"}


def run_child(code: str, *args: str) -> dict:
    """Run ``code`` in a Python child whose environment lowers OpenCV's cap; what it prints last, as JSON."""
    env = {**os.environ, **LOW_CAP, "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def small_pictures(tmp_path) -> Path:
    pixels = np.full((H, W, 3), 90, np.uint8)
    for ext in ("png", "jpg", "tif", "webp", "bmp"):
        cv2.imwrite(str(tmp_path / f"s.{ext}"), pixels)
    return tmp_path


DECODERS_UNDER_A_LOW_CAP = """
import json, sys, cv2, numpy as np
from pathlib import Path
from test_check_decoders import dali_cpu_decodes
from daliloader.inspection import backend_limits, peek
out = {}
for path in sorted(Path(sys.argv[1]).iterdir()):
    data = path.read_bytes()
    try:
        opencv = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED) is not None
    except cv2.error:
        opencv = False
    out[path.suffix] = {"opencv": opencv, "dali-cpu": dali_cpu_decodes(data, window=True),
                        "says": {b: backend_limits(peek(str(path)), b) is None for b in ("opencv", "dali-cpu")}}
print(json.dumps(out))
"""


def test_opencvs_cap_is_opencvs_and_dalis_own(small_pictures):
    """With OpenCV's cap lowered under the pictures' size: OpenCV refuses every format (it raises); DALI's
    CPU decoder (as dali-cpu runs it, a window) refuses PNG, WebP and BMP, which its own copy of OpenCV
    decodes, and reads JPEG (libjpeg-turbo) and TIFF (libtiff); backend_limits says the same."""
    pytest.importorskip("nvidia.dali")
    found = run_child(DECODERS_UNDER_A_LOW_CAP, str(small_pictures))
    assert {ext: f["opencv"] for ext, f in found.items()} == dict.fromkeys(found, False)
    assert {ext: f["dali-cpu"] for ext, f in found.items()} == {".bmp": False, ".jpg": True, ".png": False,
                                                                 ".tif": True, ".webp": False}
    assert all(f["says"] == {"opencv": f["opencv"], "dali-cpu": f["dali-cpu"]} for f in found.values()), found


CHECK_UNDER_A_LOW_CAP = """
import json, sys
import daliloader as dl
root = sys.argv[1]
data = dl.SegmentationData.from_dirs(root + "/train", root + "/train_labels", root + "/class_dict.csv")
report = dl.check(data.subset([0]), workers=1)
print(json.dumps([[p.kind.value, p.path, p.details.get("readers")] for p in report.problems]))
"""


def test_check_reports_pictures_over_opencvs_cap(tmp_path):
    """check names them, with the backends that read them; it crashed on the mask (a raw cv2.error from
    OpenCV's decode, naming no file)."""
    rng = np.random.default_rng(5)
    data = write_pairs(tmp_path / "d", [PALETTE[block_labels(rng, H, W)]], [PALETTE[block_labels(rng, H, W)]], "jpg")
    found = run_child(CHECK_UNDER_A_LOW_CAP, str(tmp_path / "d"))
    assert found == [["undecodable", data.images[0], ["dali-gpu", "dali-cpu", "tfdata"]],
                     ["undecodable", data.masks[0], ["tfdata"]]], found


OPENCV_BACKEND_UNDER_A_LOW_CAP = """
import json, sys
import daliloader as dl
root = sys.argv[1]
data = dl.SegmentationData.from_dirs(root + "/train", root + "/train_labels", root + "/class_dict.csv")
try:
    dl.keras_sequence(data, batch_size=1, image_size=(32, 32), shuffle=False, training=False)[0]
    print(json.dumps(["loaded", ""]))
except Exception as e:
    print(json.dumps([type(e).__name__, str(e)]))
"""


def test_the_opencv_backend_names_a_picture_over_its_cap(tmp_path):
    """[LEAD WIRING: the guard's vetting (quick_check: size_problem for its backend), or codecs.decode
    turning cv2.error into a LoadError.] The opencv backend raised OpenCV's own error, naming no file."""
    pytest.importorskip("keras")
    rng = np.random.default_rng(6)
    data = write_pairs(tmp_path / "d", [PALETTE[block_labels(rng, H, W)]], [PALETTE[block_labels(rng, H, W)]], "png")
    kind, message = run_child(OPENCV_BACKEND_UNDER_A_LOW_CAP, str(tmp_path / "d"))
    assert kind == "LoadError" and data.images[0] in message, message
    assert "opencv cannot decode a PNG of 64x48" in message and "tfdata reads it" in message, message


GUARDS_UNDER_A_LOW_CAP = """
import json, sys
import daliloader as dl
from daliloader.backends import pair_guard
root = sys.argv[1]
data = dl.SegmentationData.from_dirs(root + "/train", root + "/train_labels", root + "/class_dict.csv")
said = {}
for backend in ("tfdata", "opencv"):
    guard = pair_guard(data, backend)
    try:
        guard.verify(0)
        said[backend] = ""
    except dl.LoadError as e:
        said[backend] = str(e)
    said[backend + " explains"] = str(guard.explain(RuntimeError("a decoder failed")))
print(json.dumps(said))
"""


def test_a_guard_blames_only_its_own_backends_limits(tmp_path):
    """[LEAD WIRING: quick_check calls backend_size_problems; PairGuard._problems keeps a size problem only
    for its own backend.] PNGs over OpenCV's (lowered) cap: the opencv backend's vetting refuses them,
    naming tfdata as a reader; tfdata's guard, explaining another failure, does not blame them."""
    rng = np.random.default_rng(7)
    data = write_pairs(tmp_path / "d", [PALETTE[block_labels(rng, H, W)]], [PALETTE[block_labels(rng, H, W)]], "png")
    said = run_child(GUARDS_UNDER_A_LOW_CAP, str(tmp_path / "d"))
    assert said["tfdata"] == "" and "nothing is wrong here" in said["tfdata explains"], said
    assert data.images[0] in said["opencv"] and "opencv cannot decode a PNG of 64x48" in said["opencv"], said
    assert "tfdata reads it" in said["opencv"] and data.masks[0] in said["opencv explains"], said


# ---------------------------------------------------------------- tfdata and WebP
def test_every_backend_loads_webp_images(tmp_path, backend):
    """[LEAD WIRING: tfdata.py.] TF_FORMATS lists WebP, yet tfdata decodes pictures as uint16 (for 16-bit
    PNGs), which TensorFlow's WebP decoder refuses ("WebP only supports uint8 for dtype"), and it asks for
    3 channels, which it refuses for a WebP with alpha."""
    rng = np.random.default_rng(8)
    images = [PALETTE[block_labels(rng, H, W)] for _ in range(2)]
    data = write_pairs(tmp_path / "d", images, images, image_ext="webp")
    rgba = np.dstack([cv2.imread(data.images[1]), np.full((H, W), 255, np.uint8)])
    cv2.imwrite(data.images[1], rgba, [cv2.IMWRITE_WEBP_QUALITY, 101])  # lossless, with alpha
    batches = one_epoch(backend, data, batch_size=2, image_size=(H, W), crop="center", shuffle=False,
                        training=False, label_mode="int")
    assert len(batches) == 1 and batches[0][0].shape == (2, H, W, 3)
