"""TFRecord files as TensorFlow writes them, read and written without TensorFlow.

A TFRecord file is a sequence of records, each framed as ``length`` (uint64, little-endian), the masked
CRC-32C of those 8 bytes, ``length`` bytes of payload and the masked CRC-32C of the payload (the
format of ``tf.io.TFRecordWriter``; the CRC is that of TensorFlow's ``crc32c::Mask``). Segmentation
datasets store one ``tf.train.Example`` per record: a map from feature keys to a list of bytes, floats
or int64s, with the encoded image and mask as bytes.

:func:`scan` reads a file once, checking every CRC, and records what the loaders need: each record's
number, offset, size and data CRC, its feature keys, and the value of a file-name feature where records
have one. :func:`indexed` keeps that scan in an index (in the cache, or beside the file where asked) and
scans again when the file changes or the index is damaged. :func:`read_record`, :func:`read_pair` and
:func:`example_bytes` read one record, compare it with what was indexed, and take a feature out of it:
every backend reads records through them or checks what it read against the index, so that a record
that changed since the dataset was loaded is never used. :class:`Writer` writes TFRecord files of
Examples (the bench's TFRecord copy of a dataset).

Compressed files (``TFRecordOptions(compression_type="GZIP" | "ZLIB")``) cannot be read at an offset:
they are refused with the command that decompresses them.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shlex
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from . import buckets
from .cache import INDEXES, prune_indexes, write_whole
from .environment import cache_dir, cache_way_out
from .errors import DataError, StorageError, StorageFault, ValueEnum

#: Bytes before a record's payload (length, CRC of the length) and after it (CRC of the payload).
HEADER, FOOTER = 12, 4
#: The folder beside a TFRecord file where its index (``<file name>.json``, the scan) is kept when asked
#: (``index="beside"``; by default indexes are kept in the cache).
INDEX_FOLDER = ".daliloader-index"
#: 2: each record's data CRC, and a digest of the whole index.
INDEX_VERSION = 2
#: Features that name a record's source file, in the order they are looked for (Model Garden and
#: DeepLab, TFDS's oxford_iiit_pet, TFDS's cityscapes, others).
NAME_KEYS = ("image/filename", "file_name", "image_id", "filename", "image/source_id")
#: The command that decompresses a GZIP or ZLIB TFRecord file in place (zlib's window bits 47 read either
#: header): into a temporary sibling, then over the file, so that the names and patterns that found it
#: find the uncompressed one.
DECOMPRESS = ("python3 -c \"import sys, zlib; d = zlib.decompressobj(47); "
              "[sys.stdout.buffer.write(d.decompress(b)) for b in iter(lambda: sys.stdin.buffer.read(1 << 20), b'')]\" "
              "< {file} > {temporary} && mv {temporary} {file}")


def masked_crc(data: bytes) -> int:
    """TensorFlow's masked CRC-32C of ``data``: the CRC rotated right by 15 bits plus a constant."""
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class RecordFault(ValueEnum):
    """Why a record cannot be read."""

    TRUNCATED = "truncated"  # the file ends inside it
    CRC = "crc"  # its length or its data fails its CRC
    COMPRESSED = "compressed"  # the file is GZIP or ZLIB
    NOT_TFRECORD = "not_tfrecord"  # the file starts with no record header
    PARSE = "parse"  # its data is no tf.train.Example
    MISSING_KEY = "missing_key"  # no single picture under the image or mask key
    UNREADABLE = "unreadable"  # the operating system refused to read it
    CHANGED = "changed"  # its data is not what was indexed (the file changed since)


class RecordProblem(DataError):
    """A record that cannot be read: ``kind`` says why, and the message names the file, the record number
    and its byte offset."""

    def __init__(self, kind: RecordFault, file: str, record: int, offset: int, what: str):
        super().__init__(f"{file}: record {record} (at byte {offset}): {what}")
        self.kind, self.file, self.record, self.offset, self.what = RecordFault(kind), file, record, offset, what


# ---------------------------------------------------------------- tf.train.Example, the wire format
#: A feature's kind, as ``tf.train.Feature`` numbers its oneof fields.
KINDS = {1: "bytes", 2: "float", 3: "int64"}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("a varint runs past its message")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, start: int, end: int):
    """The fields of the message ``buf[start:end]``: ``(number, wire type, value)`` where a
    length-delimited value is its ``(start, end)`` and a varint its int."""
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value = (pos, pos + length)
            pos += length
        elif wire in (1, 5):
            value, pos = None, pos + (8 if wire == 1 else 4)
        else:
            raise ValueError(f"wire type {wire} has no place in a tf.train.Example")
        if pos > end:
            raise ValueError("a field runs past its message")
        yield number, wire, value


@dataclass(frozen=True)
class Feature:
    """One feature of an Example: its kind ("bytes", "float", "int64"), how many values it holds, and
    where its bytes values lie in the payload (``(start, end)`` each)."""

    kind: str
    count: int
    spans: tuple[tuple[int, int], ...] = ()


