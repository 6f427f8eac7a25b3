"""The packs of a prepared copy: webdataset tars and the index files DALI's webdataset reader seeks by.

Sample ``i`` is the members ``NNNNNNN.<image ext>``, ``NNNNNNN.labels.png``, ``NNNNNNN.labels.lz4`` (with
the masks' GPU form) and ``NNNNNNN.index`` (``i`` as int64, little-endian), in that order, written from
the prepared files (:func:`write_packs`); :func:`members` reads a tar back, and :func:`index_text` gives
the index a tar should have. The names are :mod:`daliloader.manifest`'s; the reader is
:meth:`daliloader.data.SegmentationData.from_prepared` with ``packs=True``.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .errors import LoadError
from .manifest import (
    INDEX_VERSION,
    PACK_GPU_MASK_EXT,
    PACK_IMAGE_EXTS,
    PACK_INDEX_EXT,
    PACK_MASK_EXT,
    PACKS_FOLDER,
    PacksEntry,
)

#: What each member of a sample is, by its extension (any other extension: the image).
KINDS = {PACK_MASK_EXT: "mask", PACK_INDEX_EXT: "index", PACK_GPU_MASK_EXT: "gpu mask"}


def write_packs(out: Path, pairs: Sequence[tuple[str, str]], pack_size: int,
                gpu_masks: Sequence[str] | None) -> PacksEntry:
    """Tars of ``pack_size`` samples of the copy ``out`` (``pairs``, and ``gpu_masks`` when there is a
    GPU form: paths relative to ``out``), in ``out/packs/``, each with DALI's index file beside it;
    returns the manifest's entry for them. A file that cannot be written raises an OSError naming it (a
    write to an open tar names no file: the tar is named); a tar DALI's ``wds2idx`` cannot index, a
    LoadError naming it. Needs ``wds2idx``, which ships with the DALI wheel (an ImportError saying so)."""
    try:
        import wds2idx  # noqa: F401  (ships with the DALI wheel)
    except ImportError as e:
        raise ImportError("writing pack indexes needs DALI's wds2idx: install daliloader[cuda120] or "
                          "daliloader[cuda130]") from e
    folder = out / PACKS_FOLDER
    folder.mkdir(exist_ok=True)
    tars, indexes = [], []
    for p, first in enumerate(range(0, len(pairs), pack_size)):
        tar_path, idx_path = folder / f"{p:05d}.tar", folder / f"{p:05d}.idx"
        try:
            write_pack(out, pairs, range(first, min(first + pack_size, len(pairs))), tar_path, gpu_masks)
            write_index(tar_path, idx_path)
        except OSError as e:  # a write to an open file names none: name the pack
            raise OSError(e.errno, e.strerror, e.filename or str(tar_path)) from None
        except (tarfile.TarError, ValueError) as e:  # ValueError: wds2idx found no member in the tar
            raise LoadError(f"cannot write the pack {tar_path}: {e}") from None
        tars.append(f"{PACKS_FOLDER}/{tar_path.name}")
        indexes.append(f"{PACKS_FOLDER}/{idx_path.name}")
    return PacksEntry(format="webdataset", samples_per_pack=pack_size, tars=tuple(tars), indexes=tuple(indexes),
                      image_exts=PACK_IMAGE_EXTS, mask_ext=PACK_MASK_EXT, index_ext=PACK_INDEX_EXT,
                      gpu_mask_ext=PACK_GPU_MASK_EXT if gpu_masks else None)


def write_pack(out: Path, pairs: Sequence[tuple[str, str]], samples: range, tar_path: Path,
               gpu_masks: Sequence[str] | None) -> None:
    """The tar ``tar_path`` of ``samples`` (numbers of ``pairs``), their members read from ``out``."""
    with tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i in samples:
            image, mask = pairs[i]
            tar.add(out / image, arcname=member_name(i, Path(image).suffix.lower().lstrip(".")))
            tar.add(out / mask, arcname=member_name(i, PACK_MASK_EXT))
            if gpu_masks:
                tar.add(out / gpu_masks[i], arcname=member_name(i, PACK_GPU_MASK_EXT))
            member = tarfile.TarInfo(member_name(i, PACK_INDEX_EXT))
            member.size = 8
            tar.addfile(member, io.BytesIO(sample_index(i)))


def write_index(tar_path: Path, idx_path: Path) -> None:
    """DALI's index file of the tar ``tar_path``, written by DALI's own ``wds2idx``."""
    from wds2idx import IndexCreator

    with IndexCreator(str(tar_path), str(idx_path), verbose=False) as creator:
        creator.create_index()


def member_name(i: int, ext: str) -> str:
    """The name of sample ``i``'s member with extension ``ext``."""
    return f"{i:07d}.{ext}"


def sample_index(i: int) -> bytes:
    """The content of sample ``i``'s index member: ``i`` as int64, little-endian."""
    return np.int64(i).astype("<i8").tobytes()


def members(path: Path, problems: list[str]) -> Iterator[tuple[tarfile.TarInfo, bytes]]:
    """The (member, bytes) of the tar ``path``, read front to back. Where it breaks off (a truncated or
    damaged pack), a problem naming the tar and the byte is appended to ``problems`` and no more
    members come (also where a damaged header in the middle reads to Python's tarfile as the end of the
    archive); a member that is no file is such a problem too, and skipped. Never raises on a damaged
    tar."""
    offset = None
    try:
        with tarfile.open(path) as tar:
            while True:
                offset = tar.offset
                member = tar.next()
                if member is None:
                    if _holds_data_from(path, offset):
                        problems.append(f"{path}: breaks at byte {offset} of {path.stat().st_size} (a member's "
                                        "header is damaged; the members after it are not read): prepare the "
                                        "copy again")
                    return
                if not member.isfile():
                    problems.append(f"{path}: {member.name} is not a file: the pack is damaged; prepare the copy again")
                    continue
                yield member, tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as e:
        size = path.stat().st_size if path.exists() else 0
        where = f"breaks at byte {min(offset, size)} of {size}" if offset is not None else "cannot be opened"
        problems.append(f"{path}: {where} ({e}): truncated or damaged; prepare the copy again")


def _holds_data_from(path: Path, offset: int) -> bool:
    """Whether the tar ``path`` holds anything but zeros from byte ``offset`` on (a tar ends in zero blocks)."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        while chunk := fh.read(1 << 20):
            if chunk.count(0) != len(chunk):
                return True
    return False


def index_text(members: list[tarfile.TarInfo]) -> str:
    """The DALI index of a tar with these members (in the tar's order), as DALI's ``wds2idx`` writes it:
    ``v1.2 N``, then per sample (the members that share a name before the first dot of their file name)
    ``ext offset size name`` of each member, on one line.

    A re-implementation of ``wds2idx.IndexCreator`` (which :func:`write_packs` uses), so that ``verify``
    checks a copy's index files where DALI is not installed; tests/test_packs.py holds the two to the
    same text for USTAR tars, the format :func:`write_pack` writes. (For a GNU long-name member, which
    ``prepare`` never writes, wds2idx's GNU-tar path gives the offset of the long-name header, its
    tarfile fallback the member's data, as this does.)"""
    samples, last = [], None
    for member in members:
        cut = member.name.find(".", member.name.rfind("/") + 1)
        key, ext = member.name[:cut], member.name[cut + 1:]
        if not key or key.endswith("/"):
            continue
        if key != last:
            samples.append([])
            last = key
        samples[-1].append(f"{ext} {member.offset_data} {member.size} {member.name}")
    return f"{INDEX_VERSION} {len(samples)}\n" + "".join(" ".join(sample) + "\n" for sample in samples)
