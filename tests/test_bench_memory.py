"""Each loader's peak memory (daliloader.bench.memory), measured in a process of its own."""

import sys

import pytest

from daliloader.bench import memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def job(data, name: str) -> memory.Job:
    return memory.Job(data=data, name=name, batch_size=2, image_size=(32, 32), label_mode="onehot", workers=1)


def test_a_loaders_peak_is_what_it_added_to_its_process(synth_data):
    """The child's baseline holds TensorFlow, DALI and the dataset: what a loader adds is megabytes, not
    the hundreds those imports take."""
    mb = memory.peak_mb(job(synth_data, "tfdata"), timeout=300)
    assert 0 < mb < 300


def test_a_loader_that_fails_in_its_process_is_named(synth_data):
    with pytest.raises(RuntimeError, match="measuring the memory of no-such-loader failed"):
        memory.peak_mb(job(synth_data, "no-such-loader"), timeout=300)
