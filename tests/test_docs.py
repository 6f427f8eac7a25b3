"""The documentation cannot drift from the code.

* The site builds strictly: Sphinx in nitpicky mode with warnings as errors, so a broken link, a missing
  anchor, or an API reference that resolves to nothing (in a page or in a docstring) fails. README.md is
  the site's front page, so its links are checked too.
* Every example of README.md and docs/*.md runs: each ```python block, and each command of a ```console
  block (a line ``$ command``, the lines after it being what it prints). A page's examples run in page
  order, Python blocks in one namespace (a block may use what an earlier one made), in a fresh folder
  that holds small trees laid out like the downloads the pages load (``cityscapes/``, ``VOCdevkit/``,
  ``ADEChallengeData2016/``; for the TFRecord page, DeepLab's VOC TFRecords and a TFDS folder; for the
  pages that run commands on ``camvid/``, the embedded dataset's layout, smaller). A block that cannot run
  here says why on the line before it, ``<!-- not run: the reason -->``; a block after ``<!-- gpu -->``
  runs only where DALI sees a CUDA GPU (skipped, not faked, elsewhere).
* Commands run through :func:`daliloader.cli.main` in the test's process (``daliloader check X`` as
  ``main(["check", "X"])``, split as a shell splits it), in the page's folder, with stdout and stderr
  captured as in a script or a CI log (not a terminal). ``$ echo $?`` is the exit status of the command
  before it, checked against the line shown after it; any other command must exit 0. Where a page shows
  what a command prints, its first line shown must be a line of its output (stdout or stderr), numbers
  masked (they change with the data and the machine). No command's stdout starts with a blank line. A
  ``daliloader bench`` runs with :data:`BENCH_BUDGET` appended: a few windows of 0.05 s on one backend,
  no stage breakdowns, so that it checks that the command runs on the page's data, not what it measures.
  A command without DATA runs on the embedded dataset, made in the suite's own cache
  (``DALILOADER_CACHE``), of 4 pairs instead of 64 (:data:`EMBEDDED_BUDGET`).
* Every public function (each function of ``daliloader.__all__``, and SegmentationData's constructors)
  has a docstring in Keras' style: an ``Args:`` section with an entry for every parameter, a
  ``Returns:`` section and a ``Raises:`` section naming exception classes, which the site renders as
  fields (``google_sections`` in docs/conf.py).
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import HAS_GPU
from trees import ade20k_tree, cityscapes_tree, tfds_pets, voc_tfrecords, voc_tree

import daliloader as dl

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<kind>python|console)\s*$")
MARK = re.compile(r"^<!-- (not run: (?P<why>.*\S.*?)|(?P<gpu>gpu)) -->$")
PROMPT = "$ "
#: What a ``daliloader bench`` of the pages runs with, appended: the pages' data are tiny and the test
#: checks that the command runs, not what it measures.
BENCH_BUDGET = ["--seconds", "0.05", "--repeats", "1", "--backends", "dali-cpu", "--no-stages"]
#: What a command without DATA runs on: the embedded dataset of 4 pairs (its ``--n``) instead of 64,
#: whose making would take most of the test's time.
EMBEDDED_BUDGET = ["--n", "4"]
#: A line of a usage synopsis, not a command: it names a placeholder (DATA, OUT.json) or an option in [].
SYNOPSIS = re.compile(r"\[|\b[A-Z]{2,}\b")
#: The commands the test runs: the command line (the others, pip, make, scripts, are marked not run).
RUNS = ("daliloader",)


@dataclass
class Command:
    line: int  # 1-based
    text: str  # what follows the prompt
    shown: list[str] = field(default_factory=list)  # the lines shown after it: what it prints


@dataclass
class Block:
    page: Path
    line: int  # where the code starts, 1-based
    code: str
    not_run: str | None  # why it is not run here
    gpu: bool
    kind: str = "python"  # or "console"

    @property
    def commands(self) -> list[Command]:
        """A console block's commands, each with the lines shown after it."""
        found = []
        for n, text in enumerate(self.code.splitlines(), self.line):
            if text.startswith(PROMPT):
                found.append(Command(n, text[len(PROMPT):].strip()))
            elif found:
                found[-1].shown.append(text)
        return found

    def runs_here(self) -> bool:
        return not self.not_run and not (self.gpu and not HAS_GPU)