def parse_example(payload: bytes) -> dict[str, Feature]:
    """The features of a serialized ``tf.train.Example`` (raises ValueError when it is not one)."""
    features = {}
    for number, wire, span in _fields(payload, 0, len(payload)):
        if number != 1 or wire != 2:
            continue  # Example.features is field 1
        for entry_number, entry_wire, entry in _fields(payload, *span):
            if entry_number != 1 or entry_wire != 2:
                continue  # Features.feature: a map, each entry a message (key 1, value 2)
            key, value = None, None
            for f, w, v in _fields(payload, *entry):
                if f == 1 and w == 2:
                    key = payload[v[0]:v[1]].decode("utf-8", errors="replace")
                elif f == 2 and w == 2:
                    value = _feature(payload, v)
            if key is not None:
                features[key] = value or Feature("bytes", 0)
    return features


def _feature(payload: bytes, span: tuple[int, int]) -> Feature:
    for number, wire, inner in _fields(payload, *span):
        if number in KINDS and wire == 2:
            kind = KINDS[number]
            if kind == "bytes":
                values = tuple(v for f, w, v in _fields(payload, *inner) if f == 1 and w == 2)
                return Feature(kind, len(values), values)
            return Feature(kind, _count(payload, inner, kind))
    return Feature("bytes", 0)


def _count(payload: bytes, span: tuple[int, int], kind: str) -> int:
    count = 0
    for number, wire, value in _fields(payload, *span):
        if number != 1:
            continue
        if wire == 2 and kind == "float":  # packed
            count += (value[1] - value[0]) // 4
        elif wire == 2:  # packed varints
            pos = value[0]
            while pos < value[1]:
                _, pos = _varint(payload, pos)
                count += 1
        else:
            count += 1
    return count


def _bytes_field(number: int, data: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(data)) + data


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encode_example(features: dict[str, bytes | int]) -> bytes:
    """A serialized ``tf.train.Example`` of bytes (one value each) and int64 features."""
    entries = b""
    for key, value in features.items():
        if isinstance(value, int):
            kind = _bytes_field(3, _bytes_field(1, _encode_varint(value & (2**64 - 1))))
        else:
            kind = _bytes_field(1, _bytes_field(1, bytes(value)))
        entries += _bytes_field(1, _bytes_field(1, key.encode()) + _bytes_field(2, kind))
    return _bytes_field(1, entries)


# ---------------------------------------------------------------- records
def frame(payload: bytes) -> bytes:
    """One record as TFRecord files hold it."""
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload))


def read_record(file: str, record: int, offset: int, size: int, crc: int | None = None) -> bytes:
    """The payload of record number ``record`` at byte ``offset`` of ``file`` (``size`` bytes, framing
    included), its CRCs checked, and its data's CRC compared with ``crc``, the one it had when the file
    was indexed (where given): a record whose data changed since, even into another valid record, is
    refused. A RecordProblem names the file, the record and the offset. Read with plain file I/O: a file
    truncated or rewritten meanwhile is an error, never a signal (a memory map would raise SIGBUS)."""
    try:
        blob = _read_span(file, offset, size)
    except OSError as e:
        raise RecordProblem(RecordFault.UNREADABLE, file, record, offset,
                            f"cannot be read ({e.strerror or e})") from None
    except StorageError as e:
        if e.fault is not StorageFault.MISSING_OBJECT:
            raise  # the bucket's faults that say nothing of the file, named as they are
        raise RecordProblem(RecordFault.UNREADABLE, file, record, offset, "cannot be read (the object is gone)") \
            from None
    payload = _payload(blob, file, record, offset, size)
    if crc is not None and _data_crc(blob) != crc:
        forget_index(file, record, crc)  # no longer the file's: the next load, which the error asks for, indexes anew
        raise RecordProblem(RecordFault.CHANGED, file, record, offset, CHANGED_RECORD)
    return payload


def _read_span(file: str, offset: int, size: int) -> bytes:
    """``size`` bytes of a file or an object (``s3://``) from ``offset`` (fewer where it ends before)."""
    if buckets.is_url(file):
        return buckets.read_range(file, offset, size)
    with open(file, "rb") as fh:
        fh.seek(offset)
        return fh.read(size)


#: What a record whose data is not what was indexed is told.
CHANGED_RECORD = ("its data changed since the file was indexed, when the dataset was loaded (the file was rewritten, "
                  "or its records moved). Load the dataset again, which indexes it anew")


def _data_crc(blob: bytes) -> int:
    """The masked CRC of a record's data, as its last four bytes store it."""
    return struct.unpack("<I", blob[-FOOTER:])[0]


def _payload(blob: bytes, file: str, record: int, offset: int, size: int) -> bytes:
    if len(blob) < size:
        raise RecordProblem(RecordFault.TRUNCATED, file, record, offset,
                            f"the file ends {size - len(blob)} bytes into it: "
                            "truncated (an incomplete download or copy?)")
    length, crc = struct.unpack("<QI", blob[:HEADER])
    if masked_crc(blob[:8]) != crc or length != size - HEADER - FOOTER:
        raise RecordProblem(RecordFault.CRC, file, record, offset,
                            "its length field fails its CRC: the file is damaged, or changed since it was indexed")
    payload = blob[HEADER:HEADER + length]
    if masked_crc(payload) != _data_crc(blob):
        raise RecordProblem(RecordFault.CRC, file, record, offset, "its data fails its CRC: the file is damaged")
    return payload


def example_bytes(payload: bytes, key: str) -> bytes:
    """The one bytes value of feature ``key`` in an Example's payload (ValueError without one)."""
    feature = parse_example(payload).get(key)
    if feature is None or feature.kind != "bytes" or feature.count != 1:
        raise ValueError(f"no single bytes value under {key!r}")
    start, end = feature.spans[0]
    return payload[start:end]


