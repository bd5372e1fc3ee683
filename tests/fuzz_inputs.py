"""Hostile inputs for the three ways in: the command line, the Python API and the calculator's ``web.handle``.

Each case is generated from ``(surface, seed, index)`` alone, so a failure is reproduced by its id. Cases run
in a worker process under a CPU limit per case (:data:`CPU_SECONDS`) and a memory limit
(:data:`MEMORY_BYTES`); the parent restarts the worker after a crash and reports a case that outlives
:data:`WALL_SECONDS` as a hang. Every case ends in one of:

- ``ok``: a result (an estimate passes its basic checks: non-negative integer bytes, allocated <= reserved <=
  device, strict-JSON ``to_dict()``);
- ``clear``: the error we promise: an :class:`~estimator.config.errors.EstimatorError` whose problems name a field
  and say what is wrong; on the command line exit code 2 and an ``error:`` line; from ``web.handle`` strict
  JSON whose errors name a field other than ``internal``;
- anything else (``traceback``, ``internal``, ``hang``, ``crash``, ``bad-json``, ``invariant``) is a bug.

``python tests/fuzz_inputs.py --cases 8000`` runs many more and prints the counts per surface.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The ways in: the command line, the public Python API, the calculator's ``web.handle``, the configuration loader
#: (files and text: YAML, JSON, encodings, duplicates, sizes), the Hugging Face importer (every key of every
#: catalogued family's config perturbed), the Megatron-LM argument importer (patterns, huge and tiny numbers), and
#: ``agree``: one configuration through the CLI, the API and ``web.handle``, which must give the same answer.
SURFACES = ("cli", "api", "web", "loader", "hf", "megatron", "agree")
CPU_SECONDS = 5            # per case, in the worker (ITIMER_PROF): more is a hang
WALL_SECONDS = 60          # per case, seen from the parent (a stuck C call ignores the CPU timer)
RSS_BYTES = 2 ** 29        # the worker's peak resident memory after a case: more is a failure (512 MiB)
MEMORY_BYTES = 3 * 2 ** 29  # 1.5 GiB address space for the worker (a runaway allocation fails fast)
BAD_OUTCOMES = ("traceback", "internal", "hang", "crash", "bad-json", "invariant", "memory", "disagree",
                "fuzzer-bug")

# ------------------------------------------------------------------------------------------------ values


def _deep(depth: int, kind: str):
    out = leaf = [] if kind == "list" else {}
    for _ in range(depth):
        nxt = [] if kind == "list" else {}
        if kind == "list":
            leaf.append(nxt)
        else:
            leaf["a"] = nxt
        leaf = nxt
    return out


HOSTILE = [
    lambda r: 0, lambda r: -1, lambda r: 1, lambda r: 2, lambda r: 3, lambda r: 7, lambda r: 64,
    lambda r: 10 ** r.choice([3, 6, 7, 8, 9, 12, 18, 30, 80, 400]), lambda r: -(10 ** 30), lambda r: 2 ** 63,
    lambda r: int("9" * 4300) if r.random() < 0.5 else 10 ** r.choice([4400, 5000]) + 7,
    lambda r: float("nan"), lambda r: float("inf"), lambda r: -float("inf"), lambda r: 1e308, lambda r: -0.0,
    lambda r: 0.5, lambda r: 1.5, lambda r: 1e-300, lambda r: 4096.0, lambda r: True, lambda r: False,
    lambda r: None, lambda r: "", lambda r: "four", lambda r: "abc", lambda r: "a\0b", lambda r: "x" * 100_000,
    lambda r: "1e3", lambda r: "NaN", lambda r: "true", lambda r: "null", lambda r: "\ufeff8", lambda r: "8 ",
    lambda r: "🙂", lambda r: [], lambda r: [1], lambda r: [0, 1], lambda r: [[1]], lambda r: [None],
    lambda r: ["core_attn", 5], lambda r: [1] * 20_000, lambda r: {}, lambda r: {"a": 1},
    lambda r: _deep(r.choice([40, 2000, 50_000]), r.choice(["list", "dict"])),
]
TEXT = ["inf", "-inf", "nan", "NaN", "-1", "0", "1", "2", "8", "1e400", "1e-400", "1.5", "abc", "", " ", "none",
        "null", "true", "false", "4k", "0x10", "1_000", "٣", "1" * 5000, "9" * 4300, "10" * 30, "[0, 1]", "[[[1]]]",
        "core_attn,mlp", "a\0b", "\ufeff1", "-0", "+8", "1e9", "99999999999999999999"]


def hostile(r: random.Random):
    return r.choice(HOSTILE)(r)


def _specs():
    from estimator.config.schema import field_specs
    return field_specs()


def _base(r: random.Random) -> dict:
    from estimator.formats.presets import load_preset
    return copy.deepcopy(load_preset(r.choice(["tiny", "tiny", "tiny", "llama-3-8b", "mixtral-8x7b",
                                               "deepseek-v2-lite", "qwen3-30b-a3b"])).to_dict())


def _layout(r: random.Random, cfg: dict) -> None:
    """Plausible but random parallel sizes: the validation rules (VPP micro-batches included) are exercised."""
    par, tr = cfg.setdefault("parallelism", {}), cfg.setdefault("training", {})
    if not isinstance(par, dict) or not isinstance(tr, dict):
        return
    for key, choices in (("tensor_model_parallel_size", [1, 2, 4, 8, 3]), ("pipeline_model_parallel_size",
                         [1, 2, 4, 3, 8, 16]), ("context_parallel_size", [1, 2, 4]),
                         ("virtual_pipeline_model_parallel_size", [None, 2, 3, 4])):
        if r.random() < 0.5:
            par[key] = r.choice(choices)
    if r.random() < 0.6:
        tr["world_size"] = r.choice([1, 2, 4, 8, 16, 32, 64, 48, 1024])
    if r.random() < 0.5:
        tr["global_batch_size"] = r.choice([None, 1, 2, 8, 16, 36, 64, 512, 1000])
    if r.random() < 0.5:
        tr["micro_batch_size"] = r.choice([1, 2, 4, 3])


def mutate(r: random.Random, cfg: dict) -> object:
    """One to three hostile edits of a configuration dict (or a replacement of the whole thing)."""
    if r.random() < 0.05:
        return hostile(r)
    for _ in range(r.randint(1, 3)):
        k = r.random()
        if k < 0.45:
            spec = r.choice(_specs())
            cfg.setdefault(spec.section, {})
            if isinstance(cfg[spec.section], dict):
                cfg[spec.section][spec.name] = hostile(r)
        elif k < 0.6:
            _layout(r, cfg)
        elif k < 0.7:
            sec = r.choice(["model", "parallelism", "training", "precision", "modle", "extra"])
            cfg[sec] = hostile(r)
        elif k < 0.8:
            sec = r.choice(["model", "training", None])
            n = r.choice([1, 3, 50, 50_000])
            keys = {f"k{i}" if r.random() < 0.9 else r.choice(["hidden-size", "tp", "num_gpus", "seq_length"]): 1
                    for i in range(n)}
            if sec is None:
                cfg.update(keys)
            elif isinstance(cfg.get(sec), dict):
                cfg[sec].update(keys)
        else:
            spec = r.choice(_specs())
            if isinstance(cfg.get(spec.section), dict):
                cfg[spec.section].pop(spec.name, None)
    return cfg


def _dumps(data) -> str:
    """JSON text of hostile data (NaN written as NaN); what JSON cannot hold (a 5,000-digit integer, 50,000
    levels) becomes a short stand-in, since the point is to send it, not to test json.dumps."""
    try:
        return json.dumps(data, default=str)
    except (ValueError, RecursionError):
        return '{"model": {"num_layers": ' + "9" * 4300 + "}}"


def as_text(r: random.Random, cfg) -> str:
    """A configuration written as YAML or JSON, sometimes damaged."""
    from estimator.config import yamlio
    try:
        text = yamlio.dump(cfg) if r.random() < 0.5 else _dumps(cfg)
    except (ValueError, TypeError, RecursionError):
        text = "model: {num_layers: [1, [2]]}\n"
    k = r.random()
    if k < 0.1:
        text = "\ufeff" + text
    elif k < 0.15:
        text = "model: " + "[" * 100_000 + "]" * 100_000 + "\n"
    elif k < 0.2:
        text = '{"model": ' + "[" * 100_000 + "]" * 100_000 + "}"
    elif k < 0.25:
        text = "model:\n  num_layers: " + "1" * 5000 + "\n"
    elif k < 0.3:
        text = "".join(" " * i + f"k{i}:\n" for i in range(0, 400, 2))
    elif k < 0.35:
        text = text.replace("  ", "\t", 1)
    elif k < 0.4:
        text = text[: r.randrange(len(text) + 1)]
    elif k < 0.45:
        text = r.choice(["", "5", "[1, 2]", "null", "- a\n- b\n", "&a x", "---\na: 1\n---\nb: 2", "{", "a: b: c",
                         '{"model": NaN}', '{"model": {"num_layers": 1e999}}'])
    return text


def hf_config(r: random.Random) -> dict:
    refs = sorted((ROOT.parent / "shared" / "reference" / "hf-configs").glob("*.json"))
    if refs:
        data = json.loads(r.choice(refs).read_text(encoding="utf-8"))
    else:
        data = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "hidden_act": "silu"}
    for _ in range(r.randint(0, 3)):
        key = r.choice(sorted(data) + ["model_type", "architectures", "rms_norm_eps", "hidden_act", "mlp_only_layers",
                                       "num_hidden_layers", "topk_method", "attention_dropout", "head_dim", "zzz"])
        data[key] = hostile(r)
    if r.random() < 0.05:
        data.update({f"unknown_{i}": i for i in range(50_000)})
    return data


MEGATRON_FLAGS = ["--num-layers", "--hidden-size", "--tensor-model-parallel-size", "--seq-length",
                  "--num-attention-heads", "--pipeline-model-parallel-size", "--num-query-groups",
                  "--num-layers-per-virtual-pipeline-stage", "--ffn-hidden-size", "--micro-batch-size",
                  "--global-batch-size", "--num-experts", "--moe-layer-freq", "--vocab-size"]


def megatron_text(r: random.Random) -> str:
    """Launch arguments of pretrain_gpt.py: a preset's, with some flags given hostile values."""
    from estimator import to_megatron_args
    args = to_megatron_args(_base(r)) if r.random() < 0.7 else []
    for _ in range(r.randint(1, 4)):
        args += [r.choice(MEGATRON_FLAGS), r.choice(TEXT)]
    return " ".join(a if a and " " not in a else repr(a) for a in args)


