"""Pipeline layouts: the layout string, account_for_embedding/loss, uneven first/last stages, with virtual stages.

Expected placements are worked out by hand from Megatron-Core's rules (d98e8a64):
``pipeline_parallel_layer_layout.py`` (chunk k of a layout is virtual stage k // p of stage k % p; layer ids
run in that flattened order), ``transformer_layer.py`` ``get_transformer_layer_offset`` and
``transformer_block.py`` ``get_num_layers_to_build`` (account_for: offset = c (L + e + l) / v + r (L + e + l)
/ (p v) - e unless (r, c) = (0, 0); uneven with VPP: offset = c (f + mid + l) / v + f / v + (r - 1) mid / (v
(p - 2)) with mid the layers of the middle stages). The recipes are Megatron-Bridge's @ 067f987d.
"""

from __future__ import annotations

import pytest

from estimator import ConfigError, estimate, load_config, parse_megatron_args, to_megatron_args
from estimator.config.pipeline_layout import LayoutError, expand_layout, placement
from estimator.model.resolve import resolve
from tests.conftest import make_config

TINY = dict(num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=256)


def labels(model: dict, parallelism: dict, world: int = 8) -> list[str]:
    """The chunks of every stage in layout letters (``E+0-2, 15-16``) for a small model of the given depth."""
    cfg = make_config({**TINY, **model}, parallelism, {"world_size": world, "seq_length": 64})
    return [s.label for s in estimate(cfg).stages]


def test_layout_grammar():
    """Megatron-Core's parse_str_to_list: commas dropped, (...)*n unrolled, then x*n, '|' ends a chunk."""
    assert expand_layout("Et*3|(tt|)*2,L") == ("Ettt", "tt", "tt", "L")
    assert expand_layout("E||t|L") == ("E", "", "t", "L")                  # empty chunks are allowed
    assert expand_layout("Et|(tt|)*30mL") == ("Et",) + ("tt",) * 30 + ("mL",)
    assert len(expand_layout("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL")) == 40        # Bridge's Llama-3 70B layout
    for bad, why in (("Et|x|L", "unknown character 'x'"), ("((t|)*2)*2", "do not nest"), ("t*", "'\\*'"),
                     ("t*100001", "more than 100,000")):
        with pytest.raises(LayoutError, match=why):
            expand_layout(bad)


def test_deepseek_v3_performance_layout():
    """DeepSeek-V3 (61 layers, 1 MTP), ``Et|(tt|)*30mL`` on PP 8 (Bridge perf_recipes/deepseek/h100/
    deepseek_v3.py : deepseek_v3_pretrain_1024gpu_h100_bf16_config). 32 chunks / PP 8 = VPP 4. Chunk 0 = E + layer
    0; chunk k = 1..30 holds layers 2k-1, 2k; chunk 31 = MTP + loss. Stage r, virtual stage c is chunk 8c + r:

        stage 0: E+0    | 15-16 | 31-32 | 47-48
        stage r: 2r-1..2r | 2r+15..2r+16 | 2r+31..2r+32 | 2r+47..2r+48      (r = 1..6)
        stage 7: 13-14  | 29-30 | 45-46 | m+L
    """
    got = labels({"num_layers": 61, "mtp_num_layers": 1},
                 {"pipeline_model_parallel_size": 8, "pipeline_model_parallel_layout": "Et|(tt|)*30mL"})
    want = ["E+0, 15-16, 31-32, 47-48"]
    want += [f"{2 * r - 1}-{2 * r}, {2 * r + 15}-{2 * r + 16}, {2 * r + 31}-{2 * r + 32}, {2 * r + 47}-{2 * r + 48}"
             for r in range(1, 7)]
    want += ["13-14, 29-30, 45-46, m+L"]
    assert got == want


def test_kimi_k2_layout_without_mtp():
    """Kimi-K2 (61 layers, no MTP), ``Et|(tt|)*30L`` on PP 16 (perf_recipes/kimi/h100/kimi_k2.py :
    kimi_k2_pretrain_1024gpu_h100_bf16_config): 32 chunks = VPP 2. Stage r holds chunk r and chunk 16 + r; chunk
    k = 1..30 holds 2k-1, 2k, so stage 0 = E+0 | 31-32, stage 15 = 29-30 | L (the loss chunk has no layer)."""
    got = labels({"num_layers": 61}, {"pipeline_model_parallel_size": 16,
                                      "pipeline_model_parallel_layout": "Et|(tt|)*30L"}, world=16)
    assert got[0] == "E+0, 31-32"
    assert got[5] == "9-10, 41-42"
    assert got[15] == "29-30, L"


