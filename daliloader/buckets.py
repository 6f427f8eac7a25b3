"""Datasets in an S3-compatible bucket (``s3://bucket/prefix``): listed once, each object read whole and
checked against the listing.

A dataset URL is listed once per load (:func:`tree`: one recursive listing of the prefix, paged by the
client), and every question the layouts and the pairing ask of it (is this a folder, what is in it) is
answered from that listing, as a :class:`BucketPath`, which answers the part of ``pathlib.Path`` they
use. Each object of a pair becomes an :class:`ObjectPart`: its URL, and the size and ETag the listing
gave. Reading one (:meth:`ObjectPart.read`) asks the server for that ETag (``If-Match``) and compares
the size: an object replaced or deleted since the load is refused by name, never decoded, as a TFRecord
record is checked against its file's index.

Bytes are fetched by ``obstore`` (the ``s3`` extra: ``pip install 'daliloader[s3]'``), for every
backend: DALI's own S3 reader names every failed request "S3 Object not found" and ends the pipeline
on a throttled read (docs/design.md, "Object storage"), where a fetch here retries with backoff and
names the URL and the fault (:class:`~daliloader.errors.StorageError`).

Configuration is the AWS SDK's (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ...), read when a bucket is first used; daliloader's own: ``DALILOADER_S3_TIMEOUT``
(seconds a request may take, default :data:`TIMEOUT`) and ``DALILOADER_S3_RETRIES`` (retries of a
failed request, default :data:`RETRIES`, with exponential backoff).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import io
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import PurePosixPath

from .cache import write_whole
from .errors import DataError, MissingDependency, StorageError, StorageFault

SCHEME = "s3://"
#: Seconds one request may take before it is retried (``$DALILOADER_S3_TIMEOUT``).
TIMEOUT = 30.0
#: Retries of a failed request, with exponential backoff from 0.1 s (``$DALILOADER_S3_RETRIES``).
RETRIES = 4
INSTALL = "pip install 'daliloader[s3]'"
#: Objects a loader fetches at once: a fetch mostly waits on the network, so more threads than cores.
FETCHES = 16


def is_url(path) -> bool:
    """Whether ``path`` names an object or prefix in a bucket (``s3://...``)."""
    return isinstance(path, (str, BucketPath)) and str(path).startswith(SCHEME)


def split_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> ``("bucket", "a/b")``: the bucket and the key without slashes around it."""
    bucket, _, key = str(url)[len(SCHEME):].partition("/")
    if not bucket:
        raise DataError(f"{url}: an S3 URL names its bucket, as s3://bucket/prefix")
    return bucket, key.strip("/")


@dataclass(frozen=True)
class ObjectPart:
    """An object of a pair: its URL, and the size and ETag it had when the dataset was listed."""

    url: str
    size: int
    etag: str | None = None
    modified: datetime | None = None  # the listing's last-modified, checked where the server gives no ETag

    def __str__(self) -> str:
        return self.url

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def stamp(self) -> tuple[int, int]:
        """Its size and a number of its ETag (of its last-modified time where the server gives no ETag; 0
        where it gives neither), as kept in a TFRecord index, the mask cache and the cached copies."""
        version = self.etag or (self.modified.isoformat() if self.modified else "")
        return self.size, int(hashlib.sha1(version.encode()).hexdigest()[:15], 16) if version else 0

    def read(self) -> bytes:
        """The object's bytes, as listed: a StorageError (``CHANGED``) where it was replaced since (another
        ETag or size), ``MISSING_OBJECT`` where it was deleted."""
        data = _get(self.url, self.as_listed())
        if len(data) != self.size:
            raise StorageError(StorageFault.CHANGED, self.url, f"{len(data)} bytes, listed with {self.size}")
        return data

    def as_listed(self) -> dict:
        """The condition of a request for this version of the object: its ETag (``If-Match``), else its
        last-modified time (``If-Unmodified-Since``); none where the server gave neither."""
        return ({"if_match": self.etag} if self.etag else
                {"if_unmodified_since": self.modified} if self.modified else {})


#: Bytes an object is read by at a time where it is read front to back (:func:`reader`).
CHUNK = 64 << 20


class _Ranges(io.RawIOBase):
    """An object read front to back by ranged requests, each asking for the version ``part`` names."""

    def __init__(self, part: ObjectPart):
        super().__init__()
        self.part, self.position = part, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        length = min(len(buffer), self.part.size - self.position)
        if length <= 0:
            return 0
        data = _get(self.part.url, {"range": (self.position, self.position + length), **self.part.as_listed()})
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)


def reader(part: ObjectPart):
    """A binary file object reading the object ``part`` front to back, :data:`CHUNK` bytes per request (a
    TFRecord object of gigabytes is indexed without holding it whole); another version of it is refused."""
    return io.BufferedReader(_Ranges(part), buffer_size=CHUNK)


def read_range(url: str, start: int, length: int) -> bytes:
    """``length`` bytes of the object ``url`` from byte ``start`` (fewer where it ends before)."""
    return _get(url, {"range": (start, start + length)})


def _get(url: str, options: dict) -> bytes:
    """The bytes of one GET of the object ``url`` with obstore's ``options`` (a range, a condition)."""
    obstore = client(url)
    bucket, key = split_url(url)
    with _translated(url):
        return bytes(obstore.get(store(bucket), key, options=options).bytes())