def blocks(page: Path) -> list[Block]:
    """The page's Python and console blocks, in page order."""
    lines = page.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        fence = FENCE.match(line)
        if not fence:
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(before.strip())
        found.append(Block(page, i + 2, "\n".join(lines[i + 1:end]) + "\n",
                           mark and mark["why"], bool(mark and mark["gpu"]), fence["kind"]))
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
    assert sum(b.not_run is None and not b.gpu and b.kind == "python" for b in found) >= 10  # they do run


def test_every_command_is_found_and_every_one_left_out_says_why():
    """Shell commands are written in ```console blocks, each after ``$ ``, so that the test finds them:
    other shell fences are refused, a console block starts with a command (output alone is ```text),
    and a console block that is not marked runs every command it shows."""
    shell = re.compile(r"^\s*(```|~~~)\s*(\{code-block\}\s*)?(bash|sh|shell|zsh|shell-session|console)\b")
    for page in PAGES:
        lines = page.read_text().splitlines()
        hidden = [n + 1 for n, line in enumerate(lines) if shell.match(line) and not FENCE.match(line)]
        assert not hidden, (f"{page.name}: shell blocks at lines {hidden} would not be run: fence them with a bare "
                            "```console at the margin, each command after '$ '")
        for block in (b for b in blocks(page) if b.kind == "console"):
            first = next((text for text in block.code.splitlines() if text.strip()), "")
            assert first.startswith(PROMPT), (f"{page.name}:{block.line}: a console block starts with a command "
                                              f"after '$ ' (output or a synopsis alone: ```text), not {first!r}")
            strays = [c.text for c in block.commands if not runnable(c.text)]
            assert block.not_run or not strays, (
                f"{page.name}:{block.line}: {strays} cannot run in the test: mark the block <!-- not run: why -->")
        hidden = [n for n, line in fenced_lines(page, ("console", "python")) if line.startswith("daliloader ")
                  and not SYNOPSIS.search(line)]
        assert not hidden, (f"{page.name}: commands at lines {hidden} would not be run: write them in a ```console "
                            "block after '$ ' (a synopsis names its placeholders: DATA, [--option])")
    commands = [c for page in PAGES for b in blocks(page) if b.kind == "console" and not b.not_run
                for c in b.commands]
    assert sum(c.text.startswith("daliloader ") for c in commands) >= 5  # the pages' commands do run


def fenced_lines(page: Path, but: tuple[str, ...]) -> list[tuple[int, str]]:
    """The lines (1-based number, text) of a page's fenced blocks, but those of the kinds ``but``."""
    found, kind = [], None
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            kind = None if kind is not None else (line[3:].strip() or "text")
        elif kind is not None and kind not in but:
            found.append((n, line))
    return found


def runnable(command: str) -> bool:
    """Whether the test runs a command: the command line, or ``echo $?`` (the status before it)."""
    return command.split()[0] in RUNS or command == "echo $?"


def camvid_tree(parent: Path) -> Path:
    """parent/camvid: the embedded dataset as ``daliloader synth camvid`` writes it (64 pairs of JPEG
    photos and RGB colour masks in CamVid's layout), at 96x72 instead of 960x720."""
    dl.synthetic.make_dataset(parent / "camvid", n=64, image_size=(72, 96))
    return parent / "camvid"


def damaged_camvid_tree(parent: Path) -> Path:
    """:func:`camvid_tree` with the four files that docs/bad-input.md breaks on purpose: a JPEG cut in
    half, a mask 8 rows taller than its image, 35 mask pixels of a colour no class has, and a marker
    that no JPEG may hold (0xFF3F) in a photo's compressed data."""
    root = camvid_tree(parent)
    cut = root / "train" / "00013.jpg"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    tall = root / "train_labels" / "00020_L.png"
    mask = cv2.imread(str(tall))
    cv2.imwrite(str(tall), np.concatenate([mask, mask[:8]]))
    odd = root / "train_labels" / "00031_L.png"
    mask = cv2.imread(str(odd))
    mask[:5, :7] = (1, 2, 3)  # BGR: the colour (3, 2, 1)
    cv2.imwrite(str(odd), mask)
    corrupt = root / "train" / "00042.jpg"
    data = bytearray(corrupt.read_bytes())
    middle = (data.find(b"\xff\xda") + len(data)) // 2  # inside the scan, after its header
    data[middle:middle + 2] = b"\xff\x3f"
    corrupt.write_bytes(bytes(data))
    return root


def clone_benchmarks(parent: Path) -> Path:
    """parent/benchmarks: the clone's committed reports, which the benchmarks page prints."""
    (parent / "benchmarks").symlink_to(ROOT / "benchmarks")
    return parent / "benchmarks"


