"""The OpenCV loader as a ``keras.utils.PyDataset`` (Keras 3's Sequence)."""

from __future__ import annotations

import keras
import numpy as np

from .opencv import OpenCVLoader


class SegmentationSequence(keras.utils.PyDataset):
    """Batches of the spec decoded with OpenCV. ``len()`` is batches per epoch; each epoch reshuffles.

    Batch ``i`` of epoch ``e`` is the sampler's step ``e * len(self) + i``: the order comes from the
    same :class:`~daliloader.sampler.Sampler` as the DALI backends, and the random crops of a batch
    are seeded by its step, so ``seq[i]`` is reproducible and safe to compute in any worker.
    """

    def __init__(self, loader: OpenCVLoader, with_weights: bool, workers: int = 1,
                 use_multiprocessing: bool = False, max_queue_size: int = 10):
        super().__init__(workers=workers, use_multiprocessing=use_multiprocessing, max_queue_size=max_queue_size)
        self.loader = loader
        self.with_weights = with_weights
        self.epoch = 0

    def __len__(self) -> int:
        return self.loader.sampler.steps

    def __getitem__(self, i: int):
        if not 0 <= i < len(self):
            raise IndexError(f"batch {i} out of range: {len(self)} batches per epoch")
        x, y, w = self.loader.batch(self.epoch * len(self) + i)
        if not self.with_weights:
            return x, y
        return x, y, np.repeat(w[:, None, None], x.shape[1] * x.shape[2], axis=1).reshape(x.shape[:3])

    def on_epoch_end(self) -> None:
        self.epoch += 1