# ------------------------------------------------------------------------------------------------ cases


def cli_case(r: random.Random, tmp: Path) -> list[str]:
    """An argument list for ``estimator.cli.main`` (configuration files are written under ``tmp``)."""
    from estimator.cli.commands import build_parser
    from estimator.formats.presets import list_presets
    command = r.choice(["estimate", "estimate", "estimate", "from-hf", "search", "search", "megatron-args",
                        "presets", "gpus", "catalog"])
    argv = [command]
    path = tmp / f"c{r.randrange(10 ** 9)}{r.choice(['.yaml', '.json', '.yml', ''])}"
    if command == "from-hf":
        path.write_text(_dumps(hf_config(r)) if r.random() < 0.9 else as_text(r, {}), encoding="utf-8")
        argv.append(str(path) if r.random() < 0.9 else r.choice(["missing.json", "org/model", "a\0b", "x" * 5000]))
        argv += ["--num-gpus", r.choice(["8", "64", "1"] + TEXT)]
    elif command in ("estimate", "search", "megatron-args"):
        k = r.random()
        if k < 0.35:
            argv.append(r.choice(list_presets()))
        elif k < 0.85:
            path.write_text(as_text(r, mutate(r, _base(r))), encoding="utf-8")
            argv.append(str(path))
        elif k < 0.9 and command == "estimate":
            argv += ["--megatron-args", megatron_text(r)]
        else:
            argv.append(r.choice(["no-such-preset", "missing.yaml", "a\0b", "x" * 5000, "dir/", ""]))
    if command == "search":
        argv += ["--num-gpus", r.choice(["8", "16", "8,16", "64"] + TEXT)]
        argv += r.choice([["--gpu", "H100-80GB"], ["--gpu", r.choice(TEXT)], ["--gpu-memory", r.choice(TEXT)], []])
        for flag in ("--max-tp", "--mbs", "--top", "--headroom", "--seq-length", "--gbs", "--gpus-per-node"):
            if r.random() < 0.15:
                argv += [flag, r.choice(TEXT)]
        if r.random() < 0.2:
            argv += ["--fix", r.choice(["tp", "pp", "vpp", "cp", "sequence_parallel", "fp8", "mbs", "first_stage_layers",
                                        "zzz", "hidden_size"]) + "=" + r.choice(TEXT + ["four", "1,2", "true"])]
        if r.random() < 0.1:
            argv.append(r.choice(["--all", "--min-gpus", "--max-mbs", "--max-seq-length", "--json", "--variants"]))
    if command == "estimate" and r.random() < 0.3:          # the output modes, each a flag family of its own
        argv += r.choice([["--json"], ["--breakdown"], ["--breakdown", r.choice(["peak", "all", "0", "-1", "x"])],
                          ["--formula", r.choice(["megatron-lm", "megatron-bridge", "estimator", "x"])],
                          ["--suggest", "--gpu", "H100-80GB"], ["--format", r.choice(["yaml", "json", "x"])],
                          ["--gpu", r.choice(["H100-80GB", "A100-40GB"] + TEXT)], ["--fail-if-oom", "--gpu", "H100-80GB"],
                          ["--gpu-memory", r.choice(TEXT)]])
    if command == "catalog" and r.random() < 0.5:
        argv += r.choice([["--json"], ["--family", r.choice(TEXT + ["Llama", "Qwen3"])], ["--all"]])
    if command in ("estimate", "from-hf", "megatron-args"):
        actions = [a for a in build_parser()._subparsers._group_actions[0].choices[command]._actions
                   if a.option_strings and a.dest != "help"]
        for _ in range(r.randint(0, 4)):
            a = r.choice(actions)
            flag = r.choice(a.option_strings)
            if a.nargs == 0:
                argv.append(flag)
            else:
                argv += [flag, r.choice(TEXT)]
    return argv


