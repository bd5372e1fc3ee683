"""Reference pages generated from the code itself: configuration fields, CLI options, Python API.

- The configuration reference reads :func:`estimator.config.schema.field_specs` (type, default, unit, help,
  derived default, Megatron-LM flag, CLI flag) and each section's dataclass docstring.
- The CLI reference walks the argparse parser of :func:`estimator.cli.build_parser`.
- The Python API reference reads ``__all__``, signatures and docstrings of the listed modules.

So none of these pages can drift from the code: a field, option or function added there appears here.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import importlib
import inspect
import re

from estimator.config.schema import SECTIONS, field_specs, section_specs

from _tables_base import MarkerError, yaml_value

TYPE_LABELS = {"int": "integer", "float": "number", "bool": "boolean", "str": "string",
               "int_or_list": "integer or list of 0/1", "str_list": "list of strings", "int_list": "list of integers"}


def _doc(obj) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


def _bound(x) -> str:
    """10,000,000 rather than 1e+07; 0.5 as 0.5."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def config_reference() -> dict:
    sections, n = [], 0
    for name, cls in SECTIONS.items():
        rows = []
        for s in section_specs(name):
            if not s.help:
                raise MarkerError(f"schema field {s.path} has no help text")
            kind = TYPE_LABELS.get(s.type)
            if kind is None:
                raise MarkerError(f"schema field {s.path} has an unknown type {s.type!r}")
            bounds = [f"{sign} {_bound(x)}" for sign, x in (("≥", s.min), ("≤", s.max)) if x is not None]
            rows.append({
                "path": s.path, "name": s.name, "type": kind, "choices": list(s.choices or ()),
                "bounds": ", ".join(bounds), "nullable": s.nullable and not s.required, "required": s.required,
                "default": None if s.required else yaml_value(s.default), "derived": s.derived, "unit": s.unit,
                "help": s.help, "flag": s.flag, "cli_flag": s.cli_flag,
            })
        n += len(rows)
        sections.append({"name": name, "doc": _doc(cls), "fields": rows})
    return {"sections": sections, "total": n}


# --- CLI -----------------------------------------------------------------------------------------

def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    out = []
    for action in parser._actions:   # argparse has no public accessor for sub-commands
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:   # aliases
                    continue
                seen.add(id(sub))
                out.append((name, sub, helps.get(name) or ""))
    return out


def _schema_flags() -> dict[str, str]:
    return {spec.cli_flag: spec.path for spec in field_specs()}


def _is_override(action: argparse.Action, flags: dict[str, str]) -> bool:
    return any(o in flags for o in action.option_strings)


def _options(parser: argparse.ArgumentParser, flags: dict[str, str]) -> list[dict]:
    """The parser's own options (the configuration overrides are documented once, separately)."""
    fmt = parser._get_formatter()
    rows = []
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.help == argparse.SUPPRESS:
            continue
        if _is_override(a, flags):
            continue
        names = ", ".join(a.option_strings) if a.option_strings else (a.metavar or a.dest)
        takes_value = a.nargs != 0
        metavar = ""
        if a.option_strings and takes_value:
            metavar = a.metavar if isinstance(a.metavar, str) else (a.dest.upper() if not a.choices else "")
        default = a.default
        if default is None or default == argparse.SUPPRESS or (default is False and not takes_value) \
                or default == [] or default == ():
            default = ""
        elif isinstance(default, (list, tuple)):
            default = ",".join(map(str, default))
        help_text = fmt._expand_help(a) if a.help else ""
        rows.append({"names": names, "metavar": metavar, "positional": not a.option_strings,
                     "choices": [str(c) for c in a.choices] if a.choices else [], "default": str(default),
                     "required": bool(a.required), "help": help_text})
    return rows


def _overrides(parser: argparse.ArgumentParser, flags: dict[str, str]) -> list[dict]:
    out = []
    for a in parser._actions:
        if _is_override(a, flags):
            path = next(flags[o] for o in a.option_strings if o in flags)
            metavar = a.metavar if isinstance(a.metavar, str) else ""
            out.append({"names": [o for o in a.option_strings], "metavar": metavar if a.nargs != 0 else "",
                        "path": path})
    return out


def cli_reference() -> dict:
    try:
        from estimator import cli
    except ImportError as exc:
        raise MarkerError(f"estimator.cli is not importable: {exc}") from None
    flags = _schema_flags()
    parser = cli.build_parser()
    parser.prog = "python -m estimator"
    commands, overrides, takers = [], None, []
    for name, sub, help_text in _subparsers(parser):
        sub.prog = f"python -m estimator {name}"
        over = _overrides(sub, flags)
        if len(over) == len(flags):
            takers.append(name)
            overrides = over
        commands.append({"name": name, "help": help_text, "description": sub.description or "",
                         "epilog": sub.epilog or "", "usage": _usage(sub, flags), "options": _options(sub, flags),
                         "overrides": over, "all_overrides": len(over) == len(flags)})
    if not commands:
        raise MarkerError("estimator.cli.build_parser() has no sub-commands")
    return {"prog": parser.prog, "description": parser.description or "", "usage": _usage(parser, flags),
            "options": _options(parser, flags), "commands": commands, "overrides": overrides or [],
            "override_commands": takers, "epilog": parser.epilog or ""}


def _usage(parser: argparse.ArgumentParser, flags: dict[str, str]) -> str:
    actions = [a for a in parser._actions if not _is_override(a, flags)]
    fmt = argparse.HelpFormatter(parser.prog, width=100)
    fmt.add_usage(parser.usage, actions, [], prefix="")
    usage = fmt.format_help().strip()
    if len(actions) < len(parser._actions):
        usage += "\n" + " " * (len(parser.prog) + 1) + "[configuration overrides]"
    return usage