#: Trees only some pages load (TFDS's builder takes a few seconds).
PAGE_TREES = {"tfrecord.md": (voc_tfrecords, tfds_pets), "bad-input.md": (damaged_camvid_tree,),
              "prepared.md": (camvid_tree,), "benchmarks.md": (clone_benchmarks,)}


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
def test_the_examples_of_a_page_run(page, downloads, capfd):
    namespace, skipped, timed = {"__name__": "__main__"}, [], {}
    for block in blocks(page):
        if not block.runs_here():
            skipped.append(block.line)
        elif block.kind == "python":
            run_python(block, namespace)
        else:
            run_console(block, capfd, timed)
    if timed:  # what the commands cost the suite, with -s
        with capfd.disabled():
            print(f"\n{page.name}: commands ran in {sum(timed.values()):.1f} s: "
                  + ", ".join(f"{command} {s:.1f} s" for command, s in timed.items()))
    if skipped and not any(b.runs_here() for b in blocks(page)):
        pytest.skip(f"every block of {page.name} needs what this machine lacks (lines {skipped})")


def run_python(block: Block, namespace: dict) -> None:
    """A Python block, in the page's namespace."""
    where = f"{block.page.relative_to(ROOT)}:{block.line}"
    try:
        exec(compile(block.code, where, "exec"), namespace)
    except BaseException as e:
        raise AssertionError(f"the block at {where} failed: {e!r}") from e


def run_console(block: Block, capfd, timed: dict) -> None:
    """A console block's commands, in turn, each checked against what the page shows it printing and
    the status it shows (``$ echo $?``; 0 where it shows none); each one's seconds go into ``timed``."""
    commands, status = block.commands, None
    for i, command in enumerate(commands):
        where = f"{block.page.relative_to(ROOT)}:{command.line}"
        if command.text == "echo $?":
            assert status is not None, f"{where}: 'echo $?' follows no command"
            assert [str(status)] == [s.strip() for s in command.shown if s.strip()], \
                f"{where}: the command before exited {status}, the page shows {command.shown}"
            continue
        start = time.perf_counter()
        status, out, err = command_line(command.text, capfd)
        timed[command.text] = time.perf_counter() - start
        said = f"`{command.text}` exited {status}:\n{out[-3000:]}{err[-3000:]}"
        followed = i + 1 < len(commands) and commands[i + 1].text == "echo $?"
        assert followed or status == 0, f"{where}: {said}"
        assert not out.startswith("\n"), f"{where}: the output starts with a blank line: {said}"
        shown = next((s for s in command.shown if s.strip()), None)
        if shown is not None:
            assert masked(shown) in map(masked, (out + err).splitlines()), \
                f"{where}: the page shows {shown!r} first, which is no line of the output of {said}"


def command_line(command: str, capfd) -> tuple[int, str, str]:
    """One command of a page, run by :func:`daliloader.cli.main` in this process, in the current folder
    (with the test's :func:`budget` appended), its stdout and stderr captured at the file descriptors (not
    a terminal, as in a script or a CI log); returns its exit status and what it wrote to each."""
    from daliloader.cli import main

    argv = shlex.split(command, comments=True)[1:]
    capfd.readouterr()  # what came before
    try:
        status = main(argv + budget(argv))
    except SystemExit as e:  # argparse's refusals
        status = e.code if isinstance(e.code, int) else 1
    out, err = capfd.readouterr()
    return status, out, err


def budget(argv: list[str]) -> list[str]:
    """What the test appends to a command's arguments (``argv``, after ``daliloader``) to keep it short:
    :data:`BENCH_BUDGET` to a bench, and :data:`EMBEDDED_BUDGET` to a command on the embedded dataset."""
    from daliloader.cli import build_parser, parse_args

    try:
        args = parse_args(build_parser(), argv)
    except SystemExit:  # refused: main says so
        return []
    embedded = "n" in vars(args) and args.data is None and not args.images
    return (BENCH_BUDGET if args.command == "bench" else []) + (EMBEDDED_BUDGET if embedded else [])


