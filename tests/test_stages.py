"""Every backend's implementation of each stage against the reference (daliloader.stages), with fixed
draws and fixed inputs: label mapping, the window, the padding, the flip, normalisation, encoding and
the weights.

The opencv backend *is* the reference (it calls daliloader.stages), so the implementations under test
are the DALI graph's (its CPU ops here; its GPU ops where there is a GPU) and TensorFlow's (tfdata, and
the TF finishing step of the DALI backends). End-to-end agreement is in test_backends.py.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from conftest import HAS_GPU

from daliloader import stages
from daliloader.classes import ClassMap
from daliloader.spec import make_spec

DEVICES = ["cpu", pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU")])]

SPECS = {
    "center": make_spec((40, 56), crop="center"),
    "random": make_spec((40, 56), crop="random", flip=0.5),
    "random zoom": make_spec((40, 56), crop="random", scale=(0.5, 2.0), flip=0.3),
    "random no flip": make_spec((33, 17), crop="random", scale=(0.8, 1.25), flip=0.0),
    "center flip": make_spec((40, 56), crop="center", flip=0.5),
    "resize": make_spec((40, 56), crop="resize", flip=0.5),
    "fit": make_spec((40, 56), crop="fit"),
}
#: Colour and rotation with draws inside their ranges, and the draws (see stages.DRAWS) that pick them.
COLOUR = make_spec((20, 28), crop="center", brightness=(0.5, 1.5), contrast=(0.4, 1.6), saturation=(0.0, 2.0),
                   hue=(-180, 180), rotate=(-90, 90))
BRIGHTNESS_CONTRAST = make_spec((20, 28), crop="center", brightness=(0.5, 1.5), contrast=(0.4, 1.6))
COLOUR_DRAWS = [[0.1, 0.9, 0.3, 0.7, 0.2], [0.9, 0.1, 0.8, 0.05, 0.93], [0.5, 0.5, 0.5, 0.5, 0.5],
                [0.0, 0.99, 0.0, 0.99, 0.61]]  # angle, brightness, contrast, saturation, hue


def colour_cases():
    """An image and labels (uint8 and uint16), and full draws for each case of COLOUR_DRAWS."""
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (20, 28, 3), np.uint8)
    labels = np.kron(rng.integers(0, 5, (5, 7)), np.ones((4, 4), np.int64))
    u = np.zeros((len(COLOUR_DRAWS), stages.DRAWS), np.float32)
    u[:, stages.ANGLE:stages.HUE + 1] = COLOUR_DRAWS
    return image, labels, u


def draws(n: int = 200):
    """Image sizes (smaller and larger than the windows) and four draws in [0, 1) each, edges included."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(5, 140, size=(n, 2))
    u = rng.random((n, 4), dtype=np.float32)
    u[:8] = [[0, 0, 0, 0], [0.99999994] * 4, [0.5] * 4, [0.25, 0.75, 0.5, 0.3], [0.5, 0, 0.99999994, 0.5],
             [0.99999994, 0.5, 0, 0.2999999], [0, 0.5, 0.5, 0.5], [0.3, 0.3, 0.3, 0.3]]
    return sizes, u


def label_maps():
    """Class maps with the masks that exercise them: colours (with ignore colours, unknown colours and
    colours that share a known colour's red and green), 8-bit ids (Cityscapes: void ids and unknown ids)
    and 16-bit ids with wide labels; the mask as decoded, (H, W, 3) or (H, W, 1)."""
    rng = np.random.default_rng(3)
    palette = [(128, 64, 128), (128, 64, 0), (0, 0, 0), (255, 255, 255), (70, 70, 70)]
    colours = ClassMap.from_palette(palette, ignore_colors=[(0, 0, 192)])
    unknown = [(128, 64, 129), (128, 65, 128)] + [(1, 2, b) for b in (3, 128, 0, 255, 70)]  # known blues too
    seen = np.array(palette + [(0, 0, 192)] + unknown, np.uint8)
    ids16 = ClassMap.from_ids({0: 0, 7: 1, 1000: 2, 65535: 3}, ignore_index=300)
    return {
        "colours": (colours, seen[rng.integers(0, len(seen), (9, 7))]),
        **{f"{n} colours": many_colours(n) for n in (150, 300, 700)},
        "cityscapes ids": (ClassMap.cityscapes(), np.arange(63, dtype=np.uint8).reshape(9, 7, 1)),
        "16-bit ids": (ids16, rng.choice([0, 7, 1000, 65535, 1, 999, 256], (9, 7, 1)).astype(np.uint16)),
    }


