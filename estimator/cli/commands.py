"""Command line: ``python -m estimator`` (console script ``megatron-memory``).

Sub-commands:

- ``estimate CONFIG|PRESET`` (or ``--hf PATH|HF_ID``, ``--megatron-args "..."``): the memory of every pipeline
  stage as a table in GiB, ``--json`` (``Estimate.to_dict()``), ``--format yaml`` (the configuration after
  the overrides) or ``--formula NAME`` (the "Theoretical memory footprints" line); ``--gpu``/``--gpu-memory``
  add a fit verdict per stage, ``--fail-if-oom`` turns a misfit into exit code 1, ``--breakdown`` adds what
  is in the peak by module (:mod:`estimator.memory.breakdown`);
- ``from-hf PATH|HF_ID``: the same for a Hugging Face ``config.json`` (the seeds' ``estimate_from_hf.py``);
  a Hub id (``meta-llama/Llama-3.1-70B``) is taken from the offline model catalog, never downloaded;
- ``presets``: the presets with their parameter counts; ``gpus``: the GPU catalog; ``catalog``: the model
  catalog's Hub ids, with exact parameter counts or the reason a model is not supported yet;
- ``megatron-args CONFIG|PRESET``: the ``pretrain_gpt.py`` flags of a configuration;
- ``search``: parallel layouts that fit (registered by :mod:`estimator.cli.search`).

The override flags (``--tp --pp --ep --etp --cp --vpp --mbs --gbs --seq-length --num-gpus --recompute
...``) are generated from :func:`estimator.config.schema.field_specs`, one per configuration field. Bad input
prints a message on stderr and exits with code 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from ..config import yamlio
from ..config.errors import ConfigError, EstimatorError, Problem, clip, n_gpus
from ..config.load import implied_changes, load_config, parse_text, path_kind, read_text_file
from ..config.schema import SECTIONS, field_specs
from ..memory.report import GIB
from ..version import __version__
from . import search as cli_search

__all__ = ["build_parser", "main"]

#: Extra spellings in Megatron's spirit for a few fields (the schema's cli_flag stays valid too).
ALIASES = {"training.recompute_granularity": ["--recompute"],
           "training.use_distributed_optimizer": ["--distributed-optimizer"]}
#: Values that mean null on the command line.
NONE = ("none", "null")
#: Largest --gpu-memory accepted, in GiB (1 PiB).
MAX_GPU_GIB = 2 ** 20


class CLIError(EstimatorError):
    """Bad command-line input that is not a configuration problem."""


# --------------------------------------------------------------------------- override flags

def _nullable(kind, what: str):
    """An argparse type for a nullable number field: 'none' or 'null' give null (the derived default)."""
    def conv(text: str):
        if text.lower() in NONE:
            return None
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} or 'none', got {text!r}") from None
    return conv


def _layer_pattern(text: str):
    """'none' or 'null' (the default), else the text as given: an int, a 0/1 list ([0,1,1] or 0,1,1) or Megatron's
    expression (([0]*3+[1]*58)), which the loader reads (estimator.config.fields.parse_layer_pattern), naming the
    field and the limits as every other surface does."""
    return None if text.strip().lower() in NONE else text


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _percent(text: str) -> float:
    """--keep-free PCT: a percent of the GPU memory in [0, 100)."""
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v < 100.0:
        raise argparse.ArgumentTypeError(f"keep_free is a percent of the GPU memory in [0, 100), got {text!r}")
    return v


def _names(text: str):
    return None if text.lower() in NONE else [v for v in text.replace(",", " ").split() if v]


def _ints(text: str):
    if text.lower() in NONE:
        return None
    try:
        return [int(v) for v in text.replace(",", " ").split() if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None


def _str_choice(spec):
    choices = {c.lower(): c for c in spec.choices or ()}

    def conv(text: str):
        if text.lower() in NONE and spec.nullable:
            return None
        if choices and text.lower() not in choices:
            allowed = ", ".join([*spec.choices, *(["none"] if spec.nullable else [])])
            raise argparse.ArgumentTypeError(f"invalid choice {text!r} (choose from {allowed})")
        return choices.get(text.lower(), text)
    return conv


def _help(spec) -> str:
    text = spec.help.rstrip(".").replace("%", "%%")
    bits = []
    if spec.unit:
        bits.append(spec.unit)
    if spec.flag and spec.flag != spec.cli_flag:
        bits.append(f"Megatron {spec.flag}")
    if spec.derived:
        bits.append(f"default: {spec.derived}".replace("%", "%%"))
    elif spec.default is not None and spec.type != "bool":
        bits.append(f"default: {spec.default}")
    if spec.choices and spec.type == "str":
        bits.append("one of " + ", ".join([*spec.choices, *(["none"] if spec.nullable else [])]))
    if spec.min is not None and spec.max is not None:
        bits.append(f"{_bound(spec.min)} to {_bound(spec.max)}")
    return text + (f" [{'; '.join(bits)}]" if bits else "")


def _bound(x) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def add_override_flags(parser: argparse.ArgumentParser) -> None:
    """One option per configuration field, grouped by section, from the schema."""
    for section, cls in SECTIONS.items():
        doc = " ".join((cls.__doc__ or "").split("\n\n")[0].split()).replace("``", "")
        group = parser.add_argument_group(f"{section} overrides", doc)
        for spec in (s for s in field_specs() if s.section == section):
            names = [spec.cli_flag, *ALIASES.get(spec.path, [])]
            kw = dict(dest=spec.path, default=argparse.SUPPRESS, help=_help(spec))
            if spec.type == "bool":
                group.add_argument(*names, action=argparse.BooleanOptionalAction, **kw)
                continue
            conv = {"int": _nullable(int, "an integer") if spec.nullable else int,
                    "float": _nullable(float, "a number") if spec.nullable else float,
                    "str": _str_choice(spec), "int_or_list": _layer_pattern, "str_list": _names,
                    "int_list": _ints}[spec.type]
            metavar = {"int": "N", "float": "X", "int_or_list": "FREQ", "str_list": "A,B",
                       "int_list": "N,M"}.get(spec.type, "NAME")
            group.add_argument(*names, type=conv, metavar=metavar, **kw)


#: Fields whose override may name a local file holding the value.
_FILE_VALUED = {"parallelism.tp_comm_overlap_cfg"}


def apply_overrides(data: dict, ns: argparse.Namespace) -> tuple[dict, list[str]]:
    """The configuration dict with the override flags applied, and notes about implied changes."""
    given = {k: v for k, v in vars(ns).items() if "." in k and k.split(".")[0] in SECTIONS}
    bad = {sec for sec in SECTIONS if data.get(sec) is not None and not isinstance(data[sec], dict)}
    if bad:         # the loader names them; overriding a field of a section that is not a mapping cannot work
        return data, []
    out = {sec: dict(data.get(sec) or {}) for sec in SECTIONS}
    out.update({k: v for k, v in data.items() if k not in SECTIONS})
    notes = []
    for path, value in given.items():
        sec, name = path.split(".")
        if path in _FILE_VALUED and isinstance(value, str) and path_kind(value) == "file":
            value = _read(value)        # --tp-comm-overlap-cfg FILE: the YAML Megatron-LM would read
        out[sec][name] = list(value) if isinstance(value, tuple) else value
    notes += implied_changes(out, given)      # the same rule as the calculator's form over a preset
    return {k: v for k, v in out.items() if v != {} or k == "model"}, notes


# --------------------------------------------------------------------------- input

def _source_data(ns) -> tuple[dict, str]:
    """(configuration dict as written, a label) from the positional source, --hf or --megatron-args."""
    bridge = getattr(ns, "bridge_config", None) or getattr(ns, "bridge_recipe", None)
    if bridge:
        return _bridge_source(ns)
    megatron = ns.megatron_args is not None or ns.megatron_args_file is not None
    if megatron and getattr(ns, "verl_config", None):
        raise CLIError("--verl-config takes its model from CONFIG|PRESET or --hf, not --megatron-args")
    if megatron and (ns.source or ns.hf):
        raise CLIError("--megatron-args describes the whole run; give it without a CONFIG/PRESET or --hf")
    if megatron:
        from ..formats.megatron_args import grouped_no_effect, read_megatron_args
        text = ns.megatron_args
        if ns.megatron_args_file is not None:
            text = _read(ns.megatron_args_file)
        imp = read_megatron_args(text, read_file=_local_file)
        for flags, why in grouped_no_effect(imp.no_effect):
            print(f"note: no effect on memory: {', '.join(flags)} ({why})", file=sys.stderr)
        for note in imp.notes:
            print(f"note: {note}", file=sys.stderr)
        return imp.config, "Megatron arguments"
    data, label = {}, ""
    if ns.source:
        data, label = _load_source(ns.source)
    if ns.hf:
        from ..formats.hf import from_hf_config, sibling_note
        note = sibling_note(ns.hf)
        if note:
            print(f"note: {note}", file=sys.stderr)
        data = {**data, "model": from_hf_config(ns.hf)}
        label = f"{ns.hf}" + (f" with the setup of {label}" if label else "")
    if not data:
        raise CLIError("give a configuration file or preset name, --hf PATH|HF_ID or --megatron-args \"...\" "
                       "(see --help; `python -m estimator presets` lists the presets)")
    verl = getattr(ns, "verl_config", None)
    if verl:
        data, label = _with_verl(data, label, verl)
    return data, label


def _with_verl(data: dict, label: str, path: str) -> tuple[dict, str]:
    """--verl-config FILE: a verl trainer configuration's layout, batches and RL settings over the model's
    configuration (estimator/formats/verl.py); its keys replace those of the same fields."""
    from ..formats.verl import read_verl_config
    imp = read_verl_config(_read(path))
    if imp.no_effect:
        print(f"note: {len(imp.no_effect)} verl settings without effect on memory: "
              + ", ".join(k.split(" = ")[0] for k, _ in imp.no_effect[:8])
              + (", ..." if len(imp.no_effect) > 8 else ""), file=sys.stderr)
    for note in imp.notes:
        print(f"note: {note}", file=sys.stderr)
    out = dict(data)
    for sec in ("parallelism", "training", "precision"):
        out[sec] = {**(data.get(sec) or {}), **imp.config[sec]}
    return out, f"{label} with verl configuration {clip(path)}"


def _bridge_source(ns) -> tuple[dict, str]:
    """--bridge-config FILE [overrides] or --bridge-recipe NAME [overrides]: a Megatron-Bridge run."""
    if ns.bridge_config and ns.bridge_recipe:
        raise CLIError("give --bridge-config or --bridge-recipe, not both")
    if ns.source or ns.hf or ns.megatron_args is not None or ns.megatron_args_file is not None:
        raise CLIError("a Megatron-Bridge configuration describes the whole run; give it without a CONFIG/PRESET, "
                       "--hf or --megatron-args (change it with section.field=value overrides after it)")
    world = getattr(ns, "training.world_size", None)
    if ns.bridge_config:
        from ..formats.bridge.config import read_bridge_config
        path, *overrides = ns.bridge_config
        imp = read_bridge_config(_read(path), world_size=world, overrides=overrides)
        label = f"Megatron-Bridge configuration {clip(path)}"
    else:
        from ..formats.bridge.recipes import read_bridge_recipe
        name, *overrides = ns.bridge_recipe
        imp = read_bridge_recipe(name, overrides, world_size=world)
        label = f"Megatron-Bridge recipe {name}"
    if imp.no_effect:
        print(f"note: {len(imp.no_effect)} settings without effect on memory: "
              + ", ".join(field.split(" = ")[0] for field, _ in imp.no_effect[:12])
              + (", ..." if len(imp.no_effect) > 12 else ""), file=sys.stderr)
    for note in imp.notes:
        print(f"note: {note}", file=sys.stderr)
    return imp.config, label


def _read(path: str) -> str:
    return read_text_file(path)


def _local_file(path: str) -> str | None:
    """The text of a file a Megatron flag names (``--tp-comm-overlap-cfg``), None when there is none here."""
    return _read(path) if path_kind(path) == "file" else None


def _load_source(source: str) -> tuple[dict, str]:
    path = Path(source)
    if path_kind(source) == "file":
        data = parse_text(_read(source), path.suffix.lower())
        if not isinstance(data, dict):
            raise ConfigError(Problem("config", clip(source), "the file must hold a mapping with sections model, "
                                      "parallelism, training, precision"))
        return data, source
    if path.suffix.lower() in (".yaml", ".yml", ".json") or "/" in source or "\0" in source:
        raise CLIError(f"file not found: {clip(source)}")
    from ..formats.presets import load_preset, preset_info
    return load_preset(source).to_dict(), f"{preset_info(source)['title']} (preset {source})"


def _config(ns):
    data, label = _source_data(ns)
    data, notes = apply_overrides(data, ns)
    if getattr(ns, "gpu", None) is not None:
        # The named GPU's architecture decides what Transformer Engine and PyTorch allocate (training.gpu_arch).
        from ..formats.gpus import with_gpu_arch
        data = with_gpu_arch(data, ns.gpu)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    training = data.get("training") or {}
    if isinstance(training, dict) and training.get("world_size") is None:
        raise CLIError("the number of GPUs is missing: pass --num-gpus N (the world size is not part of a "
                       "config.json or of the Megatron arguments)")
    cfg = load_config(data)
    if cfg.training.seq_length is None:
        print(f"note: sequence length {cfg.model.max_position_embeddings} tokens taken from "
              "max_position_embeddings; set --seq-length for another", file=sys.stderr)
    return cfg, label


# --------------------------------------------------------------------------- output

def _g(n: int) -> str:
    return f"{n / GIB:.2f}"


def _layers(stage) -> str:
    """Each virtual chunk in Megatron's layout letters: decoder layers, E embedding, m MTP layer, L loss."""
    return stage.label or "-"



