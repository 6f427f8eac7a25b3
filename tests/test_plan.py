"""daliloader/plan.py: the plan, one validated, frozen statement of a loader call, which every backend
builds from: its arguments and loader options checked, misspelt or impossible ones named, the backend chosen.
(test_smaller_argument_traps_say_what_is_wrong refuses, beside a plan's num_shards, two class tables too:
ClassMap.from_csv with a header and no class, and with a class named twice.)
"""

import dataclasses
import inspect
import re
import warnings

import numpy as np
import pytest
from conftest import batch_indices, dali_numpy, one_epoch

import daliloader as dl
from daliloader import augment


def test_a_plan_is_frozen_and_complete(index_data):
    plan = dl.make_plan(index_data, batch_size=3, image_size=(24, 32), crop="center", drop_remainder=False)
    assert (plan.batch_size, plan.steps, plan.outputs) == (3, 4, ("image", "labels", "weight"))
    assert plan.spec.image_size == (24, 32) and plan.spec.crop == "center"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.device_id = 1


@pytest.mark.parametrize("outputs", [["image", "index"], np.array(["image", "index"]), (o for o in ("image", "index")),
                                     (dl.plan.Output.IMAGE, "index")])
def test_outputs_are_taken_from_any_iterable_of_their_names(index_data, outputs):
    """``outputs=`` takes names or ``Output`` members from a list, a tuple, a numpy array, a generator (as
    ``tuple()`` took them before the names were an enum; a closing review found the array and the generator
    refused as one bad name); a lone name is one output, and anything else is refused as given."""
    plan = dl.make_plan(index_data, training=False, outputs=outputs)
    assert plan.outputs == (dl.plan.Output.IMAGE, dl.plan.Output.INDEX)
    assert dl.make_plan(index_data, training=False, outputs="index").outputs == (dl.plan.Output.INDEX,)
    for bad in (["image", "mask"], 3, [], {"image", "labels"}):
        with pytest.raises(dl.SpecError, match="(choose from|as a list or tuple of) image, labels, weight, index"):
            dl.make_plan(index_data, training=False, outputs=bad)


@pytest.mark.parametrize("call", ["make_plan", "tf_dataset", "keras_sequence", "dali_pipeline"])
def test_a_misspelt_keyword_is_named_with_the_options_that_exist(index_data, call):
    with pytest.raises(dl.SpecError, match=rf"{call}\(\) got an unexpected keyword argument 'image_szie' \(did you "
                                           r"mean 'image_size'\?\). Arguments: batch_size, image_size, crop, "
                                           r"label_mode, shuffle, seed; preprocessing options: scale, flip, rotate, "
                                           r"brightness, contrast, saturation, hue, cat_max_ratio, mean, std, dtype, "
                                           + ", ".join(augment.OPTIONS) + r"; loader options: training"):
        getattr(dl, call)(index_data, image_szie=(8, 8))
    # torchvision's, albumentations' and mmsegmentation's names for an option point at ours
    for theirs, ours in (("degrees", "rotate"), ("hue_shift_limit", "hue"), ("crop_size", "image_size")):
        with pytest.raises(dl.SpecError, match=rf"'{theirs}' \(did you mean '{ours}'\?\)"):
            getattr(dl, call)(index_data, **{theirs: 10})
    # a class count is the data's, given where the data is loaded
    with pytest.raises(dl.SpecError, match=r"'num_classes' \(did you mean 'classes'\? The class map belongs to the "
                                           r"data: SegmentationData.from_folder\(\.\.\., classes=N\)"):
        getattr(dl, call)(index_data, num_classes=3)
    # Keras' zoom_range=0.2 is a range about 1; a single number for scale is a fixed zoom
    with pytest.raises(dl.SpecError, match=r"'zoom_range' \(did you mean 'scale'\? Keras' zoom_range=z draws a zoom "
                                           r"in \[1 - z, 1 \+ z\], .* pass scale=\(1 / \(1 \+ z\), 1 / \(1 - z\)\)"):
        getattr(dl, call)(index_data, zoom_range=0.2)


