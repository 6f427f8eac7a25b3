"""What native libraries print: DALI's decoder messages go through DALI's own switch, which daliloader
sets to errors only by default, leaves alone when the user set it, and opens again with --verbose;
OpenCV's warnings are off once daliloader's codecs load."""

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


def run(code: str, unset: str = environment.NVIMGCODEC_LOG_LEVEL, timeout: float = 120,
        **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python, with the variable ``unset`` removed from the environment and ``env`` added."""
    environ = {k: v for k, v in os.environ.items() if k != unset}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
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


OPENCV_DECODE = """
import cv2, numpy as np
{setup}
png = cv2.imencode(".png", np.zeros((32, 32), np.uint8))[1]
assert cv2.imdecode(png[: len(png) // 2], cv2.IMREAD_UNCHANGED) is None
"""


def test_opencvs_warnings_about_a_broken_picture_stay_out_of_stderr():
    """A truncated PNG decoded by OpenCV after daliloader's codecs are loaded writes nothing (the caller
    names the file); OpenCV alone writes its warning, so the switch is the one OpenCV reads."""
    quiet = run(OPENCV_DECODE.format(setup="import daliloader.codecs"))
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    chatty = run(OPENCV_DECODE.format(setup=""))
    assert chatty.returncode == 0 and "WARN" in chatty.stderr and "incomplete" in chatty.stderr, chatty.stderr


LOADERS = """
import daliloader as dl
data = dl.synthetic.make_dataset({root!r}, n=4, image_size=(48, 64))
for training in (True, False):
    ds = dl.tf_dataset(data, batch_size=2, image_size=(32, 32), backend={backend!r}, training=training)
    next(iter(ds))
    next(iter(ds.map(lambda *batch: batch[0])))
print("read")
"""


@pytest.mark.parametrize("backend", ["dali-cpu", "tfdata"])
def test_a_loader_read_and_chained_writes_nothing_to_stderr(tmp_path, backend):
    """The loaders of the quick start, read directly and through a chained transformation, in training
    and evaluation: nothing on stderr (AutoGraph once warned there, on every dali-cpu dataset, that it
    could not convert os.fsencode, which the pipeline of a chained pass calls)."""
    done = run(LOADERS.format(root=str(tmp_path / "data"), backend=backend), timeout=300)
    assert done.returncode == 0 and "read" in done.stdout, done.stderr
    assert done.stderr == "", done.stderr


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
tf.get_logger().warning("the tensorflow logger still writes")
from daliloader.environment import _QuietImport
assert not any(isinstance(f, _QuietImport) for f in sys.meta_path), "the filter outlived the import"
print(type(tf.__loader__).__name__, type(tf.__spec__.loader).__name__)
"""
LOGGER_LINE = "WARNING:tensorflow:the tensorflow logger still writes"


def tf_run(code: str, level: str | None) -> subprocess.CompletedProcess:
    """:func:`run` with TF_CPP_MIN_LOG_LEVEL at ``level`` (None: unset, daliloader's default then)."""
    return run(code, unset=environment.TF_LOG_LEVEL, timeout=300,
               **({} if level is None else {environment.TF_LOG_LEVEL: level}))


def skip_unless_tensorflow_writes(wanted: str, code: str = "import tensorflow as tf; tf.constant(1)") -> None:
    """Skip where this machine's TensorFlow, imported alone, does not write ``wanted`` (nothing to hide)."""
    alone = tf_run(code, "0")
    assert alone.returncode == 0, alone.stderr
    if wanted not in alone.stderr:
        pytest.skip(f"this machine's TensorFlow does not write {wanted!r}")


def test_tensorflows_lines_before_its_logging_starts_are_dropped_when_daliloader_is_imported_first():
    """Imported after daliloader (by keras or by hand), TensorFlow's start-up lines follow its own switch,
    which they otherwise ignore; the level the user chose (0: everything) is honoured; the import hook
    leaves no trace (TensorFlow's module keeps its own loader) and TensorFlow's Python logger still
    writes to stderr afterwards."""
    skip_unless_tensorflow_writes(BEFORE_LOGGING)
    code = IMPORT_TF.format(between="")
    assert BEFORE_LOGGING in tf_run(code, "0").stderr
    quiet = tf_run(code, None)
    assert quiet.returncode == 0, quiet.stderr
    assert BEFORE_LOGGING not in quiet.stderr and not any(line.startswith("I0") for line in quiet.stderr.splitlines())
    assert quiet.stdout.split() == ["SourceFileLoader", "SourceFileLoader"]
    assert LOGGER_LINE in quiet.stderr and "Logging error" not in quiet.stderr, quiet.stderr
    assert BEFORE_LOGGING not in tf_run(code, "2").stderr


def test_looking_tensorflow_up_first_does_not_use_the_filter_up():
    """``find_spec("tensorflow")`` (daliloader's own check that it is installed, other libraries' too)
    before the import leaves the filter for the import itself."""
    skip_unless_tensorflow_writes(BEFORE_LOGGING)
    code = IMPORT_TF.format(between="from daliloader.backends import installed; assert installed('tensorflow')")
    quiet = tf_run(code, None)
    assert quiet.returncode == 0 and BEFORE_LOGGING not in quiet.stderr, quiet.stderr


def test_verbose_lets_tensorflows_start_up_lines_through():
    skip_unless_tensorflow_writes(BEFORE_LOGGING)
    assert BEFORE_LOGGING in tf_run(IMPORT_TF.format(between="daliloader.environment.show_native_warnings()"),
                                    None).stderr


def test_tensorflow_imports_without_a_stderr_and_after_a_reload():
    """A process whose stderr is closed (``2>&-``) imports TensorFlow after daliloader; a reloaded
    environment module leaves one filter, not two that find each other."""
    closed = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "import daliloader, tensorflow; print(1)" 2>&-'],
                            capture_output=True, text=True, timeout=300)
    assert closed.returncode == 0 and closed.stdout.strip() == "1"
    code = IMPORT_TF.format(between="import importlib; importlib.reload(daliloader.environment)")
    reloaded = tf_run(code, None)
    assert reloaded.returncode == 0, reloaded.stderr


def test_the_level_is_read_as_tensorflow_reads_it(monkeypatch):
    for value, level in (("", 0), ("abc", 0), ("1", 1), (" 2", 2), ("3x", 3), ("-1", -1)):
        monkeypatch.setenv(environment.TF_LOG_LEVEL, value)
        assert environment.tf_log_level() == level, value


NO_DRIVER = {
    "a TF backend loaded first": """
import daliloader
from daliloader.backends import tfloader
import tensorflow as tf
print(tf.constant(1).numpy())
""",
    # as the README's scripts go: the model built before any loader asks for TensorFlow's devices
    "a Keras model built first": """
import daliloader
import keras
inputs = keras.Input((8, 8, 3))
print(keras.Model(inputs, keras.layers.Conv2D(3, 1)(inputs))(keras.ops.zeros((1, 8, 8, 3))).shape[0])
""",
}


@pytest.mark.parametrize("order", NO_DRIVER)
def test_no_cuda_driver_line_on_a_machine_without_nvidias_driver(order):
    """Where NVIDIA's driver is not there, TensorFlow's error line that it found none is not shown, whether
    a TF backend is loaded first or TensorFlow is imported after daliloader and asked for its devices by
    something else; with TF_CPP_MIN_LOG_LEVEL=0 it is."""
    if os.path.exists(environment.NVIDIA_DRIVER):
        pytest.skip("NVIDIA's driver is here: TensorFlow finds it")
    skip_unless_tensorflow_writes("failed call to cuInit")
    assert "failed call to cuInit" in tf_run(NO_DRIVER[order], "0").stderr
    quiet = tf_run(NO_DRIVER[order], None)
    assert quiet.returncode == 0 and quiet.stdout.strip() == "1", quiet.stderr
    assert "cuInit" not in quiet.stderr