def stamp(url: str) -> tuple[int, int]:
    """The object's size and a number of its ETag (one HEAD request): what tells a version of it from
    another, as a file's stat stamp does (:func:`daliloader.tfrecord.file_stamp`)."""
    return head(url).stamp


def head(url: str) -> ObjectPart:
    """The object at ``url`` as it is now (one HEAD request)."""
    obstore = client(url)
    bucket, key = split_url(url)
    try:
        with _translated(url):
            meta = obstore.head(store(bucket), key)
    except StorageError as e:
        if e.fault is StorageFault.MISSING_OBJECT:  # a HEAD's 404 has no body that names a missing bucket
            holds_objects(url)
        raise
    return _part(bucket, meta)


def head_or_none(url: str) -> ObjectPart | None:
    """:func:`head`, or None where the object does not exist (the bucket's other faults are raised)."""
    try:
        return head(url)
    except StorageError as e:
        if e.fault is not StorageFault.MISSING_OBJECT:
            raise
        return None


def holds_objects(url: str) -> bool:
    """Whether any object's key starts with the prefix ``url`` (one listing request of one key; a missing
    bucket is a StorageError naming it)."""
    obstore = client(url)
    bucket, key = split_url(url)
    with _translated(url):
        return any(obstore.list(store(bucket), prefix=f"{key}/" if key else None, chunk_size=1))  # (pages of keys)


def _part(bucket: str, meta: dict) -> ObjectPart:
    """The ObjectPart of an object's metadata as obstore gives it (a listing's entry, a HEAD's answer)."""
    return ObjectPart(f"{SCHEME}{bucket}/{meta['path']}", int(meta["size"]), meta.get("e_tag"),
                      meta.get("last_modified"))


#: What the client reads from the environment when it is made: a client is made again when one changes.
_AWS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE")


@functools.cache
def _store(bucket: str, endpoint: str | None, timeout: float, retries: int, aws: tuple):
    from obstore.store import S3Store
    options = {"timeout": f"{timeout}s", "connect_timeout": f"{min(timeout, 5.0)}s",
               "allow_http": bool(endpoint and endpoint.startswith("http://"))}
    retry = {"max_retries": retries, "backoff": {"init_backoff": timedelta(milliseconds=100), "base": 2.0,
                                                 "max_backoff": timedelta(seconds=10)},
             "retry_timeout": timedelta(seconds=timeout * (retries + 1))}
    return S3Store(bucket, client_options=options, retry_config=retry)


