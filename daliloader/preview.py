"""A picture of what the loader makes: augmented samples beside their masks coloured with the class
palette (``daliloader preview``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def preview(data, out: Path, batches: int = 2, batch_size: int = 3, image_size: int = 256, scale=(0.5, 2.0),
            seed: int = 0) -> int:
    """Write a grid of augmented samples (the DALI CPU pipeline, random crops with zoom) beside their
    masks coloured with the class palette (ignore = black); returns the number of samples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .backends.dali_graph import to_numpy
    from .loaders import dali_pipeline

    pipe, _ = dali_pipeline(data, batch_size=batch_size, image_size=(image_size, image_size), crop="random",
                            scale=tuple(scale), label_mode="int", backend="dali-cpu", seed=seed)
    rows = []
    for _ in range(batches):
        images, labels = to_numpy(pipe.run())
        rows += list(zip(images, labels))
    fig, axes = plt.subplots(len(rows), 2, figsize=(5, 2.5 * len(rows)), squeeze=False)
    for (image, labels), (a, b) in zip(rows, axes):
        a.imshow(np.clip(image, 0, 1))
        b.imshow(data.classes.colorize(labels))
        a.axis("off")
        b.axis("off")
    axes[0][0].set_title("image", fontsize=9)
    axes[0][1].set_title("mask (class palette; ignore = black)", fontsize=9)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return len(rows)