def many_colours(n: int):
    """A palette of about ``n`` random colours (ADE20K-sized, and more (r, g) pairs than one group of
    ``RGBTables`` holds past 255: one, two and three groups), with a mask of every colour, of each one's
    near misses (a bit flipped in each channel) and of random colours."""
    rng = np.random.default_rng(n)
    palette = rng.integers(0, 256, size=(n, 3))
    palette[1] = palette[0] ^ [0, 0, 1]  # two colours that differ in blue alone
    palette = np.unique(palette, axis=0)
    probes = np.concatenate([palette, palette ^ 1, palette ^ [1, 0, 0], palette ^ [0, 1, 0],
                             rng.integers(0, 256, size=(1000, 3))]).astype(np.uint8)
    return ClassMap.from_palette(palette), probes[None]


LABEL_MAPS = label_maps()


def reference_windows(spec, sizes, u):
    return [stages.window(spec, int(h), int(w), uu) for (h, w), uu in zip(sizes, u)]


def as_tuple(win: stages.Window):
    return win.top, win.left, win.height, win.width, win.flip


# ---------------------------------------------------------------- DALI
def run_dali(device: str, inputs: dict, define, batch: int):
    """Run ``define(**nodes)`` in a DALI pipeline fed ``inputs`` (name -> list of per-sample arrays)."""
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(batch_size=batch, num_threads=1, device_id=0 if device == "gpu" else None, prefetch_queue_depth=1)
    def pipe():
        nodes = {name: fn.external_source(source=[values], name=name, cycle=True, batch=True,
                                          layout="HWC" if name in ("image", "labels") else None)
                 for name, values in inputs.items()}
        if device == "gpu":
            nodes = {k: (v.gpu() if k in ("image", "labels") else v) for k, v in nodes.items()}
        return define(**nodes)

    p = pipe()
    p.build()
    out = p.run()
    return [np.array(o.as_cpu().at(i) if hasattr(o, "as_cpu") else o.at(i)) for o in out for i in range(batch)]


