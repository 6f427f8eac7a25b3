"""daliloader/checks.py, inspection.py and guard.py, on broken datasets built on the fly.

check() (and ``daliloader check``) reports each kind of broken file, naming it: truncated, empty, not an
image, another size, missing, corrupt data whatever the damage (JPEG and PNG), unknown colours and ids,
files without a partner, tiny pictures; its exit status and JSON. inspection's strict JPEG decoding passes
every sound JPEG, and Pillow's pixel limit does not stop it. The load-time guard (PairGuard): every loader,
and model.fit, fails naming the bad file; stray colours are no error at load time (they load as ignored);
a file changed since it was vetted (another size, or the same size and modification time) is vetted again,
and a file replaced mid-run never gives a misaligned pair.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import PALETTE, block_labels, one_epoch, write_pairs
from copies import dataset

import daliloader as dl
from daliloader.cli import main as cli

H, W = 48, 64


def good_dataset(root: Path, n: int = 6, image_ext: str = "jpg") -> dl.SegmentationData:
    rng = np.random.default_rng(0)
    labels = [block_labels(rng, H, W) for _ in range(n)]
    return write_pairs(root, [PALETTE[lab] for lab in labels], [PALETTE[lab] for lab in labels], image_ext)


def truncate(path: str) -> None:
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])


def zero_bytes(path: str) -> None:
    Path(path).write_bytes(b"")


def text_file(path: str) -> None:
    Path(path).write_text("<html>404 Not Found</html>\n")


def wrong_size(path: str) -> None:
    import cv2

    cv2.imwrite(path, np.zeros((H + 8, W, 3), np.uint8))


def unknown_colour(path: str) -> None:
    import cv2

    mask = cv2.imread(path)
    mask[:5, :7] = (1, 2, 3)  # BGR (3, 2, 1): no CamVid class
    cv2.imwrite(path, mask)


def missing(path: str) -> None:
    Path(path).unlink()


def damaged_inside(path: str) -> None:
    """Zeros in the middle of the compressed data: header and end marker intact, decoders fail."""
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = bytes(64)
    Path(path).write_bytes(bytes(data))


def idat_damaged(path: str) -> None:
    """A byte of a PNG's compressed image data changed, its chunk framing intact (its checksum then wrong):
    the header and the end marker look sound."""
    data = bytearray(Path(path).read_bytes())
    start = data.index(b"IDAT") + 4
    data[start + int.from_bytes(data[start - 8:start - 4], "big") // 2] ^= 0x5A
    Path(path).write_bytes(bytes(data))


# (name, which file of pair 3 to break, how, the kind check reports)
CASES = [
    ("truncated jpeg", "image", truncate, "truncated"),
    ("zero-byte png mask", "mask", zero_bytes, "empty"),
    ("text file named .png", "mask", text_file, "unsupported"),
    ("mask of another size", "mask", wrong_size, "size_mismatch"),
    ("missing mask", "mask", missing, "missing"),
    ("corrupt data inside a png", "mask", damaged_inside, "corrupt"),
]


FAILS_TO_LOAD = [c for c in CASES]


BAD = 3


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def broken(request, tmp_path):
    """A dataset whose pair 3 is broken after pairing (the loader meets it at run time)."""
    name, which, how, kind = request.param
    data = good_dataset(tmp_path)
    path = data.images[BAD] if which == "image" else data.masks[BAD]
    how(path)
    return data, path, kind


# ---------------------------------------------------------------- check
def test_check_reports_each_kind(broken):
    data, path, kind = broken
    report = dl.check(data, workers=2)
    assert not report.ok and report.pairs == len(data)
    assert [(p.kind, p.path) for p in report.problems] == [(kind, path)]
    assert path in str(report)


def test_check_clean_dataset(tmp_path):
    report = dl.check(good_dataset(tmp_path))
    assert report.ok and report.problems == [] and "no problems" in str(report)


def test_check_counts_unknown_colours(tmp_path):
    data = good_dataset(tmp_path)
    unknown_colour(data.masks[1])
    (problem,) = dl.check(data).problems
    assert problem.kind == "unknown_values" and problem.path == data.masks[1]
    assert problem.details["values"] == [[[3, 2, 1], 35]] and problem.details["pixels"] == 35
    assert "35 of 3072 pixels" in problem.message


def test_check_unknown_ids_but_not_deliberately_ignored_ones(tmp_path):
    import cv2

    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    cv2.imwrite(str(tmp_path / "images" / "a.png"), np.zeros((20, 20, 3), np.uint8))
    ids = np.full((20, 20), 7, np.uint8)  # road
    ids[:2] = 0  # unlabeled: ignored on purpose by Cityscapes' map
    ids[5, :3] = 99  # not a Cityscapes id
    cv2.imwrite(str(tmp_path / "masks" / "a.png"), ids)
    data = dl.SegmentationData.from_dirs(tmp_path / "images", tmp_path / "masks", dl.ClassMap.cityscapes())
    (problem,) = dl.check(data).problems
    assert problem.details["values"] == [[99, 3]]


def test_check_folder_lists_unpaired_and_tiny(tmp_path):
    import cv2

    data = good_dataset(tmp_path, image_ext="png")
    Path(data.masks[2]).unlink()
    cv2.imwrite(str(tmp_path / "train_labels" / "stray_L.png"), np.zeros((4, 4, 3), np.uint8))
    cv2.imwrite(data.images[4], np.zeros((8, 8, 3), np.uint8))
    cv2.imwrite(data.masks[4], np.zeros((8, 8, 3), np.uint8))
    report = dl.check(tmp_path)
    kinds = {(p.kind, Path(p.path).name) for p in report.problems}
    assert kinds == {("unpaired_image", "0002.png"), ("unpaired_mask", "stray_L.png"), ("tiny", "0004.png")}


def test_check_reports_what_a_loader_would_refuse(cityscapes, tmp_path, capsys):
    """check DATA --classes N still reports unpaired files (exit 1); nothing paired is a report, not a crash."""
    import shutil

    root = tmp_path / "cityscapes"
    shutil.copytree(cityscapes[0], root)
    next((root / "gtFine" / "train").rglob("*_labelIds.png")).unlink()
    assert cli(["check", str(root), "--classes", "19", "--quiet"]) == 1
    assert "unpaired_image" in capsys.readouterr().out
    (tmp_path / "a" / "images").mkdir(parents=True)
    (tmp_path / "a" / "masks").mkdir()
    cv2.imwrite(str(tmp_path / "a" / "images" / "x.png"), np.zeros((4, 4, 3), np.uint8))
    cv2.imwrite(str(tmp_path / "a" / "masks" / "y.png"), np.zeros((4, 4), np.uint8))
    report = dl.check({"images": tmp_path / "a" / "images", "masks": tmp_path / "a" / "masks"})
    assert report.pairs == 0 and {p.kind for p in report.problems} == {"unpaired_image", "unpaired_mask"}


def test_check_cli_exit_status_and_json(tmp_path, capsys):
    data = good_dataset(tmp_path)
    assert cli(["check", str(tmp_path), "--quiet"]) == 0
    truncate(data.images[0])
    out = tmp_path / "report.json"
    assert cli(["check", str(tmp_path), "--quiet", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["ok"] is False and report["counts"] == {"truncated": 1}
    assert report["problems"][0]["path"] == data.images[0]
    assert data.images[0] in capsys.readouterr().out
    assert cli(["check", str(tmp_path / "nowhere")]) == 2


def id_dataset(root: Path, n: int = 6) -> list[str]:
    """images/ + masks/ of class ids 0-2 and no class table (classes=None reads the ids); the masks."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i in range(n):
        cv2.imwrite(str(root / "images" / f"{i}.png"), rng.integers(0, 256, (H, W, 3), dtype=np.uint8))
        cv2.imwrite(str(root / "masks" / f"{i}.png"), (block_labels(rng, H, W) % 3).astype(np.uint8))
    return [str(root / "masks" / f"{i}.png") for i in range(n)]


