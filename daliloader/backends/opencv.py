"""The preprocessing spec in numpy + OpenCV: the reference stages themselves (:mod:`daliloader.stages`),
with OpenCV decoding (:mod:`daliloader.codecs`) and resampling.

Needs neither Keras nor TensorFlow; :mod:`.keras_sequence` wraps it in a ``keras.utils.PyDataset``.
Random parameters are drawn once per sample and applied to image and mask by separate kernels, like
the DALI graph does.
"""

from __future__ import annotations

import numpy as np

from .. import augment, codecs, stages
from ..errors import WHAT_TO_DO, LoadError, MissingDependency
from ..plan import Output, Plan
from . import pair_guard

#: The stages :meth:`OpenCVLoader.sample` reports to its clock, in order (encode is :meth:`~OpenCVLoader.encode`).
SAMPLE_STAGES = ("read", "decode", "labels", "crop", "rotate", "augment", "flip", "normalize")


class OpenCVLoader:
    """Loads a plan's batches with OpenCV; ``batch(step)`` follows the plan's :class:`Sampler`."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.guard = pair_guard(plan.data, "opencv")

    def sample(self, index: int, rng: np.random.Generator, clock=None) -> tuple[np.ndarray, np.ndarray]:
        """One sample's normalised image and class indices; ``clock(stage)``, when given (the bench), is
        called after each of :data:`SAMPLE_STAGES`."""
        tick = clock or (lambda stage: None)
        data, spec, classes = self.plan.data, self.plan.spec, self.plan.data.classes
        image_path, mask_path = data.images[index], data.masks[index]
        image_bytes, mask_bytes = (np.frombuffer(b, np.uint8) for b in self.guard.read(index))
        tick("read")
        image = codecs.decode_image(image_bytes, image_path)
        mask = codecs.decode_mask(mask_bytes, mask_path, classes)
        if image.shape[:2] != mask.shape[:2]:  # a file replaced after it was vetted: never a misaligned pair
            raise LoadError(f"cannot load sample {index}: {mask_path} is {mask.shape[1]}x{mask.shape[0]} but its image "
                            f"{image_path} is {image.shape[1]}x{image.shape[0]} (a file changed after it was vetted?)."
                            f"\n{WHAT_TO_DO}")
        tick("decode")
        labels = classes.map_mask(mask)
        tick("labels")
        u = rng.random(stages.draw_count(spec), dtype=np.float32)
        win = (stages.choose_window(spec, labels, classes.num_classes, u) if spec.chooses_window else
               stages.window(spec, *image.shape[:2], u))
        image_fill, label_fill = stages.fills(classes.ignore_index)
        inside = (lambda part: stages.colour(part, stages.draw_colour(spec, u))) if spec.colours else None
        image, labels = stages.crop(image, win, image_fill, inside), stages.crop(labels, win, label_fill)
        if spec.resizes:
            size = stages.resize_to(spec, win.height, win.width)
            image, labels = stages.resize(image, size, labels=False), stages.resize(labels, size, labels=True)
            if spec.crop == "fit":
                fit = stages.Window(*stages.fit_window(spec, *image.shape[:2]), *spec.image_size, False)
                image, labels = stages.crop(image, fit, image_fill), stages.crop(labels, fit, label_fill)
        tick("crop")
        if spec.rotates:
            angle = stages.draw_angle(spec, u)
            image = stages.rotate(image, angle, image_fill, labels=False)
            labels = stages.rotate(labels, angle, label_fill, labels=True)
        tick("rotate")
        image, labels = augment.apply(spec.augment, image, labels, u, classes.ignore_index)
        tick("augment")
        image, labels = stages.flip(image, win), stages.flip(labels, win)
        tick("flip")
        image = stages.normalize(image, spec)
        tick("normalize")
        return image, labels

    def encode(self, labels: np.ndarray) -> np.ndarray:
        return stages.encode(labels, self.plan.spec, self.plan.data.classes.num_classes)

    def batch(self, step: int):
        """The ``step``-th batch of the stream: the plan's outputs (images, labels, per-pixel weights, sample
        indices) in its order."""
        indices = self.plan.sampler.batch(step)
        rng = np.random.default_rng([self.plan.sampler.draw_seed, step, 1])
        images, labels = zip(*(self.sample(max(i, 0), rng) for i in indices))
        ignore_index = self.plan.data.classes.ignore_index
        labels = np.stack([stages.unpadded(lab, i >= 0, ignore_index) for lab, i in zip(labels, indices)])
        out = {Output.IMAGE: batch_images(images, self.plan.spec), Output.LABELS: self.encode(labels),
               Output.INDEX: indices}
        if Output.WEIGHT in self.plan.outputs:
            num_classes = self.plan.data.classes.num_classes
            out[Output.WEIGHT] = np.stack([stages.weights(lab, i >= 0, num_classes) for lab, i in zip(labels, indices)])
        return tuple(out[name] for name in self.plan.outputs)


def batch_images(images, spec) -> np.ndarray:
    """The normalised images stacked, in ``spec.dtype``: bfloat16, which numpy lacks and the reference
    computes as float32 (:func:`~daliloader.stages.normalize`), as ``ml_dtypes.bfloat16``, the type Keras and
    TensorFlow (whose dependency it is) read as theirs."""
    stacked = np.stack(images)
    if spec.dtype != "bfloat16":
        return stacked
    try:
        from ml_dtypes import bfloat16
    except ImportError:
        raise MissingDependency("dtype='bfloat16' on the OpenCV backend needs ml_dtypes, which TensorFlow and Keras "
                                "install (pip install ml_dtypes)") from None
    return stacked.astype(bfloat16)


class EpochBatches:
    """An OpenCVLoader's batches by epoch, in Keras' ``PyDataset`` protocol without Keras: ``len()`` is
    batches per epoch, ``[i]`` batch ``i`` of the current epoch, ``on_epoch_end()`` the next epoch.

    Batch ``i`` of epoch ``e`` is the sampler's step ``e * len(self) + i``: the order comes from the same
    :class:`~daliloader.sampler.Sampler` as the DALI backends, and the random crops of a batch are seeded
    by its step, so ``self[i]`` is reproducible and safe to compute in any worker. ``self[i]`` reads the
    current epoch when it runs; :meth:`batch_of` names its epoch, for a reader that computes batches of
    the next epoch before this one's are all read.
    """

    def __init__(self, loader: OpenCVLoader):
        self.loader = loader
        self.epoch = 0

    def __len__(self) -> int:
        return self.loader.plan.steps

    def __getitem__(self, i: int):
        return self.batch_of(self.epoch, i)

    def batch_of(self, epoch: int, i: int):
        """Batch ``i`` of epoch ``epoch``, whatever the current epoch."""
        if not 0 <= i < len(self):
            raise IndexError(f"batch {i} out of range: {len(self)} batches per epoch")
        return self.loader.batch(epoch * len(self) + i)

    def on_epoch_end(self) -> None:
        self.epoch += 1


def batches(plan: Plan) -> EpochBatches:
    """The "batches" product: numpy batches in epochs, without Keras."""
    return EpochBatches(OpenCVLoader(plan))
