"""daliloader/previews.py: previews of a recipe's samples from each backend, side by side and as overlays
(the command's own test is in test_cli.py)."""

import numpy as np
import pytest
from PIL import Image

import daliloader as dl


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata", "opencv"])
def test_preview_shows_any_recipe_from_any_backend(synth_data, tmp_path, backend):
    """The evaluation recipe (fit crops of a wide size) and a training recipe, side by side and as overlays:
    the panels hold the loader's own samples, and wide samples get wide panels."""
    from daliloader.previews import mask_picture, overlay, preview, samples

    for view, options in (("both", dict(training=False, image_size=(32, 64))),
                          ("overlay", dict(image_size=48, rotate=10, brightness=0.2))):
        out = tmp_path / f"{view}.png"
        assert preview(synth_data, out, batches=1, batch_size=2, view=view, backend=backend, **options) == 2
        width, height = Image.open(out).size
        assert width > height if view == "both" else height > width
    rows, plan = samples(synth_data, 1, 2, backend, dict(training=False, image_size=(32, 64)))
    image, labels = rows[0]
    assert image.shape == (32, 64, 3) and image.min() >= 0 and image.max() <= 1 and labels.shape == (32, 64)
    assert (labels == 255).any()  # fit pads the wide window: ignored pixels
    picture = mask_picture(labels, synth_data.classes)
    assert len({tuple(p) for p in picture[labels == 255]}) == 2  # stripes of two colours
    blended = overlay(image, labels, synth_data.classes)
    np.testing.assert_array_equal(blended[labels == 255], image[labels == 255])
    with pytest.raises(dl.SpecError, match="view='grid'"):
        preview(synth_data, tmp_path / "x.png", view="grid")