@pytest.mark.parametrize("damage, kind", [(truncate, "truncated"), (damaged_inside, "corrupt")])
def test_masks_that_class_inference_cannot_read_are_named(tmp_path, capsys, damage, kind):
    """classes=None met a damaged mask with Pillow's bare error, and check stopped at it (exit 2): now the
    loaders refuse, naming every such mask and pointing at check, and check leaves them out of the inference
    and reports each, as with the class count given."""
    masks = id_dataset(tmp_path)
    for bad in (masks[1], masks[4]):
        damage(bad)
    with pytest.raises(dl.DataError, match=r"classes=None reads the class ids in every mask, but 2 mask\(s\) cannot "
                                           r"be read:\n.*\n.*\nRun `daliloader check`") as refused:
        dl.SegmentationData.from_folder(tmp_path)
    assert masks[1] in str(refused.value) and masks[4] in str(refused.value)
    report = dl.check(tmp_path)
    assert [(p.kind, p.path) for p in report.problems] == [(kind, masks[1]), (kind, masks[4])]
    assert report.problems == dl.check(tmp_path, classes=3).problems
    assert cli(["check", str(tmp_path), "--quiet"]) == 1
    assert masks[4] in capsys.readouterr().out


def test_check_reports_a_dataset_whose_every_mask_is_unreadable(tmp_path):
    """With no class table and no mask readable, the class ids cannot be inferred: check reports each mask
    (a review: check crashed with an AttributeError on the missing class map, asking whether the mask
    cache would hold the masks)."""
    masks = id_dataset(tmp_path, n=2)
    for mask in masks:
        truncate(mask)
    report = dl.check(tmp_path)
    assert [(p.kind, p.path) for p in report.problems] == [("truncated", m) for m in masks]


