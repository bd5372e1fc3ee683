"""CUDA graphs: the static buffers of the captured regions and the private graph memory pool. An estimate.

Sources: Megatron-LM @ d98e8a64 ``megatron/core/transformer/cuda_graphs.py`` (``CudaGraphManager`` for
``cuda_graph_impl: local``; ``TECudaGraphHelper._get_sample_arguments`` for ``transformer_engine``: static
inputs for every (layer, micro-batch), reused once a micro-batch's backward is done, so one set per in-flight
micro-batch) and Transformer Engine @ d0067d0d ``transformer_engine/pytorch/graph.py``
(``make_graphed_callables``: static inputs, outputs, gradient inputs and outputs in one shared pool).

Model, per GPU:

- static buffers: each captured callable (the whole layer, or each of attn / mlp / moe / moe_router of
  ``cuda_graph_modules``) keeps a static copy of its input hidden states and its output, 2 * B * Tn * h bytes,
  for every (chunk-)micro-batch in flight on the stage;
- graph pool: the captured graphs allocate from a private pool that eager kernels cannot reuse, so one
  captured region's backward working set (the layer's for whole-layer or MLP/MoE capture, the attention's
  q/k/v gradients for attention-only capture) exists beside the eager transient buffers;
- ``full_iteration`` captures the whole forward-backward step: no per-layer static buffers, and the pool holds
  the step's working set apart from the optimizer step.

Uncertainty: Transformer Engine >= 2.7 weak-references static outputs so later graphs reuse them (the static
part may be up to half of this), and the pool's fragmentation can add several hundred MiB. Megatron-Core's
local implementation logs what capture cost: "> built N cuda graph(s) in T sec, with total memory usage:
allocated A, reserved R" (``_CudagraphGlobalRecord.create_cudagraphs``); A compares with the static buffers,
R with static buffers + graph pool. With ``transformer_engine`` compare ``torch.cuda.max_memory_reserved()``
(Megatron's "memory (MB)" report) of a run with and without ``--cuda-graph-impl``.
"""

from __future__ import annotations

__all__ = ["callables", "graph_pool", "static_bytes_per_callable"]


def callables(r, moe: bool) -> int:
    """Captured callables in one decoder layer (0 without per-layer CUDA graphs)."""
    tr = r.cfg.training
    if tr.cuda_graph_impl in ("none", "full_iteration"):
        return 0
    mods = set(tr.cuda_graph_modules or ())
    if not mods:
        return 1
    n = 1 if "attn" in mods else 0
    if moe:
        n += ("moe" in mods) + ("moe_router" in mods and "moe" not in mods)
    else:
        n += "mlp" in mods
    return n


def static_bytes_per_callable(r) -> int:
    """A static input and output of hidden states, 2 * B * Tn * h, for one micro-batch."""
    T = r.s * r.b // r.cp
    Tn = T // r.t if r.sp else T
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    return 2 * B * Tn * r.h


def graph_pool(r, acts: list) -> int:
    """The working set of the largest captured region, held in the private pool; ``acts`` holds (MoE layer?,
    LayerActivations) per layer kind."""
    tr = r.cfg.training
    if tr.cuda_graph_impl == "none":
        return 0
    mods = set(tr.cuda_graph_modules or ())
    out = 0
    for moe, a in acts:
        if tr.cuda_graph_impl == "full_iteration" or not mods or ("mlp" in mods and not moe) or \
                ("moe" in mods and moe):
            out = max(out, a.backward_peak + a.recompute_peak)
        elif "attn" in mods:
            out = max(out, a.parts["qkv"])
    return out
