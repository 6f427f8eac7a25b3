"""The code stays readable at a glance: no function in daliloader/ longer than 60 lines of body (its lines
after the docstring), nor of a cyclomatic complexity above 15 as radon counts it (which adds a function's
lambdas, comprehensions and boolean operators to it; ruff's C901, in `make test`, counts as mccabe does)."""

import ast
from pathlib import Path

import pytest


def cc_visit(source: str):
    """radon's complexity blocks of ``source``; radon is imported here, not at collection, so that a machine
    staged with the runtime dependencies only (the GPU machine's) still collects the suite."""
    from radon.complexity import cc_visit as visit

    return visit(source)

PACKAGE = Path(__file__).resolve().parent.parent / "daliloader"
MOST_LINES = 60
MOST_COMPLEXITY = 15
FILES = sorted(PACKAGE.rglob("*.py"))


def bodies(path: Path):
    """``(name, first line, lines of body)`` of every function in a file, docstrings left out."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            if body:
                yield node.name, node.lineno, body[-1].end_lineno - body[0].lineno + 1


def named(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


@pytest.mark.parametrize("path", FILES, ids=named)
def test_no_function_is_longer_than_60_lines(path):
    long = [f"{name} (line {line}): {lines} lines" for name, line, lines in bodies(path) if lines > MOST_LINES]
    assert not long, f"{path.relative_to(PACKAGE.parent)}: " + "; ".join(long)


@pytest.mark.parametrize("path", FILES, ids=named)
def test_no_function_is_more_complex_than_15(path):
    tangled = [f"{block.fullname} (line {block.lineno}): {block.complexity}" for block in cc_visit(path.read_text())
               if block.complexity > MOST_COMPLEXITY and not hasattr(block, "methods")]  # classes: their methods count
    assert not tangled, f"{path.relative_to(PACKAGE.parent)}: " + "; ".join(tangled)


def test_the_measures_see_what_they_measure(tmp_path):
    """The two measures on code whose shape is known."""
    source = "def f(x):\n    '''doc'''\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(20))
    assert [block.complexity for block in cc_visit(source)] == [21]
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert list(bodies(path)) == [("f", 1, 40)]
