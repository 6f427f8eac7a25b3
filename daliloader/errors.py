"""Exceptions that daliloader raises on purpose: each message names the file or argument at fault."""

import contextlib
import enum
import errno
import functools
import os
import sys
import warnings


class DaliloaderError(Exception):
    """Base class of daliloader's own errors. Their messages are valid UTF-8 whatever file names they hold:
    the bytes of a name that is not (which Python keeps as lone surrogates) show as escapes, ``caf\\xe9.png``
    (:func:`printable`), so that the message survives TensorFlow, which hands on only UTF-8 text (an
    error raised inside a tf.data graph reached the user with its words gone), and a terminal that is
    strict about it."""

    def __init__(self, *args, **kwargs):  # (kwargs: ImportError's name= and path=, for MissingDependency)
        super().__init__(*(printable(a) if isinstance(a, str) else a for a in args), **kwargs)


def printable(text: str) -> str:
    """``text`` with the undecodable bytes of file names (surrogates, as ``os.fsdecode`` keeps them) as
    ``\\xNN`` escapes: valid UTF-8, and unchanged where it was already."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class DataError(DaliloaderError, ValueError):
    """The dataset on disk is not usable as given (missing, unpaired or malformed files)."""


class SpecError(DaliloaderError, ValueError):
    """An argument of a loader call is invalid."""


class OptionError(SpecError):
    """An argument's value refused, by the argument's name (``option``): the message starts with that
    name, then ``=value`` or a word (``rotate=(-500, 500) must satisfy ...``, ``flip is a probability
    ...``), so that a command can say it of the flag that gave the value (:meth:`after_name`)."""

    def __init__(self, option: str, message: str):
        self.option = option
        super().__init__(message)

    def __reduce__(self):  # (an exception is pickled with its args, here the message alone)
        return type(self), (self.option, str(self))

    def after_name(self) -> str:
        """The message without ``option=`` at its start (``(-500, 500) must satisfy ...``); whole where the
        name is followed by a word (``flip is a probability ...``)."""
        text = str(self)
        return text[len(self.option) + 1:] if text.startswith(f"{self.option}=") else text


class BatchTooLarge(SpecError):
    """A batch larger than the samples of a shard, with drop_remainder: no full batch in an epoch. Its
    figures let a caller whose own argument set the batch say so (:meth:`said_of`)."""

    def __init__(self, batch_size: int, per_shard: int, samples: int, shards: int):
        self.batch_size, self.per_shard, self.samples, self.shards = batch_size, per_shard, samples, shards
        super().__init__(self.said_of("batch_size"))

    def __reduce__(self):  # (an exception is pickled with its args, here the message: one per figure instead)
        return type(self), (self.batch_size, self.per_shard, self.samples, self.shards)

    def said_of(self, argument: str) -> str:
        """The message, its remedy asking to lower ``argument``."""
        return (f"batch_size={self.batch_size} is larger than the {self.per_shard} samples per shard "
                f"({self.samples} samples, {self.shards} shard(s)); lower {argument} or pass drop_remainder=False")


class LoadError(DaliloaderError, RuntimeError):
    """Loading a batch failed; the message names the files involved."""


class ValueEnum(str, enum.Enum):
    """An enum of strings that prints as its value, in messages and in JSON (Python 3.11's ``StrEnum``;
    daliloader runs on 3.10 too). Its members compare equal to their values."""

    def __str__(self) -> str:
        return self.value


class StorageFault(enum.Enum):
    """What went wrong reading from object storage (a bucket), with what to do about it."""

    MISSING_BUCKET = "the bucket does not exist"
    MISSING_OBJECT = "the object does not exist (deleted since the dataset was listed?)"
    CHANGED = "the object was replaced since the dataset was listed: load the dataset again"
    DENIED = "the credentials were refused: check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (or the profile)"
    UNREACHABLE = "the endpoint cannot be reached: check AWS_ENDPOINT_URL and the network"
    TIMEOUT = "no answer in time, after retries: raise $DALILOADER_S3_TIMEOUT, or check the endpoint"
    THROTTLED = "the server kept refusing with 'slow down' after retries: read with fewer threads or retry later"
    BAD_KEY = ("a key under the prefix cannot be read by daliloader's S3 client (it holds '//', a '.' or '..' "
               "folder, or a control character): rename the object")
    OTHER = "the request failed"


class StorageError(DataError, LoadError):
    """Reading a bucket failed: ``fault`` says how, ``url`` where. A DataError where a dataset is loaded, a
    LoadError where a batch is."""

    def __init__(self, fault: StorageFault, url: str, detail: str = ""):
        self.fault, self.url, self.detail = fault, url, detail
        super().__init__(f"{url}: {fault.value}" + (f" ({detail})" if detail else ""))

    def __reduce__(self):  # raised in a worker process or a tf.numpy_function, and pickled back
        return type(self), (self.fault, self.url, self.detail)


def flag(name: str) -> str:
    """The command-line flag of a loader's option, for messages that give both spellings: ``--erase-scale``
    for ``erase_scale``."""
    return "--" + name.replace("_", "-")


def empty_dataset(looked_in: str = "") -> DataError:
    """The error of a dataset without pairs, every loader's and ``check``'s: ``looked_in`` says where the pairs
    were looked for, where the layout knows it (``"listed in .../val.txt"``, ``"under images/ + masks/"``)."""
    return DataError("the dataset is empty: no image/mask pairs" + (f" {looked_in}" if looked_in else ""))


class MissingDependency(DaliloaderError, ImportError):
    """A backend needs a package that is not installed; the message says what to install."""


def user_stacklevel() -> int:
    """The ``stacklevel`` of a ``warnings.warn`` call inside daliloader that points at the first frame
    outside the package: the user's line, however deep the call came through the package. Frames of
    ``contextlib`` are passed over too: a warning inside a ``@contextmanager`` of the package is called
    from contextlib's ``__enter__``/``__exit__``, which the user did not write."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and (os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep)
                                 or frame.f_code.co_filename == contextlib.__file__):
        frame, level = frame.f_back, level + 1
    return level


def moved(fn, old: str):
    """``fn`` under the spelling it had before (``old``, such as ``dl.prepare.prepare``), which still works
    and warns (a DeprecationWarning at the user's line) that it is now ``dl.<name>(...)``."""
    @functools.wraps(fn)
    def old_spelling(*args, **kwargs):
        warnings.warn(f"{old}(...) is now dl.{fn.__name__}(...); the old spelling will go",
                      DeprecationWarning, stacklevel=user_stacklevel())
        return fn(*args, **kwargs)
    return old_spelling


#: What every message about a bad file advises.
WHAT_TO_DO = ("Run `daliloader check` on the dataset (or `daliloader.check(data)`) to list every bad file, "
              "then fix or remove them.")


def cannot_write(e: OSError, way_out: str) -> str:
    """Why the operating system refused a write, in words, and ``way_out`` (say, "choose another OUT"):
    the end of a message that names the file."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on the device (the disk or your quota is full): free some space, or {way_out}"
    if e.errno == errno.EROFS:
        return f"the file system is read-only: {way_out}"
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied: {way_out}"
    return f"{e.strerror or e}: {way_out}"
