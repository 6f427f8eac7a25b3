"""The DALI graph as a ``tf.data.Dataset`` (the only DALI module that imports TensorFlow).

``DALIDataset`` is endless and builds a new DALI pipeline for every iterator, while Keras'
``model.fit`` without ``steps_per_epoch`` calls ``iter(dataset)`` at the start of every epoch. We
want neither an endless epoch nor a pipeline rebuilt per epoch, so :class:`EpochDataset` reports the
epoch length as its cardinality (Keras then needs no ``steps_per_epoch``) and hands out one
persistent iterator over the endless DALI stream: each ``iter()`` starts the next epoch of the same
pipeline. Epoch ``e`` is exactly the sampler's epoch ``e``, so no sample repeats within an epoch
and the order is reshuffled between epochs.
"""

from __future__ import annotations

import tensorflow as tf
from nvidia.dali.plugin.tf.experimental import DALIDatasetWithInputs
from tensorflow.python.data.ops import dataset_ops, iterator_ops
from tensorflow.python.framework import ops

from ..classes import ClassMap
from ..sampler import Sampler
from ..spec import Preprocess
from .graph import GraphOptions, build_pipeline


class _EpochIterator(iterator_ops.OwnedIterator):
    """An iterator over an endless stream that stops (in eager loops) after one epoch of batches.

    Graph code (Keras' compiled train step) reads the underlying iterator directly and counts steps
    itself; the count here makes ``for batch in dataset:`` end after one epoch.
    """

    def __init__(self, stream: tf.data.Dataset, steps: int):
        super().__init__(dataset=stream)
        self._steps = steps
        self._left = steps

    def _start_epoch(self) -> "_EpochIterator":
        self._left = self._steps
        return self

    def __next__(self):
        if self._left <= 0:
            raise StopIteration
        self._left -= 1
        return super().__next__()


class EpochDataset(dataset_ops.UnaryUnchangedStructureDataset):
    """An endless DALI stream presented as epochs of ``steps`` batches, one pipeline for all epochs."""

    def __init__(self, stream: tf.data.Dataset, steps: int):
        self._stream = stream
        self._steps = steps
        self._iterator: _EpochIterator | None = None
        sized = stream.apply(tf.data.experimental.assert_cardinality(steps))
        super().__init__(stream, sized._variant_tensor)

    def __iter__(self):
        if not tf.executing_eagerly() or ops.inside_function():
            return super().__iter__()
        if self._iterator is None:
            with ops.colocate_with(self._stream._variant_tensor):
                self._iterator = _EpochIterator(self._stream, self._steps)
        return self._iterator._start_epoch()


def dali_dataset(data, spec: Preprocess, sampler: Sampler, opts: GraphOptions) -> EpochDataset:
    """Wrap the DALI graph in ``DALIDatasetWithInputs`` placed on the pipeline's device."""
    pipe = build_pipeline(data, spec, sampler, opts)
    dtypes, shapes = output_signature(spec, data.classes, sampler.batch_size, opts.outputs)
    device = f"/gpu:{opts.device_id}" if opts.device == "gpu" else "/cpu:0"
    with tf.device(device):
        stream = DALIDatasetWithInputs(
            pipeline=pipe, batch_size=sampler.batch_size, device_id=opts.device_id,
            num_threads=pipe.num_threads, prefetch_queue_depth=opts.prefetch,
            output_dtypes=dtypes, output_shapes=shapes)
        if spec.dtype == "bfloat16":  # DALI has no bfloat16: TensorFlow casts after the graph
            stream = stream.map(lambda x, *rest: (tf.cast(x, tf.bfloat16), *rest))
    return EpochDataset(stream, sampler.steps)


def output_signature(spec: Preprocess, classes: ClassMap, batch_size: int, outputs):
    h, w = spec.image_size
    image_dtype = tf.float16 if spec.dtype == "float16" else tf.float32
    if spec.label_mode == "onehot":
        labels = (tf.float32, (batch_size, h, w, classes.num_classes))
    else:
        labels = (tf.int32, (batch_size, h, w))
    table = {"image": (image_dtype, (batch_size, h, w, 3)), "labels": labels,
             "weight": (tf.float32, (batch_size,)), "index": (tf.int64, (batch_size,))}
    return tuple(table[o][0] for o in outputs), tuple(tf.TensorShape(table[o][1]) for o in outputs)
