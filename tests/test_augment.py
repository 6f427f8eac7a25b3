"""The declared stages (daliloader.augment): each one's DALI and TensorFlow kernels against its reference
with fixed draws (one row per stage in ROWS), every backend end to end, and the options as declared: their
checks, the loaders' signatures, the CLI's flags and the docs' table, all made from the declarations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from conftest import one_epoch
from test_stages import DEVICES, run_dali

import daliloader as dl
from daliloader import augment
from daliloader.errors import SpecError
from daliloader.plan import make_plan

IGNORE = 255
SIZE = (20, 28)


def stage(**options) -> augment.Stage:
    (made,) = augment.make_stages(options)
    return made


@dataclass(frozen=True)
class Row:
    """A declared stage, the draws of its own slots for a few samples (edges included), and how far a
    framework's pixels may be from the reference's, in levels (float arithmetic in another order rounds a
    few pixels the other way; geometry and fills are exact); ``wide``: uint16 labels, ignore index 300."""

    stage: augment.Stage
    draws: list
    levels: int = 0
    wide: bool = False


#: One row per declared stage (and per case its kernels treat apart).
ROWS = {
    "vflip": Row(stage(vflip=0.5), [[0.2], [0.7], [0.0]]),
    "vflip, wide labels": Row(stage(vflip=1.0), [[0.5]], wide=True),
    "blur": Row(stage(blur=(0.3, 4.0)), [[0.0], [0.3], [0.99999994]], 1),
    "blur wider than the image": Row(stage(blur=(8.0, 10.0)), [[0.0], [0.99999994]], 1),
    "gamma": Row(stage(gamma=(0.4, 2.5)), [[0.0], [0.5], [0.99999994]], 1),
    "erase, labels kept": Row(stage(erase=0.8, erase_value=77), [[0.1, 0.5, 0.5, 0.2, 0.9], [0.9, 0.5, 0.5, 0.5, 0.5],
                                                               [0.0, 0.99, 0.99, 0.99999994, 0.0]]),
    "erase, labels ignored": Row(stage(erase=1.0, erase_scale=(0.1, 0.9), erase_ratio=(0.2, 5.0), erase_value=255,
                                       erase_mask="ignore"),
                                 [[0.5, 0.0, 0.0, 0.0, 0.0], [0.5, 0.99, 0.99, 0.5, 0.5], [0.0, 0.7, 0.3, 0.99, 0.1]]),
    "erase, wide labels ignored": Row(stage(erase=1.0, erase_mask="ignore"), [[0.5, 0.9, 0.4, 0.3, 0.6]], wide=True),
}


def inputs(wide: bool = False):
    """An image, its labels (H, W) and their ignore index."""
    rng = np.random.default_rng(11)
    image = rng.integers(0, 256, SIZE + (3,), np.uint8)
    labels = np.kron(rng.integers(0, 5, (5, 7)), np.ones((4, 4), np.int64))
    if wide:
        return image, (labels * 1000).astype(np.uint16), 300
    return image, labels.astype(np.uint8), IGNORE


def cases(name: str):
    """The row's stage, image, labels (H, W), ignore index, and full draws per sample."""
    row = ROWS[name]
    image, labels, ignore = inputs(row.wide)
    u = np.full((len(row.draws), augment.STAGE_DRAWS), 0.5, np.float32)
    first = row.stage.first_draw()
    u[:, first:first + row.stage.draws] = row.draws
    return row.stage, image, labels, ignore, u


def reference(made, image, labels, u, ignore=IGNORE):
    return made.apply(image, labels, made.params(u, *SIZE), ignore)


def assert_close(got: np.ndarray, want: np.ndarray, levels: int, what: str) -> None:
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= levels, f"{what}: {diff.max()} levels from the reference"
    assert (diff > 0).mean() <= 0.01, f"{what}: {(diff > 0).mean():.1%} of the values differ from the reference"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ROWS)
def test_dali_kernel_is_the_reference(name, device):
    from daliloader.backends import dali_augment

    made, image, labels, ignore, u = cases(name)
    n = len(u)
    out = run_dali(device, {"image": [image] * n, "labels": [labels[..., None]] * n, "u": list(u)},
                   lambda image, labels, u: dali_augment.apply((made,), image, labels, u, SIZE, ignore), n)
    for k in range(n):
        want_image, want_labels = reference(made, image, labels, u[k], ignore)
        assert_close(out[k], want_image, ROWS[name].levels, f"image of sample {k}")
        assert out[n + k].dtype == labels.dtype
        np.testing.assert_array_equal(out[n + k][..., 0], want_labels)


