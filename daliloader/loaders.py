"""Public entry points: ``tf_dataset`` and ``distribute`` (TensorFlow), ``keras_sequence`` (Keras),
``dali_pipeline`` (DALI alone).

Each one turns its arguments into a :class:`~daliloader.plan.Plan` (or takes one made with
:func:`~daliloader.plan.make_plan`) and asks the backend registry (:mod:`daliloader.backends`) to
build its product from it. Keyword options beyond those named here are :func:`~daliloader.plan.make_plan`'s
(its signature lists them all: the preprocessing, ``training``, ``drop_remainder``, the shards, the
threads).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from . import backends
from .backends import Product
from .errors import BatchTooLarge, OptionError, SpecError
from .parallel import cores
from .parts import in_bucket
from .plan import BATCH_SIZE, LABEL_MODE, Plan, make_plan, plan_of, with_keywords
from .spec import Crop, ImageSize, LabelMode, check_count

if TYPE_CHECKING:  # (typing.Unpack is Python 3.11's: annotations only, never evaluated at run time)
    from typing import Unpack

    import keras
    import nvidia.dali
    import tensorflow as tf

    from .data import SegmentationData
    from .keywords import (
        DaliPipelineOptions,
        DistributeOptions,
        KerasSequenceOptions,
        TfDatasetOptions,
    )

#: Options only the DALI backends use, which keras_sequence (OpenCV) refuses rather than ignores.
DALI_OPTIONS = ("num_threads", "prefetch", "device_id")


#: A loader, whose type the decorator below keeps (type checkers then read its typed ``**options``).
Loader = TypeVar("Loader", bound=Callable)


def shows_options(*left_out: str) -> Callable[[Loader], Loader]:
    """Give a loader the signature it really has: its own parameters and, instead of ``**options``, every
    keyword option of :func:`~daliloader.plan.make_plan` (less ``left_out``), so that ``help()``,
    ``inspect.signature`` and interactive completion list them."""
    def decorate(fn: Loader) -> Loader:
        named = set(inspect.signature(fn).parameters) | set(left_out) | {"caller", "outputs"}
        fn.__signature__ = with_keywords(fn, [p for p in inspect.signature(make_plan).parameters.values()
                                              if p.kind is p.KEYWORD_ONLY and p.name not in named])
        return fn
    return decorate



@shows_options()
def tf_dataset(data: SegmentationData | Plan, batch_size: int = BATCH_SIZE, image_size: ImageSize | None = None,
               crop: Crop | None = None, label_mode: LabelMode = LABEL_MODE, shuffle: bool | None = None,
               seed: int | None = None, backend: str = "auto", **options: Unpack[TfDatasetOptions]) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches for ``model.fit``.

    ``training=False`` is evaluation mode: whole images (or ``crop="fit"`` with an ``image_size``), the
    dataset's order, every sample once, nothing drawn at random (see :func:`~daliloader.plan.make_plan`
    for every default). With ``drop_remainder=False`` (evaluation) batches are ``(images, labels,
    weights)`` with float32 weights ``[B, H, W]`` (per pixel, the shape Keras' per-pixel losses and
    metrics accept); padding samples in the last batch and ignored pixels have weight 0, so
    ``model.evaluate`` sees every sample once and its ``weighted_metrics`` (:mod:`daliloader.metrics`)
    count every labelled pixel once. The losses of :mod:`daliloader.losses` divide each batch's loss by
    its labelled pixels, padding samples left out; Keras then averages the batches' losses weighted by
    their size, padding included, so a padded last batch counts a little more than its real samples.
    Class weights belong to the loss (:mod:`daliloader.losses`).

    The dataset's cardinality is the number of batches per epoch, so ``model.fit(ds, epochs=N)`` needs
    no ``steps_per_epoch``; each epoch is reshuffled and, where the dataset itself is read (``fit``, a
    loop), one DALI pipeline serves every training epoch (``daliloader.backends.dali_tf`` says when
    another is built).

    Args:
        data: a :class:`~daliloader.data.SegmentationData`, or a plan from ``make_plan`` (then the other
            arguments stay at their defaults).
        batch_size: samples per batch.
        image_size: ``(height, width)`` of the outputs, or one int for squares; None: the images' own
            size, which they must all share.
        crop: ``"random"``, ``"center"``, ``"resize"`` or ``"fit"``; None: ``"random"`` in training,
            ``"fit"`` (``"center"`` without ``image_size``) in evaluation.
        label_mode: ``"onehot"`` (float32 ``[B, H, W, C]``; Keras' ``"categorical"`` is read as ``"onehot"``)
            or ``"int"`` (int32 ``[B, H, W]`` with ``ignore_index`` for unknown and padded pixels).
        shuffle: reshuffle every epoch; None: in training only.
        seed: fixes the order and the draws (None: a new one per run).
        backend: ``"auto"`` (dali-gpu where DALI and TensorFlow see a GPU, else dali-cpu),
            ``"dali-gpu"`` (DALI on CUDA device ``device_id``, DALI's numbering; the dataset on the
            TensorFlow GPU that is that device, every tensor of a batch there; ``dtype="bfloat16"`` is
            refused: pass float32 and let Keras' ``mixed_bfloat16`` policy cast in the first layer, or
            use float16), ``"dali-cpu"`` or ``"tfdata"`` (plain ``tf.data`` + ``tf.image`` on the CPU,
            its epochs tf.data's own, reshuffled at every ``iter()``); see
            :data:`daliloader.backends.BACKENDS`.
        **options: the keyword options of :func:`~daliloader.plan.make_plan` (``training``, the
            preprocessing options and the declared stages' options, ``drop_remainder``, sharding, DALI's
            threads and prefetch), which the signature lists.

    Returns:
        A ``tf.data.Dataset`` of ``(images, labels)`` batches (``(images, labels, weights)`` with
        ``drop_remainder=False``): images float32 ``[B, H, W, 3]`` in [0, 1] (or ``(x - mean) / std``;
        float16/bfloat16 with ``dtype``), labels as ``label_mode`` says.

    Raises:
        daliloader.errors.SpecError: an argument that is not valid, named with what it takes.
        daliloader.errors.MissingDependency: a ``backend`` that needs a package that is not installed.
        daliloader.errors.DataError: data that cannot be read as asked (mixed image sizes without an
            ``image_size``, no pairs), named.
        daliloader.errors.LoadError: while iterating, a file that cannot be decoded, named with what
            to do.
    """
    plan = plan_of(data, "tf_dataset", batch_size=batch_size, image_size=image_size, crop=crop,
                   label_mode=label_mode, shuffle=shuffle, seed=seed, **options)
    chosen = backends.resolve(backend, Product.TF_DATA, plan)
    _refuse_dali_options("tf_dataset", chosen, data, options, AUTOTUNED)
    return chosen.build(Product.TF_DATA, plan)


