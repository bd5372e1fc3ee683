"""Count the Megatron-Bridge recipes whose settings the estimator still refuses, by a static reading of Bridge.

Reads every recipe function of Megatron-Bridge at the catalogue's revision (``estimator.formats.bridge.catalog``
``REVISION``): each public function whose name contains ``_pretrain_``, ``_sft_`` or ``_peft_`` in a module under
``src/megatron/bridge/recipes/`` or ``src/megatron/bridge/perf_recipes/``. Nothing of Bridge is imported: the
modules are parsed with :mod:`ast` from a git checkout or bare clone. For each recipe the reading follows the calls
it makes into Bridge's own functions (``_pretrain_common``, ``_benchmark_common``, another recipe, a helper that
takes ``cfg.model``, ...), in source order, and collects every ``section.field = value`` it sees: attribute
assignments on the ``ConfigContainer`` or one of its sections, keyword arguments of the section dataclasses'
constructors (``CommOverlapConfig(tp_comm_overlap=False)``, a model provider's), and the fields a mixed-precision
preset sets (``bf16_with_mxfp8_mixed()``, from :data:`estimator.formats.bridge.presets.MIXED_PRECISION_PRESETS`).
A later assignment replaces an earlier one.

Each setting is then judged by the estimator's own rules, as ``read_bridge_config`` judges a ``config.yaml``:

- the field's class (:func:`estimator.formats.bridge.field_classes.classify`: modelled, no effect, refused); a
  refused field counts unless its value is off or the dataclass default (the importer's ``_is_off``);
- a value the estimator refuses of a field it models (:data:`estimator.formats.megatron_args.REFUSED_VALUES`, e.g.
  ``moe_flex_dispatcher_backend`` other than deepep and hybridep);
- a field no catalogued ``ConfigContainer`` section declares (a model provider's own field), unless
  ``field_classes.ATTRIBUTES`` classifies it, is listed apart: the importer stops on it with "not a field", which is
  not a refusal of a memory effect;
- a recipe that builds a provider of ``field_classes.NOT_GPT_PROVIDERS`` (Bridge's FLUX diffusion transformer) counts
  as refused on ``model._target_`` alone, as the importer refuses it before reading its fields; one that builds
  ``WanModelProvider`` is read as ``model_kind: wan``, its own and ``WanDatasetConfig``'s fields by
  ``estimator.formats.bridge.wan``. A class whose name
  holds ``DataProvider`` or ``DatasetProvider`` fills the dataset section, any other ``...Provider`` the model.

What a static reading can miss or get wrong (the table is a guide; the importer's message is the answer for one
run):

- a branch is taken when its condition folds from literal arguments (``_perf_precision("fp8_mx")``); otherwise
  every branch is read, so a helper's branch the recipe does not take can count, and an assignment in a branch
  can replace the one before it;
- a value computed at run time (a function's result, a variable) is not known: it counts as set, not default;
- what a model provider or ``AutoBridge.from_hf_pretrained(...)`` sets from a Hugging Face configuration is not
  seen (but its literal id is read: a multimodal provider's freeze fields count as modelled where the offline
  catalog's import of that id holds a vision tower the estimator models, as ``--bridge-recipe`` takes the tower
  from it), nor ``setattr`` with a computed name, dictionaries of overrides, or functions reached through a variable;
- the estimator's combination rules (a setting refused only together with another, such as NVFP4 weights with the
  precision-aware optimizer, or LoRA on experts of a hybrid model) are not applied: only field classes and refused
  values are;
- calls into Megatron-Core (outside Bridge) are not followed.

Usage (no network)::

    python scripts/bridge_refusals.py BRIDGE_GIT_DIR              # print the count and the table
    python scripts/bridge_refusals.py BRIDGE_GIT_DIR --write      # rewrite the generated block of docs/bridge.md
    python scripts/bridge_refusals.py BRIDGE_GIT_DIR --check      # exit 1 when docs/bridge.md's block is stale
    python scripts/bridge_refusals.py BRIDGE_GIT_DIR --recipes    # also list each recipe's refused settings
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from estimator.formats.bridge.catalog import REVISION, SECTIONS  # noqa: E402
from estimator.formats.bridge.config import DEV_MODEL_FIELDS, _RENAMED, _is_off  # noqa: E402
from estimator.formats.bridge.field_classes import (  # noqa: E402
    ATTRIBUTES, NO_EFFECT_SECTIONS, NOT_GPT_PROVIDERS, classify)
from estimator.formats.bridge.multimodal import GRAPH_IMPLS, MULTIMODAL, TRAINING_FIELD, hf_tower, is_off  # noqa: E402
from estimator.formats.bridge.wan import DATASET_FIELDS as WAN_DATASET_FIELDS  # noqa: E402
from estimator.formats.bridge.wan import MODEL_FIELDS as WAN_MODEL_FIELDS, is_wan  # noqa: E402
from estimator.formats.bridge.providers import PROVIDER_FIELDS, judge_provider_field  # noqa: E402
from estimator.formats.bridge.multimodal import judge as judge_multimodal  # noqa: E402
from estimator.formats.bridge.presets import MIXED_PRECISION_PRESETS  # noqa: E402
from estimator.formats.megatron_args import REFUSED_VALUES  # noqa: E402

DOC = ROOT / "docs" / "bridge.md"
BEGIN = "<!-- bridge-refusals: generated by scripts/bridge_refusals.py; do not edit -->"
END = "<!-- /bridge-refusals -->"
PACKAGE = "src/megatron/bridge/"
RECIPE_DIRS = (PACKAGE + "recipes/", PACKAGE + "perf_recipes/")
KINDS = ("_pretrain_", "_sft_", "_peft_")

#: Constructors whose keyword arguments are a section's fields.
CLASS_SECTION = {"TrainingConfig": "train", "ValidationConfig": "validation", "OptimizerConfig": "optimizer",
                 "DistributedDataParallelConfig": "ddp", "CommOverlapConfig": "comm_overlap",
                 "MixedPrecisionConfig": "mixed_precision", "CheckpointConfig": "checkpoint", "LoRA": "peft",
                 "DoRA": "peft", "GPTDatasetConfig": "dataset", "GPTSFTDatasetConfig": "dataset",
                 "DirectHFSFTDatasetConfig": "dataset", "TransformerConfig": "model", "LoggerConfig": "logger",
                 "SchedulerConfig": "scheduler", "TokenizerConfig": "tokenizer", "RNGConfig": "rng",
                 "DistributedInitConfig": "dist", "ProfilingConfig": "profiling"}
#: A refused field that takes effect only with another is counted as that one (its row names both).
WITH = {"model.offload_modules": "model.fine_grained_activation_offloading"}
#: The Bridge fields of the recipe features (estimator.config.derived.recipe_features) that re-plan model states or
#: activations: with a vision tower the estimator refuses them (estimator.config.rules.not_modelled), so a recipe whose
#: Hugging Face model holds a tower the estimator models (``--bridge-recipe`` takes it whether or not a freeze field is
#: on) and that sets one of these counts as refused on it. field -> its value when off (a value not read counts as on).
TOWER_EXCLUDES = {"use_megatron_fsdp": False, "use_torch_fsdp2": False, "tp_comm_overlap": False, "nccl_ub": False,
                  "num_distributed_optimizer_instances": 1, "optimizer_cpu_offload": False, "cpu_offloading": False,
                  "cuda_graph_impl": "none", "overlap_moe_expert_parallel_comm": False,
                  "defer_embedding_wgrad_compute": False, "moe_paged_stash": False}
TOWER_WITH = "a vision tower (from the recipe's Hugging Face model) together with "
#: Of those, the ones that act on the language model alone beside a tower of the given kind, which the estimator
#: models (estimator.config.rules.unsupported _language_model_only): field -> (tower kind, value) -> whether.
#: use_megatron_fsdp is modelled beside the qwen3_vl tower, whose layers are FSDP units like the decoder's
#: (estimator/memory/features/fsdp.py; a frozen tower with it is refused on import, not in this static reading).
TOWER_LANGUAGE_ONLY = {"tp_comm_overlap": lambda kind, value: kind != "radio",
                       "cuda_graph_impl": lambda kind, value: kind == "qwen3_vl" and value == "transformer_engine",
                       "use_megatron_fsdp": lambda kind, value: kind == "qwen3_vl"}
#: Refused with any tower for a reason of its own (estimator.config.rules.unsupported _tower_features_not_modelled).
TOWER_OWN = {"overlap_moe_expert_parallel_comm": "a vision tower (from the recipe's Hugging Face model) together with "
             "overlap_moe_expert_parallel_comm: Megatron-Core's combined 1F1B schedule builds each micro-batch's plan "
             "with the model's build_schedule_plan, which no Megatron-Bridge vision-language model defines"}
ROOT_SECTION = "<ConfigContainer>"
UNKNOWN = object()          # a value the static reading cannot know
_MAX_DEPTH = 12


class Repo:
    """The Python modules of Bridge's package at one revision, parsed on demand."""

    def __init__(self, git_dir: str, rev: str):
        self.git_dir, self.rev = git_dir, rev
        out = subprocess.run(["git", "-C", git_dir, "ls-tree", "-r", "--name-only", rev, PACKAGE], check=True,
                             capture_output=True, text=True).stdout
        self.paths = {p for p in out.split() if p.endswith(".py")}
        self._mods: dict[str, dict] = {}

    def module(self, path: str) -> dict:
        if path not in self._mods:
            text = subprocess.run(["git", "-C", self.git_dir, "show", f"{self.rev}:{path}"], check=True,
                                  capture_output=True, text=True).stdout
            tree = ast.parse(text, filename=path)
            funcs, imports, consts = {}, {}, {}
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    funcs[node.name] = node
                elif isinstance(node, ast.ImportFrom) and node.module is not None or \
                        isinstance(node, ast.ImportFrom) and node.level:
                    base = self._absolute(path, node.module, node.level)
                    for alias in node.names:
                        imports[alias.asname or alias.name] = (base, alias.name)
                elif isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                        isinstance(node.targets[0], ast.Name):
                    try:
                        consts[node.targets[0].id] = ast.literal_eval(node.value)
                    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                        pass
            self._mods[path] = {"funcs": funcs, "imports": imports, "consts": consts}
        return self._mods[path]

    @staticmethod
    def _absolute(path: str, module: str | None, level: int) -> str:
        if not level:
            return module or ""
        parts = path[len("src/"):-len(".py")].split("/")[:-level]
        return ".".join(parts + ([module] if module else []))

    def path_of(self, dotted: str) -> str | None:
        base = "src/" + dotted.replace(".", "/")
        for cand in (base + ".py", base + "/__init__.py"):
            if cand in self.paths:
                return cand
        return None

    def resolve(self, path: str, name: str, depth: int = 0):
        """(module path, FunctionDef) that ``name`` means in module ``path``, following imports; or None."""
        if depth > 8:
            return None
        mod = self.module(path)
        if name in mod["funcs"]:
            return path, mod["funcs"][name]
        if name in mod["imports"]:
            dotted, orig = mod["imports"][name]
            target = self.path_of(dotted)
            if target:
                return self.resolve(target, orig, depth + 1)
        return None

    def const(self, path: str, name: str, depth: int = 0):
        mod = self.module(path)
        if name in mod["consts"]:
            return mod["consts"][name]
        if name in mod["imports"] and depth < 8:
            dotted, orig = mod["imports"][name]
            target = self.path_of(dotted)
            if target:
                return self.const(target, orig, depth + 1)
        return UNKNOWN