@pytest.mark.parametrize("name", ROWS)
def test_tensorflow_kernel_is_the_reference(name):
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tf_augment

    made, image, labels, ignore, u = cases(name)
    for k in range(len(u)):
        got_image, got_labels = tf_augment.apply((made,), tf.constant(image), tf.constant(labels[..., None]),
                                                 tf.constant(u[k]), ignore)
        want_image, want_labels = reference(made, image, labels, u[k], ignore)
        assert_close(got_image.numpy(), want_image, ROWS[name].levels, f"image of sample {k}")
        assert got_labels.dtype == labels.dtype
        np.testing.assert_array_equal(got_labels.numpy()[..., 0], want_labels)


#: Every declared stage on at once, and draws that turn each one on.
ALL = augment.make_stages(dict(vflip=0.5, blur=(0.5, 2.0), gamma=0.5, erase=0.9, erase_value=9, erase_mask="ignore"))


def all_draws() -> np.ndarray:
    rng = np.random.default_rng(5)
    u = rng.random((4, augment.STAGE_DRAWS), dtype=np.float32)
    u[:, ALL[-1].first_draw()] = 0.1  # erasing on in every sample
    return u


@pytest.mark.parametrize("device", DEVICES)
def test_every_stage_in_one_dali_graph_is_the_reference(device):
    """The stages hand over to each other (layouts, dtypes) inside one graph as the reference chains them."""
    from daliloader.backends import dali_augment

    image, labels, _ = inputs()
    u = all_draws()
    n = len(u)
    out = run_dali(device, {"image": [image] * n, "labels": [labels[..., None]] * n, "u": list(u)},
                   lambda image, labels, u: dali_augment.apply(ALL, image, labels, u, SIZE, IGNORE), n)
    for k in range(n):
        want_image, want_labels = augment.apply(ALL, image, labels, u[k], IGNORE)
        assert_close(out[k], want_image, 1, f"image of sample {k}")
        np.testing.assert_array_equal(out[n + k][..., 0], want_labels)


def test_every_stage_in_tensorflow_is_the_reference():
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tf_augment

    image, labels, _ = inputs()
    for uu in all_draws():
        got_image, got_labels = tf_augment.apply(ALL, tf.constant(image), tf.constant(labels[..., None]),
                                                 tf.constant(uu), IGNORE)
        want_image, want_labels = augment.apply(ALL, image, labels, uu, IGNORE)
        assert_close(got_image.numpy(), want_image, 1, "image")
        np.testing.assert_array_equal(got_labels.numpy()[..., 0], want_labels)


def test_every_declared_stage_has_a_row_and_a_kernel_everywhere():
    from daliloader.backends import dali_augment, tf_augment

    assert set(dali_augment.KERNELS) == set(tf_augment.KERNELS) == set(augment.STAGES)
    assert {type(row.stage) for row in ROWS.values()} == set(augment.STAGES)


def test_the_references_do_what_their_names_say():
    made, image, labels, _, u = cases("vflip")
    flipped, flipped_labels = reference(made, image, labels, u[0])
    np.testing.assert_array_equal(flipped, image[::-1])
    np.testing.assert_array_equal(flipped_labels, labels[::-1])
    made, image, labels, _, u = cases("erase, labels ignored")
    top, left, h, w = (int(v) for v in made.params(u[2], *SIZE))
    erased, erased_labels = reference(made, image, labels, u[2])
    assert 0.1 * 0.8 <= h * w / (SIZE[0] * SIZE[1]) <= 0.9 * 1.2  # the drawn area, its sides rounded
    rectangle = (slice(top, top + h), slice(left, left + w))
    assert (erased[rectangle] == 255).all() and (erased_labels[rectangle] == 255).all()
    outside = np.ones(SIZE, bool)
    outside[top:top + h, left:left + w] = False
    np.testing.assert_array_equal(erased[outside], image[outside])
    flat = np.full(SIZE + (3,), 100, np.uint8)
    made, _, _, _, u = cases("blur")
    np.testing.assert_array_equal(reference(made, flat, labels, u[1])[0], flat)  # a blur keeps a flat image
    made, _, _, _, u = cases("gamma")
    bright, dark = (reference(made, image, labels, u[k])[0].astype(int) for k in (0, 2))  # g = 0.4, then 2.5
    assert (bright >= image).all() and (dark <= image).all()


