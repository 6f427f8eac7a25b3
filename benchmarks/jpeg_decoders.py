"""How far apart JPEG decoders land, per pixel, on the embedded dataset's photos: the tolerances of
the cross-backend image tests come from here.

Every decoder decodes the same whole JPEGs; each is compared with DALI's CPU decoder (libjpeg-turbo:
accurate integer IDCT, "fancy" chroma upsampling), in levels of 0-255:
  opencv                     cv2.imdecode (libjpeg-turbo)
  tf-accurate                tf.io.decode_jpeg(dct_method="INTEGER_ACCURATE"), what the tfdata backend uses
  tf-accurate-no-fancy       the same without fancy upsampling: chroma replicated, as nvJPEG does by
                             default (DALI's jpeg_fancy_upsampling=False)
  tf-fast-idct               tf.io.decode_jpeg(dct_method="INTEGER_FAST"): another IDCT, fancy upsampling;
                             the size of a gap between two IDCT implementations
  dali-mixed[-no-fancy]      nvJPEG through DALI's mixed decoder, with and without jpeg_fancy_upsampling
                             (only on a machine with a GPU)
  dali-{cpu,mixed}-window    what the loaders run: decoders.image_slice decoding only a window (two
                             windows per photo), against the same window of the whole reference decode

DALI and OpenCV are needed; TensorFlow rows are skipped without TensorFlow, GPU rows without a GPU.
  usage: python benchmarks/jpeg_decoders.py [--n 64] [--json OUT]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np
from nvidia.dali import fn, pipeline_def, types

from daliloader.backends import dali_gpu_count
from daliloader.bench import machine_info
from daliloader.report import write_json
from daliloader.synthetic import default_dataset


def dali_decode(files: list[str], device: str, **decoder_args) -> list[np.ndarray]:
    """Whole-image RGB decodes by DALI, in file order (``device``: "cpu" or "mixed")."""
    @pipeline_def(batch_size=1, num_threads=1, device_id=0 if device == "mixed" else None)
    def decode():
        encoded, _ = fn.readers.file(files=files, random_shuffle=False)
        return fn.decoders.image(encoded, device=device, output_type=types.RGB, **decoder_args)

    pipe = decode()
    pipe.build()
    out = []
    for _ in files:
        (images,) = pipe.run()
        images = images.as_cpu() if hasattr(images, "as_cpu") else images
        out.append(np.array(images.at(0)))
    return out


#: (top, left, height, width) windows decoded alone, as the loaders decode crop windows.
WINDOWS = ((104, 224, 512, 512), (37, 53, 301, 403))


def window_pipeline(files: list[str], device: str, anchor: tuple[int, int], shape: tuple[int, int]):
    """A built pipeline that decodes the window ``(anchor, shape)`` of each file in turn."""
    @pipeline_def(batch_size=1, num_threads=1, device_id=0 if device == "mixed" else None)
    def decode():
        encoded, _ = fn.readers.file(files=files, random_shuffle=False)
        return fn.decoders.image_slice(encoded, np.array(anchor, np.int32), np.array(shape, np.int32),
                                       axis_names="HW", normalized_anchor=False, normalized_shape=False,
                                       device=device, output_type=types.RGB, jpeg_fancy_upsampling=True)

    pipe = decode()
    pipe.build()
    return pipe


def dali_decode_windows(files: list[str], device: str) -> tuple[list[np.ndarray], list[tuple]]:
    """Each window of WINDOWS of each file, decoded alone by ``decoders.image_slice``."""
    out, where = [], []
    for top, left, height, width in WINDOWS:
        pipe = window_pipeline(files, device, (top, left), (height, width))
        for i in range(len(files)):
            (images,) = pipe.run()
            images = images.as_cpu() if hasattr(images, "as_cpu") else images
            out.append(np.array(images.at(0)))
            where.append((i, top, left, height, width))
    return out, where


def decoders(files: list[str]) -> dict:
    """Decoder name -> function giving the RGB arrays of ``files``."""
    found = {"opencv": lambda: [cv2.cvtColor(cv2.imread(f, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION),
                                             cv2.COLOR_BGR2RGB) for f in files]}
    try:
        import tensorflow as tf
    except ImportError:
        tf = None
    if tf is not None:
        def tf_decode(**kw):
            return lambda: [tf.io.decode_jpeg(tf.io.read_file(f), channels=3, **kw).numpy() for f in files]

        found["tf-accurate"] = tf_decode(dct_method="INTEGER_ACCURATE")
        found["tf-accurate-no-fancy"] = tf_decode(dct_method="INTEGER_ACCURATE", fancy_upscaling=False)
        found["tf-fast-idct"] = tf_decode(dct_method="INTEGER_FAST")
    if dali_gpu_count() > 0:
        found["dali-mixed"] = lambda: dali_decode(files, "mixed", jpeg_fancy_upsampling=True)
        found["dali-mixed-no-fancy"] = lambda: dali_decode(files, "mixed", jpeg_fancy_upsampling=False)
    return found


def compare(reference: list[np.ndarray], other: list[np.ndarray]) -> dict:
    diff = np.concatenate([np.abs(a.astype(np.int16) - b).ravel() for a, b in zip(reference, other)])
    return {"max": int(diff.max()), "mean": round(float(diff.mean()), 4), "p99": int(np.percentile(diff, 99)),
            "p99.9": int(np.percentile(diff, 99.9)), "share_differing": round(float((diff > 0).mean()), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=64, help="pairs of the embedded dataset (default 64)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    files = list(default_dataset(args.n).images)
    reference = dali_decode(files, "cpu")
    rows = {name: compare(reference, decode()) for name, decode in decoders(files).items()}
    for device in ("cpu", "mixed") if dali_gpu_count() > 0 else ("cpu",):
        windows, where = dali_decode_windows(files, device)
        crops = [reference[i][top:top + h, left:left + w] for i, top, left, h, w in where]
        rows[f"dali-{device}-window"] = compare(crops, windows)
    report = {"machine": machine_info(), "images": len(files), "size": list(reference[0].shape),
              "reference": "DALI CPU decoder (libjpeg-turbo)", "unit": "levels of 0-255, per channel value",
              "decoders": rows}
    width = max(map(len, rows))
    print(f"{len(files)} JPEGs {reference[0].shape[1]}x{reference[0].shape[0]}, |decoder - DALI CPU| in levels:")
    for name, r in rows.items():
        print(f"  {name:<{width}}  max {r['max']:3d}  p99.9 {r['p99.9']:3d}  p99 {r['p99']:3d}  mean {r['mean']:.4f}  "
              f"differing {100 * r['share_differing']:.1f}%")
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
