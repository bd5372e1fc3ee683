"""The markers of the site and their views: each calls the estimator and renders one template.

``render(name, args, body)`` is the single entry point of the hook. A view is registered with
:func:`marker`, which declares the arguments it accepts and whether it takes a YAML body; anything
else is a :class:`MarkerError` that fails the build. Views shape results for templates (labels, rows,
chart geometry) and never compute memory themselves.

Markers (arguments; body):

- ``config-reference``, ``cli-reference``, ``api-reference modules=a,b``, ``package-layout``: references generated
  from the schema, the CLI parser, the public API and the subpackages' docstrings (``_tables_reference``);
- ``preset-index``, ``preset-page name=``: the model pages (``_tables_presets``);
- ``catalog-page``: the model catalog (``estimator.formats.catalog.listing``), the whole generated models/catalog.md;
- ``example id= preset= gpu= [claim=] [title=]`` with a YAML body: a preset with its parallelism section
  replaced and other fields set, every stage, a chart and the fit on one GPU;
- ``compare id= preset= [gpu=]`` with a YAML body ``base:`` and ``rows:``: variants side by side;
- ``value preset= key= [format=]``, ``constant name= [format=]``: one number inside a sentence;
- ``docstring module=``, ``assumptions preset=``, ``formulas names=a,b``: the model as the code states it;
- ``cli-run args=``, ``python-run`` with a Python body: a command or snippet run at build time, with output;
- ``validation-summary``, ``validation-chart``, ``validation-table`` (calibration), ``validation-ci-table``,
  ``validation-ci-excluded``, ``validation-recipes``, ``validation-project-table``: estimate against measurement
  (``_tables_validation``);
- ``accuracy-box [details=]``: the short answer on accuracy, held-out figures from the data at build time
  (``estimator.validation.headline``), in an admonition; ``details`` links to the evidence.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import shlex
from dataclasses import dataclass
from typing import Callable

import estimator
from estimator.config import yamlio

import _tables_presets as presets
import _tables_reference as reference
import _tables_svg as svg
import _tables_validation as validation
from _tables_base import MarkerError, billions, count, gib, merge, render_template

__all__ = ["MarkerError", "VIEWS", "preset_titles", "render"]


@dataclass(frozen=True)
class View:
    fn: Callable
    args: tuple[str, ...]
    required: tuple[str, ...]
    body: str              # "none" | "optional" | "required" (a YAML mapping) | "text" (raw text)
    inline: bool           # replaces the marker inside a line of text


VIEWS: dict[str, View] = {}


def marker(name: str, *, args: tuple[str, ...] = (), required: tuple[str, ...] = (), body: str = "none",
           inline: bool = False):
    def register(fn):
        VIEWS[name] = View(fn, args + required, required, body, inline)
        return fn
    return register


def render(name: str, args: dict[str, str], body: str | None) -> str:
    """The Markdown/HTML that replaces one marker."""
    view = VIEWS.get(name)
    if view is None:
        raise MarkerError(f"unknown marker {name!r}; known markers: {', '.join(sorted(VIEWS))}")
    unknown = sorted(set(args) - set(view.args))
    if unknown:
        raise MarkerError(f"unknown argument(s) {', '.join(unknown)}; allowed: {', '.join(view.args) or 'none'}")
    missing = [a for a in view.required if a not in args]
    if missing:
        raise MarkerError(f"missing argument(s) {', '.join(missing)}")
    has_body = bool(body and body.strip())
    if view.body == "none" and has_body:
        raise MarkerError("takes no YAML body")
    if view.body == "required" and not has_body:
        raise MarkerError("needs a YAML body after the first line")
    data = None
    if view.body == "text":
        if not has_body:
            raise MarkerError("needs a body after the first line")
        data = body
    elif has_body:
        try:
            data = yamlio.load(body)
        except yamlio.YamlError as exc:
            raise MarkerError(f"YAML body: {exc}") from None
        if not isinstance(data, dict):
            raise MarkerError(f"the YAML body must be a mapping, got {type(data).__name__}")
    try:
        out = view.fn(**args, **({"body": data} if view.body != "none" else {}))
    except estimator.ConfigError as exc:
        raise MarkerError(str(exc)) from None
    if view.inline:
        return out.strip()
    return "\n" + out.strip("\n") + "\n"


def preset_titles() -> list[tuple[str, str]]:
    return presets.titles()


# --- reference pages ---------------------------------------------------------------------------

@marker("config-reference")
def _config_reference() -> str:
    return render_template("config_reference.md.j2", **reference.config_reference())


@marker("cli-reference")
def _cli_reference() -> str:
    return render_template("cli_reference.md.j2", **reference.cli_reference())


@marker("api-reference", required=("modules",))
def _api_reference(modules: str) -> str:
    return render_template("api_reference.md.j2", **reference.api_reference(modules.split(",")))


@marker("package-layout")
def _package_layout() -> str:
    return render_template("package_layout.md.j2", **reference.package_layout())


# --- presets -------------------------------------------------------------------------------------

@marker("preset-index")
def _preset_index() -> str:
    return render_template("preset_index.md.j2", **presets.index())


@marker("preset-page", required=("name",))
def _preset_page(name: str) -> str:
    return render_template("preset.md.j2", **presets.page(name))


# --- the model catalog ---------------------------------------------------------------------------

CATALOG_KINDS = {"safetensors": "Hugging Face API (safetensors)", "keras-hub": "KerasHub preset",
                 "model-card": "model card (README)",
                 "checkpoint": "checkpoint's tensor elements (conversion round trip)"}
#: Where generated HTML links to the calculator: tables.py writes the calculator page's address relative to the page in
#: its place (Markdown links, which MkDocs resolves, do not reach a table written in HTML).
CALCULATOR_URL = "@@calculator-url@@"


@marker("catalog-page")
def _catalog_page() -> str:
    from estimator.formats.catalog import listing
    from estimator.formats.hf import REFUSED, SUPPORTED
    rows = listing()
    return render_template("catalog.md.j2", total=len(rows), families=len({r["family"] for r in rows}),
                           supported=[r for r in rows if r["supported"]],
                           refused=[r for r in rows if not r["supported"]], kinds=CATALOG_KINDS,
                           calculator=CALCULATOR_URL, architectures=SUPPORTED, refused_types=REFUSED)


# --- examples in the guides ----------------------------------------------------------------------

@marker("example", required=("preset", "gpu", "id"), args=("claim", "title"), body="required")
def _example(preset: str, gpu: str, id: str, body: dict, claim: str | None = None, title: str | None = None) -> str:
    """One configuration, every stage computed, fit on one GPU: the preset with its parallelism section
    replaced by the body's and the body's other sections' fields set."""
    g = presets.gpu(gpu)
    base = presets.config_dict(preset)
    if "parallelism" in body:
        base["parallelism"] = {}
    cfg = merge(base, body)
    est = estimator.estimate(cfg)
    fit = presets.fit_peak(est, g)
    chart = svg.stage_bars(f"chart-{id}", f"Memory per GPU of each pipeline stage, {title or id}",
                           presets.stage_segments(est), [(g["label"], g["memory_bytes"])])
    return render_template(
        "example.md.j2", id=id, title=title, preset=preset, preset_title=presets.title(preset), gpu=g, fit=fit,
        claim=claim, body_yaml=yamlio.dump(body).rstrip(), full_yaml=yamlio.dump(cfg).rstrip(), config=cfg,
        est=est, stages=presets.stage_rows(est), chart=chart, parallel=est.parallel)