def api_call(r: random.Random):
    """(name, thunk) of one call of the public Python API with hostile arguments."""
    import estimator
    import importlib
    S = importlib.import_module("estimator.plan.search")
    k = r.random()
    if k < 0.35:
        cfg = mutate(r, _base(r))
        return "estimate", lambda: estimator.estimate(cfg)
    if k < 0.45:
        text = as_text(r, mutate(r, _base(r)))
        return "estimate(text)", lambda: estimator.estimate(text)
    if k < 0.55:
        hf = hf_config(r)
        return "from_hf_config", lambda: estimator.from_hf_config(hf)
    if k < 0.62:
        cfg = mutate(r, _base(r)) if r.random() < 0.7 else "tiny"
        kw = {"formula": r.choice(["estimator", "megatron-lm", "megatron-bridge"]) if r.random() < 0.7 else hostile(r)}
        if r.random() < 0.4:
            kw["num_microbatches"] = hostile(r)
        return "estimate_training_memory", lambda: estimator.estimate_training_memory(cfg, **kw)
    if k < 0.8:
        kw = {"num_gpus": r.choice([8, 16, [8, 16], 64]), "gpu": r.choice(["H100-80GB", 80 * 2 ** 30])}
        for name in ("num_gpus", "gpu", "max_tp", "headroom", "seq_length", "global_batch_size", "micro_batch_sizes",
                     "top", "recompute", "gpus_per_node", "distributed_optimizer", "tp", "pp", "vpp", "cp",
                     "sequence_parallel", "fp8", "first_stage_layers", "mbs", "distinct"):
            if r.random() < 0.08:
                kw[name] = hostile(r)
        model = r.choice(["tiny", "tiny", "llama-3-8b", "mixtral-8x7b"]) if r.random() < 0.8 else mutate(r, _base(r))
        return "search", lambda: S.search(model, **kw)
    if k < 0.85:
        name = r.choice(["min_gpus", "max_micro_batch", "max_seq_length"])
        kw = {"gpu": r.choice(["H100-80GB", hostile(r)])}
        if r.random() < 0.5:
            kw[{"min_gpus": "candidates", "max_micro_batch": "limit", "max_seq_length": "limit"}[name]] = hostile(r)
        cfg = "tiny" if r.random() < 0.7 else mutate(r, _base(r))
        return name, lambda: getattr(S, name)(cfg, **kw)
    if k < 0.9:
        est = estimator.estimate("presets/tiny.yaml") if r.random() < 0.5 else None
        cap, head = hostile(r), (hostile(r) if r.random() < 0.5 else 0.0)
        return "fit", lambda: estimator.fit(est or estimator.estimate(_base(r)), cap, head)
    if k < 0.95:
        value = hostile(r) if r.random() < 0.7 else r.choice([mutate(r, _base(r)), as_text(r, mutate(r, _base(r)))])
        fn = r.choice([estimator.get_gpu, estimator.load_preset, estimator.load_config, estimator.count_parameters_of,
                       estimator.validate, estimator.preset_info, estimator.from_hf_config,
                       estimator.parse_megatron_args, estimator.to_megatron_args, estimator.estimate,
                       estimator.format_training_memory_estimate, estimator.estimate_training_memory])
        return fn.__name__, lambda: fn(value)
    if k < 0.97:           # the functions that take no argument or keywords only
        name = r.choice(["list_presets", "field_specs"])
        return name, lambda: getattr(estimator, name)()
    cfg = mutate(r, _base(r))
    return "to_megatron_args", lambda: estimator.to_megatron_args(cfg)


