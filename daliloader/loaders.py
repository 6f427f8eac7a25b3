"""Public entry points: ``tf_dataset`` and ``keras_sequence`` (Keras), ``dali_pipeline`` (DALI alone)."""

from __future__ import annotations

from .data import SegmentationData
from .errors import DataError, SpecError
from .sampler import Sampler
from .spec import check_backend, check_batch_size, make_spec


def resolve_backend(backend: str) -> str:
    """``"auto"`` -> ``"dali-gpu"`` when DALI sees a CUDA device, else ``"dali-cpu"``."""
    check_backend(backend)
    if backend != "auto":
        return backend
    return "dali-gpu" if dali_gpu_count() > 0 else "dali-cpu"


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


def _graph_options(backend, device_id, num_threads, prefetch, seed, outputs):
    from .dali.graph import GraphOptions

    if backend == "dali-gpu":
        if dali_gpu_count() == 0:
            raise SpecError("backend='dali-gpu' needs a CUDA GPU that DALI can see; none was found "
                            "(use backend='dali-cpu', or 'auto' to choose)")
        return GraphOptions("gpu", device_id or 0, num_threads, prefetch, seed, outputs)
    return GraphOptions("cpu", None, num_threads, prefetch, seed, outputs)


def tf_dataset(data: SegmentationData, batch_size: int = 8, image_size=(512, 512), crop: str = "random",
               label_mode: str = "onehot", shuffle: bool = True, seed: int | None = None,
               backend: str = "auto", *, drop_remainder: bool = True, num_threads: int | None = None,
               prefetch: int = 2, device_id: int = 0, shard_id: int = 0, num_shards: int = 1,
               **spec_kwargs):
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches for ``model.fit``.

    images: float32 ``[B, H, W, 3]`` in [0, 1] (or ``(x - mean) / std``; ``dtype`` float16/bfloat16);
    labels: float32 one-hot ``[B, H, W, C]`` or int32 ``[B, H, W]`` with ``ignore_index`` for
    unknown/padded pixels. With ``drop_remainder=False`` batches are ``(images, labels, weights)``;
    padding samples in the last batch have weight 0, so ``model.evaluate`` counts every sample once.

    The dataset's cardinality is the number of batches per epoch, so ``model.fit(ds, epochs=N)``
    needs no ``steps_per_epoch``; each epoch is reshuffled and the DALI pipeline is built once.
    Extra keyword arguments are preprocessing options: ``scale``, ``flip``, ``mean``, ``std``,
    ``dtype`` (see :func:`daliloader.spec.make_spec`).

    ``backend="tfdata"`` runs the same spec in plain ``tf.data`` + ``tf.image`` on the CPU; its epochs
    are tf.data's own (reshuffled at every ``iter()``) and its last batch with
    ``drop_remainder=False`` is simply smaller (weights all 1).
    """
    backend = resolve_backend(backend)
    spec, sampler = _setup(data, batch_size, image_size, crop, label_mode, shuffle, seed, drop_remainder,
                           shard_id, num_shards, spec_kwargs)
    if backend == "tfdata":
        try:
            from .cpu.tfdata import tfdata_dataset
        except ImportError as e:
            raise ImportError(_missing_tf(e)) from e
        return tfdata_dataset(data, spec, sampler, with_weights=not drop_remainder)
    outputs = ("image", "labels") if drop_remainder else ("image", "labels", "weight")
    opts = _graph_options(backend, device_id, num_threads, prefetch, seed, outputs)
    try:
        from .dali.tf import dali_dataset
    except ImportError as e:
        raise ImportError(_missing_tf(e)) from e
    return dali_dataset(data, spec, sampler, opts)


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
    from .dali.graph import build_pipeline

    pipe = build_pipeline(data, spec, sampler, opts)
    pipe.build()
    return pipe, sampler.steps


def _missing_dali(e: ImportError) -> str:
    return (f"NVIDIA DALI is not installed ({e}). Install it with "
            "`pip install 'daliloader[cuda120]'` (or [cuda130] for a CUDA 13 driver).")


def _missing_tf(e: ImportError) -> str:
    return (f"tf_dataset needs TensorFlow and DALI's TensorFlow plugin ({e}). Install TensorFlow, then "
            "`pip install --no-build-isolation nvidia-dali-tf-plugin-cuda120==2.4.0`, or run `make install`.")
