"""The DALI graph as a ``tf.data.Dataset``: the thin TensorFlow adapter of :mod:`.dali_graph` (the only
DALI module that imports TensorFlow), as DALI's own TF plugin sits beside its pipeline.

``DALIDataset`` is endless and builds a new DALI pipeline for every iterator, while Keras'
``model.fit`` without ``steps_per_epoch`` calls ``iter(dataset)`` at the start of every epoch. We
want neither an endless epoch nor a pipeline rebuilt per epoch, so :class:`EpochDataset` reports the
epoch length as its cardinality (Keras then needs no ``steps_per_epoch``) and hands out one
persistent iterator over the endless DALI stream: each ``iter()`` starts the next epoch of the same
pipeline, unless Python read the last one part-way (then a new pipeline starts a fresh epoch:
``tfloader.EpochDataset._end_part_read``). Reading files, each epoch is exactly one of the sampler's
epochs, never read by another pipeline of the dataset (the first pipeline reads the sampler's epochs
from 0 on; each later one claims epochs after those: :class:`Epochs`), so no sample repeats within an
epoch and the order is reshuffled between epochs (reading packs: see
:class:`~daliloader.sampler.ReaderEpochs`).

Evaluation datasets (every sample once, in the dataset's order, nothing drawn at random: the
defaults of ``training=False``) are the exception: every ``iter()`` builds the pipeline anew at the
first batch, as a ``tf.data`` dataset restarts. Their epochs are all alike, so nothing is lost, and a
read stopped part-way (a peek,
``validation_steps``, ``evaluate(steps=k)``) cannot shift the next one: ``model.predict`` and
``evaluate`` always see the dataset's order. That costs one pipeline build per pass.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from nvidia.dali.plugin.tf.experimental import DALIDatasetWithInputs, Input

from ..buckets import FETCHES
from ..classes import ClassMap
from ..data import Container
from ..environment import GROWTH_DEFAULT_TOO_LATE
from ..errors import SpecError, user_stacklevel
from ..guard import PairGuard
from ..parallel import mapped
from ..plan import Output, Plan
from ..sampler import ReaderEpochs
from ..spec import Preprocess
from ..stages import draw_count
from ..tfprivate import variant
from . import Device, tfloader
from .dali_graph import (
    DRAWS_INPUT,
    INPUTS,
    PACK_INPUTS,
    RECORD_INPUTS,
    GraphSpec,
    SegmentationPipeline,
    dali_guard,
    draws_fed,
    graph_spec,
    host_batch_size,
    mask_files,
    outputs_on,
    pack_pair,
    path_row,
    reads_index,
)
from .tfloader import refuse_class_weight
from .tfops import encode, normalize

#: The epochs a pipeline started by iterating the dataset itself may read: it reads on, epoch after epoch,
#: for as long as it lives, so a pipeline started after it takes its epochs after these.
STREAM_EPOCHS = 2**24


class Epochs:
    """Which epoch each DALI pipeline of one dataset starts at, so that no two read the same epoch (the
    same order and the same draws).

    ``free`` is the first epoch no pipeline has claimed; a claim adds to it and reads it in one critical
    section (two claims at once would otherwise read one number). A pass of a chained tf.data
    transformation claims one epoch (:meth:`claim_pass`, in the graph) and builds its pipeline's input
    streams from that number (:meth:`_Feed.stream`): passes read at once (``interleave``) each read their
    own epoch, in every stream of their pipeline alike. A pipeline started by iterating the dataset itself
    claims :data:`STREAM_EPOCHS` (:meth:`claim_stream`, eagerly; an iterator of ``distribute``'s
    per-worker stream, :meth:`claim_block` in its graph) and writes the first into ``start``, which its
    input streams read as they begin (:meth:`_Streams.chunks`). The first pipeline of a dataset reads
    from epoch 0.
    """

    def __init__(self):
        with tf.device("/cpu:0"):
            self.free = tf.Variable(0, dtype=tf.int64, trainable=False, name="daliloader_free_epoch")
            self.start = tf.Variable(0, dtype=tf.int64, trainable=False, name="daliloader_start_epoch")
            self._claiming = tf.CriticalSection(name="daliloader_claim")

    def _claim(self, count: int) -> tf.Tensor:
        """``count`` epochs from ``free``: the first one's number."""
        def claim():
            return tf.identity(self.free.assign_add(count)) - count

        return self._claiming.execute(claim)

    def claim_pass(self) -> tf.Tensor:
        """One epoch for a chained pass (inside its tf.data graph): its number."""
        return self._claim(1)

    def claim_stream(self) -> int:
        """:data:`STREAM_EPOCHS` epochs for a pipeline about to start (eagerly, before its iterator): the
        first one's number."""
        return int(self.claim_block())

    def claim_block(self) -> tf.Tensor:
        """:data:`STREAM_EPOCHS` epochs, eagerly or inside a tf.data graph: the first one's number."""
        return self.start.assign(self._claim(STREAM_EPOCHS))