def test_a_mask_of_another_split_that_inference_cannot_read_is_reported_by_check(tmp_path, capsys):
    """classes=None reads every split's masks, so a damaged mask in val stops loading train too: check of
    train reports it (an outside review found check saying 'no problems' there), naming the file."""
    for split in ("train", "val"):
        id_dataset(tmp_path / "tmp" / split, n=3)
        for kind in ("images", "masks"):
            (tmp_path / kind).mkdir(exist_ok=True)
            (tmp_path / "tmp" / split / kind).rename(tmp_path / kind / split)
    bad = str(tmp_path / "masks" / "val" / "1.png")
    truncate(bad)
    with pytest.raises(dl.DataError, match="Run `daliloader check`"):
        dl.SegmentationData.from_folder(tmp_path, "train")
    report = dl.check(tmp_path, split="train")
    assert [p.path for p in report.problems] == [bad] and "a mask of another split" in report.problems[0].message
    assert cli(["check", str(tmp_path), "--split", "train", "--quiet"]) == 1
    assert bad in capsys.readouterr().out


# ---------------------------------------------------------------- corrupt data
def test_check_catches_corrupt_jpeg_data_whatever_the_damage(tmp_path, capsys):
    """2000 random bytes in the middle of a JPEG, header and end marker intact, 20 draws of them: the
    loaders' decoders accept every one (they only warn); check flags every one, naming the file."""
    from daliloader.cli import main as cli

    data = dataset(tmp_path / "d", 3, 7, size=(240, 320))
    path = Path(data.images[1])
    clean = path.read_bytes()
    for seed in range(20):
        raw = bytearray(clean)
        middle = len(raw) // 2
        raw[middle:middle + 2000] = np.random.default_rng(seed).integers(0, 256, 2000, dtype=np.uint8).tobytes()
        path.write_bytes(bytes(raw))
        assert cv2.imdecode(np.frombuffer(bytes(raw), np.uint8), cv2.IMREAD_COLOR) is not None  # decoders accept it
        report = dl.check(data, workers=1)
        assert [(p.kind, p.path) for p in report.problems] == [("corrupt", str(path))], seed
    assert cli(["check", str(tmp_path / "d"), "--quiet"]) == 1
    assert str(path) in capsys.readouterr().out