#: What the backends without DALI do instead of the DALI options, said where one is given to them.
KERAS_WORKERS = "the OpenCV loader runs on Keras' workers (workers=, use_multiprocessing=)"
AUTOTUNED = "tf.data sizes its own parallelism and prefetch (AUTOTUNE), on the CPU"


def _plan_dali_options(data) -> dict:
    """The DALI options a plan passed as ``data`` fixes, where they are not the defaults."""
    if not isinstance(data, Plan):
        return {}
    return {f.name: getattr(data, f.name) for f in fields(Plan)
            if f.name in DALI_OPTIONS and getattr(data, f.name) != f.default}


def _refuse_dali_options(caller: str, backend: backends.Backend, data, options: dict, instead: str) -> None:
    """Refuse the DALI backends' own options (:data:`DALI_OPTIONS`) given for a backend without DALI, which
    would ignore them: passed in ``options``, or fixed by a plan passed as ``data``; ``instead``: what that
    backend does."""
    options = {**_plan_dali_options(data), **options}
    given = sorted(n for n in DALI_OPTIONS if options.get(n) is not None)  # (None: not given)
    if given and not backend.uses_dali:
        raise SpecError(f"{caller}() got {given[0]}=, an option of the DALI backends, which backend={backend.name!r} "
                        f"does not take: {instead}")


