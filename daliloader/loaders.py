"""Public entry points: ``tf_dataset`` and ``keras_sequence`` (Keras), ``dali_pipeline`` (DALI alone)."""

from __future__ import annotations

import os

import numpy as np

from .data import SegmentationData
from .errors import DataError, SpecError
from .sampler import Sampler
from .spec import check_backend, check_batch_size, make_spec


def resolve_backend(backend: str, for_tensorflow: bool = False) -> str:
    """``"auto"`` -> ``"dali-gpu"`` when DALI sees a CUDA device (and, ``for_tensorflow``, TensorFlow sees
    a GPU to hand the batches over on), else ``"dali-cpu"``."""
    check_backend(backend)
    if backend != "auto":
        return backend
    if dali_gpu_count() == 0:
        return "dali-cpu"
    if for_tensorflow:
        import tensorflow as tf

        if not tf.config.list_physical_devices("GPU"):
            import warnings

            warnings.warn("backend='auto': DALI sees a GPU but TensorFlow does not (a TensorFlow without CUDA: "
                          "pip install 'tensorflow[and-cuda]'), so batches cannot arrive on the GPU; using dali-cpu",
                          stacklevel=3)
            return "dali-cpu"
    return "dali-gpu"


def dali_gpu_count() -> int:
    try:
        from nvidia.dali import backend as dali_backend
    except ImportError as e:
        raise ImportError(_missing_dali(e)) from e
    try:
        return dali_backend.GetCUDADeviceCount()
    except RuntimeError:  # no driver at all
        return 0


def _setup(data, batch_size, image_size, crop, label_mode, shuffle, seed, drop_remainder,
           shard_id, num_shards, spec_kwargs):
    """Validate the arguments every loader shares; returns the spec and the sampler."""
    if not isinstance(data, SegmentationData):
        raise DataError(f"data must be a SegmentationData (see SegmentationData.from_dirs), got {type(data).__name__}")
    spec = make_spec(image_size, crop=crop, label_mode=label_mode, **spec_kwargs)
    batch_size = check_batch_size(batch_size)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise SpecError(f"seed must be a non-negative integer or None, got {seed!r}")
    sampler = Sampler(len(data), batch_size, shuffle=shuffle, seed=seed, drop_remainder=drop_remainder,
                      shard_id=shard_id, num_shards=num_shards)
    return spec, sampler


def _graph_options(backend, device_id, num_threads, prefetch, seed, outputs, host_outputs=False):
    from .dali.graph import GraphOptions

    if backend == "dali-gpu":
        if dali_gpu_count() == 0:
            raise SpecError("backend='dali-gpu' needs a CUDA GPU that DALI can see; none was found "
                            "(use backend='dali-cpu', or 'auto' to choose)")
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
            raise SpecError(f"device_id is a CUDA device number (0, 1, ...), got {device_id!r}")
        return GraphOptions("gpu", device_id, num_threads, prefetch, seed, outputs, host_outputs=host_outputs)
    return GraphOptions("cpu", None, num_threads, prefetch, seed, outputs)


