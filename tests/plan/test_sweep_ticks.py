"""The sweeps' x ticks (issue 29): plain counts with thousands separators (8,192 tokens, not 8Ki), at least a
fifth of the axis apart so that written out in full they never touch."""

from estimator.web import plan


def test_ticks_are_plain_counts_spread_apart():
    for preset in ("llama-3-70b", "qwen3-8b", "deepseek-v3"):
        res = plan.sweeps({"preset": preset, "values": {}, "gpu": "H100-80GB"})
        for s in res["series"]:
            labels = [t["label"] for t in s["x_ticks"]]
            assert all(lbl.replace(",", "").isdigit() for lbl in labels), labels
            pos = [t["pos"] for t in s["x_ticks"]]
            assert pos[0] == 0 and pos[-1] == 1 and all(b - a >= 0.2 for a, b in zip(pos, pos[1:])), (preset, pos)
    seq = next(s for s in plan.sweeps({"preset": "llama-3-70b", "values": {}, "gpu": "H100-80GB"})["series"]
               if s["name"] == "seq_length")
    assert "8,192" in [t["label"] for t in seq["x_ticks"]] and seq["unit"] == "tokens"
