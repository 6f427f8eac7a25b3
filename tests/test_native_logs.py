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