@marker("compare", required=("preset", "id"), args=("gpu",), body="required")
def _compare(preset: str, id: str, body: dict, gpu: str | None = None) -> str:
    """Variants of one configuration side by side: the peak stage of each."""
    base = merge(presets.config_dict(preset), body.get("base") or {})
    rows_in = body.get("rows")
    extra = sorted(set(body) - {"base", "rows"})
    if extra or not isinstance(rows_in, list) or not rows_in:
        unknown = f"; unknown keys: {', '.join(extra)}" if extra else ""
        raise MarkerError("the body needs 'base' (fields set for every row) and a non-empty list 'rows' "
                          f"(each a label and the fields it changes){unknown}")
    g = presets.gpu(gpu) if gpu else None
    rows = []
    for item in rows_in:
        item = dict(item)
        label = item.pop("label", None)
        if not label:
            raise MarkerError(f"every row needs a label: {item}")
        cfg = merge(base, item)
        est = estimator.estimate(cfg)
        rows.append({"label": label, "config": cfg, "est": est, "peak": est.peak_stage,
                     "fit": presets.fit_peak(est, g) if g else None})
    return render_template("compare.md.j2", id=id, preset=preset, preset_title=presets.title(preset),
                           base_yaml=yamlio.dump(body.get("base") or {}).rstrip(), rows=rows, gpu=g)


