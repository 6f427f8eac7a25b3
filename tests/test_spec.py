"""daliloader/spec.py: the arguments checked where they are given. A bad preprocessing option, and a
bad integer argument of a loader or a job (the one table, spec.COUNTS), is a SpecError that names it."""

import numpy as np
import pytest

import daliloader as dl
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
