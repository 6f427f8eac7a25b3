"""TensorFlow's internals that daliloader relies on, all here, each where no public API does the job, and why.

``tests/test_tfprivate.py`` checks every one against the installed TensorFlow and fails naming it where a
release changed it; pyproject pins the TensorFlow these were checked with (its ``tf`` and ``tf-gpu``
extras). TensorFlow is imported inside the functions, so that importing this module costs nothing.

* A loader's dataset is a ``tf.data.Dataset`` whose Python side daliloader owns (its ``len()``, its
  iterator that names the files behind a failure, one pipeline for all epochs, ``fit(class_weight=...)``
  refused): tf.data has no public way to subclass a dataset around another one's graph, so the loaders'
  datasets subclass :func:`unary_dataset` and their iterators :func:`owned_iterator`, and hand tf.data the
  graph (:func:`variant`) of the dataset they present.
* An iterator made in Python for a dataset placed on a GPU is placed with it (:func:`placed_with`).
* Whether TensorFlow has started its devices (:func:`tensorflow_started`), which decides whether the
  defaults ``import daliloader`` sets can still apply; asked without starting them.
* Which ``map`` is the one with which Keras' ``fit`` applies ``class_weight``
  (:func:`is_keras_class_weight_map`): Keras has no public way to say it is about to weigh samples by
  class, and daliloader refuses it with where class weights go instead (their function's name, Keras'
  internal; ``tests/test_tf_dataset.py`` fits with ``class_weight`` and fails if Keras renamed it).
"""

from __future__ import annotations

import sys


def unary_dataset() -> type:
    """The base class of a dataset that presents another's elements unchanged (tf.data's own, internal)."""
    from tensorflow.python.data.ops import dataset_ops

    return dataset_ops.UnaryUnchangedStructureDataset


def owned_iterator() -> type:
    """The class of the iterator ``iter(dataset)`` returns in eager code (tf.data's own, internal)."""
    from tensorflow.python.data.ops import iterator_ops

    return iterator_ops.OwnedIterator


def variant(dataset):
    """The graph tensor (variant) of ``dataset``: what a subclass of :func:`unary_dataset` is made of, and
    where the dataset is placed (its ``.device``)."""
    return dataset._variant_tensor


def placed_with(dataset):
    """A context in which ops, an iterator among them, are placed on ``dataset``'s device."""
    from tensorflow.python.framework import ops

    return ops.colocate_with(variant(dataset))


def tensorflow_started() -> bool:
    """Whether TensorFlow is imported and has started its devices, found without starting them; where that
    cannot be told (a TensorFlow that changed this), True: the safe answer for the defaults that it decides."""
    if "tensorflow" not in sys.modules:
        return False
    try:
        from tensorflow.python.eager import context

        return bool(context.context()._initialized)
    except (ImportError, AttributeError, RuntimeError):
        return True


def is_keras_class_weight_map(map_func) -> bool:
    """Whether ``map_func`` is the function Keras' ``fit(class_weight=...)`` maps a dataset with."""
    return (getattr(map_func, "__name__", "") == "class_weights_map_fn"
            and getattr(map_func, "__module__", "").startswith("keras"))