def test_random_bytes_inside_a_png_mask_are_always_caught(tmp_path):
    """PNG stays with Pillow's decoder (its checksums catch damage that libpng-based decoders may pass):
    random bytes in the middle third of a mask, 20 draws, each one reported as corrupt."""
    data = good_dataset(tmp_path, n=2)
    path = Path(data.masks[1])
    clean = path.read_bytes()
    third = len(clean) // 3
    for seed in range(20):
        raw = bytearray(clean)
        raw[third:2 * third] = np.random.default_rng(seed).integers(0, 256, third, np.uint8).tobytes()
        path.write_bytes(bytes(raw))
        assert [(p.kind, p.path) for p in dl.check(data, workers=1).problems] == [("corrupt", str(path))], seed


@pytest.mark.parametrize("mode, progressive", [("RGB", False), ("RGB", True), ("L", False), ("CMYK", False)])
def test_strict_jpeg_decoding_passes_every_sound_jpeg(tmp_path, mode, progressive):
    """libjpeg-turbo in strict mode refuses what the decoders only warn about, and nothing more: sound
    baseline, progressive, grayscale and CMYK JPEGs pass."""
    from PIL import Image

    from daliloader.inspection import strict_decode

    rng = np.random.default_rng(1)
    path = tmp_path / "x.jpg"
    Image.fromarray(rng.integers(0, 256, (H, W, 3), np.uint8)).convert(mode).save(path, progressive=progressive)
    assert strict_decode(str(path)) is None


def test_pictures_over_pillows_pixel_limit_are_read_as_the_decoders_read_them(tmp_path, monkeypatch):
    """Issue 27: a valid 14000x14000 JPEG made from_dirs (class detection) and check die with Pillow's raw
    DecompressionBombError, naming no file, where OpenCV, TensorFlow and DALI decode it. Here Pillow's limit is
    lowered under these small pictures instead; it is Pillow's one global setting, and stays as it was."""
    import cv2
    from PIL import Image

    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    for i in range(2):
        cv2.imwrite(str(tmp_path / "images" / f"{i}.jpg"), np.full((H, W, 3), 60 * i, np.uint8))
        cv2.imwrite(str(tmp_path / "masks" / f"{i}.png"), np.full((H, W), i, np.uint8))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # an error at 2000 pixels; these have 3072
    data = dl.SegmentationData.from_dirs(tmp_path / "images", tmp_path / "masks", classes=None)
    assert data.classes.num_classes == 2 and data.image_size() == (H, W)
    assert dl.check(data).ok and dl.check(tmp_path).ok
    assert Image.MAX_IMAGE_PIXELS == 1000


def test_no_lock_is_held_while_pillow_reads_a_header(tmp_path, monkeypatch):
    """Opening a picture with Pillow's limit lifted once held a lock across Image.open: a garbage collection
    inside Image.open on a TensorFlow thread can free a tf.data iterator whose destructor waits for calls
    that wait for that lock, and the process hangs. Another thread's open must go through while one is
    inside Image.open; the limit is lifted while either runs and put back after the last."""
    import threading

    from PIL import Image

    from daliloader.parts import open_image

    paths = [tmp_path / f"{i}.png" for i in range(2)]
    for path in paths:
        cv2.imwrite(str(path), np.zeros((4, 5, 3), np.uint8))
    pillow_open, seen = Image.open, []

    def open_other():
        with open_image(paths[1]):
            pass

    def open_while_inside(source, *args, **kwargs):
        seen.append(Image.MAX_IMAGE_PIXELS)
        if len(seen) == 1:  # inside the first open: another thread opens the second picture
            other = threading.Thread(target=open_other, daemon=True)
            other.start()
            other.join(timeout=10)
            seen.append(other.is_alive())
        return pillow_open(source, *args, **kwargs)

    monkeypatch.setattr(Image, "open", open_while_inside)
    limit = Image.MAX_IMAGE_PIXELS
    with open_image(paths[0]) as im:
        assert im.size == (5, 4)
    assert seen == [None, None, False] and limit == Image.MAX_IMAGE_PIXELS