# ---------------------------------------------------------------- scanning a file
@dataclass(frozen=True)
class Scan:
    """What one pass over a TFRecord file found: each readable record's number in the file, offset and
    size (framing included), the CRC of its data (as stored: what each later read is compared with),
    its feature keys (an index into ``keysets``: sorted ``(key, kind, count)``), and the value of its
    name feature (:data:`NAME_KEYS`, None without one); and the records that cannot be read, as
    RecordProblems (a damaged length or a truncated end stops the scan: what follows cannot be found)."""

    file: str
    stamp: tuple[int, ...]
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    keysets: tuple[tuple[tuple[str, str, int], ...], ...]
    record_keysets: tuple[int, ...]
    names: tuple[str | None, ...]
    problems: tuple[RecordProblem, ...] = ()
    numbers: tuple[int, ...] = ()
    crcs: tuple[int, ...] = ()

    def keys(self, i: int) -> tuple[tuple[str, str, int], ...]:
        """The ``(key, kind, count)`` of readable record ``i``."""
        return self.keysets[self.record_keysets[i]]

    @property
    def empty(self) -> bool:
        """Whether the file holds no byte (DeepLab's conversion scripts write empty shards)."""
        return self.stamp[0] == 0


def same_content(stamp: tuple, other: tuple) -> bool:
    """Whether two stamps (:func:`file_stamp`) are of one content: a file's size and modification time,
    which a copy (``cp -a``) and ``chmod`` keep while its inode and change time change; an object's size
    and ETag."""
    return tuple(stamp)[:2] == tuple(other)[:2]


def file_stamp(path: str | os.PathLike) -> tuple[int, ...]:
    """The stat stamp by which a file is known unchanged: size, modification time, inode and change time
    (a replacement of the same size whose modification time was carried over, as by ``cp -p``, still has
    a new change time). An object of a bucket (``s3://``): its size and ETag (:func:`daliloader.buckets.stamp`)."""
    if buckets.is_url(path):
        return buckets.stamp(path)
    s = os.stat(path)
    return s.st_size, s.st_mtime_ns, s.st_ino, s.st_ctime_ns


class _Scanning:
    """What :func:`scan` has found so far in one file."""

    def __init__(self, file: str, stamp: tuple[int, ...]):
        self.file, self.stamp = file, stamp
        self.offsets, self.sizes, self.numbers, self.crcs = [], [], [], []
        self.record_keysets, self.names, self.problems = [], [], []
        self.keysets: dict[tuple, int] = {}

    def record(self, number: int, offset: int, blob: bytes, size: int) -> bool:
        """Take the record ``blob`` (framing included, ``size`` bytes where the file is whole); whether the
        scan can go on after it."""
        try:
            payload = _payload(blob, self.file, number, offset, size)
            features = parse_example(payload)
        except RecordProblem as e:
            self.problems.append(e)
            return e.kind is not RecordFault.TRUNCATED
        except ValueError as e:
            self.problems.append(RecordProblem(RecordFault.PARSE, self.file, number, offset,
                                               f"its data is no tf.train.Example ({e})"))
            return True
        keyset = tuple(sorted((k, f.kind, f.count) for k, f in features.items()))
        self.record_keysets.append(self.keysets.setdefault(keyset, len(self.keysets)))
        self.names.append(_name(payload, features))
        self.offsets.append(offset)
        self.sizes.append(size)
        self.numbers.append(number)
        self.crcs.append(_data_crc(blob))
        return True

    def done(self) -> Scan:
        return Scan(self.file, self.stamp, tuple(self.offsets), tuple(self.sizes), tuple(self.keysets),
                    tuple(self.record_keysets), tuple(self.names), tuple(self.problems), tuple(self.numbers),
                    tuple(self.crcs))


def scan(file: str) -> Scan:
    """Read ``file`` once, record by record (see :class:`Scan`). A file that is no TFRecord file at all
    (compressed, or another format) is one problem, at record 0, saying what to do."""
    stamp, opened = _opened(file)
    found = _Scanning(file, stamp)
    with opened as fh:
        offset, number = 0, 0
        while offset < found.stamp[0]:
            head = fh.read(HEADER)
            problem = _header_problem(file, number, offset, head)
            if problem is not None:
                found.problems.append(problem)
                break
            size = HEADER + struct.unpack("<Q", head[:8])[0] + FOOTER
            left = found.stamp[0] - offset - HEADER  # (a length past the file's end is a truncated file)
            if not found.record(number, offset, head + fh.read(min(size - HEADER, left)), size):
                break
            offset += size
            number += 1
    return found.done()


def _opened(file: str):
    """``(stamp, file object)`` of a file; of an object of a bucket, its version as one HEAD request finds
    it and a reader of that version front to back by ranges (:func:`daliloader.buckets.reader`: another
    version is refused while it reads)."""
    if not buckets.is_url(file):
        return file_stamp(file), open(file, "rb")
    part = buckets.head(file)
    return part.stamp, buckets.reader(part)


