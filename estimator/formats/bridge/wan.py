"""Megatron-Bridge's Wan configuration: ``WanModelProvider``'s own fields and ``WanDatasetConfig``'s, read into the
schema's ``model_kind: wan`` fields and written back.

NVIDIA-NeMo/Megatron-Bridge @ 067f987d : src/megatron/bridge/diffusion/models/wan/wan_provider.py declares the
provider's fields beside Megatron-Core's TransformerConfig (``crossattn_emb_size``, ``in_channels``, ``out_channels``,
``patch_spatial``, ``patch_temporal``, ``freq_dim``, ``text_len``, ``text_dim``, ``layernorm_across_heads``,
``qkv_format``); src/megatron/bridge/diffusion/data/wan/wan_energon_datamodule.py ``WanDatasetConfig`` the data's.
Without ``dataset.path`` a Wan recipe trains on mock data (``wan_mock_datamodule.py``): every micro-batch is
``number_packed_samples`` samples of ``F_latents x H_latents x W_latents`` latents and ``context_seq_len`` text
tokens, whatever ``seq_length`` says. With a path, Bridge's task encoder packs samples (first-fit decreasing) up to
``seq_length`` latent tokens, each with its text padded to 512 tokens; how many samples a pack holds depends on the
data, so one sample's text is counted and a note says so. The rest of the configuration is Megatron-Core's and is
read as for a GPT model (:func:`~estimator.formats.bridge.config.read_bridge_config`).
"""

from __future__ import annotations

from ...config.errors import ConfigError, Problem, show

__all__ = ["DATASET_FIELDS", "MODEL_FIELDS", "PROVIDER", "TARGET", "is_wan", "take", "write"]

PROVIDER = "WanModelProvider"
TARGET = "megatron.bridge.diffusion.models.wan.wan_provider.WanModelProvider"

#: WanModelProvider's own fields -> the schema field (None: no memory effect, with the reason).
MODEL_FIELDS = {"crossattn_emb_size": "wan_crossattn_emb_size", "in_channels": "wan_in_channels",
                "out_channels": "wan_out_channels", "patch_spatial": "wan_patch_spatial",
                "patch_temporal": "wan_patch_temporal", "freq_dim": "wan_freq_dim", "text_dim": "wan_text_dim",
                "text_len": None, "qkv_format": None, "layernorm_across_heads": None}
#: WanDatasetConfig's fields beside the catalogued dataset ones -> how they are read.
DATASET_FIELDS = ("path", "F_latents", "H_latents", "W_latents", "patch_spatial", "patch_temporal",
                  "number_packed_samples", "context_seq_len", "context_embeddings_dim", "packing_buffer_size",
                  "num_workers", "dataloader_type", "micro_batch_size", "global_batch_size")
#: WanDatasetConfig's defaults (the mock data's latents).
_MOCK = {"F_latents": 24, "H_latents": 104, "W_latents": 60, "number_packed_samples": 1, "context_seq_len": 512}


def is_wan(target) -> bool:
    """Whether ``model._target_`` names Bridge's WanModelProvider."""
    return str(target or "").rsplit(".", 1)[-1] == PROVIDER


def take(cfg: dict) -> tuple[dict, list[str]]:
    """Take the Wan fields out of a Bridge configuration (in place): (the schema's model fields, notes)."""
    m, ds = cfg.get("model") or {}, cfg.get("dataset") or {}
    out: dict = {"model_kind": "wan"}
    notes = ["model: Megatron-Bridge's WanModelProvider, a video diffusion transformer (model.model_kind wan)"]
    for name, field in MODEL_FIELDS.items():
        value = m.pop(name, None)
        if value is None:
            continue
        if name == "layernorm_across_heads" and value is not True:
            raise ConfigError(Problem("model.layernorm_across_heads", show(value), f"({show(value)}) is not "
                                      "modelled: only Wan's q/k norms over all heads (true, the provider's default)"))
        if field:
            out[field] = value
    data = {k: ds.pop(k) for k in DATASET_FIELDS if k in ds}
    train = cfg.get("train") or {}
    for name in ("micro_batch_size", "global_batch_size"):      # the data loader's copies of train's
        if data.get(name) is not None and train.get(name) is not None and data[name] != train[name]:
            raise ConfigError(Problem(f"dataset.{name}", show(data[name]), f"({data[name]}) differs from "
                                      f"train.{name} ({train[name]}): Bridge's Wan data loader batches dataset.{name} "
                                      "samples, the training loop expects train's; give both the same value"))
    if str(data.get("path") or "").strip():
        notes.append("dataset.path set: Bridge packs samples up to seq_length latent tokens; the text of one "
                     "sample (model.wan_text_tokens) is counted per micro-batch")
        return out, notes
    grid = {k: data.get(k, v) for k, v in _MOCK.items()}
    if grid["number_packed_samples"] != 1:
        n = grid["number_packed_samples"]
        raise ConfigError(Problem("dataset.number_packed_samples", show(n), f"({n}) is not modelled: only 1 (the "
                                  "default: one mock sample per micro-batch)"))
    out.update(wan_latent_frames=grid["F_latents"], wan_latent_height=grid["H_latents"],
               wan_latent_width=grid["W_latents"], wan_text_tokens=grid["context_seq_len"])
    notes.append(f"dataset.path unset: Bridge's mock data, {grid['F_latents']} x {grid['H_latents']} x "
                 f"{grid['W_latents']} latents and {grid['context_seq_len']} text tokens per micro-batch "
                 "(seq_length does not apply)")
    return out, notes


def write(model: dict, out: dict) -> None:
    """Write the Wan fields of a schema ``model`` section into Bridge sections ``out`` (in place)."""
    bm, ds = out.setdefault("model", {}), out.setdefault("dataset", {})
    bm["_target_"] = TARGET
    for name, field in MODEL_FIELDS.items():
        if field and model.get(field) is not None:
            bm[name] = model[field]
    if bm.get("crossattn_emb_size") is None:
        bm["crossattn_emb_size"] = model["hidden_size"]
    if model.get("wan_latent_frames"):
        ds.update(path=None, F_latents=model["wan_latent_frames"], H_latents=model["wan_latent_height"],
                  W_latents=model["wan_latent_width"], context_seq_len=model.get("wan_text_tokens", 512))
