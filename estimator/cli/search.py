"""The ``search`` subcommand: the parallel layouts of a model that fit a GPU, best first.

    python -m estimator search deepseek-v3 --num-gpus 1024 --gpu H100-80GB
    python -m estimator search llama-3-70b --num-gpus 64 --gpu H100-80GB --seq-length 8192 --top 5 --json
    python -m estimator search --hf path/to/config.json --num-gpus 32,64 --gpu-memory 80 --fix tp=8
    python -m estimator search llama-3-8b --gpu H100-80GB --min-gpus
    python -m estimator search my-layout.yaml --gpu H100-80GB --max-mbs      (the layout as written)

``add_parser(subparsers)`` registers the subcommand (estimator/cli/commands.py calls it); ``run(args)`` returns the
exit code: 0, or 2 after printing the problems of bad input (no traceback). The table is in GiB (2^30 B).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..config.errors import ConfigError, EstimatorError, n_gpus
from ..memory.report import GIB

__all__ = ["add_parser", "main", "run"]

_SHORT = {"recompute": "recompute", "tensor_parallel": "TP", "context_parallel": "CP", "expert_all_to_all": "EP a2a",
          "kernel_launch": "launch", "weight_reads": "weight reads", "pipeline_bubble": "bubble",
          "pipeline_p2p": "PP p2p", "data_parallel": "DP sync"}


def _ints(text: str) -> tuple:
    try:
        vals = tuple(int(x) for x in text.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _names(text: str) -> tuple:
    return tuple(x for x in text.replace(",", " ").split() if x)


def _fraction(text: str) -> float:
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction (0.05) or a percentage (5%), got {text!r}") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"the headroom (keep_free) must be in [0, 1) (or 0-99%), got {text!r}")
    return v


def _percent(text: str) -> float:
    """--keep-free PCT (5 or 5%) as a fraction."""
    try:
        v = float(text.strip().removesuffix("%"))
    except ValueError:
        v = -1.0
    if not 0 <= v < 100:
        raise argparse.ArgumentTypeError(f"keep_free is a percent of the GPU memory in [0, 100), got {text!r}")
    return v / 100


def _scalar(text: str):
    """One value as a YAML file spells it (true/True/TRUE, false, null/~, integers, numbers), else the text;
    ``none`` is null too, as everywhere on the command line."""
    from ..config.yamlio import YamlError, load
    if text.lower() == "none":
        return None
    try:
        return load(f"v: {text}\n")["v"]
    except (YamlError, ValueError, TypeError, KeyError):
        return text


def _value(text: str):
    """A --fix value: one value or a comma-separated list of them, each spelled as in YAML (so a boolean field
    takes ``true,false``). A layout string keeps its commas (they are cosmetic in Megatron's grammar)."""
    raw = text.strip()
    if "|" in raw or "(" in raw:
        return raw
    out = [_scalar(p) for p in raw.replace(",", " ").split() if p]
    return out if len(out) > 1 else (out[0] if out else raw)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``search`` on an ``argparse`` sub-parser collection."""
    p = subparsers.add_parser(
        "search", help="find the parallel layouts that fit a GPU, best first",
        description="Enumerate every valid TP/PP/VPP/CP/EP/ETP layout, recompute option and micro-batch size, "
        "keep those whose peak device memory fits the GPU by the fit rule (upper bound plus what is kept free), and rank them by a simple "
        "cost model (pipeline bubble, TP/CP/EP/DP traffic inside or across nodes, recompute).")
    p.add_argument("source", nargs="?", help="preset name or configuration file (.yaml/.yml/.json)")
    p.add_argument("--hf", metavar="PATH", help="a Hugging Face config.json (or its directory) instead")
    p.add_argument("--num-gpus", type=_ints, metavar="N[,N...]", help="GPU count(s) to search")
    p.add_argument("--gpu", help="GPU name, e.g. H100-80GB")
    p.add_argument("--gpu-memory", type=float, metavar="GIB", help="GPU memory in GiB instead of --gpu")
    p.add_argument("--seq-length", type=int, metavar="TOKENS")
    p.add_argument("--gbs", "--global-batch-size", dest="gbs", type=int, metavar="SEQUENCES")
    p.add_argument("--mbs", type=_ints, default=(1, 2, 4), metavar="B[,B...]",
                   help="micro-batch sizes to try (default 1,2,4)")
    p.add_argument("--recompute", type=_names, default=("none", "selective", "full"),
                   help="recompute options to try (default none,selective,full)")
    p.add_argument("--keep-free", dest="keep_free", type=_percent, default=0.0, metavar="PCT",
                   help="percent of the GPU memory kept free on top of each layout's upper bound (the estimate plus "
                   "its measured error band), as in `estimate --keep-free` (default 0)")
    p.add_argument("--headroom", dest="keep_free", type=_fraction, help="the old form of --keep-free: a fraction "
                   "(0.05) or a percentage (5%%)")
    p.add_argument("--max-tp", type=int, default=8, help="largest TP and expert TP (default 8, one node)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--top", type=int, default=10, help="layouts to show (default 10)")
    p.add_argument("--all", action="store_true", help="show every layout that fits (the best 10,000 at most)")
    p.add_argument("--variants", action="store_true",
                   help="list every split/recompute/micro-batch variant, not only the best per parallel shape")
    p.add_argument("--fix", action="append", default=[], metavar="FIELD=VALUE",
                   help="pin a field to a value or a comma-separated list, spelled as in YAML: tp=8, cp=1,2, ep=8, "
                   "pp=4, recompute_num_layers=1,2, use_distributed_optimizer=true,false, fp8=true (repeatable)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    q = p.add_mutually_exclusive_group()
    q.add_argument("--min-gpus", action="store_true", help="the fewest GPUs (powers of two) on which a layout fits")
    q.add_argument("--max-mbs", action="store_true", help="the largest micro-batch that fits the layout as written")
    q.add_argument("--max-seq-length", action="store_true",
                   help="the longest sequence that fits the layout as written")
    p.set_defaults(func=run, handler=run)
    return p


def _source(args) -> object:
    if args.hf and args.source:
        raise ConfigError([_p("source", args.source, "give a preset/config or --hf, not both")])
    if args.hf:
        from ..formats.hf import from_hf_config
        return {"model": from_hf_config(args.hf)}
    if not args.source:
        raise ConfigError([_p("source", None, "give a preset name, a configuration file or --hf PATH")])
    return args.source


def _p(field, value, message):
    from ..config.errors import Problem
    return Problem(field, value, message)


def _gpu(args):
    if args.gpu and args.gpu_memory is not None:
        raise ConfigError([_p("gpu", args.gpu, "give --gpu or --gpu-memory, not both")])
    if args.gpu_memory is not None:
        if not 0 < args.gpu_memory <= 2 ** 20:
            raise ConfigError([_p("gpu_memory", args.gpu_memory, f"must be a positive number of GiB, at most "
                                  f"{2 ** 20:,} (1 PiB), got {args.gpu_memory}")])
        return int(args.gpu_memory * GIB)
    if not args.gpu:
        raise ConfigError([_p("gpu", None, "give --gpu NAME (e.g. H100-80GB) or --gpu-memory GIB")])
    return args.gpu


def _fixed(args) -> dict:
    out = {}
    for item in args.fix:
        if "=" not in item:
            raise ConfigError([_p("fix", item, "expected FIELD=VALUE, e.g. tp=8")])
        k, v = item.split("=", 1)
        out[k.strip().replace("-", "_")] = _value(v)
    return out


def _layout_config(args, source) -> dict:
    """The configuration for the reverse questions on a fixed layout, with the command-line overrides."""
    from ..plan.space import source_dict
    data = source_dict(source)
    tr = data.setdefault("training", {}) or {}
    data["training"] = tr
    if args.num_gpus:
        if len(args.num_gpus) > 1:
            raise ConfigError([_p("num_gpus", list(args.num_gpus), "give one GPU count for a fixed layout")])
        tr["world_size"] = args.num_gpus[0]
    if args.seq_length:
        tr["seq_length"] = args.seq_length
    if args.gbs:
        tr["global_batch_size"] = args.gbs
    for k, v in _fixed(args).items():
        from ..config.schema import field_specs
        from ..plan.space import OPTION_ALIASES
        name = OPTION_ALIASES.get(k, k)
        sec = {s.name: s.section for s in field_specs()}.get(name)
        if sec is None:
            raise ConfigError([_p(f"fix.{k}", v, "unknown field")])
        data.setdefault(sec, {})[name] = v
    return data


def _short_why(costs: dict) -> str:
    items = sorted(((x, k) for k, x in costs.items() if k != "compute" and x >= 0.0005), reverse=True)[:3]
    return ", ".join(f"{_SHORT[k]} +{x:.1%}" for x, k in items) or "no overheads"


def _table(layouts) -> list[str]:
    rows = [("#", "layout", "peak GiB", "headroom GiB", "bubble", "step time", "why ranked")]
    for lay in layouts:
        rows.append((str(lay.rank), lay.label, f"{lay.peak_device_bytes / GIB:.1f}",
                     f"{lay.headroom_bytes / GIB:.1f} ({lay.headroom_fraction:.0%})", f"{lay.bubble:.1%}",
                     f"x{lay.cost:.3f}", _short_why(lay.costs)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {0, 2, 3, 4, 5}
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def _print_result(res, name: str, out) -> None:
    counts = ", ".join(str(n) for n in res.num_gpus)
    gbs = res.global_batch_size if res.global_batch_size is not None else "about 4 Mi tokens"
    print(f"{name} on {counts} x {res.gpu['name']} ({res.capacity_bytes / GIB:.1f} GiB; a layout fits when its "
          f"peak device memory is at most {res.rule}); seq {res.seq_length}, global batch {gbs}", file=out)
    print(res.summary(), file=out)
    if res.layouts:
        print(file=out)
        for line in _table(res.layouts):
            print(line, file=out)
        print(file=out)
        print(f"#1: {res.layouts[0].why}", file=out)
    if res.current is not None:
        print(res.current.text, file=out)
    for note in res.notes:
        print(f"note: {note}", file=out)


def _print_answer(ans, out) -> None:
    value = "none" if ans.value is None else ans.value
    print(f"{ans.question}: {value}: {ans.reason}", file=out)
    if ans.layout is not None:
        lay = ans.layout
        print(f"layout: {lay.label} on {n_gpus(lay.num_gpus)}, peak {lay.peak_device_bytes / GIB:.1f} GiB "
              f"({lay.headroom_fraction:.0%} free)", file=out)
        print(f"tried: {', '.join(f'{v} ({chr(10003) if ok else chr(10007)})' for v, ok in ans.tried)}", file=out)


def run(args, out=None) -> int:
    """Run the subcommand for parsed ``args``; the exit code (2 on bad input)."""
    out = out or sys.stdout
    from ..plan.search import Answer, max_micro_batch, max_seq_length, min_gpus, search
    try:
        source = _source(args)
        gpu = _gpu(args)
        if args.max_mbs or args.max_seq_length:
            data = _layout_config(args, source)
            if args.max_mbs:
                ans = max_micro_batch(data, gpu=gpu, keep_free=args.keep_free, gpus_per_node=args.gpus_per_node)
            else:
                ans = max_seq_length(data, gpu=gpu, keep_free=args.keep_free, gpus_per_node=args.gpus_per_node)
            result = ans
        else:
            kw = dict(gpu=gpu, seq_length=args.seq_length, global_batch_size=args.gbs, micro_batch_sizes=args.mbs,
                      keep_free=args.keep_free, max_tp=args.max_tp, gpus_per_node=args.gpus_per_node,
                      recompute=args.recompute, distinct=not args.variants, **_fixed(args))
            if args.min_gpus:
                result = min_gpus(source, candidates=args.num_gpus, **kw)
            else:
                if not args.num_gpus:
                    raise ConfigError([_p("num_gpus", None, "give --num-gpus N (or ask --min-gpus)")])
                if args.top < 1:
                    raise ConfigError([_p("top", args.top, "must be a positive integer")])
                result = search(source, num_gpus=args.num_gpus, top=None if args.all else args.top, **kw)
    except ConfigError as exc:
        print("error: " + "\n  ".join(str(p) for p in exc.problems), file=sys.stderr)
        return 2
    except (EstimatorError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_dict(), indent=2), file=out)
    elif isinstance(result, Answer):
        _print_answer(result, out)
    else:
        _print_result(result, args.source or args.hf, out)
    return 0


def main(argv=None) -> int:
    """``python -m estimator.cli.search ...``: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="estimator")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
