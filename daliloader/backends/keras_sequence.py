"""The opencv backend as a ``keras.utils.PyDataset`` (Keras 3's Sequence): the "keras" product."""

from __future__ import annotations

import keras

from ..plan import Plan
from .opencv import EpochBatches, OpenCVLoader


class SegmentationSequence(EpochBatches, keras.utils.PyDataset):
    """A plan's batches decoded with OpenCV (see :class:`EpochBatches`), with Keras' ``workers``,
    ``use_multiprocessing`` and ``max_queue_size``.

    Keras calls ``on_epoch_end`` at the start of ``fit`` and after each of its epochs. With one worker
    it reads a pass of batches in order from one generator, and with ``steps_per_epoch`` shorter than the
    pass it goes on reading that pass in its next epoch: there the next epoch starts only once every
    batch of this one was read (so the first epoch is the sampler's first, as on the other backends, and
    no pass mixes two epochs). With several workers or processes Keras starts a fresh pass at each of its
    epochs (its ``OrderedEnqueuer``), and each ``on_epoch_end`` starts the next epoch."""

    def __init__(self, loader: OpenCVLoader, workers: int = 1, use_multiprocessing: bool = False,
                 max_queue_size: int = 10):
        keras.utils.PyDataset.__init__(self, workers=workers, use_multiprocessing=use_multiprocessing,
                                       max_queue_size=max_queue_size)
        EpochBatches.__init__(self, loader)
        self._read: set[int] = set()  # the batches of this epoch read here (set.add is atomic: no lock)

    def __getitem__(self, i: int):
        batch = super().__getitem__(i)
        self._read.add(i)
        return batch

    def on_epoch_end(self) -> None:
        if self._enqueued or len(self._read) >= len(self):
            self._read = set()
            super().on_epoch_end()

    @property
    def _enqueued(self) -> bool:
        """Whether Keras reads the batches through its ``OrderedEnqueuer`` (as its PyDataset adapter decides)."""
        return self.workers > 1 or (self.workers > 0 and self.use_multiprocessing)


def sequence(plan: Plan, workers: int = 1, use_multiprocessing: bool = False,
             max_queue_size: int = 10) -> SegmentationSequence:
    return SegmentationSequence(OpenCVLoader(plan), workers, use_multiprocessing, max_queue_size)