def client(url: str):
    """obstore, the S3 client; a MissingDependency naming ``url`` and the install command where it is missing."""
    try:
        import obstore
        import obstore.store  # noqa: F401
    except ImportError:
        raise MissingDependency(f"reading {url} needs obstore, daliloader's S3 client: {INSTALL}") from None
    return obstore


def store(bucket: str):
    """The client of ``bucket``, one per bucket and setting (the endpoint, the timeout, the retries, the
    credentials and region in the environment)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return _store(bucket, endpoint, _setting("DALILOADER_S3_TIMEOUT", TIMEOUT, float),
                  _setting("DALILOADER_S3_RETRIES", RETRIES, int), tuple(os.environ.get(k) for k in _AWS))


def _setting(name: str, default, kind):
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        number = kind(value)
    except ValueError:
        number = -1
    if number < 0 or (kind is float and number == 0):
        raise DataError(f"${name}={value!r}: expected a {'positive number of seconds' if kind is float else 'count'}"
                        f" (default {default})")
    return number


# ---------------------------------------------------------------- faults, named
#: What the client's message says, and the fault it is (the first that matches).
#: Matched against the message with its URLs, locations and paths left out (a key or bucket may hold any
#: of these words).
_FAULTS = (
    (re.compile(r"NoSuchBucket"), StorageFault.MISSING_BUCKET),
    (re.compile(r"PreconditionFailed|precondition failure"), StorageFault.CHANGED),
    (re.compile(r"NoSuchKey|not found|404 Not Found"), StorageFault.MISSING_OBJECT),
    (re.compile(r"AccessDenied|SignatureDoesNotMatch|InvalidAccessKeyId|403 Forbidden|401 Unauthorized|"
                r"[Cc]redential"), StorageFault.DENIED),
    (re.compile(r"SlowDown|503 Service Unavailable|429 Too Many|RequestLimitExceeded"), StorageFault.THROTTLED),
    (re.compile(r"kind: Timeout|TimedOut|timed out"), StorageFault.TIMEOUT),
    (re.compile(r"ConnectError|tcp connect error|Connection refused|dns error|error sending request"),
     StorageFault.UNREACHABLE),
    (re.compile(r"invalid path"), StorageFault.BAD_KEY),
)
#: What :data:`_FAULTS` is not matched against: URLs, an object's location and the paths of debug output.
_NAMES = re.compile(r"https?://\S+|location \S+|path: \"[^\"]*\"|Some\(\s*\S+,\s*\)")


class _translated:
    """Within the block, the client's errors become a StorageError naming ``url`` and the fault."""

    def __init__(self, url: str):
        self.url = url

    def __enter__(self):
        return self

    def __exit__(self, kind, error, tb):
        if error is None or isinstance(error, StorageError) or not _from_client(error):
            return False
        text = str(error)
        bare = _NAMES.sub("", text)
        fault = next((f for pattern, f in _FAULTS if pattern.search(bare)), StorageFault.OTHER)
        raise StorageError(fault, self.url, _first_line(text)) from None


def _from_client(error: BaseException) -> bool:
    """Whether ``error`` is obstore's (its own classes, and the builtin ones it raises: FileNotFoundError)."""
    return type(error).__module__.startswith("obstore") or isinstance(error, (FileNotFoundError, PermissionError))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else ""


# ---------------------------------------------------------------- a listing, as paths
@dataclass(frozen=True)
class Listing:
    """Every object under one prefix of a bucket, by key, from one listing."""

    bucket: str
    objects: dict[str, ObjectPart]
    folders: frozenset[str]  # every key's folders, "" (the bucket) included where it holds any object

    @classmethod
    def of(cls, url: str) -> Listing:
        obstore = client(url)
        bucket, key = split_url(url)
        prefix = f"{key}/" if key else ""
        objects = {}
        with _translated(url):
            for page in obstore.list(store(bucket), prefix=prefix or None, chunk_size=1000):
                objects.update((meta["path"], _part(bucket, meta)) for meta in page)
        folders = {"", *(str(p) for k in objects for p in PurePosixPath(k).parents if str(p) != ".")} if objects \
            else set()  # (an empty bucket is no folder: a dataset there does not exist)
        # the empty objects that S3 consoles write as a folder's marker ("photos/") are folders, not files
        objects = {k: p for k, p in objects.items() if not (p.size == 0 and (k in folders or k == key))}
        return cls(bucket, objects, frozenset(folders))


