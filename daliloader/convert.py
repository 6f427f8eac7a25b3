"""The same pairs in the other container, byte for byte: files written into TFRecord files, or the
records of TFRecord files written out as files. ``daliloader bench --tfrecord`` measures both, so that
a user sees what the container costs or saves on their own data.

TFRecords are written in the layout of TF Model Garden and DeepLab (``image/encoded``,
``image/segmentation/class/encoded``, ``image/filename``, ``image/format``), :data:`RECORDS_PER_FILE`
records per file; files as ``images/`` + ``masks/`` with the pictures' own extensions. Both keep the
dataset's order, so sample ``i`` is the same pair in either.
"""

from __future__ import annotations

from pathlib import Path

from .codecs import write_file
from .data import SegmentationData
from .folders import made_once
from .parts import image_suffix, part_stem, read_part
from .tfrecord import Writer

#: Records per TFRecord file written (files of a few hundred MB for photos of a few hundred KB).
RECORDS_PER_FILE = 1024
#: What marks a finished copy.
COMPLETE = ".complete"


def to_tfrecord(data: SegmentationData, out: Path) -> None:
    """Write the pairs of ``data`` into ``out/NNNNN.tfrecord`` files, in order."""
    for first in range(0, len(data), RECORDS_PER_FILE):
        with Writer(out / f"{first // RECORDS_PER_FILE:05d}.tfrecord") as writer:
            for i in range(first, min(first + RECORDS_PER_FILE, len(data))):
                image = read_part(data.images[i])
                writer.write({"image/encoded": image, "image/segmentation/class/encoded": read_part(data.masks[i]),
                              "image/filename": part_stem(data.images[i]).encode(errors="surrogateescape"),
                              "image/format": image_suffix(data.images[i], image).lstrip(".").encode()})


def to_files(data: SegmentationData, out: Path) -> None:
    """Write the pairs of ``data`` as ``out/images/NNNNNNN<ext>`` and ``out/masks/NNNNNNN<ext>``, in order."""
    for folder in ("images", "masks"):
        (out / folder).mkdir()
    for i, pair in enumerate(zip(data.images, data.masks)):
        for folder, part in zip(("images", "masks"), pair):
            blob = read_part(part)
            write_file(out / folder / f"{i:07d}{image_suffix(part, blob)}", blob)


def other_container(data: SegmentationData, out: Path, way_out: str) -> SegmentationData:
    """The pairs of ``data`` in the other container (TFRecords for files, files for TFRecords), written
    into the cache folder ``out`` once, whole (a second process waits for the first: see
    :func:`daliloader.folders.made_once`); ``way_out`` says what to do when ``out`` cannot be written."""
    write = to_files if data.records is not None else to_tfrecord

    def make(folder: Path) -> None:
        write(data, folder)
        (folder / COMPLETE).touch()

    made_once(out, COMPLETE, "daliloader bench --tfrecord", way_out, make)
    if data.records is not None:
        return SegmentationData.from_dirs(out / "images", out / "masks", data.classes, mask_suffix="")
    return SegmentationData.from_tfrecord(str(out / "*.tfrecord"), classes=data.classes)


def local_copy(data: SegmentationData, out: Path, way_out: str) -> SegmentationData:
    """The pairs of ``data``, in a bucket, as files on the local disk (:func:`to_files`, the same bytes in
    the same order), written into the cache folder ``out`` once, whole, as :func:`other_container` writes."""
    def make(folder: Path) -> None:
        to_files(data, folder)
        (folder / COMPLETE).touch()

    made_once(out, COMPLETE, "daliloader bench (a local copy of a bucket)", way_out, make)
    return SegmentationData.from_dirs(out / "images", out / "masks", data.classes, mask_suffix="")
