"""What native libraries print: DALI's decoder messages go through DALI's own switch, which daliloader
sets to errors only by default, leaves alone when the user set it, and opens again with --verbose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from daliloader import environment

DECODE = """
import daliloader, os
from nvidia.dali import fn, pipeline_def
@pipeline_def(batch_size=1, num_threads=1, device_id=None)
def decode():
    encoded, _ = fn.readers.file(files=[{path!r}])
    return fn.decoders.image(encoded, device="cpu")
pipe = decode()
pipe.build()
pipe.run()
print("level", os.environ["DALI_NVIMGCODEC_LOG_LEVEL"])
"""


def run(code: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != environment.NVIMGCODEC_LOG_LEVEL}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**environ, **env})


def test_dali_decoder_messages_follow_daliloaders_default_and_the_users_choice(synth_data):
    """A decode after importing daliloader prints nothing of nvImageCodec's; a user who asks for more
    (level 3: information) gets it, so the switch is the one DALI reads."""
    code = DECODE.format(path=synth_data.images[0])
    quiet = run(code)
    assert quiet.returncode == 0, quiet.stderr
    assert "level 1" in quiet.stdout and "nvimgcodec" not in quiet.stderr
    chatty = run(code, DALI_NVIMGCODEC_LOG_LEVEL="3")
    assert "level 3" in chatty.stdout and "[nvimgcodec]" in chatty.stderr


def test_verbose_restores_dalis_default_unless_the_user_chose(monkeypatch, tmp_path):
    from daliloader.cli import main

    monkeypatch.setattr(environment, "NVIMGCODEC_LEVEL_DEFAULTED", True)
    monkeypatch.setenv(environment.NVIMGCODEC_LOG_LEVEL, "1")
    assert main(["synth", str(tmp_path / "a"), "--n", "1", "--image-size", "16"]) == 0
    assert os.environ[environment.NVIMGCODEC_LOG_LEVEL] == "1"
    assert main(["synth", str(tmp_path / "b"), "--n", "1", "--image-size", "16", "--verbose"]) == 0
    assert os.environ[environment.NVIMGCODEC_LOG_LEVEL] == "2"
    monkeypatch.setattr(environment, "NVIMGCODEC_LEVEL_DEFAULTED", False)
    monkeypatch.setenv(environment.NVIMGCODEC_LOG_LEVEL, "4")
    environment.show_native_warnings()
    assert os.environ[environment.NVIMGCODEC_LOG_LEVEL] == "4"


@pytest.mark.parametrize("level", ["1", "5"])
def test_importing_daliloader_keeps_a_level_the_user_set(level):
    out = run("import daliloader, os; print(os.environ['DALI_NVIMGCODEC_LOG_LEVEL'])",
              DALI_NVIMGCODEC_LOG_LEVEL=level)
    assert out.stdout.strip() == level


# ---------------------------------------------------------------- TensorFlow's start-up lines
#: What TensorFlow writes before its logging is set up, whatever TF_CPP_MIN_LOG_LEVEL says.
BEFORE_LOGGING = "All log messages before absl::InitializeLog()"
IMPORT_TF = """
import sys, daliloader
{between}
import tensorflow as tf
from daliloader.environment import _QuietImport
assert not any(isinstance(f, _QuietImport) for f in sys.meta_path), "the filter outlived the import"
print(type(tf.__loader__).__name__, type(tf.__spec__.loader).__name__)
"""


def tf_run(code: str, level: str | None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        environ["TF_CPP_MIN_LOG_LEVEL"] = level
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environ)


def loud_or_skip(code: str, wanted: str) -> subprocess.CompletedProcess:
    """The run with TensorFlow's every line (level 0), skipping the test where this machine's TensorFlow
    does not write ``wanted`` at all (nothing to hide)."""
    loud = tf_run(code, "0")
    assert loud.returncode == 0, loud.stderr
    if wanted not in loud.stderr:
        pytest.skip(f"this machine's TensorFlow does not write {wanted!r} here")
    return loud


def test_tensorflows_lines_before_its_logging_starts_are_dropped_when_daliloader_is_imported_first():
    """Imported after daliloader (by keras or by hand), TensorFlow's start-up lines follow its own switch,
    which they otherwise ignore; the level the user chose (0: everything) is honoured; the import hook
    leaves no trace (TensorFlow's module keeps its own loader)."""
    code = IMPORT_TF.format(between="")
    loud_or_skip(code, BEFORE_LOGGING)
    quiet = tf_run(code, None)
    assert quiet.returncode == 0, quiet.stderr
    assert BEFORE_LOGGING not in quiet.stderr and not any(line.startswith("I0") for line in quiet.stderr.splitlines())
    assert quiet.stdout.split() == ["SourceFileLoader", "SourceFileLoader"]
    assert BEFORE_LOGGING not in tf_run(code, "2").stderr


def test_verbose_lets_tensorflows_start_up_lines_through():
    code = IMPORT_TF.format(between="daliloader.environment.show_native_warnings()")
    loud_or_skip(code, BEFORE_LOGGING)
    assert BEFORE_LOGGING in tf_run(code, None).stderr


NO_DRIVER = """
import daliloader
from daliloader.backends import tfloader
import tensorflow as tf
print(tf.constant(1).numpy())
"""


def test_no_cuda_driver_line_on_a_machine_without_a_gpu():
    """Where DALI sees no GPU, TensorFlow's error line that it found no CUDA driver is not shown when a
    TF backend is loaded; with TF_CPP_MIN_LOG_LEVEL=0 it is."""
    from daliloader.backends import dali_gpu_count

    if dali_gpu_count():
        pytest.skip("a GPU is here: TensorFlow finds its driver")
    loud_or_skip(NO_DRIVER, "failed call to cuInit")
    quiet = tf_run(NO_DRIVER, None)
    assert quiet.returncode == 0 and quiet.stdout.strip() == "1", quiet.stderr
    assert "cuInit" not in quiet.stderr