def tree(url: str) -> BucketPath:
    """The folder ``url`` of a bucket, listed now (the bucket missing, or the credentials refused, is a
    StorageError naming it)."""
    return BucketPath(Listing.of(url), split_url(url)[1])


class BucketPath:
    """A key under a :class:`Listing`, answering the part of ``pathlib.Path`` that the layouts and the
    pairing ask (folders are the keys' prefixes, as S3 consoles show them); read from the listing, never
    from the bucket again, except ``read_bytes``, ``read_text`` and ``open``, which fetch the object."""

    def __init__(self, listing: Listing, key: str):
        self.listing, self.key = listing, key.strip("/")

    def __str__(self) -> str:
        return f"{SCHEME}{self.listing.bucket}/{self.key}".rstrip("/") if self.key else \
            f"{SCHEME}{self.listing.bucket}"

    def __repr__(self) -> str:
        return f"BucketPath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, BucketPath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __truediv__(self, name) -> BucketPath:
        return BucketPath(self.listing, str(PurePosixPath(self.key or ".", str(name))).removeprefix("./"))

    @property
    def _pure(self) -> PurePosixPath:
        return PurePosixPath(self.key or "/")

    @property
    def name(self) -> str:
        return self._pure.name

    @property
    def stem(self) -> str:
        return self._pure.stem

    @property
    def suffix(self) -> str:
        return self._pure.suffix

    @property
    def parent(self) -> BucketPath:
        parent = str(PurePosixPath(self.key).parent)
        return BucketPath(self.listing, "" if parent == "." else parent)

    @property
    def parents(self) -> tuple[BucketPath, ...]:
        found, path = [], self
        while path.key:
            path = path.parent
            found.append(path)
        return tuple(found)

    def absolute(self) -> BucketPath:
        return self

    def relative_to(self, other: BucketPath) -> PurePosixPath:
        return PurePosixPath(self.key or ".").relative_to(other.key or ".")

    def is_dir(self) -> bool:
        return self.key in self.listing.folders

    def is_file(self) -> bool:
        return self.key in self.listing.objects

    def exists(self) -> bool:
        return self.is_dir() or self.is_file()

    def is_symlink(self) -> bool:
        return False

    def iterdir(self):
        """The objects and folders right under this folder, in key order."""
        prefix = f"{self.key}/" if self.key else ""
        names = {k[len(prefix):].split("/", 1)[0] for k in (*self.listing.objects, *self.listing.folders)
                 if k.startswith(prefix) and len(k) > len(prefix)}
        return iter([self / n for n in sorted(names)])

    def glob(self, pattern: str):
        """The entries right under this folder whose name matches ``pattern`` (one level, as ``*.txt``)."""
        return iter([p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern)])

    def files(self) -> list[BucketPath]:
        """Every object under this folder, at any depth, in key order."""
        prefix = f"{self.key}/" if self.key else ""
        return [BucketPath(self.listing, k) for k in sorted(self.listing.objects) if k.startswith(prefix)]

    @property
    def part(self) -> ObjectPart:
        """The object at this key, as listed."""
        try:
            return self.listing.objects[self.key]
        except KeyError:
            raise StorageError(StorageFault.MISSING_OBJECT, str(self), "not in the bucket's listing") from None

    def read_bytes(self) -> bytes:
        return self.part.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def open(self, mode: str = "r", newline: str | None = None, encoding: str | None = None):
        raw = io.BytesIO(self.read_bytes())
        return raw if "b" in mode else io.TextIOWrapper(raw, encoding=encoding or "utf-8", newline=newline)