def test_llama31_405b_account_for_embedding_and_loss_with_vpp():
    """Llama-3.1-405B, 126 layers, PP 8 x VPP 2 with account_for_embedding/loss (recipes/llama/h100/llama3.py :
    llama31_405b_pretrain_256gpu_h100_bf16_config): 126 + 2 = 128 slots, 16 per stage, 8 per chunk. Chunk (0, 0)
    builds 8 - 1 = 7 layers, chunk (7, 1) 7 layers; offset = 64c + 8r - 1 except (0, 0):

        stage 0: E+0-6  | 63-70
        stage r: 8r-1 .. 8r+6 | 8r+63 .. 8r+70      (r = 1..6)
        stage 7: 55-62  | 119-125+L
    """
    got = labels({"num_layers": 126}, {"pipeline_model_parallel_size": 8, "virtual_pipeline_model_parallel_size": 2,
                                       "account_for_embedding_in_pipeline_split": True,
                                       "account_for_loss_in_pipeline_split": True})
    want = ["E+0-6, 63-70"] + [f"{8 * r - 1}-{8 * r + 6}, {8 * r + 63}-{8 * r + 70}" for r in range(1, 7)]
    want += ["55-62, 119-125+L"]
    assert got == want


def test_qwen3_235b_account_for_with_and_without_vpp():
    """Qwen3-235B-A22B, 94 layers, account_for_embedding/loss (96 slots).

    Pretrain recipe (recipes/qwen/h100/qwen3_moe.py : qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config), PP 16:
    6 slots per stage; stage 0 = E + 0-4, stage r = 6r-1 .. 6r+4, stage 15 = 89-93 + L.
    Performance recipe (perf_recipes/qwen/h100/qwen3_moe.py, same function name), PP 8 x VPP 4: 3 slots per
    chunk, offset = 24c + 3r - 1 except (0, 0): stage 0 = E+0-1 | 23-25 | 47-49 | 71-73, stage 7 =
    20-22 | 44-46 | 68-70 | 92-93+L.
    """
    acc = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    got = labels({"num_layers": 94}, {"pipeline_model_parallel_size": 16, **acc}, world=16)
    assert got == ["E+0-4"] + [f"{6 * r - 1}-{6 * r + 4}" for r in range(1, 15)] + ["89-93+L"]
    got = labels({"num_layers": 94}, {"pipeline_model_parallel_size": 8, "virtual_pipeline_model_parallel_size": 4,
                                      **acc})
    assert got[0] == "E+0-1, 23-25, 47-49, 71-73"
    assert got[3] == "8-10, 32-34, 56-58, 80-82"
    assert got[7] == "20-22, 44-46, 68-70, 92-93+L"


def test_uneven_first_and_last_stage_with_vpp():
    """14 layers, PP 4 x VPP 2, first 2, last 4: the middle 8 layers over 2 stages, 4 each; every chunk holds its
    stage's count / 2 = 1, 2, 2, 2. Megatron's offset: total per virtual stage 1 + 4 + 2 = 7; stage 0: 7c; stage r
    (middle rank r - 1): 7c + 1 + 2 (r - 1):

        stage 0: 0 | 7      stage 1: 1-2 | 8-9      stage 2: 3-4 | 10-11      stage 3: 5-6 | 12-13+L
    """
    got = labels({"num_layers": 14}, {"pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2,
                                      "num_layers_in_first_pipeline_stage": 2,
                                      "num_layers_in_last_pipeline_stage": 4})
    assert got == ["E+0, 7", "1-2, 8-9", "3-4, 10-11", "5-6, 12-13+L"]


def test_mtp_without_a_layout_sits_with_the_loss():
    """Without a layout Megatron builds the MTP layers on the last virtual stage of the last pipeline stage."""
    got = labels({"num_layers": 8, "mtp_num_layers": 2}, {"pipeline_model_parallel_size": 2,
                                                           "virtual_pipeline_model_parallel_size": 2})
    assert got == ["E+0-1, 4-5", "2-3, 6-7+m*2+L"]


def test_standalone_mtp_stage():
    """``Ett|tt|m|L`` on PP 2: 4 chunks = VPP 2; chunk 2 (stage 0, virtual stage 1) holds the MTP layer, on a
    stage before the last: Megatron's mtp_standalone. Bridge's _build_standalone_mtp_layout (recipes/deepseek/
    h100/deepseek_v3.py) makes this shape: decoder chunks, then [mtp], then [loss]."""
    cfg = load_config(make_config({**TINY, "mtp_num_layers": 1}, {"pipeline_model_parallel_size": 2,
                                  "pipeline_model_parallel_layout": "Ett|tt|m|L"}, {"world_size": 2}))
    plan = resolve(cfg).plan
    assert [c.label for c in estimate(cfg).stages] == ["E+0-1, m", "2-3, L"]
    assert plan[0].mtp == 1 and not plan[0].loss and plan[1].loss and plan[1].mtp == 0


