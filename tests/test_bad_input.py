"""Bad input: broken datasets built on the fly, ``check`` reports them, every loader names the file."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import PALETTE, block_labels, one_epoch, write_pairs

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


def test_model_fit_names_the_bad_file(tmp_path):
    keras = pytest.importorskip("keras")
    data = good_dataset(tmp_path)
    truncate(data.images[BAD])
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(len(PALETTE), 1)])
    model.compile("adam", keras.losses.CategoricalCrossentropy(from_logits=True))
    with pytest.raises(Exception, match="daliloader check") as err:  # DALI may already fail at construction
        model.fit(dl.tf_dataset(data, batch_size=2, image_size=(32, 32), backend="dali-cpu"), epochs=1, verbose=0)
    assert data.images[BAD] in str(err.value)


def test_unknown_colours_load_as_ignore(tmp_path, backend):
    """Stray colours are not an error at load time: they become ignore_index (check reports them)."""
    data = good_dataset(tmp_path, image_ext="png")
    unknown_colour(data.masks[0])
    (x, y), = one_epoch(backend, data.subset([0]), batch_size=1, image_size=(H, W), crop="center",
                        label_mode="int", shuffle=False)
    assert (y[0, :5, :7] == 255).all() and (y[0, 5:] < len(PALETTE)).all()


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


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata"])
def test_keras_class_weight_is_refused_naming_the_loss_that_takes_it(synth_data, backend):
    """model.fit(ds, class_weight=...) maps the dataset to per-sample weights, which a segmentation batch
    cannot have: refused at once, naming dl.losses' class_weights (it failed deep in the loss before)."""
    keras = pytest.importorskip("keras")
    n = synth_data.classes.num_classes
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(n, 1)])
    model.compile("adam", dl.losses.SparseCategoricalCrossentropy())
    ds = dl.tf_dataset(synth_data, batch_size=2, image_size=(32, 32), label_mode="int", backend=backend)
    with pytest.raises(dl.SpecError, match=r"class_weight=.*dl.losses.SparseCategoricalCrossentropy\(class_weights="):
        model.fit(ds, class_weight={0: 1.0, 1: 2.0}, epochs=1, verbose=0)
    assert len(ds.map(lambda x, y: x).take(1).as_numpy_iterator().next()) == 2  # other maps still chain



def test_a_file_name_that_is_no_utf8_loads_checks_and_prepares(tmp_path, backend):
    """Issue 27: a Latin-1 name (b"caf\\xe9.png"): check said "no problems", then tfdata failed converting it
    to a TensorFlow string, naming no file, and prepare crashed at the copy's file name."""
    import cv2

    root = os.fsencode(tmp_path)
    for folder in (b"images", b"masks"):
        os.makedirs(root + b"/" + folder)
    for name in (b"caf\xe9", b"plain"):  # written by Python: OpenCV's file functions crash on such names
        with open(root + b"/images/" + name + b".png", "wb") as fh:
            fh.write(cv2.imencode(".png", np.full((32, 40, 3), 90, np.uint8))[1].tobytes())
        with open(root + b"/masks/" + name + b".png", "wb") as fh:
            fh.write(cv2.imencode(".png", np.ones((32, 40), np.uint8))[1].tobytes())
    data = dl.SegmentationData.from_dirs(os.fsdecode(root + b"/images"), os.fsdecode(root + b"/masks"), classes=3)
    assert dl.check(data).ok
    batches = one_epoch(backend, data, tf=True, batch_size=2, training=False, label_mode="int")
    assert [b[1].tolist() for b in batches] == [np.ones((2, 32, 40), np.int32).tolist()]
    if backend == "dali-cpu":  # prepare and verify once
        out = tmp_path / "prepared"
        assert cli(["prepare", "--images", data.images[0].rsplit("/", 1)[0], "--masks",
                    data.masks[0].rsplit("/", 1)[0], "--classes", "3", str(out), "--quiet", "--verify"]) == 0
        assert sorted(os.listdir(out / "images")) == ["0000000-caf.png", "0000001-plain.png"]  # UTF-8 names


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