@pytest.mark.parametrize("name", SPECS)
def test_dali_window_is_the_reference(name):
    from nvidia.dali import fn, types

    from daliloader.backends.dali_graph import DALI_MATH, crop_window

    spec = SPECS[name]
    sizes, u = draws()
    n = len(sizes)

    def define(extent, u):
        start, shape, flip = crop_window(fn.cast(extent, dtype=types.INT32), spec, u)
        flip = DALI_MATH.to_int(flip) if flip is not False else fn.cast(extent[0] * 0, dtype=types.INT32)
        return fn.cast(start, dtype=types.INT32), fn.cast(shape, dtype=types.INT32), flip

    out = run_dali("cpu", {"extent": [np.array([h, w], np.int32) for h, w in sizes], "u": list(u)}, define, n)
    starts, shapes, flips = out[:n], out[n:2 * n], out[2 * n:]
    got = [(int(s[0]), int(s[1]), int(sh[0]), int(sh[1]), bool(f)) for s, sh, f in zip(starts, shapes, flips)]
    assert got == [as_tuple(w) for w in reference_windows(spec, sizes, u)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", LABEL_MAPS)
def test_dali_labels_are_the_reference(name, device):
    from daliloader.backends import dali_graph

    classes, mask = LABEL_MAPS[name]
    out = run_dali(device, {"labels": [mask]}, lambda labels: dali_graph.map_labels(labels, classes), 1)
    assert out[0].dtype == classes.label_dtype
    np.testing.assert_array_equal(out[0][..., 0], classes.map_mask(mask))


@pytest.mark.parametrize("device", DEVICES)
def test_dali_pad_flip_normalize_encode_weights_are_the_reference(device):
    from daliloader.backends import dali_graph

    classes = ClassMap.from_ids(5, ignore_index=300)  # uint16 labels, as wide labels travel
    spec = make_spec((12, 10), crop="center", mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3), dtype="float32")
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (9, 7, 3), np.uint8)
    labels = rng.choice([0, 1, 2, 3, 4, 300], (9, 7)).astype(np.uint16)
    wins = [stages.Window(-2, -1, 12, 10, False), stages.Window(3, 2, 12, 10, True)]
    onehot = make_spec((12, 10), crop="center", label_mode="onehot")

    def define(image, labels, offset, shape, flip, index):
        img, lab = dali_graph.crop(image, labels, offset, shape, spec, classes.ignore_index)
        img, lab = dali_graph.flip_and_normalize(img, lab, flip, spec)
        return (img, dali_graph.encode(lab, spec, classes), dali_graph.encode(lab, onehot, classes),
                dali_graph.weigh(lab, index, classes))

    inputs = {"image": [image] * 2, "labels": [labels[..., None]] * 2,
              "offset": [np.array([w.top, w.left], np.int32) for w in wins],
              "shape": [np.array([w.height, w.width], np.int32) for w in wins],
              "flip": [np.array(w.flip, np.int32) for w in wins], "index": [np.array(i, np.int64) for i in (4, -1)]}
    out = run_dali(device, inputs, define, 2)
    for k, (win, real) in enumerate(zip(wins, (True, False))):
        image_fill, label_fill = stages.fills(classes.ignore_index)
        ref_image = stages.normalize(stages.flip(stages.crop(image, win, image_fill), win), spec)
        ref_labels = stages.flip(stages.crop(labels, win, label_fill), win)
        np.testing.assert_allclose(out[k], ref_image, rtol=0, atol=1e-5)
        np.testing.assert_array_equal(out[2 + k], stages.encode(ref_labels, spec, 5))
        np.testing.assert_array_equal(out[4 + k], stages.encode(ref_labels, onehot, 5))
        np.testing.assert_array_equal(out[6 + k], stages.weights(ref_labels, real, 5))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wide", [False, True])
def test_dali_colour_and_rotate_are_the_reference(device, wide):
    """color_twist is the reference's colour map exactly; the rotation's geometry is the reference's:
    labels equal, the image within one level (bilinear weights rounded differently)."""
    from daliloader.backends import dali_graph

    image, labels, u = colour_cases()
    classes = ClassMap.from_ids(5, ignore_index=300 if wide else 255)
    labels = labels.astype(classes.label_dtype)[..., None]

    def define(image, labels, u):
        coloured = dali_graph.colour(image, COLOUR, u)
        turned = dali_graph.rotate(image, labels, stages.draw_angle(COLOUR, u), classes, framed=device == "cpu")
        # the other way to fill the corners (the GPU graph's on the CPU): the same pixels
        other = dali_graph.rotate(image, labels, stages.draw_angle(COLOUR, u), classes, framed=device != "cpu")
        return (coloured,) + turned + (dali_graph.colour(image, BRIGHTNESS_CONTRAST, u),) + other

    n = len(u)
    out = run_dali(device, {"image": [image] * n, "labels": [labels] * n, "u": list(u)}, define, n)
    for k, uu in enumerate(u):
        np.testing.assert_array_equal(out[k], stages.colour(image, stages.draw_colour(COLOUR, uu)))
        # brightness and contrast alone: DALI's brightness_contrast, the same map
        np.testing.assert_array_equal(out[3 * n + k], stages.colour(image, stages.draw_colour(BRIGHTNESS_CONTRAST, uu)))
        angle = stages.draw_angle(COLOUR, uu)
        turned = stages.rotate(image, angle, stages.IMAGE_FILL, labels=False)
        for image_out, labels_out in ((out[n + k], out[2 * n + k]), (out[4 * n + k], out[5 * n + k])):
            assert np.abs(image_out.astype(int) - turned).max() <= 1, angle
            np.testing.assert_array_equal(labels_out, stages.rotate(labels, angle, classes.ignore_index, labels=True))


