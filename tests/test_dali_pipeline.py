"""The DALI graph itself, run through DALI alone (no TensorFlow), on every DALI backend."""

import cv2
import numpy as np
import pytest
from conftest import PALETTE, batch_indices, crop_or_pad, dali_numpy, write_pairs

import daliloader as dl


def run(pipe, n_batches=1):
    """Run ``n_batches`` and return each output concatenated over batches, as numpy on the host."""
    outs = None
    for _ in range(n_batches):
        batch = dali_numpy(pipe.run())
        outs = batch if outs is None else [np.concatenate([a, b]) for a, b in zip(outs, batch)]
    return outs


def _rgb(path):
    return cv2.imread(path, cv2.IMREAD_UNCHANGED)[..., ::-1]


@pytest.mark.parametrize("size", [(64, 80), (100, 150), (61, 77)])
def test_center_crop_and_pad_is_exact(mirror_data, dali_backend, size):
    """Labels exact; images exact too (lossless PNG), with tf.image's offsets; pad = 0 / ignore."""
    n = len(mirror_data)
    pipe, _ = dl.dali_pipeline(mirror_data, batch_size=n, image_size=size, crop="center", shuffle=False,
                               label_mode="int", backend=dali_backend)
    images, labels = run(pipe)
    for i in range(n):
        rgb = _rgb(mirror_data.images[i])
        ref_labels = crop_or_pad(mirror_data.classes.map_mask(_rgb(mirror_data.masks[i])), *size, 255)
        np.testing.assert_array_equal(labels[i], ref_labels, err_msg=mirror_data.masks[i])
        ref_image = crop_or_pad(rgb, *size, 0).astype(np.float32) / 255
        np.testing.assert_allclose(images[i], ref_image, atol=1e-6, err_msg=mirror_data.images[i])


def test_center_crop_matches_tensorflow(mirror_data):
    tf = pytest.importorskip("tensorflow")
    pipe, _ = dl.dali_pipeline(mirror_data, batch_size=len(mirror_data), image_size=(70, 90), crop="center",
                               shuffle=False, label_mode="int", backend="dali-cpu")
    images, _ = run(pipe)
    for i, path in enumerate(mirror_data.images):
        ref = tf.image.resize_with_crop_or_pad(_rgb(path), 70, 90).numpy()
        np.testing.assert_array_equal(np.rint(images[i] * 255).astype(np.uint8), ref)


def test_unknown_colours_become_ignore(tmp_path, dali_backend):
    mask = np.broadcast_to(PALETTE[3], (20, 30, 3)).copy()
    mask[5:10, 5:10] = (1, 2, 3)                          # not in the palette
    mask[0, 0] = PALETTE[3] ^ np.array([0, 0, 1], np.uint8)  # one bit from a real colour
    mask[15:, 20:] = PALETTE[31]
    data = write_pairs(tmp_path, [np.zeros((20, 30, 3), np.uint8)], [mask])
    for mode in ("int", "onehot"):
        pipe, _ = dl.dali_pipeline(data, batch_size=1, image_size=(20, 30), crop="center", label_mode=mode,
                                   shuffle=False, backend=dali_backend)
        _, labels = run(pipe)
        expected = data.classes.map_mask(mask)
        assert expected[0, 0] == 255 and expected[7, 7] == 255 and expected[16, 25] == 31
        if mode == "int":
            np.testing.assert_array_equal(labels[0], expected)
        else:
            assert labels.dtype == np.float32 and labels.shape == (1, 20, 30, 32)
            np.testing.assert_array_equal(labels[0].sum(-1), (expected != 255).astype(np.float32))
            np.testing.assert_array_equal(labels[0].argmax(-1)[expected != 255], expected[expected != 255])