def _header_problem(file: str, number: int, offset: int, head: bytes) -> RecordProblem | None:
    """Why a record's header (its first 12 bytes) cannot be read, or None."""
    if len(head) < HEADER:
        return RecordProblem(RecordFault.TRUNCATED, file, number, offset,
                             f"only {len(head)} bytes of its 12-byte header are there: the file is truncated")
    length, crc = struct.unpack("<QI", head)
    if masked_crc(head[:8]) == crc:
        return None
    if number == 0:
        return _foreign(file, head)
    return RecordProblem(RecordFault.CRC, file, number, offset,
                         "its length field fails its CRC: the file is damaged here, and nothing after this record "
                         "can be found")


def _name(payload: bytes, features: dict[str, Feature]) -> str | None:
    for key in NAME_KEYS:
        f = features.get(key)
        if f is not None and f.kind == "bytes" and f.count == 1:
            start, end = f.spans[0]
            return payload[start:end].decode("utf-8", errors="replace")
    return None


def _foreign(file: str, head: bytes) -> RecordProblem:
    """Why the first record header of ``file`` fails its CRC: the file is compressed (and how to
    decompress it), or damaged right at its start, or no TFRecord file."""
    if head[:2] == b"\x1f\x8b" or (head[0] == 0x78 and (head[0] << 8 | head[1]) % 31 == 0):
        kind = "GZIP" if head[:2] == b"\x1f\x8b" else "ZLIB"
        command = DECOMPRESS.format(file=shlex.quote(file), temporary=shlex.quote(file + ".partial"))
        return RecordProblem(RecordFault.COMPRESSED, file, 0, 0,
                             f"the file is {kind}-compressed, which cannot be read at a "
                             f"record's offset as DALI's reader does: decompress it once, in place:\n  {command}")
    return RecordProblem(RecordFault.NOT_TFRECORD, file, 0, 0,
                         f"its first 12 bytes ({head!r}) are no record header (a length "
                         "and its CRC): not a TFRecord file, or damaged from its start")


# ---------------------------------------------------------------- the index, kept
#: Where :func:`indexed` keeps a file's index: in the cache (nothing written beside the data), or
#: beside the file, in :data:`INDEX_FOLDER` (the cache where that folder cannot be written).
INDEX_PLACES = ("cache", "beside")


def indexed(file: str | os.PathLike, index: str | None = None) -> Scan:
    """The scan of ``file``, kept in an index that is read instead while the file is unchanged (its
    :func:`file_stamp`) and the index whole: an index that fails its own digest or does not fit the file
    (damaged, torn, cut short, edited) is never trusted; the file is scanned anew.

    ``index``: where a new index is written (:data:`INDEX_PLACES`; None: ``$DALILOADER_INDEX``, else
    ``"cache"``): ``"cache"`` writes nothing beside the data (``$DALILOADER_CACHE/tfrecord-index/``, see
    :mod:`daliloader.cache` to list and clean it); ``"beside"`` keeps it in :data:`INDEX_FOLDER` beside
    the file, for datasets that travel with their indexes. An index beside the file is read in either
    case. Two processes indexing one file wait for each other instead of scanning twice."""
    from filelock import FileLock

    file = os.fspath(file)  # the parts keep the path as given, as SegmentationData keeps file paths
    index = os.environ.get("DALILOADER_INDEX", "cache") if index is None else index
    if index not in INDEX_PLACES:
        raise DataError(f"index={index!r} (or $DALILOADER_INDEX): TFRecord indexes are kept in the 'cache' (the "
                        "default) or 'beside' the files")
    stamp = _readable_stamp(file)
    cache, beside = _index_folders(file)
    for folder in (cache, beside):
        found = _read_index(folder, file, stamp, travels=folder is beside) if folder is not None else None
        if found is not None:
            return found
    for folder in (f for f in ((beside, cache) if index == "beside" else (cache,)) if f is not None):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(folder / f"{Path(file).name}.lock"))
            lock.acquire()
        except OSError:  # a folder that cannot be written (read-only, no permission, full): the next one
            continue
        try:
            found = _read_index(folder, file, file_stamp(file), travels=folder is beside)
            return found if found is not None else _write_index(folder, scan(file))
        finally:
            lock.release()
    raise DataError(f"cannot write an index for {file} in the cache ({cache_way_out()})")


def _readable_stamp(file: str) -> tuple[int, ...]:
    """The file's stamp, once it is known to be a file that can be opened."""
    if buckets.is_url(file):
        return file_stamp(file)  # (a missing object is a StorageError naming it)
    if os.path.isdir(file):
        raise DataError(f"{file} is a folder, not a TFRecord file")
    try:
        with open(file, "rb"):
            return file_stamp(file)
    except FileNotFoundError:
        raise DataError(f"TFRecord file {file} does not exist") from None
    except OSError as e:
        raise DataError(f"cannot read TFRecord file {file} ({e.strerror or e})") from None


def _index_folders(file: str) -> tuple[Path, Path | None]:
    """In the cache (under a name unique to the file's absolute path, or to an object's URL), and beside
    the file (None for an object: nothing is written into a bucket)."""
    if buckets.is_url(file):
        return cache_dir() / INDEXES / hashlib.sha1(file.encode()).hexdigest()[:16], None
    digest = hashlib.sha1(os.path.abspath(file).encode("utf-8", errors="surrogateescape")).hexdigest()[:16]
    return cache_dir() / INDEXES / digest, Path(file).parent / INDEX_FOLDER


