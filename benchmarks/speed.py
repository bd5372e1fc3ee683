"""Estimates per second in CPython.

Two workloads, each cycling through distinct configurations so no result can be reused:
- a dense 32-layer model (Llama-3-8B shape) over 48 layouts (TP 1/2/4/8 x PP 1/2/4 x mbs 1/2/4 x SP);
- DeepSeek-V3 (61 layers, MLA, 256 experts, MTP) with PP 16 (uneven 3/4 split) over 24 layouts.

It reports the rate from an already validated ``Config`` (what search and the calculator do in a loop)
and from a plain dict (validation included). Targets: >= 20,000/s dense and >= 3,000/s DeepSeek-V3 on the
project's 2-core machine.

Then pipelines at the schema's limits (the tiny model): one estimate of PP 1,024 x VPP 8 with 4,096 micro-batches
and of PP 1,000 x VPP 10 with 10^6, and the calculator's ``timeline`` request at PP 1,024 x VPP 9 (time and answer
bytes). Their cost does not grow with the micro-batches (estimator/memory/schedule.py); targets: under 2 s each
and an answer under 1.5 MB (they took 3.7 min, 5.8 min and an answer of 2.57 GB before).

Last, the time the reserved-memory replay (``training.reserved_memory_model: replay``) adds to one estimate, over
every preset, and at PP 1,024 x VPP 8.

    python benchmarks/speed.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from estimator import estimate, load_config, load_preset  # noqa: E402
from estimator import web  # noqa: E402

DENSE = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
             vocab_size=128256, untie_embeddings_and_output_weights=True)
DSV3 = dict(num_layers=61, hidden_size=7168, num_attention_heads=128, ffn_hidden_size=18432, num_experts=256,
            moe_router_topk=8, moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048,
            moe_layer_freq=[0] * 3 + [1] * 58, moe_router_enable_expert_bias=True, multi_latent_attention=True,
            q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
            qk_layernorm=True, vocab_size=129280, untie_embeddings_and_output_weights=True, mtp_num_layers=1)


def dense_configs() -> list[dict]:
    out = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4):
            for mbs in (1, 2, 4):
                out.append({"model": DENSE, "parallelism": {"tensor_model_parallel_size": tp,
                                                            "pipeline_model_parallel_size": pp},
                            "training": {"world_size": 64, "seq_length": 8192, "micro_batch_size": mbs,
                                         "global_batch_size": 512, "sequence_parallel": tp > 1}})
    return out


def dsv3_configs() -> list[dict]:
    out = []
    for ep in (8, 16, 32, 64):
        for tp in (1, 2):
            for mbs in (1, 2, 4):
                out.append({"model": DSV3, "parallelism": {"tensor_model_parallel_size": tp,
                            "pipeline_model_parallel_size": 16, "expert_model_parallel_size": ep,
                            "expert_tensor_parallel_size": 1, "num_layers_in_first_pipeline_stage": 3,
                            "num_layers_in_last_pipeline_stage": 2},
                            "training": {"world_size": 1024, "seq_length": 4096, "micro_batch_size": mbs,
                                         "global_batch_size": 8192, "sequence_parallel": tp > 1,
                                         "recompute_granularity": "selective"}})
    return out


def rate(items, fn, rounds: int = 7, seconds: float = 0.4) -> tuple[float, float]:
    """(best, median) estimates per second over several timed rounds (best = least disturbed)."""
    rates = []
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while True:
            for item in items:
                fn(item)
            n += len(items)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                rates.append(n / elapsed)
                break
    rates.sort()
    return rates[-1], rates[len(rates) // 2]


def deep_pipelines() -> None:
    """Pipelines at the schema's limits: the time of one estimate and of the page's timeline request."""
    tiny = load_preset("tiny").to_dict()
    for pp, vpp, gbs, mbs in ((1024, 8, 8192, 2), (1000, 10, 10**6, 1)):
        cfg = {**tiny, "model": {**tiny["model"], "num_layers": pp * vpp},
               "parallelism": {"pipeline_model_parallel_size": pp, "virtual_pipeline_model_parallel_size": vpp},
               "training": {**tiny["training"], "world_size": pp, "global_batch_size": gbs, "micro_batch_size": mbs}}
        start = time.perf_counter()
        estimate(cfg)
        print(f"estimate PP {pp:,} x VPP {vpp}, {gbs // mbs:,} micro-batches: {time.perf_counter() - start:6.2f} s "
              "(target < 2 s)")
    state = {"preset": "tiny", "values": {"model.num_layers": "9216",
                                          "parallelism.pipeline_model_parallel_size": "1024",
                                          "parallelism.virtual_pipeline_model_parallel_size": "9",
                                          "training.world_size": "1024", "training.global_batch_size": "8192"}}
    start = time.perf_counter()
    answer = web.handle(json.dumps({"op": "timeline", "state": state}))
    print(f"timeline request PP 1,024 x VPP 9: {time.perf_counter() - start:6.2f} s, {len(answer):,} bytes "
          "(targets < 2 s, < 1.5 MB)")


def replay_costs() -> None:
    """The reserved-memory replay (``training.reserved_memory_model: replay``): its added time per estimate over every
    preset (median and p90 of the best of 3), and at the deepest pipeline (at most 8 stages are replayed)."""
    from estimator.formats.presets import list_presets
    added = []
    for name in list_presets():
        cfg = load_preset(name).to_dict()
        rep = {**cfg, "training": {**cfg["training"], "reserved_memory_model": "replay"}}
        times = []
        for c in (cfg, rep):
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                estimate(c)
                best = min(best, time.perf_counter() - start)
            times.append(best)
        added.append(times[1] - times[0])
    added.sort()
    print(f"reserved replay, {len(added)} presets: adds {1e3 * added[len(added) // 2]:.1f} ms per estimate (median), "
          f"{1e3 * added[int(0.9 * (len(added) - 1))]:.1f} ms (p90), {1e3 * added[-1]:.1f} ms (max)")
    tiny = load_preset("tiny").to_dict()
    cfg = {**tiny, "model": {**tiny["model"], "num_layers": 8192},
           "parallelism": {"pipeline_model_parallel_size": 1024, "virtual_pipeline_model_parallel_size": 8},
           "training": {**tiny["training"], "world_size": 1024, "global_batch_size": 8192, "micro_batch_size": 2,
                        "reserved_memory_model": "replay"}}
    start = time.perf_counter()
    estimate(cfg)
    print(f"estimate PP 1,024 x VPP 8 with the reserved replay: {time.perf_counter() - start:6.2f} s")


def main() -> int:
    for name, configs, target in (("dense 32 layers", dense_configs(), 20_000),
                                  ("DeepSeek-V3 PP16", dsv3_configs(), 3_000)):
        validated = [load_config(c) for c in configs]
        best, median = rate(validated, estimate)
        best_d, _ = rate(configs, estimate)
        print(f"{name:18} {len(configs):3} layouts: {best:9,.0f} estimates/s from Config (median {median:,.0f}), "
              f"{best_d:9,.0f}/s from dict (validation included); target {target:,}/s")
    deep_pipelines()
    replay_costs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
