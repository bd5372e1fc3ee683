"""Regenerate ``estimator/formats/megatron_catalog.py``: every argument Megatron-LM's ``arguments.py`` defines.

Megatron-LM builds its parser partly by hand (``group.add_argument``) and partly from dataclasses
(``ArgumentGroupFactory(TransformerConfig)``, ...), so the flags cannot be read off the source with a
regular expression. This script runs Megatron-LM's own ``add_megatron_arguments`` on an empty
``argparse`` parser and records what it added. Megatron's heavy imports (torch, Transformer Engine,
...) are replaced by permissive stand-in modules: only the argument definitions are needed, and they
do not depend on those libraries' behaviour. The optional "kitchen" arguments, which Megatron adds only
when the kitchen extension is installed, are included.

Usage (Python >= 3.12 with ``packaging`` and ``typing_extensions`` installed; no torch needed)::

    python3.12 scripts/megatron_arguments.py MEGATRON_LM [--rev REVISION]

MEGATRON_LM is a Megatron-LM checkout or a bare clone; with ``--rev`` (default HEAD of a bare clone)
the tree at that revision is exported first. The classification of each argument (modelled, no
effect on memory, refused) is kept by hand in ``estimator/formats/megatron_flag_classes.py``; the test suite
fails when an argument of the catalogue is not classified there.
"""

from __future__ import annotations

import argparse
import json
import pprint
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "estimator" / "formats" / "megatron_catalog.py"
STUB_ROOTS = ("torch", "transformer_engine", "apex", "numpy", "einops", "triton")

#: Runs inside a child interpreter: install the stand-in modules, build the parser, print JSON.
_CHILD = r'''
import argparse, importlib, importlib.abc, importlib.machinery, json, sys, types, typing

class _Meta(type(typing.Protocol)):
    """Metaclass of stand-in classes: any public attribute is another stand-in class."""
    def __getattr__(cls, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return _Meta(name, (object,), {})
    def __getitem__(cls, key):
        return cls
    def __or__(cls, other):
        return cls
    def __ror__(cls, other):
        return cls

def _cls(name):
    return _Meta(name, (object,), {"__init__": lambda self, *a, **k: None,
                                   "__call__": lambda self, *a, **k: None})

class _Deco:
    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) else _Deco()
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Deco()
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False
    def __bool__(self):
        return False

class _StubModule(types.ModuleType):
    """A module whose lower-case attributes are submodules and capitalised ones classes."""
    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Deco()
    def __getitem__(self, key):
        return self
    def __or__(self, other):
        return self
    def __ror__(self, other):
        return self
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name.startswith("_") or name[:1].islower():
            value = importlib.import_module(self.__name__ + "." + name)
        else:
            value = _cls(name)
        setattr(self, name, value)
        return value

class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "99.0"
        if spec.name == "megatron.core.extensions.kitchen":
            module.HAVE_KITCHEN = True
        return module
    def exec_module(self, module):
        pass

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUB_ROOTS or name == "megatron.core.extensions.kitchen":
            return importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)
        return None

sys.meta_path.insert(0, _Finder())
sys.path.insert(0, TREE)
from megatron.training.arguments import add_megatron_arguments
parser = argparse.ArgumentParser(allow_abbrev=False)
add_megatron_arguments(parser)
out = []
for a in parser._actions:
    if not a.option_strings or a.dest == "help":
        continue
    n = a.nargs
    arity = 0 if n == 0 else 1 if n is None else n
    d = a.default
    if hasattr(d, "name") and hasattr(type(d), "__members__"):
        d = d.name                      # an enum member: its name, as typed on the command line
    if isinstance(d, (list, tuple)):
        d = list(d) if all(isinstance(x, (str, int, float)) for x in d) else None
    elif not isinstance(d, (bool, int, float, str, type(None))):
        d = None
    out.append([a.dest, list(a.option_strings), arity, d])
print(json.dumps(out))
'''


def _export(source: Path, rev: str | None, into: Path) -> tuple[Path, str]:
    """(a tree holding megatron/, the revision) from a checkout or a bare clone."""
    git = ["git", "-C", str(source)]
    is_bare = subprocess.run(git + ["rev-parse", "--is-bare-repository"], capture_output=True,
                             text=True).stdout.strip() == "true"
    if rev is None and not is_bare:
        head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        return source, head or "unknown"
    rev = subprocess.run(git + ["rev-parse", rev or "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    archive = subprocess.run(git + ["archive", rev, "megatron"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "x", "-C", str(into)], input=archive, check=True)
    return into, rev


def collect(tree: Path) -> list[list]:
    code = f"TREE = {str(tree)!r}\nSTUB_ROOTS = {STUB_ROOTS!r}\n" + _CHILD
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(tree))
    if res.returncode:
        sys.exit(f"extracting the arguments failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def render(actions: list[list], rev: str) -> str:
    merged: dict[str, list] = {}
    for dest, flags, arity, default in actions:
        if dest in merged:      # several actions share one destination (e.g. --x / --no-x)
            merged[dest][0] += [f for f in flags if f not in merged[dest][0]]
        else:
            merged[dest] = [list(flags), arity, tuple(default) if isinstance(default, list) else default]
    body = pprint.pformat({d: (tuple(f), a, v) for d, (f, a, v) in merged.items()}, width=110,
                          sort_dicts=False)
    return f'''"""Every argument that Megatron-LM's ``megatron/training/arguments.py`` defines, at one pinned revision.

Generated by ``scripts/megatron_arguments.py`` (which runs Megatron-LM's own ``add_megatron_arguments``);
do not edit by hand. How each argument bears on memory is kept in :mod:`estimator.formats.megatron_flag_classes`.
"""

REPOSITORY = "NVIDIA/Megatron-LM"

#: The Megatron-LM commit the catalogue was taken from.
REVISION = "{rev}"

#: Argument destination -> (its option strings, arity, Megatron-LM's default). Arity: 0 a switch, 1 one
#: value, "+"/"*" a list, "?" an optional value. The default is None where it is not a plain value.
ARGUMENTS = {body}
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("megatron", type=Path, help="a Megatron-LM checkout or bare clone")
    ap.add_argument("--rev", help="the revision to export (default: HEAD)")
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree, rev = _export(ns.megatron, ns.rev, Path(tmp))
        actions = collect(tree)
    OUT.write_text(render(actions, rev), encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(actions)} arguments of Megatron-LM {rev[:12]}")


if __name__ == "__main__":
    main()