def web_request(r: random.Random) -> str:
    """A request text for ``web.handle``."""
    k = r.random()
    if k < 0.08:
        return r.choice(["null", "5", "[1]", '"compute"', "{", "", "NaN", "[" * 100_000, '{"op": "compute"' + "}" * 3,
                         '{"op": "compute", "state": {"preset": "tiny", "values": {"model.num_layers": ' + "9" * 5000
                         + "}}}"])
    op = r.choice(["compute", "compute", "compute", "import", "import", "search", "layout", "advice", "catalog",
                   "timeline", "suggest", "sweep", "compare", "fly", None, 5])
    state = {"preset": r.choice(["tiny", "tiny", "llama-3-8b", "deepseek-v2-lite", None, "no-such", 5, ["tiny"]]),
             "gpu": r.choice(["H100-80GB", None, "nope", 80, ["H100-80GB"]]), "values": {}}
    paths = [s.path for s in _specs()]
    for _ in range(r.randint(0, 4)):
        path = r.choice(paths) if r.random() < 0.9 else r.choice(["model.zzz", "nope", "", "model."])
        state["values"][path] = r.choice(TEXT) if r.random() < 0.6 else hostile(r)
    if r.random() < 0.3:
        state["values"]["training.world_size"] = r.choice(["8", "64", "1"])
    req = {"op": op, "state": state if r.random() > 0.05 else hostile(r)}
    if op == "import":
        kind = r.choice(["yaml", "hf", "megatron", "zzz", None])
        req["kind"] = kind
        if kind == "hf":
            req["text"] = _dumps(hf_config(r))
        elif kind == "megatron":
            req["text"] = megatron_text(r)
        else:
            req["text"] = as_text(r, mutate(r, _base(r)))
        if r.random() < 0.05:
            req["text"] = hostile(r)
    elif op == "search":
        req["top"] = r.choice([None, 3, 10, 0, -1, "abc", 1.5, 10 ** 9])
        if r.random() < 0.5:
            req["options"] = {k: r.choice(TEXT + [None, 8, [8, 16], hostile(r)]) for k in
                              r.sample(["num_gpus", "tp", "headroom", "ep", "zzz"], r.randint(0, 3))}
    elif op == "sweep":
        if r.random() < 0.4:
            req["min_gpus"] = r.choice([True, False, "yes", 1, None])
    elif op == "compare":
        req["pins"] = r.choice([[state], [state, state], [], None, [state] * 20, [5], hostile(r)])
    elif op == "compute" and r.random() < 0.3:
        req["changed"] = r.choice(paths + ["zzz", 5, None])
        req["exports"] = r.choice([True, False, "x"])
    elif op == "layout":
        req["config"] = mutate(r, _base(r)) if r.random() < 0.8 else hostile(r)
    return _dumps(req)


