"""The TensorFlow internals daliloader relies on (daliloader/tfprivate.py), each checked against the
installed TensorFlow: a release that changed one fails here, naming it, before it fails inside a loader."""

from __future__ import annotations

import pytest

from daliloader import tfprivate

tf = pytest.importorskip("tensorflow")  # make test requires it (tests/conftest.py): skipped only by hand


def changed(what: str) -> str:
    return (f"TensorFlow {tf.__version__} changed {what}, which daliloader/tfprivate.py relies on: update "
            "tfprivate.py, or install the TensorFlow that pyproject.toml pins")


def test_a_dataset_presenting_another_is_built_on_tf_datas_own_base_class():
    numbers = tf.data.Dataset.range(5)

    class Presented(tfprivate.unary_dataset()):
        def __init__(self, dataset):
            super().__init__(dataset, tfprivate.variant(dataset))

    try:
        presented = Presented(numbers)
        assert [int(x) for x in presented] == [0, 1, 2, 3, 4]
        assert [int(x) for x in presented.map(lambda x: x * 2)] == [0, 2, 4, 6, 8]
    except (TypeError, AttributeError) as e:
        pytest.fail(changed(f"UnaryUnchangedStructureDataset(input_dataset, variant_tensor) ({e})"))


def test_the_eager_iterator_class_takes_a_dataset_and_names_its_device():
    numbers = tf.data.Dataset.range(3)
    try:
        iterator = tfprivate.owned_iterator()(dataset=numbers)
        assert [int(x) for x in iterator] == [0, 1, 2]
        assert tfprivate.variant(numbers).dtype == tf.variant, changed("a dataset's _variant_tensor")
        assert "CPU" in tfprivate.variant(numbers).device, changed("the device of a dataset's _variant_tensor")
        with tfprivate.placed_with(numbers):
            assert [int(x) for x in tfprivate.owned_iterator()(dataset=numbers)] == [0, 1, 2]
    except (TypeError, AttributeError) as e:
        pytest.fail(changed(f"OwnedIterator(dataset=...), _variant_tensor or ops.colocate_with ({e})"))


STARTED = """
import tensorflow as tf
from daliloader import tfprivate
print(tfprivate.tensorflow_started())
tf.constant(1) + 1
print(tfprivate.tensorflow_started())
"""


def test_whether_tensorflow_started_is_told_without_starting_it():
    import subprocess
    import sys

    from tensorflow.python.eager import context

    assert hasattr(context.context(), "_initialized"), changed("the eager context's _initialized")
    done = subprocess.run([sys.executable, "-c", STARTED], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["False", "True"], done.stdout + done.stderr