@marker("cli-run", required=("args",))
def _cli_run(args: str) -> str:
    """A command of the CLI and what it printed, as a user would see it in a terminal."""
    try:
        from estimator import cli
    except ImportError as exc:
        raise MarkerError(f"estimator.cli is not importable: {exc}") from None
    argv = shlex.split(args)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
    if code not in (0, None):
        raise MarkerError(f"`{args}` exited with {code}: {err.getvalue().strip()}")
    return render_template("cli_run.md.j2", command=shlex.join(argv), output=out.getvalue().rstrip())


@marker("python-run", body="text")
def _python_run(body: str) -> str:
    """A Python snippet, run when the site is built, shown with what it printed."""
    code = inspect.cleandoc(body)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<python-run>", "exec"), {"__name__": "__docs__"})
    except Exception as exc:
        raise MarkerError(f"the snippet raised {type(exc).__name__}: {exc}") from None
    return render_template("python_run.md.j2", code=code, output=out.getvalue().rstrip())


# --- inline values and model descriptions ------------------------------------------------------

FORMATS = {"gib": gib, "count": count, "billions": billions, "raw": str,
           "mib": lambda n: f"{n / 2 ** 20:g}", "percent": lambda x: f"{x * 100:g}"}


def _format(value, fmt: str) -> str:
    if fmt not in FORMATS:
        raise MarkerError(f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")
    return FORMATS[fmt](value)


@marker("value", required=("preset", "key"), args=("format",), inline=True)
def _value(preset: str, key: str, format: str = "raw") -> str:
    """One number of a preset's estimate, by its dotted to_dict() path (parameters.total, peak.device_bytes)."""
    node = estimator.estimate(presets.config_dict(preset)).to_dict()
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise MarkerError(f"the estimate of {preset!r} has no {key!r}")
    return _format(node, format)


@marker("constant", required=("name",), args=("format",), inline=True)
def _constant(name: str, format: str = "raw") -> str:
    """A public constant of the core, e.g. memory.CUDA_CONTEXT_BYTES."""
    modname, _, attr = name.rpartition(".")
    try:
        mod = importlib.import_module(f"estimator.{modname}" if modname else "estimator")
    except ImportError:
        raise MarkerError(f"no module estimator.{modname}") from None
    if attr not in getattr(mod, "__all__", ()):
        raise MarkerError(f"{name} is not a public constant of estimator.{modname}")
    return _format(getattr(mod, attr), format)


@marker("docstring", required=("module",))
def _docstring(module: str) -> str:
    """The docstring of a core module, verbatim: the formulas as the code states them."""
    if module != "estimator" and not module.startswith("estimator."):
        raise MarkerError(f"{module} is not a module of estimator")
    try:
        mod = importlib.import_module(module)
    except ImportError:
        raise MarkerError(f"module {module} is not importable") from None
    if not mod.__doc__:
        raise MarkerError(f"module {module} has no docstring")
    return render_template("docstring.md.j2", module=module, doc=inspect.cleandoc(mod.__doc__))


@marker("assumptions", required=("preset",))
def _assumptions(preset: str) -> str:
    """The assumptions behind a preset's estimate, as the estimate states them."""
    est = estimator.estimate(presets.config_dict(preset))
    return render_template("assumptions.md.j2", preset=preset, assumptions=est.assumptions)


@marker("formulas", required=("names",))
def _formulas(names: str) -> str:
    """Each preset's peak by this project's model and by Megatron-LM's and Megatron-Bridge's formulas."""
    from estimator.reference import theoretical
    rows = []
    for name in names.split(","):
        cfg = presets.config_dict(name)
        results = [theoretical.estimate_training_memory(cfg, formula=f) for f in theoretical.FORMULAS]
        rows.append({"name": name, "title": presets.title(name), "results": results})
    return render_template("formulas.md.j2", rows=rows)


@marker("megatron-flags")
def _megatron_flags() -> str:
    """Every Megatron-LM argument: modelled, no effect on memory, or refused (estimator.formats.megatron_flag_classes)."""
    from estimator.formats import megatron_catalog, megatron_flag_classes
    from estimator.formats.megatron_args import REFUSED_VALUES
    rows = megatron_flag_classes.rows()
    if any(r["kind"] == "unclassified" for r in rows):
        raise MarkerError("an argument of the catalogue is not classified")
    by_kind = {k: [r for r in rows if r["kind"] == k] for k in ("modelled", "refused", "no_effect")}
    return render_template("megatron_flags.md.j2", revision=megatron_catalog.REVISION,
                           repository=megatron_catalog.REPOSITORY, by_kind=by_kind, total=len(rows),
                           refused_values=[(megatron_catalog.ARGUMENTS[d][0][0], allowed, why)
                                           for d, (allowed, why) in REFUSED_VALUES.items()])


@marker("bridge-fields")
def _bridge_fields() -> str:
    """Every Megatron-Bridge field: modelled, no effect on memory, or refused (estimator.formats.bridge.field_classes)."""
    from estimator.formats.bridge import catalog, field_classes
    rows = field_classes.rows()
    if any(r["kind"] == "unclassified" for r in rows):
        raise MarkerError("a field of the Bridge catalogue is not classified")
    by_kind = {k: [r for r in rows if r["kind"] == k] for k in ("modelled", "refused", "no_effect")}
    return render_template("bridge_fields.md.j2", revision=catalog.REVISION, mlm_revision=catalog.MEGATRON_LM_REVISION,
                           by_kind=by_kind, total=len(rows),
                           attributes=len(field_classes.ATTRIBUTES) + len(field_classes.provider_rows()),
                           providers=sorted(field_classes.NOT_GPT_PROVIDERS))


@marker("bridge-recipes")
def _bridge_recipes() -> str:
    """The recipes --bridge-recipe knows, with their source (estimator.formats.bridge.recipe_catalog)."""
    from estimator.formats.bridge.recipe_catalog import RECIPES
    return render_template("bridge_recipes.md.j2", recipes=sorted(RECIPES.items()))


# --- validation ----------------------------------------------------------------------------------

#: The accuracy box's title, also the README's (``scripts/readme_accuracy.py``).
ACCURACY_TITLE = "How accurate is it? The short answer"


def accuracy_box_lines(details: str) -> str:
    """The accuracy box's Markdown list, without its frame (the README quotes it, the site folds it in an
    admonition)."""
    return render_template("accuracy_box.md.j2", details=details, **validation.headline()).strip()


@marker("accuracy-box", args=("details",))
def _accuracy_box(details: str = "validation.md") -> str:
    body = accuracy_box_lines(details)
    return f'!!! abstract "{ACCURACY_TITLE}"\n\n' + "\n".join("    " + line for line in body.splitlines()) + "\n"


@marker("validation-summary", args=("compact",))
def _validation_summary(compact: str = "false") -> str:
    if compact not in ("true", "false"):
        raise MarkerError(f"compact must be true or false, got {compact!r}")
    template = "validation_summary_compact.md.j2" if compact == "true" else "validation_summary.md.j2"
    return render_template(template, **validation.context())


@marker("validation-table")
def _validation_table() -> str:
    return render_template("validation_table.md.j2", **validation.context())


@marker("validation-ci-table")
def _validation_ci_table() -> str:
    return render_template("validation_ci_table.md.j2", **validation.context())


@marker("validation-ci-excluded")
def _validation_ci_excluded() -> str:
    return render_template("validation_ci_excluded.md.j2", **validation.context())


@marker("validation-project-table")
def _validation_project_table() -> str:
    return render_template("validation_project_table.md.j2", **validation.context())


@marker("validation-recipes")
def _validation_recipes() -> str:
    return render_template("validation_recipes.md.j2", **validation.context())


@marker("validation-chart")
def _validation_chart() -> str:
    return render_template("validation_chart.md.j2", chart=validation.chart(), **validation.context())
