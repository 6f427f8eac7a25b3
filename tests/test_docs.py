"""The documentation cannot drift from the code.

* The site builds strictly: Sphinx in nitpicky mode with warnings as errors, so a broken link, a missing
  anchor, or an API reference that resolves to nothing (in a page or in a docstring) fails. README.md is
  the site's front page, so its links are checked too.
* Every Python block of README.md and docs/*.md runs. A page's blocks run in page order in one namespace
  (a block may use what an earlier one made), in a fresh folder that holds small trees laid out like the
  downloads the pages load (``cityscapes/``, ``VOCdevkit/``, ``ADEChallengeData2016/``; for the TFRecord
  page, DeepLab's VOC TFRecords and a TFDS folder). A block that
  cannot run here says why on the line before it, ``<!-- not run: the reason -->``; a block after
  ``<!-- gpu -->`` runs only where DALI sees a CUDA GPU (skipped, not faked, elsewhere).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import HAS_GPU
from trees import ade20k_tree, cityscapes_tree, tfds_pets, voc_tfrecords, voc_tree

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\s*$")
MARK = re.compile(r"^<!-- (not run: (?P<why>.*\S.*?)|(?P<gpu>gpu)) -->$")


@dataclass
class Block:
    page: Path
    line: int  # where the code starts, 1-based
    code: str
    not_run: str | None  # why it is not run here
    gpu: bool


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        if not FENCE.match(line):
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(before.strip())
        found.append(Block(page, i + 2, "\n".join(lines[i + 1:end]) + "\n",
                           mark and mark["why"], bool(mark and mark["gpu"])))
    return found


def test_every_python_block_is_found_and_every_one_left_out_says_why():
    """An indented or oddly fenced Python block would be skipped silently: refuse those; and a block
    that does not run names its reason."""
    for page in PAGES:
        text = page.read_text()
        python = re.compile(r"^\s*(```|~~~)\s*(\{code-block\}\s*)?(python|py|python3)\b")
        hidden = [n + 1 for n, line in enumerate(text.splitlines()) if python.match(line) and not FENCE.match(line)]
        assert not hidden, (f"{page.name}: Python blocks at lines {hidden} would not be run: fence them with a bare "
                            "```python at the margin")
        for mark in re.finditer(r"<!-- not run:(.*?)-->", text):
            assert len(mark[1].strip()) > 10, f"{page.name}: '{mark[0]}' must say why the block is not run"
    found = [b for page in PAGES for b in blocks(page)]
    assert sum(b.not_run is None and not b.gpu for b in found) >= 10  # the pages' examples do run


#: Trees only some pages load (TFDS's builder takes a few seconds).
PAGE_TREES = {"tfrecord.md": (voc_tfrecords, tfds_pets)}


@pytest.fixture
def downloads(tmp_path, monkeypatch, request) -> Path:
    """A folder with small trees laid out like the downloads, as the current directory."""
    page = request.node.callspec.params.get("page") if hasattr(request.node, "callspec") else None
    for build in (cityscapes_tree, voc_tree, ade20k_tree) + PAGE_TREES.get(getattr(page, "name", ""), ()):
        build(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=lambda p: p.name)
def test_the_python_blocks_of_a_page_run(page, downloads):
    namespace = {"__name__": "__main__"}
    skipped = []
    for block in blocks(page):
        if block.not_run or (block.gpu and not HAS_GPU):
            skipped.append(block.line)
            continue
        try:
            exec(compile(block.code, f"{page.relative_to(ROOT)}:{block.line}", "exec"), namespace)
        except BaseException as e:
            raise AssertionError(f"the block at {page.relative_to(ROOT)}:{block.line} failed: {e!r}") from e
    if skipped and not any(not b.not_run and not (b.gpu and not HAS_GPU) for b in blocks(page)):
        pytest.skip(f"every block of {page.name} needs what this machine lacks (lines {skipped})")


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("sphinx")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-E", "-b", "html",
                          str(ROOT / "docs"), str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    warnings = [line for line in run.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert run.returncode == 0, "\n".join(warnings) or run.stderr[-3000:]
    assert (tmp_path / "html" / "index.html").exists() and (tmp_path / "html" / "api.html").exists()