@pytest.mark.parametrize("call", ["make_plan", "tf_dataset", "keras_sequence", "dali_pipeline"])
def test_shards_of_a_shuffled_dataset_need_a_seed(index_data, call):
    """Each worker drew its own seed, so on dali-cpu and opencv two shards overlapped and missed samples (an
    outside review found samples 2 and 4 twice, 1 and 5 missing, in one epoch of two shards): a seed is
    asked for on every backend. Unshuffled shards, and shards with a seed, are disjoint and accepted."""
    with pytest.raises(dl.SpecError, match=rf"{call}\(\) got num_shards=2 and no seed: each worker would draw its "
                                           r"own order .* Pass every worker the same seed"):
        getattr(dl, call)(index_data, batch_size=2, shard_id=1, num_shards=2)
    getattr(dl, call)(index_data, batch_size=2, shard_id=1, num_shards=2, seed=0)
    getattr(dl, call)(index_data, batch_size=2, shard_id=1, num_shards=2, training=False)


def test_seeded_shards_are_disjoint_and_cover_the_data_on_every_backend(index_data, backend):
    parts = []
    for shard in range(2):
        epoch = one_epoch(backend, index_data, batch_size=1, image_size=(24, 32), crop="center", seed=5,
                          shard_id=shard, num_shards=2)
        parts.append([i for batch in epoch for i in batch_indices(batch[0])])
    assert sorted(parts[0] + parts[1]) == list(range(10)), parts


def test_image_size_is_read_as_written(index_data):
    """A string was unpacked into two characters ("32" -> (3, 2)) and a numpy array was refused while numpy
    integers were taken: a string is refused as what it is, and an array of integers is taken."""
    with pytest.raises(dl.SpecError, match=r"image_size is an int or \(height, width\), got '32'"):
        dl.make_plan(index_data, image_size="32")
    assert dl.make_plan(index_data, image_size=np.array([16, 24])).spec.image_size == (16, 24)
    assert dl.make_plan(index_data, image_size=np.int64(16)).spec.image_size == (16, 16)
    with pytest.raises(dl.SpecError, match=r"image_size=\(16\.0, 24\): each side must be an integer"):
        dl.make_plan(index_data, image_size=(16.0, 24))


def test_keras_label_mode_categorical_is_onehot(index_data):
    """Keras' image_dataset_from_directory calls one-hot labels "categorical": the spec reads it as "onehot",
    so that nothing downstream sees another spelling."""
    plan = dl.make_plan(index_data, image_size=(8, 8), label_mode="categorical")
    assert plan.spec.label_mode == "onehot"
    assert plan.spec == dl.make_plan(index_data, image_size=(8, 8), label_mode="onehot").spec
    with pytest.raises(dl.SpecError, match="label_mode='sparse' is not supported; use 'onehot' or 'int'"):
        dl.make_plan(index_data, image_size=(8, 8), label_mode="sparse")


def test_hue_in_turns_warns(index_data):
    """hue is in degrees; a value within half a degree looks like torchvision's fraction of a turn."""
    for call in (dl.make_plan, dl.keras_sequence):  # through any depth of daliloader calls
        with pytest.warns(UserWarning, match=r"hue=0.1 is in degrees .* torchvision's hue=0.1 .* is hue=36") as seen:
            call(index_data, hue=0.1)
        assert seen[0].filename == __file__  # attributed to the caller's line, not to daliloader's