def forget_index(file: str, record: int, crc: int) -> None:
    """Remove the kept indexes of ``file`` (in the cache, and beside it) that still give record number
    ``record`` the data CRC ``crc``, which a read of it has just found changed: such an index is stale
    (the file rewritten with its size and modification time kept, which an index beside the file is judged
    by), and was trusted again at every load, so that the error's advice to load again led nowhere. An
    index written since, after the file changed, gives another CRC and stays (a process that loaded the
    file before the change must not remove it); so does one in a folder that cannot be written."""
    for folder in (f for f in _index_folders(file) if f is not None):
        path = folder / f"{Path(file).name}.json"
        with contextlib.suppress(OSError, ValueError, LookupError, TypeError):
            body = json.loads(path.read_text(encoding="utf-8"))["body"]
            if body["crcs"][body["numbers"].index(record)] == crc:
                path.unlink()


def _read_index(folder: Path, file: str, stamp: tuple, travels: bool = False) -> Scan | None:
    """The kept scan of ``file`` in ``folder`` if it is there, whole (its digest), of this version of the
    file (its stamp) and fits it (``_fits``); its last use is noted (for :mod:`daliloader.cache`).

    ``travels``: an index beside the file, which goes where the dataset is copied (``cp -a``, ``rsync
    -a``: the copy keeps size and modification time but has a new inode and change time). It is the
    file's while size and modification time agree and it fits the file, spot checks included; it is then
    handed out with the file's stamp of now, against which later changes are judged (every record read
    is also checked against its CRC)."""
    path = folder / f"{Path(file).name}.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        body = kept["body"]
        if kept.get("digest") != _digest(body) or body.get("version") != INDEX_VERSION:
            return None
        found = _scan_of(body, file)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError, OverflowError):
        return None  # damaged: not trusted, scanned anew
    same = same_content(found.stamp, stamp) if travels else found.stamp == tuple(stamp)
    if not same or not _fits(found) or not _agrees(found):
        return None
    found = replace(found, stamp=tuple(stamp))
    with contextlib.suppress(OSError):  # a read-only folder: the index is used all the same
        os.utime(path)
    return found


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _scan_of(body: dict, file: str) -> Scan:
    """The Scan a kept index holds (a TypeError, ValueError or KeyError where it holds something else)."""
    ints = lambda key: tuple(int(v) for v in body[key])  # noqa: E731
    keysets = tuple(tuple((str(k), str(kind), int(n)) for k, kind, n in ks) for ks in body["keysets"])
    names = tuple(None if n is None else str(n) for n in body["names"])
    problems = tuple(RecordProblem(RecordFault(kind), file, int(record), int(offset), str(what))
                     for kind, record, offset, what in body["problems"])
    return Scan(file, ints("stamp"), ints("offsets"), ints("sizes"), keysets, ints("record_keysets"), names,
                problems, ints("numbers"), ints("crcs"))


def _fits(found: Scan) -> bool:
    """Whether a kept scan can be the scan of its file: one entry per record in every list, records in
    increasing order of number, and the records tiling the file (:func:`_tiles`)."""
    n = len(found.offsets)
    if not all(len(v) == n for v in (found.sizes, found.numbers, found.crcs, found.record_keysets, found.names)):
        return False
    return (all(s >= HEADER + FOOTER for s in found.sizes) and all(0 <= c < 2 ** 32 for c in found.crcs)
            and all(0 <= k < len(found.keysets) for k in found.record_keysets)
            and all(a < b for a, b in zip(found.numbers, found.numbers[1:])) and _tiles(found))


#: Records of a kept index read again when it is used, to see that it agrees with its file.
SPOT_CHECKS = 4


def _agrees(found: Scan) -> bool:
    """Whether up to :data:`SPOT_CHECKS` records spread over the file (its first and last among them) are
    what the kept index says: at their offset, of their size, data CRC, name and keys. An index edited
    into another consistent one (names or CRCs in another order) is then scanned anew, not trusted."""
    n = len(found.offsets)
    for i in sorted({round(k * (n - 1) / max(SPOT_CHECKS - 1, 1)) for k in range(SPOT_CHECKS)} if n else ()):
        try:
            payload = read_record(found.file, found.numbers[i], found.offsets[i], found.sizes[i], found.crcs[i])
            features = parse_example(payload)
        except (RecordProblem, ValueError):
            return False
        keyset = tuple(sorted((k, f.kind, f.count) for k, f in features.items()))
        if _name(payload, features) != found.names[i] or keyset != found.keys(i):
            return False
    return True


def _tiles(found: Scan) -> bool:
    """Whether the readable records follow each other from the file's first byte to its last, leaving a
    gap only where a record that cannot be read starts (a problem's offset): no record dropped, repeated
    or moved."""
    problems = {p.offset for p in found.problems}
    expected = 0  # where the next record starts
    for offset, size in zip(found.offsets, found.sizes):
        if offset != expected and (offset < expected or expected not in problems):
            return False
        expected = offset + size
    return expected == found.stamp[0] or expected in problems


