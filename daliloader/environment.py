"""The process-wide defaults daliloader sets on import, each only where the user has not set it, and
where it keeps what it generates (:func:`cache_dir`):

* DALI's S3 client made safe beside TensorFlow: when DALI is first imported, its TLS library is loaded
  bound to DALI's own libcrypto (``_DaliS3First``).

* ``TF_FORCE_GPU_ALLOW_GROWTH=true``: TensorFlow otherwise reserves nearly all of a GPU's memory when it
  starts and DALI, on the same GPU, runs out. TensorFlow reads the variable when it first starts a GPU,
  so the default only helps a TensorFlow that has not started yet (see
  ``daliloader.backends.dali_tf.leave_gpu_memory_for_dali``, which checks the rest).
* ``DALI_NVIMGCODEC_LOG_LEVEL=1``: DALI's own switch for what nvImageCodec (its image decoders) prints
  to stderr: 1 keeps errors, DALI's default 2 adds warnings, which in normal use are lines a user
  cannot act on, printed once per picture into Keras' progress bar (the CUDA 12 build's "ROI decode
  with fancy upsampling" warning: docs/gpu.md). DALI reads it when it creates a decoder.
  ``daliloader --verbose`` restores DALI's default (:func:`show_native_warnings`).
* ``TF_CPU_ALLOCATOR_USE_BFC=true``: TensorFlow's own caching allocator for CPU memory instead of the
  system's, which gives each new large tensor fresh pages from the kernel: a batch of one-hot labels
  (32 MB per 512x512 sample of 32 classes) then costs its page faults at every step, several times
  the work of writing it (docs/benchmarks.md, "One-hot labels and memory"). TensorFlow reads the
  variable when it makes its CPU allocator, so the default only helps a TensorFlow not yet imported
  (``import daliloader`` first). Set it to ``false`` to keep the system's allocator.
* ``TF_CPP_MIN_LOG_LEVEL=1``: TensorFlow's switch for its own log lines; 1 drops the informational ones
  (devices created, XLA and cuDNN loaded, CPU instructions available: docs/gpu.md, "On an H200") and
  keeps warnings and errors. Read when TensorFlow is imported, so again only for a TensorFlow not yet
  imported. The commands raise this default to 2, warnings dropped too (:func:`quiet_tensorflow_warnings`).
* TensorFlow's start-up lines: what it writes while it is imported, before its logging is set up ("All
  log messages before absl::InitializeLog() ...", then "oneDNN custom operations are on", "Could not
  find cuda drivers", ...), ignores ``TF_CPP_MIN_LOG_LEVEL``. Where TensorFlow is imported after
  daliloader (by ``import keras`` or by hand), its import runs with file descriptor 2 filtered by that
  level, the user's or the default above (:func:`quiet_tensorflow_import`, through
  :func:`filtered_stderr`): at 1, informational lines are dropped and warnings and errors pass; at 0,
  everything passes. ``daliloader --verbose`` turns it off.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.abc
import importlib.util
import os
import re
import subprocess
import sys
import threading
from contextlib import contextmanager, suppress
from pathlib import Path

from .tfprivate import tensorflow_started

#: Whether the default below comes after TensorFlow started its GPUs (it reads TF_FORCE_GPU_ALLOW_GROWTH
#: then), too late to apply.
GROWTH_DEFAULT_TOO_LATE = "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ and tensorflow_started()
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")

#: TensorFlow's caching allocator for CPU tensors (see the module's docstring).
CPU_ALLOCATOR = "TF_CPU_ALLOCATOR_USE_BFC"
#: TensorFlow's log level (see the module's docstring).
TF_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
#: Whether TensorFlow's log level is daliloader's default, set for a TensorFlow not yet imported.
TF_LEVEL_DEFAULTED = "tensorflow" not in sys.modules and TF_LOG_LEVEL not in os.environ
if "tensorflow" not in sys.modules:
    os.environ.setdefault(CPU_ALLOCATOR, "true")
    os.environ.setdefault(TF_LOG_LEVEL, "1")


def quiet_tensorflow_warnings() -> None:
    """A command's TensorFlow level: 2, warnings dropped too, where the level is daliloader's default and
    TensorFlow not yet imported. A command says what went wrong itself, in one line; TensorFlow's warning
    of a failed step (a bad file that a loader refuses inside a ``tf.data`` graph) repeats it with a
    Python traceback of 30 lines or more, which a filter of lines cannot drop whole."""
    if TF_LEVEL_DEFAULTED and "tensorflow" not in sys.modules:
        os.environ[TF_LOG_LEVEL] = "2"

#: DALI's variable for nvImageCodec's log level (1: errors, 2: warnings too, DALI's default; up to 5).
NVIMGCODEC_LOG_LEVEL = "DALI_NVIMGCODEC_LOG_LEVEL"
#: Whether the nvImageCodec level is daliloader's default rather than the user's.
NVIMGCODEC_LEVEL_DEFAULTED = NVIMGCODEC_LOG_LEVEL not in os.environ
os.environ.setdefault(NVIMGCODEC_LOG_LEVEL, "1")


def show_native_warnings() -> None:
    """Let the native libraries' warnings through again (``--verbose``): DALI's default level for
    nvImageCodec, unless the user chose one (decoders created from now on follow it), and TensorFlow's
    start-up lines unfiltered (:func:`quiet_tensorflow_import`)."""
    if NVIMGCODEC_LEVEL_DEFAULTED:
        os.environ[NVIMGCODEC_LOG_LEVEL] = "2"
    quiet_tensorflow_import(False)


#: The filter file descriptor 2 is written through by :func:`filtered_stderr`, in a process of its own: it
#: reads what arrives line by line as it comes, drops the lines that match the pattern it is given
#: (argv[1]), writes a line that matches the second (argv[2], where not empty) only the first time it
#: comes, and every other line at once, to its stdout, the real stderr; a last line without its newline
#: when the filtered code ends, then for each line it held back the note argv[3] (``{line}``: the line,
#: ``{n}``: how many more times it came, ``{s}``: "s" where that is more than one). Being a process, it
#: outlives a native crash of the code and still writes the crash's last lines. It ignores Ctrl-C (the
#: code says it was interrupted), and goes on draining when its stdout is gone, so that the code never
#: blocks on it.
FILTER = r"""
import os, re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise, pending, out = re.compile(sys.argv[1].encode()), b"", sys.stdout.buffer
once, note, seen = re.compile(sys.argv[2].encode()) if sys.argv[2] else None, sys.argv[3], {}
def write(data):
    global out
    if out is None or not data:
        return
    try:
        out.write(data)
        out.flush()
    except OSError:  # the real stderr is gone: go on draining
        out = None
