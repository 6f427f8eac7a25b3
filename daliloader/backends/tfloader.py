"""What every ``tf.data.Dataset`` a loader hands out has in common, whatever the backend behind it.

* Iterated in Python (``for batch in ds``, ``next(iter(ds))``), a failure of the loader is a
  :class:`~daliloader.errors.LoadError` naming the files: TensorFlow wraps an error raised inside a
  ``tf.data`` graph (a pair refused by the vetting, a decoder's failure) into an ``OpError``, which
  :meth:`daliloader.guard.PairGuard.explain` turns back into the LoadError it was, or into one naming
  the bad pair among those read last. Inside a compiled function (Keras' ``fit``), TensorFlow raises
  before daliloader regains control: there the error stays TensorFlow's, with the same message.
* ``model.fit(ds, class_weight=...)`` is refused at once, saying where class weights go: Keras turns
  ``class_weight`` into per-sample weights by mapping the dataset, which cannot weigh the pixels of a
  segmentation batch and fails later with a shape error deep in the loss.
* On a machine without NVIDIA's driver, TensorFlow's error line that it found none ("failed call to
  cuInit"), written the first time anything asks for its devices, does not reach the user: importing
  this module asks first, with that line filtered
  (:func:`~daliloader.environment.find_devices_quietly`), as does TensorFlow's import where daliloader
  came first.
"""

from __future__ import annotations

import atexit
import gc
import weakref

import tensorflow as tf

from ..environment import find_devices_quietly
from ..errors import SpecError
from ..guard import PairGuard
from ..tfprivate import is_keras_class_weight_map, owned_iterator, placed_with, unary_dataset, variant

find_devices_quietly(tf)  # TensorFlow imported before daliloader (see the module)


class ExplainingIterator(owned_iterator()):
    """An iterator whose failures in eager code are LoadErrors naming the files (see the module)."""

    def __init__(self, dataset: tf.data.Dataset, guard: PairGuard | None):
        super().__init__(dataset=dataset)
        self._guard = guard

    def __next__(self):
        try:
            return super().__next__()
        except tf.errors.OpError as e:
            if isinstance(e, tf.errors.OutOfRangeError) or self._guard is None:
                raise
            raise self._guard.explain(e) from e


class EpochIterator(ExplainingIterator):
    """An iterator over an endless stream that stops (in eager loops) after one epoch of batches.

    Graph code (Keras' compiled train step) reads the underlying iterator directly and counts steps
    itself; the count here makes ``for batch in dataset:`` end after one epoch.
    """

    def __init__(self, stream: tf.data.Dataset, steps: int, guard: PairGuard | None = None):
        super().__init__(stream, guard)
        self._steps = steps
        self._left = steps

    def get_next(self):
        """What tf.distribute calls (eager loops over a distributed dataset); ends the epoch the same way."""
        if tf.executing_eagerly() and not tf.inside_function():
            if self._left <= 0:
                raise tf.errors.OutOfRangeError(None, None, "end of the epoch")
            self._left -= 1
        return super().get_next()

    def start_epoch(self) -> EpochIterator:
        self._left = self._steps
        return self

    @property
    def part_read(self) -> bool:
        """Whether Python read the epoch part-way (graph code, which reads whole epochs, is not counted)."""
        return 0 < self._left < self._steps

    def drain(self) -> None:
        """Read the rest of the epoch, unused."""
        while self._left > 0:
            next(self)

    def __next__(self):
        if self._left <= 0:
            raise StopIteration
        self._left -= 1
        return super().__next__()


class LoaderDataset(unary_dataset()):
    """A loader's dataset: ``dataset`` (its batches), or ``graph`` (a dataset's variant tensor) built on it,
    with the ``guard`` that names the files of a failure (see the module)."""

    def __init__(self, dataset: tf.data.Dataset, guard: PairGuard | None, graph=None):
        self._guard = guard
        super().__init__(dataset, variant(dataset) if graph is None else graph)

    def __iter__(self):
        if not tf.executing_eagerly() or tf.inside_function():
            return super().__iter__()
        return ExplainingIterator(self, self._guard)

    def map(self, map_func, *args, **kwargs):
        refuse_class_weight(map_func)
        return super().map(map_func, *args, **kwargs)