def _write_index(folder: Path, found: Scan) -> Scan:
    """Write the scan, whole (a temporary file renamed into place), with its digest."""
    body = {"version": INDEX_VERSION, "file": found.file, "stamp": list(found.stamp), "offsets": found.offsets,
            "sizes": found.sizes, "numbers": found.numbers, "crcs": found.crcs, "keysets": found.keysets,
            "record_keysets": found.record_keysets, "names": found.names,
            "problems": [[p.kind.value, p.record, p.offset, p.what] for p in found.problems]}
    body = json.loads(json.dumps(body))  # as it reads back (tuples as lists), which the digest is of
    if folder.is_relative_to(cache_dir()):
        prune_indexes(keep=folder)
    _write_whole(folder / f"{Path(found.file).name}.json", json.dumps({"digest": _digest(body), "body": body}))
    return found


def _write_whole(path: Path, text: str) -> None:
    """``text`` into ``path``, whole (:func:`daliloader.cache.write_whole`)."""
    try:
        write_whole(path, text.encode("utf-8"))
    except OSError as e:
        raise DataError(f"cannot write {path} ({e.strerror or e}); {cache_way_out()}") from None


def dali_index(found: Scan) -> str:
    """DALI's index file (``"offset size"`` per record, as its ``tfrecord2idx`` writes) of a whole file's
    records, written into the cache beside the file's kept index: for DALI's own reader, which the bench's
    decode ceiling uses (the loaders read records themselves)."""
    stamp = hashlib.sha1(repr(found.stamp).encode()).hexdigest()[:12]
    path = _index_folders(found.file)[0] / f"{Path(found.file).name}.{stamp}.idx"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_whole(path, "".join(f"{o} {s}\n" for o, s in zip(found.offsets, found.sizes)))
    return str(path)


# ---------------------------------------------------------------- a dataset's pairs in records
@dataclass(frozen=True)
class RecordPart:
    """The image (or the mask) of one pair stored in a TFRecord file: feature ``key`` of record number
    ``record`` at byte ``offset`` of ``file`` (``size`` bytes, framing included); ``name``: the record's
    file-name feature, where it has one (:data:`NAME_KEYS`); ``stamp``: the file's :func:`file_stamp`
    when it was indexed (a file that changed since may have moved its records); ``crc``: the CRC of the
    record's data then, with which every read is compared (None: not known, the record's own CRCs only).

    It stands where a file path stands for files (``SegmentationData.images[i]``); ``str()`` names it
    in messages."""

    file: str
    record: int
    offset: int
    size: int
    key: str
    name: str | None
    stamp: tuple[int, ...]
    crc: int | None = None

    def __str__(self) -> str:
        return f"{self.file} [record {self.record} at byte {self.offset}, {self.key}]"

    def payload(self) -> bytes:
        """The record's serialized Example, as it was indexed; a RecordProblem names the record when it
        cannot be read or is no longer what was indexed (a file that changed since says so, whatever the
        read found at the record's old place)."""
        try:
            return read_record(self.file, self.record, self.offset, self.size, self.crc)
        except RecordProblem as e:
            if e.kind is RecordFault.UNREADABLE or e.kind is RecordFault.CHANGED or not self.changed():
                raise
            raise RecordProblem(RecordFault.CHANGED, self.file, self.record, self.offset, CHANGED_RECORD) from None

    def read(self) -> bytes:
        """The encoded picture; a RecordProblem names the record when it cannot be read (:meth:`payload`)."""
        return self.picture(self.payload())

    def picture(self, payload: bytes) -> bytes:
        """This part's encoded picture in the record's ``payload``."""
        try:
            return example_bytes(payload, self.key)
        except ValueError:
            raise RecordProblem(RecordFault.MISSING_KEY, self.file, self.record, self.offset,
                                f"it holds no single bytes value under {self.key!r}") from None

    def changed(self) -> bool:
        """Whether the file changed since it was indexed (or is gone)."""
        if buckets.is_url(self.file):
            found = buckets.head_or_none(self.file)
            return found is None or found.stamp != self.stamp
        try:
            return file_stamp(self.file) != self.stamp
        except OSError:
            return True


def read_pair(image: RecordPart, mask: RecordPart) -> tuple[bytes, bytes]:
    """The encoded image and mask of a pair, from one read of their record (both parts of one record, as
    a dataset's pairs are), as it was indexed (see :meth:`RecordPart.payload`)."""
    payload = image.payload()
    return image.picture(payload), (mask.picture(payload) if mask.offset == image.offset else mask.read())


@dataclass(frozen=True)
class Records:
    """How a dataset stored in TFRecord files is read: the features that hold each record's image and
    mask (``SegmentationData.images[i]`` and ``masks[i]`` are the RecordParts of record ``i``), and the
    files given that hold no record at all (DeepLab's conversion scripts write empty shards: they are
    read, and named in the dataset's description and by ``check``)."""

    image_key: str
    mask_key: str
    empty_files: tuple[str, ...] = ()


#: Known layouts: (image key, mask key, who writes them), tried in this order.
KNOWN_KEYS = (("image/encoded", "image/segmentation/class/encoded", "TF Model Garden / DeepLab"),
              ("image", "segmentation_mask", "TFDS (oxford_iiit_pet)"),
              ("image_left", "segmentation_label", "TFDS (cityscapes)"))