#: Source sizes for the whole-image modes to (40, 56): ratios whose sampling points fall on borders
#: between source pixels (ties: 80x112 halves, 60x84 and 27x42 by 3/2 and 2/3...), and others.
WHOLE_SIZES = [(30, 90), (90, 30), (40, 56), (17, 23), (200, 101), (80, 112), (60, 84), (27, 42), (96, 128)]


def noise_labels(rng, h: int, w: int) -> np.ndarray:
    """Labels 0-4 drawn per pixel: every tie of a nearest-neighbour resize shows."""
    return rng.integers(0, 5, (h, w)).astype(np.uint8)


@pytest.mark.parametrize("device", DEVICES)
def test_dali_fit_and_resize_are_the_reference(device):
    """Whole-image modes: the reference's geometry (resized size, centred padding), and the labels of the
    nearest-neighbour resize exactly the reference's, ties included."""
    from nvidia.dali import types

    from daliloader.backends import dali_graph

    rng = np.random.default_rng(3)
    sizes = WHOLE_SIZES
    for name in ("fit", "resize"):
        spec = SPECS[name]
        images = [rng.integers(0, 256, (h, w, 3), np.uint8) for h, w in sizes]
        labels = [noise_labels(rng, h, w)[..., None] for h, w in sizes]

        def define(image, labels, spec=spec):
            shape = labels.shape(dtype=types.INT32)[0:2]
            return dali_graph.crop(image, labels, np.zeros(2, np.int32), shape, spec, 255)

        out = run_dali(device, {"image": images, "labels": labels}, define, len(sizes))
        for k, (h, w) in enumerate(sizes):
            rh, rw = stages.resize_to(spec, h, w)
            ref = stages.resize(labels[k][..., 0], (rh, rw), labels=True)
            if name == "fit":
                ref = stages.crop(ref, stages.Window(*stages.fit_window(spec, rh, rw), *spec.image_size, False), 255)
            got = out[len(sizes) + k][..., 0]
            assert got.shape == spec.image_size and out[k].shape == spec.image_size + (3,)
            np.testing.assert_array_equal(got, ref, err_msg=f"{name} {h}x{w}")


#: (source, output) sizes of one axis: halving and other ties, primes, sizes far apart, large sources.
AXIS_SIZES = [(24, 52), (24, 60), (96, 144), (96, 80), (128, 80), (375, 512), (500, 438), (683, 512), (720, 533),
              (960, 581), (1024, 288), (1024, 192), (1080, 1024), (2048, 1024), (2048, 777), (7, 1000), (1000, 7),
              # where DALI's float32 resize, even with its sampling points moved, picked one pixel too far
              (4097, 2048), (3113, 2048), (1229, 3551), (6337, 1810)]
#: The largest output size of AXIS_SIZES: what dali_graph.resize_labels is told it can be.
LIMIT = max(size for _, size in AXIS_SIZES)


def exact_sources(size: int, extent: int) -> np.ndarray:
    """nearest_source's definition in exact fractions: the source pixel holding each output centre."""
    from fractions import Fraction
    from math import floor

    return np.array([floor((Fraction(i) + Fraction(1, 2)) * Fraction(extent, size)) for i in range(size)])


