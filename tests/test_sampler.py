"""daliloader/sampler.py: the stream order. Training epochs never repeat a sample and reshuffle;
evaluation sees every sample once (padding marked -1); shards are disjoint and cover the data; a seed
gives the same order."""

import numpy as np
import pytest

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


def test_no_lock_is_held_while_an_epoch_order_is_computed(monkeypatch):
    """Sources call in from DALI and tf.data threads; a lock held while an order is computed can meet a
    garbage collection on such a thread that waits, through an iterator's destructor, for that lock.
    Another thread's order must come while one is computed; each epoch keeps one order."""
    import threading

    s = Sampler(10, 2, shuffle=True, seed=1)
    compute, blocked, orders, inside = s._compute_order, [], {}, []

    def computed(epoch):
        inside.append(epoch)
        if len(inside) == 1:  # inside the first computation: another thread asks for another epoch
            other = threading.Thread(target=lambda: orders.setdefault(5, s.epoch_order(5)), daemon=True)
            other.start()
            other.join(timeout=10)
            blocked.append(other.is_alive())
        return compute(epoch)

    monkeypatch.setattr(s, "_compute_order", computed)
    first = s.epoch_order(0)
    assert blocked == [False] and s.epoch_order(0) is first and s.epoch_order(5) is orders[5]
    assert (first == Sampler(10, 2, shuffle=True, seed=1).epoch_order(0)).all()