def matching(pattern: str) -> list[str]:
    """The URLs of the objects whose keys match the glob ``pattern`` (``s3://b/tfrecords/train-*``), sorted,
    as ``glob.glob`` matches files: a wildcard stays within its folder, and matches no name that starts
    with a dot unless the pattern's does. One listing of the folder above the first wildcard."""
    bucket, key = split_url(pattern)
    wanted = key.split("/")
    fixed = next((i for i, p in enumerate(wanted) if any(c in p for c in "*?[")), len(wanted))
    listing = Listing.of(f"{SCHEME}{bucket}/{'/'.join(wanted[:fixed])}")

    def matches(k: str) -> bool:
        names = k.split("/")
        return len(names) == len(wanted) and all(
            fnmatch.fnmatchcase(n, w) and (not n.startswith(".") or w.startswith(".")) for n, w in zip(names, wanted))

    return sorted(p.url for k, p in listing.objects.items() if matches(k))


def upload(folder, url: str, last: str) -> None:
    """Every file under the local ``folder`` into the prefix ``url``, ``FETCHES`` at a time, the file named
    ``last`` (a manifest: what readers take as the sign of a whole copy) after all the others."""
    from pathlib import Path

    from .parallel import threaded_map

    obstore = client(url)
    bucket, key = split_url(url)
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file())

    def put(path) -> None:
        target = f"{key}/{path.relative_to(folder).as_posix()}".lstrip("/")
        with _translated(f"{SCHEME}{bucket}/{target}"):
            obstore.put(store(bucket), target, path.read_bytes())

    list(threaded_map(put, [p for p in files if p.name != last], FETCHES))
    list(threaded_map(put, [p for p in files if p.name == last], 1))


def download(url: str, folder) -> int:
    """Every object under the prefix ``url`` into the local ``folder`` (keys as relative paths), each checked
    against the listing; how many."""
    from pathlib import Path

    from .parallel import threaded_map

    root = tree(url)
    objects = root.files()

    def get(path: BucketPath) -> None:
        target = Path(folder) / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())

    list(threaded_map(get, objects, FETCHES))
    return len(objects)


def cached_copy(part: ObjectPart, folder):
    """A local copy of a small object (a pack's index, which DALI's reader takes from a disk), kept in
    ``folder`` under a name of its URL and version (:attr:`ObjectPart.stamp`): fetched once per version,
    written whole."""
    from pathlib import Path

    path = Path(folder) / hashlib.sha1(f"{part.url} {part.stamp}".encode()).hexdigest()[:16] / part.name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, part.read())
    return path


def object_path(url: str) -> BucketPath:
    """The object ``url`` alone, as a BucketPath (one HEAD request, not a listing of its folder); one
    that does not exist gives a path whose ``is_file()`` is False."""
    bucket, key = split_url(url)
    found = head_or_none(url)
    return BucketPath(Listing(bucket, {key: found} if found else {}, frozenset()), key)


def absolute(path) -> str:
    """Where a file or an object is, to record or compare: a file's absolute path, an object's URL."""
    return str(path) if is_url(str(path)) else os.path.abspath(path)


def refuse_mixed(paths, argument: str) -> None:
    """A DataError where ``paths`` mix objects of a bucket and local files: a dataset is in one place."""
    if len({is_url(str(p)) for p in paths}) > 1:
        raise DataError(f"{argument} mixes s3:// objects and local files: keep a dataset in one place")


def member(path) -> str | ObjectPart:
    """A pair's file as the pairing hands it on: a local path as a string, an object of a bucket as its
    :class:`ObjectPart` (its URL and listed identity)."""
    return path.part if isinstance(path, BucketPath) else str(path)


def as_path(path):
    """A folder or file argument as the layouts walk it: a bucket's URL listed (:func:`tree`), a local one
    as a ``pathlib.Path``; a BucketPath as it is."""
    from pathlib import Path

    if isinstance(path, BucketPath):
        return path
    return tree(path) if is_url(path) else Path(path)