def test_nearest_source_is_its_definition():
    for extent, size in AXIS_SIZES:
        np.testing.assert_array_equal(stages.nearest_source(np.arange(size), size, extent), exact_sources(size, extent))
    ramp = np.arange(96 * 80).reshape(96, 80)
    np.testing.assert_array_equal(stages.resize(ramp, (144, 60), labels=True),
                                  ramp[exact_sources(144, 96)][:, exact_sources(60, 80)])


@pytest.mark.parametrize("device", DEVICES)
def test_dali_label_resize_is_exact_on_every_size(device):
    """DALI's label resize (dali_graph.resize_labels) picks the source rows and columns of the integer
    formula, on a ramp whose value is its row (then its column), up to sizes where float32 sampling
    points are a fraction of a pixel off."""
    from nvidia.dali import types

    from daliloader.backends import dali_graph

    for axis in (0, 1):
        ramps = [np.broadcast_to(np.arange(extent, dtype=np.uint16).reshape((-1, 1, 1) if axis == 0 else (1, -1, 1)),
                                 (extent, 3, 1) if axis == 0 else (3, extent, 1)).copy() for extent, _ in AXIS_SIZES]
        outs = [np.array([size if axis == 0 else 3, 3 if axis == 0 else size], np.int32) for _, size in AXIS_SIZES]

        def define(labels, out):
            return dali_graph.resize_labels(labels, labels.shape(dtype=types.INT32)[0:2], out[0], out[1], LIMIT)

        got = run_dali(device, {"labels": ramps, "out": outs}, define, len(AXIS_SIZES))
        for (extent, size), picked in zip(AXIS_SIZES, got):
            line = picked[:, 0, 0] if axis == 0 else picked[0, :, 0]
            np.testing.assert_array_equal(line, exact_sources(size, extent), err_msg=f"axis {axis}: {extent} -> {size}")


# ---------------------------------------------------------------- TensorFlow
@pytest.mark.parametrize("name", SPECS)
def test_tf_window_is_the_reference(name):
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tfdata

    spec = SPECS[name]
    sizes, u = draws()
    got = []
    for (h, w), uu in zip(sizes, u):
        win = tfdata.draw_window(spec, tf.constant(int(h)), tf.constant(int(w)), tf.constant(uu))
        got.append((int(win.top), int(win.left), int(win.height), int(win.width), bool(win.flip)))
    assert got == [as_tuple(w) for w in reference_windows(spec, sizes, u)]


@pytest.mark.parametrize("name", LABEL_MAPS)
def test_tf_labels_are_the_reference(name):
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tfdata

    classes, mask = LABEL_MAPS[name]
    got = tfdata.map_labels(tf.constant(mask), classes, tf.constant(classes.lookup_table)).numpy()
    assert got.dtype == classes.label_dtype
    np.testing.assert_array_equal(got, classes.map_mask(mask))


def test_tf_pad_flip_normalize_encode_weights_are_the_reference():
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tfdata, tfops

    classes = ClassMap.from_ids(5, ignore_index=300)
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (9, 7, 3), np.uint8)
    labels = rng.choice([0, 1, 2, 3, 4, 300], (9, 7)).astype(np.uint16)
    for win in (stages.Window(-2, -1, 12, 10, False), stages.Window(3, 2, 12, 10, False)):
        for a, fill in ((image, stages.IMAGE_FILL), (labels[..., None], classes.ignore_index)):
            got = tfdata.crop(tf.constant(a), win, fill).numpy()
            np.testing.assert_array_equal(got, stages.crop(a, win, fill))
    for flip in (False, True):
        win = stages.Window(0, 0, 9, 7, flip)
        got = tfdata.flip_pair(tf.constant(image), tf.constant(labels), tf.constant(flip))
        np.testing.assert_array_equal(got[0].numpy(), stages.flip(image, win))
        np.testing.assert_array_equal(got[1].numpy(), stages.flip(labels, win))
    for spec in (make_spec((9, 7), crop="center", mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3)),
                 make_spec((9, 7), crop="center", label_mode="int", dtype="float16")):
        x, y, w = tfdata.finish(tf.constant(image[None]), tf.constant(labels[None]), tf.constant([0], tf.int64), spec,
                                classes, ("image", "labels", "weight"))
        np.testing.assert_allclose(x.numpy()[0], stages.normalize(image, spec), rtol=0, atol=1e-5)
        np.testing.assert_array_equal(y.numpy()[0], stages.encode(labels, spec, 5))
        np.testing.assert_array_equal(w.numpy()[0], stages.weights(labels, True, 5))
    np.testing.assert_array_equal(tfops.one_hot(tf.constant(labels), 5).numpy(),
                                  stages.encode(labels, make_spec((9, 7), crop="center"), 5))


