"""The data the bench measures besides the pairs given: the prepared copy and the same pairs in the
other container, each made once (in the cache, or in a folder the user names) and named after the
pairs they hold; and where the pairs are."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..cache import AS_FILES, AS_RECORDS, LOCAL, PREPARED
from ..data import SegmentationData
from .record import Data

#: Samples per pack in the bench's prepared copy.
BENCH_PACK_SIZE = 256


def quiet(what: str, fn):
    """A ``status(what, fn)`` that shows nothing: runs ``fn`` and returns what it returns."""
    return fn()


def dataset_digest(data: SegmentationData) -> str:
    """A short digest of a dataset, for the names of the bench's cached copies: each pair's files where
    they are (absolute paths, URLs) as they are now (their stamps: a file edited or replaced makes
    another digest), and how its class map reads the masks (its names too, which a prepared copy
    records)."""
    from ..buckets import absolute
    from ..parts import part_file, part_stamp

    parts = [[absolute(part_file(p)), str(p), part_stamp(p)] for p in data.images + data.masks]
    key = json.dumps([parts, data.classes.reading(), list(data.classes.names)], default=str)
    return hashlib.sha1(key.encode(errors="surrogateescape")).hexdigest()[:12]


def dataset_place(data: SegmentationData) -> str:
    """Where a dataset's files are: the folder that holds them all (a multi-city split: the split's
    folder, not its first city's), or the TFRecord files' folder."""
    from ..buckets import is_url
    from ..parts import part_file

    files = {part_file(p) for p in data.images}
    if is_url(next(iter(files))):  # a bucket's objects: the URL of the folder that holds them all
        return "s3://" + os.path.commonpath([f[len("s3://"):].rsplit("/", 1)[0] for f in files])
    folders = sorted({os.path.dirname(os.path.abspath(f)) for f in files})
    return folders[0] if len(folders) == 1 else os.path.commonpath(folders)


def place_name(data: SegmentationData) -> str:
    """A short name of where a dataset's pairs are: the folder of its first file."""
    from ..parts import part_file

    return Path(part_file(data.images[0])).parent.name


def other_container(data: SegmentationData, status=quiet) -> tuple[Data, SegmentationData]:
    """``--tfrecord``: the same pairs in the other container, made once in the cache: ``("tfrecord",
    data)`` for files, ``("files", data)`` for TFRecords (see :mod:`daliloader.convert`). ``status(what,
    fn)`` runs the making while showing what it does."""
    from .. import convert
    from ..environment import cache_dir, cache_way_out

    which, prefix = (Data.FILES, AS_FILES) if data.records is not None else (Data.TFRECORD, AS_RECORDS)
    out = cache_dir() / f"{prefix}{place_name(data)}-n{len(data)}-{dataset_digest(data)}"
    return which, status(f"writing {len(data)} pairs as {which} into {out} (or waiting for a run "
                         "writing them)", lambda: convert.other_container(data, out, cache_way_out()))


def local_copy(data: SegmentationData, status=quiet) -> SegmentationData:
    """The pairs of a dataset in a bucket, copied once into the cache as files, which the bench measures
    beside the bucket (the same bytes on the local disk). ``status`` as for :func:`other_container`."""
    from .. import convert
    from ..environment import cache_dir, cache_way_out

    out = cache_dir() / f"{LOCAL}{place_name(data)}-n{len(data)}-{dataset_digest(data)}"
    return status(f"copying {len(data)} pairs from the bucket into {out} (or waiting for a run copying them)",
                  lambda: convert.local_copy(data, out, cache_way_out()))


def prepared_copy(data: SegmentationData, where: str, status=quiet) -> Path:
    """The folder of the prepared copy (with packs) the bench compares with: ``where`` names one (made
    there if absent), or is ``"cache"``: made once for this dataset in the cache folder, where a bench
    that finds another one making it waits for it and then uses its copy."""
    from ..environment import cache_dir, cache_way_out
    from ..errors import DataError
    from ..manifest import load_manifest
    from ..preparation import MANIFEST, VERSION, holds, prepare, prepare_cached

    source = {"made_by": "daliloader bench --prepared"}
    if where == "cache":
        out = cache_dir() / f"{PREPARED}{VERSION}-{place_name(data)}-n{len(data)}-{dataset_digest(data)}"
        status(f"preparing {len(data)} pairs into {out} (or waiting for a run making it)",
               lambda: prepare_cached(data, out, cache_way_out(), pack_size=BENCH_PACK_SIZE, source=source))
        return out
    out = Path(where)
    if (out / MANIFEST).exists():
        if not holds(load_manifest(out), data):
            raise DataError(f"--prepared-dir {out} holds a prepared copy of other pairs, or of these read with "
                            "another class table: name another folder, or remove it to have it made again")
    else:
        status(f"preparing {len(data)} pairs into {out}",
               lambda: prepare(data, out, pack_size=BENCH_PACK_SIZE, progress=False, source=source))
    return out