@pytest.mark.parametrize("layers, parallelism, field, words", [
    (3, {"pipeline_model_parallel_layout": "Et|tt|L"}, "pipeline_model_parallel_layout", "not a multiple"),
    (3, {"pipeline_model_parallel_layout": "Et|t|t|L", "virtual_pipeline_model_parallel_size": 4},
     "virtual_pipeline_model_parallel_size", "conflicts"),
    (3, {"pipeline_model_parallel_layout": "t|Et|t|L"}, "pipeline_model_parallel_layout", "exactly one E"),
    (3, {"pipeline_model_parallel_layout": "Et|tt|L|"}, "pipeline_model_parallel_layout", "exactly one L"),
    (3, {"pipeline_model_parallel_layout": "Et|tt|t|L"}, "pipeline_model_parallel_layout", "holds 4 decoder"),
    (3, {"pipeline_model_parallel_layout": "Et|t|mt|L"}, "pipeline_model_parallel_layout", "holds 1 MTP"),
    (3, {"pipeline_model_parallel_layout": "Et|ttL", "num_layers_in_first_pipeline_stage": 1},
     "pipeline_model_parallel_layout", "cannot be combined"),
    (3, {"account_for_embedding_in_pipeline_split": True, "num_layers_in_last_pipeline_stage": 1},
     "account_for_embedding_in_pipeline_split", "cannot be combined"),
    (4, {"account_for_loss_in_pipeline_split": True}, "model.num_layers", "plus the embedding/loss slots"),
    (4, {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True,
         "virtual_pipeline_model_parallel_size": 2}, "virtual_pipeline_model_parallel_size", "layer slots"),
    (3, {"num_layers_in_first_pipeline_stage": 0}, "num_layers_in_first_pipeline_stage", "must be > 0"),
    (3, {"num_layers_in_first_pipeline_stage": 3}, "num_layers_in_first_pipeline_stage", "at least one layer"),
])
def test_rules_megatron_enforces(layers, parallelism, field, words):
    """PP 2; each case breaks exactly one of Megatron-Core's rules (TransformerConfig.__post_init__ and
    PipelineParallelLayerLayout.validate_layer_layout) and the error names the field and the rule."""
    cfg = make_config({**TINY, "num_layers": layers}, {"pipeline_model_parallel_size": 2, **parallelism},
                      {"world_size": 2})
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    probs = [p for p in exc.value.problems if p.field.endswith(field)]
    assert probs and words in probs[0].message, exc.value.problems