# ------------------------------------------------------------------------------------------------ loader


ENCODINGS = ("utf-8", "utf-8-sig", "utf-16", "utf-32", "latin-1", "cp1252")
SIZES = (2 ** 20 + 1, 5 * 2 ** 20, 48 * 10 ** 6)


def _duplicated(r: random.Random, cfg) -> tuple[str, bool]:
    """Configuration text with a section or a field written twice (JSON or YAML); (text, duplicated)."""
    from estimator.config import yamlio
    if not isinstance(cfg, dict) or not cfg:
        return as_text(r, cfg), False
    sec = r.choice(sorted(cfg))
    if r.random() < 0.5:                                           # JSON
        body = _dumps(cfg)[:-1]
        if isinstance(cfg[sec], dict) and cfg[sec] and r.random() < 0.6:
            name = r.choice(sorted(cfg[sec]))
            inner = _dumps(cfg[sec])[:-1] + f', "{name}": {_dumps(hostile(r))}}}'
            rest = {k: v for k, v in cfg.items() if k != sec}
            return _dumps(rest)[:-1] + (", " if rest else "") + f'"{sec}": {inner}}}', True
        return body + f', "{sec}": {{}}}}', True
    try:
        text = yamlio.dump(cfg)
    except (ValueError, TypeError, RecursionError):
        return as_text(r, cfg), False
    return text + f"{sec}: {{}}\n", True


def _sized(r: random.Random, cfg) -> str:
    """A configuration padded past the loader's size limit with a comment, blank lines or a long string."""
    base = as_text(r, cfg)
    n = r.choice(SIZES)
    how = r.random()
    if how < 0.4:
        return base + "\n# " + "x" * n + "\n"
    if how < 0.7:
        return base + "\n" * n
    return '{"model": {"num_layers": 2, "zzz": "' + "y" * n + '"}}'


def loader_case(r: random.Random, tmp: Path) -> tuple[str, object, bool]:
    """(how, argument of load_config, whether the text holds a duplicate key)."""
    cfg = mutate(r, _base(r)) if r.random() < 0.6 else _base(r)
    dup = False
    k = r.random()
    if k < 0.3:
        text, dup = _duplicated(r, cfg)
    elif k < 0.38:
        text = _sized(r, cfg)
    else:
        text = as_text(r, cfg)
    how = r.choice(["path", "path", "text", "dict"])
    if how == "dict":
        return how, cfg, False
    if how == "text":
        return how, text, dup
    enc = r.choice(ENCODINGS) if r.random() < 0.4 else "utf-8"
    data = text.encode(enc, errors="replace")
    path = tmp / f"l{r.randrange(10 ** 9)}{r.choice(['.yaml', '.yml', '.json', '', '.txt'])}"
    path.write_bytes(data)
    return how, str(path), dup


# ------------------------------------------------------------------------------------------------ Hugging Face


def hf_configs() -> list[tuple[str, dict]]:
    """Every ``config.json`` the project knows: the model catalog's and the reference copies beside the checkout."""
    out = []
    for path in sorted((ROOT / "estimator" / "formats" / "hf_catalog").glob("*.json")):
        out.append((path.stem, json.loads(path.read_text(encoding="utf-8"))["config"]))
    for path in sorted((ROOT.parent / "shared" / "reference" / "hf-configs").glob("*.json")):
        out.append((f"reference/{path.stem}", json.loads(path.read_text(encoding="utf-8"))))
    return out


