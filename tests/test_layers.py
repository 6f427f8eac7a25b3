"""The package's shape stays true: layers that import only downward, and no import cycle.

Layers, lowest first (docs/design.md, "The layers", which must list the same ones). A module may import
from its own layer and the layers below, never above; lazy imports inside functions count too. The package root
(``daliloader/__init__.py``, a facade that loads the public names lazily) may be imported only by the
jobs and the CLI.
"""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "daliloader"
LAYERS = [
    ["tfprivate", "environment", "errors", "parallel", "cache", "buckets"],
    ["draws", "augment", "spec", "keywords", "catalog", "classes", "sampler", "stages"],
    ["pairing", "manifest", "tfrecord", "parts", "forms", "tfds_folder", "layouts", "data"],
    ["codecs", "folders", "packs", "maskcache"],
    ["inspection", "guard", "checks", "balance"],
    ["plan", "backends"],  # backends: the registry (backends/__init__.py), which imports no backend
    ["backends.*"],  # the implementations
    ["loaders", "losses", "metrics"],
    ["bench", "bench.*", "report", "previews", "preparation", "verification", "convert", "synthetic", "predictions"],
    ["cli"],
]
ROOT_ALLOWED_FROM = len(LAYERS) - 2  # the jobs and the CLI


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(name: str) -> int:
    for i, names in enumerate(LAYERS):
        if name in names or (name.count(".") and f"{name.split('.')[0]}.*" in names):
            return i
    raise AssertionError(f"daliloader.{name} is in no layer: add it to LAYERS (and to the diagram in docs/design.md)")