@pytest.mark.parametrize("wide", [False, True])
def test_tf_colour_and_rotate_are_the_reference(wide):
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tfops

    image, labels, u = colour_cases()
    classes = ClassMap.from_ids(5, ignore_index=300 if wide else 255)
    labels = labels.astype(classes.label_dtype)[..., None]
    for uu in u:
        factors = stages.draw_colour(COLOUR, uu)
        got = tfops.colour(tf.constant(image), stages.draw_colour(COLOUR, tf.constant(uu))).numpy()
        assert np.abs(got.astype(int) - stages.colour(image, factors)).max() <= 1  # float sums in another order
        angle = stages.draw_angle(COLOUR, uu)
        img, lab = tfops.rotate(tf.constant(image), tf.constant(labels), tf.constant(angle, tf.float32),
                                classes.ignore_index)
        assert np.abs(img.numpy().astype(int) - stages.rotate(image, angle, 0, labels=False)).max() <= 1, angle
        np.testing.assert_array_equal(lab.numpy(), stages.rotate(labels, angle, classes.ignore_index, labels=True))


def test_tf_fit_and_resize_are_the_reference():
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tfdata

    rng = np.random.default_rng(4)
    for name in ("fit", "resize"):
        spec = make_spec((40, 56), crop=name)  # no flip
        for h, w in WHOLE_SIZES:
            labels = noise_labels(rng, h, w)
            _, png = cv2.imencode(".png", labels)
            image = tf.io.encode_png(tf.constant(rng.integers(0, 256, (h, w, 3), np.uint8)))
            classes = ClassMap.from_ids(5)
            img, lab = tfdata.sample_from_bytes(image, tf.constant(png.tobytes()), spec, classes,
                                                tf.constant(classes.lookup_table), tf.constant([1, 2], tf.int64))
            rh, rw = stages.resize_to(spec, h, w)
            ref = stages.resize(labels, (rh, rw), labels=True)
            if name == "fit":
                ref = stages.crop(ref, stages.Window(*stages.fit_window(spec, rh, rw), *spec.image_size, False), 255)
            got = lab.numpy()
            assert got.shape == spec.image_size and img.shape == spec.image_size + (3,)
            np.testing.assert_array_equal(got, ref, err_msg=f"{name} {h}x{w}")


