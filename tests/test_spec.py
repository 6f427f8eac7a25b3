"""daliloader/spec.py: the arguments checked where they are given. A bad preprocessing option, and a
bad integer argument of a loader or a job (the one table, spec.COUNTS), is a SpecError that names it."""

import numpy as np
import pytest

import daliloader as dl
from daliloader import augment, spec
from daliloader.errors import SpecError


@pytest.mark.parametrize("kwargs, match", [
    (dict(crop="middle"), "crop='middle' is not supported"),
    (dict(label_mode="one_hot"), "label_mode='one_hot' is not supported"),
    (dict(image_size=(0, 10)), "image_size"),
    (dict(image_size="big"), "image_size"),
    (dict(scale=(2.0, 1.0)), "scale"),
    (dict(crop="center", scale=(0.5, 2.0)), "needs crop='random'"),
    (dict(flip=1.5), "flip is a probability"),
    (dict(dtype="int8"), "dtype='int8'"),
    (dict(std=0), "std must be positive"),
    (dict(mean=(0.1, 0.2)), "mean must be one number or three"),
])
def test_bad_spec_arguments(kwargs, match):
    args = dict(image_size=(8, 8)) | kwargs
    with pytest.raises(SpecError, match=match):
        dl.make_spec(**args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size must be a positive integer"),
    (dict(batch_size=2.5), "batch_size must be a positive integer"),
    (dict(backend="cuda"), "backend='cuda' is not known"),
    (dict(batch_size=64), "larger than the 10 samples"),
    (dict(seed=-3), "seed must be"),
    (dict(label_mode="onehott"), "label_mode='onehott'"),
])
def test_bad_loader_arguments_fail_at_call_time(index_data, kwargs, match):
    args = dict(batch_size=2, image_size=(8, 8), backend="dali-cpu") | kwargs
    with pytest.raises(SpecError, match=match):
        dl.dali_pipeline(index_data, **args)


def test_a_batch_larger_than_a_shard_pickles_back_whole(index_data):
    """Raised in a worker process and pickled back, an exception is rebuilt from its args: BatchTooLarge,
    which takes its figures, failed to unpickle (a TypeError in place of the refusal)."""
    import pickle

    with pytest.raises(SpecError) as raised:
        dl.make_plan(index_data, batch_size=64, image_size=(8, 8))
    again = pickle.loads(pickle.dumps(raised.value))
    assert type(again) is type(raised.value) and str(again) == str(raised.value) and again.per_shard == 10


@pytest.mark.parametrize("option", ["crop", "image_size", "batch_size", "label_mode", "dtype", "shuffle", "mean",
                                    *spec.PROLOGUE, *augment.OPTIONS])
def test_a_refused_option_is_named_by_its_error(index_data, option):
    """Every refusal of one option's value is an OptionError carrying the option's name (the command line
    says it of the flag from that, not from the message's words), and pickles back whole."""
    import pickle

    from daliloader.errors import OptionError

    bad = {"image_size": -1, "batch_size": 0, "shuffle": "False", "crop": "middle"}
    with pytest.raises(OptionError) as raised:
        dl.make_plan(index_data, **{"batch_size": 2, "image_size": (8, 8), option: bad.get(option, "nonsense")})
    assert raised.value.option == option and str(raised.value).startswith(option), raised.value
    again = pickle.loads(pickle.dumps(raised.value))
    assert type(again) is OptionError and again.option == option and str(again) == str(raised.value)


def test_data_must_be_segmentation_data():
    with pytest.raises(dl.DataError, match="SegmentationData"):
        dl.dali_pipeline(["a.png"], image_size=(8, 8))


def test_numpy_integers_are_counts_and_reach_the_plan_as_ints(index_data):
    """np.unique, np.arange and friends give numpy integers: they count, as Python's do, and the plan holds
    Python ints (DALI's pipeline takes no numpy integer)."""
    plan = dl.make_plan(index_data, batch_size=np.int64(2), image_size=(8, 8), seed=np.int32(3),
                        num_threads=np.int64(2), prefetch=np.int64(2), device_id=np.int64(0))
    assert all(type(v) is int for v in (plan.batch_size, plan.sampler.seed, plan.num_threads, plan.prefetch,
                                        plan.device_id))
    pipe, _ = dl.dali_pipeline(plan, backend="dali-cpu")
    images, labels = pipe.run()
    assert len(images) == len(labels) == 2


@pytest.mark.parametrize("job", ["check", "class_frequencies", "prepare", "verify"])
@pytest.mark.parametrize("workers", [0, -1, 2.5])
def test_the_jobs_refuse_workers_that_are_no_count(index_data, tmp_path, job, workers):
    run = {"check": lambda: dl.check(index_data, workers=workers),
           "class_frequencies": lambda: dl.class_frequencies(index_data, workers=workers, progress=False),
           "prepare": lambda: dl.prepare(index_data, tmp_path / "copy", workers=workers, progress=False),
           "verify": lambda: dl.verify(tmp_path / "copy", workers=workers)}[job]
    with pytest.raises(SpecError, match=f"workers must be a positive integer, got {workers}"):
        run()
    assert not (tmp_path / "copy").exists()


