"""Shared fixtures: small datasets written once per session (and Cityscapes' tree once per module), and
the backend axis; the helpers several test files use (one epoch of any backend, ...).

GPU backends are skipped (not faked) where DALI sees no CUDA device.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import shutil
import subprocess
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite never reads or writes the user's cache (~/.cache/daliloader): one of its own, removed at the end.
os.environ["DALILOADER_CACHE"] = tempfile.mkdtemp(prefix="daliloader-tests-cache-")

from pathlib import Path

import cv2
import numpy as np
import pytest
from trees import cityscapes_tree

import daliloader as dl
from daliloader.catalog import CAMVID_CLASSES
from daliloader.synthetic import write_class_dict

atexit.register(shutil.rmtree, os.environ["DALILOADER_CACHE"], ignore_errors=True)


#: A test (setup, call and teardown) still running after this many seconds is taken as hung: every
#: thread's stack goes to the terminal's stderr and the run ends with exit status 1, so that a hang fails
#: in minutes and says where, instead of running into CI's limit. faulthandler's watchdog is a thread of
#: C, so it fires even where a native deadlock holds the GIL.
HUNG_AFTER_S = float(os.environ.get("DALILOADER_TEST_HUNG_AFTER_S", 600))
_TERMINAL_STDERR: list[int] = []


#: What a run of ``make test`` (and so CI, whose ``.ci/run`` is ``make test``) needs to import: the Makefile
#: sets DALILOADER_TESTS_REQUIRE=all, and a module of these that does not import (a TensorFlow or DALI
#: install that broke, a TF plugin built against another TensorFlow) stops the run at once, naming it,
#: instead of turning the tests that need it into skips. A run of pytest by hand (the GPU machine's staged
#: stack, without TFDS or radon) skips those tests, and says so with -rs.
REQUIRED = ("tensorflow", "keras", "nvidia.dali", "nvidia.dali.plugin.tf", "tensorflow_datasets", "keras_hub",
            "wds2idx", "radon", "obstore", "moto")


def require_stack() -> None:
    """Import every module of :data:`REQUIRED`; a UsageError naming those that fail, and how to repair."""
    import importlib

    broken = []
    for name in REQUIRED:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - an install can break in any way: each is named
            broken.append(f"{name} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    if broken:
        raise pytest.UsageError("make test needs these to import, and they do not: " + "; ".join(broken) +
                                ". Run `make install` again (it reinstalls TensorFlow's DALI plugin against the "
                                "TensorFlow installed), or `make clean install` for a new .venv")


def pytest_configure(config):
    # pytest suspends its capture while plugins configure: file descriptor 2 is the terminal's stderr here
    _TERMINAL_STDERR.append(os.dup(2))
    _share_the_cores()
    if os.environ.get("DALILOADER_TESTS_REQUIRE") == "all":
        require_stack()


def _share_the_cores() -> None:
    """In a pytest-xdist worker, where there are at least two cores per worker, run on the worker's share
    of them (worker k of n: every n-th core from the k-th), so that each worker's DALI threads and
    TensorFlow's pools, sized from the cores the process may run on (daliloader.parallel.cores), do not
    each take every core: on the GPU machine, 8 workers each ran 16 DALI threads beside TensorFlow's on
    16 cores. With fewer cores (CI's two, two workers) every worker keeps them all."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and count.isdigit() and hasattr(os, "sched_setaffinity")):
        return
    cores, n = sorted(os.sched_getaffinity(0)), int(count)
    if len(cores) >= 2 * n:
        os.sched_setaffinity(0, cores[int(worker[2:]) % n::n])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    faulthandler.dump_traceback_later(HUNG_AFTER_S, exit=True, file=_TERMINAL_STDERR[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _gpu_count() -> int:
    try:
        from daliloader.backends import dali_gpu_count

        return dali_gpu_count()
    except ImportError:
        return 0


HAS_GPU = _gpu_count() > 0
DALI_BACKENDS = [
    "dali-cpu",
    pytest.param("dali-gpu", marks=[pytest.mark.gpu,
                                    pytest.mark.skipif(not HAS_GPU, reason="DALI sees no CUDA GPU")]),
]


@pytest.fixture(params=DALI_BACKENDS)
def dali_backend(request) -> str:
    return request.param


#: Every backend, through its public entry point (one_epoch).
BACKENDS = DALI_BACKENDS + ["opencv", "tfdata"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param in ("opencv", "tfdata"):
        pytest.importorskip("tensorflow")
    return request.param


def one_epoch(backend: str, data, tf: bool = False, **kwargs) -> list[tuple[np.ndarray, ...]]:
    """One epoch of numpy batches from any backend (DALI: ``dali_pipeline``, or ``tf_dataset`` if ``tf``)."""
    if backend == "opencv":
        seq = dl.keras_sequence(data, **kwargs)
        return [seq[i] for i in range(len(seq))]
    if backend == "tfdata" or tf:
        require_tf()
        ds = dl.tf_dataset(data, backend=backend, **kwargs)
        return [tuple(t.numpy() for t in batch) for batch in ds]
    pipe, steps = dl.dali_pipeline(data, backend=backend, **kwargs)
    return [tuple(dali_numpy(pipe.run())) for _ in range(steps)]


def eval_batches(backend, data, **kw):
    """One evaluation epoch of any backend, as numpy (x, y, w)."""
    return one_epoch(backend, data, training=False, **kw)


def require_tf() -> None:
    """Skip where TensorFlow is missing (a GPU machine with DALI alone runs the DALI-only tests)."""
    pytest.importorskip("tensorflow")


def write_pairs(root: Path, images, masks, image_ext: str = "png", mask_suffix: str = "_L") -> dl.SegmentationData:
    """Write RGB uint8 arrays as a CamVid-layout dataset (masks are RGB colour PNGs)."""
    img_dir, mask_dir = root / "train", root / "train_labels"
    img_dir.mkdir(parents=True, exist_ok=True)
    mask_dir.mkdir(parents=True, exist_ok=True)
    write_class_dict(root / "class_dict.csv")
    for i, (img, mask) in enumerate(zip(images, masks)):
        cv2.imwrite(str(img_dir / f"{i:04d}.{image_ext}"), np.ascontiguousarray(img[..., ::-1]))
        cv2.imwrite(str(mask_dir / f"{i:04d}{mask_suffix}.png"), np.ascontiguousarray(mask[..., ::-1]))
    return dl.SegmentationData.from_dirs(img_dir, mask_dir, root / "class_dict.csv")


PALETTE = np.array([c[1:] for c in CAMVID_CLASSES], dtype=np.uint8)


def block_labels(rng, height: int, width: int, block: int = 8) -> np.ndarray:
    """Random class indices in square blocks (big uniform areas, sharp borders)."""
    small = rng.integers(0, len(PALETTE), size=(-(-height // block), -(-width // block)))
    return np.kron(small, np.ones((block, block), dtype=small.dtype))[:height, :width]


@pytest.fixture(scope="session")
def mirror_data(tmp_path_factory) -> dl.SegmentationData:
    """Images that are their own masks (PNG, lossless), of assorted and odd sizes.

    After any augmentation, mapping the image's colours must give the labels: a direct check that
    image and mask got the same crop, zoom and flip.
    """
    rng = np.random.default_rng(7)
    sizes = [(90, 130), (61, 77), (128, 96), (47, 53), (100, 100), (73, 141)]
    labels = [block_labels(rng, h, w) for h, w in sizes]
    colours = [PALETTE[lab] for lab in labels]
    return write_pairs(tmp_path_factory.mktemp("mirror"), colours, colours)


@pytest.fixture(scope="session")
def index_data(tmp_path_factory) -> dl.SegmentationData:
    """Ten 24x32 images whose constant colour encodes their own index (red channel = 10 * index)."""
    images = [np.full((24, 32, 3), (10 * i, 0, 0), np.uint8) for i in range(10)]
    masks = [np.broadcast_to(PALETTE[i], (24, 32, 3)).copy() for i in range(10)]
    return write_pairs(tmp_path_factory.mktemp("index"), images, masks)


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory) -> dl.SegmentationData:
    """The embedded synthetic dataset, small: 8 JPEG pairs at 160x120."""
    return dl.synthetic.make_dataset(tmp_path_factory.mktemp("synth"), n=8, image_size=(120, 160))


@pytest.fixture(scope="module")
def cityscapes(tmp_path_factory):
    """Cityscapes as shipped (tests/trees.py): (root, {split: {image: expected labels}})."""
    return cityscapes_tree(tmp_path_factory.mktemp("cs"))


def batch_indices(images: np.ndarray) -> list[int]:
    """Recover the sample index from an index_data batch (centre crop, no flip, [0, 1] floats)."""
    return [int(round(v * 255 / 10)) for v in images[:, 0, 0, 0]]


def dali_numpy(outputs) -> list[np.ndarray]:
    from daliloader.backends.dali_graph import to_numpy

    return to_numpy(outputs)


def raw_tiff(pixels: np.ndarray, extra_samples: tuple[int, ...] = (), size: tuple[int, int] | None = None) -> bytes:
    """An uncompressed little-endian RGB(A) TIFF of ``pixels`` (H, W, 3 or 4; uint8 or uint16), written tag by
    tag, as Pillow cannot (16-bit RGBA): ``extra_samples`` its ExtraSamples (2: unassociated alpha), ``size``
    (width, height) what its header says instead of the pixels' own (a picture larger than its data)."""
    import struct

    h, w = pixels.shape[:2]
    width, height = size or (w, h)
    data = pixels.astype(pixels.dtype.newbyteorder("<")).tobytes()
    channels, bits = pixels.shape[2], pixels.dtype.itemsize * 8
    tags = {256: (4, [width]), 257: (4, [height]), 258: (3, [bits] * channels), 259: (3, [1]), 262: (3, [2]),
            273: (4, [8]), 277: (3, [channels]), 278: (4, [height]), 279: (4, [len(data)]), 284: (3, [1])}
    if extra_samples:
        tags[338] = (3, list(extra_samples))
    blobs, entries = b"", b""
    for tag, (kind, values) in sorted(tags.items()):
        raw = struct.pack("<" + ("H" if kind == 3 else "I") * len(values), *values)
        if len(raw) > 4:  # stored after the pixels, the entry pointing at it
            raw, blobs = struct.pack("<I", 8 + len(data) + len(blobs)), blobs + raw
        entries += struct.pack("<HHI", tag, kind, len(values)) + raw.ljust(4, b"\0")
    ifd = struct.pack("<H", len(tags)) + entries + b"\0\0\0\0"
    return b"II*\0" + struct.pack("<I", 8 + len(data) + len(blobs)) + data + blobs + ifd


def stretched_tiff(image, side: int) -> bytes:
    """A Pillow image saved as an uncompressed TIFF whose header then says ``side`` x ``side`` pixels: a picture
    over Pillow's pixel limit without the memory (its data is the image's own, so it reads as cut short)."""
    import io
    import struct

    buf = io.BytesIO()
    image.save(buf, format="TIFF")
    blob = bytearray(buf.getvalue())
    ifd = struct.unpack_from("<I", blob, 4)[0]
    for i in range(struct.unpack_from("<H", blob, ifd)[0]):
        at = ifd + 2 + 12 * i
        tag, kind = struct.unpack_from("<HH", blob, at)
        if tag in (256, 257):  # ImageWidth, ImageLength: SHORT or LONG
            struct.pack_into("<H" if kind == 3 else "<I", blob, at + 8, side)
    return bytes(blob)


def crop_or_pad(a: np.ndarray, h: int, w: int, fill) -> np.ndarray:
    """Reference centre crop/pad with the offsets of tf.image.resize_with_crop_or_pad."""
    H, W = a.shape[:2]
    out = np.full((h, w) + a.shape[2:], fill, a.dtype)
    sy, sx = max(H - h, 0) // 2, max(W - w, 0) // 2
    dy, dx = max(h - H, 0) // 2, max(w - W, 0) // 2
    ch, cw = min(h, H), min(w, W)
    out[dy:dy + ch, dx:dx + cw] = a[sy:sy + ch, sx:sx + cw]
    return out


@pytest.fixture
def tmpfs():
    """``mount(folder, *options)``: a tmpfs at ``folder`` (made), unmounted after the test; the test
    skips, saying why, where mounting is not allowed."""
    mounted = []

    def mount(folder: Path, *options: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options or ("size=1m",)), "tmpfs",
                                   str(folder)], capture_output=True, text=True)
        except FileNotFoundError:
            pytest.skip("no mount command here: the case needs a small tmpfs")
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): the case needs one")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture(scope="session")
def s3_server():
    """An S3 server on the loopback (moto, in a process of its own: tests/s3server.py), with the AWS
    variables pointing at it, one per test process: DALI's own S3 client reads ``AWS_ENDPOINT_URL`` once
    per process, so every test that lets DALI read a bucket must use the same server."""
    pytest.importorskip("moto")
    from s3server import S3Server, environment

    server = S3Server()
    with environment(server.endpoint):
        yield server
    server.stop()