def tf_dataset(data: SegmentationData, batch_size: int = 8, image_size=(512, 512), crop: str = "random",
               label_mode: str = "onehot", shuffle: bool = True, seed: int | None = None,
               backend: str = "auto", *, drop_remainder: bool = True, num_threads: int | None = None,
               prefetch: int = 2, device_id: int = 0, shard_id: int = 0, num_shards: int = 1,
               **spec_kwargs):
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches for ``model.fit``.

    images: float32 ``[B, H, W, 3]`` in [0, 1] (or ``(x - mean) / std``; ``dtype`` float16/bfloat16);
    labels: float32 one-hot ``[B, H, W, C]`` or int32 ``[B, H, W]`` with ``ignore_index`` for
    unknown/padded pixels. With ``drop_remainder=False`` batches are ``(images, labels, weights)``
    with float32 weights ``[B, H, W]`` (per pixel, the shape Keras' per-pixel losses and metrics
    accept); padding samples in the last batch have weight 0, so ``model.evaluate`` sees every sample
    once and its ``weighted_metrics`` are exact (Keras' reported loss still divides by the batch size).

    The dataset's cardinality is the number of batches per epoch, so ``model.fit(ds, epochs=N)``
    needs no ``steps_per_epoch``; each epoch is reshuffled and the DALI pipeline is built once.
    Extra keyword arguments are preprocessing options: ``scale``, ``flip``, ``mean``, ``std``,
    ``dtype`` (see :func:`daliloader.spec.make_spec`).

    ``backend="tfdata"`` runs the same spec in plain ``tf.data`` + ``tf.image`` on the CPU; its epochs
    are tf.data's own (reshuffled at every ``iter()``) and its last batch with
    ``drop_remainder=False`` is simply smaller (weights all 1).

    ``backend="dali-gpu"`` runs DALI on CUDA device ``device_id`` (DALI's numbering) and places the
    dataset on the TensorFlow GPU that is that device; every tensor of a batch is on the GPU.
    ``dtype="bfloat16"`` is refused there (DALI has no bfloat16): pass float32 and let Keras' policy
    ``mixed_bfloat16`` cast in the first layer, or use float16.
    """
    backend = resolve_backend(backend, for_tensorflow=True)
    spec, sampler = _setup(data, batch_size, image_size, crop, label_mode, shuffle, seed, drop_remainder,
                           shard_id, num_shards, spec_kwargs)
    return _dataset(data, spec, sampler, backend, device_id, num_threads, prefetch, seed)


def _dataset(data, spec, sampler, backend, device_id, num_threads, prefetch, seed, placement=None,
             host_outputs=False):
    if backend == "tfdata":
        try:
            from .cpu.tfdata import tfdata_dataset
        except ImportError as e:
            raise ImportError(_missing_tf(e)) from e
        return tfdata_dataset(data, spec, sampler, with_weights=not sampler.drop_remainder)
    outputs = ("image", "labels") if sampler.drop_remainder else ("image", "labels", "weight")
    opts = _graph_options(backend, device_id, num_threads, prefetch, seed, outputs, host_outputs)
    if opts.outputs_on == "gpu" and spec.dtype == "bfloat16":
        raise SpecError("dtype='bfloat16' with backend='dali-gpu': DALI has no bfloat16 output, and a cast after a "
                        "GPU DALIDataset would be a tf.data map, which has no GPU kernel. Pass dtype='float32' and "
                        "keras.mixed_precision.set_global_policy('mixed_bfloat16'): Keras casts the inputs to "
                        "bfloat16 in the first layer. Or pass dtype='float16', which DALI outputs.")
    try:
        from .dali.tf import dali_dataset
    except ImportError as e:
        raise ImportError(_missing_tf(e)) from e
    return dali_dataset(data, spec, sampler, opts, placement)


def distribute(strategy, data: SegmentationData, global_batch_size: int, image_size=(512, 512),
               crop: str = "random", label_mode: str = "onehot", shuffle: bool = True, seed: int | None = None,
               backend: str = "auto", *, drop_remainder: bool = True, num_threads: int | None = None,
               prefetch: int = 2, **spec_kwargs):
    """``tf_dataset`` for a ``tf.distribute`` strategy: a distributed dataset for ``model.fit``.

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
    per GPU. The per-worker stream is endless: pass ``steps_per_epoch=dataset.steps_per_epoch`` (under
    MirroredStrategy Keras knows the epoch length).

    All shards share one seed (drawn here when ``seed`` is None), so their permutations agree and the
    shards are disjoint every epoch. Other arguments are those of :func:`tf_dataset`.
    """
    import tensorflow as tf

    backend = resolve_backend(backend, for_tensorflow=True)
    global_batch_size = check_batch_size(global_batch_size)
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise SpecError(f"global_batch_size={global_batch_size} must be a multiple of the {replicas} replicas "
                        "(each replica gets global_batch_size // replicas samples)")
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**31))
    devices = list(strategy.extended.worker_devices)
    if not isinstance(strategy, tf.distribute.MirroredStrategy) and len(devices) > 1:
        raise SpecError(f"{type(strategy).__name__} with {len(devices)} replicas on this worker: TensorFlow reads one "
                        "input pipeline per worker and hands its batches to the worker's replicas in turn, so each "
                        "replica would get a whole worker's batch and global_batch_size would not hold. Run one "
                        "worker process per GPU (CUDA_VISIBLE_DEVICES), or MirroredStrategy on a single host")
    per_replica = isinstance(strategy, tf.distribute.MirroredStrategy) and backend != "tfdata"
    if per_replica and num_threads is None:  # the replicas' pipelines share this host's cores
        num_threads = max(1, (os.cpu_count() or 1) // len(devices))
    steps: set[int] = set()  # batches per epoch of each pipeline, filled in by dataset_fn

    def dataset_fn(ctx: tf.distribute.InputContext):
        pipelines = ctx.num_input_pipelines
        batch = global_batch_size // pipelines
        spec, sampler = _setup(data, batch, image_size, crop, label_mode, shuffle, seed, drop_remainder,
                               ctx.input_pipeline_id, pipelines, dict(spec_kwargs))
        device = devices[ctx.input_pipeline_id] if per_replica else devices[0]
        device_id = 0
        if backend == "dali-gpu":
            from .dali.tf import cuda_ordinal

            device_id = cuda_ordinal(device)  # not TF's index, which skips GPUs hidden from TensorFlow
        ds = _dataset(data, spec, sampler, backend, device_id, num_threads, prefetch, seed,
                      placement=device if per_replica else None, host_outputs=not per_replica)
        steps.add(sampler.steps)
        if not per_replica and backend != "tfdata":
            # Per-worker input is read through a MultiDeviceIterator, which bypasses EpochDataset's
            # persistent iterator: hand it the endless stream; model.fit then needs steps_per_epoch.
            return ds._stream
        return ds

    if per_replica:
        options = tf.distribute.InputOptions(
            experimental_place_dataset_on_device=True, experimental_fetch_to_device=False,
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
    else:  # one dataset per worker, on its host; TF copies its batches to the replicas
        options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    dist = strategy.distribute_datasets_from_function(dataset_fn, options)
    dist.steps_per_epoch = min(steps)  # batches per epoch, the same on every replica
    return dist


def keras_sequence(data: SegmentationData, batch_size: int = 8, image_size=(512, 512), crop: str = "random",
                   label_mode: str = "onehot", shuffle: bool = True, seed: int | None = None, *,
                   drop_remainder: bool = True, workers: int = 1, use_multiprocessing: bool = False,
                   max_queue_size: int = 10, shard_id: int = 0, num_shards: int = 1, **spec_kwargs):
    """The same spec decoded with OpenCV on the CPU, as a ``keras.utils.PyDataset`` of numpy batches.

    Shapes, dtypes and epoch order (the shared sampler) are those of ``tf_dataset``; ``workers``,
    ``use_multiprocessing`` and ``max_queue_size`` are Keras' PyDataset options.
    """
    spec, sampler = _setup(data, batch_size, image_size, crop, label_mode, shuffle, seed, drop_remainder,
                           shard_id, num_shards, spec_kwargs)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SpecError(f"workers must be a positive integer, got {workers!r}")
    from .cpu.opencv import OpenCVLoader
    from .cpu.sequence import SegmentationSequence

    return SegmentationSequence(OpenCVLoader(data, spec, sampler), with_weights=not drop_remainder,
                                workers=workers, use_multiprocessing=use_multiprocessing,
                                max_queue_size=max_queue_size)


def dali_pipeline(data: SegmentationData, batch_size: int = 8, image_size=(512, 512), crop: str = "random",
                  label_mode: str = "onehot", shuffle: bool = True, seed: int | None = None,
                  backend: str = "auto", *, drop_remainder: bool = True, num_threads: int | None = None,
                  prefetch: int = 2, device_id: int = 0, shard_id: int = 0, num_shards: int = 1,
                  outputs=("image", "labels"), **spec_kwargs):
    """The same DALI pipeline without TensorFlow: returns ``(pipeline, steps_per_epoch)``.

    ``pipeline.run()`` returns one batch of ``outputs`` (any of ``image``, ``labels``, ``weight``,
    ``index``); consecutive runs walk through the epochs exactly as ``tf_dataset`` does.
    """
    backend = resolve_backend(backend)
    if backend == "tfdata":
        raise SpecError("dali_pipeline builds a DALI graph: use backend 'auto', 'dali-gpu' or 'dali-cpu'")
    spec, sampler = _setup(data, batch_size, image_size, crop, label_mode, shuffle, seed, drop_remainder,
                           shard_id, num_shards, spec_kwargs)
    opts = _graph_options(backend, device_id, num_threads, prefetch, seed, tuple(outputs))
    from .checks import PairGuard
    from .dali.graph import build_pipeline

    guard = PairGuard(data)
    pipe = build_pipeline(data, spec, sampler, opts, guard)
    pipe.build()
    pipe.run = guard.explaining(pipe.run)  # a decoder error names the files in flight
    return pipe, sampler.steps


def _missing_dali(e: ImportError) -> str:
    return (f"NVIDIA DALI is not installed ({e}). Install it with "
            "`pip install 'daliloader[cuda120]'` (or [cuda130] for a CUDA 13 driver).")


def _missing_tf(e: ImportError) -> str:
    return (f"tf_dataset needs TensorFlow and DALI's TensorFlow plugin ({e}). Install TensorFlow, then "
            "`pip install --no-build-isolation nvidia-dali-tf-plugin-cuda120==2.4.0`, or run `make install`.")
