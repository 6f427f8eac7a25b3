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

import os
from dataclasses import replace

import numpy as np
import tensorflow as tf
from nvidia.dali.plugin.tf.experimental import DALIDatasetWithInputs, Input
from tensorflow.python.data.ops import dataset_ops, iterator_ops
from tensorflow.python.framework import ops

from ..checks import PairGuard
from ..classes import ClassMap
from ..sampler import ReaderEpochs, Sampler
from ..spec import Preprocess
from ..tfops import one_hot
from .graph import SHARD_INPUTS, GraphOptions, build_pipeline, graph_spec


class _EpochIterator(iterator_ops.OwnedIterator):
    """An iterator over an endless stream that stops (in eager loops) after one epoch of batches.

    Graph code (Keras' compiled train step) reads the underlying iterator directly and counts steps
    itself; the count here makes ``for batch in dataset:`` end after one epoch.
    """

    def __init__(self, stream: tf.data.Dataset, steps: int, guard: PairGuard | None = None):
        super().__init__(dataset=stream)
        self._steps = steps
        self._left = steps
        self._guard = guard

    def get_next(self):
        """What tf.distribute calls (eager loops over a distributed dataset); ends the epoch the same way."""
        if tf.executing_eagerly() and not ops.inside_function():
            if self._left <= 0:
                raise tf.errors.OutOfRangeError(None, None, "end of the epoch")
            self._left -= 1
        return super().get_next()

    def _start_epoch(self) -> "_EpochIterator":
        self._left = self._steps
        return self

    def __next__(self):
        if self._left <= 0:
            raise StopIteration
        self._left -= 1
        try:
            return super().__next__()
        except tf.errors.OpError as e:
            if isinstance(e, tf.errors.OutOfRangeError) or self._guard is None:
                raise
            raise self._guard.explain(e) from e


class EpochDataset(dataset_ops.UnaryUnchangedStructureDataset):
    """An endless DALI stream presented as epochs of ``steps`` batches, one pipeline for all epochs."""

    def __init__(self, stream: tf.data.Dataset, steps: int, guard: PairGuard | None = None):
        self._stream = stream
        self._steps = steps
        self._guard = guard
        self._iterator: _EpochIterator | None = None
        sized = stream.apply(tf.data.experimental.assert_cardinality(steps))
        super().__init__(stream, sized._variant_tensor)

    def __iter__(self):
        if not tf.executing_eagerly() or ops.inside_function():
            return super().__iter__()
        if self._iterator is None:
            try:
                with ops.colocate_with(self._stream._variant_tensor):
                    self._iterator = _EpochIterator(self._stream, self._steps, self._guard)
            except tf.errors.OpError as e:  # DALIDataset starts loading when the iterator is made
                if self._guard is None:
                    raise
                raise self._guard.explain(e) from e
        return self._iterator._start_epoch()


def dali_dataset(data, spec: Preprocess, sampler: Sampler, opts: GraphOptions,
                 placement: str | None = None) -> EpochDataset:
    """Wrap the DALI graph in ``DALIDatasetWithInputs`` placed on the pipeline's device
    (``placement``, a TensorFlow device name, overrides it: a replica's device under ``distribute``).

    On the CPU, one-hot labels are encoded by TensorFlow after DALI (:func:`daliloader.tfops.one_hot`):
    DALI hands over int labels, 1 MB per 512x512 sample instead of 32 MB of float32 one-hot to copy
    into TensorFlow's tensors, and the gather is faster than DALI's CPU ``fn.one_hot``. On a GPU
    DALI encodes, and the batches stay on the device.
    """
    dali_spec = graph_spec(spec, opts.device)
    encode_in_tf = dali_spec.label_mode != spec.label_mode
    guard = PairGuard(data, remember=2 * CHUNK + sampler.batch_size * (opts.prefetch + 2))
    pipe = build_pipeline(data, dali_spec, sampler, replace(opts, fed=True), guard)
    reader = ReaderEpochs(sampler) if data.shards is not None else None
    dtypes, shapes = output_signature(dali_spec, data.classes, sampler.batch_size, opts.outputs)
    device = placement or (f"/gpu:{opts.device_id}" if opts.device == "gpu" else "/cpu:0")
    with tf.device(device):
        stream = DALIDatasetWithInputs(
            pipeline=pipe, batch_size=sampler.batch_size, device_id=opts.device_id,
            num_threads=pipe.num_threads, prefetch_queue_depth=opts.prefetch,
            input_datasets=_inputs(data, sampler, reader, guard, device, opts.outputs),
            output_dtypes=dtypes, output_shapes=shapes)
        if reader is not None and reader.reader_steps != sampler.steps:  # drop_remainder with shards
            stream = (stream.enumerate().filter(lambda step, batch: reader.keeps(step))
                      .map(lambda step, batch: batch))
        if encode_in_tf or spec.dtype == "bfloat16" or "weight" in opts.outputs:
            num_classes = data.classes.num_classes if encode_in_tf else None
            stream = stream.map(lambda *batch: _finish(batch, opts.outputs, spec, num_classes),
                                num_parallel_calls=tf.data.AUTOTUNE)
    return EpochDataset(stream, sampler.steps, guard)


