"""daliloader: GPU data loading for TensorFlow/Keras semantic segmentation with NVIDIA DALI.

Importing this package is cheap: TensorFlow and DALI are imported only by the backends that use them.
It sets process-wide defaults for TensorFlow and DALI (environment variables, each only where you have not
set it) and hooks their imports: :mod:`daliloader.environment` lists each and why.

Reading the code, in this order: :mod:`daliloader.spec` (what a user asks for), :mod:`daliloader.stages`
(each stage once, in numpy: the reference), :mod:`daliloader.plan` (a spec, a dataset and a sampler made
one plan), :mod:`daliloader.backends` (the registry), :mod:`daliloader.backends.opencv` (the shortest
backend: the stages in order), then :mod:`daliloader.backends.dali_graph` (the same stages as a DALI
graph) and :mod:`daliloader.loaders` (the public entry points). docs/design.md draws the layers.
"""

from typing import TYPE_CHECKING

from . import environment  # noqa: F401  (first: its defaults apply only to a TensorFlow not yet imported)
from .classes import ClassMap
from .data import SegmentationData
from .errors import DaliloaderError, DataError, LoadError, SpecError
from .plan import Plan, make_plan
from .spec import Preprocess, make_spec

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and IDEs (nothing imported at run time)
    from . import backends, losses, metrics, synthetic
    from .balance import class_frequencies, class_weights
    from .checks import check
    from .loaders import dali_pipeline, distribute, keras_sequence, tf_dataset
    from .predictions import Prediction, predict
    from .preparation import prepare
    from .previews import preview
    from .verification import verify

__version__ = "0.1.0"
__all__ = ["ClassMap", "SegmentationData", "Preprocess", "make_spec", "Plan", "make_plan", "tf_dataset",
           "keras_sequence", "dali_pipeline", "distribute", "check", "class_frequencies", "class_weights",
           "synthetic", "prepare", "verify", "backends", "losses", "metrics", "predict", "Prediction", "preview",
           "DaliloaderError", "DataError", "SpecError", "LoadError"]


_LAZY = {"synthetic": ("daliloader.synthetic", None),
         "tf_dataset": ("daliloader.loaders", "tf_dataset"),
         "dali_pipeline": ("daliloader.loaders", "dali_pipeline"),
         "keras_sequence": ("daliloader.loaders", "keras_sequence"),
         "distribute": ("daliloader.loaders", "distribute"),
         "check": ("daliloader.checks", "check"),
         "class_frequencies": ("daliloader.balance", "class_frequencies"),
         "class_weights": ("daliloader.balance", "class_weights"),
         "backends": ("daliloader.backends", None),  # the registry: dl.backends.BACKENDS
         "prepare": ("daliloader.preparation", "prepare"),
         "verify": ("daliloader.verification", "verify"),
         "losses": ("daliloader.losses", None),  # Keras losses with class weights
         "metrics": ("daliloader.metrics", None),  # dl.metrics.MeanIoU
         "preview": ("daliloader.previews", "preview"),
         "predict": ("daliloader.predictions", "predict"),
         "Prediction": ("daliloader.predictions", "Prediction")}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'daliloader' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
