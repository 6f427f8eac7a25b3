"""The one process-wide default daliloader sets, on import: ``TF_FORCE_GPU_ALLOW_GROWTH=true`` (unless
already set), because TensorFlow otherwise reserves nearly all of a GPU's memory when it starts and
DALI, on the same GPU, runs out. TensorFlow reads the variable when it first starts a GPU, so the
default only helps a TensorFlow that has not started yet (see
:func:`daliloader.backends.dali_tf.leave_gpu_memory_for_dali`, which checks the rest).
"""

from __future__ import annotations

import os
import sys


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