def test_torchvisions_area_share_as_scale_warns(index_data):
    """scale=(0.08, 1.0), torchvision's RandomResizedCrop default (a share of the area), was taken as a
    zoom of 0.08 to 1 without a word: samples up to 98% padding. It warns now; a zoom range does not."""
    with pytest.warns(UserWarning, match=r"scale=\(0.08, 1.0\) is torchvision's RandomResizedCrop default, .* "
                                         r"zoom factor .* 12.5 times the crop's side") as seen:
        dl.make_plan(index_data, image_size=(8, 8), scale=(0.08, 1.0))
    assert seen[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dl.make_plan(index_data, image_size=(8, 8), scale=(0.5, 2.0))


@pytest.mark.parametrize("given", [dict(batch_size=5), dict(batch_size=8), dict(label_mode="onehot"),
                                   dict(training=True), dict(dtype="float32"), dict(seed=3)])
def test_a_plan_fixes_its_arguments(index_data, given):
    """Every argument passed beside a plan is refused, also one equal to the loader's default (8, "onehot",
    training=True...), which the plan would otherwise override silently."""
    plan = dl.make_plan(index_data, batch_size=2, image_size=(24, 32), label_mode="int", dtype="float16",
                        training=False)
    name = next(iter(given))
    for loader in (dl.tf_dataset, dl.keras_sequence, dl.dali_pipeline):
        with pytest.raises(dl.SpecError, match=rf"\(plan, {name}=...\): the plan fixes these"):
            loader(plan, **given)
    assert dl.dali_pipeline(plan, backend="dali-cpu", shuffle=None)[1] == 5  # None: not given; 10 pairs by 2
    assert repr(inspect.signature(dl.tf_dataset).parameters["batch_size"].default) == "8"  # as help() shows it


@pytest.mark.parametrize("option", [dict(num_threads=3), dict(prefetch=5), dict(device_id=1)])
def test_the_dali_options_are_refused_where_no_dali_runs(index_data, option):
    """num_threads, prefetch and device_id would be ignored by tf.data and OpenCV: refused, naming them."""
    name = next(iter(option))
    with pytest.raises(dl.SpecError, match=rf"tf_dataset\(\) got {name}=, an option of the DALI backends, which "
                                           r"backend='tfdata' does not take: tf.data sizes its own"):
        dl.tf_dataset(index_data, image_size=(8, 8), backend="tfdata", **option)
    with pytest.raises(dl.SpecError, match=rf"keras_sequence\(\) got {name}=.*backend='opencv' does not take: the "
                                           "OpenCV loader runs on Keras' workers"):
        dl.keras_sequence(index_data, image_size=(8, 8), **option)
    dl.tf_dataset(index_data, image_size=(8, 8), backend="dali-cpu", **option if name != "device_id" else {})
    plan = dl.make_plan(index_data, image_size=(8, 8), **option)  # fixed by a plan: refused alike
    with pytest.raises(dl.SpecError, match=rf"tf_dataset\(\) got {name}=, an option of the DALI backends"):
        dl.tf_dataset(plan, backend="tfdata")
    with pytest.raises(dl.SpecError, match=rf"keras_sequence\(\) got {name}="):
        dl.keras_sequence(plan)
    dl.tf_dataset(index_data, image_size=(8, 8), backend="tfdata", num_threads=None)  # its default: not given


@pytest.mark.parametrize("value, name", [(0, "prefetch"), (-1, "device_id"), (0, "num_threads"), (True, "prefetch")])
def test_loader_options_are_validated(index_data, value, name):
    with pytest.raises(dl.SpecError, match=f"{name} must be an integer"):
        dl.make_plan(index_data, image_size=(8, 8), **{name: value})


def test_one_plan_gives_every_backend_the_same_samples(index_data):
    """One plan, three backends: the same sample order, batch by batch (the shared sampler)."""
    plan = dl.make_plan(index_data, batch_size=3, image_size=(24, 32), crop="center", label_mode="int", seed=4)
    pipe, steps = dl.dali_pipeline(plan, backend="dali-cpu")
    from_dali = [batch_indices(dali_numpy(pipe.run())[0]) for _ in range(steps)]
    sequence = dl.keras_sequence(plan) if _has_keras() else None
    if sequence is not None:
        assert [batch_indices(sequence[i][0]) for i in range(len(sequence))] == from_dali
    seen = np.concatenate(from_dali).tolist()
    assert len(set(seen)) == 9 and seen != sorted(seen)  # an epoch of distinct samples, shuffled


def _has_keras() -> bool:
    from daliloader.backends import installed

    return installed("keras")


def test_the_registry_names_every_backend_once():
    from daliloader import backends

    assert list(backends.BACKENDS) == ["dali-gpu", "dali-cpu", "tfdata", "opencv"]
    assert backends.names("tf.data") == ["auto", "dali-gpu", "dali-cpu", "tfdata"]
    assert backends.names("keras") == ["opencv"]
    with pytest.raises(dl.SpecError, match="backend='opencv' has no tf_dataset.*keras_sequence"):
        backends.BACKENDS["opencv"].build("tf.data", None)
    # a product's value is taken wherever a product is (the registry is imported by others)
    assert backends.BACKENDS["dali-cpu"].requirements("tf.data") == ("dali", "tensorflow", "dali-tf-plugin")
    assert backends.available("opencv", ["tf.data", "batches"]) == "batches"


def test_a_missing_package_is_named_with_its_own_install(monkeypatch):
    """Each missing need says how to get it: Keras for keras_sequence was told to install TensorFlow and
    DALI's TF plugin; DALI alone, its wheel."""
    from daliloader import backends
    from daliloader.backends import Need
    from daliloader.errors import MissingDependency

    gone = set()
    monkeypatch.setattr(backends, "installed", lambda module: module not in gone)
    gone.add("keras")
    with pytest.raises(MissingDependency) as e:
        backends.require(backends.BACKENDS["opencv"].requirements("keras"), "opencv")
    assert "needs Keras, not installed: `pip install keras`" in str(e.value) and "plugin" not in str(e.value)
    gone |= {"tensorflow", "nvidia.dali_tf_plugin"}
    with pytest.raises(MissingDependency, match=r"needs TensorFlow and DALI's TF plugin, not installed: `pip "
                                                  r"install tensorflow`; then `pip install --no-build-isolation"):
        backends.require(backends.BACKENDS["dali-cpu"].requirements("tf.data"), "dali-cpu")
    assert backends.missing(["dali", Need.KERAS]) == [Need.KERAS]


def test_auto_without_a_gpu_says_why_it_chose_dali_cpu(index_data, caplog, monkeypatch):
    """Without a GPU, auto takes dali-cpu and logs why, with what the measurements say of tfdata and how to
    compare on this machine; with rotation or colour it also names the faster keras_sequence."""
    import logging

    import daliloader.backends as registry

    monkeypatch.setattr(registry, "dali_gpu_count", lambda: 0)
    with caplog.at_level(logging.INFO, logger="daliloader"):
        pipe, _ = dl.dali_pipeline(index_data, batch_size=2, image_size=(16, 16))
        plain = caplog.text
        caplog.clear()
        dl.dali_pipeline(index_data, batch_size=2, image_size=(16, 16), rotate=10)
        turned = caplog.text
    assert pipe.backend == "dali-cpu"
    for text in (plain, turned):
        assert "backend='auto' chose dali-cpu" in text and "tfdata" in text and "daliloader bench" in text
    assert "keras_sequence" not in plain and "keras_sequence" in turned


@pytest.mark.parametrize("call", ["make_plan", "tf_dataset", "keras_sequence", "dali_pipeline", "distribute"])
def test_every_loader_shows_its_keyword_options(call):
    """help() and inspect list every option instead of **options (keras_sequence: without the DALI ones)."""
    import inspect
    import pydoc

    from daliloader.spec import OPTIONS

    params = inspect.signature(getattr(dl, call)).parameters
    assert set(OPTIONS) | {"training", "drop_remainder"} <= set(params)
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values()) or call == "make_plan"
    assert ("num_threads" in params) == (call != "keras_sequence")
    assert re.search(r"rotate(: '[^']*')? ?= ?None", pydoc.render_doc(getattr(dl, call)))
    assert call in dir(dl)