@pytest.mark.parametrize("size", [(240, 60), (60, 240), (300, 100)])
def test_the_reference_image_resize_antialiases_each_side_that_shrinks(size):
    """One side shrinking and the other growing (crop='resize' to another aspect): the reference (the OpenCV
    backend) averages along the shrinking side and interpolates along the growing one, near TensorFlow's
    antialiased bilinear on 1-pixel stripes. Choosing by area alone sampled both sides (59 levels off on
    average at 240x60)."""
    tf = pytest.importorskip("tensorflow")
    rows, cols = np.mgrid[:120, :160]
    stripes = np.stack([cols % 2, rows % 2, (cols // 3 + rows // 5) % 2], -1).astype(np.uint8) * 255
    ours = stages.resize(stripes, size, labels=False).astype(np.float32)
    assert np.abs(ours - tf.image.resize(stripes, size, antialias=True).numpy()).mean() < 16


def test_tf_label_resize_is_exact_on_every_size():
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tfdata

    for extent, size in AXIS_SIZES:
        ramp = tf.reshape(tf.range(extent), (extent, 1, 1))
        got = tfdata.resize_labels(ramp, tf.constant([size, 1]))
        np.testing.assert_array_equal(got.numpy()[:, 0, 0], exact_sources(size, extent), err_msg=f"{extent} -> {size}")


# ---------------------------------------------------------------- the reference itself
def test_the_reference_colour_and_rotation_follow_their_definitions():
    """Neutral factors leave the image alone; saturation 0 is the luma grey; a hue turn of 360 degrees is
    none; brightness multiplies; contrast scales about mid-grey. The rotation is OpenCV's
    getRotationMatrix2D inverted; fit keeps the aspect ratio."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (9, 11, 3), np.uint8)
    np.testing.assert_array_equal(stages.colour(image, (1.0, 1.0, 1.0, 0.0)), image)
    np.testing.assert_array_equal(stages.colour(image, (1.0, 1.0, 1.0, 360.0)), image)
    grey = stages.colour(image, (1.0, 1.0, 0.0, 0.0)).astype(int)
    assert (grey.max(axis=2) - grey.min(axis=2)).max() <= 1
    np.testing.assert_allclose(grey[..., 0], image @ [0.299, 0.587, 0.114], atol=1)
    np.testing.assert_array_equal(stages.colour(image, (0.5, 1.0, 1.0, 0.0)), np.rint(image * 0.5).astype(np.uint8))
    flat = np.full((2, 2, 3), 200, np.uint8)
    assert stages.colour(flat, (1.0, 0.5, 1.0, 0.0))[0, 0, 0] == 164  # 128 + 0.5 * (200 - 128)
    forward = cv2.getRotationMatrix2D((10.0, 4.5), 30.0, 1.0)
    np.testing.assert_allclose(stages.rotation_matrix(30.0, 10, 21), cv2.invertAffineTransform(forward), atol=1e-12)
    fit = SPECS["fit"]  # 40 x 56
    assert stages.resize_to(fit, 400, 1000) == (22, 56) and stages.resize_to(fit, 1000, 400) == (40, 16)
    assert stages.fit_window(fit, 22, 56) == (-9, 0)


def test_the_reference_window_follows_its_definition():
    """Centre crops at tf.image.resize_with_crop_or_pad's offsets; random windows inside [0, slack] (or
    [slack, 0] when overhanging), every offset reachable; zoomed windows of round(side / zoom)."""
    spec = SPECS["center"]
    assert as_tuple(stages.window(spec, 100, 100, [0] * 4)) == (30, 22, 40, 56, False)
    assert as_tuple(stages.window(spec, 10, 11, [0] * 4)) == (-15, -22, 40, 56, False)
    spec = SPECS["random"]
    assert as_tuple(stages.window(spec, 43, 56, [0, 0, 0, 0.2])) == (0, 0, 40, 56, True)
    tops = {stages.window(spec, 43, 56, [0, u, 0, 1]).top for u in np.linspace(0, 0.99999994, 97, dtype=np.float32)}
    assert tops == {0, 1, 2, 3}
    tops = {stages.window(spec, 37, 56, [0, u, 0, 1]).top for u in np.linspace(0, 0.99999994, 97, dtype=np.float32)}
    assert tops == {0, -1, -2, -3}
    zoom = make_spec((40, 56), crop="random", scale=(0.5, 2.0))
    assert stages.window(zoom, 500, 500, [0, 0, 0, 0]).height == 80  # zoom 0.5: twice the source pixels
    assert stages.window(zoom, 500, 500, [0.99999994, 0, 0, 0]).width == 28  # zoom ~2: half
