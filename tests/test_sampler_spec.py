import numpy as np
import pytest

import daliloader as dl
from daliloader.errors import SpecError
from daliloader.sampler import Sampler


def _epoch(s: Sampler, e: int) -> np.ndarray:
    return np.concatenate([s.batch(e * s.steps + k) for k in range(s.steps)])


@pytest.mark.parametrize("n, b", [(10, 3), (12, 4), (7, 7)])
def test_training_epochs_never_repeat_and_reshuffle(n, b):
    s = Sampler(n, b, shuffle=True, seed=1)
    assert s.steps == n // b
    epochs = [_epoch(s, e) for e in range(6)]
    for order in epochs:
        assert len(set(order)) == len(order) == (n // b) * b
    assert len({tuple(o) for o in epochs}) > 1, "order must change between epochs"
    if n % b:
        assert len({frozenset(range(n)) - set(o) for o in epochs}) > 1, "dropped samples must change"


@pytest.mark.parametrize("n, b", [(10, 3), (12, 4), (5, 8)])
def test_evaluation_sees_every_sample_once(n, b):
    s = Sampler(n, b, shuffle=False, drop_remainder=False)
    order = _epoch(s, 0)
    assert sorted(order[order >= 0]) == list(range(n))
    assert (order[len(range(n)):] == -1).all()


def test_shards_are_disjoint_and_cover():
    shards = [Sampler(11, 2, seed=5, num_shards=3, shard_id=i, drop_remainder=False) for i in range(3)]
    assert len({s.steps for s in shards}) == 1
    parts = [set(_epoch(s, 2)) - {-1} for s in shards]
    assert set.union(*parts) == set(range(11)) and sum(map(len, parts)) == 11


def test_seed_reproducible():
    assert (_epoch(Sampler(20, 4, seed=3), 1) == _epoch(Sampler(20, 4, seed=3), 1)).all()


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
