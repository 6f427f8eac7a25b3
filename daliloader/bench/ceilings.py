"""The decode ceilings that bound every backend: all CPU cores doing nothing but read and decode the
same files and, with a GPU, DALI's nvJPEG decoder on the images alone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import partial

from ..data import SegmentationData
from ..parallel import cores
from .timing import Rates, epoch_batches, measure

#: What :func:`cpu_decode_ceiling` can decode.
CPU_DECODES = ("pairs", "images", "masks")


def cpu_decode_ceiling(data: SegmentationData, workers: int, seconds: float, repeats: int,
                       what: str = "pairs") -> Rates:
    """Pairs (or images, or masks: ``what``) per second with ``workers`` threads doing nothing but read +
    decode, OpenCV's own thread pool off meanwhile (it would only oversubscribe the cores)."""
    import cv2

    from ..codecs import decode_file

    jobs, decode = _decode_jobs(data, what), partial(_decode, decode_file)
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        with ThreadPoolExecutor(workers) as pool:
            def one_pass():
                list(pool.map(decode, jobs))
            return measure(one_pass, len(jobs), seconds, repeats, warmup_batches=1)
    finally:
        cv2.setNumThreads(threads)


def _decode_jobs(data: SegmentationData, what: str) -> list[tuple]:
    """One job per pair (or image, or mask): the paths to decode, each followed by its cv2 flag."""
    import cv2

    from ..codecs import mask_flags

    mask_flag = mask_flags(data.classes)
    if what == "pairs":
        return [(p, cv2.IMREAD_COLOR, m, mask_flag) for p, m in zip(data.images, data.masks)]
    if what == "images":
        return [(p, cv2.IMREAD_COLOR) for p in data.images]
    if what == "masks":
        return [(m, mask_flag) for m in data.masks]
    raise ValueError(f"what={what!r}: one of {', '.join(CPU_DECODES)}")


def _decode(decode_file, job: tuple) -> None:
    for path, flag in zip(job[::2], job[1::2]):
        decode_file(path, flag)


def nvjpeg_ceiling(data: SegmentationData, batch_size: int, seconds: float, repeats: int,
                   device_id: int = 0) -> Rates:
    """Images per second that DALI's mixed (nvJPEG) decoder reaches on the dataset's images alone
    (files or TFRecords), after one epoch of warm-up."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch_size, num_threads=cores(), device_id=device_id, prefetch_queue_depth=2)
    def decode_only():
        encoded = _encoded_images(data)
        return fn.decoders.image(encoded, device="mixed", output_type=types.RGB, jpeg_fancy_upsampling=True)

    pipe = decode_only()
    pipe.build()
    return measure(pipe.run, batch_size, seconds, repeats, warmup_batches=epoch_batches(len(data), batch_size))


def _encoded_images(data: SegmentationData):
    """The DALI reader of the dataset's encoded images, shuffled with seed 0 (inside a pipeline)."""
    from nvidia.dali import fn

    if data.records is None:
        encoded, _ = fn.readers.file(files=list(data.images), random_shuffle=True, seed=0)
        return encoded
    from nvidia.dali import tfrecord as tfrec

    from ..parts import part_file
    from ..tfrecord import dali_index, indexed

    paths = list(dict.fromkeys(part_file(p) for p in data.images))  # every record of each file: a ceiling
    indexes = [dali_index(indexed(p)) for p in paths]
    key = data.records.image_key
    return fn.readers.tfrecord(path=paths, index_path=indexes, random_shuffle=True, seed=0,
                               features={key: tfrec.FixedLenFeature((), tfrec.string, "")})[key]
