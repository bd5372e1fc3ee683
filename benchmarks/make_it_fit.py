"""Speed of "Make it fit" in CPython, and a check that a change to it leaves every answer as it was.

"Make it fit" (estimator.plan.suggest, the calculator's ``suggest`` request) is timed on the calculator benchmark's
cases (benchmarks/calculator.py PLAN_CASES: they do not fit): the request as the page sends it
(estimator.web.plan.suggestions), after one untimed call, fastest wall time and least CPU time of ``--repeat`` runs
(on a shared machine the CPU time is the steadier), with the candidate configurations read and estimated.
The calculator's own target (<= 500 ms in the page, under Pyodide) is benchmarks/calculator.py's.

``--dump FILE`` writes every answer, in full, for every preset on custom GPUs of 16, 24, 40 and 80 GiB, and on 24
and 80 GiB with the reserved memory replayed through the allocator, without the distributed optimizer and sequence
parallelism, and without recomputation; plus the CLI's call (24 GiB) with keep_free 0 and 0.1 and with
num_microbatches 64. Run it before and after a change, from each tree, then ``--compare BEFORE AFTER`` counts the
answers that differ (a speed change should leave none):

    python benchmarks/make_it_fit.py [--repeat 5]
    python benchmarks/make_it_fit.py --dump /tmp/after.jsonl
    python benchmarks/make_it_fit.py --compare /tmp/before.jsonl /tmp/after.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = (("Qwen3 8B on a 16 GiB GPU", {"preset": "qwen3-8b", "values": {}, "gpu": "custom", "gpu_gib": "16"}),
         ("Qwen2.5-72B recipe on H100-80GB", {"preset": "qwen2.5-72b", "values": {}, "gpu": "H100-80GB"}),
         ("Llama 3.1 405B at 128K tokens on H100-80GB", {"preset": "llama-3.1-405b", "values": {}, "gpu": "H100-80GB"}),
         ("DeepSeek-V3 recipe on A100-40GB", {"preset": "deepseek-v3", "values": {}, "gpu": "A100-40GB"}))
GIBS = ("16", "24", "40", "80")
VARIANTS = {"replay": {"training.reserved_memory_model": "replay"},
            "no distributed optimizer": {"training.use_distributed_optimizer": "false",
                                         "training.sequence_parallel": "false"},
            "no recompute": {"training.recompute_granularity": "none"}}


def _counted(fn):
    """fn() with the candidate configurations read and the estimates assembled counted."""
    from estimator.memory import assemble
    from estimator.plan import candidates
    counts = collections.Counter()
    read, assembled = candidates.Candidates._config, assemble._assemble

    def _config(self, cfg):
        counts["read"] += 1
        return read(self, cfg)

    def _assemble(*args):
        counts["estimated"] += 1
        return assembled(*args)

    candidates.Candidates._config, assemble._assemble = _config, _assemble
    try:
        fn()
    finally:
        candidates.Candidates._config, assemble._assemble = read, assembled
    return counts


def timings(repeat: int) -> None:
    from estimator.web.plan import suggestions
    print(f"Make it fit (estimator.web.plan.suggestions), Python {sys.version.split()[0]}, best of {repeat}")
    for label, state in CASES:
        suggestions(state)
        wall, cpu = [], []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            res = suggestions(state)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        n = _counted(lambda: suggestions(state))
        print(f"{label:44s} {min(wall) * 1000:7.1f} ms wall {min(cpu) * 1000:7.1f} ms CPU   "
              f"{len(res.get('suggestions', []))} suggestions, {n['read']} candidates read, {n['estimated']} estimated")


def dump(path: str) -> None:
    from estimator.plan.suggest import suggest_with_reasons
    from estimator.web.plan import suggestions
    from estimator.web.state import merged_config
    presets = sorted(p.stem for p in (ROOT / "presets").glob("*.yaml"))
    rows = []
    for p in presets:
        for name, values in {"default": {}, **VARIANTS}.items():
            for gib in GIBS if name == "default" else ("24", "80"):
                state = {"preset": p, "values": values, "gpu": "custom", "gpu_gib": gib}
                rows.append((f"{p} | {name} | {gib} GiB", lambda s=state: suggestions(s)))
        cfg, _ = merged_config({"preset": p, "values": {}})
        for keep_free, m in ((0.0, None), (0.1, None), (0.05, 64)):
            def cli(cfg=cfg, keep_free=keep_free, m=m):
                found, why = suggest_with_reasons(cfg, 24 * 2**30, keep_free=keep_free, num_microbatches=m)
                return {"suggestions": [s.to_dict() for s in found], "not_proposed": why}
            rows.append((f"{p} | CLI keep_free {keep_free} num_microbatches {m} | 24 GiB", cli))
    t0 = time.perf_counter()
    with open(path, "w", encoding="utf-8") as f:
        for case, fn in rows:
            try:
                answer = fn()
            except Exception as exc:                    # an answer too: it must not change either
                answer = {"exception": repr(exc)}
            f.write(json.dumps({"case": case, "answer": answer}, sort_keys=True, default=repr) + "\n")
    print(f"{len(rows)} answers written to {path} in {time.perf_counter() - t0:.0f} s")


def compare(before: str, after: str) -> int:
    a, b = ([json.loads(line) for line in open(p, encoding="utf-8")] for p in (before, after))
    if [x["case"] for x in a] != [x["case"] for x in b]:
        print("the two files hold different cases")
        return 1
    diff = [x["case"] for x, y in zip(a, b) if x != y]
    listed = sum(1 for x in a if x["answer"].get("suggestions"))
    print(f"{len(a)} answers compared ({listed} with suggestions): {len(diff)} differ")
    for case in diff[:20]:
        print("  differs:", case)
    return 1 if diff else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per case (the best is printed)")
    ap.add_argument("--dump", metavar="FILE", help="write every answer of the check set to FILE (JSON lines)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="count the answers that differ")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.dump:
        dump(args.dump)
        return 0
    timings(args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