def test_id_masks_with_remap(tmp_path, dali_backend):
    """Cityscapes-style 8-bit id masks, remapped to trainIds; unknown ids -> 255."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 40, size=(32, 48)).astype(np.uint8)
    (tmp_path / "img").mkdir()
    (tmp_path / "gt").mkdir()
    cv2.imwrite(str(tmp_path / "img" / "x_leftImg8bit.png"), np.zeros((32, 48, 3), np.uint8))
    cv2.imwrite(str(tmp_path / "gt" / "x_gtFine_labelIds.png"), ids)
    data = dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "gt", dl.ClassMap.cityscapes(),
                                         image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds")
    pipe, _ = dl.dali_pipeline(data, batch_size=1, image_size=(32, 48), crop="center", label_mode="int",
                               shuffle=False, backend=dali_backend)
    _, labels = run(pipe)
    np.testing.assert_array_equal(labels[0], data.classes.map_mask(ids))


@pytest.mark.parametrize("scale", [(1.0, 1.0), (0.5, 2.0)])
def test_random_augmentation_keeps_image_and_mask_aligned(mirror_data, dali_backend, scale):
    """The images are their own masks: after crop/zoom/flip, image colours must map to the labels."""
    n = len(mirror_data)
    pipe, _ = dl.dali_pipeline(mirror_data, batch_size=n, image_size=(64, 64), crop="random", scale=scale,
                               flip=0.5, label_mode="int", seed=11, backend=dali_backend)
    images, labels = run(pipe, n_batches=8)
    seen_pad = 0
    for img, lab in zip(images, labels):
        rgb = np.rint(img * 255).astype(np.uint8)
        from_image = mirror_data.classes.map_mask(rgb)
        valid = lab != 255
        seen_pad += (~valid).any()
        if scale == (1.0, 1.0):
            np.testing.assert_array_equal(from_image[valid], lab[valid])  # no resampling: exact
        else:
            # bilinear image vs nearest mask differ only at region borders: compare interiors
            lab8, k = lab.astype(np.uint8), np.ones((5, 5), np.uint8)
            interior = valid & (cv2.erode(lab8, k) == cv2.dilate(lab8, k))
            assert (from_image[interior] == lab[interior]).mean() > 0.99
        assert set(np.unique(lab)) <= set(range(32)) | {255}, "no invented labels"
    assert seen_pad > 0, "some crops overhang the small images and must be padded with ignore"


def test_flip_rate_and_mirroring(tmp_path, dali_backend):
    """A left/right-asymmetric image: flips happen at the configured rate and mirror both outputs."""
    lab = np.zeros((16, 16), np.int64)
    lab[:, 8:] = 5
    colours = PALETTE[lab]
    data = write_pairs(tmp_path, [colours] * 4, [colours] * 4)
    pipe, _ = dl.dali_pipeline(data, batch_size=4, image_size=(16, 16), crop="random", flip=0.3,
                               label_mode="int", seed=2, backend=dali_backend)
    images, labels = run(pipe, n_batches=100)
    flipped = labels[:, 0, 0] == 5
    assert 0.22 < flipped.mean() < 0.38, flipped.mean()
    np.testing.assert_array_equal(labels[flipped], np.broadcast_to(lab[:, ::-1], labels[flipped].shape))
    np.testing.assert_array_equal(labels[~flipped], np.broadcast_to(lab, labels[~flipped].shape))


@pytest.mark.parametrize("batch_size", [3, 5])
def test_epochs_have_no_repeats_and_reshuffle(index_data, dali_backend, batch_size):
    pipe, steps = dl.dali_pipeline(index_data, batch_size=batch_size, image_size=(24, 32), crop="center",
                                   seed=4, backend=dali_backend, outputs=("image", "index"))
    assert steps == 10 // batch_size
    epochs = []
    for _ in range(4):
        images, index = run(pipe, n_batches=steps)
        assert batch_indices(images) == index.tolist(), "image and index must stay paired"
        assert len(set(index.tolist())) == len(index) == steps * batch_size
        epochs.append(tuple(index.tolist()))
    assert len(set(epochs)) > 1


def test_normalisation_and_float16(index_data, dali_backend):
    mean, std = (0.5, 0.25, 0.0), (0.5, 0.5, 0.8)
    pipe, _ = dl.dali_pipeline(index_data, batch_size=10, image_size=(24, 32), crop="center", shuffle=False,
                               mean=mean, std=std, dtype="float16", backend=dali_backend)
    images, _ = run(pipe)
    assert images.dtype == np.float16
    raw = np.array([[10 * i, 0, 0] for i in range(10)], np.float32) / 255
    np.testing.assert_allclose(images[:, 3, 4, :], (raw - mean) / std, atol=2e-3)


def test_packed_inputs_give_back_their_fields_exactly():
    """Paths and records reach the graph packed (dali_graph.pack_pair: both lengths, then the fields; a
    path is a first field with an empty second), a batch of them padded with zeros to its longest, and
    the graph cuts the fields out (split_pair) to the byte: DALI's file reader would also open a path
    with the zeros left on, and a decoder may read past a picture's end, so reading files cannot tell."""
    import os

    from nvidia.dali import fn, pipeline_def, types

    from daliloader.backends.dali_graph import pack_pair, path_row, split_pair

    paths = ["a", "é" * 60, "日本語/with spaces.png", "x" * 150]
    pairs = [(os.fsencode(p), b"") for p in paths] + [(b"\xff\xd8image", b"\x89PNGmask" * 7), (b"", b"m")]
    packed = [path_row(p) for p in paths] + [np.frombuffer(pack_pair(*pair), np.uint8) for pair in pairs[4:]]
    width = max(len(row) for row in packed)
    rows = [np.pad(row, (0, width - len(row))) for row in packed]

    @pipeline_def(batch_size=len(rows), num_threads=1, device_id=None)
    def cut():
        return split_pair(fn.external_source(source=lambda: rows, dtype=types.UINT8, ndim=1))

    pipe = cut()
    pipe.build()
    first, second = pipe.run()
    assert [(bytes(np.asarray(first.at(i))), bytes(np.asarray(second.at(i)))) for i in range(len(rows))] == pairs