class EpochDataset(tfloader.EpochDataset):
    """An endless DALI stream presented as epochs of ``steps`` batches, one pipeline for all epochs.

    Iterated itself (``for batch in ds``, ``model.fit(ds)``), it hands out one persistent iterator:
    each ``iter()`` starts the next epoch of the same pipeline; with ``restart`` (evaluation), each
    ``iter()`` starts at the first batch, on a new pipeline. ``len()``/``cardinality()`` give
    ``steps``, from Python (TF's cardinality op has no GPU kernel).

    A tf.data transformation chained onto it (``ds.map(f)``, ``ds.repeat()``, ``ds.cache()``...) reads
    the dataset's graph instead, which is one epoch: each time the chained dataset is read, the
    pipeline is built anew and reads an epoch no pipeline of this dataset has read (:class:`Epochs`; the
    sampler's order and the draws follow the stream position, so every pass is a fresh epoch, whether
    the dataset was also iterated itself or not), and ``assert_cardinality(steps)`` tells the chain the
    epoch length. Two limits remain, and say so: a stream handed over on the GPU takes no CPU-only
    transformation (see :class:`GPUEpochDataset`), and a pack reader would replay its first pass, so a
    pipeline after the first is refused (except in evaluation, where every pass is meant to be the
    first).
    """

    def __init__(self, stream: tf.data.Dataset, steps: int, guard: PairGuard | None,
                 epochs: Epochs | None, *, one_pass: Callable[[tf.Tensor], tf.data.Dataset] | None,
                 by_reader: bool = False, restart: bool = False):
        """``one_pass(first)``: the stream of a pipeline whose inputs start at epoch ``first``, which each
        chained pass builds (:meth:`_one_epoch`; None for a subclass without chained passes)."""
        self._epochs, self._first_only, self._one_pass = epochs, by_reader and not restart, one_pass
        super().__init__(stream, steps, guard, variant(self._graph(stream, steps)), restart)

    def _graph(self, stream: tf.data.Dataset, steps: int) -> tf.data.Dataset:
        """What a chained transformation reads: one epoch (:meth:`_one_epoch`)."""
        return self._one_epoch(self._one_pass, steps, self._epochs, self._first_only)

    def _end_part_read(self) -> None:
        """A new pipeline claims a fresh epoch; a pack reader's would replay its first pass, so there the
        rest of the epoch is read, unused."""
        if self._first_only:
            self._iterator.drain()
        else:
            super()._end_part_read()

    def _starting(self) -> None:
        """A pipeline started by iterating the dataset itself claims its epochs first (a pack reader's
        only if no pipeline of the dataset came before: it would replay that one's first pass)."""
        if self._epochs is not None and self._epochs.claim_stream() > 0 and self._first_only:
            raise SpecError(PACKS_REPLAY)

    @staticmethod
    def _one_epoch(one_pass, steps: int, epochs: Epochs | None, by_reader: bool) -> tf.data.Dataset:
        """One pass: an epoch claimed, and the stream of a pipeline whose inputs start there
        (``one_pass(first)``), ``steps`` batches of it."""
        # (not converted by AutoGraph: nothing in them branches on a tensor, and a pass's pipeline is built
        # in Python, where AutoGraph warned that it could not convert os.fsencode, frozen in Python 3.11)
        @tf.autograph.experimental.do_not_convert
        def start(_):
            first = epochs.claim_pass()
            if by_reader:  # the reader starts at its first pass whatever the epoch: only the first pipeline may
                with tf.control_dependencies([tf.debugging.assert_less(first, tf.constant(1, tf.int64),
                                                                       message=PACKS_REPLAY)]):
                    first = tf.identity(first)
            return first

        @tf.autograph.experimental.do_not_convert
        def read(first):
            return one_pass(first).take(steps)

        with tf.device("/cpu:0"):
            epoch = tf.data.Dataset.range(1).map(start).flat_map(read)
            return epoch.apply(tf.data.experimental.assert_cardinality(steps))


