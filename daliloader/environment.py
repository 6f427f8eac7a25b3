"""The process-wide defaults daliloader sets on import, each only where the user has not set it, and
where it keeps what it generates (:func:`cache_dir`):

* ``TF_FORCE_GPU_ALLOW_GROWTH=true``: TensorFlow otherwise reserves nearly all of a GPU's memory when it
  starts and DALI, on the same GPU, runs out. TensorFlow reads the variable when it first starts a GPU,
  so the default only helps a TensorFlow that has not started yet (see
  ``daliloader.backends.dali_tf.leave_gpu_memory_for_dali``, which checks the rest).
* ``DALI_NVIMGCODEC_LOG_LEVEL=1``: DALI's own switch for what nvImageCodec (its image decoders) prints
  to stderr: 1 keeps errors, DALI's default 2 adds warnings, which in normal use are lines a user
  cannot act on, printed once per picture into Keras' progress bar (the CUDA 12 build's "ROI decode
  with fancy upsampling" warning was 76 lines in two epochs). DALI reads it when it creates a decoder.
  ``daliloader --verbose`` restores DALI's default (:func:`show_native_warnings`).
* ``TF_CPU_ALLOCATOR_USE_BFC=true``: TensorFlow's own caching allocator for CPU memory instead of the
  system's, which gives each new large tensor fresh pages from the kernel: a batch of one-hot labels
  (32 MB per 512x512 sample of 32 classes) then costs its page faults at every step, several times
  the work of writing it (docs/benchmarks.md, "One-hot labels and memory"). TensorFlow reads the
  variable when it makes its CPU allocator, so the default only helps a TensorFlow not yet imported
  (``import daliloader`` first). Set it to ``false`` to keep the system's allocator.
* ``TF_CPP_MIN_LOG_LEVEL=1``: TensorFlow's switch for its own log lines; 1 drops the informational ones
  (devices created, XLA and cuDNN loaded, CPU instructions available: docs/gpu.md, "On an H200") and
  keeps warnings and errors. Lines TensorFlow writes before its
  logging is set up ("All log messages before absl::InitializeLog() ...") pass whatever it says.
  Read when TensorFlow is imported, so again only for a TensorFlow not yet imported.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _tensorflow_started() -> bool:
    """Whether TensorFlow has started its devices already (it reads TF_FORCE_GPU_ALLOW_GROWTH then)."""
    if "tensorflow" not in sys.modules:
        return False
    try:
        from tensorflow.python.eager import context

        return bool(context.context()._initialized)
    except Exception:  # an unknown TensorFlow: assume the worst
        return True


#: Whether the default below comes after TensorFlow started its GPUs, too late to apply.
GROWTH_DEFAULT_TOO_LATE = "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ and _tensorflow_started()
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")

#: TensorFlow's caching allocator for CPU tensors (see the module's docstring).
CPU_ALLOCATOR = "TF_CPU_ALLOCATOR_USE_BFC"
#: TensorFlow's log level (see the module's docstring).
TF_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
if "tensorflow" not in sys.modules:
    os.environ.setdefault(CPU_ALLOCATOR, "true")
    os.environ.setdefault(TF_LOG_LEVEL, "1")

#: DALI's variable for nvImageCodec's log level (1: errors, 2: warnings too, DALI's default; up to 5).
NVIMGCODEC_LOG_LEVEL = "DALI_NVIMGCODEC_LOG_LEVEL"
#: Whether the nvImageCodec level is daliloader's default rather than the user's.
NVIMGCODEC_LEVEL_DEFAULTED = NVIMGCODEC_LOG_LEVEL not in os.environ
os.environ.setdefault(NVIMGCODEC_LOG_LEVEL, "1")


def show_native_warnings() -> None:
    """Let the native libraries' warnings through again (``--verbose``): DALI's default level for
    nvImageCodec, unless the user chose one. Decoders created from now on follow it."""
    if NVIMGCODEC_LEVEL_DEFAULTED:
        os.environ[NVIMGCODEC_LOG_LEVEL] = "2"


def cache_dir() -> Path:
    """Where generated data lives: $DALILOADER_CACHE, or ~/.cache/daliloader."""
    return Path(os.environ.get("DALILOADER_CACHE", Path.home() / ".cache" / "daliloader"))


def cache_way_out() -> str:
    """What to do when the cache folder cannot be written: the end of the messages about it."""
    return f"set DALILOADER_CACHE to a writable folder with free space (the cache is now {cache_dir()})"