def test_mtp_rules_of_the_layout():
    """Megatron's validate_layer_layout: t before m, every m in one chunk, m in the last virtual stage."""
    def problems(layout, mtp):
        cfg = make_config({**TINY, "num_layers": 3, "mtp_num_layers": mtp},
                          {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": layout},
                          {"world_size": 2})
        with pytest.raises(ConfigError) as exc:
            load_config(cfg)
        return " ".join(p.message for p in exc.value.problems)
    assert "before the MTP layers" in problems("Et|t|mt|L", 1)
    assert "in one chunk" in problems("Et|tm|tm|L", 2)
    assert "last virtual stage" in problems("Etm|t|t|L", 1)


def test_pp2_vpp_with_both_uneven_stages_is_refused():
    """Megatron-Core's get_transformer_layer_offset divides by the middle stages (none with PP 2) under VPP."""
    cfg = make_config({**TINY, "num_layers": 8}, {"pipeline_model_parallel_size": 2,
                      "virtual_pipeline_model_parallel_size": 2, "num_layers_in_first_pipeline_stage": 4,
                      "num_layers_in_last_pipeline_stage": 4}, {"world_size": 2})
    with pytest.raises(ConfigError, match="middle stages"):
        load_config(cfg)


def test_layout_sets_the_virtual_stages():
    """The number of chunks / PP is VPP: Et|t|t|tL on PP 2 is VPP 2 without setting it."""
    r = resolve(load_config(make_config(TINY, {"pipeline_model_parallel_size": 2,
                                                "pipeline_model_parallel_layout": "Et|t|t|tL"}, {"world_size": 2})))
    assert r.v == 2 and [[list(c) for c in s] for s in r.stages] == [[[0], [2]], [[1], [3]]]


def test_placement_is_memoised():
    a = placement(61, 8, 4, None, None, False, False, "Et|(tt|)*30mL", 1)
    assert placement(61, 8, 4, None, None, False, False, "Et|(tt|)*30mL", 1) is a


def test_megatron_args_import_and_export_the_split_flags():
    """The importer takes the layout, account_for and group-size flags; the export writes them back (and no VPP
    flag beside a layout: Megatron-LM refuses the two together)."""
    base = ("pretrain_gpt.py --num-layers 61 --hidden-size 64 --num-attention-heads 4 --vocab-size 256 "
            "--seq-length 64 --position-embedding-type rope --mtp-num-layers 1 --pipeline-model-parallel-size 8 ")
    cfg, ignored = parse_megatron_args(base + "--pipeline-model-parallel-layout 'Et|(tt|)*30mL' "
                                       "--microbatch-group-size-per-virtual-pipeline-stage 16", world_size=8)
    assert cfg["parallelism"]["pipeline_model_parallel_layout"] == "Et|(tt|)*30mL" and not ignored
    assert cfg["parallelism"]["microbatch_group_size_per_vp_stage"] == 16
    out = to_megatron_args(cfg)
    assert out[out.index("--pipeline-model-parallel-layout") + 1] == "Et|(tt|)*30mL"
    assert "--num-virtual-stages-per-pipeline-rank" not in out
    assert out[out.index("--microbatch-group-size-per-virtual-pipeline-stage") + 1] == "16"
    with pytest.raises(ConfigError, match="accepts no --num-virtual-stages"):
        parse_megatron_args(base + "--pipeline-model-parallel-layout 'Et|(tt|)*30mL' "
                            "--num-virtual-stages-per-pipeline-rank 4", world_size=8)
    llama = base.replace("61", "126").replace("--mtp-num-layers 1 ", "")
    cfg, _ = parse_megatron_args(llama + "--account-for-embedding-in-pipeline-split "
                                 "--account-for-loss-in-pipeline-split --num-layers-per-virtual-pipeline-stage 8",
                                 world_size=8)
    assert cfg["parallelism"]["virtual_pipeline_model_parallel_size"] == 2     # (126 + 2) / 8 / 8
    out = to_megatron_args(cfg)
    assert {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"} <= set(out)


def test_search_keeps_the_layout_as_one_of_its_splits():
    """A layout string is the configuration's own split: the search places it wherever it applies (its 64 slots
    over PP x VPP = 8 x 4, or 2 x 16, ...) beside its own splits and ranks the configuration's layout; pinned, it is
    the only split searched."""
    from estimator import search
    cfg = make_config({**TINY, "num_layers": 61, "mtp_num_layers": 1},
                      {"pipeline_model_parallel_size": 8, "pipeline_model_parallel_layout": "Et|(tt|)*30mL"},
                      {"world_size": 8, "seq_length": 64, "global_batch_size": 64})
    res = search(cfg, num_gpus=8, gpu=2 ** 33, top=None, distinct=False)
    assert res.current.label == "TP1 PP8[layout] VPP4 DP1 mbs1 no-recompute" and res.current.fits
    placed = {l.label.split()[1] for l in res.layouts if "[layout]" in l.label}
    assert {"PP8[layout]", "PP2[layout]"} <= placed
    pinned = search(cfg, num_gpus=8, gpu=2 ** 33, top=None, pipeline_model_parallel_layout="Et|(tt|)*30mL")
    assert pinned.layouts and all("[layout]" in l.label for l in pinned.layouts)


def test_cli_layout_flag_replaces_the_other_split(capsys):
    """``--pipeline-model-parallel-layout`` on the command line replaces the configuration's uneven split (a note
    says so); the table shows each chunk in layout letters."""
    from estimator.cli.commands import main
    code = main(["estimate", "deepseek-v3", "--pp", "8", "--pipeline-model-parallel-layout", "Et*8|(t*8|)*6t*5mL",
                 "--num-gpus", "256", "--ep", "32"])
    out, err = capsys.readouterr()
    assert code == 0 and "dropped: the layout given" not in err        # the preset has no other split
    assert "E+0-7" in out and "56-60+m+L" in out
    code = main(["estimate", "deepseek-v3", "--num-layers-in-first-pipeline-stage", "8",
                 "--num-layers-in-last-pipeline-stage", "5", "--num-gpus", "256", "--ep", "32"])
    out, err = capsys.readouterr()
    assert code == 0 and "pipeline_model_parallel_layout dropped" in err and "56-60+m+L" in out


def test_a_layout_of_more_chunks_than_the_limit_is_refused_by_name():
    """16,385 chunks (one E chunk, 16,383 empty ones, one L chunk) on PP 1 are refused before anything is estimated
    (a 100,000-chunk layout took 2.7 s and a 10 MB calculator answer); the limit is the one the configuration
    page states."""
    from estimator.config.pipeline_layout import MAX_CHUNKS
    assert MAX_CHUNKS == 16_384
    cfg = make_config({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 1000},
                      {"pipeline_model_parallel_size": 1, "pipeline_model_parallel_layout": "Et|" + "|" * 16_383 + "tL"},
                      {"world_size": 1, "seq_length": 128})
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    assert "16,385 chunks" in str(exc.value) and "at most 16,384" in str(exc.value)
