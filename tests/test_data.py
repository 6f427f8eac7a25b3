"""daliloader/data.py: SegmentationData from explicit pairs (refused inside the unfinished output of a
prepare); and the package's import, which loads neither TensorFlow, DALI nor Keras.

Folders paired: tests/test_pairing.py; dataset layouts (from_folder): test_layouts.py; the embedded
dataset: test_synthetic.py.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from copies import dataset

import daliloader as dl
from daliloader.pairing import INCOMPLETE_MARKER


def test_import_is_cheap():
    code = ("import sys, daliloader as dl; dl.ClassMap.from_ids(3); "
            "bad = [m for m in ('tensorflow', 'nvidia.dali', 'keras') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_explicit_pairs_inside_an_unfinished_prepare_are_refused(tmp_path):
    data = dataset(tmp_path / "d", 3, 11)
    (Path(data.images[0]).parent.parent / INCOMPLETE_MARKER).write_text("")
    with pytest.raises(dl.DataError, match="unfinished output of a `daliloader prepare`"):
        dl.SegmentationData.from_pairs(list(zip(data.images, data.masks)), data.classes)
