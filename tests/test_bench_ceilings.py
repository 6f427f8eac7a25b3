"""The decode ceilings (daliloader.bench.ceilings): all cores doing nothing but decode the same files;
nvJPEG where DALI sees a GPU."""

import cv2
import pytest
from conftest import HAS_GPU

from daliloader.bench.ceilings import cpu_decode_ceiling, nvjpeg_ceiling


@pytest.mark.parametrize("what", ["pairs", "images", "masks"])
def test_the_cpu_ceiling_decodes_pairs_images_or_masks_and_gives_opencv_its_threads_back(synth_data, what):
    threads = cv2.getNumThreads()
    rates = cpu_decode_ceiling(synth_data, workers=2, seconds=0.02, repeats=2, what=what)
    assert len(rates) == 2 and min(rates) > 0 and len(rates.batches) == 2
    assert cv2.getNumThreads() == threads


def test_the_cpu_ceiling_names_what_it_can_decode(synth_data):
    with pytest.raises(ValueError, match="what='labels': one of pairs, images, masks"):
        cpu_decode_ceiling(synth_data, workers=1, seconds=0.01, repeats=1, what="labels")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="DALI sees no CUDA GPU")
def test_the_nvjpeg_ceiling_decodes_the_images(synth_data):
    rates = nvjpeg_ceiling(synth_data, batch_size=2, seconds=0.05, repeats=2)
    assert len(rates) == 2 and min(rates) > 0


def test_the_nvjpeg_ceilings_reader_of_records_reads_every_record_here_too(synth_data, tmp_path):
    """What the nvJPEG ceiling reads on TFRecords (DALI's own TFRecord reader over whole files, with DALI
    index files made from the kept scans), run on the CPU: every picture there, once per epoch."""
    import numpy as np
    from nvidia.dali import fn, pipeline_def

    import daliloader as dl
    from daliloader import convert
    from daliloader.bench.ceilings import _encoded_images

    convert.to_tfrecord(synth_data, tmp_path)
    records = dl.SegmentationData.from_tfrecord(str(tmp_path / "*.tfrecord"), classes=synth_data.classes)

    @pipeline_def(batch_size=len(records), num_threads=1, device_id=None)
    def read():
        return fn.decoders.image(_encoded_images(records), device="cpu")

    pipe = read()
    pipe.build()
    (images,) = pipe.run()
    assert len(images) == len(records) and all(np.array(images[i]).shape[2] == 3 for i in range(len(images)))
