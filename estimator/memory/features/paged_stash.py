"""The paged stash of the routed experts' saved tensors (``moe_paged_stash``): what leaves the per-layer
allocations, the GPU buffer and the pinned host buffer that take it, and what comes back in the backward pass.

Megatron-LM @ d98e8a64 : megatron/core/transformer/moe/paged_stash.py, with experts.py ``TEGroupedMLP._fused_forward``
and Transformer Engine @ d0067d0d : transformer_engine/pytorch/ops/fused/grouped_mlp.py.

What is stashed. ``_fused_forward`` (the op-fuser path, ``use_transformer_engine_op_fuser``) runs the experts inside
``get_paged_stash_context``: saved-tensor hooks (``PagedStashManager.on_save_for_backward``) turn every tensor
autograd saves that carries Transformer Engine's ``grouped_tensor_scale_inv`` mark into a ``PagedTensor``. Only
TE's fused grouped MLP marks its saved tensors (grouped_mlp.py: ``mark_grouped_tensor(saved_fc1_x,
activation_in, scales, grouped_fc2_x)``), and ``fuse_grouped_mlp_ops`` builds it only for the mxfp8 (or nvfp4)
recipes and where ``_GroupedMLP_CuTeGEMMBase.is_supported()`` holds: the environment variable
``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` above 0, a GPU of compute capability 10 (B200, GB200, B300, GB300) and cuDNN's
frontend kernels; the estimate assumes them whenever the fields ask for the stash (without them it would do nothing).
What it keeps: the fc1 input, the activation's input (fc1's output), the routing probabilities and the fc2 input. Elsewhere nothing is marked, nothing is stashed, and no buffer is allocated
(``allocate_stash_buffers`` finds no sizes): the estimate is then that of the budget alone
(:func:`estimator.model.layers.moe.rank_budget`). These are, in this estimator's terms, the MoE layer's
``expert_in``, ``expert_fc1_out`` and ``expert_act_out`` (the probabilities are not counted, like the other per-row
values: :mod:`estimator.model.layers.moe`), each with the budget's rows.

Where it goes. At the end of the layer's experts (``paged_stash_group_commit``) each tagged tensor's real rows
(``tokens_per_expert.sum()``, not the budget) are copied page by page (``moe_paged_stash_page_size`` rows a page)
into a buffer of its dtype and width (``PagedStashBuffer``: ``[pages x page_size, width]`` on the GPU, and a pinned
host buffer for the pages the GPU buffer cannot take); the original is freed when the copy is waited for, at the
next layer's experts (``wait_for_stash_to_complete``). In the backward pass a layer's tensors are reloaded into new
tensors of the full budget shape (``reload_paged_tensors``: ``torch.empty(original_shape)``), one layer ahead of
the backward (``PipelinePreScheduleFunction.backward``), and freed after its backward.

How big. The first step (``status == 'capture'``) stashes nothing and records, per dtype and width, the most rows
held at once across the schedule, twice: as received and as the budget / moe_expert_rank_capacity_factor per layer
(``avg_num_tokens``, the balanced rows). The second step allocates the buffers once (``paged_stash_reset`` ->
``allocate_stash_buffers``): GPU rows int(that x |moe_paged_stash_buffer_size_factor_cuda|), the balanced record
for a positive factor and the received one for a negative factor; host rows likewise from
moe_paged_stash_buffer_size_factor_cpu (0: none), each rounded up to whole pages. They stay allocated for the rest
of the run, the optimizer step included.

Here, per stage: N = the MoE layer micro-batches in flight at the peak (each chunk's micro-batches in flight x its
MoE layers, the same count the activations use), budget and arriving rows per micro-batch from
:func:`estimator.model.layers.moe.rank_budget` and :func:`~estimator.model.layers.moe.arriving_rows`, each stashed
tensor's bytes per row = its bytes / budget::

    balanced rows    a = int(budget // c)                              (experts.py: max_num_tokens // cap_factor)
    GPU rows         ceil(int(N a s) / P) P, s = factor_cuda > 0;  ceil(int(N rows |s|) / P) P for s < 0
    host rows        the same with factor_cpu (0: none)
    moved            N x (expert_in + expert_fc1_out + expert_act_out)                 (taken off the activations)
    GPU buffers      GPU rows x (the three tensors' bytes per row)                      (persistent)
    reloaded         one layer micro-batch's three tensors at the budget's rows         (kept at the peak)
    host             host rows x the same                                               (pinned)

The stash does not apply (the plain figures stand) when a step is rerun without it: the routing overflows the
budget (arriving rows > budget; the step is rerun dropless, :mod:`estimator.model.layers.moe`) or the stash
(N x arriving rows > GPU rows + host rows: ``PagedStashRunner`` reruns with ``moe_paged_stash`` off and releases
the buffers), and under full recompute (the checkpointed forward saves nothing to stash). Not counted: the int64
free lists and page records (16 B per page and 8 B per page of each tensor), the scale tensors' separate buffers
(their bytes are folded into the per-row bytes), MTP layers' experts (counted with their own activations), and
the first (capture) step, which keeps the received rows' copies on the GPU instead of stashing them.
"""