def masked(line: str) -> str:
    """A line of output with its numbers masked (they change with the data and the machine), and the
    spaces around it left out."""
    return re.sub(r"\d+", "#", line).strip()


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("sphinx")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-E", "-b", "html",
                          str(ROOT / "docs"), str(tmp_path / "html")], capture_output=True, text=True, timeout=600)
    warnings = [line for line in run.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert run.returncode == 0, "\n".join(warnings) or run.stderr[-3000:]
    assert (tmp_path / "html" / "index.html").exists() and (tmp_path / "html" / "api.html").exists()


#: The constructors of SegmentationData, documented as the public functions are.
CONSTRUCTORS = ("from_dirs", "from_pairs", "from_folder", "from_tfrecord", "from_tfds", "from_prepared")
#: The first line of a Google-style entry (``name: text`` or ``name (type): text``), and a section's heading.
ENTRY = re.compile(r"^    (?P<name>\*{0,2}[\w.]+)( \([^)]*\))?: ")
HEADING = re.compile(r"^(?P<name>[A-Z]\w*( \w+)*):\s*$")


def public_functions() -> dict[str, object]:
    """Every function ``dl.__all__`` names, and SegmentationData's constructors."""
    found = {name: getattr(dl, name) for name in dl.__all__ if inspect.isfunction(getattr(dl, name))}
    found.update({f"SegmentationData.{name}": getattr(dl.SegmentationData, name) for name in CONSTRUCTORS})
    return found


def sections(doc: str) -> dict[str, list[str]]:
    """A docstring's Google-style sections (``Args:``, ``Returns:``, ``Raises:``...): heading -> its lines."""
    found, current = {}, None
    for line in doc.splitlines():
        heading = HEADING.match(line)
        if heading:
            current = found.setdefault(heading["name"], [])
        elif line and not line.startswith(" "):
            current = None  # back at the margin: the section has ended
        elif current is not None:
            current.append(line)
    return found


def own_parameters(fn) -> dict[str, str]:
    """The parameters ``fn``'s code has, each as its ``Args:`` entry names it (``**options`` with its
    stars), and, under the name of any other parameter its signature shows, the ``**options`` entry:
    a ``__signature__`` (:func:`daliloader.loaders.shows_options`) lists keywords in its place."""
    code = getattr(fn, "__func__", fn).__code__
    named = code.co_argcount + code.co_kwonlyargcount
    own = {name: name for name in code.co_varnames[:named]}
    if code.co_flags & inspect.CO_VARKEYWORDS:
        options = "**" + code.co_varnames[named + bool(code.co_flags & inspect.CO_VARARGS)]
        own.update({p: options for p in inspect.signature(fn).parameters if p not in own})
    return own


def undocumented(fn) -> list[str]:
    """What ``fn``'s docstring lacks: an ``Args:``, ``Returns:`` or ``Raises:`` section, an ``Args:`` entry
    for a parameter of its signature, or ``Raises:`` entries that name exception classes."""
    doc = inspect.getdoc(fn) or ""
    found = sections(doc)
    lacking = [f"a {heading}: section" for heading in ("Args", "Returns", "Raises") if not found.get(heading)]
    args = found.get("Args", [])
    entries = {m["name"] for m in map(ENTRY.match, args) if m}
    own = own_parameters(fn)
    for p in inspect.signature(fn).parameters.values():
        name = f"**{p.name}" if p.kind is p.VAR_KEYWORD else own.get(p.name, p.name)
        if name not in entries:
            lacking.append(f"an Args entry for {name}")
    for raised in (m["name"] for m in map(ENTRY.match, found.get("Raises", [])) if m):
        module, _, cls = raised.rpartition(".")
        target = getattr(importlib.import_module(module), cls, None) if module else getattr(builtins, cls, None)
        if not (isinstance(target, type) and issubclass(target, BaseException)):
            lacking.append(f"a Raises entry naming an exception class, not {raised!r}")
    return list(dict.fromkeys(lacking))  # once each: the keywords shown for **options share its entry


def test_the_public_functions_document_their_arguments_results_and_errors():
    """Keras' docstring style: every public function (and SegmentationData constructor) has an ``Args:``
    section with an entry per parameter, a ``Returns:`` section and a ``Raises:`` section whose entries
    name exception classes (daliloader's fully qualified, ``daliloader.errors.DataError``, which the site
    links to)."""
    functions = public_functions()
    assert {"tf_dataset", "make_plan", "check", "SegmentationData.from_dirs"} <= set(functions)
    lacking = {name: found for name, fn in functions.items() if (found := undocumented(fn))}
    assert not lacking, "docstrings in Keras' style (Args:, Returns:, Raises:) lack:\n" + "\n".join(
        f"  {name}: {', '.join(found)}" for name, found in lacking.items())