#: What a second pipeline over a pack reader (a chained pass, or the dataset itself after one) says.
PACKS_REPLAY = ("daliloader: this dataset is read by a DALI reader (of packs, the webdataset tars of a prepared copy), "
                "which starts at its first pass in every pipeline built over it: a chained tf.data transformation "
                "builds one for every pass, and iterating the dataset itself after one builds another, which would "
                "replay the order and crops of the first pipeline. Iterate either the dataset itself "
                "(model.fit(ds) keeps one pipeline for all epochs) or one chain for one pass; or, to chain "
                "transformations, load a prepared copy with packs=False, or use backend=tfdata")

#: tf.data transformations without GPU kernels, refused on a GPU stream (prefetch and with_options have them).
CPU_ONLY = ("map", "filter", "batch", "unbatch", "padded_batch", "rebatch", "cache", "take", "skip", "repeat",
            "shuffle", "flat_map", "interleave", "enumerate", "concatenate", "window", "scan", "unique",
            "take_while", "shard", "ignore_errors", "bucket_by_sequence_length", "group_by_window")


class GPUEpochDataset(EpochDataset):
    """An :class:`EpochDataset` whose batches arrive on the GPU. tf.data's transformations have CPU
    kernels only, so chaining one (:data:`CPU_ONLY`) would fail later with a placement error that names
    neither daliloader nor a way out; here it fails at once, and says what to do."""

    ends_in_graph = False  # (take has no GPU kernel: an evaluation's stream ends by its inputs, see _inputs)

    def __init__(self, stream: tf.data.Dataset, steps: int, guard: PairGuard | None, epochs: Epochs | None,
                 restart: bool = False):
        super().__init__(stream, steps, guard, epochs, one_pass=None, restart=restart)

    def _graph(self, stream: tf.data.Dataset, steps: int) -> tf.data.Dataset:
        """The stream itself: one epoch's graph would put tf.data ops with no GPU kernel after the DALI
        dataset (and chaining one is refused anyway)."""
        return stream


def _refusing(name: str):
    """A method that refuses ``ds.<name>(...)`` on a GPU stream (:func:`_refuse_on_gpu`)."""
    def refuse(self, *args, **kwargs):
        _refuse_on_gpu(name, *args, **kwargs)
    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Refused: ``{name}`` has no GPU kernel in tf.data (see ``GPUEpochDataset``)."
    return refuse


for _name in CPU_ONLY:  # each one shadows tf.data.Dataset's method of that name
    setattr(GPUEpochDataset, _name, _refusing(_name))


def _refuse_on_gpu(name: str, *args, **kwargs):
    if name == "map" and args:
        refuse_class_weight(args[0])  # Keras' fit(class_weight=...): say where class weights go instead
    raise SpecError(f"daliloader: ds.{name}() on a backend='dali-gpu' dataset: its batches are on the GPU, where "
                    "tf.data has no kernels for map, batch, cache, repeat and the like. Do that work in the model "
                    "(Keras layers run on the GPU), or in the loader's options; or use backend='dali-cpu' to "
                    "chain tf.data transformations. model.fit(ds) needs no repeat() or take(): the dataset "
                    "knows its epoch length")