def expand(files) -> list[str]:
    """TFRecord files from a path, a glob pattern or a list of either, in that order (each glob's
    matches sorted), each file once (a file that a glob matches again is not read twice); a pattern
    that matches nothing or part of a set of shards (:func:`refuse_partial_shards`), a folder or a
    missing file is a DataError. Files named one by one are not judged as sets of shards."""
    if isinstance(files, (str, bytes, os.PathLike)):
        files = [files]
    if not isinstance(files, (list, tuple)):
        raise DataError(f"files is a TFRecord file, a glob pattern or a list of them (str, pathlib.Path or bytes), "
                        f"got {type(files).__name__} {files!r:.60}")
    found = [f for given in files for f in _files_of(given)]
    if not found:
        raise DataError("no TFRecord file given")
    once: dict[str, str] = {}
    for f in found:
        once.setdefault(_same_file(f), f)
    return list(once.values())


def _files_of(given) -> list[str]:
    """The TFRecord files of one entry of :func:`expand`'s list: a file or object as it is, a glob's
    matches (sorted, checked as sets of shards); a DataError for anything else."""
    if not isinstance(given, (str, bytes, os.PathLike)):
        raise DataError(f"a TFRecord file is a path (str, pathlib.Path or bytes), got {type(given).__name__} "
                        f"{given!r:.60}")
    given = os.fsdecode(given)
    if buckets.is_url(given):
        return refuse_partial_shards(_objects(given), given) if glob.has_magic(given) else _objects(given)
    if glob.has_magic(given) and not os.path.isfile(given):  # (a file may hold [, ] or * in its name)
        matches = sorted(m for m in glob.glob(given) if os.path.isfile(m))
        if not matches:
            raise DataError(f"no TFRecord file matches {given!r}")
        return refuse_partial_shards(matches, given)
    if os.path.isdir(given):
        raise DataError(f"{given} is a folder: pass its TFRecord files (a glob such as '{given}/*.tfrecord*'), "
                        "or SegmentationData.from_tfds for a folder prepared by TensorFlow Datasets")
    if not os.path.isfile(given):
        raise DataError(f"TFRecord file {given} does not exist")
    return [given]


def _same_file(name: str) -> str:
    """What one file is known by, however it is named (a link, a relative path): its real path; an
    object's URL."""
    return name if buckets.is_url(name) else os.path.realpath(name)


#: The shard numbers in a file's name (``-00001-of-00004``), where a set of shards has them.
SHARD_NUMBERS = r"-(?P<index>\d+)-of-(?P<count>\d+)"
#: A shard's name: ``train-00001-of-00004.tfrecord``, TFDS's ``name-train.tfrecord-00001-of-00004``.
SHARD_NAME = re.compile(rf"^(?P<set>.*?){SHARD_NUMBERS}(?P<tail>.*)$")


def refuse_partial_shards(files: list[str], where: str) -> list[str]:
    """``files`` (matched by ``where``, a glob or a folder), unless those named as shards of a set
    (:data:`SHARD_NAME`) miss some of its shards, or hold two sets of one name with different counts (a
    converter run again with another count, its old files left): each is refused, naming the files,
    since reading them would lose a part of the data or read all of it twice without a word."""
    sets: dict[tuple[str, str, str], dict[int, set[int]]] = {}
    for f in files:
        folder, name = f.rsplit("/", 1) if "/" in f else ("", f)
        found = SHARD_NAME.match(name)
        if found:
            counts = sets.setdefault((folder, found["set"], found["tail"]), {})
            counts.setdefault(int(found["count"]), set()).add(int(found["index"]))
    for (folder, name, tail), counts in sets.items():
        shown = f"{folder}/{name}-*-of-*{tail}" if folder else f"{name}-*-of-*{tail}"
        if len(counts) > 1:
            raise DataError(f"{where} holds {len(counts)} sets of shards of one name, {shown} with "
                            f"{' and with '.join(f'-of-{n:05d}' for n in sorted(counts))}: the files of a conversion "
                            "run again with another shard count beside the old ones, whose records would be read "
                            "twice. Remove the old set")
        count, held = next(iter(counts.items()))
        past = sorted(i for i in held if i > count or count == 0)
        if past:
            raise DataError(f"{where} holds shard(s) {', '.join(f'{i:05d}' for i in past[:8])} of {shown}, numbered "
                            f"past the set's count of {count}: a file of another set? Remove it, or name the files "
                            "to read one by one")
        if 0 in held and count in held:  # (0 to count-1, or 1 to count)
            raise DataError(f"{where} holds {len(held)} shards of {shown}, a set of {count}, numbered "
                            f"{min(held):05d} to {max(held):05d}: two sets of one name and count, one numbered from 0 "
                            "and one from 1 (two conversions?), whose records would be read twice. Remove one set")
        _refuse_missing(held, count, shown, where)
    return files


def _refuse_missing(held: set[int], count: int, shown: str, where: str) -> None:
    """Refuse a set of ``count`` shards of which only ``held`` (their numbers) are there, naming the ones
    missing. Some converters number their shards from 1 (00001-of-00002): a set holding neither 0 nor
    ``count`` may be either, and both readings are named."""
    readings = [0] if 0 in held else [1] if count in held else [0, 1]
    missing = {base: sorted(set(range(base, count + base)) - held) for base in readings}
    if not all(missing.values()):
        return

    def listed(numbers: list[int]) -> str:
        return ", ".join(f"{i:05d}" for i in numbers[:8]) + (" ..." if len(numbers) > 8 else "")

    said = " or, numbered from 1, ".join(listed(numbers) for numbers in missing.values())
    raise DataError(f"{where} holds {len(held)} of the {count} shards of {shown}: shard(s) {said} missing (an "
                    "incomplete download or copy?). Fetch them, or, to read part of the set on purpose, name its "
                    "files one by one")


