"""A picture of what the loader makes (``daliloader preview``): samples of any recipe, from any backend,
beside their masks coloured with the class palette, or with the mask blended over the image.

The samples are the loader's own batches (``make_plan`` with the same options as the loaders, int
labels), so the picture shows exactly what training or evaluation would see; normalisation is undone
for display.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import moved

if TYPE_CHECKING:
    from .data import SegmentationData

#: The width of one legend column and the height of one legend row, in inches (fontsize 7).
LEGEND_COLUMN, LEGEND_ROW = 2.5, 0.17
#: The views: image and coloured mask side by side, the mask blended over the image, or both.
VIEWS = ("side", "overlay", "both")
#: How much of the mask colour an overlay pixel takes.
OVERLAY_ALPHA = 0.5


def legend_handles(classes, shown) -> list:
    """Legend entries for the label values in ``shown``: each class's name and colour (its RGB values in
    the label, so that colours that look alike stay apart), and ignore, hatched."""
    from matplotlib.patches import Patch

    palette = classes.palette()
    handles = [Patch(facecolor=palette[k] / 255.0, edgecolor="grey",
                     label=f"{classes.names[k]} {tuple(int(v) for v in palette[k])}")
               for k in shown if k < classes.num_classes]
    if any(k >= classes.num_classes for k in shown):
        handles.append(Patch(facecolor=classes.ignore_colour() / 255.0, edgecolor="black", hatch="///",
                             label=f"ignore ({classes.ignore_index})"))
    return handles


def mask_picture(labels: np.ndarray, classes) -> np.ndarray:
    """The mask in its class colours, ignored pixels in stripes of the ignore colour and grey, so that
    they stand apart from every class and from the page."""
    picture = classes.colorize(labels)
    yy, xx = np.indices(labels.shape)
    stripes = ((yy + xx) // 4) % 2 == 0
    ignored = labels >= classes.num_classes
    picture[ignored & ~stripes] = (128, 128, 128)
    return picture


def overlay(image: np.ndarray, labels: np.ndarray, classes) -> np.ndarray:
    """The mask's colours blended over the image (float RGB in [0, 1]); ignored pixels show the image."""
    colours = classes.colorize(labels).astype(np.float32) / 255.0
    known = (labels < classes.num_classes)[..., None]
    return np.where(known, (1 - OVERLAY_ALPHA) * image + OVERLAY_ALPHA * colours, image)


def samples(data, batches: int, batch_size: int, backend: str, options: dict) -> tuple[list, object]:
    """``batches`` batches of (image in [0, 1], int labels) from ``backend``, and the plan."""
    from . import backends
    from .backends import Product
    from .plan import make_plan

    plan = make_plan(data, batch_size, label_mode="int", caller="preview", **options)
    # without TensorFlow where the backend can: numpy batches, DALI's own pipeline, else tf.data
    product = next((p for p in (Product.BATCHES, Product.DALI) if backend in backends.names(p)), Product.TF_DATA)
    built = backends.resolve(backend, product, plan).build(product, plan)
    if product is Product.DALI:
        from .backends.dali_graph import to_numpy

        pipe, _ = built
        stream = (to_numpy(pipe.run()) for _ in range(batches))
    elif product is Product.BATCHES:
        stream = (built[i % len(built)] for i in range(batches))
    else:
        stream = ([t.numpy() for t in batch] for _, batch in zip(range(batches), _forever(built)))
    mean, std = (np.asarray(v, np.float32) for v in (plan.spec.mean, plan.spec.std))
    rows = []
    for batch in stream:
        images, labels = np.asarray(batch[0], np.float32), np.asarray(batch[1])
        rows += [(np.clip(x * std + mean, 0, 1), y) for x, y in zip(images, labels)]
    return rows, plan


def _forever(dataset):
    while True:
        yield from dataset


def preview(data: SegmentationData, out: Path, batches: int = 2, batch_size: int = 3, *, view: str = "side",
            backend: str = "dali-cpu", **options) -> int:
    """Write a picture of what the loader makes: a grid of samples of a recipe, with a legend.

    Each sample's image is shown beside its coloured mask (``view="side"``), with the mask blended over
    the image (``"overlay"``), or both; panels keep the samples' aspect ratio. The samples are the
    loader's own batches (int labels), normalisation undone for display.

    Args:
        data: the pairs (:class:`~daliloader.data.SegmentationData`), whose class map colours the masks.
        out: the picture file to write (its folder is made).
        batches: how many batches the grid shows.
        batch_size: samples per batch.
        view: ``"side"``, ``"overlay"`` or ``"both"`` (see :data:`VIEWS`).
        backend: the backend whose batches are shown, any (see :data:`daliloader.backends.BACKENDS`).
        **options: the recipe: any loader option (``image_size``, ``crop``, ``scale``, ``rotate``,
            ``flip``, colour, ``training``, ...), as :func:`~daliloader.plan.make_plan` takes it.

    Returns:
        The number of samples shown.

    Raises:
        daliloader.errors.SpecError: a ``view`` that is not one of :data:`VIEWS`, or an option that is
            not valid, named with what it takes.
        daliloader.errors.DataError: data that cannot be read as asked (images of several sizes
            without an ``image_size``), named.
        daliloader.errors.LoadError: a file that cannot be decoded, named.
        daliloader.errors.MissingDependency: a ``backend`` that needs a package that is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if view not in VIEWS:
        from .errors import SpecError

        raise SpecError(f"view={view!r}: choose {', '.join(map(repr, VIEWS))}")
    rows, plan = samples(data, batches, batch_size, backend, options)
    classes = data.classes
    handles = legend_handles(classes, np.unique(np.concatenate([labels.ravel() for _, labels in rows])))
    panels = {"side": ("image", "mask (class palette)"), "overlay": ("mask over the image",),
              "both": ("image", "mask (class palette)", "mask over the image")}[view]
    h, w = plan.spec.image_size
    panel_w = 2.4 * min(max(w / h, 1.0), 3.0)  # wide samples get wide panels: the picture fills its panel
    # The legend needs two of its columns; fewer panels grow to that width instead of leaving margins.
    width = max(panel_w * len(panels), 2 * LEGEND_COLUMN)
    panel_w = width / len(panels)
    panel_h = panel_w * h / w
    columns = max(1, int(width // LEGEND_COLUMN))
    legend_height = 0.2 + LEGEND_ROW * -(-len(handles) // columns)  # below the grid, never over it
    height = (panel_h + 0.15) * len(rows) + legend_height + 0.3
    fig, axes = plt.subplots(len(rows), len(panels), figsize=(width, height), squeeze=False)
    for (image, labels), row in zip(rows, axes):
        drawn = {"image": image, "mask (class palette)": mask_picture(labels, classes),
                 "mask over the image": overlay(image, labels, classes)}
        for ax, name in zip(row, panels):
            ax.imshow(drawn[name])
            ax.axis("off")
    for ax, name in zip(axes[0], panels):
        ax.set_title(name, fontsize=9)
    fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, legend_height / height, 1, 1), pad=0.3)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return len(rows)


# the spelling of the time when dl.preview was this module
preview.preview = moved(preview, "dl.preview.preview")
