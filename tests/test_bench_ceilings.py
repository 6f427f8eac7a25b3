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
