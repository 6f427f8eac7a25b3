"""daliloader/predictions.py: dl.predict on every backend, with a stand-in model: one prediction per
pair, in order, with its files' names; taken back to the original size and written in the dataset's ids
(label-id PNGs; VOC's indexed PNGs with their palette); options that would lose or mix pairs refused up
front, and scores of another class count; a mask the disk did not take named.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

import daliloader as dl

pytest.importorskip("tensorflow")


class Identity:
    """A 'model' that predicts the labels it is given: the image's red channel is 10 x the sample index,
    so it predicts class (index) everywhere."""

    def predict_on_batch(self, x):
        x = np.asarray(x)
        index = np.rint(x[..., 0] * 255 / 10).astype(int)
        return np.eye(32, dtype=np.float32)[np.clip(index, 0, 31)]


def test_predict_gives_one_prediction_per_pair_in_order_with_file_names(index_data, backend, tmp_path):
    found = dl.predict(Identity(), index_data, batch_size=3, backend=backend)
    assert len(found) == 10
    assert [p.image for p in found] == list(index_data.images) and [p.mask for p in found] == list(index_data.masks)
    for k, p in enumerate(found):
        assert p.index == k and p.labels.shape == (24, 32) and (p.labels == k).all()


def test_predict_back_at_the_original_size_and_written_in_the_datasets_ids(tmp_path):
    """Cityscapes-like ids (train ids back to label ids): fit crops at a smaller size, predictions taken
    back to 40x64 and written as label-id PNGs that the class map reads back to the same classes."""
    rng = np.random.default_rng(4)
    for d in ("img", "gt"):
        (tmp_path / d).mkdir()
    for i in range(4):
        cv2.imwrite(str(tmp_path / "img" / f"c_{i:02d}_leftImg8bit.png"), rng.integers(0, 255, (40, 64, 3), np.uint8))
        cv2.imwrite(str(tmp_path / "gt" / f"c_{i:02d}_gtFine_labelIds.png"), np.full((40, 64), 7, np.uint8))
    data = dl.SegmentationData.from_dirs(tmp_path / "img", tmp_path / "gt", dl.ClassMap.cityscapes(),
                                         image_suffix="_leftImg8bit", mask_suffix="_gtFine_labelIds")

    class Road:  # predicts train id 1 (sidewalk) everywhere
        def predict_on_batch(self, x):
            scores = np.zeros(np.shape(x)[:3] + (19,), np.float32)
            scores[..., 1] = 1
            return scores

    found = dl.predict(Road(), data, batch_size=3, image_size=(20, 24), backend="dali-cpu", out_dir=tmp_path / "out")
    for p in found:
        assert p.labels.shape == (40, 64) and (p.labels == 1).all()
        written = cv2.imread(p.written, cv2.IMREAD_UNCHANGED)
        assert Path(p.written).name == Path(p.image).stem + ".png" and (written == 8).all()  # label id of sidewalk
        np.testing.assert_array_equal(data.classes.map_mask(written), p.labels)


def test_predict_refuses_scores_of_another_class_count(index_data):
    """A model of another class count (ADE20K's 151 outputs, 0 for "other", against a map of 150) would
    have every class written off by one: refused, naming both counts."""
    class Wider(Identity):
        def predict_on_batch(self, x):
            scores = super().predict_on_batch(x)
            return np.concatenate([scores, np.zeros_like(scores[..., :1])], axis=-1)

    with pytest.raises(dl.SpecError, match=r"the model gave 33 class scores per pixel, but the data's class map "
                                           r"\(.*\) has 32 classes"):
        dl.predict(Wider(), index_data, batch_size=3, backend="opencv")


@pytest.mark.parametrize("options", [dict(training=True), dict(drop_remainder=True), dict(shuffle=True, seed=1),
                                     dict(num_shards=2, shard_id=1), dict(num_shards=2), dict(outputs=("image",))])
def test_predict_refuses_up_front_what_would_lose_or_mix_pairs(index_data, backend, options):
    """Options that drop pairs, mix their order or change what a batch holds are refused before loading,
    naming the argument; the values predict uses anyway are accepted."""
    name = next(k for k in options if k != "seed")
    with pytest.raises(dl.SpecError, match=rf"predict\(\) got {name}=.*which would .*Leave {name} out"):
        dl.predict(Identity(), index_data, batch_size=3, backend=backend, **options)
    found = dl.predict(Identity(), index_data, batch_size=3, backend=backend, training=False, shuffle=False,
                       drop_remainder=False, shard_id=0, num_shards=1)
    assert [p.index for p in found] == list(range(10))


def test_predict_writes_voc_masks_as_indexed_pngs_with_their_palette(tmp_path, backend):
    """VOC's SegmentationClass masks are palette PNGs read by index (index = class, 255 = border): the
    predictions are written the same way, with the same palette, so the VOC devkit reads them as it reads
    its ground truth, and daliloader's class map reads them back to the predicted classes."""
    from PIL import Image
    from trees import voc_tree

    root, _ = voc_tree(tmp_path)
    data = dl.SegmentationData.from_folder(root, split="trainval")

    class Halves:  # class 15 (person) on the left half, 0 (background) on the right
        def predict_on_batch(self, x):
            k = np.zeros(np.shape(x)[:3], int)
            k[:, :, : np.shape(x)[2] // 2] = 15
            return np.eye(21, dtype=np.float32)[k]

    found = dl.predict(Halves(), data, batch_size=3, image_size=(16, 32), crop="center", backend=backend,
                       out_dir=tmp_path / "out")
    assert len(found) == 4
    for p in found:
        with Image.open(p.written) as written, Image.open(p.mask) as truth:
            assert written.mode == truth.mode == "P" and written.getpalette() == truth.getpalette()
            indices = np.asarray(written)
            colours = np.asarray(written.convert("RGB"))
        np.testing.assert_array_equal(indices, np.where(p.labels < 21, p.labels, 255))
        assert {0, 15, 255} == set(np.unique(indices))  # cropped away by the centre crop: the border index
        np.testing.assert_array_equal(data.classes.map_mask(colours), p.labels)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_predict_names_a_mask_the_disk_did_not_take(tmp_path, index_data):
    """cv2.imwrite reports success on a full disk (/dev/full stands in for one): the mask is encoded in
    memory and written whole, or the file is named."""
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{Path(index_data.images[3]).stem}.png").symlink_to("/dev/full")
    with pytest.raises(dl.LoadError, match=r"cannot write .*0003\.png: no space left on the device"):
        dl.predict(Identity(), index_data, batch_size=4, backend="opencv", out_dir=out)


def test_records_whose_names_collide_are_written_under_their_file_and_number(index_data, tmp_path):
    """TF Model Garden names each record by a 24-bit hash (image/source_id), which repeats past a few thousand
    records: colliding names get the record's file and number, and nothing is refused."""
    from daliloader import tfrecord

    with tfrecord.Writer(tmp_path / "train.tfrecord") as writer:
        for i, (image, mask) in enumerate(zip(index_data.images, index_data.masks)):
            writer.write({"image/encoded": Path(image).read_bytes(),
                          "image/segmentation/class/encoded": Path(mask).read_bytes(),
                          "image/source_id": b"8388607" if i in (2, 5, 7) else str(i).encode()})
    data = dl.SegmentationData.from_tfrecord(tmp_path / "train.tfrecord", classes=index_data.classes)
    found = dl.predict(Identity(), data, batch_size=4, backend="opencv", out_dir=tmp_path / "out")
    written = [Path(p.written).name for p in found]
    assert len(set(written)) == 10
    assert written[2] == "8388607-train.tfrecord-000002.png" and written[3] == "3.png"
    for p in found:
        assert (cv2.imread(p.written, cv2.IMREAD_COLOR)[..., ::-1] == index_data.classes.colors[p.index]).all()


def test_record_names_that_are_no_file_names_are_written_as_files_all_the_same(index_data, tmp_path):
    from daliloader import tfrecord

    names = [b"a\x00b", b"/", b"..", b"sub/dir", b"\x01"] + [str(i).encode() for i in range(5)]
    with tfrecord.Writer(tmp_path / "train.tfrecord") as writer:
        for name, image, mask in zip(names, index_data.images, index_data.masks):
            writer.write({"image/encoded": Path(image).read_bytes(),
                          "image/segmentation/class/encoded": Path(mask).read_bytes(), "image/filename": name})
    data = dl.SegmentationData.from_tfrecord(tmp_path / "train.tfrecord", classes=index_data.classes)
    found = dl.predict(Identity(), data, batch_size=5, backend="opencv", out_dir=tmp_path / "out")
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(written) == 10 and all(Path(p.written).parent == tmp_path / "out" for p in found)
    assert {"a_b.png", "dir.png", "train.tfrecord-000001.png", "train.tfrecord-000002.png",
            "train.tfrecord-000004.png"} <= set(written)  # a name's folders dropped, as for any file name