#: Stream positions per Python call in the TF input streams (see :func:`_inputs`).
CHUNK = 128


def _inputs(data, sampler: Sampler, reader: ReaderEpochs | None, guard: PairGuard, device: str,
            outputs) -> dict:
    """The graph's placeholder inputs (``INPUTS`` or ``SHARD_INPUTS`` in :mod:`daliloader.dali.graph`) as
    native tf.data streams (the index, or the padding marks when reading shards, only when an output
    uses them: DALI drops unused nodes).

    Python runs once per :data:`CHUNK` positions (the sampler's indices, and the guard vetting pairs
    it has not seen); the per-sample work is ``tf.gather`` on constant path tables. A Python call per
    batch (``from_generator``) still cost a third of the throughput on 2 cores. Streams live on the
    CPU and are copied to the GPU when DALI runs there, as the plugin does for its own inputs.
    """
    def indices(vet: bool):
        def chunk(k):
            found = sampler.indices(int(k) * CHUNK, (int(k) + 1) * CHUNK)
            if vet:
                for i in found:
                    guard.verify(max(int(i), 0))  # padding (-1) reads sample 0
            return found

        def call(k):
            found = tf.numpy_function(chunk, [k], tf.int64, stateful=True)
            found.set_shape([CHUNK])
            return found

        return tf.data.Dataset.range(np.iinfo(np.int64).max).map(call).unbatch()

    def paths(files, vet: bool):
        table = tf.constant([os.fsencode(f) for f in files])
        return indices(vet).map(lambda i: tf.io.decode_raw(tf.gather(table, tf.maximum(i, 0)), tf.uint8))

    positional = bool({"weight", "index"} & set(outputs))
    with tf.device("/cpu:0"):
        if data.shards is not None:
            real = tf.data.Dataset.range(np.iinfo(np.int64).max).map(lambda p: tf.cast(reader.real(p), tf.int64))
            streams = {SHARD_INPUTS[0]: real} if positional else {}
        else:
            streams = {"image_path": paths(data.images, vet=True), "mask_path": paths(data.masks, vet=False)}
            if positional:
                streams["index"] = indices(vet=False)
    if tf.DeviceSpec.from_string(device).device_type == "GPU":
        streams = {k: v.apply(tf.data.experimental.copy_to_device(device)) for k, v in streams.items()}
    return {name: Input(stream, batch=False) for name, stream in streams.items()}


def _finish(batch, outputs, spec: Preprocess, num_classes: int | None):
    """What DALI does not output: one-hot labels encoded here (``num_classes`` given), bfloat16
    images (cast), and per-pixel weights ``[B, H, W]`` from the per-sample ones, the shape Keras
    needs to weight per-pixel losses and metrics."""
    out = dict(zip(outputs, batch))
    if num_classes is not None:
        out["labels"] = one_hot(out["labels"], num_classes)
    if spec.dtype == "bfloat16":
        out["image"] = tf.cast(out["image"], tf.bfloat16)
    if "weight" in out:
        out["weight"] = per_pixel(out["weight"], spec.image_size)
    return tuple(out[name] for name in outputs)


def per_pixel(weights, image_size):
    """``[B]`` sample weights -> ``[B, H, W]``."""
    return tf.broadcast_to(weights[:, None, None], (tf.shape(weights)[0], *image_size))


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
