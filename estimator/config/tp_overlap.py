"""``tp_comm_overlap_cfg``: Transformer Engine's TP-overlap userbuffers, GEMM by GEMM, for the default and for custom
configurations: which buffers ``initialize_ub`` registers, and what it refuses.

Validation needs the whole registration (Transformer Engine raises while it builds the list), so it lives in the
configuration layer; the device bytes of each buffer are counted by
:func:`estimator.memory.features.comm_buffers.tp_overlap_bytes`.

With ``tp_comm_overlap`` Megatron-LM (NVIDIA/Megatron-LM @ d98e8a64 ``megatron/training/initialize.py``
``_initialize_tp_communicators``) and Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge @ 067f987d
``src/megatron/bridge/training/initialize.py``, same name) call Transformer Engine's ``initialize_ub``
(NVIDIA/TransformerEngine @ d0067d0d ``transformer_engine/pytorch/module/base.py``) with the buffer shape
[S, h], S = seq_length x micro_batch_size / CP, no dtype (so bfloat16), one quantization mode (FP8 in an FP8
run) plus a bf16 one when ``first_last_layers_bf16`` keeps layers in bf16, and ``ub_cfgs``: the YAML file of
``--tp-comm-overlap-cfg`` (Megatron-LM), a named ``TransformerLayerTPOverlapCfg`` (Megatron-Bridge,
``training/comm_overlap.py``), or nothing (the defaults).

``initialize_ub`` registers one userbuffer for each of the twelve GEMMs, in every quantization mode:

======================  ===============  ========================  =============================
GEMM                    default method   communication             default buffer in FP8
======================  ===============  ========================  =============================
qkv_fprop, fc1_fprop    ring_exchange    all-gather                1 B (``fp8_buf``)
proj_dgrad, fc2_dgrad   ring_exchange    all-gather                1 B
proj_fprop, fc2_fprop   pipeline         reduce-scatter            2 B
qkv_dgrad, fc1_dgrad    bulk             all-gather                1 B
qkv_wgrad, fc1_wgrad    bulk             reduce-scatter            2 B
proj_wgrad, fc2_wgrad   external         all-gather                1 B
======================  ===============  ========================  =============================

A configuration changes, per GEMM (``add_ub``; the buffers in ``common/comm_gemm_overlap/comm_gemm_overlap.cpp``):

- ``method``: ``ring_exchange`` builds a ``CommOverlapP2P`` (``CommOverlapP2PBase::initialize``): an all-gather
  buffer of [S, h], a reduce-scatter one of 2 TP - 1 chunks of [S/TP, h] ("to hold received GEMM chunk outputs
  for reduction"); every other method a ``CommOverlap`` of [S, h] (``CommOverlapBase::initialize``). Both are
  registered with ``register_user_buffer_collective``: device memory outside PyTorch's allocator.
- the dtype: uint8 (1 B) in the FP8 mode where ``fp8_buf`` holds, else bf16 (2 B). ``fp8_buf`` holds for the
  all-gather GEMMs whatever the configuration says, and for a reduce-scatter only where the configuration sets
  it and the GEMM is one of the ``pipeline`` group (proj_fprop and fc2_fprop, whichever method they are given).
- ``qkv_dgrad`` / ``fc1_dgrad`` with a method other than ``bulk``: the dgrad GEMM reduce-scatters (no ``fp8_buf``
  default) and the matching wgrad is no longer a reduce-scatter (a [S, h] bf16 bulk buffer all the same); the
  configuration may not then name the wgrad.
- ``atomic_gemm`` (FP8 only; ignored for bulk and external): counters of num_splits x 2 int32 (TP x 2 for
  ring_exchange) in ``cudaMalloc`` memory. The ring-exchange atomic all-gather also allocates TP + 1 output
  chunks with ``cudaMallocAsync`` during each GEMM: not modelled, refused.
- ``num_sm``, ``cga_size``, ``set_sm_margin``, ``num_splits`` (without ``atomic_gemm``), ``aggregate``,
  ``use_ce``, the priorities and ``pipeline_rs_overlap_first_gemm`` schedule the same buffers.

The GEMMs' own tensors (the outputs, the reduce-scatter output [S/TP, h]) are allocated through PyTorch by the
Transformer Engine modules whatever the method (``module/linear.py``), so the configuration changes only the
device memory outside the allocator. The communicator's own flags and the driver's rounding of each buffer to
its allocation granularity are not counted.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import NamedTuple

from . import yamlio
from .errors import Problem, show

__all__ = ["BRIDGE_CONFIGS", "FIELD", "GEMMS", "METHODS", "Userbuffer", "fp8_modes", "not_modelled", "parse_ub_cfgs",
           "problems", "userbuffers"]

FIELD = "parallelism.tp_comm_overlap_cfg"

#: The GEMMs that get a userbuffer, in Transformer Engine's names.
GEMMS = ("qkv_fprop", "qkv_dgrad", "qkv_wgrad", "proj_fprop", "proj_dgrad", "proj_wgrad",
         "fc1_fprop", "fc1_dgrad", "fc1_wgrad", "fc2_fprop", "fc2_dgrad", "fc2_wgrad")
METHODS = ("ring_exchange", "pipeline", "bulk", "external")

#: ``initialize_ub``'s ``methods``: the default method of each GEMM, in the order it registers them.
_DEFAULT_METHOD = {"qkv_fprop": "ring_exchange", "fc1_fprop": "ring_exchange", "proj_dgrad": "ring_exchange",
                   "fc2_dgrad": "ring_exchange", "proj_fprop": "pipeline", "fc2_fprop": "pipeline",
                   "qkv_dgrad": "bulk", "qkv_wgrad": "bulk", "fc1_dgrad": "bulk", "fc1_wgrad": "bulk",
                   "proj_wgrad": "external", "fc2_wgrad": "external"}
#: ``layers_all_gather_overlap`` / ``layers_reduce_scatter_overlap``.
_ALL_GATHER = ("qkv_fprop", "qkv_dgrad", "proj_dgrad", "proj_wgrad", "fc1_fprop", "fc1_dgrad", "fc2_dgrad",
               "fc2_wgrad")
_REDUCE_SCATTER = ("proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad")
_PAIRS = {"proj_fprop": "qkv_fprop", "fc2_fprop": "fc1_fprop"}      # RS GEMM -> its AG pair (ag_rs_pairs)
_DGRAD_RS = ("qkv_dgrad", "fc1_dgrad")

#: ``add_ub``'s keyword arguments (any other key is a TypeError in Transformer Engine): bool or int.
_BOOL_KEYS = ("is_reduce_scatter", "set_sm_margin", "aggregate", "atomic_gemm", "use_ce", "fp8_buf",
              "pipeline_rs_overlap_first_gemm")
_INT_KEYS = ("num_sm", "cga_size", "num_splits", "comm_priority", "gemm_priority")
KEYS = ("method", *_BOOL_KEYS, *_INT_KEYS)

# Megatron-Bridge's named configurations (NVIDIA-NeMo/Megatron-Bridge @ 067f987d
# src/megatron/bridge/training/comm_overlap.py), as the dict Bridge hands to initialize_ub (``asdict``, None
# entries dropped), keeping the keys that change memory. PipelineOverlapCfg declares ``fp8_buf: bool = (False,)``,
# a one-element tuple, which Transformer Engine's ``user_ub_cfg[name].get("fp8_buf", False) and ...`` reads as
# true: a pipeline reduce-scatter of a Bridge configuration has a 1-byte buffer in an FP8 run.
_RING = {"method": "ring_exchange", "fp8_buf": False}
_RING8 = {"method": "ring_exchange", "fp8_buf": True}
_PIPE = {"method": "pipeline", "fp8_buf": True}
_BULK = {"method": "bulk"}


def _bridge(proj_fprop: dict, fc2_fprop: dict, qkv_wgrad: dict | None = _BULK, fc1_dgrad: dict = _BULK,
            fc1_wgrad: dict | None = _BULK, fprop_ag: dict = _RING) -> dict:
    cfg = {"qkv_dgrad": _BULK, "qkv_wgrad": qkv_wgrad, "fc1_dgrad": fc1_dgrad, "fc1_wgrad": fc1_wgrad,
           "qkv_fprop": fprop_ag, "proj_dgrad": fprop_ag, "fc1_fprop": fprop_ag, "fc2_dgrad": fprop_ag,
           "proj_fprop": proj_fprop, "fc2_fprop": fc2_fprop}
    return {k: v for k, v in cfg.items() if v is not None}


#: Megatron-Bridge's published userbuffer configurations, by name (see above).
BRIDGE_CONFIGS: dict[str, dict] = {
    "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192": _bridge(_PIPE, _PIPE),
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192": _bridge(_RING, _RING),
    "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192": _bridge(_PIPE, _PIPE),
    "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192": _bridge(_RING, _RING),
    "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192": _bridge(_PIPE, _PIPE),
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192": _bridge(_RING, _RING),
    "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192": _bridge(_PIPE, _PIPE),
    "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192": _bridge(_RING, _RING),
    "userbuffers_fp8_h100_h8192_tp2_mbs1_seqlen4096_lora": _bridge(_RING8, _RING8, qkv_wgrad=None, fc1_dgrad=_PIPE,
                                                                   fc1_wgrad=None),
    "userbuffers_fp8_h100_h16384_tp4_mbs1_seqlen2048_lora": _bridge(_PIPE, _PIPE, qkv_wgrad=None, fc1_dgrad=_PIPE,
                                                                    fc1_wgrad=None),
    "userbuffers_bf16_h100_h6144_tp2_mbs2_seqlen2048": _bridge(_PIPE, _PIPE),
    "userbuffers_fp8_h100_h6144_tp2_mbs2_seqlen2048": _bridge(_PIPE, _PIPE),
    "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048": _bridge(_PIPE, _RING),
    "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048": _bridge(_RING, _RING),
    "userbuffers_bf16_b200_h12288_tp4_mbs1_seqlen2048": _bridge(_RING, _RING),
    "userbuffers_fp8_b200_h12288_tp4_mbs1_seqlen2048": _bridge(_RING, _RING),
    "userbuffers_bf16_b200_h6144_tp2_mbs1_seqlen4096": _bridge(_RING, _RING),
    "userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096": _bridge(_RING, _PIPE),
    "userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096": _bridge(_RING, _RING),
}


_NAME = re.compile(r"^\s*[A-Za-z0-9_.\-]+\s*$")     # a single word: a configuration's name, not YAML


class _Bad(ValueError):
    """A configuration Transformer Engine (or this reader) refuses; the message names the GEMM and key."""


class _NotModelled(_Bad):
    """A configuration Transformer Engine runs that this module does not model."""


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> tuple:
    """(gemm, ((key, value), ...)) pairs of a configuration's text; memoised (the same text is read per stage)."""
    if text in BRIDGE_CONFIGS:
        data = BRIDGE_CONFIGS[text]
    elif _NAME.match(text):
        close = difflib.get_close_matches(text, list(BRIDGE_CONFIGS), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise _Bad(f"{show(text)} is not one of Megatron-Bridge's named configurations "
                   f"({', '.join(BRIDGE_CONFIGS)}) nor the YAML of a --tp-comm-overlap-cfg file (a mapping of GEMM "
                   f"name to its settings){hint}")
    else:
        try:
            data = yamlio.load(text)
        except yamlio.YamlError as exc:
            raise _Bad(f"not valid YAML: {exc}") from None
    if data is None:        # an empty file: Megatron-LM's yaml.safe_load gives None, Transformer Engine's defaults
        return ()
    if not isinstance(data, dict):
        raise _Bad(f"must map GEMM names ({', '.join(GEMMS)}) to their settings, got {show(data)}")
    out = []
    for gemm, settings in data.items():
        if gemm not in GEMMS:
            close = difflib.get_close_matches(str(gemm), GEMMS, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise _Bad(f"unknown GEMM {show(gemm)}; Transformer Engine overlaps {', '.join(GEMMS)}{hint}")
        if not isinstance(settings, dict):
            raise _Bad(f"{gemm}: must be a mapping of settings ({', '.join(KEYS)}), got {show(settings)}")
        for key, value in settings.items():
            where = f"{gemm}.{key}"
            if key == "method":
                if value not in METHODS:
                    raise _Bad(f"{where} must be one of {', '.join(METHODS)}, got {show(value)}")
            elif key in _BOOL_KEYS:
                if not isinstance(value, (bool, int)):
                    raise _Bad(f"{where} must be true or false (or 1 / 0), got {show(value)}")
            elif key in _INT_KEYS:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise _Bad(f"{where} must be an integer, got {show(value)}")
                if key in ("num_sm", "cga_size", "num_splits") and value < 0:
                    raise _Bad(f"{where} must be >= 0, got {value}")
            else:
                raise _Bad(f"{where}: unknown setting {show(key)} (Transformer Engine's add_ub takes "
                           f"{', '.join(KEYS)})")
        out.append((gemm, tuple((k, bool(v) if k in _BOOL_KEYS else v) for k, v in settings.items())))
    return tuple(out)


def parse_ub_cfgs(value: str | None) -> dict:
    """The ``ub_cfgs`` a ``tp_comm_overlap_cfg`` value stands for (a Bridge name or YAML text; None: {})."""
    if value is None:
        return {}
    return {gemm: dict(settings) for gemm, settings in _parse(value)}


class Userbuffer(NamedTuple):
    """One registered userbuffer: the GEMM, how Transformer Engine builds it, and its dtype."""

    gemm: str
    method: str
    reduce_scatter: bool
    uint8: bool            # FP8 (1 B) buffer; else bf16 (2 B)
    atomic: bool
    num_splits: int


def userbuffers(ub_cfgs: dict, fp8_modes: tuple) -> list[Userbuffer]:
    """The userbuffers ``initialize_ub`` registers for each quantization mode (True: FP8) in ``fp8_modes``.

    Follows Transformer Engine's ``initialize_ub`` / ``add_ub``; raises :class:`_Bad` where they raise."""
    group = dict(_DEFAULT_METHOD)        # the ``methods`` list each GEMM sits in (a moved dgrad changes list)
    all_gather, reduce_scatter = set(_ALL_GATHER), set(_REDUCE_SCATTER)
    moved = []
    for dgrad in _DGRAD_RS:
        method = ub_cfgs.get(dgrad, {}).get("method")
        if method is not None and method != "bulk":
            wgrad = dgrad.replace("dgrad", "wgrad")
            if wgrad in ub_cfgs:
                raise _Bad(f"{wgrad}: Transformer Engine refuses settings for it while {dgrad} uses {method} (the "
                           "dgrad GEMM then reduce-scatters itself)")
            all_gather.discard(dgrad)
            reduce_scatter.discard(wgrad)
            reduce_scatter.add(dgrad)
            group[dgrad] = method
            moved.append(dgrad)
    if moved and len(fp8_modes) > 1:
        raise _Bad(f"{moved[0]}.method {group[moved[0]]}: with a second (bf16) set of userbuffers for the bf16 "
                   "first/last layers Transformer Engine's initialize_ub fails (it re-applies the non-bulk dgrad "
                   "to lists it has already changed)")
    out = []
    for fp8 in fp8_modes:
        atomic_ring = set()
        for gemm in sorted(GEMMS, key=lambda g: METHODS.index(group[g])):   # TE's registration order
            user = ub_cfgs.get(gemm, {})
            method = user.get("method", group[gemm])
            rs = user.get("is_reduce_scatter", gemm in reduce_scatter)
            uint8 = gemm in all_gather or (user.get("fp8_buf", False) and group[gemm] == "pipeline")
            atomic = user.get("atomic_gemm", False)
            if atomic:
                if not fp8:
                    raise _Bad(f"{gemm}.atomic_gemm: Transformer Engine supports atomic GEMM overlap only for FP8 "
                               "GEMMs" + (" (the bf16 first/last layers get a bf16 set)" if len(fp8_modes) > 1
                                          else ""))
                if method in ("bulk", "external"):
                    atomic = False      # add_ub warns and turns it off
            if not rs and method == "pipeline":
                raise _Bad(f"{gemm}.method pipeline: Transformer Engine supports the pipeline method only for a "
                           "reduce-scatter")
            if atomic and method == "ring_exchange":
                atomic_ring.add(gemm)
            if gemm in _PAIRS and (gemm in atomic_ring) != (_PAIRS[gemm] in atomic_ring):
                raise _Bad(f"{gemm}: atomic ring-exchange GEMM overlap must be set on both {_PAIRS[gemm]} and {gemm} "
                           "or on neither (Transformer Engine: the all-gather shuffles the chunks the reduce-scatter "
                           "un-shuffles)")
            if gemm in ("proj_wgrad", "fc2_wgrad") and method != "external":
                raise _Bad(f"{gemm}.method {method}: Transformer Engine requires external for {gemm}")
            if atomic and method == "ring_exchange" and not rs:
                raise _NotModelled(f"{gemm}.atomic_gemm on a ring-exchange all-gather is not modelled: Transformer "
                                   "Engine allocates TP + 1 output chunks with cudaMallocAsync during each such GEMM")
            splits = user.get("num_splits", 4)      # get_default_config: 4 for the non-ring methods
            out.append(Userbuffer(gemm, method, rs, bool(fp8 and uint8), atomic, splits))
    return out


def fp8_modes(pr) -> tuple:
    """Megatron's quantization modes: FP8 in an FP8 run, plus a bf16 set for the bf16 first/last layers."""
    bf16_set = pr.fp8 and pr.first_last_layers_bf16 and (pr.num_layers_at_start_in_bf16
                                                         or pr.num_layers_at_end_in_bf16)
    return (bool(pr.fp8), False) if bf16_set else (bool(pr.fp8),)


def _check(cfg) -> _Bad | None:
    par = cfg.parallelism
    if not par.tp_comm_overlap:
        return None
    try:
        userbuffers(parse_ub_cfgs(par.tp_comm_overlap_cfg), fp8_modes(cfg.precision))
    except _Bad as exc:
        return exc
    return None


def problems(cfg) -> list[Problem]:
    """What Transformer Engine (or this reader) refuses in the configuration's ``tp_comm_overlap_cfg``."""
    exc = _check(cfg)
    if exc is None or isinstance(exc, _NotModelled):
        return []
    return [Problem(FIELD, cfg.parallelism.tp_comm_overlap_cfg, str(exc))]


def not_modelled(cfg) -> list[str]:
    """What Transformer Engine runs but this module does not model, one sentence each."""
    exc = _check(cfg)
    return [f"{FIELD}: {exc}"] if isinstance(exc, _NotModelled) else []