# ---------------------------------------------------------------- the load-time guard
@pytest.mark.parametrize("via_tf", [False, True], ids=["direct", "tf_dataset"])
def test_loading_names_the_bad_file(broken, backend, via_tf):
    """Every backend fails with the file's name and the advice to run check: no hang, no skip."""
    data, path, kind = broken
    if via_tf and backend in ("opencv", "tfdata"):
        pytest.skip("no separate tf_dataset path")
    with pytest.raises(Exception) as err:
        one_epoch(backend, data, tf=via_tf, batch_size=2, image_size=(32, 32), shuffle=False)
    message = str(err.value)
    assert path in message and "daliloader check" in message
    if backend in ("opencv", "tfdata") or via_tf:  # a tf.data loader iterated in Python: daliloader's own error
        assert isinstance(err.value, dl.LoadError), repr(err.value)


@pytest.mark.parametrize("tf_backend", ["dali-cpu", "tfdata"])
@pytest.mark.parametrize("which, damage", [("image", truncate), ("mask", idat_damaged)],
                         ids=["truncated jpeg", "a damaged byte inside a png mask"])
def test_model_fit_names_the_bad_file(tmp_path, monkeypatch, tf_backend, which, damage):
    """Inside model.fit, where TensorFlow raises a decoder's failure before daliloader regains control, the
    error still names the file: the guard refuses it first (a PNG mask's chunks are checked whole). The
    mask cache is off: it would meet the damage first, decoding the mask itself (as with id masks)."""
    keras = pytest.importorskip("keras")
    monkeypatch.setenv("DALILOADER_MASK_CACHE", "0")
    data = good_dataset(tmp_path)
    bad = (data.images if which == "image" else data.masks)[BAD]
    damage(bad)
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(len(PALETTE), 1)])
    model.compile("adam", keras.losses.CategoricalCrossentropy(from_logits=True))
    with pytest.raises(Exception, match="daliloader check") as err:  # DALI may already fail at construction
        model.fit(dl.tf_dataset(data, batch_size=2, image_size=(32, 32), backend=tf_backend), epochs=1, verbose=0)
    assert bad in str(err.value)


def test_unknown_colours_load_as_ignore(tmp_path, backend):
    """Stray colours are not an error at load time: they become ignore_index (check reports them)."""
    data = good_dataset(tmp_path, image_ext="png")
    unknown_colour(data.masks[0])
    (x, y), = one_epoch(backend, data.subset([0]), batch_size=1, image_size=(H, W), crop="center",
                        label_mode="int", shuffle=False)
    assert (y[0, :5, :7] == 255).all() and (y[0, 5:] < len(PALETTE)).all()


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata", "opencv"])
def test_a_file_changed_since_it_was_vetted_is_vetted_again(tmp_path, backend):
    """Replaced between epochs by a valid image of another size: refused, naming it, before it is read
    (or, on dali-cpu, within the few batches the loader reads ahead: a chunk of positions at most)."""
    data = dataset(tmp_path / "d", 12, 8)
    kw = dict(batch_size=3, image_size=(48, 64), training=False)
    ds = dl.keras_sequence(data, **kw) if backend == "opencv" else dl.tf_dataset(data, backend=backend, **kw)
    assert len(list(ds)) == 4
    mask = Path(data.masks[7])
    # Valid, but of another size, and swapped in whole: the DALI loader vets ahead in the background, so a
    # file written in place could be seen half-written (and refused, rightly, as empty).
    cv2.imwrite(str(mask.with_suffix(".new.png")), np.zeros((30, 30, 3), np.uint8))
    os.replace(mask.with_suffix(".new.png"), mask)
    tf = pytest.importorskip("tensorflow")
    # (tfdata raises it inside tf.data, which wraps it in an UnknownError, message intact)
    with pytest.raises((dl.LoadError, tf.errors.UnknownError), match=f"{mask}.*(size|but its image is)"):
        for _ in range(3):
            list(ds) if backend != "opencv" else [ds[i] for i in range(len(ds))]


