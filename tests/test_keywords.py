"""daliloader/keywords.py: the keyword options that make_plan and the loaders take through ``**options``
(the prologue's and the declared stages' options, make_plan's), as TypedDicts that type checkers and IDEs
read through ``**options: Unpack[...]``. It is generated from the signatures the functions show at run time
(which the declarations make) and committed; this test fails when it is stale, and regenerates it:

    python tests/test_keywords.py > daliloader/keywords.py
"""

import inspect
import sys
import typing
from pathlib import Path

#: The functions whose ``**options`` the module types, in its order.
FUNCTIONS = ("make_plan", "tf_dataset", "keras_sequence", "dali_pipeline", "distribute")
MODULE = Path(__file__).resolve().parent.parent / "daliloader" / "keywords.py"
HEADER = '''"""The keyword options that make_plan and the loaders take through ``**options``, as TypedDicts that type
checkers and IDEs read (``**options: Unpack[...]``); at run time the functions show the same keywords in
their signatures (``help()``, ``inspect.signature``).

Generated from those signatures, which the declarations make (the prologue's options,
:data:`daliloader.spec.PROLOGUE`, and the declared stages', :mod:`daliloader.augment`): do not edit. After
changing an option: ``python tests/test_keywords.py > daliloader/keywords.py`` (the test fails until then).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

from .draws import Range
from .spec import DType
'''


def function(name: str):
    import daliloader as dl

    return getattr(dl, name)


def shown_keywords(fn) -> list[inspect.Parameter]:
    """The keywords ``fn`` shows in place of its ``**options`` (those its code does not name)."""
    code = fn.__code__
    own = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    return [p for p in inspect.signature(fn).parameters.values() if p.name not in own]


def typed_dict_name(name: str) -> str:
    return "".join(part.title() for part in name.split("_")) + "Options"


def source() -> str:
    """The module's text, from the signatures of :data:`FUNCTIONS`. A TypedDict whose keywords another
    written before it already holds is that one (an alias), or extends the largest such (inherits it)."""
    blocks, written = [HEADER], {}  # name -> {keyword: annotation}
    for name in FUNCTIONS:
        keywords = {p.name: p.annotation for p in shown_keywords(function(name))}
        same = next((other for other, held in written.items() if held == keywords), None)
        if same is not None:
            blocks.append(f"\n\n{typed_dict_name(name)} = {same}  # ``{name}`` takes the same keywords\n")
            continue
        base = max((other for other, held in written.items() if held.items() <= keywords.items()),
                   key=lambda other: len(written[other]), default=None)
        beyond = f" beyond {base}'s" if base else ""
        lines = [f"\n\nclass {typed_dict_name(name)}({base or 'TypedDict'}, total=False):",
                 f'    """The keywords of ``{name}``\'s ``**options``{beyond}."""', ""]
        lines += [f"    {k}: {a}" for k, a in keywords.items() if base is None or k not in written[base]]
        blocks.append("\n".join(lines) + "\n")
        written[typed_dict_name(name)] = keywords
    return "".join(blocks)


def test_the_typed_keywords_are_those_the_functions_show():
    assert MODULE.read_text() == source(), "stale: run `python tests/test_keywords.py > daliloader/keywords.py`"


def test_each_function_types_its_options_with_its_own_typed_dict():
    """Each function's ``**options`` is annotated ``Unpack[<its TypedDict>]``, and every annotation in the
    module resolves (a type named that the module does not import fails here)."""
    from daliloader import keywords

    for name in FUNCTIONS:
        typed = getattr(keywords, typed_dict_name(name))
        assert set(typing.get_type_hints(typed)) == {p.name for p in shown_keywords(function(name))}
        fn = function(name)
        options = next(p for p in _code_signature(fn).parameters.values() if p.kind is p.VAR_KEYWORD)
        assert options.annotation == f"Unpack[{typed_dict_name(name)}]", name


def _code_signature(fn) -> inspect.Signature:
    """``fn``'s signature as its code writes it (not the one it shows)."""
    shown = fn.__signature__
    del fn.__signature__
    try:
        return inspect.signature(fn)
    finally:
        fn.__signature__ = shown


def test_a_type_checker_sees_the_keywords(tmp_path):
    """mypy, on a user's calls: a valid call passes; a misspelt option, an option a loader refuses and a
    value outside an option's choices are each an error, at the line of the call."""
    from mypy import api

    user = tmp_path / "user.py"
    user.write_text(
        "import daliloader as dl\n"
        "data = dl.SegmentationData.from_folder('x')\n"
        "dl.tf_dataset(data, 8, (256, 256), flip=0.5, vflip=0.5, blur=(0.1, 2.0), num_threads=2)\n"
        "dl.tf_dataset(data, 8, (256, 256), vflp=0.5)\n"
        "dl.keras_sequence(data, 8, (256, 256), num_threads=4)\n"
        "dl.make_plan(data, erase_mask='zero')\n")
    out, err, status = api.run([str(user), "--ignore-missing-imports", "--follow-imports=silent", "--no-incremental",
                                "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}"])
    errors = sorted(int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line)
    assert errors == [4, 5, 6], out + err


def test_an_installed_daliloader_gives_type_checkers_its_types(tmp_path):
    """Installed from its wheel (as ``pip install`` puts it in site-packages), daliloader is read by type
    checkers as typed (PEP 561's ``py.typed``): without the marker mypy takes every name of an installed
    package as Any, and the misspelt option below would pass."""
    import shutil
    import subprocess
    import venv
    import zipfile

    from mypy import api

    import daliloader

    source = tmp_path / "source"  # (a copy: setuptools' build/ folder in a clone keeps files deleted since)
    root = Path(__file__).resolve().parent.parent
    shutil.copytree(root / "daliloader", source / "daliloader", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "wheel"), str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "wheel").glob("daliloader-*.whl")
    assert wheel.name.startswith(f"daliloader-{daliloader.__version__}-")  # (the version's one definition)
    venv.create(tmp_path / "env", with_pip=False)
    python = tmp_path / "env" / "bin" / "python"
    (site,) = (tmp_path / "env" / "lib").glob("python*/site-packages")
    zipfile.ZipFile(wheel).extractall(site)
    user = tmp_path / "user.py"  # (outside the source tree: mypy finds daliloader in site-packages alone)
    user.write_text("import daliloader as dl\n"
                    "data = dl.SegmentationData.from_folder('x')\n"
                    "dl.tf_dataset(data, 8, (256, 256), vflp=0.5)\n")
    out, err, _ = api.run([str(user), "--python-executable", str(python), "--ignore-missing-imports",
                           "--follow-imports=silent", "--no-incremental", "--cache-dir", str(tmp_path / "cache")])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "user.py:3:" in errors[0] and "vflp" in errors[0], out + err


if __name__ == "__main__":
    sys.stdout.write(source())
