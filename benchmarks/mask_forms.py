"""Which form of a segmentation mask DALI reads fastest, on this machine's CPU and, if it has one, GPU.

Forms, all holding the same class indices (checked bit for bit before timing):
  rgb-png         the original colour mask (what CamVid ships; needs the colour mapping afterwards)
  png8            8-bit class indices, OpenCV's default PNG settings
  png8-nofilter   8-bit class indices, no row filter, deflate 9 (what `daliloader prepare` writes)
  jp2-lossless    8-bit class indices as lossless JPEG 2000 (OpenJPEG on the CPU, nvJPEG2000 on a GPU)
  npy             raw uint8 arrays: nothing to decode (fn.readers.numpy; device="gpu" reads to the GPU)
  lz4             8-bit class indices, one LZ4 block (what `daliloader prepare` writes for dali-gpu): on the
                  GPU, DALI's fn.decoders.inflate (nvCOMP); DALI has no CPU inflate, so the CPU row is
                  python-lz4 in one thread per core (what a CPU loader would do)

PNG decodes on the CPU in DALI even with device="mixed". Lossless JPEG (nvJPEG) is left out: neither
OpenCV nor DALI writes it. The masks come from the embedded synthetic dataset, mapped once.

Framework-free (DALI, OpenCV, numpy): runs where TensorFlow is not installed.
  usage: python benchmarks/mask_forms.py [--n 64] [--image-size 720 960] [--seconds 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
from nvidia.dali import fn, pipeline_def, types

from daliloader.backends import dali_gpu_count
from daliloader.backends.dali_graph import lz4_header
from daliloader.bench import machine_info, measure
from daliloader.codecs import MASK_PNG_PARAMS, decode_mask, encode_lz4_mask, read
from daliloader.manifest import read_lz4_mask
from daliloader.parallel import cores
from daliloader.report import write_json
from daliloader.synthetic import default_dataset

FORMS = {
    "png8": (".png", []),
    "png8-nofilter": (".png", list(MASK_PNG_PARAMS)),
    "jp2-lossless": (".jp2", [cv2.IMWRITE_JPEG2000_COMPRESSION_X1000, 1000]),
}


def write_forms(data, labels: list[np.ndarray], root: Path) -> dict[str, list[str]]:
    """Every form of every mask under ``root``; returns the files per form."""
    files = {"rgb-png": list(data.masks)}
    for form, (ext, params) in FORMS.items():
        (root / form).mkdir()
        files[form] = []
        for i, lab in enumerate(labels):
            path = str(root / form / f"{i:05d}{ext}")
            if not cv2.imwrite(path, lab, params):
                raise RuntimeError(f"OpenCV cannot write {path}")
            files[form].append(path)
    (root / "npy").mkdir()
    (root / "lz4").mkdir()
    files["npy"], files["lz4"] = [], []
    for i, lab in enumerate(labels):
        files["npy"].append(str(root / "npy" / f"{i:05d}.npy"))
        np.save(files["npy"][-1], lab)
        files["lz4"].append(str(root / "lz4" / f"{i:05d}.lz4"))
        Path(files["lz4"][-1]).write_bytes(encode_lz4_mask(lab))
    return files


class Lz4OnTheCpu:
    """The lz4 form read and inflated by python-lz4 on every core, a batch per call (``run()``, as a pipeline)."""

    def __init__(self, files: list[str], batch_size: int):
        self.files, self.batch_size, self.next = files, batch_size, 0
        self.pool = ThreadPoolExecutor(cores())

    def run(self):
        batch = [self.files[(self.next + k) % len(self.files)] for k in range(self.batch_size)]
        self.next += self.batch_size
        return [list(self.pool.map(read_lz4_mask, batch))]


def mask_pipeline(form: str, files: list[str], device: str, batch_size: int):
    """Read (and decode) the masks of one form: ``device`` "cpu" or "gpu" (nvJPEG2000 / GPU reads)."""
    gpu = device == "gpu"

    if form == "lz4" and not gpu:
        return Lz4OnTheCpu(files, batch_size)

    @pipeline_def(batch_size=batch_size, num_threads=cores(), device_id=0 if gpu else None, seed=0)
    def masks():
        if form == "npy":
            return fn.readers.numpy(files=files, device=device, name="r")
        encoded, _ = fn.readers.file(files=files, name="r")
        if form == "lz4":
            shape, block = lz4_header(encoded)
            return fn.decoders.inflate(block.gpu(), shape=shape, dtype=types.UINT8)
        return fn.decoders.image(encoded, device="mixed" if gpu else "cpu",
                                 output_type=types.RGB if form == "rgb-png" else types.GRAY)

    pipe = masks()
    pipe.build()
    return pipe


def lossless(form: str, files: list[str], labels: list[np.ndarray], device: str) -> bool | None:
    """Whether this form, read back through DALI on ``device``, gives exactly the labels (None for
    rgb-png, which holds colours, not labels)."""
    if form == "rgb-png":
        return None
    pipe = mask_pipeline(form, files, device, 1)
    for want in labels:
        out = pipe.run()[0]
        got = np.array(out.as_cpu()[0] if hasattr(out, "as_cpu") else out[0])  # lz4 on the CPU: a list
        if not np.array_equal(got.reshape(want.shape), want):
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--image-size", type=int, nargs=2, default=(720, 960), metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    data = default_dataset(args.n, image_size=tuple(args.image_size))
    labels = [data.classes.map_mask(decode_mask(read(m), m, data.classes)) for m in data.masks]
    devices = ["cpu"] + (["gpu"] if dali_gpu_count() > 0 else [])
    report = {"machine": machine_info(), "masks": len(labels), "size": [args.image_size[1], args.image_size[0]],
              "batch_size": args.batch_size,
              "method": "DALI pipeline reading (and decoding) the masks only (lz4 on the CPU: python-lz4, one thread "
                        "per core), page cache warm; median of repeats after one epoch of warm-up; masks/s",
              "results": []}
    with tempfile.TemporaryDirectory() as tmp:
        files = write_forms(data, labels, Path(tmp))
        print(f"{len(labels)} masks of {args.image_size[1]}x{args.image_size[0]}; {cores()} CPU threads; "
              f"devices: {', '.join(devices)}")
        print(f"{'form':15} {'device':6} {'KB/mask':>8} {'masks/s':>9} {'min-max':>15}  exact")
        for form, paths in files.items():
            kb = statistics.mean(os.path.getsize(p) for p in paths) / 1024
            for device in devices:
                try:
                    exact = lossless(form, paths, labels, device)
                    pipe = mask_pipeline(form, paths, device, args.batch_size)
                    rates = measure(pipe.run, args.batch_size, args.seconds, args.repeats,
                                    warmup_batches=max(1, len(paths) // args.batch_size))
                except RuntimeError as e:  # e.g. the GPU numpy reader where GPUDirect Storage (cuFile) cannot work
                    reason = next((line.strip() for line in str(e).splitlines() if "failed" in line.lower()),
                                  str(e).splitlines()[-1])
                    report["results"].append({"form": form, "device": device, "kb_per_mask": round(kb, 1),
                                              "error": reason})
                    print(f"{form:15} {device:6} {kb:8.1f}  failed: {reason}")
                    continue
                row = {"form": form, "device": device, "kb_per_mask": round(kb, 1), "exact": exact,
                       "median": round(statistics.median(rates), 1), "min": round(min(rates), 1),
                       "max": round(max(rates), 1)}
                report["results"].append(row)
                print(f"{form:15} {device:6} {kb:8.1f} {row['median']:9.1f} {row['min']:7.1f}-{row['max']:<7.1f}  "
                      f"{ {True: 'yes', False: 'NO', None: 'n/a'}[exact]}")
                del pipe
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
