"""`make test` (CI) fails when a part of the stack does not import, instead of skipping what needs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def collect(tmp_path: Path, broken: str | None, require: bool,
            error: str = "ImportError") -> subprocess.CompletedProcess:
    """``pytest --collect-only`` of one small test file, with ``broken`` (a module of the stack) made to fail
    its import with ``error`` by a stand-in first on the path, under ``make test``'s switch or not."""
    shadow = tmp_path / "shadow"
    if broken:
        package = shadow.joinpath(*broken.split("."))
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"raise {error}('a broken install, for the test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.pop("DALILOADER_TESTS_REQUIRE", None)
    if require:
        env["DALILOADER_TESTS_REQUIRE"] = "all"
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(TESTS / "test_spec.py")], capture_output=True, text=True, timeout=300, env=env,
                          cwd=TESTS.parent)


def test_make_test_stops_at_once_naming_a_module_that_does_not_import(tmp_path):
    done = collect(tmp_path, "radon", require=True)
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error: nothing ran
    assert "make test needs these to import" in done.stderr and "radon (ImportError: a broken install" in done.stderr
    assert "make install" in done.stderr
    crashing = collect(tmp_path / "b", "keras_hub", require=True, error="RuntimeError")  # any failure, named
    assert crashing.returncode == 4 and "keras_hub (RuntimeError: a broken install" in crashing.stderr


def test_a_run_by_hand_or_a_whole_stack_collects():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        assert collect(Path(folder), "radon", require=False).returncode == 0  # by hand: the tests that need it skip
        whole = collect(Path(folder) / "b", None, require=True)
        assert whole.returncode == 0, whole.stdout + whole.stderr
