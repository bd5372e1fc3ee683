"""The package's shape, read from its imports: layers in one direction, no circles, no reaching into privates.

``estimator.LAYERS`` lists the subpackages from the bottom up; a module may import its own subpackage and the layers
below it, never one above it or beside it (``web`` and ``cli`` share the top rank and do not import each other).
The import graph counts every import, at module level or inside a function, relative or absolute, so a lazy import
cannot hide a circle. ``estimator.version`` sits under every layer; the package's ``__init__``, ``__main__`` and
``legacy_paths`` sit above them all (they are the public API, the command and the old import paths).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import estimator
from tests.conftest import ROOT

PACKAGE = ROOT / "estimator"
#: Top-level modules below every layer, and the ones above them all.
BOTTOM = {"estimator.version"}
TOP = {"estimator", "estimator.__main__", "estimator.legacy_paths"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _base(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    pkg = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
    return ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, name taken from it or None, line) for every import of an ``estimator`` module."""
    out = []
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = _base(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (base, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
    return [(m, n, line) for m, n, line in out if m == "estimator" or m.startswith("estimator.")]


def _graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (an import of a module's own package is not an edge: Python has loaded it)."""
    graph = {m: set() for m in MODULES}
    for m in MODULES:
        for target, _, _ in _imports(m):
            if target not in MODULES:
                target = target.rpartition(".")[0]
            if target != m and not m.startswith(target + "."):
                graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop(); on.discard(w); comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _rank(module: str) -> tuple[int, str]:
    """(rank, subpackage) of a module: 0 under every layer, len(LAYERS) + 1 above them all."""
    if module in BOTTOM:
        return 0, ""
    if module in TOP:
        return len(estimator.LAYERS) + 1, ""
    sub = module.split(".")[1]
    for rank, names in enumerate(estimator.LAYERS, 1):
        if sub in names:
            return rank, sub
    raise AssertionError(f"{module}: subpackage {sub!r} is in no layer of estimator.LAYERS")


def test_the_layers_are_the_subpackages_on_disk():
    listed = [name for names in estimator.LAYERS for name in names]
    on_disk = sorted(d.name for d in PACKAGE.iterdir() if (d / "__init__.py").is_file())
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_imports_go_down_the_layers():
    """A module imports its own subpackage or a lower layer, never a higher one or a sibling of its rank."""
    upward = []
    for m, targets in _graph().items():
        rank, sub = _rank(m)
        for t in targets:
            t_rank, t_sub = _rank(t)
            if t_rank > rank or (t_rank == rank and t_sub != sub):
                upward.append(f"{m} -> {t}")
    assert upward == []


def test_no_module_takes_another_modules_private_names():
    """Neither ``from x import _name`` nor ``x._name`` on a module bound by an import, across modules."""
    found = []
    for m, path in MODULES.items():
        for target, name, line in _imports(m):
            if name and name.startswith("_") and not name.startswith("__") and target != m:
                found.append(f"{m}:{line} imports {target}.{name}")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = set()                               # names bound to estimator modules in this file
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _base(m, node)
                bound |= {a.asname or a.name for a in node.names if f"{base}.{a.name}" in MODULES}
            elif isinstance(node, ast.Import):
                bound |= {a.asname for a in node.names if a.asname and a.name in MODULES}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{m}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert found == []


def test_the_package_is_a_few_small_subpackages():
    """At most 10 top-level modules; no package folder holds more than 15 modules."""
    assert len(list(PACKAGE.glob("*.py"))) <= 10
    for init in PACKAGE.rglob("__init__.py"):
        assert len(list(init.parent.glob("*.py"))) <= 15, init.parent


@pytest.mark.parametrize("package", sorted(str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py")
                                           if p.parent != PACKAGE and any(p.parent.glob("[!_]*.py"))))
def test_every_subpackage_says_what_it_is_and_has_its_tests(package):
    """Each subpackage's docstring says what it does and what it may import; its tests live in tests/<same path>/."""
    mod = importlib.import_module("estimator." + package.replace("/", "."))
    doc = mod.__doc__ or ""
    assert len(doc.split()) >= 20, f"estimator/{package}/__init__.py needs a docstring saying what the layer does"
    if "/" not in package:
        assert "Imports:" in doc and "Imported by" in doc, f"estimator/{package}: say what it imports and who imports it"
    assert any((ROOT / "tests" / package).glob("test_*.py")), f"tests/{package}/ should hold this subpackage's tests"