#: Why a phase beyond the steady step holds the peak, one clause each (estimator/memory/phases.py).
_PHASE_WHY = {
    "evaluation": "evaluation's forward-only steps run beside the model states and the fp32 gradient copies the "
                  "optimizer step left (freed only by the next zero_grad)",
    "checkpoint_save": "the sharded state dict is built whole before it is written, with fp32 copies of the "
                       "precision-aware optimizer's non-fp32 states and dequantized copies of FP8 weights",
    "checkpoint_load": "loading builds the sharded state dict with the same fp32 copies of the optimizer states",
    "actor_logprob": "the actor's forward-only log-probability pass holds the full-vocabulary logits of one "
                     "log-prob micro-batch with their fp32 copy",
    "reference_logprob": "the reference model's forward-only log-probability pass holds its weights and the logits "
                         "of one log-prob micro-batch with their fp32 copy",
    "policy_update": "the training step with the RL loss's per-token tensors (and a resident reference model)",
    "rollout": "the training side's resident states while the rollout engine holds its share of the GPU",
}

def _biggest(stage, n: int = 3) -> list[tuple[str, int]]:
    items = [("weights", stage.weights_bytes), ("gradients", stage.gradients_bytes),
             ("optimizer states", stage.optimizer_bytes)]
    items += [(f"activations: {k}", v) for k, v in stage.activations.items()]
    items += [(f"transient: {k.replace('_', ' ')}", v) for k, v in stage.transient.items()]
    return sorted((i for i in items if i[1] > 0), key=lambda i: -i[1])[:n]


