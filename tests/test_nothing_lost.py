"""Nothing lost: every sample once per evaluation epoch, at most once per training epoch, on every backend.

The dataset's images encode their own index (constant colour, lossless PNG: see ``index_data``).
Batch sizes 2 and 5 divide its 10 samples, 3 and 4 do not.
"""

import numpy as np
import pytest
from conftest import batch_indices, one_epoch, require_tf

import daliloader as dl

SIZES = [2, 3, 4, 5]
KW = dict(image_size=(24, 32), crop="center", label_mode="int")


def epoch_indices(backend, data, batch_size, drop_remainder, seed=0):
    """(indices, weights) of one epoch through the Keras-facing entry point of ``backend``."""
    batches = one_epoch(backend, data, tf=True, batch_size=batch_size, drop_remainder=drop_remainder,
                        seed=seed, **KW)
    indices = np.concatenate([batch_indices(b[0]) for b in batches])
    if drop_remainder:
        return indices, np.ones(len(indices)), [len(b[0]) for b in batches]
    for _, _, w in batches:  # per-pixel weights, constant over each sample
        assert w.shape == (len(w), *KW["image_size"]) and (w == w[:, :1, :1]).all()
    weights = np.concatenate([w[:, 0, 0] for _, _, w in batches])
    return indices, weights, [len(b[0]) for b in batches]


@pytest.mark.parametrize("batch_size", SIZES)
def test_evaluation_sees_every_sample_exactly_once(index_data, backend, batch_size):
    indices, weights, sizes = epoch_indices(backend, index_data, batch_size, drop_remainder=False)
    assert sorted(indices[weights == 1].tolist()) == list(range(10))
    assert set(np.unique(weights)) <= {0.0, 1.0}
    assert sizes == [batch_size] * -(-10 // batch_size)  # fixed-size batches on every backend: the last one
    assert (weights == 0).sum() == -10 % batch_size  # is padded with weight-0 samples


@pytest.mark.parametrize("batch_size", [3, 4])
def test_evaluation_reads_in_order_every_time_even_after_a_partial_read(index_data, backend, batch_size):
    """Every read of an evaluation dataset is the dataset's order from its first sample, also after a read
    stopped part-way (a peek, ``take``, ``validation_steps``), on every backend, through the loaders' own
    Keras-facing objects."""
    if backend == "opencv":
        seq = dl.keras_sequence(index_data, batch_size=batch_size, training=False, **KW)
        seq[0]  # a peek
        reads = [np.concatenate([batch_indices(seq[i][0]) for i in range(len(seq))]) for _ in range(2)]
        weights = [np.concatenate([seq[i][2][:, 0, 0] for i in range(len(seq))])] * 2
    else:
        require_tf()
        ds = dl.tf_dataset(index_data, batch_size=batch_size, training=False, backend=backend, **KW)
        next(iter(ds))  # a peek
        if backend != "dali-gpu":  # which refuses take(): its batches are on the GPU, where tf.data has no kernels
            list(ds.take(1))
        reads, weights = [], []
        for _ in range(2):
            batches = [(x.numpy(), w.numpy()) for x, _, w in ds]
            reads.append(np.concatenate([batch_indices(x) for x, _ in batches]))
            weights.append(np.concatenate([w[:, 0, 0] for _, w in batches]))
    for seen, w in zip(reads, weights):
        assert seen[w == 1].tolist() == list(range(10))
        assert len(seen) == -(-10 // batch_size) * batch_size


@pytest.mark.parametrize("batch_size", SIZES)
def test_training_epochs_never_repeat_and_vary_the_dropped_samples(index_data, backend, batch_size):
    if backend == "opencv":
        seq = dl.keras_sequence(index_data, batch_size=batch_size, seed=1, **KW)
        epochs = []
        for _ in range(6):
            epochs.append(np.concatenate([batch_indices(seq[i][0]) for i in range(len(seq))]))
            seq.on_epoch_end()
    else:
        require_tf()
        ds = dl.tf_dataset(index_data, batch_size=batch_size, seed=1, backend=backend, **KW)
        epochs = [np.concatenate([batch_indices(x.numpy()) for x, _ in ds]) for _ in range(6)]
    for seen in epochs:
        assert len(seen) == 10 // batch_size * batch_size and len(set(seen.tolist())) == len(seen)
    if 10 % batch_size:
        dropped = {frozenset(range(10)) - frozenset(seen.tolist()) for seen in epochs}
        assert len(dropped) > 1


def test_model_evaluate_is_exact_with_padding(index_data, backend):
    """Weight-0 padding leaves weighted metrics unchanged: evaluate() with batch 4 (2 padded) equals batch 10.

    (Keras' reported *loss* divides by the batch size, padding included: only weighted metrics are exact.)
    """
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((24, 32, 3)),
                              keras.layers.Conv2D(32, 1, kernel_initializer="glorot_uniform")])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(),
                                    keras.metrics.MeanIoU(32, sparse_y_pred=False, ignore_class=255, name="iou",
                                                          dtype="float32")])

    def evaluate(batch_size):
        if backend == "opencv":
            data = dl.keras_sequence(index_data, batch_size=batch_size, drop_remainder=False, shuffle=False, **KW)
        else:
            data = dl.tf_dataset(index_data, batch_size=batch_size, drop_remainder=False, shuffle=False,
                                 backend=backend, **KW)
        return model.evaluate(data, verbose=0, return_dict=True)

    whole, padded = evaluate(10), evaluate(4)
    for metric in ("sparse_categorical_accuracy", "iou"):
        assert padded[metric] == pytest.approx(whole[metric], abs=1e-6)


@pytest.mark.parametrize("read", ["files", "packs"])
def test_a_training_epoch_read_part_way_ends_there(index_data, backend, read, tmp_path):
    """A peek (``next(iter(ds))``) or a loop left early ends its epoch: the next ``iter()`` starts a fresh
    one, so that no later epoch straddles two of the sampler's and holds a sample twice (every later
    epoch did, for the rest of the run). Keras' ``fit`` reads one batch so to build a model compiled under
    a strategy. Packs (DALI's reader, which a new pipeline would replay) read the rest of the epoch first:
    their epochs are then those of the stream read whole (which may straddle the reader's passes:
    docs/prepared.md)."""
    if backend == "opencv":
        pytest.skip("keras_sequence is read by index: it has no epoch to read part-way")
    if read == "packs":
        if not backend.startswith("dali"):
            pytest.skip("only the DALI backends read packs")
        from daliloader.preparation import prepare

        prepare(index_data, tmp_path / "prepared", pack_size=4, progress=False)
        index_data = dl.SegmentationData.from_prepared(tmp_path / "prepared", packs=True)
    require_tf()
    ds = dl.tf_dataset(index_data, batch_size=3, seed=1, backend=backend, **KW)
    next(iter(ds))  # a peek
    for _ in ds:  # a loop left early: 2 of the epoch's 3 batches read in all
        break
    epochs = [np.concatenate([batch_indices(x.numpy()) for x, _ in ds]).tolist() for _ in range(3)]
    if read == "packs":
        whole = dl.tf_dataset(index_data, batch_size=3, seed=1, backend=backend, **KW)
        stream = [np.concatenate([batch_indices(x.numpy()) for x, _ in whole]).tolist() for _ in range(5)]
        assert epochs == stream[2:]  # the peeked epoch and the left one, read to their ends
        return
    for seen in epochs:
        assert len(seen) == 9 and len(set(seen)) == 9, seen