def _paths(data: dict, prefix: tuple = ()) -> list[tuple]:
    """Key paths of a config: top-level keys and one level into nested objects (rope_scaling, text_config, ...)."""
    out = []
    for k, v in data.items():
        out.append(prefix + (k,))
        if isinstance(v, dict) and len(prefix) < 2:
            out += _paths(v, prefix + (k,))
    return out


def hf_case(r: random.Random, index: int):
    """(name, [(key path, config)]): one catalogued config with each of its keys, in turn, given a hostile value or
    removed, so that a run over as many cases as there are configs perturbs every key of every family."""
    configs = hf_configs()
    name, base = configs[index % len(configs)]
    variants = []
    for path in _paths(base):
        data = copy.deepcopy(base)
        node = data
        for k in path[:-1]:
            node = node[k]
        if r.random() < 0.15:
            del node[path[-1]]
        else:
            node[path[-1]] = hostile(r)
        variants.append(("/".join(map(str, path)), data))
    return name, variants


# ------------------------------------------------------------------------------------------------ Megatron-LM


PATTERN_FLAGS = ("--moe-layer-freq", "--linear-attention-freq", "--hybrid-override-pattern")
PATTERNS = ["[1]*27", "([0]*1+[1]*26)", "([0]*3+[1]*29)", "[0,1]*16", "2", "0", "[1]*(2**62)", "[1]*10**9",
            "(" * 5000 + "[1]" + ")" * 5000, "+".join(["[0]"] * 3000), "[" * 3000 + "]" * 3000, "[1]*-1",
            "__import__('os').getcwd()", "[0]*1e3", "1" * 5000, "M-M-M*-" * 4, "M" * 100_000, "[1.5]*4", "[]", ""]


def megatron_case(r: random.Random):
    """(argument text or tokens, world size): a preset's launch arguments with patterns, huge and tiny numbers."""
    from estimator import to_megatron_args
    args = list(to_megatron_args(_base(r))) if r.random() < 0.8 else []
    numeric = [s.flag for s in _specs() if s.flag and s.type in ("int", "float")]
    for _ in range(r.randint(1, 4)):
        k = r.random()
        if k < 0.35:
            args += [r.choice(PATTERN_FLAGS), r.choice(PATTERNS)]
        elif k < 0.8:
            args += [r.choice(numeric), r.choice(["1" + "0" * 400, "1e-400", "1e400", "-1", "0", "-0", "0.5",
                                                  "9" * 4300, "2", "3", "65536", str(2 ** 63), "nan", "inf"])]
        else:
            args += [r.choice(MEGATRON_FLAGS), r.choice(TEXT)]
    if r.random() < 0.3:
        args.append("--swiglu")
    world = r.choice([None, 1, 8, 64, 1024])
    if r.random() < 0.5:
        return args, world
    return " ".join(a if a and " " not in a else repr(a) for a in args), world


# ------------------------------------------------------------------------------------------------ agreement


def _api_answer(path: str):
    """("ok", (peak allocated, peak device)) or ("error", sorted fields) from the Python API."""
    import estimator
    from estimator.config.errors import ConfigError
    try:
        est = estimator.estimate(path)
    except ConfigError as exc:
        return "error", sorted({p.field for p in exc.problems})
    except estimator.EstimatorError:
        return "error", ["<not modelled>"]
    return "ok", (est.peak.allocated_bytes, est.peak.device_bytes)


def _cli_answer(path: str):
    from estimator.cli.commands import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["estimate", path, "--json"])
        except SystemExit as exc:
            code = exc.code
    if code == 0:
        peak = json.loads(out.getvalue())["peak"]
        return "ok", (peak["allocated_bytes"], peak["device_bytes"])
    return ("error" if code == 2 else f"exit {code}"), err.getvalue()[-300:]


def _web_answer(text: str):
    from estimator import web
    imp = json.loads(web.handle(json.dumps({"op": "import", "kind": "yaml", "text": text,
                                            "state": {"preset": None, "values": {}, "gpu": None}})))
    if "errors" in imp:
        return "error", ["<import>"]
    res = json.loads(web.handle(json.dumps({"op": "compute", "state": imp["state"], "exports": False})))
    if "errors" in res:
        fields = sorted({e["field"] for e in res["errors"]})
        return "error", ["<not modelled>"] if fields == ["config"] else fields
    peak = res["estimate"]["peak"]
    return "ok", (peak["allocated_bytes"], peak["device_bytes"])