def render_table(est, label: str = "", verdicts=None, gpu_label: str = "") -> str:
    """The human-readable answer: header, one row per stage in GiB, the peak and its biggest components."""
    p, par = est.parameters, est.parallel
    lines = []
    if label:
        lines.append(label)
    vocab = (est.config.get("model") or {}).get("vocab_size")
    pad = f" (vocabulary padded to {p.padded_vocab_size:,})" if vocab and p.padded_vocab_size \
        and vocab != p.padded_vocab_size else ""
    mtp_layers = (est.config.get("model") or {}).get("mtp_num_layers") or 0
    mtp = (f" (incl. {p.mtp:,} in the {'MTP layer' if mtp_layers == 1 else f'{mtp_layers} MTP layers'})"
           if p.mtp else "")
    if getattr(p, "vision", 0):
        vision = f"{p.vision:,} in the vision tower"
        mtp = f"{mtp[:-1]}, {vision})" if mtp else f" (incl. {vision})"
    if getattr(p, "sound", 0):          # omni28: Nemotron Omni's sound tower
        sound = f"{p.sound:,} in the sound tower"
        mtp = f"{mtp[:-1]}, {sound})" if mtp else f" (incl. {sound})"
    lines.append(f"Parameters: {p.total:,} total{mtp}, {p.active:,} active per token{pad}")
    layout = (f"TP {par['tp']}, PP {par['pp']}" + (f" (VPP {par['vpp']})" if par.get("vpp", 1) > 1 else "")
              + f", DP {par['dp']}, CP {par['cp']}")
    if p.moe_layers:
        layout += f", EP {par['ep']}, expert TP {par['etp']}, expert DP {par['edp']}"
    mb = par.get("num_microbatches")
    lines.append(f"Layout: {layout} on {n_gpus(par['world_size'])}; sequence {par['seq_length']} tokens, micro-batch "
                 f"{par['micro_batch_size']}, " + (f"{mb} micro-batches" if mb else "micro-batches: pipeline full"))
    arch = getattr(est, "gpu_arch", None) or {}
    if arch:
        lines.append(f"GPU architecture: {arch['arch']} (compute capability {arch['compute_capability']})"
                     + (", assumed: no GPU named (--gpu sets it)" if arch.get("assumed") else ""))
    if par.get("pipeline_layout") or par.get("vpp", 1) > 1:
        group = f"micro-batch groups of {par['microbatch_group_size']}" if par.get("microbatch_group_size") else ""
        lines.append("Pipeline: " + ", ".join(x for x in (
            f"layout {par['pipeline_layout']}" if par.get("pipeline_layout") else "",
            f"interleaved 1F1B over {par['vpp']} virtual stages" if par.get("vpp", 1) > 1 else "", group) if x))
    lines.append("")
    head = ["stage", "layers", "weights", "grads", "optimizer", "activations", "transient", "allocated", "device"]
    rows = []
    for s in est.stages:
        mark = "*" if s.stage == est.peak.stage else ""
        row = [f"{s.stage}{mark}", _layers(s), _g(s.weights_bytes), _g(s.gradients_bytes),
               _g(s.optimizer_bytes), _g(s.activations_bytes), _g(s.transient_bytes), _g(s.allocated_bytes),
               _g(s.device_bytes)]
        if verdicts is not None:
            v = verdicts[s.stage]
            row += [_g(v.upper_bound_bytes), {"fits": "yes", "tight": "band", "no": "NO"}[v.verdict],
                    f"{v.headroom_bytes / GIB:+.2f} ({v.headroom_pct:+.1f}%)"]
        rows.append(row)
    if verdicts is not None:
        head += ["upper", "fits", "headroom GiB (%)"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    lines.append("Memory per GPU in GiB (2^30 bytes); * marks the peak stage; layers per virtual chunk (comma-"
                 "separated), E embedding, m MTP layer, L output layer and loss")
    lines.append(fmt(head))
    lines.extend(fmt(r) for r in rows)
    peak = est.peak_stage
    lines.append("")
    lines.append(f"Peak: stage {peak.stage}, {_g(peak.allocated_bytes)} GiB allocated (max_memory_allocated), "
                 f"{_g(peak.reserved_bytes)} GiB reserved, {_g(peak.device_bytes)} GiB on the device")
    if peak.peak_phase == "optimizer_step":
        lines.append(f"The peak is in the optimizer step ({_g(peak.optimizer_step_bytes)} GiB; forward/backward "
                     f"{_g(peak.forward_backward_bytes)} GiB): activations are freed, the step's buffers are alive")
    elif peak.phase_name != "steady step":
        steady = (peak.phase_bytes or {}).get("steady_step", 0)
        own = [(k, v) for k, v in peak.transient.items()
               if k.startswith(("checkpoint_", "evaluation_", "optimizer_fp32_grad_copies", "logprob_", "reference_",
                                "rl_", "entropy_"))]
        lines.append(f"The peak is at the {peak.phase_name} ({_g(peak.allocated_bytes)} GiB allocated; steady training "
                     f"step {_g(steady)} GiB): " + _PHASE_WHY.get(peak.peak_phase, "")
                     + ("; " + ", ".join(f"{k.replace('_', ' ')} {_g(v)} GiB" for k, v in own) if own else ""))
    big = ", ".join(f"{name} {_g(b)} GiB ({100 * b / peak.allocated_bytes:.0f}%)" for name, b in _biggest(peak))
    lines.append(f"Largest at the peak: {big}")
    if peak.outside_allocator:
        lines.append("Held beyond the allocated peak (in the device figure): " + ", ".join(
            f"{k.replace('_', ' ')} {_g(v)} GiB" for k, v in peak.outside_allocator.items()))
    if any(s.host_bytes for s in est.stages):
        most = max(est.stages, key=lambda s: s.host_bytes)
        lines.append(f"Host memory per GPU (not in the device figures): up to {_g(most.host_bytes)} GiB (stage "
                     f"{most.stage}: " + ", ".join(f"{k.replace('_', ' ')} {_g(v)} GiB" for k, v in most.host.items())
                     + ")")
    if verdicts is not None:
        from ..plan.verdicts import summary
        lines.append(f"{gpu_label} ({verdicts[0].capacity_bytes / GIB:.2f} GiB): " + summary(verdicts))
    return "\n".join(lines)
    return "\n".join(lines)


def _verdicts(ns, est):
    if ns.gpu is None and ns.gpu_memory is None:
        if ns.fail_if_oom:
            raise CLIError("--fail-if-oom needs --gpu NAME or --gpu-memory GIB")
        return None, ""
    from ..formats.gpus import fit, get_gpu
    if ns.gpu is not None and ns.gpu_memory is not None:
        raise CLIError("give either --gpu or --gpu-memory, not both")
    if ns.gpu is not None:
        g = get_gpu(ns.gpu)
        cap, label = g.memory_bytes, g.name
    else:
        if not 0 < ns.gpu_memory <= MAX_GPU_GIB:
            raise CLIError(f"--gpu-memory must be a positive number of GiB, at most {MAX_GPU_GIB:,} (1 PiB), "
                           f"got {ns.gpu_memory}")
        cap, label = int(ns.gpu_memory * GIB), f"{ns.gpu_memory:g} GiB GPU"
    return fit(est, cap, ns.keep_free / 100.0), label


def _suggestions(ns, cfg, verdicts):
    """``--suggest``: the cheapest changes that make every stage fit and why each lever the verdict can name was not
    proposed (estimator.plan.suggest), or None."""
    if not ns.suggest:
        return None
    if verdicts is None:
        raise CLIError("--suggest needs --gpu NAME or --gpu-memory GIB")
    from ..plan.suggest import suggest_with_reasons
    return suggest_with_reasons(cfg.to_dict(), verdicts[0].capacity_bytes, keep_free=ns.keep_free / 100.0,
                                num_microbatches=ns.num_microbatches)


def _overload(ns, cfg, est, verdicts):
    """With a GPU, for an MoE model: the largest routing overload factor that still fits (estimator.plan.headroom)."""
    if verdicts is None or not cfg.model.num_experts:
        return None
    from ..plan.headroom import overload_headroom
    return overload_headroom(cfg, verdicts[0].capacity_bytes, ns.keep_free / 100.0, estimate=est,
                             num_microbatches=ns.num_microbatches)


def cmd_estimate(ns) -> int:
    from ..memory.assemble import estimate
    cfg, label = _config(ns)
    fmt = "json" if ns.json else ns.format
    if ns.formula is not None:
        from ..reference.theoretical import estimate_training_memory, format_training_memory_estimate
        est = estimate_training_memory(cfg, num_microbatches=ns.num_microbatches, formula=ns.formula)
        print(format_training_memory_estimate(est, unit=ns.unit))
        return 0
    if fmt == "yaml":
        print(f"# {label}, after the command-line overrides; every field, derived ones null")
        print(yamlio.dump(cfg.to_full_dict()).rstrip())
        return 0
    est = estimate(cfg, num_microbatches=ns.num_microbatches)
    verdicts, gpu_label = _verdicts(ns, est)
    fixes = _suggestions(ns, cfg, verdicts)
    overload = _overload(ns, cfg, est, verdicts)
    if fmt == "json":
        d = est.to_dict()
        if verdicts is not None:
            from ..plan.verdicts import worst_verdict
            w = worst_verdict(verdicts)
            d["fit"] = {"gpu": gpu_label, "stages": [v.to_dict() for v in verdicts],
                        "fits": all(v.fits for v in verdicts), "verdict": w.verdict,
                        "point_bytes": max(v.device_bytes for v in verdicts),
                        "upper_bound_bytes": max(v.upper_bound_bytes for v in verdicts),
                        "keep_free": ns.keep_free / 100.0, "band": w.band.to_dict(),
                        "moe_overload_headroom": overload.to_dict() if overload else None}
        if ns.breakdown:
            from ..memory.breakdown import breakdown
            d["breakdown"] = breakdown(est)
        if fixes is not None:
            d["suggestions"] = [s.to_dict() for s in fixes[0]]
            d["not_proposed"] = fixes[1]
        print(json.dumps(d, indent=2))
    else:
        print(render_table(est, label, verdicts, gpu_label))
        if overload is not None:
            from ..plan.headroom import describe
            answer, evidence = describe(overload)
            print(f"{answer}\n  {evidence}")
        if ns.breakdown:
            from ..memory.breakdown import format_breakdown
            print("\n" + format_breakdown(est))
        if fixes is not None:
            from ..plan.suggest import render
            print("\n" + (render(fixes[0], gpu_label, verdicts[0].capacity_bytes, cfg.to_dict(), ns.keep_free / 100.0,
                                 not_proposed=fixes[1])
                          if not all(v.fits for v in verdicts)
                          else "Make it fit: every stage fits already, nothing to change."))
        if ns.assumptions:
            print("\nAssumptions:\n" + "\n".join(f"- {a}" for a in est.assumptions))
    if ns.fail_if_oom and verdicts is not None and not all(v.fits for v in verdicts):
        return 1
    return 0


def cmd_presets(ns) -> int:
    from ..model.params import count_parameters_of
    from ..formats.presets import list_presets, load_preset, preset_info
    rows = []
    for name in list_presets():
        info, c = preset_info(name), count_parameters_of(load_preset(name))
        rows.append({"name": name, "title": info["title"], "total": c.total, "active": c.active,
                     "published_total": info["published_total_text"], "source": info["source"]})
    if ns.json:
        print(json.dumps(rows, indent=2))
        return 0
    w = max(len(r["name"]) for r in rows)
    print(f"{'preset'.ljust(w)}  {'total':>17}  {'active':>16}  title")
    for r in rows:
        print(f"{r['name'].ljust(w)}  {r['total']:>17,}  {r['active']:>16,}  {r['title']}")
    print("\nParameters as the preset runs them (vocabulary padded for its tensor-parallel size).")
    return 0


def cmd_catalog(ns) -> int:
    from ..formats.catalog import listing
    rows = listing()
    if ns.family:
        q = ns.family.lower()
        rows = [r for r in rows if q in r["family"].lower() or q in r["hf_id"].lower()]
    if ns.json:
        print(json.dumps(rows, indent=2))
        return 0
    w = max([len(r["hf_id"]) for r in rows] + [5])
    print(f"{'Hub id'.ljust(w)}  {'parameters':>17}  {'published':>17}  family / status")
    for r in rows:
        pub = r["published"]["text"] if r["published"] else ""
        if r["supported"]:
            total = f"{r['parameters']['total']:,}"
            print(f"{r['hf_id'].ljust(w)}  {total:>17}  {pub:>17}  {r['family']}")
        else:
            print(f"{r['hf_id'].ljust(w)}  {'-':>17}  {pub:>17}  {r['family']}: not supported yet, "
                  f"{r['reason']}")
    n = sum(r["supported"] for r in rows)
    print(f"\n{len(rows)} models, {n} supported. Parameters exact, vocabulary unpadded; published figures as "
          "their sources give them (`--json` has the sources).")
    return 0


def cmd_gpus(ns) -> int:
    from ..formats.gpus import GPUS
    w = max(map(len, GPUS))
    for g in GPUS.values():
        print(f"{g.name.ljust(w)}  {g.memory_bytes / GIB:7.2f} GiB  {g.memory_bytes:>15,} B  {g.arch or '?':<6}  "
              f"{g.source}")
    print("\nArchitecture (training.gpu_arch, which --gpu sets): " + "; ".join(sorted(
        {g.arch_source for g in GPUS.values() if g.arch_source})))
    return 0


def cmd_bridge_overrides(ns) -> int:
    from ..formats.bridge.export import to_bridge_overrides
    cfg, _ = _config(ns)
    sep = " " if ns.oneline else " \\\n"
    print(sep.join(shlex.quote(o) for o in to_bridge_overrides(cfg)))
    return 0


def cmd_bridge_recipes(ns) -> int:
    from ..formats.bridge.recipes import RECIPES, recipe_names
    for name in recipe_names():
        r = RECIPES[name]
        world = r["config"].get("training", {}).get("world_size", "?")
        print(f"{name}  ({r['preset'] or r['hf']}, {world} x {r['gpu']})")
    return 0


def cmd_megatron_args(ns) -> int:
    from ..formats.megatron_args import to_megatron_args
    cfg, _ = _config(ns)
    args = to_megatron_args(cfg)
    pairs, i = [], 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        pairs.append(" ".join(shlex.quote(a) for a in args[i:j]))
        i = j
    if ns.oneline:
        print(" ".join(pairs))
    else:
        print(" \\\n".join(pairs))
    return 0


# --------------------------------------------------------------------------- parser

def _add_estimate_options(p: argparse.ArgumentParser, *, source: bool) -> None:
    if source:
        p.add_argument("source", nargs="?", metavar="CONFIG|PRESET",
                       help="a YAML/JSON configuration file or a preset name (see `presets`)")
        inp = p.add_argument_group("other inputs")
        inp.add_argument("--hf", metavar="PATH|HF_ID", help="take the model from a Hugging Face config.json (or "
                         "the directory holding it), or from the model catalog by Hub id (see `catalog`; nothing "
                         "is downloaded); with CONFIG|PRESET, replaces its model section")
        inp.add_argument("--megatron-args", metavar="ARGS", help="the flags of a pretrain_gpt.py launch, quoted")
        inp.add_argument("--megatron-args-file", metavar="FILE", help="a launch script holding those flags")
        inp.add_argument("--bridge-config", nargs="+", metavar=("FILE", "KEY=VALUE"), help="the config.yaml a "
                         "Megatron-Bridge run writes (ConfigContainer.to_yaml()), then Bridge overrides such as "
                         "model.tensor_model_parallel_size=4; give the world size with --num-gpus")
        inp.add_argument("--verl-config", metavar="FILE", help="a verl trainer configuration (Megatron backend, "
                         "YAML): its parallel layout, batches, offloading and rollout share over the model of "
                         "CONFIG|PRESET or --hf (the RL phases: the methodology page, RL training)")
        inp.add_argument("--bridge-recipe", nargs="+", metavar=("NAME", "KEY=VALUE"), help="a Megatron-Bridge "
                         "recipe by function name (see `bridge-recipes`), then Bridge overrides as run_recipe.py "
                         "takes them (mixed_precision=bf16_mixed, ddp.grad_reduce_in_fp32=false, ...)")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print Estimate.to_dict() as JSON (same as --format json)")
    out.add_argument("--format", choices=("table", "json", "yaml"), default="table",
                     help="table (default), json, or yaml: the configuration after the overrides")
    out.add_argument("--formula", choices=("estimator", "megatron-lm", "megatron-bridge"),
                     help="print the 'Theoretical memory footprints' line of this formula instead")
    out.add_argument("--unit", default="GB", help="unit of the --formula line: GB or MB (binary, as Megatron "
                     "prints them), GiB or MiB [default: GB]")
    out.add_argument("--num-microbatches", type=_positive, metavar="M", help="micro-batches per step, instead of "
                     "global_batch_size / (micro_batch_size x data-parallel size)")
    out.add_argument("--assumptions", action="store_true", help="list the assumptions behind the numbers")
    out.add_argument("--breakdown", action="store_true", help="what is in the peak stage's memory, by module "
                     "(with --json: a breakdown list, every stage)")
    fit = p.add_argument_group("fit on a GPU")
    fit.add_argument("--gpu", metavar="NAME", help="add a verdict per stage for this GPU (see `gpus`), e.g. "
                     "H100-80GB, H200-141GB, B200-180GB, MI300X-192GB")
    fit.add_argument("--gpu-memory", type=float, metavar="GIB", help="the same for a capacity in GiB (2^30 bytes)")
    fit.add_argument("--keep-free", "--headroom", dest="keep_free", type=_percent, default=0.0, metavar="PCT",
                     help="percent of the GPU memory kept free on top of the estimate's upper bound (the point "
                     "plus its measured error band) for a stage to fit; --headroom is the old name [default: 0]")
    fit.add_argument("--fail-if-oom", action="store_true", help="exit with code 1 when a stage does not fit "
                     "(the exit code is 0 otherwise, fit or not)")
    fit.add_argument("--suggest", action="store_true", help="when a stage does not fit: the cheapest changes that "
                     "make it fit, each re-estimated, with the flags that apply it (JSON: suggestions)")
    add_override_flags(p)


def _export_parser(sub, name: str, func, what: str, *, help: str, description: str) -> None:
    """A subcommand that prints a configuration in another tool's words (megatron-args, bridge-overrides)."""
    p = sub.add_parser(name, help=help, usage="%(prog)s [CONFIG|PRESET] [--hf PATH|HF_ID] [overrides] [--oneline]",
                       description=description)
    p.add_argument("source", nargs="?", metavar="CONFIG|PRESET", help="a configuration file or a preset name")
    p.add_argument("--hf", metavar="PATH|HF_ID", help="take the model from a Hugging Face config.json or a "
                   "catalog Hub id")
    p.add_argument("--oneline", action="store_true", help=f"print the {what} on one line")
    add_override_flags(p)
    p.set_defaults(func=func, megatron_args=None, megatron_args_file=None)


#: The sub-commands, in the order ``--help`` lists them.
COMMANDS = ("estimate", "from-hf", "presets", "catalog", "gpus", "megatron-args", "bridge-overrides", "bridge-recipes",
            "search")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command`` (one of :data:`COMMANDS`), only that sub-command's, which parses its
    command lines alike: :func:`main` builds no more than it runs (the 290 field flags of ``estimate``, ``from-hf``,
    ``megatron-args`` and ``bridge-overrides`` took 30-35 ms of every ``search``)."""
    def wanted(name: str) -> bool:
        return command is None or command == name

    parser = argparse.ArgumentParser(
        prog="python -m estimator", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="GPU memory of Megatron-Core training runs, for every pipeline stage.",
        epilog="examples:\n  python -m estimator estimate llama-3-8b --gpu H100-80GB\n"
               "  python -m estimator estimate config.yaml --tp 4 --pp 2 --recompute selective --json\n"
               "  python -m estimator from-hf path/to/config.json --tp 8 --num-gpus 64 --seq-length 8192\n"
               "  python -m estimator from-hf meta-llama/Llama-3.1-70B --tp 8 --pp 4 --num-gpus 64\n"
               "  python -m estimator megatron-args deepseek-v3")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    if wanted("estimate"):
        p = sub.add_parser("estimate", help="memory of every pipeline stage of a configuration",
                           usage="%(prog)s [CONFIG|PRESET] [--hf PATH|HF_ID | --megatron-args ARGS] [overrides] "
                           "[options]",
                           description="Estimate the memory of every pipeline stage. Override any configuration "
                           "field with its flag (listed below by section); sizes are in GiB (2^30 bytes).")
        _add_estimate_options(p, source=True)
        p.set_defaults(func=cmd_estimate)
    if wanted("from-hf"):
        _from_hf_parser(sub)
    if wanted("presets"):
        p = sub.add_parser("presets", help="list the presets with their parameter counts",
                           description="The presets (use the name where a CONFIG is expected).")
        p.add_argument("--json", action="store_true", help="print the list as JSON")
        p.set_defaults(func=cmd_presets)
    if wanted("catalog"):
        _catalog_parser(sub)
    if wanted("gpus"):
        p = sub.add_parser("gpus", help="list the GPUs known to --gpu", description="The GPU catalog: capacity "
                           "as the driver reports it, and where that figure comes from.")
        p.set_defaults(func=cmd_gpus)
    if wanted("megatron-args"):
        _export_parser(sub, "megatron-args", cmd_megatron_args, "flags",
                       help="print the pretrain_gpt.py flags of a configuration",
                       description="Print the Megatron-LM pretrain_gpt.py flags of a configuration, ready to paste "
                       "into a launch script (the world size is torchrun's, not a flag).")
    if wanted("bridge-overrides"):
        _export_parser(sub, "bridge-overrides", cmd_bridge_overrides, "overrides",
                       help="print a configuration as Megatron-Bridge overrides",
                       description="Print a configuration as Megatron-Bridge section.field=value overrides, as "
                       "scripts/training/run_recipe.py takes them after --recipe NAME (the world size is the "
                       "launcher's).")
    if wanted("bridge-recipes"):
        p = sub.add_parser("bridge-recipes", help="list the Megatron-Bridge recipes --bridge-recipe knows",
                           description="The Megatron-Bridge recipes of the catalogue, by function name.")
        p.set_defaults(func=cmd_bridge_recipes)
    if wanted("search"):
        cli_search.add_parser(sub)
    return parser


def _from_hf_parser(sub) -> None:
    p = sub.add_parser("from-hf", help="estimate a Hugging Face config.json with a parallel layout",
                       usage="%(prog)s PATH|HF_ID --num-gpus N [--tp N --pp N --ep N ...] [overrides] [options]",
                       description="Estimate a model from its Hugging Face config.json (or the directory "
                       "holding it), or from a Hub id of the model catalog (`catalog` lists them): give the "
                       "layout with --tp --pp --ep ... and --num-gpus. Nothing is downloaded.")
    p.add_argument("hf", metavar="PATH|HF_ID", help="config.json, a model directory holding one, or a Hub id "
                   "of the model catalog")
    _add_estimate_options(p, source=False)
    p.set_defaults(func=cmd_estimate, source=None, megatron_args=None, megatron_args_file=None, verl_config=None,
                   bridge_config=None,
                   bridge_recipe=None)


def _catalog_parser(sub) -> None:
    p = sub.add_parser("catalog", help="list the model catalog's Hugging Face ids",
                       description="The model catalog: Hugging Face config.json files of popular open models, "
                       "usable by Hub id with --hf and from-hf. Each model shows its exact parameter count "
                       "beside the published figure, or why it is not supported yet.")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.add_argument("--family", metavar="TEXT", help="only models whose family or id contains TEXT")
    p.set_defaults(func=cmd_catalog)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 --fail-if-oom misfit, 2 bad input, 3 an internal
    error, reported in one line without a traceback)."""
    args = sys.argv[1:] if argv is None else argv
    parser = build_parser(args[0] if args and args[0] in COMMANDS else None)
    ns = parser.parse_args(args)
    try:
        return ns.func(ns)
    except BrokenPipeError:          # `... | head`: the reader left; not an error of ours
        sys.stdout = open(os.devnull, "w")
        return 0
    except (EstimatorError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    except (RecursionError, MemoryError, ArithmeticError, TypeError, LookupError, AttributeError) as exc:
        # A bug of ours, not bad input (the fuzz tests look for this line): still no traceback.
        print(f"error: internal error ({type(exc).__name__}: {clip(str(exc))}); please report it with the "
              "command line", file=sys.stderr)
        return 3
    return 2


if __name__ == "__main__":
    sys.exit(main())
