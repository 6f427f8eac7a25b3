"""daliloader's own DALI operators, in C++: compiled on first use against the installed DALI, kept in the
cache, loaded once per process.

One so far, ``CatMaxRatioWindow`` (``cat_max_ratio.cc``, called as
``fn.daliloader.cat_max_ratio_window``): mmsegmentation's category-ratio crop chooses its window by
counting the classes of candidate windows, and DALI has no operator that counts (no bincount; a one-hot
summed over the pixels costs the number of classes times the window, per candidate), while
``fn.experimental.numba_function`` and ``fn.python_function`` cannot be serialized, which
``DALIDataset`` does to every pipeline it runs (docs/design.md, "The category-ratio crop").

The build: the C++ compiler ``$CXX`` (default ``g++``, C++20) with DALI's own compile and link flags
(``nvidia.dali.sysconfig``). DALI's headers include CUDA's runtime headers even for a CPU operator; the
TensorFlow wheel carries them (``include/third_party/gpus/cuda``), else a CUDA toolkit's are used. The
library is made once per source, DALI build (version, commit, CUDA build), machine and compiler, into the
cache (``dali-ops-...``, written whole under a lock by :func:`daliloader.folders.made_once`; a failed
build's output in ``dali-ops-...-failed/``, which the cache lists and cleans too), and loaded once per
process: DALI aborts the process when a second copy of an operator it knows is loaded, so no other path
is ever loaded after it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
from pathlib import Path

from ..cache import OPERATORS
from ..environment import cache_dir, cache_way_out
from ..errors import MissingDependency
from ..folders import made_once

#: The operators' sources, compiled into one library.
SOURCES = (Path(__file__).with_name("cat_max_ratio.cc"),)
#: The library's file name in its cache folder.
LIBRARY = "libdaliloader_ops.so"
#: What the messages tell a user who cannot build the operators.
WAY_OUT = ("cat_max_ratio on the DALI backends compiles a small DALI operator once, with a C++ compiler "
           "(g++ 11 or newer, or $CXX): install one (e.g. `apt install g++`), or load with backend='tfdata' "
           "(tf_dataset) or keras_sequence (OpenCV), which need none")


def compiler() -> list[str]:
    """The C++ compiler's command: ``$CXX`` (which may carry arguments, e.g. ``ccache g++``), else g++."""
    return shlex.split(os.environ.get("CXX", "g++")) or ["g++"]


def library_folder() -> Path:
    """The cache folder of the library for these sources, this DALI build (version, commit and CUDA
    build: cuda120 and cuda130 wheels share a version), this platform and this compiler."""
    import nvidia.dali

    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update(source.read_bytes())
    dali = [getattr(nvidia.dali, name, "") for name in ("__version__", "__git_sha__", "__cuda_version__")]
    digest.update(" ".join(map(str, [*dali, platform.machine(), *compiler()])).encode())
    return cache_dir() / f"{OPERATORS}{digest.hexdigest()[:16]}"


def cuda_includes() -> list[str]:
    """``-I`` flags of CUDA's runtime headers, which DALI's headers include: TensorFlow's copy, found
    without importing TensorFlow, else a CUDA toolkit's (``$CUDA_HOME``, /usr/local/cuda)."""
    found = importlib.util.find_spec("tensorflow")
    roots = [Path(found.origin).parent / "include" / "third_party" / "gpus" / "cuda"] if found and found.origin else []
    roots += [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))]
    for root in roots:
        if (root / "include" / "cuda_runtime.h").is_file():
            extra = [root / "include" / "cccl", root / "libcudacxx" / "include"]
            return [f"-I{p}" for p in [root / "include", *extra] if p.is_dir()]
    raise MissingDependency(f"cannot find CUDA's runtime headers (cuda_runtime.h), which DALI's headers include, in "
                            f"{', '.join(str(r / 'include') for r in roots)}: cat_max_ratio on the DALI backends "
                            "needs them once, to build its operator. Install tensorflow (its wheel carries them) or "
                            "a CUDA toolkit (set CUDA_HOME to it), or load with backend='tfdata' or keras_sequence")


def compile_library(folder: Path, log: Path) -> None:
    """Compile :data:`SOURCES` into ``folder / LIBRARY``; a compiler that is missing or fails is named, its
    output kept in ``log`` (warnings are off: those there are DALI's headers' own)."""
    import nvidia.dali.sysconfig as dali_config

    command = compiler()
    if shutil.which(command[0]) is None:
        raise MissingDependency(f"no C++ compiler {command[0]!r} on this machine. {WAY_OUT}")
    command += ["-std=c++20", "-O3", "-fPIC", "-shared", "-w", *dali_config.get_compile_flags(), *cuda_includes(),
                *map(str, SOURCES), "-o", str(folder / LIBRARY), *dali_config.get_link_flags()]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(shlex.join(command) + "\n\n" + done.stdout + done.stderr)
        raise MissingDependency(f"{command[0]} could not compile daliloader's DALI operator (its output: {log}). "
                                f"{WAY_OUT}")


@functools.cache
def load_operators() -> None:
    """Make the library if the cache lacks it, and load it into DALI, once per process (afterwards
    ``fn.daliloader.cat_max_ratio_window`` exists). Raises MissingDependency where it cannot be built."""
    from nvidia.dali import plugin_manager

    folder = library_folder()
    made_once(folder, LIBRARY, "daliloader's DALI operator", cache_way_out(),
              lambda building: compile_library(building, folder.with_name(folder.name + "-failed") / "build.log"))
    try:
        plugin_manager.load_library(str((folder / LIBRARY).absolute()))
    except RuntimeError as e:  # e.g. a cache shared by machines whose C++ runtimes differ, or mounted noexec
        raise MissingDependency(f"DALI cannot load daliloader's operator {folder / LIBRARY} ({e}): remove it with "
                                f"`daliloader cache --clean` (it is built again on first use). {WAY_OUT}") from None
