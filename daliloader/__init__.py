"""daliloader: GPU data loading for TensorFlow/Keras semantic segmentation with NVIDIA DALI.

Importing this package is cheap: TensorFlow and DALI are imported only by the backends that use them.
It sets one default: ``TF_FORCE_GPU_ALLOW_GROWTH=true`` (unless already set), because TensorFlow
otherwise reserves nearly all of a GPU's memory when it starts and DALI, on the same GPU, runs out.
"""

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


#: Whether the default below comes after TensorFlow started its GPUs, too late to apply
#: (see :func:`daliloader.backends.dali_tf.leave_gpu_memory_for_dali`).
_GROWTH_DEFAULT_TOO_LATE = "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ and _tensorflow_started()
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")

from .classes import ClassMap
from .data import SegmentationData
from .errors import DaliloaderError, DataError, LoadError, SpecError
from .spec import Preprocess, make_spec

__version__ = "0.1.0"
__all__ = ["ClassMap", "SegmentationData", "Preprocess", "make_spec", "tf_dataset", "keras_sequence", "dali_pipeline",
           "distribute", "check", "synthetic", "prepare", "DaliloaderError", "DataError", "SpecError", "LoadError"]


_LAZY = {"synthetic": ("daliloader.synthetic", None),
         "tf_dataset": ("daliloader.loaders", "tf_dataset"),
         "dali_pipeline": ("daliloader.loaders", "dali_pipeline"),
         "keras_sequence": ("daliloader.loaders", "keras_sequence"),
         "distribute": ("daliloader.loaders", "distribute"),
         "check": ("daliloader.checks", "check"),
         "prepare": ("daliloader.prepare", None)}  # the module: dl.prepare.prepare(data, out), .verify(out)


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'daliloader' has no attribute {name!r}")
