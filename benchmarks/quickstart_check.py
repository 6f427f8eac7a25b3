"""Run the README's quick start as a user would, in a fresh process and an empty folder, and report every
line it writes to stderr that is not Python's own (a warning or a traceback): the lines native libraries
(TensorFlow, XLA, CUDA, DALI, nvImageCodec) print past daliloader's defaults. Exit status 1 if any.

    usage: python benchmarks/quickstart_check.py [--backend dali-gpu]

``--backend`` replaces the quick start's ``backend`` choice (``auto`` there) by one named, so that a GPU
machine checks ``dali-gpu`` itself. TensorFlow's own log switch (TF_CPP_MIN_LOG_LEVEL) is removed from the
environment: a user's script does not set it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A line Python writes: a warning's header or its source line, or part of a traceback.
PYTHON_LINE = re.compile(r"^(\S.*:\d+: \w*Warning: |  |Traceback |\w+(Error|Exception): )")


def quick_start() -> str:
    """The first python block under the README's "Quick start" heading."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", help="the backend to ask for in every tf_dataset call")
    args = parser.parse_args()
    code = quick_start()
    if args.backend:
        code = re.sub(r"dl\.tf_dataset\((\w+), ", rf"dl.tf_dataset(\1, backend={args.backend!r}, ", code)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=600)
    print(done.stdout)
    native = [line for line in done.stderr.splitlines() if line.strip() and not PYTHON_LINE.match(line)]
    print(f"exit status {done.returncode}; {len(done.stderr.splitlines())} stderr lines, "
          f"{len(native)} not Python's:")
    print(done.stderr)
    return 1 if native or done.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
