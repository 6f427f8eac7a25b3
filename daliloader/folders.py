"""Folders that others read, written whole or not at all: what ``daliloader prepare`` writes, the bench's
cached prepared copy and the embedded dataset.

As TFDS (``*.incomplete*`` folders) and Hugging Face datasets (lock files) do, a folder is written under
an exclusive lock (``filelock``), into a temporary sibling (or in place, for an existing empty folder)
marked as unfinished until its last step, so that an interruption leaves nothing any loader accepts,
and the next run cleans up after it (:func:`atomic_folder`); a cache is made once, and a second process
waits for the first (:func:`made_once`).
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
import secrets
import shutil
import socket
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from .codecs import write_file
from .errors import DataError, LoadError, cannot_write, user_stacklevel
from .pairing import INCOMPLETE_MARKER

#: What to do when OUT cannot be written: the end of prepare's messages about it.
OUT_WAY_OUT = "choose another OUT"
#: What the root of a freshly made ext2/3/4 file system holds: an OUT that holds only it is empty.
LOST_FOUND = "lost+found"
log = logging.getLogger("daliloader")


@contextmanager
def atomic_folder(out: str | Path, what: str = "daliloader prepare", way_out: str = OUT_WAY_OUT):
    """Yield the folder to write ``out``'s content into, under an exclusive lock on ``out``; when the
    block fails or is interrupted, what it wrote is removed.

    As TFDS (``*.incomplete*`` folders) and Hugging Face datasets (lock files) do:

    * a second writer to the same ``out`` is refused with the first one's name (:func:`exclusive`);
    * a new ``out`` is written as a temporary sibling, ``OUT.incomplete-*``, renamed to ``out`` at the
      end; an existing empty folder (a mount point, or a link to a folder, which no rename can replace)
      is written in place. Either folder carries :data:`~daliloader.pairing.INCOMPLETE_MARKER` from
      before the first file until after the last, which every loader and ``check`` refuse: an
      interruption leaves no folder that loads, only a marked one;
    * a later run removes the leftovers of interrupted ones, saying so;
    * a file that cannot be written ends the run with one line naming it and why (the disk is full,
      the folder is read-only), and ``way_out``.
    """
    out = Path(out).absolute()
    with exclusive(out, what, way_out), _building(out, what, way_out) as folder:
        yield folder


def made_once(out: str | Path, complete: str, what: str, way_out: str, make) -> None:
    """Fill the cache folder ``out`` with ``make(folder)`` unless it holds ``complete`` already.

    As :func:`atomic_folder`, except that a process that finds another one making ``out`` waits for it
    (a cache is nobody's choice of folder: refusing would leave the user nothing to do) and then uses
    what it made; and that an unmarked, unfinished ``out`` (older daliloaders wrote caches in place) is
    removed, saying so."""
    out = Path(out).absolute()

    def done() -> bool:
        return (out / complete).exists() and not (out / INCOMPLETE_MARKER).exists()

    if done():
        return
    with exclusive(out, what, way_out, wait=True):
        if done():  # made by the run this one waited for
            return
        if out.is_dir() and not (out / INCOMPLETE_MARKER).exists() and any(out.iterdir()):
            try:
                shutil.rmtree(out)
            except OSError as e:
                raise DataError(f"cannot remove {out}, an unfinished copy that an older daliloader left in the cache "
                                f"({e.filename}: {e.strerror}): delete it, or {way_out}") from None
            warnings.warn(f"removed {out}, an unfinished copy that an older daliloader left in the cache: made "
                          "again now", stacklevel=user_stacklevel())
        with _building(out, what, way_out) as folder:
            make(folder)


@contextmanager
def exclusive(out: Path, what: str = "daliloader prepare", way_out: str = OUT_WAY_OUT, wait: bool = False):
    """Hold ``out``'s lock (a ``filelock.FileLock``, ``.OUT.lock`` beside it) for the block. Another
    holder is refused at once with what it wrote about itself (process, host, start), or, with
    ``wait``, waited for. ``out``'s parent folders are made first."""
    from filelock import FileLock, Timeout

    _make_parent(out, way_out)
    lock_path = out.parent / _beside(out, ".", ".lock")
    owner = out.parent / _beside(out, ".", ".lock.owner")
    lock = FileLock(str(lock_path))
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            holder = _holder(owner)
            if not wait:
                raise DataError(f"{out} is being written by {holder} (lock {lock_path}); wait for it to finish, or "
                                f"{way_out}") from None
            log.warning("%s is being written by %s: waiting for it to finish", out, holder)
            lock.acquire()
    except OSError as e:
        raise DataError(f"cannot create the lock {lock_path} beside {out}: {cannot_write(e, way_out)}") from None
    note = out.parent / _beside(out, ".", f".lock.owner.{os.getpid()}")
    try:
        try:
            write_file(note, f"{what}, pid {os.getpid()} on {socket.gethostname()}, since "
                             f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
            note.replace(owner)  # whole or not at all, for a refused run reading it
        except OSError as e:
            note.unlink(missing_ok=True)
            raise LoadError(f"cannot write {note}, the lock's note beside {out}: {cannot_write(e, way_out)}") from None
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


@contextmanager
def _building(out: Path, what: str, way_out: str):
    """:func:`atomic_folder` with ``out``'s lock held."""
    _remove_leftovers(out, what, way_out)
    _check_output(out, way_out)
    in_place = out.is_dir()
    try:
        folder = out if in_place else _new_folder(out.parent, _beside(out, "", ".incomplete-", room=8))
    except OSError as e:
        raise LoadError(f"cannot write into {out.parent}: {cannot_write(e, way_out)}") from None
    try:
        write_file(folder / INCOMPLETE_MARKER, f"{what} into {out}, pid {os.getpid()}: not a dataset until this "
                                               "file is gone\n".encode())
        yield folder
        if not in_place:
            folder.rename(out)
            folder = out
        (out / INCOMPLETE_MARKER).unlink()  # the last step: now it is a dataset
    except BaseException as e:
        left = _remove_marked(folder, keep=in_place)
        after = ("; what was written is removed" if left is None else
                 f"; what was written could not all be removed ({left}): it stays marked as unfinished, and the next "
                 "run removes it")
        if isinstance(e, OSError):  # one line, at the first file that could not be written
            raise LoadError(f"cannot write {e.filename or folder}: {cannot_write(e, way_out)}{after}") from None
        if left is not None:  # (an interrupt, another error: said beside it)
            warnings.warn(f"{folder}: {after[2:]}", stacklevel=user_stacklevel())
        raise


def _check_output(out: Path, way_out: str) -> None:
    if out.is_symlink() and not out.exists():
        raise DataError(f"{out} is a symbolic link to {os.readlink(out)}, which does not exist: make that folder, or "
                        f"{way_out}")
    if out.exists() and (not out.is_dir() or any(p.name != LOST_FOUND for p in out.iterdir())):
        raise DataError(f"{out} exists and is not an empty folder; {way_out}")


def _new_folder(parent: Path, prefix: str) -> Path:
    """A new folder ``prefix`` + 8 random characters in ``parent``, with the permissions the umask gives
    (``tempfile.mkdtemp`` makes it private, and the rename would keep that for the finished copy)."""
    while True:
        folder = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue


def _remove_leftovers(out: Path, what: str, way_out: str) -> None:
    """Remove what interrupted runs into ``out`` left (folders that carry the marker: ``OUT.incomplete-*``
    beside it, or ``out`` itself when written in place), saying so; unmarked folders are not ours."""
    for leftover in sorted(out.parent.glob(glob.escape(_beside(out, "", ".incomplete-", room=8)) + "*")):
        if (leftover / INCOMPLETE_MARKER).exists():
            failed = _remove_marked(leftover, keep=False)
            warnings.warn(f"removed {leftover}: the leftover of an interrupted {what} into {out}" if failed is None
                          else f"could not remove {leftover}, the leftover of an interrupted {what} into {out} "
                               f"({failed}): delete it", stacklevel=user_stacklevel())
        elif leftover.is_dir() and not any(leftover.iterdir()):
            leftover.rmdir()  # emptied, marker and all, by a run stopped before its last step
    if (out / INCOMPLETE_MARKER).exists():
        failed = _remove_marked(out, keep=True)
        if failed is not None:
            raise DataError(f"{out} holds the leftover of an interrupted {what}, which could not be removed "
                            f"({failed}): delete what it holds, or {way_out}")
        warnings.warn(f"emptied {out}: it held the leftover of an interrupted {what}", stacklevel=user_stacklevel())


def _remove_marked(folder: Path, keep: bool) -> str | None:
    """Remove what ``folder`` holds, its marker last (a second Ctrl-C during the removal leaves it marked,
    never an unmarked part of a copy), then ``folder`` itself unless ``keep``; what went wrong, or None."""
    try:
        for entry in folder.iterdir():
            if entry.name in (INCOMPLETE_MARKER, LOST_FOUND):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        (folder / INCOMPLETE_MARKER).unlink(missing_ok=True)
        if not keep:
            folder.rmdir()
    except OSError as e:
        return f"{e.filename}: {e.strerror or e}"
    return None


def _make_parent(out: Path, way_out: str) -> None:
    """``out``'s parent folders, made: or a DataError naming the file in their way, or why not."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        in_the_way = next((p for p in reversed(out.parents) if p.exists() and not p.is_dir()), None)
        if in_the_way is not None:
            raise DataError(f"cannot make the folder {out.parent}: {in_the_way} is a file, not a folder; "
                            f"{way_out}") from None
        raise DataError(f"cannot make the folder {out.parent}: {cannot_write(e, way_out)}") from None


def _beside(out: Path, lead: str, tail: str, room: int = 0) -> str:
    """The name of a file beside ``out``: ``lead + out's name + tail``, within the 255 bytes a name may
    have (``room``: bytes appended later). A long name is cut, and a digest of the whole keeps two cut
    names apart: an OUT name that is valid always gets its lock, note and temporary folder."""
    name = lead + out.name + tail
    if len(name.encode()) + room <= 255:
        return name
    digest = hashlib.sha1(out.name.encode()).hexdigest()[:10]
    keep = 255 - room - len((lead + tail).encode()) - len(digest) - 1
    return f"{lead}{out.name.encode()[:keep].decode(errors='ignore')}~{digest}{tail}"


def _holder(owner: Path, wait: float = 2.0) -> str:
    """What the lock's holder wrote about itself. It writes that just after taking the lock, so a run
    refused in between waits for it a moment; a note of a process of this host that is gone is left by
    a killed run, and is not the holder's."""
    deadline = time.monotonic() + wait
    while True:
        try:
            text = owner.read_text().strip()
            found = re.search(r"pid (\d+) on (\S+),", text)
            if text and not (found and found[2] == socket.gethostname() and not _alive(int(found[1]))):
                return text
        except OSError:
            pass
        if time.monotonic() > deadline:
            return "another process"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True