def _objects(url: str) -> list[str]:
    """TFRecord objects of a bucket: a glob's matches (:func:`daliloader.buckets.matching`), or the object
    itself (whether it exists is found when it is indexed)."""
    if not glob.has_magic(url):
        return [url]
    matches = buckets.matching(url)
    if not matches:
        raise DataError(f"no TFRecord file matches {url!r}")
    return matches


def choose_keys(keysets: list[tuple[tuple[str, str, int], ...]], image_key: str | None, mask_key: str | None,
                where: str) -> Records:
    """The image and mask keys: as given, else the known layout (:data:`KNOWN_KEYS`) that most records hold
    (``keysets``: each record's ``(key, kind, count)``); a layout no record holds is refused, listing the
    keys most records hold (in ``where``)."""
    if image_key is not None and mask_key is not None:
        return Records(image_key, mask_key)
    best = _most_held_layout(keysets, image_key, mask_key)
    if best is not None:
        return Records(*best)
    common = max(set(keysets), key=keysets.count) if keysets else ()
    listed = ", ".join(f"{k!r} ({kind} x{count})" for k, kind, count in common) or "none"
    known = "; ".join(f"{image!r} + {mask!r} ({who})" for image, mask, who in KNOWN_KEYS)
    raise DataError(f"{where} hold no known segmentation layout ({known}). Their keys: {listed}. Pass "
                    "image_key= and mask_key= (--image-key/--mask-key): the features holding the encoded image and "
                    "mask")


def _most_held_layout(keysets: list[tuple[tuple[str, str, int], ...]], image_key: str | None,
                      mask_key: str | None) -> tuple[str, str] | None:
    """The known ``(image key, mask key)`` that agrees with the keys given and that most records hold as
    one encoded picture each; None where no record holds one."""
    held = [{k for k, kind, count in keys if kind == "bytes" and count == 1} for keys in keysets]
    layouts = [(image, mask) for image, mask, _ in KNOWN_KEYS
               if image_key in (None, image) and mask_key in (None, mask)]
    votes = {layout: sum(set(layout) <= keys for keys in held) for layout in layouts}
    best = max(layouts, key=votes.__getitem__, default=None)
    return best if best is not None and votes[best] else None


def record_pairs(scans: list[Scan], keys: Records) -> tuple[list[tuple[RecordPart, RecordPart]], list[RecordProblem]]:
    """The (image, mask) RecordParts of every record, and the records that are no pair: those the scans
    could not read, and those whose keys do not hold one encoded picture each (named with the keys
    they hold). Loaders refuse the data for the first problem; ``check`` lists them all."""
    pairs, problems = [], [p for found in scans for p in found.problems]
    for found in scans:
        for i, (offset, size, number, crc) in enumerate(zip(found.offsets, found.sizes, found.numbers, found.crcs)):
            held = {k: (kind, count) for k, kind, count in found.keys(i)}
            lacking = [key for key in (keys.image_key, keys.mask_key) if held.get(key) != ("bytes", 1)]
            if lacking:
                key = lacking[0]
                what = f"holds {held[key][0]} x{held[key][1]} under {key!r}" if key in held else f"has no {key!r}"
                numbers = key in held and held[key][0] != "bytes" and held[key][1] > 1
                raw = (" (pixels stored raw: write each picture encoded, as PNG or JPEG bytes, e.g. "
                       "tf.io.encode_png, into one bytes feature)" if numbers else "")
                problems.append(RecordProblem(RecordFault.MISSING_KEY, found.file, number, offset,
                                              f"it {what}, where one encoded picture belongs{raw}; its keys: "
                                              f"{', '.join(sorted(held))}"))
                continue
            pairs.append(tuple(RecordPart(found.file, number, offset, size, key, found.names[i], found.stamp, crc)
                               for key in (keys.image_key, keys.mask_key)))
    return pairs, problems


def refuse(problems: list[RecordProblem]) -> None:
    """Raise the first problem, saying how many more there are."""
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more problems: `daliloader check` lists them)" if len(problems) > 1 else ""
        raise RecordProblem(first.kind, first.file, first.record, first.offset, first.what + more)


def keys_of(scans: list[Scan], image_key: str | None, mask_key: str | None) -> Records:
    """The image and mask keys of the records ``scans`` found (:func:`choose_keys`); files without a readable
    record say why (their problems)."""
    keysets = [found.keys(i) for found in scans for i in range(len(found.offsets))]
    if not keysets:
        refuse([p for found in scans for p in found.problems])
        raise DataError(f"the TFRecord files hold no record: {', '.join(found.file for found in scans)}")
    where = scans[0].file if len(scans) == 1 else f"{scans[0].file} and {len(scans) - 1} more files"
    found = choose_keys(keysets, image_key, mask_key, f"the records of {where}")
    return replace(found, empty_files=tuple(s.file for s in scans if s.empty))


# ---------------------------------------------------------------- writing
class Writer:
    """Writes a TFRecord file of Examples (uncompressed, as ``tf.io.TFRecordWriter`` does by default)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._fh = open(path, "wb")  # noqa: SIM115 -- kept open for write(); closed by close() / __exit__

    def write(self, features: dict[str, bytes | int]) -> None:
        self._fh.write(frame(encode_example(features)))

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