def dataset(plan: Plan, device: Device) -> EpochDataset:
    """The "tf.data" product (``tf_dataset``): the DALI stream of :func:`stream` in epochs."""
    feed = _Feed.of(plan, device)
    endless = feed.stream()
    on_gpu = tf.DeviceSpec.from_string(variant(endless).device).device_type == "GPU"
    restart = _restarts(plan)
    if on_gpu:
        return GPUEpochDataset(endless, plan.steps, feed.guard, feed.epochs, restart=restart)
    return EpochDataset(endless, plan.steps, feed.guard, feed.epochs, by_reader=plan.data.container.read_by_reader,
                        restart=restart, one_pass=feed.stream)


def stream(plan: Plan, device: Device) -> tf.data.Dataset:
    """The "stream" product, for the per-worker input of ``distribute`` (read through a
    ``MultiDeviceIterator``, not :class:`EpochDataset`'s iterator): in evaluation one epoch, which every
    iterator reads from its first batch (an endless stream never ended ``model.evaluate``); in training
    the endless stream, whose every iterator (each ``fit()``) claims epochs no pipeline of it has read
    (:meth:`Epochs.claim_block`), where a new one replayed the first epoch's order and draws; iterators
    are taken one at a time (two read at once could read one block). A pack reader still starts at its
    first pass in every new pipeline (docs/distributed.md)."""
    feed = _Feed.of(plan, device)
    endless = feed.stream()  # (built here, once: one reader per worker, whose iterators come one at a time)
    if _restarts(plan):
        return endless.take(plan.steps).apply(tf.data.experimental.assert_cardinality(plan.steps))

    def claim(_):  # (named functions: autograph cannot tell two lambdas on one line apart)
        return feed.epochs.claim_block()

    def read(_):
        return endless

    with tf.device("/cpu:0"):
        return tf.data.Dataset.range(1).map(claim).flat_map(read)


def _restarts(plan: Plan) -> bool:
    """Evaluation: every epoch alike (every sample once, in a fixed order, nothing drawn), so every iterator
    may start from the first batch."""
    return not (plan.sampler.drop_remainder or plan.sampler.shuffle or plan.spec.draws_at_random)