def test_a_same_size_replacement_with_its_old_mtime_is_vetted_again(tmp_path):
    """cp -p, rsync -t and tar carry the modification time over: a replacement of the same size, with
    the old mtime, is still a new file (inode, change time), vetted again."""
    from daliloader.guard import PairGuard

    data = dataset(tmp_path / "d", 2, 14)
    guard = PairGuard(data)
    guard.verify(1)
    mask = Path(data.masks[1])
    old = mask.stat()
    small = cv2.imencode(".png", np.zeros((30, 30, 3), np.uint8))[1].tobytes()
    assert len(small) < old.st_size
    mask.with_suffix(".new").write_bytes(small + bytes(old.st_size - len(small)))  # padded to the same size
    os.utime(mask.with_suffix(".new"), ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(mask.with_suffix(".new"), mask)
    assert (mask.stat().st_size, mask.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    with pytest.raises(dl.LoadError, match=f"{mask}: mask is 30x30 but its image is 64x48"):
        guard.verify(1)


def test_a_file_replaced_mid_run_never_gives_a_misaligned_pair(tmp_path, backend):
    """An image replaced by a smaller valid picture while the loader runs, inside the positions it vetted
    ahead (issue 27): no batch ever holds the misaligned pair (the crop window comes from the new image,
    and the mask fits it); the loader stops, naming the file, once it reads the new one. The masks are the
    images themselves, so a batch whose labels are not the classes of its pixels is a misaligned pair. The
    DALI loaders vet an epoch of this size at its start, so the swap lands among positions vetted already."""
    import cv2

    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(5)
    colours = [PALETTE[block_labels(rng, H, W)] for _ in range(48)]
    data = write_pairs(tmp_path / "d", colours, colours)  # PNG photos: their colours are exact
    kw = dict(batch_size=3, image_size=(H, W), crop="center", shuffle=False, label_mode="int")
    loader = dl.keras_sequence(data, **kw) if backend == "opencv" else dl.tf_dataset(data, backend=backend, **kw)
    epochs = iter(loader) if backend != "opencv" else None
    replaced, seen = Path(data.images[30]), 0
    named = f"({replaced}|{data.masks[30]}): .*32x24"  # the pair: its image, or its mask "but its image is 32x24"
    with pytest.raises((dl.LoadError, tf.errors.OpError), match=named):
        for step in range(2 * 16):  # two epochs of 16 batches
            if backend == "opencv":
                x, y = loader[step % 16]
            else:
                try:
                    x, y = next(epochs)
                except StopIteration:
                    epochs = iter(loader)
                    x, y = next(epochs)
            if step == 0:  # the loader has vetted every position of this epoch and more: swap a file now
                cv2.imwrite(str(replaced.with_suffix(".new.png")), np.zeros((24, 32, 3), np.uint8))
                os.replace(replaced.with_suffix(".new.png"), replaced)
            for image, labels in zip(np.asarray(x), np.asarray(y)):
                colours_now = np.rint(image * 255).astype(np.uint8)
                assert np.array_equal(data.classes.map_mask(colours_now), labels), "a misaligned pair"
                seen += 1
    assert seen >= 3


def test_the_guard_says_memory_ran_out_instead_of_listing_sound_pairs(tmp_path):
    """A batch too large for memory (bench --image-size 5000 with one-hot labels) failed with "nothing is wrong
    here with the pairs in flight", every pair listed, and "the cause may not be the data": it says now that
    memory ran out, with TensorFlow's allocation, and what to change."""
    tf = pytest.importorskip("tensorflow")
    from daliloader.guard import PairGuard

    data = good_dataset(tmp_path, n=3)
    guard = PairGuard(data)
    for index in range(3):
        guard.verify(index)
    with pytest.raises(tf.errors.ResourceExhaustedError) as caught:  # TensorFlow's own, not an imitation
        tf.zeros([10**6, 10**6], tf.float32)
    message = str(guard.explain(caught.value))
    assert "out of memory (OOM when allocating tensor with shape[1000000,1000000] and type float)" in message
    assert "smaller batches or crops, or int labels" in message
    assert data.images[0] not in message and "nothing is wrong here" not in message


def test_an_error_of_sound_pairs_shows_five_of_them_and_counts_the_rest(tmp_path):
    """A failure the pairs do not explain listed every pair in flight (64 lines in the bench); it shows the
    five vetted last and how many more."""
    from daliloader.guard import PairGuard

    data = good_dataset(tmp_path, n=8)
    guard = PairGuard(data)
    for index in range(8):
        guard.verify(index)
    message = str(guard.explain(RuntimeError("a decoder failed")))
    assert "nothing is wrong here with the 8 pairs in flight (the newest first):" in message
    assert "  and 3 more\nso the cause" in message
    assert data.images[7] in message and data.images[3] in message and data.images[2] not in message
    assert "so the cause may not be the data" in message


def test_the_guard_hands_on_the_refusal_that_tensorflow_carries(tmp_path):
    """Parallel reads may refuse several pairs at once; explain() names the one whose error TensorFlow
    hands on, not whichever was refused last. A refusal no error carried (an epoch stopped early) says
    nothing of a later error: that one is explained by the pairs in flight as they are now."""
    from daliloader.guard import PairGuard

    data = good_dataset(tmp_path, n=3)
    sound = Path(data.images[0]).read_bytes()
    for image in data.images[:2]:
        truncate(image)
    guard = PairGuard(data)
    refused = []
    for index in (0, 1):
        with pytest.raises(dl.LoadError) as caught:
            guard.verify(index)
        refused.append(caught.value)
    assert guard.explain(RuntimeError(f"InvalidArgumentError: LoadError: {refused[0]}")) is refused[0]
    for index in (1, 0):
        with pytest.raises(dl.LoadError):
            guard.verify(index)
    Path(data.images[0]).write_bytes(sound)  # mended since it was refused
    explained = str(guard.explain(RuntimeError("a decoder failed")))
    assert explained.startswith("loading a batch failed (a decoder failed)")
    assert data.images[1] in explained and data.images[0] not in explained


def test_check_reads_colour_masks_by_the_channel_given_or_the_datas(tmp_path):
    """mask_channel on check as on the loaders: given for a folder, kept from the data when classes= replaces
    its map (each read the ids of the red channel, the green instance ids beside them no problem)."""
    root = tmp_path / "channels"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rgb = np.zeros((16, 16, 3), np.uint8)
    rgb[..., 0], rgb[..., 1] = np.arange(16) % 4, 200  # red: ids 0-3; green: an instance id
    cv2.imwrite(str(root / "images" / "0.png"), rgb)
    cv2.imwrite(str(root / "masks" / "0.png"), rgb[..., ::-1])
    assert dl.check(root, classes=4, mask_channel=0).ok
    with pytest.raises(dl.DataError, match=r"classes=4 reads ids 0..3 from single-channel masks, but .*0.png is a "
                                           r"colour picture: .* or mask_channel=K"):  # without it: refused at load
        dl.check(root, classes=4)
    with pytest.raises(dl.DataError, match=r"classes=4 reads ids 0..3 from single-channel masks"):  # not at a batch
        dl.SegmentationData.from_folder(root, classes=4)
    data = dl.SegmentationData.from_folder(root, classes=4, mask_channel=0)
    assert dl.check(data).ok and dl.check(data, classes=5).ok
    from daliloader.cli import main

    assert main(["check", str(root), "--classes", "4", "--mask-channel", "0", "--quiet"]) == 0
