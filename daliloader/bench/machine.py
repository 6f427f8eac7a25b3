"""What a report says about where it was measured: the machine, the library versions, the DALI build
and the daliloader commit."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

from ..parallel import cores

#: The libraries whose versions a report records (those installed).
LIBRARIES = ("numpy", "cv2", "tensorflow", "keras", "nvidia.dali")


def machine_info() -> dict:
    """The host, platform, Python, CPU model and count, GPUs (``nvidia-smi``'s name, driver and memory,
    or None), library versions, DALI build and daliloader version, as the report's ``machine``."""
    return {"host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": cores(), "cpu": _cpu_model(), "gpu": gpus(), "versions": library_versions(),
            "dali_build": dali_build(), "daliloader": code_version()}


def library_versions() -> dict[str, str]:
    """The installed versions of :data:`LIBRARIES` (importing them), "?" where a module has none."""
    found = {}
    for module in LIBRARIES:
        try:
            mod = __import__(module, fromlist=["__version__"])
        except ImportError:
            continue
        found[module] = getattr(mod, "__version__", "?")
    return found


def gpus() -> list[str] | None:
    """``nvidia-smi``'s line per GPU (name, driver version, memory), or None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines() if out.returncode == 0 and out.stdout.strip() else None


def code_version() -> str:
    """The daliloader measured: its version and, from a git checkout, the commit (``+`` if changed)."""
    from .. import __version__

    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty=+", "--abbrev=12"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__} {commit.stdout.strip()}" if commit.returncode == 0 and commit.stdout.strip() else __version__


def dali_build() -> str | None:
    """The DALI wheel installed, which names its CUDA build: ``nvidia-dali-cuda120 2.4.0``."""
    from importlib import metadata

    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().startswith("nvidia-dali-cuda"):
            return f"{name.lower()} {dist.version}"
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
