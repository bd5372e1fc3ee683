"""What to change: the valid parallel sizes of a model, the nearest valid values, and single changes that fit.

The calculator offers only values Megatron-Core accepts and, when a configuration is refused, the nearest
ones that are not; this module computes both, so that no rule lives in JavaScript:

- :func:`choices`: for a configuration (plain data, valid or not), the values of tensor, pipeline,
  virtual pipeline, context, expert and expert-tensor parallelism, micro-batch size and recomputation
  that its *model* allows, each with the companion fields to set with it (a pipeline size that needs an
  uneven split carries its first/last-stage layer counts). Candidates come from the divisibility rules and
  each one passes :func:`estimator.config.rules.validate` on the model with that single value. For the
  calculator's quick controls (``gpus=True``) also sequence parallelism and PEFT (method, rank), and, for a
  valid configuration, only the parallel sizes valid on its GPU count and batch, each with the companion change
  Megatron-Core's rules ask for (sequence parallelism with TP and EP, ETP 1, sequence parallelism off at TP 1).
- :func:`fixes`: for the problems of a refused configuration, one note per field, on the field the user
  just changed when a problem involves it, with the nearest values that make the whole configuration
  valid (world sizes, global batch sizes, sequence lengths, parallel sizes, sequence parallelism).
- :func:`levers`: single changes (sequence parallelism, recomputation, a smaller micro-batch, more GPUs)
  that make a configuration which does not fit a GPU fit it, each with its new peak.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import replace
from functools import lru_cache

from ..config.errors import ConfigError, EstimatorError, Problem, n_gpus
from ..config.load import config_from_dict, with_fields
from ..config.rules import validate
from ..config.schema import MAX_BATCH, field_specs
from ..model.resolve import stage_counts

__all__ = ["CHOICE_FIELDS", "choices", "fixes", "levers", "nearest_world_sizes", "steps"]

TP, PP, VPP = ("parallelism.tensor_model_parallel_size", "parallelism.pipeline_model_parallel_size",
               "parallelism.virtual_pipeline_model_parallel_size")
CP, EP, ETP = ("parallelism.context_parallel_size", "parallelism.expert_model_parallel_size",
               "parallelism.expert_tensor_parallel_size")
FIRST, LAST = "parallelism.num_layers_in_first_pipeline_stage", "parallelism.num_layers_in_last_pipeline_stage"
LAYOUT, GROUP = "parallelism.pipeline_model_parallel_layout", "parallelism.microbatch_group_size_per_vp_stage"
ACC_E, ACC_L = ("parallelism.account_for_embedding_in_pipeline_split",
                "parallelism.account_for_loss_in_pipeline_split")
#: Fields of a pipeline split other than PP itself: a PP choice says what each becomes.
_SPLIT_FIELDS = {f.split(".")[1] for f in (FIRST, LAST, VPP, LAYOUT, GROUP, ACC_E, ACC_L)}
WORLD, MBS, GBS, SEQ = ("training.world_size", "training.micro_batch_size", "training.global_batch_size",
                        "training.seq_length")
SP, RECOMPUTE = "training.sequence_parallel", "training.recompute_granularity"
RC_METHOD, RC_NUM, RC_MODULES = ("training.recompute_method", "training.recompute_num_layers",
                                 "training.recompute_modules")
_RC_FIELDS = (RC_METHOD, RC_NUM, RC_MODULES)
PEFT, PEFT_DIM = "training.peft", "training.peft_dim"
#: The fields :func:`choices` lists values for.
CHOICE_FIELDS = (TP, PP, VPP, CP, EP, ETP, MBS, RECOMPUTE, SP, PEFT, PEFT_DIM)
#: Adapter ranks offered (Megatron-Bridge's LoRA.dim; any other is typed in the full form).
PEFT_RANKS = (8, 16, 32, 64, 128, 256)
#: The largest size offered for a dimension (beyond it: type the value in the full form).
MAX_SIZE = 128
_NAMES = {s.name: s.path for s in field_specs()}
_WORD = re.compile(r"[a-z][a-z0-9_]+")


def get_field(cfg: dict, path: str, default=None):
    sec, name = path.split(".", 1)
    return (cfg.get(sec) or {}).get(name, default)


def with_changes(cfg: dict, changes: dict) -> dict:
    out = {sec: dict(v) for sec, v in cfg.items() if isinstance(v, dict)}
    for path, value in changes.items():
        sec, name = path.split(".", 1)
        out.setdefault(sec, {})[name] = value
    return out


def _divisors(n: int, cap: int = MAX_SIZE) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _powers(cap: int) -> list[int]:
    return [2 ** k for k in range(cap.bit_length()) if 2 ** k <= cap]


# ---------------------------------------------------------------- valid values of the model


def _neutral(cfg: dict) -> dict:
    """The model of ``cfg`` with every parallel size 1, on one GPU, without a global batch: what choices
    are checked against (then only the value tried can be at fault)."""
    par = {k: v for k, v in (cfg.get("parallelism") or {}).items()
           if not k.endswith("_size") and k not in _SPLIT_FIELDS}
    tr = {k: v for k, v in (cfg.get("training") or {}).items()
          if k not in ("world_size", "global_batch_size", "sequence_parallel", "micro_batch_size")}
    return {"model": dict(cfg.get("model") or {}), "parallelism": par,
            "training": {**tr, "world_size": 1}, "precision": dict(cfg.get("precision") or {})}


@lru_cache(maxsize=64)
def _choices(key: str) -> dict:
    cfg = json.loads(key)
    try:
        base = config_from_dict(_neutral(cfg))
    except (ConfigError, ValueError, TypeError):
        return {}
    m = base.model
    L, moe = m.num_layers, m.num_experts is not None
    s = base.training.seq_length or m.max_position_embeddings or 0

    def ok(par=None, tr=None) -> bool:
        c = base
        if par:
            world = (par.get("tensor_model_parallel_size", 1) * par.get("pipeline_model_parallel_size", 1)
                     * par.get("context_parallel_size", 1))
            world = math.lcm(world, (par.get("expert_tensor_parallel_size") or 1)
                             * par.get("expert_model_parallel_size", 1) * par.get("pipeline_model_parallel_size", 1))
            c = replace(c, parallelism=replace(c.parallelism, **par), training=replace(c.training, world_size=world))
        if tr:
            c = replace(c, training=replace(c.training, **tr))
        return not validate(c)

    def opts(values, **extra):
        return [{"value": v, "label": "same as TP" if v is None else str(v), **extra} for v in values]

    # TP and CP are checked together with the other's current value: their product must split some layers
    # (Mamba heads and groups over TP x CP).
    cur = cfg.get("parallelism") or {}
    t_now, c_now = cur.get("tensor_model_parallel_size") or 1, cur.get("context_parallel_size") or 1
    out = {TP: opts([t for t in _divisors(m.num_attention_heads)
                     if ok({"tensor_model_parallel_size": t, "context_parallel_size": c_now})]),
           CP: opts([c for c in ([1] + [c for c in _divisors(s // 2) if c > 1] if s else [1])
                     if c <= MAX_SIZE and ok({"context_parallel_size": c, "tensor_model_parallel_size": t_now})])}
    if moe:
        out[EP] = opts([e for e in _divisors(m.num_experts, m.num_experts) if ok({"expert_model_parallel_size": e})])
        out[ETP] = opts([None] + [e for e in _divisors(m.moe_ffn_hidden_size or m.ffn_hidden_size or 1, 64)
                                  if ok({"expert_tensor_parallel_size": e})])
    par = cfg.get("parallelism") or {}
    first, last = par.get("num_layers_in_first_pipeline_stage"), par.get("num_layers_in_last_pipeline_stage")
    v_now = par.get("virtual_pipeline_model_parallel_size")
    layout, p_now = par.get("pipeline_model_parallel_layout"), par.get("pipeline_model_parallel_size") or 1
    acc = {"account_for_embedding_in_pipeline_split": bool(par.get("account_for_embedding_in_pipeline_split")),
           "account_for_loss_in_pipeline_split": bool(par.get("account_for_loss_in_pipeline_split"))}
    pp = []
    # Wan (Megatron-Bridge's diffusion transformer) is modelled on one pipeline stage (estimator.config.rules.wan).
    for p in range(1, 2 if m.model_kind == "wan" else min(L, MAX_SIZE) + 1):
        if layout and p == p_now:
            # The configuration's own layout string fixes the split (and the virtual stages) for its PP.
            if ok({"pipeline_model_parallel_size": p, "pipeline_model_parallel_layout": layout}):
                pp.append({"value": p, "label": f"{p} (layout {layout})",
                           "set": {FIRST: None, LAST: None, VPP: None, LAYOUT: layout, ACC_E: False, ACC_L: False}})
                continue
        if any(acc.values()) and (L + sum(acc.values())) % p == 0 and p > 1:
            # The embedding / loss layer slots of the configuration, kept where they split evenly.
            slots = (L + sum(acc.values())) // p
            v = v_now if v_now and slots % v_now == 0 else None
            if ok({"pipeline_model_parallel_size": p, "virtual_pipeline_model_parallel_size": v, **acc}):
                pp.append({"value": p, "label": f"{p} (embedding/loss as layer slots)",
                           "set": {FIRST: None, LAST: None, VPP: v, LAYOUT: None,
                                   ACC_E: acc["account_for_embedding_in_pipeline_split"],
                                   ACC_L: acc["account_for_loss_in_pipeline_split"]}})
                continue
        splits = [(first, last)] if (first is not None or last is not None) and p > 1 else []
        if L % p == 0:
            splits.append((None, None))
        elif p & (p - 1) == 0:               # uneven splits are offered for powers of two only
            splits += _uneven(L, p)
        for f, la in splits:
            counts = stage_counts(L, p, f, la)
            if not counts or min(counts) < 1:
                continue
            v = v_now if v_now and p > 1 and all(c % v_now == 0 for c in counts) else None
            if not ok({"pipeline_model_parallel_size": p, "num_layers_in_first_pipeline_stage": f,
                       "num_layers_in_last_pipeline_stage": la, "virtual_pipeline_model_parallel_size": v}):
                continue
            label = str(p) if f is None and la is None else f"{p} (" + ", ".join(
                x for x in (f is not None and f"first stage {f}", la is not None and f"last stage {la}") if x) + \
                f" layer{'s' if (f or la) != 1 else ''})"
            pp.append({"value": p, "label": label, "set": {FIRST: f, LAST: la, VPP: v, LAYOUT: None, GROUP: None,
                                                             ACC_E: False, ACC_L: False}})
            break
    out[PP] = pp
    return out


def _uneven(L: int, p: int) -> list[tuple]:
    """Uneven (first, last) splits of L layers over p stages whose middle stages hold ceil(L / p) layers,
    fewest layers on the first stage first (it holds the most micro-batches in flight)."""
    e = -(-L // p)
    f = L - (p - 1) * e
    out = [(f, None)] if 1 <= f <= e else []
    if p >= 3:
        rest = L - (p - 2) * e
        out += [(a, rest - a) for a in range(max(1, rest - e), min(e, rest - 1) + 1)]
    return out


def _vpp_choices(cfg: dict) -> list[dict]:
    par = cfg.get("parallelism") or {}
    if par.get("pipeline_model_parallel_layout"):
        return [{"value": None, "label": "set by the pipeline layout"}]
    if par.get("account_for_embedding_in_pipeline_split") or par.get("account_for_loss_in_pipeline_split"):
        try:
            L, p = int(get_field(cfg, "model.num_layers")), int(par.get("pipeline_model_parallel_size") or 1)
        except (TypeError, ValueError):
            return [{"value": None, "label": "none (1F1B)"}]
        slots = L + bool(par.get("account_for_embedding_in_pipeline_split")) + \
            bool(par.get("account_for_loss_in_pipeline_split"))
        out = [{"value": None, "label": "none (1F1B)"}]
        if p > 1 and slots % p == 0:
            out += [{"value": v, "label": str(v)} for v in _divisors(slots // p) if v > 1]
        return out
    try:
        L, p = int(get_field(cfg, "model.num_layers")), int(par.get("pipeline_model_parallel_size") or 1)
        counts = stage_counts(L, p, par.get("num_layers_in_first_pipeline_stage"),
                              par.get("num_layers_in_last_pipeline_stage"))
    except (TypeError, ValueError):
        counts = None
    out = [{"value": None, "label": "none (1F1B)"}]
    if counts and p > 1:
        g = 0
        for c in counts:
            g = math.gcd(g, c)
        out += [{"value": v, "label": str(v)} for v in _divisors(g) if v > 1]
    return out


def mbs_choices(cfg: dict) -> list[dict]:
    gbs, world = get_field(cfg, GBS), get_field(cfg, WORLD)
    t, p, c = (get_field(cfg, TP, 1), get_field(cfg, PP, 1), get_field(cfg, CP, 1))
    values = _powers(64)
    if all(isinstance(x, int) and x > 0 for x in (gbs, world, t, p, c)) and world % (t * p * c) == 0:
        per_rank = gbs // (world // (t * p * c)) if gbs % (world // (t * p * c)) == 0 else None
        if per_rank:
            values = _divisors(per_rank, 64)
    return [{"value": b, "label": str(b)} for b in values]


def _recompute_choices(cfg: dict) -> list[dict]:
    tr = cfg.get("training") or {}
    full = {"training.recompute_method": tr.get("recompute_method") or "uniform",
            "training.recompute_num_layers": tr.get("recompute_num_layers") or 1, "training.recompute_modules": None}
    if tr.get("recompute_granularity") != "full":
        full = {"training.recompute_method": "uniform", "training.recompute_num_layers": 1,
                "training.recompute_modules": None}
    none = dict.fromkeys(_RC_FIELDS)
    selective = [{"value": "selective", "label": "selective", "set": {**none, "training.recompute_modules":
                                                                       tr.get("recompute_modules")}}]
    if get_field(cfg, "model.model_kind") == "wan":     # not modelled for Wan (estimator.config.rules.wan)
        selective = []
    return [{"value": None, "label": "none", "set": none}, *selective,
            {"value": "full", "label": "full (whole layers)", "set": full}]


def choices(cfg: dict, gpus: bool = False) -> dict:
    """Valid values of :data:`CHOICE_FIELDS` for the model of ``cfg`` (plain data): path -> [{value, label,
    set?}], ``set`` holding companion fields to change with it. Empty for a model that is itself invalid.

    ``gpus`` (the calculator's quick controls): for a valid ``cfg``, only the parallel sizes valid on its GPU count
    and batch, each with the companion changes it needs (:func:`_companions`)."""
    key = json.dumps({"model": cfg.get("model"), "parallelism": cfg.get("parallelism"),
                      "training": {k: v for k, v in (cfg.get("training") or {}).items()   # as _neutral keeps it
                                   if k not in ("world_size", "global_batch_size", "sequence_parallel",
                                                "micro_batch_size")},
                      "precision": cfg.get("precision")}, sort_keys=True, default=str)
    out = copy.deepcopy(_choices(key))
    if not out:
        return {}
    out[VPP] = _vpp_choices(cfg)
    out[MBS] = mbs_choices(cfg)
    out[RECOMPUTE] = _recompute_choices(cfg)
    out[SP] = _sp_choices(cfg)
    out[PEFT] = _peft_choices(cfg)
    rank = get_field(cfg, PEFT_DIM)
    ranks = sorted(set(PEFT_RANKS) | ({rank} if isinstance(rank, int) and not isinstance(rank, bool) else set()))
    out[PEFT_DIM] = [{"value": r, "label": str(r)} for r in ranks] if any(o["value"] for o in out[PEFT]) else []
    if gpus:
        _companions(cfg, out)
    return out


_SPEC_CHOICES = {s.path: s.choices for s in field_specs()}


_SPEC_DEFAULTS = {s.path: s.default for s in field_specs()}
_PEFT_FIELDS = ("training.peft_dim", "training.peft_alpha", "training.peft_target_modules",
               "training.peft_share_expert_adapters", "training.peft_sequence_parallel_input_regather")


def _peft_choices(cfg: dict) -> list[dict]:
    """No adapters, LoRA and DoRA, each where the estimator models it for this model (not DoRA on MoE experts, not
    on MLA, hybrid layers or FSDP: the rules say why); "none" resets the adapter fields to their defaults."""
    out = []
    for v in (None, *_SPEC_CHOICES[PEFT]):
        extra = {p: _SPEC_DEFAULTS[p] for p in _PEFT_FIELDS} if v is None else {}
        problems = _problems(with_changes(cfg, {PEFT: v, **extra}))
        # a refusal (UnsupportedError, e.g. adapters beside a vision tower) names the field in its message
        if any(p.field.startswith(PEFT) or (p.field == "config" and f"({PEFT})" in p.message) for p in problems):
            continue
        label = "none (full training)" if v is None else {"lora": "LoRA", "dora": "DoRA"}.get(v, v)
        out.append({"value": v, "label": label, **({"set": extra} if extra else {})})
    return out


def _sp_choices(cfg: dict) -> list[dict]:
    """Sequence parallelism off and on, as far as Megatron allows them: on only with TP > 1 (Megatron-LM turns it
    off at TP 1: "Disabling sequence parallelism because tensor model parallelism is disabled"), off not where a
    rule requires it (tensor and expert parallelism together)."""
    t = get_field(cfg, TP, 1)
    out = []
    for v, label in ((False, "off"), (True, "on")):
        if v and not (isinstance(t, int) and t > 1):
            continue
        if not v and any(p.field == SP for p in _problems(with_changes(cfg, {SP: False}))):
            continue
        out.append({"value": v, "label": label})
    return out


#: Companion changes tried, in order, for a parallel size that alone makes a valid configuration invalid: the
#: ones Megatron-Core's rules ask for (sequence parallelism with tensor and expert parallelism together; an
#: expert-tensor size whose expert grid divides the GPU count: 1, as Bridge's MoE recipes set it); sequence parallelism
#: off at TP 1 (Megatron-LM turns it off there; the estimator refuses it).
_COMPANIONS = ({SP: True}, {SP: False}, {ETP: 1}, {ETP: 1, SP: True})


def _problems(cfg: dict) -> list:
    try:
        config_from_dict(cfg)
        return []
    except ConfigError as exc:
        return list(exc.problems)
    except (ValueError, TypeError) as exc:
        return [Problem("config", None, str(exc))]


def _companions(cfg: dict, out: dict) -> None:
    """For a valid ``cfg``: a choice of TP, PP, EP, ETP or CP after which it would be refused, but which a companion
    change (:data:`_COMPANIONS`) makes valid, carries that change in ``set`` and says so in ``also`` (the
    companion fields) and ``why`` (the rule that asks for it, Megatron-Core's words); one refused even so (on
    these GPUs, with this global batch) is not offered. An invalid ``cfg`` keeps every value its model allows."""
    if _problems(cfg):
        return
    for path in (TP, PP, EP, ETP, CP):
        keep = []
        for o in out.get(path) or []:
            change = {path: o["value"], **o.get("set", {})}
            refused = [] if o["value"] == get_field(cfg, path) else _problems(with_changes(cfg, change))
            for extra in _COMPANIONS if refused else ():
                if any(get_field(cfg, k) == v for k, v in extra.items()) or path in extra:
                    continue
                if not _problems(with_changes(cfg, {**change, **extra})):
                    o["set"] = {**o.get("set", {}), **extra}
                    o["also"] = dict(extra)
                    o["why"] = "; ".join(dict.fromkeys(p.message for p in refused))
                    refused = []
                    break
            if not refused:
                keep.append(o)   # a value refused even with its companions (on these GPUs, this batch) is left out
        if path in out:
            out[path] = keep


# ---------------------------------------------------------------- nearest valid values


def _valid(cfg: dict) -> bool:
    try:
        config_from_dict(cfg)
        return True
    except (ConfigError, ValueError, TypeError):
        return False


def _valid_with(base, path: str, value) -> bool:
    try:
        with_fields(base, {path: value}, source={})
        return True
    except (ConfigError, ValueError, TypeError):
        return False


def _sides(cfg: dict, path: str, step: int, limit: int | None = None,
           base=None) -> tuple[int | None, int | None]:
    """The multiples of ``step`` nearest below and above the current value of ``path`` (within 12 steps)
    with which ``cfg`` is valid; None where there is none. ``base``: ``cfg`` read (valid), so that each
    candidate has only ``path`` read again (config.with_fields)."""
    now = get_field(cfg, path)
    if not isinstance(now, int) or isinstance(now, bool) or step < 1:
        return None, None
    k0 = now // step
    below = [k * step for k in range(k0, max(k0 - 12, 0), -1) if k * step != now]
    above = [k * step for k in range(k0 + 1, k0 + 13) if not limit or k * step <= limit]
    ok = (lambda x: _valid_with(base, path, x)) if base is not None else (lambda x: _valid(with_changes(cfg, {path: x})))
    return tuple(next((x for x in side if ok(x)), None) for side in (below, above))


def _nearest(cfg: dict, path: str, step: int, limit: int | None = None, count: int = 2) -> list[int]:
    """Up to ``count`` multiples of ``step`` nearest the current value of ``path`` that make ``cfg`` valid."""
    now = get_field(cfg, path)
    found = [x for x in _sides(cfg, path, step, limit) if x is not None]
    return sorted(found, key=lambda x: (abs(x - now), x))[:count]


def _world_step(cfg: dict) -> int | None:
    t, p, c = (get_field(cfg, TP, 1), get_field(cfg, PP, 1), get_field(cfg, CP, 1))
    ep, etp = get_field(cfg, EP, 1), get_field(cfg, ETP) or t
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (t, p, c, ep, etp)):
        return None
    step = t * p * c
    if get_field(cfg, "model.num_experts"):
        step = math.lcm(step, etp * ep * p)
    return step


def _world_sides(cfg: dict, base=None) -> tuple[int | None, int | None]:
    """The valid world sizes nearest below and above the configured one (layout and batch kept): a multiple of
    the layout's GPUs within 12 steps, else, further away, one whose data-parallel size divides the global batch
    in micro-batches (GPUs 1000 on a global batch of 512: 512 or 1024, not 988 to 1012)."""
    step, now = _world_step(cfg), get_field(cfg, WORLD)
    if not step or not isinstance(now, int) or isinstance(now, bool):
        return None, None
    lo, hi = _sides(cfg, WORLD, step, base=base)
    g, b = get_field(cfg, GBS), get_field(cfg, MBS, 1)
    if (lo is not None and hi is not None) or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                                       for x in (g, b)) or g % b:
        return lo, hi
    if g > MAX_BATCH:           # refused by the schema anyway; its divisors are not worth a search
        return lo, hi
    dense = get_field(cfg, TP, 1) * get_field(cfg, PP, 1) * get_field(cfg, CP, 1)
    n, divisors, i = g // b, set(), 1
    while i * i <= n:           # the divisors of the micro-batches per step, in pairs up to its square root
        if n % i == 0:
            divisors.update((i, n // i))
        i += 1
    cands = sorted({d * dense for d in divisors if (d * dense) % step == 0})
    ok = lambda x: _valid(with_changes(cfg, {WORLD: x}))
    if lo is None:
        lo = next((x for x in reversed(cands) if x < now and ok(x)), None)
    if hi is None:
        hi = next((x for x in cands if x > now and ok(x)), None)
    return lo, hi


def nearest_world_sizes(cfg: dict, count: int = 2) -> list[int]:
    """The world sizes nearest the configured one on which ``cfg`` is valid (its layout and batch kept)."""
    now = get_field(cfg, WORLD)
    found = [x for x in _world_sides(cfg) if x is not None]
    return sorted(found, key=lambda x: (abs(x - now), x))[:count]


def _gbs_step(cfg: dict) -> int | None:
    t, p, c, b, w = (get_field(cfg, TP, 1), get_field(cfg, PP, 1), get_field(cfg, CP, 1), get_field(cfg, MBS, 1), get_field(cfg, WORLD))
    if all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (t, p, c, b, w)) and w % (t * p * c) == 0:
        return b * w // (t * p * c)
    return None


def _seq_step(cfg: dict) -> int | None:
    t, c = get_field(cfg, TP, 1), get_field(cfg, CP, 1)
    if all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (t, c)):
        return math.lcm(2 * c if c > 1 else 1, t * c if get_field(cfg, SP) else 1)
    return None


def steps(cfg: dict) -> dict:
    """For the quick controls' steppers: the nearest valid GPU count, global batch size and sequence length
    below and above the configured ones, ``path -> [below or None, above or None]`` (a valid ``cfg`` only)."""
    try:
        base = config_from_dict(cfg)
    except (ConfigError, ValueError, TypeError):
        # Refused: each stepper still leads to the nearest value of its field on which the configuration is valid
        # (GPUs 1000 -> 512 or 1024; global batch 130 -> 128 or 132), or is disabled where none is.
        out = {WORLD: list(_world_sides(cfg))}
        g, sq = _gbs_step(cfg), _seq_step(cfg)
        if g and get_field(cfg, GBS) is not None:
            out[GBS] = list(_sides(cfg, GBS, g))
        if sq and get_field(cfg, SEQ) is not None:
            out[SEQ] = list(_sides(cfg, SEQ, sq, get_field(cfg, "model.max_position_embeddings")))
        return out
    out = {}
    w = _world_step(cfg)
    if w:
        out[WORLD] = list(_world_sides(cfg, base=base))
    g = _gbs_step(cfg)
    if g and get_field(cfg, GBS) is not None:
        out[GBS] = list(_sides(cfg, GBS, g, base=base))
    sq = _seq_step(cfg)
    if sq and get_field(cfg, SEQ) is not None:
        seq_now = get_field(cfg, SEQ)
        up = 2 * seq_now if isinstance(seq_now, int) else None
        below = seq_now // 2 if isinstance(seq_now, int) and seq_now % (2 * sq) == 0 else None
        limit = get_field(cfg, "model.max_position_embeddings")
        out[SEQ] = [below if below and _valid_with(base, SEQ, below) else None,
                    up if up and (not limit or up <= limit) and _valid_with(base, SEQ, up) else None]
    return out


def _involved(problem: Problem) -> list[str]:
    paths = [problem.field] if problem.field in _PATHS else []
    for word in _WORD.findall(problem.message):
        path = _NAMES.get(word)
        if path and path not in paths:
            paths.append(path)
    return paths


_PATHS = {s.path for s in field_specs()}


def _target(problem: Problem, changed: str | None) -> str:
    paths = _involved(problem)
    if changed and changed in paths:
        return changed
    if problem.field == WORLD and changed in (TP, PP, CP, EP, ETP):
        return changed
    if problem.field == GBS and changed == WORLD and "data-parallel size" in problem.message:
        return WORLD                # the GPU count just typed made the data-parallel size: the fix is there
    if problem.field == SP and changed in (TP, EP):
        return changed              # the size just chosen asks for sequence parallelism: the fix is offered there
    return problem.field


def _companion_label(change: dict) -> str:
    """A companion change in words: "sequence parallelism on", "ETP 1", "ETP 1 and sequence parallelism on"."""
    words = [f"ETP {change[ETP]}"] if ETP in change else []
    if SP in change:
        words.append("sequence parallelism " + ("on" if change[SP] else "off"))
    return " and ".join(words)


def _fix_values(cfg: dict, path: str, problems: list[Problem]) -> tuple[list, str | None]:
    """(fixes [{label, set}], hint) for the field ``path`` of an invalid ``cfg``."""
    now = get_field(cfg, path)
    if path == WORLD:
        return [{"label": n_gpus(n), "set": {WORLD: n}} for n in nearest_world_sizes(cfg)], None
    if path == GBS:
        step = _gbs_step(cfg)
        if step:
            return ([{"label": f"{n:,}", "set": {GBS: n}} for n in _nearest(cfg, GBS, step)],
                    f"a multiple of micro-batch size x data-parallel size = {step:,}")
        return [], None
    if path == SEQ:
        step = _seq_step(cfg)
        if step:
            limit = get_field(cfg, "model.max_position_embeddings")
            found = _nearest(cfg, SEQ, step, limit)
            if not found and isinstance(limit, int) and isinstance(now, int) and now > limit >= step:
                top = limit // step * step          # past the position embeddings: the longest that is allowed
                found = [top] if _valid(with_changes(cfg, {SEQ: top})) else []
            return [{"label": f"{n:,}", "set": {SEQ: n}} for n in found], None
        return [], None
    if path == SP:
        want = any("requires sequence_parallel" in p.message for p in problems)
        return [{"label": "turn sequence parallelism " + ("on" if want else "off"), "set": {SP: want}}], None
    opts = choices(cfg).get(path)
    if path in (VPP, MBS, RECOMPUTE) or not opts:
        opts = opts or []
    values = [o["value"] for o in opts]
    hint = f"valid for this model: {', '.join(o['label'] for o in opts)}" if opts and path not in (RECOMPUTE,) else None
    if isinstance(now, int) and not isinstance(now, bool):
        opts = sorted(opts, key=lambda o: (abs((o["value"] or 1) - now), o["value"] or 0))
    good = [o for o in opts if _valid(with_changes(cfg, {path: o["value"], **o.get("set", {})}))]
    pick = (good or [o for o in opts if o["value"] != now])[:3]
    if len(values) <= 1:
        hint = None
    out = [{"label": o["label"], "set": {path: o["value"], **o.get("set", {})}} for o in pick]
    if path in (TP, EP, CP, ETP) and now in values:
        # The value the user chose is allowed with the change Megatron-Core asks for beside it (TP 2 on an MoE model
        # with sequence parallelism): that first, so that the offered fix keeps the intent.
        keep = next((c for c in _COMPANIONS if path not in c and _valid(with_changes(cfg, c))), None)
        if keep is not None:
            out.insert(0, {"label": f"keep {now}: {_companion_label(keep)}", "set": dict(keep)})
    return out[:3], hint


def fixes(cfg: dict, problems: list[Problem], changed: str | None = None) -> list[dict]:
    """One note per field for the problems of ``cfg``: ``{field, messages, fixes: [{label, set}], hint}``.

    A problem that involves ``changed`` (the field the user just edited: it is the problem's field or
    named in its message) is placed on ``changed``; the others on their own field."""
    notes: dict[str, dict] = {}
    for p in problems:
        target = _target(p, changed)
        note = notes.setdefault(target, {"field": target, "messages": [], "problems": []})
        name = p.field.split(".")[-1]
        msg = p.message if p.field == target or name in p.message else f"{name}: {p.message}"
        if msg not in note["messages"]:
            note["messages"].append(msg)
        note["problems"].append(p)
    for note in notes.values():
        fix, hint = ([], None)
        if note["field"] in _PATHS:
            try:
                fix, hint = _fix_values(cfg, note["field"], note.pop("problems"))
            except (EstimatorError, ValueError, TypeError, ArithmeticError):
                fix, hint = [], None
        note.pop("problems", None)
        note["fixes"], note["hint"] = fix, hint
    return list(notes.values())


# ---------------------------------------------------------------- levers


def levers(cfg: dict, capacity: int, limit: int = 4) -> list[dict]:
    """Single changes after which every stage of ``cfg`` fits ``capacity`` bytes: ``[{label, set, peak_bytes}]``
    (empty when it fits already or is invalid).

    Tried in order of what they cost in speed: sequence parallelism, selective then full recomputation,
    a smaller micro-batch, twice the GPUs (more data-parallel ranks to shard the optimizer over)."""
    from ..memory.assemble import estimate
    from ..formats.gpus import fit
    try:
        if all(f.fits for f in fit(estimate(cfg), capacity)):
            return []
    except (EstimatorError, ValueError):
        return []
    tr = cfg.get("training") or {}
    tries = []
    if get_field(cfg, TP, 1) > 1 and not tr.get("sequence_parallel"):
        tries.append(("sequence parallelism on", {SP: True}))
    if tr.get("recompute_granularity") is None:
        tries.append(("selective recomputation", _recompute_choices(cfg)[1]["set"] | {RECOMPUTE: "selective"}))
    if tr.get("recompute_granularity") != "full":
        tries.append(("full recomputation", _recompute_choices(cfg)[2]["set"] | {RECOMPUTE: "full"}))
    b = tr.get("micro_batch_size") or 1
    if isinstance(b, int) and b > 1:
        tries.append((f"micro-batch size {b // 2}", {MBS: b // 2}))
    w = tr.get("world_size")
    if isinstance(w, int) and tr.get("use_distributed_optimizer", True):
        tries.append((f"{2 * w:,} GPUs (twice the data-parallel ranks to shard the optimizer over)", {WORLD: 2 * w}))
    out = []
    for label, change in tries:
        try:
            est = estimate(with_changes(cfg, change))
        except (EstimatorError, ValueError):
            continue
        if all(f.fits for f in fit(est, capacity)):
            out.append({"label": label, "set": change, "peak_bytes": est.peak.device_bytes})
            if len(out) >= limit:
                break
    return out