@dataclass
class _Feed:
    """A DALI graph wrapped for TensorFlow: what every stream of it shares (the pipeline, the guard, the
    epochs claimed), and :meth:`stream`, which wraps the graph in ``DALIDatasetWithInputs``, placed where
    DALI hands its batches over: the GPU that is CUDA device ``plan.device_id``, or the host
    (``plan.placement``, a TensorFlow device name, overrides it: a replica's device under ``distribute``).

    Batches handed over on the GPU leave DALI complete (one-hot, weights) and nothing follows the
    DALIDataset: TF's dataset ops after it would need GPU kernels, which map, filter and
    assert_cardinality do not have. Batches handed over on the host leave DALI as uint8 pixels and
    class indices and are normalized and encoded by TensorFlow (:func:`.dali_graph.graph_spec`), in a
    parallel map after DALI; DALI runs them in larger batches, which ``rebatch`` splits first
    (:func:`.dali_graph.host_batch_size`).
    """

    plan: Plan
    device: Device
    run: GraphSpec
    batch: int
    guard: PairGuard
    pipe: SegmentationPipeline
    reader: ReaderEpochs | None
    where: str
    epochs: Epochs

    @classmethod
    def of(cls, plan: Plan, device: Device) -> _Feed:
        spec, on = plan.spec, outputs_on(device, plan)
        if on == Device.GPU and spec.dtype == "bfloat16":
            raise SpecError("dtype='bfloat16' with backend='dali-gpu': DALI has no bfloat16 output, and a cast after "
                            "a GPU DALIDataset would be a tf.data map, which has no GPU kernel. Pass dtype='float32' "
                            "and keras.mixed_precision.set_global_policy('mixed_bfloat16'): Keras casts the inputs "
                            "to bfloat16 in the first layer. Or pass dtype='float16', which DALI outputs.")
        run = graph_spec(spec, on)
        batch = host_batch_size(plan, device)
        guard = dali_guard(plan, device, batch, CHUNK)
        pipe = SegmentationPipeline(plan, device, spec=run, fed=True, guard=guard, batch_size=batch)
        reader = ReaderEpochs(plan.sampler) if plan.data.container.read_by_reader else None
        if device == Device.GPU:  # DALI works on the GPU, whether it hands its batches over there or not
            leave_gpu_memory_for_dali()
        where = plan.placement or (tf_gpu(plan.device_id) if on == Device.GPU else "/cpu:0")
        return cls(plan, device, run, batch, guard, pipe, reader, where, Epochs())

    def stream(self, first: tf.Tensor | None = None) -> tf.data.Dataset:
        """The endless stream of a pipeline whose inputs start at epoch ``first`` (a tensor: a chained
        pass's claim, inside its tf.data graph), or at the epoch its iterator claimed (None)."""
        plan, run, batch = self.plan, self.run, self.batch
        dtypes, shapes = output_signature(run, plan.data.classes, batch, plan.outputs)
        with tf.device(self.where):
            endless = DALIDatasetWithInputs(
                pipeline=self.pipe, batch_size=batch, device_id=self.pipe.device_id,
                num_threads=self.pipe.num_threads, prefetch_queue_depth=plan.prefetch,
                input_datasets=_inputs(plan, self.reader, self.guard, self.where, self.epochs,
                                       mask_files(plan.data, self.device), batch, first),
                output_dtypes=dtypes, output_shapes=shapes)
            if batch != plan.batch_size:  # on the host: DALI's larger batches split (see host_batch_size)
                endless = endless.rebatch(plan.batch_size, drop_remainder=True)
            if run.host_finish:  # what DALI does not output (see graph_spec)
                spec, classes = plan.spec, plan.data.classes
                endless = endless.map(lambda *batch: _finish(batch, plan.outputs, spec, classes),
                                      num_parallel_calls=tf.data.AUTOTUNE)
        return endless


#: Stream positions per Python call in the TF input streams (see :func:`_inputs`).
CHUNK = 128


