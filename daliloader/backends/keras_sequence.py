"""The opencv backend as a ``keras.utils.PyDataset`` (Keras 3's Sequence): the "keras" product."""

from __future__ import annotations

import keras

from ..plan import Plan
from .opencv import EpochBatches, OpenCVLoader


class SegmentationSequence(EpochBatches, keras.utils.PyDataset):
    """A plan's batches decoded with OpenCV (see :class:`EpochBatches`), with Keras' ``workers``,
    ``use_multiprocessing`` and ``max_queue_size``.

    Each ``on_epoch_end`` starts the next epoch, as Keras' protocol says. Keras calls it at the start of
    ``fit`` too (its first epoch is then the sampler's second), and after ``steps_per_epoch`` batches of
    a longer pass whose rest its next epoch goes on reading, so such a pass mixes two epochs
    (docs/training.md). Waiting for a whole pass instead was tried and undone: a new ``fit()`` starts
    its reader at the first batch again, so repeated short ``fit()`` calls read the same batches."""

    def __init__(self, loader: OpenCVLoader, workers: int = 1, use_multiprocessing: bool = False,
                 max_queue_size: int = 10):
        keras.utils.PyDataset.__init__(self, workers=workers, use_multiprocessing=use_multiprocessing,
                                       max_queue_size=max_queue_size)
        EpochBatches.__init__(self, loader)


def sequence(plan: Plan, workers: int = 1, use_multiprocessing: bool = False,
             max_queue_size: int = 10) -> SegmentationSequence:
    return SegmentationSequence(OpenCVLoader(plan), workers, use_multiprocessing, max_queue_size)
