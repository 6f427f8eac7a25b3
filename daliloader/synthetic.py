"""An embedded synthetic dataset in CamVid layout, so daliloader runs anywhere with no download.

Scenes are made of random regions (a Voronoi partition with wobbly borders), each given one of
CamVid's 32 classes. The photo is coloured by class, shaded, and given multi-scale texture and
sensor noise, so that codecs see something like a photograph: a 960x720 JPEG at quality 90 is
100-300 KB, and the colour masks are PNGs of sharp regions like real label maps.
"""

from __future__ import annotations

import csv
import io
import json
import secrets
import shutil
from pathlib import Path

import cv2
import numpy as np

from . import parallel
from .cache import SYNTHETIC
from .catalog import CAMVID_CLASSES
from .classes import ClassMap
from .codecs import encode, write_file
from .data import SegmentationData
from .environment import cache_dir, cache_way_out
from .errors import DataError, LoadError, SpecError, cannot_write
from .spec import check_count, check_image_size


def camvid_classmap() -> ClassMap:
    return ClassMap.camvid()


def make_dataset(out_dir: str | Path, n: int = 64, image_format: str = "jpg",
                 image_size: tuple[int, int] = (720, 960), seed: int = 0, quality: int = 90,
                 split: str = "train", progress: bool = False) -> SegmentationData:
    """Write ``n`` synthetic pairs in CamVid layout and return them as :class:`~daliloader.data.SegmentationData`.

    Layout: ``out_dir/{split}/NNNNN.{jpg|png}``, ``out_dir/{split}_labels/NNNNN_L.png`` (RGB colour
    masks) and ``out_dir/class_dict.csv``. ``image_size`` is (height, width), as everywhere in
    daliloader; generation is deterministic in ``seed``. Another split may be written beside those in
    ``out_dir``; a split that holds files already is refused (writing over it would mix two datasets),
    unless this call made it, with the same arguments (a script run again): it is then returned as it
    is. A split's two folders are written under temporary names and renamed into place at the end: an
    interruption leaves no split, only a hidden ``.SPLIT.incomplete-*`` folder, removed by the next run.
    A file that cannot be written (a full disk, a read-only folder) is a LoadError naming it.
    """
    if image_format not in ("jpg", "png"):
        raise SpecError(f"image_format must be 'jpg' or 'png', got {image_format!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecError(f"n must be a positive integer, got {n!r}")
    image_size, seed = check_image_size(image_size), check_count("seed", seed)
    out = Path(out_dir)
    made = json.dumps({"n": n, "format": image_format, "size": list(image_size), "seed": seed, "quality": quality})
    marker = out / f".{split}.synthetic.json"
    held = [f for f in (out / split, out / f"{split}_labels") if f.is_dir() and any(f.iterdir())]
    if held and not (marker.is_file() and marker.read_text() == made):
        raise DataError(f"{held[0]} holds files already: write the synthetic dataset into another folder (or "
                        "another split), or remove it")
    if not held:
        try:
            _write_split(out, n, image_format, image_size, seed, quality, split, progress)
            write_file(marker, made.encode())
        except OSError as e:
            raise LoadError(f"cannot write {e.filename or out}: {cannot_write(e, 'choose another folder')}") from None
    return SegmentationData.from_dirs(out / split, out / f"{split}_labels", out / "class_dict.csv")


def _write_split(out: Path, n: int, image_format: str, image_size: tuple[int, int], seed: int, quality: int,
                 split: str, progress: bool) -> None:
    """The split's folders written into a hidden temporary folder of ``out``, then renamed into place (the
    leftovers of an interrupted run removed first)."""
    out.mkdir(parents=True, exist_ok=True)
    for left in out.glob(f".{split}.incomplete-*"):
        shutil.rmtree(left, ignore_errors=True)
    tmp = out / f".{split}.incomplete-{secrets.token_hex(4)}"
    try:
        _write_dataset(tmp, n, image_format, image_size, seed, quality, split, progress)
        write_class_dict(out / "class_dict.csv")
        for folder in (f"{split}_labels", split):  # the images last: a split without them is no split
            if (out / folder).is_dir():
                (out / folder).rmdir()  # (empty: checked above)
            (tmp / folder).rename(out / folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_dataset(out: Path, n: int, image_format: str, image_size: tuple[int, int], seed: int, quality: int,
                   split: str, progress: bool) -> None:
    """The files of :func:`make_dataset`; a file that cannot be written raises an OSError naming it."""
    height, width = image_size
    img_dir, mask_dir = out / split, out / f"{split}_labels"
    img_dir.mkdir(parents=True, exist_ok=True)
    mask_dir.mkdir(parents=True, exist_ok=True)
    write_class_dict(out / "class_dict.csv")

    palette = np.array([c[1:] for c in CAMVID_CLASSES], dtype=np.uint8)
    params = (cv2.IMWRITE_JPEG_QUALITY, quality) if image_format == "jpg" else (cv2.IMWRITE_PNG_COMPRESSION, 3)
    for i in parallel.progress(range(n), n, "writing synthetic dataset" if progress else None):
        rng = np.random.default_rng([seed, i])
        labels = _scene_labels(rng, height, width, len(palette))
        photo = _render_photo(rng, labels, palette)
        # encoded here and written whole: cv2.imwrite reports success on a full disk, leaving empty files
        write_file(img_dir / f"{i:05d}.{image_format}", encode(f".{image_format}", photo[..., ::-1], params))
        write_file(mask_dir / f"{i:05d}_L.png", encode(".png", palette[labels][..., ::-1]))


def default_dataset(n: int = 64, image_format: str = "jpg", image_size=(720, 960)) -> SegmentationData:
    """The embedded dataset (what the CLI and the benchmarks run on without DATA), generated once into
    :func:`~daliloader.environment.cache_dir`: atomically, under a lock (a second process waits for the first,
    then uses its copy; see :func:`daliloader.folders.made_once`)."""
    from .folders import made_once

    root = cache_dir() / f"{SYNTHETIC}{image_format}-{image_size[1]}x{image_size[0]}-n{n}"

    def make(folder: Path) -> None:
        _write_dataset(folder, n, image_format, image_size, seed=0, quality=90, split="train", progress=True)
        (folder / ".complete").touch()

    made_once(root, ".complete", "daliloader (the embedded dataset)", cache_way_out(), make)
    return SegmentationData.from_dirs(root / "train", root / "train_labels", root / "class_dict.csv")


def write_class_dict(path: Path) -> None:
    text = io.StringIO(newline="")
    w = csv.writer(text)
    w.writerow(["name", "r", "g", "b"])
    w.writerows(CAMVID_CLASSES)
    write_file(path, text.getvalue().encode())


def _scene_labels(rng: np.random.Generator, height: int, width: int, num_classes: int) -> np.ndarray:
    """A partition into ~20 wobbly Voronoi regions, each with a random class."""
    k = int(rng.integers(12, 28))
    seeds = rng.random((k, 2)) * [height, width]
    classes = rng.integers(0, num_classes, size=k)
    # Work at 1/8 resolution, warp the coordinates with smooth noise for organic borders.
    sh, sw = max(height // 8, 1), max(width // 8, 1)
    yy, xx = np.mgrid[0:sh, 0:sw].astype(np.float32) * 8
    warp = [cv2.GaussianBlur(rng.standard_normal((sh, sw)).astype(np.float32), (0, 0), 3) * 120 for _ in range(2)]
    yy, xx = yy + warp[0], xx + warp[1]
    d = (yy[None] - seeds[:, 0, None, None]) ** 2 + (xx[None] - seeds[:, 1, None, None]) ** 2
    small = classes[np.argmin(d, axis=0)].astype(np.uint8)
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_NEAREST)


def _render_photo(rng: np.random.Generator, labels: np.ndarray, palette: np.ndarray) -> np.ndarray:
    height, width = labels.shape
    base = palette[labels].astype(np.float32) * 0.6 + 50
    # Lighting: a smooth gradient and soft shading blobs.
    yy = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    # (blobs of at most an eighth of the shorter side: wider, the field is nearly constant on a small
    # picture, its normalised value large, and the photo clips to black or white)
    shade = 0.75 + 0.35 * yy + 0.25 * _smooth(rng, height, width, min(60, min(height, width) / 8))[..., None]
    # Texture at several scales, stronger on some classes (foliage, road grain).
    texture = sum(_smooth(rng, height, width, s) * a for s, a in ((1.2, 14), (3, 12), (10, 10)))
    strength = (0.5 + rng.random(len(palette)).astype(np.float32))[labels]
    photo = base * shade + (texture * strength)[..., None] * rng.uniform(0.7, 1.3, 3).astype(np.float32)
    photo = cv2.GaussianBlur(photo, (0, 0), 0.8)  # lens softness: borders are not pixel-sharp
    photo += rng.standard_normal(photo.shape).astype(np.float32) * 2.0  # sensor noise
    return np.clip(photo, 0, 255).astype(np.uint8)


def _smooth(rng: np.random.Generator, height: int, width: int, sigma: float) -> np.ndarray:
    noise = rng.standard_normal((height, width)).astype(np.float32)
    out = cv2.GaussianBlur(noise, (0, 0), sigma)
    return out / (out.std() + 1e-6)
