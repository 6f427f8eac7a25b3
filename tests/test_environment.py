"""What ``import daliloader`` sets for the process (daliloader/environment.py): each default only where the
user has not set the variable, and TensorFlow's only where TensorFlow is not imported yet (it reads them
when it starts)."""

import json
import os
import subprocess
import sys

import pytest

DEFAULTS = {"TF_FORCE_GPU_ALLOW_GROWTH": "true", "TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "1",
            "DALI_NVIMGCODEC_LOG_LEVEL": "1"}
#: The defaults that help only a TensorFlow not yet imported (TF_FORCE_GPU_ALLOW_GROWTH has its own check,
#: as TensorFlow reads it only when it starts a GPU).
READ_AT_IMPORT = ("TF_CPU_ALLOCATOR_USE_BFC", "TF_CPP_MIN_LOG_LEVEL")


def run(code: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in DEFAULTS}
    return subprocess.run([sys.executable, "-c", code], env={**environ, **env}, capture_output=True, text=True,
                          timeout=300)


def seen(code: str, **env) -> dict:
    names = sorted(DEFAULTS)
    done = run(f"{code}\nimport json, os\nprint(json.dumps({{k: os.environ.get(k) for k in {names!r}}}))", **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_each_default_is_set_unless_the_user_set_it():
    assert seen("import daliloader") == DEFAULTS
    mine = {name: "0" for name in DEFAULTS}
    assert seen("import daliloader", **mine) == mine


@pytest.mark.parametrize("name", READ_AT_IMPORT)
def test_tensorflows_are_not_set_after_it_was_imported(name):
    pytest.importorskip("tensorflow")
    assert seen("import tensorflow, daliloader")[name] is None


def test_tensorflows_information_lines_are_gone_and_its_errors_stay():
    """TensorFlow honours the level for what it logs once started: its line about CPU instructions (an
    information line, logged at its first op on an x86 machine) is gone after importing daliloader first."""
    pytest.importorskip("tensorflow")
    code = "import tensorflow as tf\ntf.constant(1) + 1"
    plain = run(code, TF_CPP_MIN_LOG_LEVEL="0")
    if "cpu_feature_guard" not in plain.stderr:
        pytest.skip("this TensorFlow logs no line about CPU instructions here")
    quiet = run("import daliloader\n" + code)
    assert quiet.returncode == 0 and "cpu_feature_guard" not in quiet.stderr