def _inputs(plan: Plan, reader: ReaderEpochs | None, guard: PairGuard, where: str, epochs: Epochs,
            masks, batch: int, first: tf.Tensor | None = None) -> dict:
    """The graph's placeholder inputs (``INPUTS``, ``PACK_INPUTS``, ``RECORD_INPUTS`` and ``DRAWS_INPUT`` in
    :mod:`.dali_graph`) as native tf.data streams (:class:`_Streams`; the index, or the padding marks
    when reading packs, only when an output uses them: DALI drops unused nodes, and refuses an input that
    a used node needs and nothing feeds). ``masks`` are the mask
    files the graph reads (:func:`.dali_graph.mask_files`). Streams live on the CPU, are batched (each
    batch padded to its longest: :func:`.dali_graph.graph_input`), and are copied to the dataset's device
    (``where``, a TensorFlow device name) when that is a GPU, as the plugin asks."""
    data, make = plan.data, _Streams(plan, reader, guard, epochs, batch, first)
    positional = reads_index(plan)
    with tf.device("/cpu:0"):
        streams = STREAMS[data.container](make, data, masks, positional)
        if draws_fed(data, plan.spec):
            streams[DRAWS_INPUT] = make.draws()
        if _restarts(plan):  # evaluation: the inputs of one epoch, in whole DALI batches, so that the DALI
            # dataset ends after it, also on the GPU, where no take() may follow it (Keras compiled with
            # steps_per_execution reads on until a batch is missing)
            positions = -(-plan.sampler.per_epoch // batch) * batch
            streams = {k: v.take(positions) for k, v in streams.items()}
        # padded: the paths and records of a batch, zeros up to its longest (pack_pair); the other inputs
        # have one shape
        streams = {k: v.padded_batch(batch, drop_remainder=True) for k, v in streams.items()}
    if tf.DeviceSpec.from_string(where).device_type == "GPU":
        streams = {k: v.apply(tf.data.experimental.copy_to_device(where)) for k, v in streams.items()}
    return {name: Input(stream, batch=True) for name, stream in streams.items()}


def _file_streams(make: _Streams, data, masks, positional: bool) -> dict:
    """Files: the two paths of each position (the mask's whatever the outputs: the graph checks that it
    has its image's size), and its sample index where an output uses it."""
    image_path, mask_path, index = INPUTS
    streams = {image_path: make.paths(data.images, vet=True), mask_path: make.paths(masks, vet=False)}
    return {**streams, index: make.indices(vet=False)} if positional else streams


def _pack_streams(make: _Streams, data, masks, positional: bool) -> dict:
    """Packs: DALI's reader reads them; each position's padding mark where an output uses it."""
    return {PACK_INPUTS[0]: make.real()} if positional else {}


def _record_streams(make: _Streams, data, masks, positional: bool) -> dict:
    """TFRecords, and pairs in a bucket: each position's record or pair, read and checked by the guard (in
    a bucket on :data:`~daliloader.buckets.FETCHES` threads: a fetch mostly waits on the network), and its
    sample index where an output uses it."""
    streams = {RECORD_INPUTS[0]: make.records(workers=FETCHES if data.container is Container.OBJECTS else 1)}
    return {**streams, RECORD_INPUTS[1]: make.indices(vet=False)} if positional else streams


#: The graph's input streams for each container (one entry per :class:`~daliloader.data.Container`; a
#: test checks), as :data:`.dali_graph.READERS` reads them.
STREAMS = {Container.FILES: _file_streams, Container.PACKS: _pack_streams, Container.TFRECORD: _record_streams,
           Container.OBJECTS: _record_streams}


class _Streams:
    """The per-position streams a DALI graph reads.

    Python runs once per :data:`CHUNK` positions, or an epoch's if fewer (the sampler's indices, and
    the guard vetting pairs it has not seen); the per-sample work is ``tf.gather`` on constant path
    tables (a Python call per sample or per batch, as ``from_generator`` makes, is slower:
    docs/design.md). The draws are TensorFlow's stateless uniforms of (seed, position), in blocks of
    CHUNK. Reading files, the streams start at the epoch the pipeline claimed when it started
    (see :class:`EpochDataset`); the pack reader always starts at its first pass.
    """

    def __init__(self, plan: Plan, reader: ReaderEpochs | None, guard: PairGuard, epochs: Epochs, batch: int,
                 first: tf.Tensor | None = None):
        self.sampler, self.reader, self.guard, self.epochs, self.batch = plan.sampler, reader, guard, epochs, batch
        self.first = first  # the epoch a chained pass claimed (None: the one in epochs.start)
        self.draw_count = draw_count(plan.spec)
        # an epoch's worth at most, so that a chunk of a small dataset does not vet pairs epochs ahead
        self.chunk_size = min(CHUNK, self.sampler.per_epoch)

    def chunks(self) -> tf.data.Dataset:
        """The first position of each chunk of positions, from the first epoch the pipeline claimed."""
        size, per_epoch, epochs, claimed = self.chunk_size, self.sampler.per_epoch, self.epochs, self.first
        endless = np.iinfo(np.int64).max // (2 * size)
        if claimed is not None:
            first = tf.data.Dataset.from_tensors(tf.cast(claimed, tf.int64) * per_epoch)
        else:
            first = tf.data.Dataset.range(1).map(lambda _: epochs.start.read_value() * per_epoch)
        return first.flat_map(lambda start: tf.data.Dataset.range(endless).map(lambda k: start + k * size))

    def indices(self, vet: bool) -> tf.data.Dataset:
        """Each position's sample index (-1: padding); ``vet``: the guard vets each new pair first."""
        guard = self.guard

        def chunk(found):
            if vet:
                for i in found:
                    guard.verify(max(int(i), 0))  # padding (-1) reads sample 0
            return found

        return self.per_chunk(chunk, tf.int64)

    def per_chunk(self, of_indices, dtype) -> tf.data.Dataset:
        """Each position's ``of_indices(indices)[k]``, Python called once per chunk of positions with the
        sample indices of the chunk (-1: padding), from the epoch the pipeline claimed."""
        sampler, size = self.sampler, self.chunk_size

        def call(start):
            found = tf.numpy_function(lambda s: of_indices(sampler.indices(int(s), int(s) + size)), [start], dtype,
                                      stateful=True)
            found.set_shape([size])
            return found

        return self.chunks().map(call).unbatch()

    def paths(self, files, vet: bool) -> tf.data.Dataset:
        """Each position's file name, as the graph's path inputs take it (:func:`.dali_graph.path_row`)."""
        table = tf.constant([path_row(f).tobytes() for f in files])
        return self.indices(vet).map(lambda i: tf.io.decode_raw(tf.gather(table, tf.maximum(i, 0)), tf.uint8))

    def draws(self) -> tf.data.Dataset:
        """Each position's random draws, native: no Python per sample or per chunk."""
        seed, size = tf.constant(self.sampler.draw_seed % 2**63, tf.int64), self.chunk_size
        return self.chunks().map(lambda start: tf.random.stateless_uniform(
            [size, self.draw_count], seed=tf.stack([seed, start]))).unbatch()

    def real(self) -> tf.data.Dataset:
        """Each position's padding mark, when a pack reader reads."""
        reader = self.reader
        return tf.data.Dataset.range(np.iinfo(np.int64).max).map(lambda p: tf.cast(reader.real(p), tf.int64))

    def records(self, workers: int = 1) -> tf.data.Dataset:
        """Each position's record or pair of objects (its encoded image and mask,
        :func:`.dali_graph.pack_pair`), read and checked against its index or listing by the guard
        (:meth:`~daliloader.guard.PairGuard.read`) a chunk at a time, on ``workers`` threads: what DALI
        decodes is what was indexed or listed, and vetted."""
        guard = self.guard

        def chunk(found):
            return np.array(mapped(lambda i: pack_pair(*guard.read(max(int(i), 0))), found, workers), dtype=object)

        return self.per_chunk(chunk, tf.string).map(lambda r: tf.io.decode_raw(r, tf.uint8))


def _finish(batch, outputs: tuple[Output, ...], spec: Preprocess, classes: ClassMap):
    """A batch DALI hands over on the host finished as ``spec`` asks (see :class:`.dali_graph.GraphSpec`):
    uint8 pixels normalized here, class indices encoded here."""
    out = dict(zip(outputs, batch))
    if Output.IMAGE in out:
        out[Output.IMAGE] = normalize(out[Output.IMAGE], spec)
    if Output.LABELS in out:
        out[Output.LABELS] = encode(out[Output.LABELS], spec, classes.num_classes)
    return tuple(out[name] for name in outputs)


def output_signature(run: GraphSpec, classes: ClassMap, batch_size: int, outputs: tuple[Output, ...]):
    """The dtypes and shapes of the outputs of a graph that runs ``run`` (see :func:`.dali_graph.graph_spec`)."""
    spec = run.spec
    h, w = spec.image_size
    image_dtype = tf.uint8 if run.host_finish else tf.float16 if spec.dtype == "float16" else tf.float32
    if run.host_finish:
        labels = (tf.as_dtype(classes.label_dtype), (batch_size, h, w))
    elif spec.label_mode == "onehot":
        labels = (tf.float32, (batch_size, h, w, classes.num_classes))
    else:
        labels = (tf.int32, (batch_size, h, w))
    table = {Output.IMAGE: (image_dtype, (batch_size, h, w, 3)), Output.LABELS: labels,
             Output.WEIGHT: (tf.float32, (batch_size, h, w)), Output.INDEX: (tf.int64, (batch_size,))}
    return tuple(table[o][0] for o in outputs), tuple(tf.TensorShape(table[o][1]) for o in outputs)


# ---------------------------------------------------------------- sharing the GPU with TensorFlow
def leave_gpu_memory_for_dali() -> None:
    """Let TensorFlow grow its GPU memory on demand, so that DALI finds room beside it.

    TensorFlow reserves nearly all of a GPU's memory when it first uses it, and DALI then runs out.
    Importing daliloader sets ``TF_FORCE_GPU_ALLOW_GROWTH=true`` (unless set), which covers a
    TensorFlow that starts later; this turns growth on for each GPU TensorFlow has not started yet, and
    warns, naming the fix, about one it already holds without growth or a memory limit.
    """
    growth_by_env = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true" and not GROWTH_DEFAULT_TOO_LATE
    for gpu in tf.config.list_physical_devices("GPU"):
        if tf.config.get_logical_device_configuration(gpu):
            continue  # a memory limit (or virtual GPUs): TF takes no more than that, and refuses growth
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # TensorFlow already initialised its GPUs: too late to change
            if growth_by_env or tf.config.experimental.get_memory_growth(gpu):
                continue
            warnings.warn(
                f"TensorFlow already holds {gpu.name.replace('/physical_device:', '')} without memory growth and "
                "may have reserved nearly all of its memory, leaving DALI too little. Call "
                "tf.config.experimental.set_memory_growth(gpu, True) for every GPU before anything runs on it "
                "(or import daliloader first, which sets TF_FORCE_GPU_ALLOW_GROWTH=true).",
                stacklevel=user_stacklevel())


# ---------------------------------------------------------------- device numbering
def _cuda_ordinals() -> list[int]:
    """The CUDA device under each of TensorFlow's GPUs, in TF's order (``/gpu:k`` -> ``[k]``).

    TF names a physical GPU by its CUDA ordinal (``/physical_device:GPU:3`` is CUDA device 3, the
    number DALI's ``device_id`` takes); its logical GPUs are the visible physical ones in physical
    order (whatever order ``set_visible_devices`` was given), each split into its logical
    configurations, if any.
    """
    visible = {d.name for d in tf.config.get_visible_devices("GPU")}
    ordinals = []
    for physical in tf.config.list_physical_devices("GPU"):
        if physical.name not in visible:
            continue
        configs = tf.config.get_logical_device_configuration(physical) or [None]
        if any(getattr(c, "experimental_device_ordinal", 0) for c in configs):
            raise SpecError(f"{physical.name}: its logical GPUs set experimental_device_ordinal, which reorders "
                            "TensorFlow's GPUs; daliloader cannot tell which CUDA device each one is. Leave the "
                            "ordinal at 0")
        ordinals += [int(physical.name.rsplit(":", 1)[1])] * len(configs)
    return ordinals


def cuda_ordinal(tf_device: str) -> int:
    """DALI's ``device_id`` for a TensorFlow GPU device name (``/job:.../device:GPU:1``)."""
    index = tf.DeviceSpec.from_string(tf_device).device_index or 0
    ordinals = _cuda_ordinals()
    if index >= len(ordinals):
        raise SpecError(f"{tf_device}: TensorFlow has {len(ordinals)} GPU(s); there is no GPU:{index}")
    return ordinals[index]


def tf_gpu(device_id: int) -> str:
    """The TensorFlow device name of CUDA device ``device_id``."""
    ordinals = _cuda_ordinals()
    if not ordinals:
        raise SpecError("backend='dali-gpu' hands its batches to TensorFlow on the GPU, but TensorFlow sees no GPU (a "
                        "TensorFlow built without CUDA, or GPUs hidden by tf.config.set_visible_devices). Install "
                        "TensorFlow with GPU support (pip install 'tensorflow[and-cuda]'), or use backend='dali-cpu'")
    if device_id not in ordinals:
        seen = ", ".join(map(str, sorted(set(ordinals))))
        raise SpecError(f"device_id={device_id}: CUDA device {device_id} is not visible to TensorFlow, which sees CUDA "
                        f"devices {seen} (after tf.config.set_visible_devices or CUDA_VISIBLE_DEVICES); pass one "
                        "of those: device_id numbers GPUs as DALI and CUDA do")
    return f"/gpu:{ordinals.index(device_id)}"