@shows_options(*DALI_OPTIONS)
def keras_sequence(data: SegmentationData | Plan, batch_size: int = BATCH_SIZE, image_size: ImageSize | None = None,
                   crop: Crop | None = None, label_mode: LabelMode = LABEL_MODE, shuffle: bool | None = None,
                   seed: int | None = None, *, workers: int = 1, use_multiprocessing: bool = False,
                   max_queue_size: int = 10, **options: Unpack[KerasSequenceOptions]) -> keras.utils.PyDataset:
    """The same spec decoded with OpenCV on the CPU, as a ``keras.utils.PyDataset`` of numpy batches.

    Shapes and dtypes are those of :func:`tf_dataset`, and the order is drawn by the same sampler as the
    DALI backends' (Keras' calls of ``on_epoch_end`` decide which of its epochs a pass reads:
    ``daliloader.backends.keras_sequence.SegmentationSequence``).

    Args:
        data: a :class:`~daliloader.data.SegmentationData`, or a plan from ``make_plan``.
        batch_size: samples per batch.
        image_size: as :func:`tf_dataset`'s.
        crop: as :func:`tf_dataset`'s.
        label_mode: as :func:`tf_dataset`'s.
        shuffle: as :func:`tf_dataset`'s.
        seed: as :func:`tf_dataset`'s.
        workers: Keras' ``PyDataset`` workers (threads, or processes with ``use_multiprocessing``).
        use_multiprocessing: Keras' ``PyDataset`` option.
        max_queue_size: Keras' ``PyDataset`` option.
        **options: the keyword options of :func:`~daliloader.plan.make_plan` but DALI's own
            (``num_threads``, ``prefetch``, ``device_id``), which are refused.

    Returns:
        A ``keras.utils.PyDataset`` of ``len()`` batches per epoch, ``[i]`` batch ``i`` as numpy arrays.

    Raises:
        daliloader.errors.SpecError: an argument that is not valid, or an option of the DALI backends.
        daliloader.errors.MissingDependency: Keras or OpenCV is not installed.
        daliloader.errors.DataError: data that cannot be read as asked, named.
        daliloader.errors.LoadError: while reading a batch, a file that cannot be decoded, named.
    """
    check_count("workers", workers)
    _refuse_dali_options("keras_sequence", backends.BACKENDS["opencv"], data, options, KERAS_WORKERS)
    plan = plan_of(data, "keras_sequence", batch_size=batch_size, image_size=image_size, crop=crop,
                   label_mode=label_mode, shuffle=shuffle, seed=seed, **options)
    if use_multiprocessing and in_bucket(plan.data.images[0]):
        raise SpecError("use_multiprocessing=True with data in a bucket: Keras forks its worker processes, and the S3 "
                        "client, already started in this process, hangs in a forked one. Pass workers=N without "
                        "use_multiprocessing: the threads fetch in parallel (a fetch releases the GIL)")
    return backends.resolve("auto", Product.KERAS).build(Product.KERAS, plan, workers=workers,
                                                   use_multiprocessing=use_multiprocessing,
                                                   max_queue_size=max_queue_size)


