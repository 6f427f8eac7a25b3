"""Where a report was measured (daliloader.bench.machine)."""


import daliloader
from daliloader.bench.machine import code_version, dali_build, machine_info
from daliloader.parallel import cores


def test_machine_info_names_the_machine_its_libraries_and_the_code():
    info = machine_info()
    assert list(info) == ["host", "platform", "python", "cpu_count", "cpu", "gpu", "versions", "dali_build",
                          "daliloader"]
    assert info["cpu_count"] == cores() and "numpy" in info["versions"] and "nvidia.dali" in info["versions"]
    assert info["gpu"] is None or all(isinstance(line, str) for line in info["gpu"])
    assert info["daliloader"] == code_version() and code_version().startswith(daliloader.__version__)
    assert dali_build().startswith("nvidia-dali-cuda") and dali_build().endswith(info["versions"]["nvidia.dali"])