# ---------------------------------------------------------------- every backend, end to end
FLAT = dict(batch_size=3, image_size=(64, 64), label_mode="int", crop="center", shuffle=False, flip=0.0)
FIXED = {"vflip": dict(vflip=1.0), "blur": dict(blur=(1.2, 1.2)), "gamma": dict(gamma=(0.6, 0.6))}


def pixels(x: np.ndarray) -> np.ndarray:
    return np.rint(x * 255).astype(np.uint8)


@pytest.mark.parametrize("name", FIXED)
def test_fixed_parameters_follow_the_reference_on_every_backend(mirror_data, backend, name):
    """With fixed parameters, each backend's batch is the reference applied to its batch without them
    (through tf_dataset for the DALI backends: the draws fed by TensorFlow)."""
    via_tf = backend.startswith("dali")
    (made,) = augment.make_stages(FIXED[name])
    u = np.zeros(augment.STAGE_DRAWS, np.float32)
    for (x0, y0), (x1, y1) in zip(one_epoch(backend, mirror_data, tf=via_tf, **FLAT),
                                  one_epoch(backend, mirror_data, tf=via_tf, **FLAT, **FIXED[name])):
        for plain, done, lab, lab_done in zip(x0, x1, y0, y1):
            want, want_labels = made.apply(pixels(plain), lab, made.params(u, 64, 64), IGNORE)
            assert_close(pixels(done), want, 1, f"{backend} {name}")
            np.testing.assert_array_equal(lab_done, want_labels)


def test_erasing_is_one_rectangle_of_its_range_on_every_backend(mirror_data, backend):
    """erase=1 with the labels ignored: in each sample one rectangle changed, all of it the fill value and
    the ignore index, its area in erase_scale (up to the rounding of its sides), nothing else changed;
    the rectangles differ from sample to sample."""
    options = dict(erase=1.0, erase_scale=(0.05, 0.2), erase_ratio=(0.5, 2.0), erase_value=200, erase_mask="ignore",
                   seed=3)
    boxes = []
    for (x0, y0), (x1, y1) in zip(one_epoch(backend, mirror_data, **FLAT), one_epoch(backend, mirror_data, **FLAT,
                                                                                      **options)):
        for plain, done, lab, lab_done in zip(pixels(x0), pixels(x1), y0, y1):
            changed = (plain != done).any(-1) | (lab != lab_done)
            rows, cols = np.nonzero(changed)
            box = (rows.min(), rows.max() + 1, cols.min(), cols.max() + 1)
            inside = np.zeros(changed.shape, bool)
            inside[box[0]:box[1], box[2]:box[3]] = True
            assert (done[inside] == 200).all() and (lab_done[inside] == IGNORE).all()
            np.testing.assert_array_equal(done[~inside], plain[~inside])
            np.testing.assert_array_equal(lab_done[~inside], lab[~inside])
            assert 0.05 * 0.75 <= inside.mean() <= 0.2 * 1.3, inside.mean()
            boxes.append(box)
    assert len(set(boxes)) > 1, boxes


def test_vertical_flip_rate_and_its_own_draw(tmp_path, backend):
    """vflip=0.3 beside the horizontal flip at 0.5: a quarter of a label in a corner shows which flips a
    sample got; about 30% come upside down, 50% mirrored, and 15% both (the two draws independent)."""
    from conftest import PALETTE, write_pairs

    lab = np.zeros((16, 16), np.int64)
    lab[:8, :8] = 5
    data = write_pairs(tmp_path, [PALETTE[lab]] * 8, [PALETTE[lab]] * 8)
    vertical, horizontal = [], []
    for epoch in range(12):
        batches = one_epoch(backend, data, batch_size=4, image_size=(16, 16), crop="random", flip=0.5, vflip=0.3,
                            label_mode="int", seed=epoch)
        for y in (y for b in batches for y in b[1]):
            corner = [int(y[r, c] == 5) for r, c in ((0, 0), (0, 15), (15, 0), (15, 15))].index(1)
            vertical.append(corner >= 2)
            horizontal.append(corner % 2 == 1)
    vertical, horizontal = np.array(vertical), np.array(horizontal)
    assert 0.18 < vertical.mean() < 0.42 and 0.35 < horizontal.mean() < 0.65, (vertical.mean(), horizontal.mean())
    assert 0.06 < (vertical & horizontal).mean() < 0.25, (vertical & horizontal).mean()