@shows_options()
def dali_pipeline(data: SegmentationData | Plan, batch_size: int = BATCH_SIZE, image_size: ImageSize | None = None,
                  crop: Crop | None = None, label_mode: LabelMode = LABEL_MODE, shuffle: bool | None = None,
                  seed: int | None = None, backend: str = "auto", *, outputs=None,
                  **options: Unpack[DaliPipelineOptions]) -> tuple[nvidia.dali.Pipeline, int]:
    """The same DALI pipeline without TensorFlow.

    Consecutive ``pipeline.run()`` calls walk through the epochs exactly as :func:`tf_dataset` does.

    Args:
        data: a :class:`~daliloader.data.SegmentationData`, or a plan from ``make_plan``.
        batch_size: samples per batch.
        image_size: as :func:`tf_dataset`'s.
        crop: as :func:`tf_dataset`'s.
        label_mode: as :func:`tf_dataset`'s.
        shuffle: as :func:`tf_dataset`'s.
        seed: as :func:`tf_dataset`'s.
        backend: ``"auto"``, ``"dali-gpu"`` or ``"dali-cpu"``.
        outputs: what ``pipeline.run()`` returns, any of ``"image"``, ``"labels"``, ``"weight"``,
            ``"index"`` (the sample index, -1 for padding); None: what :func:`tf_dataset`'s batches hold,
            ``(image, labels)``, and ``weight`` with ``drop_remainder=False``, as in evaluation.
        **options: the keyword options of :func:`~daliloader.plan.make_plan`.

    Returns:
        The built DALI pipeline and its batches per epoch, as ``(pipeline, steps_per_epoch)``.

    Raises:
        daliloader.errors.SpecError: an argument that is not valid, named with what it takes.
        daliloader.errors.MissingDependency: a ``backend`` that needs a package that is not installed.
        daliloader.errors.DataError: data that cannot be read as asked, named.
        daliloader.errors.LoadError: from ``pipeline.run()``, a decoder failure, naming the files in
            flight.
    """
    plan = plan_of(data, "dali_pipeline", batch_size=batch_size, image_size=image_size, crop=crop,
                   label_mode=label_mode, shuffle=shuffle, seed=seed, outputs=outputs, **options)
    return backends.resolve(backend, Product.DALI, plan).build(Product.DALI, plan)