def is_module(name: str) -> bool:
    path = PACKAGE / Path(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(path: Path) -> set[str]:
    """The daliloader modules ``path`` imports ("" for the package root)."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.removeprefix("daliloader").lstrip(".") for a in node.names
                      if a.name == "daliloader" or a.name.startswith("daliloader.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module == "daliloader" or (node.module or "").startswith("daliloader."):
                target = node.module.removeprefix("daliloader").lstrip(".")
            else:
                continue
            # `from . import stages` names a module; `from .x import f` (or `from . import make_plan`) the module x
            for alias in node.names:
                module = f"{target}.{alias.name}".lstrip(".")
                found.add(module if is_module(module) else target)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("daliloader.")
              and ":" not in node.value):
            # importlib.import_module("daliloader.x"). The registry's "daliloader.x:function" strings are not
            # imports of the registry: it imports no backend, it names the builders that resolve() loads on
            # request (test_every_registered_builder_is_a_backend_module checks where they point).
            found.add(node.value.removeprefix("daliloader."))
    return found - {name}


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py") if module_name(p)}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_downward(name):
    own = layer(name)
    for target in sorted(imports(MODULES[name])):
        if target == "":
            assert own >= ROOT_ALLOWED_FROM, f"daliloader.{name} imports the package root; import the module instead"
            continue
        assert layer(target) <= own, (f"daliloader.{name} (layer {own}: {LAYERS[own]}) imports daliloader.{target} "
                                      f"(layer {layer(target)}: {LAYERS[layer(target)]}), a layer above it")


def test_no_import_cycle():
    graph = {name: {t for t in imports(path) if t in MODULES} for name, path in MODULES.items()}
    done, active = set(), []

    def visit(name):
        if name in active:
            cycle = active[active.index(name):] + [name]
            raise AssertionError("import cycle: " + " -> ".join(f"daliloader.{n}" for n in cycle))
        if name in done:
            return
        active.append(name)
        for target in sorted(graph[name]):
            visit(target)
        active.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def test_every_registered_builder_is_a_backend_module():
    from daliloader.backends import BACKENDS

    for backend in BACKENDS.values():
        for product, target in backend.builds.items():
            module = target.split(":")[0].removeprefix("daliloader.")
            assert module in MODULES and layer(module) == layer("backends.x"), f"{backend.name} {product}: {target}"


def test_the_documented_layers_are_these():
    """docs/design.md draws the layers: each line there holds exactly the modules of one layer, in order."""
    import re

    page = (PACKAGE.parent / "docs" / "design.md").read_text()
    drawing = page.split("## The layers", 1)[1].split("```")[1].strip().splitlines()
    names = [line.split("   ")[0].replace("(the registry)", "") for line in drawing]  # the names, not the notes
    documented = [sorted(re.findall(r"[a-z_]+", line)) for line in names]
    assert documented == [sorted(drawn(names)) for names in LAYERS]


def drawn(layer: list[str]) -> list[str]:
    """The names a layer's line shows: its modules, and for a package's modules (``"backends.*"``) the
    package's name and its modules' (``backends/ dali_graph dali_tf ...``)."""
    names = []
    for name in layer:
        if name.endswith(".*"):
            package = name[:-2]
            names += [package] + [n.split(".")[1] for n in MODULES if n.startswith(package + ".")]
        elif f"{name}.*" not in layer:  # a package drawn with its modules is drawn once
            names.append(name)
    return names


def test_the_checker_sees_imports():
    """The parsing itself: relative, absolute and lazy imports are found."""
    found = imports(MODULES["loaders"])
    assert {"backends", "plan", "errors"} <= found
    assert "backends.dali_tf" in found  # imported inside distribute()
    assert "stages" in imports(MODULES["backends.dali_graph"])  # `from .. import stages`
    assert not any(t.startswith("backends.") for t in imports(MODULES["backends"]))  # names builders, imports none


def test_no_module_shares_a_public_name():
    """``dl.prepare``, ``dl.verify``, ``dl.preview`` and ``dl.check`` are functions. A module of the same
    name would replace its function on the package as soon as anything imported it (Python binds a
    submodule to its parent's attribute), so no module is named like a public name that is no module."""
    import daliloader as dl

    modules = {name for name, (_, attr) in dl._LAZY.items() if attr is None}  # dl.synthetic, dl.losses...
    clashes = sorted(name for name in dl.__all__ if name not in modules and name in MODULES)
    assert not clashes, f"modules named like public functions or classes: {clashes}"
    for name in modules:
        importlib.import_module(f"daliloader.{name}")
    for name in ("check", "prepare", "verify", "preview", "tf_dataset", "class_frequencies"):
        assert inspect.isfunction(getattr(dl, name)), name


def test_the_old_spellings_of_prepare_verify_and_preview_work_and_warn(tmp_path):
    """Before they were functions, ``dl.prepare`` and ``dl.preview`` were modules: ``dl.prepare.prepare``,
    ``dl.prepare.verify`` and ``dl.preview.preview`` still call the functions, warning that they moved."""
    import daliloader as dl
    from daliloader.errors import DataError

    for old, new in ((dl.prepare.prepare, dl.prepare), (dl.prepare.verify, dl.verify),
                     (dl.preview.preview, dl.preview)):
        assert old.__wrapped__ is new
    with pytest.warns(DeprecationWarning, match=r"dl\.prepare\.verify\(\.\.\.\) is now dl\.verify"), \
            pytest.raises(DataError, match="nothing"):
        dl.prepare.verify(tmp_path / "nothing")


def test_only_the_parts_module_tells_files_from_records():
    """A pair's image or mask is a file or a picture in a TFRecord record; daliloader/parts.py is the one
    module that dispatches on which (tfrecord.py defines the record's own), so a new kind of part is added
    in one place."""
    asking = sorted(name for name, path in MODULES.items() if name not in ("parts", "tfrecord")
                    for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
                    and "RecordPart" in ast.unparse(node.args[1]))
    assert not asking, f"modules that ask isinstance(..., RecordPart) instead of daliloader.parts: {asking}"


def test_every_backend_reads_every_container():
    """Each backend reads a container in one table keyed by ``Container``: a new container fails here until
    every backend says how it reads it."""
    from daliloader.backends import dali_graph, dali_tf, tfdata
    from daliloader.data import Container

    for table in (dali_graph.READERS, dali_tf.STREAMS, tfdata.READINGS):
        assert set(table) == set(Container)


#: What ``typing`` gained after Python 3.10, the oldest Python pyproject.toml admits.
NEWER_TYPING = {"Unpack", "Self", "LiteralString", "Never", "TypeVarTuple", "Required", "NotRequired",
                "assert_never", "assert_type", "reveal_type", "dataclass_transform", "override", "TypeAliasType",
                "get_overloads", "clear_overloads", "ReadOnly", "TypeIs", "get_protocol_members", "is_protocol"}


def test_the_package_imports_on_the_oldest_python_it_admits():
    """requires-python is >=3.10 and CI runs a newer Python: no module imports at run time a name of
    ``typing`` that 3.10 lacks (``typing.Unpack`` once broke ``import daliloader`` there); under
    ``if TYPE_CHECKING:`` they are only read by type checkers."""
    found = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        checking = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                    and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING") for n in ast.walk(node)}
        found += [f"{name}: typing.{alias.name}" for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module == "typing" and id(node) not in checking
                  for alias in node.names if alias.name in NEWER_TYPING]
    assert not found, found
