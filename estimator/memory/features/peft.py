"""LoRA and DoRA as Megatron-Bridge configures them: adapter parameters, frozen base weights, activations.

Source: Megatron-Bridge @ 067f987d ``src/megatron/bridge/peft/`` (``lora.py``, ``dora.py``, ``dora_layers.py``,
``utils.py``: ``ParallelLinearAdapter``, ``get_adapter_attributes_from_linear``) and Transformer Engine @ d0067d0d
``transformer_engine/pytorch/module/linear.py`` (a linear layer saves its input only when its weight needs a
gradient: ``backward_needs_input = is_grad_enabled and weight.requires_grad``).

Parameters. Each adapted linear layer (in -> out) gains ``linear_in`` (r x in) and ``linear_out`` (out x r);
both split over the tensor-parallel ranks (a column-parallel base: linear_in column-parallel over r, linear_out
over out; a row-parallel base: linear_in row-parallel over in, linear_out over out), so one GPU holds

    r * (in + out) / t        qkv: in h, out (a + 2g) dh;  proj: a dh -> h;  fc1: h -> f (2f gated);  fc2: f -> h

and DoRA adds a magnitude vector of out/t (column-parallel bases) or out (row-parallel bases). Only the
adapters are trained: the frozen base weights have no gradient buffer and no optimizer state (Megatron-Core's
DDP and optimizer take only parameters with ``requires_grad``), and no Transformer Engine dummy
weight-gradient tensor, no output-layer or embedding weight gradient.

Activations of one layer, relative to full training:

- a frozen QKV / fc1 linear no longer saves its input (the norm output, lin_in*Tn*h bytes); an adapter on it
  saves that input itself, gathered over the sequence-parallel ranks (``return_layernorm_output_gathered``):
  B*T*h;
- a frozen fc2 no longer saves the activation output (lin_in*T*f/t); an adapter on it saves it in B bytes;
- the attention output stays saved (flash attention keeps it); its FP8 copy goes with a frozen projection;
- each adapter keeps its bottleneck (linear_out's input) of B*T*r;
- DoRA keeps the pre-magnitude output (base + adapter) for the magnitude's gradient: B*T*out/t for column-,
  B*Tn*out for row-parallel bases, and computes ``||W + s*B*A||`` each forward (a transient copy of the
  largest adapted weight).
"""

from __future__ import annotations

from ..activations import LayerActivations

__all__ = ["TARGETS", "adapter_params", "adapter_total", "peft_activations", "dora_transient"]

#: Megatron-Bridge's default target modules (LoRA.target_modules).
TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


def _shapes(r) -> dict:
    """(in, out, column-parallel) of each adaptable linear layer, unsplit."""
    up = 2 if r.gated else 1
    return {"linear_qkv": (r.h, (r.a + 2 * r.g) * r.dh, True), "linear_proj": (r.a * r.dh, r.h, False),
            "linear_fc1": (r.h, r.f * up, True), "linear_fc2": (r.f, r.h, False)}


def targets(r) -> tuple:
    tm = r.cfg.training.peft_target_modules
    return tuple(tm) if tm is not None else TARGETS


def adapter_params(r) -> int:
    """Trainable adapter parameters of one decoder layer on one GPU."""
    rank, t = r.cfg.training.peft_dim, r.t
    dora = r.cfg.training.peft == "dora"
    n = 0
    shapes = _shapes(r)
    for name in targets(r):
        i, o, column = shapes[name]
        n += rank * (i + o) // t
        if dora:
            n += o // t if column else o
    return n


def adapter_total(r) -> int:
    """Trainable adapter parameters of the whole model (every decoder layer, unsplit): r x (in + out) per adapted
    linear, and DoRA's magnitude vector of ``out``. Llama 3 70B, LoRA rank 16 on all four: 80 x 16 x ((8192 + 10240)
    + (8192 + 8192) + (8192 + 57344) + (28672 + 8192)) = 175,636,480."""
    rank, dora = r.cfg.training.peft_dim, r.cfg.training.peft == "dora"
    shapes = _shapes(r)
    per_layer = sum(rank * (shapes[n][0] + shapes[n][1]) + (shapes[n][1] if dora else 0) for n in targets(r))
    return r.L * per_layer


def peft_activations(r, a: LayerActivations) -> LayerActivations:
    """One dense layer's activations with frozen base weights and adapters on the target modules."""
    p = a.parts
    T = r.s * r.b // r.cp
    Tn = T // r.t if r.sp else T
    B = 4 if r.cfg.precision.params_dtype == "fp32" else 2
    rank, t = r.cfg.training.peft_dim, r.t
    tg = set(targets(r))
    dora = r.cfg.training.peft == "dora"
    shapes = _shapes(r)
    att = mlp = 0
    # Inputs of the frozen linears are no longer saved; adapters save theirs.
    att -= p["norm_out"] + p["proj_in_fp8"]
    mlp -= p["mlp_norm_out"] + p["act_out"]
    if "linear_qkv" in tg and p["norm_out"]:
        att += B * T * r.h
    if "linear_fc1" in tg and p["mlp_norm_out"]:
        mlp += B * T * r.h
    if "linear_fc2" in tg and p["act_out"]:
        mlp += B * T * (r.f // t)
    for name in tg:
        extra = B * T * rank
        if dora:
            _, o, column = shapes[name]
            extra += B * T * (o // t) if column else B * Tn * o
        if name in ("linear_qkv", "linear_proj"):
            att += extra
        else:
            mlp += extra
    return a._replace(attention=a.attention + att, mlp=a.mlp + mlp, full=a.full + att + mlp)


def dora_transient(r, wbytes: int) -> int:
    """DoRA's weight-norm computation: W + s*B@A of the largest adapted weight on one GPU, in the weights' dtype."""
    if r.cfg.training.peft != "dora":
        return 0
    shapes = _shapes(r)
    return max(wbytes * i * o // r.t for name, (i, o, _) in shapes.items() if name in targets(r))