@shows_options("shard_id", "num_shards", "device_id")
def distribute(strategy: tf.distribute.Strategy, data: SegmentationData, global_batch_size: int | None = None,
               image_size: ImageSize | None = None, crop: Crop | None = None, label_mode: LabelMode = LABEL_MODE,
               shuffle: bool | None = None, seed: int | None = None, backend: str = "auto",
               **options: Unpack[DistributeOptions]) -> tf.distribute.DistributedDataset:
    """:func:`tf_dataset` for a ``tf.distribute`` strategy: a distributed dataset for ``model.fit``.

    ``MirroredStrategy``: one pipeline per replica, built on that replica's device (a DALI GPU pipeline
    on the CUDA device behind the replica's GPU), reading shard ``replica`` of ``replicas`` with batch
    ``global_batch_size // replicas`` and, unless ``num_threads`` says otherwise, its share of the
    host's cores. Datasets are placed on their device and not copied again
    (``InputReplicationMode.PER_REPLICA``, ``experimental_place_dataset_on_device``).
    ``MultiWorkerMirroredStrategy`` allows one input pipeline per worker (host), read through a
    ``MultiDeviceIterator``, which has CPU kernels only: each worker reads shard ``worker`` of
    ``workers`` with batch ``global_batch_size // workers``; a dali-gpu pipeline runs on the worker's
    GPU and hands its batches over on the host, and TensorFlow copies them to the replica. A worker
    with several replicas is refused: TensorFlow would hand each replica a whole per-worker batch in
    turn (it does not split batches), so ``global_batch_size`` would not hold; run one worker process
    per GPU. The per-worker stream is endless in training: pass
    ``steps_per_epoch=dataset.steps_per_epoch`` (under MirroredStrategy Keras knows the epoch length); in
    evaluation it is one epoch. All shards share one seed (drawn here when ``seed`` is None), so their
    permutations agree and the shards are disjoint every epoch.

    Args:
        strategy: a ``tf.distribute`` strategy (``MirroredStrategy``, ``MultiWorkerMirroredStrategy``, or
            the default one, read as one worker of ``MultiWorkerMirroredStrategy``).
        data: a :class:`~daliloader.data.SegmentationData` (not a plan: one is made per replica or worker).
        global_batch_size: the batch of all replicas together, a multiple of their number.
        image_size: as :func:`tf_dataset`'s.
        crop: as :func:`tf_dataset`'s.
        label_mode: as :func:`tf_dataset`'s.
        shuffle: as :func:`tf_dataset`'s.
        seed: as :func:`tf_dataset`'s (None: one drawn here, shared by the shards).
        backend: as :func:`tf_dataset`'s.
        **options: the keyword options of :func:`~daliloader.plan.make_plan` but those set per replica or
            worker (``shard_id``, ``num_shards``, ``device_id``), which are refused.

    Returns:
        A ``tf.distribute.DistributedDataset`` with ``steps_per_epoch``, the batches per epoch.

    Raises:
        daliloader.errors.SpecError: an argument that is not valid, a ``batch_size`` instead of
            ``global_batch_size``, or several replicas on one worker without a DALI backend.
        daliloader.errors.MissingDependency: a ``backend`` that needs a package that is not installed.
        daliloader.errors.DataError: data that cannot be read as asked, named.
        daliloader.errors.LoadError: while iterating, a file that cannot be decoded, named.
    """
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.Strategy):
        raise SpecError(f"distribute(strategy, data, ...) takes a tf.distribute strategy first (e.g. "
                        f"tf.distribute.MirroredStrategy()), got {type(strategy).__name__}; for one device, use "
                        "tf_dataset(data, ...)")
    global_batch_size = _refuse_distributed(strategy, data, global_batch_size, options)
    drawn = seed is None  # (one process's draw: workers in other processes would draw others)
    if drawn:
        seed = int(np.random.SeedSequence().entropy % (2**31))
    chosen = backends.resolve(backend, Product.TF_DATA)
    _refuse_dali_options("distribute", chosen, data, options, AUTOTUNED)
    devices = _worker_devices(strategy, chosen)
    # backends that can place a pipeline on each replica's device get one per replica; otherwise TF
    # reads one per worker
    per_replica = isinstance(strategy, tf.distribute.MirroredStrategy) and chosen.per_replica
    if not per_replica and len(devices) > 1:
        raise SpecError(f"{type(strategy).__name__} with {len(devices)} replicas on this worker and backend="
                        f"{chosen.name!r}: TensorFlow reads one input pipeline per worker and hands its batches to the "
                        "worker's replicas in turn, so each replica would get a whole worker's batch and "
                        "global_batch_size would not hold. Use a DALI backend under MirroredStrategy (one pipeline "
                        "per replica), or run one worker process per GPU (CUDA_VISIBLE_DEVICES)")
    if per_replica and options.get("num_threads") is None:  # the replicas' pipelines share this host's cores
        options["num_threads"] = max(1, cores() // len(devices))
    steps: set[int] = set()  # batches per epoch of each pipeline, filled in by dataset_fn

    def dataset_fn(ctx: tf.distribute.InputContext):
        pipelines = ctx.num_input_pipelines
        if drawn and not per_replica and pipelines > 1:  # one input pipeline per worker process
            raise SpecError(f"distribute() under {type(strategy).__name__} with {pipelines} workers needs seed=: "
                            "each worker process would draw its own, and their shards would overlap and miss "
                            "samples. Pass every worker the same seed")
        plan = _shard_plan(data, strategy, global_batch_size, ctx, image_size=image_size, crop=crop,
                           label_mode=label_mode, shuffle=shuffle, seed=seed, **options)
        device = devices[ctx.input_pipeline_id] if per_replica else devices[0]
        if chosen.gpu:
            from .backends.dali_tf import cuda_ordinal

            # not TF's device index, which skips GPUs hidden from TensorFlow
            plan = replace(plan, device_id=cuda_ordinal(device))
        steps.add(plan.steps)
        if per_replica:
            return chosen.build(Product.TF_DATA, replace(plan, placement=device))
        # Per-worker input is read through a MultiDeviceIterator (CPU kernels only), which bypasses the
        # persistent iterator of tf_dataset's epochs: DALI hands it the endless stream, on the host.
        plan = replace(plan, host_outputs=True)
        return chosen.build(Product.STREAM if Product.STREAM in chosen.builds else Product.TF_DATA, plan)

    dist = strategy.distribute_datasets_from_function(dataset_fn, _input_options(per_replica))
    dist.steps_per_epoch = min(steps)  # batches per epoch, the same on every replica
    return dist


def _shard_plan(data, strategy, global_batch_size: int, ctx, **options):
    """The plan of input pipeline ``ctx.input_pipeline_id`` of ``ctx.num_input_pipelines`` (one shard each),
    its refusals said of what ``distribute`` was given (it sets the shards and the batch itself)."""
    pipelines = ctx.num_input_pipelines
    try:
        return plan_of(data, "distribute", batch_size=global_batch_size // pipelines, shard_id=ctx.input_pipeline_id,
                       num_shards=pipelines, **options)
    except BatchTooLarge as e:  # said of distribute's own argument
        raise SpecError(f"distribute() got global_batch_size={global_batch_size}, which gives each of the "
                        f"{pipelines} input pipelines (one shard each) {e.said_of('global_batch_size')}") from None
    except OptionError as e:  # num_shards is distribute's to set: said of what sets it
        if e.option != "num_shards":
            raise
        raise SpecError(f"distribute() under {type(strategy).__name__} reads {len(data)} samples through "
                        f"{pipelines} input pipelines (one per replica or worker), one shard each, and each shard "
                        "needs at least one sample: use fewer replicas or workers, or more data") from None


def _worker_devices(strategy, backend: backends.Backend) -> list[str]:
    """The devices of this worker's replicas: the strategy's; the default strategy (no tf.distribute) lists
    none, and runs on the GPU where the backend decodes there, else on the CPU."""
    try:
        return list(strategy.extended.worker_devices)
    except RuntimeError:  # "worker_devices() method unsupported by default tf.distribute.Strategy"
        return ["/gpu:0" if backend.gpu else "/cpu:0"]


def _refuse_distributed(strategy, data, global_batch_size, options: dict) -> int:
    """The checked ``global_batch_size``; refused: a plan, a ``batch_size``, and the options that
    ``distribute`` sets itself for each replica or worker."""
    if isinstance(data, Plan):
        raise SpecError("distribute(strategy, data, ...) takes a SegmentationData, not a plan: it plans one input "
                        "pipeline per replica or worker itself")
    if "batch_size" in options or global_batch_size is None:
        got = f"batch_size={options['batch_size']!r}" if "batch_size" in options else "no global_batch_size"
        raise SpecError(f"distribute() got {got}: it takes global_batch_size=, the batch of all replicas together "
                        f"(each of the strategy's {strategy.num_replicas_in_sync} replicas gets global_batch_size // "
                        "replicas samples), e.g. global_batch_size=8 * strategy.num_replicas_in_sync")
    fixed = sorted(set(options) & {"shard_id", "num_shards", "device_id", "outputs"})
    if fixed:
        raise SpecError(f"distribute() got {fixed[0]}=, which it sets itself for each replica or worker (shards from "
                        "the strategy's input pipelines, devices from its replicas)")
    global_batch_size = check_count("global_batch_size", global_batch_size)
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise SpecError(f"global_batch_size={global_batch_size} must be a multiple of the {replicas} replicas "
                        "(each replica gets global_batch_size // replicas samples)")
    return global_batch_size


def _input_options(per_replica: bool):
    """One dataset per replica, placed on its device and not copied again; else one per worker, on its
    host, whose batches TensorFlow copies to the replicas."""
    import tensorflow as tf

    if per_replica:
        return tf.distribute.InputOptions(
            experimental_place_dataset_on_device=True, experimental_fetch_to_device=False,
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
    return tf.distribute.InputOptions(experimental_fetch_to_device=True)