@pytest.mark.parametrize("option", ["validation_split", "subset"])
def test_keras_split_options_point_at_the_way_to_split(index_data, option):
    """Issue 27: tf_dataset(validation_split=0.2) listed the options, not the way to split."""
    with pytest.raises(dl.SpecError, match=rf"tf_dataset\(\) got {option}=.*train, val = data.split\(0.2, seed=0\)"):
        dl.tf_dataset(index_data, **{option: 0.2 if option == "validation_split" else "training"})


def test_num_threads_is_bounded_by_the_cores(index_data, monkeypatch):
    """Issue 27: 256 DALI threads segfaulted in some runs, 30000 aborted the process: refused, naming the limit."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert dl.make_plan(index_data, num_threads=8).num_threads == 8
    with pytest.raises(dl.SpecError, match=r"num_threads=256 is more than .*2 cores, and daliloader takes at most 8 "
                                           r"DALI CPU threads \(4 per core\)"):
        dl.dali_pipeline(index_data, num_threads=256, backend="dali-cpu")


def test_smaller_argument_traps_say_what_is_wrong(tmp_path, index_data):
    with pytest.raises(dl.SpecError, match="num_shards=64 is more than the 10 samples"):
        dl.make_plan(index_data, batch_size=2, num_shards=64)
    (tmp_path / "header.csv").write_text("name,r,g,b\n")
    with pytest.raises(dl.DataError, match=r"header\.csv: a header and no class"):
        dl.ClassMap.from_csv(tmp_path / "header.csv")
    (tmp_path / "twice.csv").write_text("name,r,g,b\nroad,1,2,3\nsky,4,5,6\nRoad,7,8,9\n")
    with pytest.raises(dl.DataError, match=r"twice\.csv:4: the class name 'Road' is already on line 2"):
        dl.ClassMap.from_csv(tmp_path / "twice.csv")