# --- Python API ----------------------------------------------------------------------------------

_ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def docstring_html(text: str) -> str:
    """A docstring as HTML: paragraphs, indented blocks as <pre>, ``literals`` and roles as <code>."""
    out, para, block = [], [], []

    def inline(s: str) -> str:
        s = html.escape(s, quote=False)
        s = _ROLE.sub(lambda m: f"<code>{m.group(1)}</code>", s)
        return _LITERAL.sub(lambda m: f"<code>{m.group(1)}</code>", s)

    def flush():
        if para:
            out.append("<p>" + inline(" ".join(para)) + "</p>")
            para.clear()
        if block:
            out.append("<pre><code>" + html.escape("\n".join(block).rstrip()) + "</code></pre>")
            block.clear()

    for line in inspect.cleandoc(text).splitlines():
        if line.startswith("    ") and not para:
            block.append(line[4:])
        elif not line.strip():
            flush()
        elif line.lstrip().startswith("- ") and para and not para[-1].endswith(":"):
            flush()
            para.append(line.strip())
        else:
            if block:
                flush()
            para.append(line.strip())
    flush()
    return "\n".join(out)


def _signature(obj) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    parts, star = [], False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if p.kind is p.VAR_POSITIONAL:
            star = True
        s = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        if p.annotation is not p.empty:
            s += ": " + (p.annotation if isinstance(p.annotation, str) else inspect.formatannotation(p.annotation))
        if p.default is not p.empty:
            s += (" = " if p.annotation is not p.empty else "=") + repr(p.default)
        parts.append(s)
    ret = sig.return_annotation
    tail = "" if ret is sig.empty else " -> " + (ret if isinstance(ret, str) else inspect.formatannotation(ret))
    return "(" + ", ".join(parts) + ")" + tail


def _members(cls) -> list[dict]:
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property) or type(value).__name__ == "cached_property":
            fn = value.fget if isinstance(value, property) else value.func
            out.append({"name": name, "kind": "property", "signature": "", "doc": _first_para(fn)})
        elif inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)):
            fn = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
            out.append({"name": name, "kind": "method", "signature": _signature(fn), "doc": _first_para(fn)})
    return out


def _first_para(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    return docstring_html(doc.split("\n\n")[0]) if doc else ""


def api_reference(modules: list[str]) -> dict:
    mods = []
    for modname in modules:
        modname = modname.strip()
        try:
            mod = importlib.import_module(modname)
        except ImportError as exc:
            raise MarkerError(f"module {modname} is not importable: {exc}") from None
        names = getattr(mod, "__all__", None)
        if names is None:
            raise MarkerError(f"module {modname} has no __all__: its public API is not declared")
        items = []
        for name in names:
            obj = getattr(mod, name, None)
            if obj is None and not hasattr(mod, name):
                raise MarkerError(f"{modname}.__all__ names {name!r}, which the module lacks")
            if inspect.isclass(obj):
                fields = []
                if dataclasses.is_dataclass(obj):
                    fields = [{"name": f.name, "type": f.type if isinstance(f.type, str) else
                               inspect.formatannotation(f.type)} for f in dataclasses.fields(obj)
                              if not f.name.startswith("_")]
                bases = [b.__name__ for b in obj.__bases__ if b is not object]
                plain = not (issubclass(obj, BaseException) or dataclasses.is_dataclass(obj))
                items.append({"name": name, "kind": "class", "signature": _signature(obj) if plain else "",
                              "bases": bases, "doc": docstring_html(inspect.getdoc(obj) or ""), "fields": fields,
                              "members": _members(obj)})
            elif callable(obj):
                items.append({"name": name, "kind": "function", "signature": _signature(obj), "bases": [],
                              "doc": docstring_html(inspect.getdoc(obj) or ""), "fields": [], "members": []})
            else:
                value = repr(obj)
                if len(value) > 120:
                    value = type(obj).__name__ + " (" + str(len(obj)) + " entries)" if hasattr(obj, "__len__") \
                        else value[:117] + "..."
                items.append({"name": name, "kind": "data", "signature": "", "value": value, "bases": [],
                              "doc": "", "fields": [], "members": []})
        mods.append({"name": modname, "doc": docstring_html(mod.__doc__ or ""), "items": items})
    return {"modules": mods}


def _paragraph(doc: str, start: str) -> str:
    """The paragraph of ``doc`` that begins with ``start`` (without it), on one line; '' if none."""
    for para in doc.split("\n\n"):
        if para.startswith(start):
            return " ".join(para[len(start):].split())
    return ""


def package_layout() -> dict:
    """The layers of ``estimator`` (``estimator.LAYERS``), each subpackage with what its docstring says it does,
    what it may import and its modules: the table of the API page."""
    import pkgutil

    import estimator
    rows = []
    for rank, names in enumerate(estimator.LAYERS, 1):
        for name in names:
            mod = importlib.import_module(f"estimator.{name}")
            doc = inspect.getdoc(mod) or ""
            head = doc.split("\n\n")[0]
            what = head.split(":", 1)[1].strip() if head.startswith("Layer ") and ":" in head else head
            imports = _paragraph(doc, "Imports:").split(". ")[0].rstrip(".")
            if not what or not imports:
                raise MarkerError(f"estimator.{name}'s docstring must open with 'Layer N, ``{name}``: ...' and say "
                                  "'Imports: ...'")
            modules = sorted(m.name + ("/" if m.ispkg else "") for m in pkgutil.iter_modules(mod.__path__))
            rows.append({"rank": rank, "name": name, "what": docstring_html(" ".join(what.split())),
                         "imports": docstring_html(imports), "modules": modules})
    return {"rows": rows}
