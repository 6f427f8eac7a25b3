"""The OpenCV loader as a ``keras.utils.PyDataset`` (Keras 3's Sequence)."""

from __future__ import annotations

import keras

from .opencv import EpochBatches, OpenCVLoader


class SegmentationSequence(EpochBatches, keras.utils.PyDataset):
    """Batches of the spec decoded with OpenCV (see :class:`EpochBatches`), with Keras' ``workers``,
    ``use_multiprocessing`` and ``max_queue_size``."""

    def __init__(self, loader: OpenCVLoader, with_weights: bool, workers: int = 1,
                 use_multiprocessing: bool = False, max_queue_size: int = 10):
        keras.utils.PyDataset.__init__(self, workers=workers, use_multiprocessing=use_multiprocessing,
                                       max_queue_size=max_queue_size)
        EpochBatches.__init__(self, loader, with_weights)
