"""What every layer module works with: a parameter :class:`Count`, the activation context of one micro-batch
(:class:`Ctx`) and the activation :class:`Part` a module returns.

A layer module (:mod:`.attention`, :mod:`.mla`, :mod:`.gated_delta_net`, :mod:`.mamba`, :mod:`.mlp`,
:mod:`.moe`) answers the same questions about its part of one decoder layer, each a function of the resolved
configuration ``r``:

- ``params(r)``: its parameters with its pre-norm, as a :class:`Count` (``sharded`` over the tensor-parallel
  group, ``replicated`` on every rank);
- ``components(r)``: the same parameters by :class:`~estimator.model.params.ParameterCounts` component (norm
  weights under ``norms``);
- ``linear_weights(r)``: elements of its Transformer Engine linear-layer weights on one tensor-parallel rank
  (what FP8 keeps in its own format);
- ``linear_shapes(r)``: those weights as (out, in, count) triples (FP8 keeps scales per tensor:
  :mod:`estimator.model.fp8_scales`);
- ``weight_shapes(r)``: the distinct shapes of those weights on one GPU (Transformer Engine caches one dummy
  weight-gradient tensor per shape);
- ``activations(r, ctx)``: the bytes one micro-batch keeps for the backward pass (:class:`Part`).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Count", "Ctx", "Part"]


class Count(NamedTuple):
    """Parameters of one component: ``sharded`` split over a tensor-parallel group, ``replicated`` not.

    A NamedTuple (immutable, and cheap to build: the estimator makes a dozen per estimate)."""

    sharded: int = 0
    replicated: int = 0

    @property
    def total(self) -> int:
        return self.sharded + self.replicated

    def per_rank(self, tp: int) -> int:
        return self.sharded // tp + self.replicated

    def __add__(self, other: "Count") -> "Count":  # type: ignore[override]
        return Count(self.sharded + other.sharded, self.replicated + other.replicated)

    def __mul__(self, n: int) -> "Count":  # type: ignore[override]
        return Count(self.sharded * n, self.replicated * n)


class Ctx(NamedTuple):
    """One micro-batch on one GPU, as the activation formulas see it.

    ``T = s b / cp`` tokens per rank, ``Tn = T / t`` under sequence parallelism (else ``T``), ``B`` bytes per
    activation element (2 for bf16/fp16, 4 for fp32), ``lin_in`` bytes per element a linear layer saves of its
    input (1 with FP8; NVFP4 counts its own, see :func:`estimator.model.fp8_scales.lin_saved`), ``modules`` the selectively recomputed modules, ``mask`` the elements of one
    bias-dropout-add mask (1 B each; 0 without hidden dropout), ``unfused`` whether attention materialises the
    s x s scores, ``fp8`` the quantization recipe (an FP8 recipe or ``nvfp4``; '' without), whose scales a saved
    quantized input carries
    (:func:`estimator.model.fp8_scales.lin_saved`)."""

    T: int
    Tn: int
    B: int
    lin_in: int
    modules: frozenset
    mask: int
    unfused: bool
    parts: bool = False   # name the saved tensors (Part.named), for PEFT and activation offloading
    fp8: str = ""         # the FP8 or NVFP4 recipe of the linear layers ('' without either)
    # precision.quant_recipe: (module suffix, recipe) of the linears whose recipe differs from ``fp8``
    # (estimator/model/quant_recipe.py; :func:`estimator.model.fp8_scales.lin_saved` takes the module's name);
    # None until the layer kind's are filled in (estimator/memory/activations.py layer_activations).
    quant: tuple | None = None


class Part(NamedTuple):
    """Activation bytes of one part of a layer for one micro-batch: ``saved`` (kept for the backward pass after
    selective recompute), ``recompute`` (what selective recompute rematerialises at once during the backward
    pass), ``work`` (the gradient working set while the part runs its backward pass), ``backward`` (unfused
    attention's backward working set, :mod:`estimator.model.local_attention`) and ``named`` (the saved tensors by
    name, when the context asks for them)."""

    saved: int = 0
    recompute: int = 0
    work: int = 0
    backward: int = 0          # unfused attention's backward working set above what it keeps (0: none)
    named: dict | None = None  # with Ctx.parts: the saved tensors by name
