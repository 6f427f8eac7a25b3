"""mmsegmentation's category-ratio crop (``cat_max_ratio``): the reference's rule, each framework's
chooser against it on the same draws, every backend end to end, the option's checks, and the DALI
operator's build (daliloader.backends.dali_native)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import PALETTE, one_epoch, write_pairs

import daliloader as dl
from daliloader import stages
from daliloader.classes import ClassMap
from daliloader.errors import MissingDependency, SpecError
from daliloader.spec import make_spec

SPEC = make_spec(64, cat_max_ratio=0.75)


def window(left: int, top: int = 0, size: int = 64) -> stages.Window:
    return stages.Window(top, left, size, size, False)


# ---------------------------------------------------------------- the reference's rule
def test_the_rule_counts_the_window_inside_the_image_without_the_ignore_index():
    labels = np.zeros((64, 200), np.uint8)
    labels[:, 100:] = 1
    labels[:, 180:] = 255
    counts = stages.class_counts(labels, window(80), 3)  # 20 columns of 0, 44 of 1
    assert counts.tolist() == [20 * 64, 44 * 64, 0]
    assert stages.class_counts(labels, window(170), 3).tolist() == [0, 10 * 64, 0]  # 255 is not counted
    overhanging = stages.class_counts(labels, stages.Window(-10, 90, 64, 64, False), 3)
    assert overhanging.tolist() == [10 * 54, 54 * 54, 0]  # only the part inside the image
    assert stages.balanced(np.array([20, 44, 0]), 0.75) and not stages.balanced(np.array([20, 44, 0]), 0.6)
    assert not stages.balanced(np.array([0, 64, 0]), 0.75), "one class is never balanced"
    assert not stages.balanced(np.array([16, 48]), 0.75), "a share equal to the ratio fails (strictly below)"
    assert not stages.balanced(np.zeros(3, np.int64), 0.75), "nothing labelled is never balanced"


def test_the_first_balanced_candidate_is_kept_and_the_last_when_none_is():
    u = np.zeros(stages.DRAWS, np.float32)
    fractions = [0.0, 0.1, 0.7, 0.75, 0.9] + [0.0] * 5 + [0.2]  # the window's own left, then the 10 redraws'
    u[stages.LEFT] = fractions[0]
    u[stages.FIRST_REDRAW + 1::2] = fractions[1:]
    wins = stages.candidates(SPEC, 64, 400, u)
    assert [int(w.left) for w in wins] == [0, 33, 235, 252, 303, 0, 0, 0, 0, 0, 67]  # uniform in 0..336
    # all of the same size and flip (u[FLIP] = 0 < 0.5: flipped)
    assert {(int(w.top), int(w.height), int(w.width), bool(w.flip)) for w in wins} == {(0, 64, 64, True)}

    def chosen(first_column_of_class_1: int) -> int:
        labels = np.zeros((64, 400), np.uint8)
        labels[:, first_column_of_class_1:] = 1
        return stages.choose_window(SPEC, labels, 2, u).left

    assert chosen(260) == 235  # 25 of class 0, 39 of class 1: 0.61
    assert chosen(290) == 252  # 235 holds 55 of 0 and 9 of 1 (0.86); 252, 38 and 26 (0.59)
    assert chosen(300) == 67, "252 holds 48 and 16, exactly 0.75: none passes, the last is kept unchecked"
    assert chosen(400) == 67, "one class everywhere: the last"


# ---------------------------------------------------------------- each framework's chooser, on the same draws
def random_masks(dtype=np.uint8, n: int = 40, num_classes: int = 3):
    """Masks where a window is balanced by chance: a band of one class, a block of another, the ignore
    index on top; and their draws."""
    rng = np.random.default_rng(1)
    masks, draws = [], []
    ignore = 255 if dtype == np.uint8 else 1000
    for _ in range(n):
        lab = np.zeros((100, 200), dtype)
        lab[:, rng.integers(20, 190):] = 1
        lab[rng.integers(0, 100):, :rng.integers(0, 200)] = num_classes - 1
        lab[:3] = ignore
        masks.append(lab)
        draws.append(rng.random(stages.DRAWS).astype(np.float32))
    return masks, draws


def chosen_indices(spec, masks, draws, num_classes, got) -> list[int]:
    """Check ``got`` (one (top, left) per mask) against the reference; return which candidate each is."""
    picked = []
    for lab, u, (top, left) in zip(masks, draws, got):
        want = stages.choose_window(spec, lab, num_classes, u)
        assert (int(top), int(left)) == (want.top, want.left)
        lefts = [(int(w.top), int(w.left)) for w in stages.candidates(spec, *lab.shape, u)]
        picked.append(lefts.index((want.top, want.left)))
    return picked


CHOOSERS = {"plain": dict(cat_max_ratio=0.75), "zoom": dict(cat_max_ratio=0.6, scale=(0.5, 2.0)),
            "16-bit": dict(cat_max_ratio=0.75)}


@pytest.mark.parametrize("name", CHOOSERS)
def test_dalis_operator_chooses_the_references_window(name, tmp_path, monkeypatch):
    from nvidia.dali import fn, pipeline_def, types

    from daliloader.backends.dali_graph import choose_window

    spec = make_spec(64, **CHOOSERS[name])
    wide = name == "16-bit"
    classes = ClassMap.from_ids(300 if wide else 3)
    masks, draws = random_masks(np.uint16 if wide else np.uint8, num_classes=300 if wide else 3)

    @pipeline_def(batch_size=len(masks), num_threads=2, device_id=None)
    def pipe():
        labels = fn.external_source(source=[[m[..., None] for m in masks]], cycle=True, batch=True, layout="HWC")
        u = fn.external_source(source=[draws], cycle=True, batch=True)
        start, _, _ = choose_window(labels.shape(dtype=types.INT32)[0:2], spec, u, labels, classes)
        return start

    p = pipe()
    p.build()
    (out,) = p.run()
    picked = chosen_indices(spec, masks, draws, classes.num_classes, [np.array(out.at(i)) for i in range(len(masks))])
    assert {0, stages.REDRAWS} <= set(picked) and len(set(picked)) > 3, picked  # the draws reach every branch


@pytest.mark.parametrize("name", CHOOSERS)
def test_tensorflows_chooser_is_the_references(name):
    tf = pytest.importorskip("tensorflow")
    from daliloader.backends import tfdata

    spec = make_spec(64, **CHOOSERS[name])
    wide = name == "16-bit"
    classes = ClassMap.from_ids(300 if wide else 3)
    masks, draws = random_masks(np.uint16 if wide else np.uint8, num_classes=300 if wide else 3)
    lut = tf.constant(classes.lookup_table)
    got = [tfdata.choose_window(spec, tf.constant(lab.shape[0]), tf.constant(lab.shape[1]), tf.constant(u),
                                tf.constant(lab[..., None].astype(np.int32)), classes, lut)
           for lab, u in zip(masks, draws)]
    picked = chosen_indices(spec, masks, draws, classes.num_classes, [(w.top, w.left) for w in got])
    assert {0, stages.REDRAWS} <= set(picked), picked


# ---------------------------------------------------------------- every backend, end to end
@pytest.fixture(scope="module")
def banded(tmp_path_factory) -> dl.SegmentationData:
    """64 x 160 pictures that are their own masks: class 0, and class 1 in the columns from 100 on. A 64 x 64
    window is balanced at 0.9 for lefts 43..93 (about half of them)."""
    lab = np.zeros((64, 160), np.int64)
    lab[:, 100:] = 1
    lab[::7, ::9] = 2  # a few pixels of a third class: colours that must stay with their labels
    pictures = [PALETTE[lab]] * 12
    return write_pairs(tmp_path_factory.mktemp("banded"), pictures, pictures)


def test_every_backend_keeps_balanced_windows_and_image_and_mask_together(banded, backend):
    """With cat_max_ratio=0.9 nearly every crop holds both big classes with neither above 90% (about half
    of them without); the colours mapped from each image are its labels (the window chosen on the mask
    is the one the image is cut with, flips included)."""
    shares = {}
    for ratio in (None, 0.9):
        batches = one_epoch(backend, banded, tf=backend.startswith("dali"), batch_size=4, image_size=(64, 64),
                            label_mode="int", flip=0.5, seed=11, cat_max_ratio=ratio)
        balanced = []
        for x, y in batches:
            for image, labels in zip(x, y):
                np.testing.assert_array_equal(banded.classes.map_mask(np.rint(image * 255).astype(np.uint8)), labels)
                counts = np.bincount(labels.ravel(), minlength=32)[:32]
                balanced.append(stages.balanced(counts, 0.9))
        shares[ratio] = np.mean(balanced)
    assert shares[0.9] >= 0.9 and shares[None] < 0.8, shares


# ---------------------------------------------------------------- the option
@pytest.mark.parametrize("options, message", [
    (dict(cat_max_ratio=0.0), "a fraction in (0, 1]"),
    (dict(cat_max_ratio=1.5), "a fraction in (0, 1]"),
    (dict(cat_max_ratio="0.75"), "a fraction in (0, 1]"),
    (dict(cat_max_ratio=True), "a fraction in (0, 1]"),
    (dict(cat_max_ratio=0.75, crop="center"), "crop='center' has one window"),
])
def test_the_option_is_checked(options, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("]", r"\]")):
        make_spec(64, **options)


def test_the_option_is_off_by_default_and_at_one_and_named_as_mmsegmentation_does(synth_data):
    assert make_spec(64).cat_max_ratio == make_spec(64, cat_max_ratio=1).cat_max_ratio == 1.0
    assert not make_spec(64, cat_max_ratio=1.0).chooses_window and SPEC.chooses_window
    assert "cat_max_ratio" in SPEC.drawn() and "cat_max_ratio" not in make_spec(64).drawn()
    # off, a sample takes the draws it took before the option existed: a seed gives what it gave
    assert stages.draw_count(make_spec(64)) == stages.FIRST_REDRAW and stages.draw_count(SPEC) == stages.DRAWS
    for image_size in (32, None):  # evaluation has no random crop: the option is refused by its name
        with pytest.raises(SpecError, match=r"make_plan\(training=False\) draws nothing at random, but got "
                                            r"cat_max_ratio: leave it out for evaluation, or pass training=True"):
            dl.make_plan(synth_data, image_size=image_size, training=False, cat_max_ratio=0.75)
    with pytest.raises(SpecError, match="but got scale, cat_max_ratio: leave them out"):
        dl.make_plan(synth_data, image_size=32, training=False, scale=(0.5, 2), cat_max_ratio=0.75)
    dl.make_plan(synth_data, image_size=32, training=False, cat_max_ratio=1.0)  # off: no draw, nothing refused


# ---------------------------------------------------------------- the DALI operator's build
def test_a_missing_or_failing_compiler_is_named_with_the_way_out(tmp_path, monkeypatch):
    from daliloader.backends import dali_native

    monkeypatch.setenv("CXX", "no-such-compiler-here")
    with pytest.raises(MissingDependency, match="no C.. compiler 'no-such-compiler-here'.*backend='tfdata'"):
        dali_native.compile_library(tmp_path, tmp_path / "lib.log")
    monkeypatch.setenv("CXX", "false --with-an-argument")  # a compiler that fails: its output kept
    with pytest.raises(MissingDependency, match=r"false could not compile .* \(its output: .*lib\.log\)"):
        dali_native.compile_library(tmp_path, tmp_path / "lib.log")
    assert (tmp_path / "lib.log").read_text().startswith("false --with-an-argument -std=c++20")


def test_a_failed_builds_output_is_a_cache_entry(tmp_path, monkeypatch):
    """The output of a build that failed is kept where `daliloader cache` lists and cleans it."""
    from daliloader import cache
    from daliloader.backends import dali_native

    monkeypatch.setenv("DALILOADER_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(MissingDependency, match=r"dali-ops-\w+-failed/build\.log"):
        dali_native.load_operators.__wrapped__()  # (the process's own library may be loaded already)
    assert [e.path.name for e in cache.entries()] == [dali_native.library_folder().name + "-failed"]
    cache.clean()
    assert not list(tmp_path.glob("dali-ops-*"))


def test_a_library_in_the_cache_that_does_not_load_is_named_with_the_way_out(tmp_path):
    """A library DALI cannot load (a cache shared by machines whose C++ runtimes differ): named, with the
    command that removes it. In a process of its own: a loaded operator stays loaded."""
    script = """
import pathlib, sys
from daliloader.backends import dali_native
from daliloader.errors import MissingDependency
folder = dali_native.library_folder()
folder.mkdir(parents=True)
(folder / dali_native.LIBRARY).write_bytes(b"not a library")
try:
    dali_native.load_operators()
except MissingDependency as e:
    print(e)
"""
    env = {**os.environ, "DALILOADER_CACHE": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert "DALI cannot load daliloader's operator" in done.stdout and "daliloader cache --clean" in done.stdout, (
        done.stdout + done.stderr)


def test_the_operator_is_built_once_into_the_cache_and_listed_there():
    from daliloader import cache
    from daliloader.backends import dali_native

    dali_native.load_operators()
    folder = dali_native.library_folder()
    assert (folder / dali_native.LIBRARY).is_file()
    assert any(e.path == folder and e.kind == "DALI operators (compiled)" for e in cache.entries())