from __future__ import annotations

from math import ceil
from typing import NamedTuple

from ...model.layers import moe

__all__ = ["PagedStash", "applies", "stash", "STASHED"]

#: The MoE layer's saved tensors (``LayerActivations.parts`` names) that Transformer Engine's fused grouped MLP
#: marks for the stash: fc1's input, the activation's input (fc1's output) and fc2's input.
STASHED = ("expert_in", "expert_fc1_out", "expert_act_out")


class PagedStash(NamedTuple):
    """One stage's paged stash, in bytes."""

    moved: int     # the stashed tensors of the layer micro-batches in flight, off the per-layer allocations
    buffer: int    # the GPU stash buffers (allocated once, kept for the run)
    host: int      # the pinned host stash buffers
    reload: int    # one layer micro-batch's stashed tensors back at the budget's rows (backward) or not yet
    #                stashed (forward)


def applies(cfg) -> bool:
    """Whether the paged stash takes anything: ``moe_paged_stash`` with Transformer Engine's fused grouped MLP
    (op fuser, grouped GEMM, mxfp8; the module docstring) and without full recompute."""
    tr, pr, m = cfg.training, cfg.precision, cfg.model
    return bool(tr.moe_paged_stash and tr.use_transformer_engine_op_fuser and m.moe_grouped_gemm and pr.fp8
                and pr.fp8_recipe == "mxfp8" and tr.recompute_granularity != "full"
                and m.moe_expert_rank_capacity_factor is not None)


def _rows(n: int, avg: int, arriving: int, factor: float, page: int) -> int:
    """Rows of one stash buffer: int(n x avg x factor) for a positive factor, int(n x arriving x |factor|) for a
    negative one, rounded up to whole pages (0 for factor 0)."""
    if factor == 0:
        return 0
    base = n * (avg if factor > 0 else arriving)
    return ceil(int(base * abs(factor)) / page) * page


def stash(r, T: int, Tn: int, parts: dict, n: int) -> PagedStash | None:
    """The paged stash of a stage whose peak holds ``n`` MoE layer micro-batches, each keeping ``parts`` (the MoE
    layer's named saved tensors for one micro-batch); None where the step runs without it (module docstring)."""
    tr = r.cfg.training
    c = r.cfg.model.moe_expert_rank_capacity_factor
    budget = moe.rank_budget(r, Tn if r.sp else T)
    arriving = moe.arriving_rows(r, T, Tn)
    if not n or not budget or arriving > budget:
        return None
    per_layer = [parts.get(k, 0) for k in STASHED]
    layer = sum(per_layer)
    if not layer:
        return None
    avg = int(budget // c)
    page = tr.moe_paged_stash_page_size
    gpu_rows = _rows(n, avg, arriving, tr.moe_paged_stash_buffer_size_factor_cuda, page)
    host_rows = _rows(n, avg, arriving, tr.moe_paged_stash_buffer_size_factor_cpu, page)
    if n * arriving > gpu_rows + host_rows:
        return None
    return PagedStash(moved=n * layer, buffer=sum(gpu_rows * b // budget for b in per_layer),
                      host=sum(host_rows * b // budget for b in per_layer), reload=layer)
