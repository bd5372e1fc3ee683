"""Layer 2, ``model``: the model a valid configuration describes, resolved into plain numbers, and its parameters.

- :mod:`.resolve`: Megatron-Core's defaults and derived values applied in one step (padded vocabulary, head
  widths, data- and expert-parallel sizes, the layers of every pipeline stage and virtual chunk, layer kinds);
- :mod:`.layers`: one module per layer part (attention, MLA, gated delta net, Mamba, dense MLP, MoE and its router),
  each answering the same questions: parameters, linear weights, weight shapes, saved activations;
- :mod:`.params`: exact parameter counts (total, active per token, per component);
- :mod:`.local_attention`: the unfused (local) attention's own tensors; :mod:`.fp8_scales`: FP8 scaling factors.

Imports: ``config``. Imported by ``memory`` and every layer above it. A new layer kind is a new module
in :mod:`.layers`, registered in ``layers/__init__.py``.
"""