def agree_case(r: random.Random, tmp: Path) -> tuple[str, str]:
    """One configuration, valid or not, through the three surfaces: the same verdict, the same numbers."""
    from estimator.config import yamlio
    cfg = _base(r)
    k = r.random()
    if k < 0.4:
        _layout(r, cfg)
    elif k < 0.8:
        for _ in range(r.randint(1, 2)):
            spec = r.choice(_specs())
            if isinstance(cfg.get(spec.section), dict):
                cfg[spec.section][spec.name] = r.choice([spec.default, 1, 2, 8, 0, -1, True, "abc", None, 1.5,
                                                         *(spec.choices or ())])
    try:
        text = yamlio.dump(cfg)
    except (ValueError, TypeError):
        text = json.dumps(cfg, default=str)
    path = tmp / f"a{r.randrange(10 ** 9)}.yaml"
    path.write_text(text, encoding="utf-8")
    api, cli, web = _api_answer(str(path)), _cli_answer(str(path)), _web_answer(text)
    if api[0] != cli[0] or api[0] != web[0]:
        return "disagree", f"{text[:400]}\napi {api!r:.300}\ncli {cli!r:.300}\nweb {web!r:.300}"
    if api[0] == "ok" and not api[1] == cli[1] == web[1]:
        return "disagree", f"{text[:400]}\nnumbers: api {api[1]}, cli {cli[1]}, web {web[1]}"
    if api[0] == "error" and "<import>" not in web[1] and api[1] != web[1]:
        return "disagree", f"{text[:400]}\nfields: api {api[1]}, web {web[1]}"
    return ("ok" if api[0] == "ok" else "clear"), ""


# ------------------------------------------------------------------------------------------------ checks


def _check_estimate(est) -> str | None:
    for s in est.stages:
        parts = (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes, s.activations_bytes, s.transient_bytes)
        if not all(isinstance(x, int) and x >= 0 for x in parts):
            return f"stage {s.stage}: a negative or non-integer byte count"
        if not s.allocated_bytes <= s.reserved_bytes <= s.device_bytes:
            return f"stage {s.stage}: allocated <= reserved <= device broken"
    json.dumps(est.to_dict(), allow_nan=False)
    return None


def _clear_error(exc) -> str | None:
    """None when ``exc`` is the clear error we promise, else why not."""
    from estimator.config.errors import ConfigError, EstimatorError
    if not isinstance(exc, EstimatorError):
        return "traceback"
    if isinstance(exc, ConfigError) and not all(p.field and p.message for p in exc.problems):
        return "a problem without field or message"
    text = str(exc)
    if not text or len(text) > 20_000:
        return f"message of {len(text)} characters"
    return None


def _strict(text: str):
    def no(x):
        raise ValueError(f"non-standard JSON constant {x}")
    return json.loads(text, parse_constant=no)


def run_case(surface: str, seed: int, index: int, tmp: Path) -> tuple[str, str]:
    """(outcome, detail) of one case, run in this process."""
    r = random.Random(f"{seed}-{surface}-{index}")
    if surface == "cli":
        from estimator.cli.commands import main
        argv = cli_case(r, tmp)
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
        except SystemExit as exc:      # argparse: --help (0) or a usage error (2)
            code = exc.code
        except Exception:
            return "traceback", f"{argv!r:.300}\n{traceback.format_exc()[-3000:]}"
        e = err.getvalue()
        where = "estimator/formats/megatron_args.py importer: " if "--megatron-args" in argv else ""
        if code == 3 or "internal error" in e:
            return "internal", f"{where}{argv!r:.300}: {e[-1500:]}"
        if code in (0, 1):
            return "ok", ""
        if code == 2 and "error:" in e and "Traceback" not in e:
            return "clear", e[-300:]
        return "traceback", f"{argv!r:.300}: exit {code}: {e[-1500:]}"
    if surface == "api":
        name, call = api_call(r)
        try:
            result = call()
        except Exception as exc:
            why = _clear_error(exc)
            if why is None:
                return "clear", str(exc)[:300]
            return "traceback", f"{name}: {why}: {traceback.format_exc()[-3000:]}"
        from estimator.memory.report import Estimate
        if isinstance(result, Estimate):
            why = _check_estimate(result)
            if why:
                return "invariant", f"{name}: {why}"
        return "ok", ""
    if surface == "loader":
        return _loader(r, tmp)
    if surface == "hf":
        return _hf(r, index)
    if surface == "megatron":
        return _megatron(r)
    if surface == "agree":
        return agree_case(r, tmp)
    from estimator import web
    request = web_request(r)
    try:
        answer = web.handle(request)
    except Exception:
        return "traceback", f"{request[:300]}\n{traceback.format_exc()[-3000:]}"
    try:
        data = _strict(answer)
    except ValueError as exc:
        return "bad-json", f"{request[:300]}: {exc}"
    if not isinstance(data, dict):
        return "bad-json", f"{request[:300]}: not an object"
    errors = data.get("errors")
    if errors is None:
        return "ok", ""
    if any(e.get("field") == "internal" or not e.get("field") or not e.get("message") for e in errors):
        where = "estimator/formats/megatron_args.py importer: " if '"kind": "megatron"' in request else ""
        return "internal", f"{where}{request[:300]}: {json.dumps(errors)[:1500]}"
    return "clear", json.dumps(errors)[:300]