# ---------------------------------------------------------------- the options, as declared
@pytest.mark.parametrize("options, message", [
    (dict(vflip=1.5), "vflip is a probability in [0, 1]"),
    (dict(blur=-1), "blur=-1 (the range (-1, -1)) must satisfy 0.01 <= min"),
    (dict(gamma=20), "gamma=20 (the range (0, 21)) must satisfy 0 < min"),  # (a number: said as given)
    (dict(blur=(2.0, 1.0)), "blur=(2, 1) must satisfy"),
    (dict(blur=(1.0, 30.0)), "pixels (sigma)"),
    (dict(blur=1e-46), "must satisfy 0.01 <= min"),
    (dict(erase=0.5, erase_ratio=(1e-40, 1.0)), "must satisfy 0.01 <= min"),
    (dict(gamma="12"), "gamma must be a number or a (min, max) pair"),
    (dict(gamma=(0.0, 2.0)), "gamma=(0, 2) must satisfy 0 < min"),
    (dict(gamma="strong"), "gamma must be a number or a (min, max) pair of exponents"),
    (dict(erase=0.5, erase_value=300), "erase_value is a pixel value, an integer in 0..255"),
    (dict(erase=0.5, erase_mask="zero"), "erase_mask='zero' is not supported; use 'keep' or 'ignore'"),
    (dict(erase=0.5, erase_scale=(0.0, 0.5)), "erase_scale=(0, 0.5) must satisfy 0 < min"),
    (dict(erase_scale=(0.1, 0.5)), "erase_scale set the stage that erase= turns on, and erase is not given"),
    (dict(erase_scale=(0.1, 0.5)), "(on the command line: --erase-scale needs --erase)"),
    (dict(erase_scale=(0.1, 0.5), erase_value=3),
     "(on the command line: --erase-scale and --erase-value need --erase)"),
])
def test_options_are_checked_by_name(synth_data, options, message):
    with pytest.raises(SpecError) as e:
        make_plan(synth_data, image_size=32, **options)
    assert message in str(e.value)


def test_evaluation_refuses_them_and_a_misspelt_one_is_named(synth_data):
    with pytest.raises(SpecError, match=r"training=False\) draws nothing at random, but got vflip, erase"):
        make_plan(synth_data, image_size=32, training=False, vflip=0.5, erase=0.2)
    with pytest.raises(SpecError, match="did you mean 'vflip'"):
        make_plan(synth_data, image_size=32, vflp=0.5)
    with pytest.raises(SpecError, match="did you mean 'gamma'"):  # albumentations' name
        make_plan(synth_data, image_size=32, gamma_limit=(80, 120))


def test_zero_is_off_and_none_is_the_default(synth_data):
    assert make_plan(synth_data, image_size=32, vflip=0.0, blur=0, gamma=0, erase=0.0).spec.augment == ()
    assert make_plan(synth_data, image_size=32, erase=0, erase_scale=(0.1, 0.2)).spec.augment == ()  # a sweep's "off"
    assert make_plan(synth_data, image_size=32, vflip=None, erase_mask=None).spec.augment == ()
    spec = make_plan(synth_data, image_size=32, gamma=0.2, vflip=0.5).spec
    assert [type(s) for s in spec.augment] == [augment.VerticalFlip, augment.Gamma]  # the order of STAGES
    assert spec.augment[1].gamma == pytest.approx((0.8, 1.2))


@pytest.mark.parametrize("loader", [dl.tf_dataset, dl.keras_sequence, dl.dali_pipeline, dl.make_plan])
def test_the_loaders_signatures_list_every_declared_option(loader):
    import inspect

    parameters = inspect.signature(loader).parameters
    for name, option in augment.OPTIONS.items():
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY and parameters[name].default is None
        assert option.annotation in str(parameters[name].annotation)


def test_preview_takes_every_declared_option_as_a_flag():
    """Each declared option is a flag of its name, its value read as the option takes it (its default,
    written as a user would)."""
    from daliloader.cli import build_parser, preview_recipe

    def text(value) -> str:
        return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)

    flags = ["preview", "-o", "x.png"]
    for name, option in augment.OPTIONS.items():
        flags += ["--" + name.replace("_", "-"), text(option.default)]
    recipe = preview_recipe(build_parser().parse_args(flags))
    assert {k: recipe[k] for k in augment.OPTIONS} == {name: o.default for name, o in augment.OPTIONS.items()}
    assert augment.from_text("1e-3") == 0.001 and augment.from_text("0.5,1") == (0.5, 1)
    assert augment.from_text("ignore") == "ignore" and augment.from_text("0.5,") == "0.5,"