def passes(line):
    if noise.match(line):
        return False
    if once is None or not once.match(line):
        return True
    seen[line] = seen.get(line, 0) + 1
    return seen[line] == 1
while chunk := os.read(0, 65536):
    *lines, pending = (pending + chunk).split(b"\n")
    write(b"".join(line + b"\n" for line in lines if passes(line)))
last = pending if pending and passes(pending) else b""
notes = [note.format(line=line.decode(errors="replace"), n=n - 1, s="s" * (n > 2)) for line, n in seen.items() if n > 1]
write(last + (b"\n" if last and notes else b"") + "".join(n + "\n" for n in notes).encode())
"""
#: Seconds the filtered code waits at its end for the filter to write what it was given (longer only where
#: a process it started still holds its stderr).
FILTER_WAIT = 2.0


@contextmanager
def filtered_stderr(noise: re.Pattern, python_direct: bool = True, once: re.Pattern | None = None, note: str = ""):
    """Run with the native libraries' stderr (file descriptor 2) filtered line by line as it comes: the
    lines that ``noise`` matches are dropped, the others written to the real stderr at once, by a
    process of its own (:data:`FILTER`) that still writes a native crash's last lines; a line that
    ``once`` matches only the first time it comes, and at the end ``note`` (``{line}``, ``{n}``: how many
    more times, ``{s}``: a plural's "s") for each such line that came again. With
    ``python_direct``, Python's own ``sys.stderr`` (warnings, errors) is a file on the real stderr
    meanwhile, outside the filter: for code that does not keep ``sys.stderr`` (a command); without it,
    Python's writes pass through the filter too (an import, whose loggers keep the ``sys.stderr`` they find).
    On leaving, however it is left (an error, Ctrl-C), file descriptor 2 is the real stderr again and the
    filter has written what it was given. Where there is no stderr or no filter process can start,
    nothing is hidden."""
    if sys.stderr is not None:
        sys.stderr.flush()
    try:
        terminal = os.dup(2)
    except OSError:  # no stderr at all (2>&-): nothing to filter
        yield
        return
    try:
        fil = _start_filter(terminal, noise, once, note)
    except OSError:
        os.close(terminal)
        yield
        return
    python_stderr = sys.stderr
    with open(os.dup(terminal), "w", buffering=1, encoding="utf-8", errors="replace") as direct:
        if python_direct:
            sys.stderr = direct
        try:
            yield
        finally:
            if python_direct:
                direct.flush()
                sys.stderr = python_stderr
            elif python_stderr is not None:
                python_stderr.flush()  # what Python wrote goes through the pipe before it closes
            os.dup2(terminal, 2)  # the pipe's last writer gone: the filter writes what is left, then ends
            os.close(terminal)
            _wait_for(fil)


def _start_filter(terminal: int, noise: re.Pattern, once: re.Pattern | None, note: str) -> subprocess.Popen:
    """The :data:`FILTER` process writing to ``terminal``, with file descriptor 2 now the pipe it reads."""
    if not sys.executable:
        raise OSError("no Python executable to run the filter")
    read_end, write_end = os.pipe()
    try:
        fil = subprocess.Popen([sys.executable, "-I", "-S", "-c", FILTER, noise.pattern,
                                once.pattern if once is not None else "", note], stdin=read_end, stdout=terminal)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    return fil


def _wait_for(fil: subprocess.Popen) -> None:
    """Wait for the filter to end, at most :data:`FILTER_WAIT` seconds (a process that inherited the
    filtered code's stderr keeps it open; the filter then ends with that process)."""
    with suppress(subprocess.TimeoutExpired):
        fil.wait(FILTER_WAIT)


# ---------------------------------------------------------------- TensorFlow's start-up lines
#: The line absl writes before the lines logged before TensorFlow's logging is set up (a pattern).
BEFORE_LOGGING = r"WARNING: All log messages before absl::InitializeLog\(\) is called"


def start_up_noise(level: int) -> re.Pattern:
    """The lines TensorFlow writes while it is imported, before its logging is set up, that its own
    switch would drop at ``level`` (``TF_CPP_MIN_LOG_LEVEL``: 1 informational lines, 2 warnings too, 3
    errors too), with the line absl writes before them and the second line of the one about CPU
    instructions."""
    severities = "IWE"[:level]
    return re.compile(rf"^({BEFORE_LOGGING}|[{severities}]\d{{4}} "
                      r"|To enable the following instructions: )")


class _QuietImport(importlib.abc.MetaPathFinder):
    """A finder that finds nothing itself: when ``tensorflow`` is looked for before it is imported, it lets
    the other finders find it and hands out its spec with a loader that runs the module under
    :func:`filtered_stderr` with ``noise`` (:class:`_FilteredLoader`, which takes this finder out of
    ``sys.meta_path`` once the module runs: a mere lookup, ``find_spec("tensorflow")``, leaves it in)."""

    daliloader_quiet_import = True  # what quiet_tensorflow_import() recognises, also across a reload

    def __init__(self, noise: re.Pattern):
        self.noise = noise
        self._looking = threading.local()  # this finder's own lookup below must not find itself again

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow" or getattr(self._looking, "now", False):
            return None
        self._looking.now = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking.now = False
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _FilteredLoader(spec.loader, self.noise)
        return spec


class _FilteredLoader(importlib.abc.Loader):
    """``loader``, whose module runs with file descriptor 2 filtered; the module keeps ``loader`` as its own."""

    def __init__(self, loader, noise: re.Pattern):
        self.loader, self.noise = loader, noise

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        quiet_tensorflow_import(False)  # once: TensorFlow's module runs now
        with filtered_stderr(self.noise, python_direct=False):
            self.loader.exec_module(module)
        find_devices_quietly(module)

    def __getattr__(self, name):
        return getattr(self.loader, name)


#: What TensorFlow writes, as an error, the first time it looks for its devices on a machine without NVIDIA's
#: driver (a machine without a GPU): :func:`find_devices_quietly` asks first there.
NO_CUDA_DRIVER = re.compile(r"^E\d{4} [^\]]*\] failed call to cuInit: ")
#: The file NVIDIA's kernel driver shows on Linux: without it there is no driver, and no GPU to use.
NVIDIA_DRIVER = "/proc/driver/nvidia/version"


def find_devices_quietly(tf) -> None:
    """Have TensorFlow (the module ``tf``) find its physical devices now, on a machine without NVIDIA's
    driver (where "failed call to cuInit" is the normal state, and ``auto`` takes a CPU backend), with that
    error line filtered (:data:`NO_CUDA_DRIVER`); everything else it writes passes. Called as TensorFlow is
    imported after daliloader, and as daliloader's TF backends load (TensorFlow imported before), so that
    the line is not written later by whatever asks first (a Keras model built before the loader). Not
    where the driver is there (a failure then says something), nor at ``TF_CPP_MIN_LOG_LEVEL=0`` (every
    line). Listing the physical devices leaves them configurable (``tf.config.set_visible_devices``).
    Once per process: TensorFlow keeps what it found, and each call starts the filter's process."""
    global _DEVICES_FOUND
    if _DEVICES_FOUND or tf_log_level() == 0 or os.path.exists(NVIDIA_DRIVER):
        return
    with filtered_stderr(NO_CUDA_DRIVER, python_direct=False):
        tf.config.list_physical_devices()
    _DEVICES_FOUND = True


_DEVICES_FOUND = False  # find_devices_quietly has asked TensorFlow


def tf_log_level() -> int:
    """``TF_CPP_MIN_LOG_LEVEL`` as TensorFlow reads it: a leading integer, else 0 (unset, empty, not a number)."""
    found = re.match(r"\s*([+-]?\d+)", os.environ.get(TF_LOG_LEVEL, ""))
    return int(found.group(1)) if found else 0


def quiet_tensorflow_import(on: bool = True) -> None:
    """Filter (``on``) TensorFlow's start-up lines (:func:`start_up_noise` at :func:`tf_log_level`) while it
    is first imported, or stop doing so. Importing daliloader turns it on where TensorFlow is not imported
    yet and that level is 1 or more; ``--verbose`` turns it off."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "daliloader_quiet_import", False)]
    level = tf_log_level()
    if on and "tensorflow" not in sys.modules and level >= 1:
        sys.meta_path.insert(0, _QuietImport(start_up_noise(min(level, 3))))


quiet_tensorflow_import()


# ---------------------------------------------------------------- DALI's S3 client beside TensorFlow
class _DaliS3First(importlib.abc.MetaPathFinder):
    """A finder that finds nothing itself: when ``nvidia.dali`` is first looked for, it loads DALI's TLS
    library (s2n) bound to DALI's own libcrypto first (:func:`_bind_dali_s3`), then leaves the import to
    the other finders, and itself leaves ``sys.meta_path``.

    Why: DALI reads ``s3://`` with the AWS SDK over s2n. Loaded after TensorFlow, s2n binds the OpenSSL
    names that TensorFlow's BoringSSL exports, and DALI's first S3 read aborts the process (``s2n_init()
    failed``). ``RTLD_DEEPBIND`` makes s2n take its own libraries' names first, whatever came before."""

    def find_spec(self, name, path=None, target=None):
        if name == "nvidia.dali":
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            _bind_dali_s3()
        return None


class DaliS3(enum.Enum):
    """How DALI's S3 client stands beside TensorFlow in this process."""

    NOT_YET = "DALI not imported"
    BOUND = "s2n loaded first, bound to DALI's libcrypto (by _DaliS3First)"
    DALI_FIRST = "DALI loaded before TensorFlow: s2n took DALI's libcrypto"
    TENSORFLOW_FIRST = "TensorFlow loaded before DALI's s2n, which binds its BoringSSL: an S3 read would abort"

    @property
    def safe(self) -> bool:
        return self is not DaliS3.TENSORFLOW_FIRST


_DALI_S3 = DaliS3.NOT_YET


def _bind_dali_s3() -> None:
    import ctypes
    import glob

    global _DALI_S3

    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for library in sorted(glob.glob(os.path.join(folder, "dali", ".libs", "libs2n*.so*"))):
            with contextlib.suppress(OSError):
                ctypes.CDLL(library, mode=os.RTLD_LOCAL | os.RTLD_DEEPBIND)
                _DALI_S3 = DaliS3.BOUND
                return
    # no s2n found where the pip wheel keeps it (another build of DALI): safe only where TensorFlow is not
    # loaded yet, so that s2n, loaded with DALI, takes DALI's libcrypto
    _DALI_S3 = DaliS3.TENSORFLOW_FIRST if "tensorflow" in sys.modules else DaliS3.DALI_FIRST


def dali_s3_safe() -> bool:
    """Whether DALI's S3 client can run in this process without aborting it (see ``_DaliS3First``)."""
    return _DALI_S3.safe


if "nvidia.dali" in sys.modules:  # (sys.modules keeps the order in which modules were first imported)
    _order = list(sys.modules)
    _DALI_S3 = (DaliS3.DALI_FIRST if "tensorflow" not in sys.modules
                or _order.index("nvidia.dali") < _order.index("tensorflow") else DaliS3.TENSORFLOW_FIRST)
else:
    sys.meta_path.insert(0, _DaliS3First())


def cache_dir() -> Path:
    """Where generated data lives: $DALILOADER_CACHE, or ~/.cache/daliloader."""
    return Path(os.environ.get("DALILOADER_CACHE", Path.home() / ".cache" / "daliloader"))


def cache_scratch(prefix: str):
    """A temporary folder in the cache (``with cache_scratch("prepare-") as folder``), removed on leaving:
    room for what goes to or comes from a bucket."""
    import tempfile

    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from .errors import DataError

        raise DataError(f"cannot make the cache folder ({e.strerror or e}): {cache_way_out()}") from None
    return tempfile.TemporaryDirectory(prefix=prefix, dir=cache_dir())


def cache_way_out() -> str:
    """What to do when the cache folder cannot be written: the end of the messages about it."""
    return f"set DALILOADER_CACHE to a writable folder with free space (the cache is now {cache_dir()})"