# ---------------------------------------------------------------- the prologue's options, as declared (spec.PROLOGUE)
def test_every_prologue_option_is_a_field_a_keyword_and_off_when_left_out():
    """Each declared prologue option is a field of Preprocess, make_spec's keyword and every loader's (None by
    default, its annotation), and what None gives draws nothing, but flip with random crops."""
    import dataclasses
    import inspect

    from daliloader.spec import OPTIONS, PROLOGUE

    fields = {f.name for f in dataclasses.fields(dl.Preprocess)}
    loaders = (dl.make_spec, dl.make_plan, dl.tf_dataset, dl.keras_sequence, dl.dali_pipeline, dl.distribute)
    center, random = dl.make_spec((8, 8), crop="center"), dl.make_spec((8, 8), crop="random")
    for name, option in PROLOGUE.items():
        assert name in fields and name in OPTIONS, name
        for fn in loaders:
            p = inspect.signature(fn).parameters[name]
            assert p.default is None and str(p.annotation) == f"{option.annotation} | None", (fn.__name__, name)
        assert getattr(center, name) == option.off, name
        assert (name in random.drawn()) == (name == "flip"), name
    assert list(OPTIONS[:len(PROLOGUE)]) == list(PROLOGUE)


def test_preview_takes_every_prologue_option_as_a_flag():
    """Each prologue option is a flag of preview of its name, read into the value the loaders take: one
    number, and for a range (a metavar ending in MIN,MAX) a pair too, as one word or two."""
    from daliloader.cli import build_parser, parse_args, preview_recipe
    from daliloader.spec import PROLOGUE, RANGE_METAVAR

    def recipe(flags: list[str]) -> dict:
        return preview_recipe(parse_args(build_parser(), ["preview", "-o", "x.png", *flags]))

    flags = [word for name in PROLOGUE for word in ("--" + name.replace("_", "-"), "0.25")]
    assert {name: recipe(flags)[name] for name in PROLOGUE} == dict.fromkeys(PROLOGUE, 0.25)
    ranges = [name for name, option in PROLOGUE.items() if option.metavar.endswith(RANGE_METAVAR)]
    assert ranges == ["scale", "rotate", "brightness", "contrast", "saturation", "hue"]
    for values in (["0.25,0.75"], ["0.25", "0.75"]):
        flags = [word for name in ranges for word in ("--" + name.replace("_", "-"), *values)]
        assert {name: recipe(flags)[name] for name in ranges} == dict.fromkeys(ranges, (0.25, 0.75))


def test_drawn_options_are_those_that_evaluation_refuses():
    """spec.drawn_options names the options given that draw (preview --eval refuses them by their flags), as
    the loaders with training=False refuse them by their keywords."""
    from daliloader.spec import drawn_options

    given = dict(scale=(0.5, 2), flip=0, rotate=10, hue=None, blur=(0.5, 1), erase=0, erase_value=3, crop="center")
    assert drawn_options(given) == ["scale", "rotate", "blur"]
    assert drawn_options(dict(flip=0.0, rotate=0, erase=0)) == []
    for name in ("scale", "rotate", "blur"):
        with pytest.raises(dl.SpecError, match="training=False"):
            dl.make_plan(dl.synthetic.default_dataset(4), image_size=16, training=False, **{name: given[name]})


def test_previews_default_zoom_is_for_random_crops_only():
    """preview zooms random crops by default; another crop gets no zoom it would refuse."""
    from daliloader.cli import PREVIEW_DEFAULTS, build_parser, preview_recipe

    def recipe(*flags):
        return preview_recipe(build_parser().parse_args(["preview", "-o", "x.png", *flags]))

    assert recipe()["scale"] == PREVIEW_DEFAULTS["scale"] and recipe("--crop", "random")["scale"] == (0.5, 2.0)
    assert "scale" not in recipe("--crop", "center") and "scale" not in recipe("--crop", "fit")
    dl.make_spec(64, **{k: v for k, v in recipe("--crop", "center").items() if k in ("crop", "scale")})


def test_the_docs_options_table_holds_every_declared_option():
    """docs/options.md holds the rows that spec.options_table() writes (python tests/test_spec.py): one per
    prologue option, then the declared stages' (augment.options_table())."""
    from pathlib import Path

    from daliloader import augment, spec

    rows = spec.options_table()
    assert rows in (Path(__file__).resolve().parent.parent / "docs" / "options.md").read_text()
    named = [row.split("`")[1] for row in rows.splitlines()]
    assert [name.split("=")[0] for name in named] == list(spec.PROLOGUE) + list(augment.OPTIONS)


@pytest.mark.parametrize("theirs, ours", [("zoom_range", "scale"), ("sat_shift_limit", "saturation"),
                                          ("horizontal_flip", "flip")])
def test_foreign_names_of_the_prologue_point_at_it(index_data, theirs, ours):
    with pytest.raises(SpecError, match=rf"'{theirs}' \(did you mean '{ours}'\?[ )]"):  # (zoom_range: and how)
        dl.make_plan(index_data, **{theirs: 0.5})


if __name__ == "__main__":  # python tests/test_spec.py: the rows of docs/options.md's table the declarations make
    from daliloader.spec import options_table

    print(options_table())


def test_a_zoom_whose_window_holds_no_pixel_is_refused():
    """At zoom 10 a 4-pixel side's window is 4 / 10 pixels, which rounds to none: every backend's resize
    failed on it, with a message that cleared the data. Zoom 8 (twice the side) is the largest taken."""
    with pytest.raises(SpecError, match=r"scale=\(10.0, 10.0\): at zoom 10 .* rounds to none; keep the largest zoom "
                                        r"at most 8"):
        dl.make_spec((4, 64), scale=(10, 10))
    assert dl.make_spec((4, 64), scale=(1, 8)).scale == (1.0, 8.0)