def _loader(r: random.Random, tmp: Path) -> tuple[str, str]:
    import estimator
    how, arg, dup = loader_case(r, tmp)
    try:
        estimator.load_config(arg)
    except Exception as exc:
        why = _clear_error(exc)
        return ("clear", str(exc)[:300]) if why is None else ("traceback", f"load_config({how}): {why}: "
                                                                         f"{traceback.format_exc()[-3000:]}")
    if dup:
        return "invariant", f"load_config({how}) took a duplicated key: {str(arg)[:300]}"
    return "ok", ""


def _hf(r: random.Random, index: int) -> tuple[str, str]:
    """Every key of one config perturbed in turn: each import gives a model section or the clear error."""
    import estimator
    name, variants = hf_case(r, index)
    accepted = 0
    for key, data in variants:
        try:
            estimator.from_hf_config(data)
        except Exception as exc:
            why = _clear_error(exc)
            if why is not None:
                return "traceback", f"{name}: config.json:{key}: {why}: {traceback.format_exc()[-2000:]}"
        else:
            accepted += 1
    return ("ok" if accepted else "clear"), f"{name}: {len(variants)} keys perturbed, {accepted} imports accepted"


def _megatron(r: random.Random) -> tuple[str, str]:
    import estimator
    from estimator.formats.megatron_args import read_megatron_args
    args, world = megatron_case(r)
    try:
        imp = read_megatron_args(args, world_size=world)
        est = estimator.estimate(imp.config)
    except Exception as exc:
        why = _clear_error(exc)
        if why is None:
            return "clear", str(exc)[:300]
        return "traceback", f"estimator/formats/megatron_args.py: {str(args)[:300]}: {why}: {traceback.format_exc()[-2500:]}"
    why = _check_estimate(est)
    return ("invariant", f"{str(args)[:300]}: {why}") if why else ("ok", "")


# ------------------------------------------------------------------------------------------------ processes


class _Timeout(BaseException):
    """Raised by the CPU timer: a BaseException, so that no ``except Exception`` of the code under test
    swallows it."""


def _on_timer(signum, frame):
    raise _Timeout()


def worker() -> None:
    """Read "surface seed index" lines, answer one JSON line each."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    signal.signal(signal.SIGPROF, _on_timer)
    with tempfile.TemporaryDirectory(prefix="mme-fuzz-") as tmp:
        _serve(Path(tmp))


def _serve(tmp: Path) -> None:
    import resource
    real_out = sys.stdout
    for line in sys.stdin:
        surface, seed, index = line.split()
        signal.setitimer(signal.ITIMER_PROF, CPU_SECONDS)
        try:
            outcome, detail = run_case(surface, int(seed), int(index), tmp)
        except _Timeout:
            outcome, detail = "hang", f"more than {CPU_SECONDS} s of CPU"
        except MemoryError:
            outcome, detail = "crash", "MemoryError outside the code under test"
        except Exception:       # the generator itself failed
            outcome, detail = "fuzzer-bug", traceback.format_exc()[-2000:]
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024       # Linux: KiB
        if rss > RSS_BYTES and outcome not in BAD_OUTCOMES:
            outcome, detail = "memory", f"the worker's peak resident memory reached {rss / 2 ** 20:.0f} MiB"
        real_out.write(json.dumps({"outcome": outcome, "detail": detail, "rss": rss}) + "\n")
        real_out.flush()
        if rss > RSS_BYTES:
            return              # the peak stays: the next case gets a fresh worker


class Runner:
    """The parent side: one worker at a time, restarted after a crash or a hang."""

    def __init__(self):
        self.proc = None

    def _start(self):
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen([sys.executable, "-X", "utf8", __file__, "--worker"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, surface: str, seed: int, index: int) -> tuple[str, str]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(f"{surface} {seed} {index}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], WALL_SECONDS)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            hung = not ready
            self.proc.kill()
            self.close()
            return ("hang", f"no answer within {WALL_SECONDS} s") if hung else ("crash", "the worker died")
        res = json.loads(line)
        if res.get("rss", 0) > RSS_BYTES:
            self.close()                # the worker ended itself: its peak memory would mask the next cases
        return res["outcome"], res["detail"]

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()          # the worker's loop ends and it removes its directory
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
            self.proc = None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Run many fuzz cases and print the counts per surface.")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cases", type=int, default=300, help="cases per surface (default 300)")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--surface", choices=SURFACES, action="append")
    args = ap.parse_args(argv)
    if args.worker:
        worker()
        return 0
    runner = Runner()
    bad = 0
    try:
        for surface in args.surface or SURFACES:
            counts: dict[str, int] = {}
            for i in range(args.cases):
                outcome, detail = runner.run(surface, args.seed, i)
                counts[outcome] = counts.get(outcome, 0) + 1
                if outcome in BAD_OUTCOMES:
                    bad += 1
                    print(f"{surface} {args.seed} {i}: {outcome}: {detail}", file=sys.stderr)
            print(f"{surface}: {args.cases} inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    finally:
        runner.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