class Reader:
    """Walks one recipe, in source order, into ``settings``: (section, field) -> value (or UNKNOWN)."""

    def __init__(self, repo: Repo):
        self.repo = repo
        self.settings: dict[tuple[str, str], object] = {}
        self.returned: dict[tuple[str, str], str | None] = {}     # what a function returned: a section or None
        self.hf = None          # the Hugging Face id given to AutoBridge.from_hf_pretrained (UNKNOWN: not a literal)

    # -- values
    def value(self, node, path: str, env: dict):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            return f"torch.{node.attr}"
        if isinstance(node, ast.Name):
            if node.id in env["values"]:
                return env["values"][node.id]
            return self.repo.const(path, node.id)
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.value(e, path, env) for e in node.elts]
            return UNKNOWN if any(i is UNKNOWN for i in items) else list(items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            v = self.value(node.operand, path, env)
            if v is UNKNOWN:
                return UNKNOWN
            return (not v) if isinstance(node.op, ast.Not) else -v
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self.value(node.left, path, env), self.value(node.comparators[0], path, env)
            if a is UNKNOWN or b is UNKNOWN:
                return UNKNOWN
            op = node.ops[0]
            table = {ast.Eq: lambda: a == b, ast.NotEq: lambda: a != b, ast.Is: lambda: a is b,
                     ast.IsNot: lambda: a is not b, ast.In: lambda: a in b, ast.NotIn: lambda: a not in b}
            try:
                return table[type(op)]() if type(op) in table else UNKNOWN
            except TypeError:
                return UNKNOWN
        if isinstance(node, ast.BoolOp):
            vals = [self.value(v, path, env) for v in node.values]
            if any(v is UNKNOWN for v in vals):
                return UNKNOWN
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return UNKNOWN

    # -- what an expression is: the container, a section, or nothing known
    def section_of(self, node, path: str, env: dict):
        if isinstance(node, ast.Name):
            return env["sections"].get(node.id)
        if isinstance(node, ast.Attribute):
            if self.section_of(node.value, path, env) == ROOT_SECTION and node.attr in SECTIONS:
                return node.attr
            return None
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            if name in CLASS_SECTION:
                return CLASS_SECTION[name]
            if name == "ConfigContainer":
                return ROOT_SECTION
            if name in MIXED_PRECISION_PRESETS:
                return "mixed_precision"
            if name and ("Provider" in name or name == "to_megatron_provider"):
                return _provider_section(name)
            found = self.repo.resolve(path, name) if isinstance(node.func, ast.Name) else None
            if found:
                return _annotation_section(found[1].returns) or self.returned.get((found[0], found[1].name))
        return None

    def record(self, section: str, field: str, value) -> None:
        if section and section != ROOT_SECTION:
            self.settings[(section, field)] = value

    # -- statements
    def run(self, path: str, func, args: dict, depth: int = 0, stack=()):
        """Walk ``func`` with its arguments ``{name: (section, value)}``; returns the section it returns, if any."""
        env = {"sections": {}, "values": {}, "return": None}
        params = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
        defaults = dict(zip([p.arg for p in (func.args.posonlyargs + func.args.args)][::-1],
                            func.args.defaults[::-1]))
        defaults.update({p.arg: d for p, d in zip(func.args.kwonlyargs, func.args.kw_defaults) if d is not None})
        for p in params:
            sec, val = args.get(p.arg, (None, None))
            if sec is None:
                sec = _annotation_section(p.annotation)
            if sec:
                env["sections"][p.arg] = sec
            if p.arg in args:
                env["values"][p.arg] = val
            elif p.arg in defaults:
                env["values"][p.arg] = self.value(defaults[p.arg], path, env)
            else:
                env["values"][p.arg] = UNKNOWN
        self.block(func.body, path, env, depth, (*stack, (path, func.name)))
        return env["return"]

    def block(self, stmts, path, env, depth, stack) -> bool:
        """Walk statements; True when a ``return`` or ``raise`` ends the block for certain."""
        for st in stmts:
            if isinstance(st, ast.If):
                cond = self.value(st.test, path, env)
                if cond is UNKNOWN:
                    self.calls(st.test, path, env, depth, stack)
                    a = self.block(st.body, path, env, depth, stack)
                    b = self.block(st.orelse, path, env, depth, stack)
                    if a and b:
                        return True
                elif self.block(st.body if cond else st.orelse, path, env, depth, stack):
                    return True
            elif isinstance(st, (ast.For, ast.While, ast.With, ast.AsyncWith, ast.AsyncFor)):
                self.block(st.body, path, env, depth, stack)
                self.block(getattr(st, "orelse", []), path, env, depth, stack)
            elif isinstance(st, ast.Try):
                self.block(st.body, path, env, depth, stack)
                for h in st.handlers:
                    self.block(h.body, path, env, depth, stack)
                self.block(st.orelse + st.finalbody, path, env, depth, stack)
            elif isinstance(st, (ast.Assign, ast.AnnAssign)):
                value = st.value
                if value is None:
                    continue
                self.calls(value, path, env, depth, stack)
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                for t in targets:
                    self.assign(t, value, path, env)
            elif isinstance(st, ast.AugAssign):
                if isinstance(st.target, ast.Attribute):
                    self.record(self.section_of(st.target.value, path, env), st.target.attr, UNKNOWN)
            elif isinstance(st, (ast.Expr, ast.Return)):
                if st.value is not None:
                    self.calls(st.value, path, env, depth, stack)
                if isinstance(st, ast.Return):
                    if st.value is not None and env["return"] is None:
                        env["return"] = self.section_of(st.value, path, env)
                    return True
            elif isinstance(st, ast.Raise):
                return True
        return False

    def assign(self, target, value, path, env) -> None:
        if isinstance(target, ast.Attribute):
            owner = self.section_of(target.value, path, env)
            if owner == ROOT_SECTION and target.attr in SECTIONS:
                # a whole section replaced: its constructor's keywords were recorded by calls()
                name = _call_name(value.func) if isinstance(value, ast.Call) else None
                if target.attr == "mixed_precision" and isinstance(value, ast.Constant) and \
                        value.value in MIXED_PRECISION_PRESETS:
                    for f, v in MIXED_PRECISION_PRESETS[value.value].items():
                        self.record("mixed_precision", f, v)
                elif name is None and not isinstance(value, ast.Name):
                    self.record(target.attr, "<whole section>", UNKNOWN)
            elif owner:
                self.record(owner, target.attr, self.value(value, path, env))
        elif isinstance(target, ast.Name):
            sec = self.section_of(value, path, env)
            if sec:
                env["sections"][target.id] = sec
            else:
                env["sections"].pop(target.id, None)
            env["values"][target.id] = self.value(value, path, env)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                if isinstance(e, ast.Name):
                    env["sections"].pop(e.id, None)
                    env["values"][e.id] = UNKNOWN

    def calls(self, node, path, env, depth, stack) -> None:
        """Follow every call in an expression, innermost first."""
        for sub in _calls_in(node):
            name = _call_name(sub.func)
            if name == "from_hf_pretrained" and sub.args:
                hf = self.value(sub.args[0], path, env)
                self.hf = hf if isinstance(hf, str) else UNKNOWN
                continue
            if name in CLASS_SECTION or (name and "Provider" in name and name[0].isupper()):
                sec = CLASS_SECTION.get(name) or _provider_section(name)
                if name in NOT_GPT_PROVIDERS or is_wan(name):
                    self.record("model", "_target_", name)
                for kw in sub.keywords:
                    if kw.arg:
                        self.record(sec, kw.arg, self.value(kw.value, path, env))
                continue
            if name in MIXED_PRECISION_PRESETS:
                for f, v in MIXED_PRECISION_PRESETS[name].items():
                    self.record("mixed_precision", f, v)
                continue
            if name == "setattr" and len(sub.args) == 3 and isinstance(sub.args[1], ast.Constant):
                self.record(self.section_of(sub.args[0], path, env), sub.args[1].value,
                            self.value(sub.args[2], path, env))
                continue
            if not isinstance(sub.func, ast.Name) or depth >= _MAX_DEPTH:
                continue
            found = self.repo.resolve(path, sub.func.id)
            if not found or found in [(p, None) for p, _ in stack] or (found[0], found[1].name) in stack:
                continue
            fpath, fdef = found
            names = [p.arg for p in (fdef.args.posonlyargs + fdef.args.args)]
            args = {}
            for i, a in enumerate(sub.args):
                if i < len(names) and not isinstance(a, ast.Starred):
                    args[names[i]] = (self.section_of(a, path, env), self.value(a, path, env))
            for kw in sub.keywords:
                if kw.arg:
                    args[kw.arg] = (self.section_of(kw.value, path, env), self.value(kw.value, path, env))
            self.returned[(fpath, fdef.name)] = self.run(fpath, fdef, args, depth + 1, stack)


def _calls_in(node):
    """The calls of an expression, arguments before the call that takes them (source order otherwise)."""
    out = []

    def visit(n):
        if isinstance(n, ast.Lambda):
            return
        for child in ast.iter_child_nodes(n):
            visit(child)
        if isinstance(n, ast.Call):
            out.append(n)
    visit(node)
    return out


def _provider_section(name: str) -> str:
    """The section a ``...Provider`` class fills: a dataset provider (``Step37Flickr8kSFTDataProvider``,
    ``DatasetProvider`` subclasses) the dataset, any other the model."""
    return "dataset" if "DataProvider" in name or "DatasetProvider" in name else "model"


def _call_name(func) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _annotation_section(ann):
    if ann is None:
        return None
    text = ast.unparse(ann)
    if "ConfigContainer" in text:
        return ROOT_SECTION
    for cls, sec in CLASS_SECTION.items():
        if text.split(".")[-1].strip("'\"") == cls:
            return sec
    if "Provider" in text:
        return "model"
    return None


def recipes(repo: Repo) -> list[tuple[str, str]]:
    """(module path, function name) of every recipe function, sorted."""
    out = []
    for path in sorted(repo.paths):
        if not path.startswith(RECIPE_DIRS):
            continue
        for name in repo.module(path)["funcs"]:
            if not name.startswith("_") and any(k in name for k in KINDS):
                out.append((path, name))
    return out


def judge(section: str, field: str, value, tower: bool = False, graph_impl="none") -> tuple[str, str] | None:
    """("refused" | "outside", reason) for a setting the importer would not estimate; None when it would.
    ``tower``: the recipe's Hugging Face model holds a vision tower the estimator models (``multimodal.hf_tower``);
    ``graph_impl``: the recipe's ``model.vision_cuda_graph_impl`` (its companions are read only with it on)."""
    if section in NO_EFFECT_SECTIONS:
        return None
    if field == "<whole section>":
        return None
    if (section, field) == ("model", "_target_"):
        return ("refused", NOT_GPT_PROVIDERS[value]) if value in NOT_GPT_PROVIDERS else None
    if section == "model" and field in PROVIDER_FIELDS and field not in SECTIONS["model"]:
        kind, why = judge_provider_field(field, {"use_dist_train": True} if value is UNKNOWN else value)
        return ("refused", why) if kind == "refused" else None
    if section == "model" and field in MULTIMODAL and field not in SECTIONS["model"]:
        if field == "vision_cuda_graph_impl" and value is not UNKNOWN and value not in (*GRAPH_IMPLS, None):
            return "refused", judge_multimodal(field, value, value)[1]
        if field in TRAINING_FIELD:         # needs the tower: a recipe's comes from its Hugging Face model
            if tower or (value is not UNKNOWN and is_off(field, value)):
                return None
            if field.startswith("freeze_"):
                return "refused", ("a multimodal provider's freeze field needs the vision tower, which the recipe's "
                                   "Hugging Face model does not give (not in the offline catalog, or its family's "
                                   "tower not modelled)")
            return "refused", (f"a multimodal provider's {field} (training.{TRAINING_FIELD[field]}) needs the vision "
                               "tower, which the recipe's Hugging Face model does not give (not in the offline "
                               "catalog, or its family's tower not modelled)")
        kind, why = judge_multimodal(field, value, graph_impl)     # a value not known is not the default
        return ("refused", why) if kind == "refused" else None
    if section == "model" and field in DEV_MODEL_FIELDS and field not in SECTIONS["model"]:
        kind, why = DEV_MODEL_FIELDS[field][:2]       # DeepSeek-V4's Megatron-Core dev-branch fields
        return ("refused", why) if kind == "refused" and value not in (None, False) else None
    if field not in SECTIONS.get(section, {}) and (section, field) not in ATTRIBUTES:
        return "outside", "not a field of the catalogued section (a model provider's own field)"
    kind, why = classify(section, field) or ("refused", "unclassified")
    if kind == "refused":
        if value is not UNKNOWN and _is_off(section, field, value):
            return None
        return "refused", why
    dest = _RENAMED.get(field, field)
    if dest in REFUSED_VALUES and value is not UNKNOWN and value not in (None, "") and \
            str(value) not in REFUSED_VALUES[dest][0]:
        return "refused", f"{field} = {value!r}: {REFUSED_VALUES[dest][1]}"
    return None


def count(git_dir: str, rev: str = REVISION) -> dict:
    """Read every recipe; returns {"recipes": {name: [(section.field, reason)]}, "outside": {name: [...]}}."""
    repo = Repo(git_dir, rev)
    refused, outside = {}, {}
    for path, name in recipes(repo):
        reader = Reader(repo)
        reader.run(path, repo.module(path)["funcs"][name], {})
        r, o = [], []
        provider = reader.settings.get(("model", "_target_"))
        kind = _tower_kind(reader.hf)
        tower = kind is not None
        graph_impl = reader.settings.get(("model", "vision_cuda_graph_impl"), "none")
        if graph_impl is UNKNOWN:
            graph_impl = "transformer_engine"        # not known: its companions count as read
        # --bridge-recipe takes the tower from the recipe's Hugging Face model whether or not a freeze field is on,
        # so the tower-plus-feature combinations are checked whenever the recipe has a tower.
        for (section, field), value in sorted(reader.settings.items()):
            if provider in NOT_GPT_PROVIDERS and (section, field) != ("model", "_target_"):
                continue        # the importer refuses the provider first, by name, and reads none of its fields
            if is_wan(provider) and ((section == "model" and field in WAN_MODEL_FIELDS)
                                     or (section == "dataset" and field in WAN_DATASET_FIELDS)):
                continue        # Wan's own fields: estimator/formats/bridge/wan.py reads them (model_kind wan)
            verdict = judge(section, field, value, tower, graph_impl)
            if verdict and verdict[0] == "refused":
                r.append((f"{section}.{field}", verdict[1]))
            elif verdict:
                o.append(f"{section}.{field}")
            elif tower and field in TOWER_EXCLUDES and value != TOWER_EXCLUDES[field] and value is not None:
                if field in TOWER_OWN:
                    r.append((f"{section}.{field}", TOWER_OWN[field]))
                elif not (field in TOWER_LANGUAGE_ONLY and TOWER_LANGUAGE_ONLY[field](kind, value)):
                    r.append((f"{section}.{field}", TOWER_WITH + f"{field}: the tower is modelled with "
                              "Megatron-Core's plain distributed optimizer only (not with a recipe feature that "
                              "re-plans the model states or activations)"))
        if name in refused:
            name = f"{name} ({path[len(PACKAGE):]})"
        refused[name], outside[name] = r, o
    return {"recipes": refused, "outside": outside}


_TOWERS: dict = {}


def _tower_kind(hf) -> str | None:
    """The kind (``model.vision_model_type``) of the vision tower the offline catalog's import of Hugging Face model
    ``hf`` (a recipe's ``from_hf_pretrained`` id) holds, where the estimator models it; None otherwise."""
    if not isinstance(hf, str):
        return None
    if hf not in _TOWERS:
        tower = hf_tower(hf)
        _TOWERS[hf] = None if tower is None else tower.get("vision_model_type", "qwen3_vl")
    return _TOWERS[hf]


def _feature(where: str) -> str:
    return WITH.get(where, where)


def table(result: dict) -> str:
    """The generated Markdown: the short answer and the table of refused fields with recipe counts."""
    recs = result["recipes"]
    clean = [n for n, r in recs.items() if not r]
    per, why = Counter(), {}
    for r in recs.values():
        for feature in sorted({_feature(w) for w, _ in r}):
            per[feature] += 1
        for w, reason in r:
            why.setdefault(_feature(w), reason)
    only = Counter()
    for r in recs.values():
        feats = {_feature(w) for w, _ in r}
        if len(feats) == 1:
            only[next(iter(feats))] += 1
    names = {n.split(" (")[0] for n in recs}
    odd = [n for n in clean if result["outside"][n]]
    lines = [f"**{len(clean)} of the {len(recs)} recipe functions** read set nothing the estimator refuses; "
             f"{len(recs) - len(clean)} set at least one refused field or value ({len(names)} names: "
             f"{len(recs) - len(names)} library and performance recipes share a name, and both are read). "
             + (f"{len(odd)} of the {len(clean)} also set a field that neither a catalogued section declares nor "
                "the table of recipe attributes classifies (a model provider's own field): a `config.yaml` "
                "that holds one stops the importer as an unknown field, and one that is not a dataclass field is not "
                "written to `config.yaml` at all. " if odd else
                f"None of the {len(clean)} sets a field that neither a catalogued section declares nor the table of "
                "recipe attributes or multimodal provider fields classifies. ")
             + "FLUX's provider (`model._target_`) is refused by name, whatever its fields; Wan's is read as "
             "`model_kind: wan`.", "",
             "| Refused field | Recipes setting it | Of which it is the only refusal | Why refused |",
             "| --- | ---: | ---: | --- |"]
    for feature, n in sorted(per.items(), key=lambda kv: (-kv[1], kv[0])):
        reason = _short(why[feature]).replace("|", "\\|")
        also = "".join(f" (with `{k}`)" for k, v in WITH.items() if v == feature)
        lines.append(f"| `{feature}`{also} | {n} | {only[feature]} | {reason} |")
    return "\n".join(lines)


def _short(reason: str, width: int = 140) -> str:
    """The catalogue's reason, without the flag-class preamble, cut at its first clause or near ``width``."""
    reason = reason.removeprefix("as the Megatron-LM argument of the same name: ").split("; ")[0]
    if len(reason) > width:
        reason = reason[:reason.rfind(" ", 0, width)].rstrip(",:(") + " ..."
    return reason


def replace(text: str, block: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + block + "\n" + text[end:]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("bridge", help="a Megatron-Bridge checkout or bare clone (git directory)")
    ap.add_argument("--rev", default=REVISION)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the generated block of docs/bridge.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/bridge.md's block is stale")
    ap.add_argument("--recipes", action="store_true", help="list every recipe's refused settings")
    a = ap.parse_args(argv)
    result = count(a.bridge, a.rev)
    block = table(result)
    if a.write or a.check:
        text = DOC.read_text(encoding="utf-8")
        new = replace(text, block)
        if a.check:
            if new != text:
                print("docs/bridge.md's refused-recipes block is stale: run python scripts/bridge_refusals.py "
                      "BRIDGE --write", file=sys.stderr)
                return 1
            return 0
        DOC.write_text(new, encoding="utf-8")
        print(f"wrote {DOC}", file=sys.stderr)
        return 0
    print(f"Megatron-Bridge @ {a.rev[:8]}: {len(result['recipes'])} recipes read")
    print(block)
    outside = Counter(f for fs in result["outside"].values() for f in set(fs))
    if outside:
        print(f"\nFields outside the catalogued sections ({sum(1 for v in result['outside'].values() if v)} "
              "recipes; the importer stops on them as unknown fields):")
        for f, n in outside.most_common():
            print(f"  {f}: {n}")
    if a.recipes:
        for name, r in sorted(result["recipes"].items()):
            if r:
                print(f"{name}: " + ", ".join(w for w, _ in r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
