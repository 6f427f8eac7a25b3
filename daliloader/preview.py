"""A picture of what the loader makes: augmented samples beside their masks coloured with the class
palette (``daliloader preview``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


#: Legend columns, and the height of one legend row in inches (fontsize 7).
LEGEND_COLUMNS, LEGEND_ROW = 3, 0.17


def legend_handles(classes, shown) -> list:
    """Legend entries for the label values in ``shown``: each class's name and colour, and ignore."""
    from matplotlib.patches import Patch

    palette = classes.palette()
    handles = [Patch(facecolor=palette[k] / 255.0, edgecolor="grey", label=classes.names[k])
               for k in shown if k < classes.num_classes]
    if any(k >= classes.num_classes for k in shown):
        handles.append(Patch(facecolor=classes.ignore_colour() / 255.0, edgecolor="grey",
                             label=f"ignore ({classes.ignore_index})"))
    return handles


def preview(data, out: Path, batches: int = 2, batch_size: int = 3, image_size=256, scale=(0.5, 2.0),
            seed: int = 0, **options) -> int:
    """Write a grid of augmented samples (the DALI CPU pipeline, random crops with zoom, and any other
    preprocessing ``options``) beside their masks coloured with the class palette, with a legend;
    returns the number of samples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .backends.dali_graph import to_numpy
    from .loaders import dali_pipeline

    pipe, _ = dali_pipeline(data, batch_size=batch_size, image_size=image_size, crop="random",
                            scale=tuple(scale), label_mode="int", backend="dali-cpu", seed=seed, **options)
    rows = []
    for _ in range(batches):
        images, labels = to_numpy(pipe.run())
        rows += list(zip(images, labels))
    handles = legend_handles(data.classes, np.unique(np.concatenate([labels.ravel() for _, labels in rows])))
    legend_height = 0.2 + LEGEND_ROW * -(-len(handles) // LEGEND_COLUMNS)  # below the grid, never over it
    height = 2.5 * len(rows) + legend_height
    fig, axes = plt.subplots(len(rows), 2, figsize=(5, height), squeeze=False)
    for (image, labels), (a, b) in zip(rows, axes):
        a.imshow(np.clip(image, 0, 1))
        b.imshow(data.classes.colorize(labels))
        a.axis("off")
        b.axis("off")
    axes[0][0].set_title("image", fontsize=9)
    axes[0][1].set_title("mask (class palette)", fontsize=9)
    fig.legend(handles=handles, loc="lower center", ncol=LEGEND_COLUMNS, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, legend_height / height, 1, 1))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return len(rows)