#: The datasets of this process whose persistent iterators may hold a running stream (see :func:`_let_go`).
_OPEN: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _let_go() -> None:
    """Let go of every daliloader iterator before the interpreter shuts down. Its stream still alive when
    the process exits: a DALI pipeline ends the process with "terminate called without an active
    exception" (SIGABRT, exit 134) instead of the script's own exit status (a training script that stops
    on a LoadError while its dataset is a global); tf.data's parallel map, with the vetting's
    ``numpy_function`` in flight, never returns to the interpreter's finalisation, which waits for it,
    and a script that read a tfdata training stream hung at its end."""
    for ds in list(_OPEN):
        ds._iterator = None
    gc.collect()


class EpochDataset(LoaderDataset):
    """An endless stream presented as epochs of ``steps`` batches: iterated itself (``for batch in ds``,
    ``model.fit(ds)``), it hands out one persistent iterator, and each ``iter()`` starts the next epoch of
    the same stream, which never drains and refills between epochs; with ``restart`` (evaluation), each
    ``iter()`` starts at the first batch, on a new iterator. An epoch that Python read part-way (a peek
    with ``next(iter(ds))``, a loop left early, the batch Keras' ``fit`` reads to build a model compiled
    under a strategy) ends there: the next ``iter()`` starts a fresh epoch on a new iterator
    (``_end_part_read``), so that no epoch straddles two and holds a sample twice. ``graph`` is the
    dataset a tf.data transformation chained onto it reads: one epoch. ``len()``/``cardinality()`` give
    ``steps``, from Python (TF's cardinality op has no GPU kernel).

    An evaluation iterator ends after ``steps`` batches in graph code too (``take``): Keras compiled with
    ``steps_per_execution=k`` reads ``k`` batches per call, ending on the first that is missing, and read
    the next epoch's first batches into an evaluation of the endless stream (samples counted twice). Where
    the batches arrive on the GPU (``take`` has no GPU kernel: :attr:`ends_in_graph` False) the stream
    itself must end there (the DALI backends feed an evaluation pipeline one epoch's inputs)."""

    #: Whether an evaluation iterator's stream ends after ``steps`` batches in graph code too.
    ends_in_graph = True

    def __init__(self, stream: tf.data.Dataset, steps: int, guard: PairGuard | None, graph,
                 restart: bool = False):
        self._stream = stream
        self._steps = steps
        self._restart = restart
        self._iterator: EpochIterator | None = None
        _OPEN.add(self)
        super().__init__(stream, guard, graph)

    def cardinality(self):
        return tf.constant(self._steps, dtype=tf.int64)

    def _starting(self) -> None:
        """Called before the dataset itself starts a new iterator over its stream (a backend's hook)."""

    def _end_part_read(self) -> None:
        """End the epoch Python read part-way: the next iterator starts a fresh one (a backend whose new
        iterator would replay the stream drains the epoch instead)."""
        self._iterator = None

    def __iter__(self):
        if not tf.executing_eagerly() or tf.inside_function():
            return super().__iter__()
        if self._iterator is not None and not self._restart and self._iterator.part_read:
            self._end_part_read()
        if self._iterator is None or self._restart:
            self._starting()
            stream = self._stream.take(self._steps) if self._restart and self.ends_in_graph else self._stream
            try:
                with placed_with(self._stream):
                    self._iterator = EpochIterator(stream, self._steps, self._guard)
            except tf.errors.OpError as e:  # a DALIDataset starts loading when the iterator is made
                if self._guard is None:
                    raise
                raise self._guard.explain(e) from e
        return self._iterator.start_epoch()


def refuse_class_weight(map_func) -> None:
    """Refuse the map with which Keras' ``fit`` applies ``class_weight`` (see the module)."""
    if is_keras_class_weight_map(map_func):
        raise SpecError("model.fit(..., class_weight=...) weighs whole samples by a class label, which a segmentation "
                        "batch does not have (its labels are per pixel). Give the class weights to the loss instead: "
                        "dl.losses.SparseCategoricalCrossentropy(class_weights=[...]) (int labels) or "
                        "dl.losses.CategoricalCrossentropy(class_weights=[...]) (one-hot); "
                        "dl.class_weights(dl.class_frequencies(data)) computes them")
