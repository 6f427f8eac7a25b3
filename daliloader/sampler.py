"""Which sample sits at each position of the endless stream a loader produces.

A loader produces one endless stream of samples; epoch ``e`` is positions
``[e * per_epoch, (e + 1) * per_epoch)``. The sample at a position is a pure function of
(seed, epoch, shard, position), so independent readers (the image, mask and index sources of a
DALI graph) that ask for the same position get the same pair: they are paired by construction.

* ``shuffle``: every epoch is a fresh permutation of the whole dataset, shared by all shards.
* shards: shard ``i`` of ``n`` takes every ``n``-th element of that permutation, so shards are
  disjoint and together cover the dataset.
* ``drop_remainder=True``: an epoch is ``len(shard) // batch_size`` full batches, no sample twice;
  which samples are left out changes with the permutation each epoch.
* ``drop_remainder=False``: the last batch is filled up with padding positions (index ``-1``,
  weight 0) so that every sample is seen exactly once with fixed-size batches.
"""

from __future__ import annotations

import threading

import numpy as np

from .errors import BatchTooLarge, OptionError, SpecError


class Sampler:
    """The stream order of ``n`` samples in batches of ``batch_size``: one shard's view (see the module's
    docstring); ``steps`` batches per epoch, the same on every shard."""

    def __init__(self, n: int, batch_size: int, shuffle: bool = True, seed: int | None = None,
                 drop_remainder: bool = True, shard_id: int = 0, num_shards: int = 1):
        if not 0 <= shard_id < num_shards:
            raise SpecError(f"shard_id={shard_id} must lie in [0, num_shards={num_shards})")
        self.n, self.batch_size, self.shuffle = n, batch_size, shuffle
        self.drop_remainder, self.shard_id, self.num_shards = drop_remainder, shard_id, num_shards
        # Shards must agree on the permutation, so an unseeded sampler still fixes one seed here;
        # distribute() passes the same seed to every shard.
        self.seed = int(np.random.SeedSequence().entropy % (2**63)) if seed is None else int(seed)
        self.seeded = seed is not None  # the user asked for a reproducible stream
        # Every shard gets the same number of batches (replicas step together).
        per_shard_min = n // num_shards
        per_shard_max = -(-n // num_shards)
        if drop_remainder:
            self.steps = per_shard_min // batch_size
        else:
            self.steps = -(-per_shard_max // batch_size)
        if num_shards > n:
            raise OptionError("num_shards", f"num_shards={num_shards} is more than the {n} samples: each shard needs "
                                            f"at least one sample (use at most {n} shards, or more data)")
        if self.steps == 0:
            raise BatchTooLarge(batch_size, per_shard_min, n, num_shards)
        self._orders: dict[int, np.ndarray] = {}  # the few most recent epochs
        self._lock = threading.Lock()  # sources call in from DALI and tf.data threads

    @property
    def draw_seed(self) -> int:
        """The seed of this shard's random draws (crop windows, flips, colour...): the shared seed on shard 0
        (so one shard draws as it always did), a seed of its own on every other shard. The DALI and OpenCV
        backends draw by stream position, which every shard runs through alike, and with one seed all
        replicas cropped and flipped in lockstep; the permutation, which the shards must agree on, stays
        the shared seed's."""
        if self.shard_id == 0:
            return self.seed
        return int(np.random.SeedSequence([self.seed % 2**63, self.shard_id]).generate_state(1, np.uint64)[0] % 2**63)

    @property
    def training(self) -> bool:
        """Whether this is a training stream: shuffled, and full batches only."""
        return self.shuffle and self.drop_remainder

    @property
    def per_epoch(self) -> int:
        """Positions per epoch, padding included."""
        return self.steps * self.batch_size

    def __len__(self) -> int:
        """Batches per epoch."""
        return self.steps

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Sample indices of this shard for ``epoch``: ``per_epoch`` entries, ``-1`` for padding."""
        with self._lock:
            order = self._orders.get(epoch)
        if order is not None:
            return order
        # computed outside the lock (a collection during the work, on a TensorFlow thread, could free an
        # iterator whose destructor waits for a call waiting for the lock); the same for every thread
        order = self._compute_order(epoch)
        with self._lock:
            if epoch not in self._orders and len(self._orders) >= 4:
                self._orders.pop(min(self._orders))
            return self._orders.setdefault(epoch, order)

    def _compute_order(self, epoch: int) -> np.ndarray:
        order = (np.random.default_rng([self.seed, epoch]).permutation(self.n)
                 if self.shuffle else np.arange(self.n))
        mine = order[self.shard_id::self.num_shards]
        if len(mine) >= self.per_epoch:
            return mine[: self.per_epoch]
        return np.concatenate([mine, np.full(self.per_epoch - len(mine), -1, dtype=mine.dtype)])

    def index_at(self, position: int) -> int:
        """Sample index at a stream position (``-1``: padding)."""
        epoch, offset = divmod(position, self.per_epoch)
        return int(self.epoch_order(epoch)[offset])

    def indices(self, start: int, stop: int) -> np.ndarray:
        """Sample indices (int64, ``-1``: padding) at stream positions ``[start, stop)``."""
        return np.array([self.index_at(p) for p in range(start, stop)], dtype=np.int64)

    def batch(self, step: int) -> np.ndarray:
        """Indices of the ``step``-th batch of the stream (``-1``: padding)."""
        return self.indices(step * self.batch_size, (step + 1) * self.batch_size)


#: Samples a reader of a container (DALI's webdataset reader of packs, tf.data on TFRecords) holds to
#: shuffle within (DALI's default ``initial_fill``, passed all the same).
SHUFFLE_BUFFER = 1024


class ReaderEpochs:
    """The stream of a container's own reader (DALI's of packs, webdataset tars; tf.data's of TFRecord
    files), fitted to a Sampler's epochs.

    With ``stick_to_shard=True`` the reader gives shard ``i`` of ``n`` the contiguous samples
    ``[i * N // n, (i + 1) * N // n)`` (``size`` of them), in passes: each pass holds every sample once,
    shuffled within the reader's buffer, and the buffer drains at the end of a pass (checked against
    DALI 2.4).

    * Evaluation (``drop_remainder=False``): the reader pads every pass at its end, repeating the last
      sample, to the same ``reader_steps`` batches on every shard: ``ceil(ceil(N / n) / batch_size)``.
      A pass is the sampler's epoch; :meth:`real` marks the padding positions, which get weight 0 and
      index ``-1``.
    * Training (``drop_remainder=True``): no padding; the passes follow each other, and an epoch is the
      next ``sampler.steps`` full batches of that stream. Epochs drift across passes: in the long run
      every sample of a worker's part is read equally often, but an epoch that straddles two passes
      may hold one sample twice and miss another (and where the parts differ in size by one sample,
      the smaller part's samples are read a little more often). Skipping the remainder batch instead would
      take a tf.data filter after the DALI dataset, which has no GPU kernel.

    :meth:`real` is plain arithmetic, so it takes ints, numpy arrays and TensorFlow tensors.
    """

    def __init__(self, sampler: Sampler):
        n, shards, shard = sampler.n, sampler.num_shards, sampler.shard_id
        self.batch_size = sampler.batch_size
        self.padded = not sampler.drop_remainder
        self.start = shard * n // shards  # the worker's first sample
        self.size = (shard + 1) * n // shards - self.start
        self.reader_steps = sampler.steps  # padded, the sampler's own: ceil(ceil(n / shards) / batch_size)

    @property
    def period(self) -> int:
        """Positions per padded pass (evaluation; only read there)."""
        return self.reader_steps * self.batch_size

    def real(self, position):
        """Whether the reader's stream position holds a sample (true) or padding (false)."""
        if not self.padded:
            return position >= 0
        return position % self.period < self.size
