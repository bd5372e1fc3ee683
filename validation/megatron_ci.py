"""Turn Megatron-LM's functional-test memory goldens into our validation data (validation/megatron_ci.yaml).

Developer tooling, not part of the estimator. Two commands:

    python validation/megatron_ci.py extract --mirror PATH [--revision REV]
        Read a local clone of NVIDIA/Megatron-LM (bare or not) at REV and rewrite the data file: one case
        per ``tests/functional_tests/test_cases/<family>/<case>/golden_values_dev_dgx_{h100,gb200}.json``
        that logs ``mem-max-allocated-bytes``, with the launch arguments (``MODEL_ARGS`` of its
        ``model_config.yaml``), the world size of the CI recipe that runs it
        (``tests/test_utils/recipes/<platform>/*.yaml``: ``spec.nodes`` x ``spec.gpus``), the logged rank
        and the per-step memory of the golden. Needs PyYAML (the docs environment has it).
    python validation/megatron_ci.py refresh
        Re-run our importer on every case of the data file and rewrite its ``importer:`` blocks (after an
        importer change; needs no mirror).

What is measured and what is ours stays apart in the file: ``measured:`` holds the golden's numbers as
they are; ``megatron_args`` the launch flags as the CI passes them (``true`` -> a bare switch, ``[a b]``
-> its words, as ``tests/functional_tests/shell_test_utils/_run_training.sh`` does); ``supplied_args``
the flags we add because Megatron reads them from a file we do not have (the tokenizer's vocabulary size),
each with its reason; ``recorded`` the commit that last changed the golden's memory values and the CI's PyTorch
container then (``docker/.ngc_version.dev`` at that commit); ``supplied_env`` the environment that container's
PyTorch behaved as, where ENV_VARS does not say it (:func:`_supplied_env`: the cuBLAS workspace default), with its
reason; ``files`` the text of the repository files a flag names that the importer reads
(``--tp-comm-overlap-cfg``), as they are at the revision; ``importer:`` the outcome of
:func:`estimator.formats.megatron_args.parse_megatron_args`.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from estimator.config import yamlio  # noqa: E402
from estimator.validation.megatron_ci import evaluate  # noqa: E402

DATA = ROOT / "validation" / "megatron_ci.yaml"
REPO = "NVIDIA/Megatron-LM"
CASES_DIR = "tests/functional_tests/test_cases"
RECIPES_DIR = "tests/test_utils/recipes"

#: The golden files used: the ``dev`` container on the two current CI platforms.
PLATFORMS = {
    "dgx_h100": ("h100", "NVIDIA H100 80GB HBM3 (DGX H100)"),
    "dgx_gb200": ("gb200", "NVIDIA GB200 (DGX GB200)"),
}
GOLDEN = re.compile(r"^golden_values_dev_(dgx_h100|dgx_gb200)\.json$")

#: Families whose training script is pretrain_gpt.py (our importer reads its arguments).
GPT_FAMILIES = ("gpt", "moe", "mixtral")

#: Vocabulary sizes of the tokenizers the tests load from files we do not have, as Megatron-LM's tokenizer
#: reports ``vocab_size`` (before padding). Key: (tokenizer type, basename of --tokenizer-model or
#: --vocab-file); value: (size, reason).
TOKENIZER_VOCAB = {
    ("GPT2BPETokenizer", "vocab.json"): (
        50257, "GPT-2 byte-level BPE (vocab.json): 256 bytes + 50,000 merges + <|endoftext|> = 50,257; "
        "pretrain_gpt.py defaults --tokenizer-type to GPT2BPETokenizer"),
    ("TikTokenizer", "multiMixV8.gpt4o_nc_sd.500000.128k.vocab.json"): (
        131072, "TikTokenizer without --vocab-size takes DEFAULT_TIKTOKEN_MAX_VOCAB = 2**17 = 131,072 "
        "(megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py)"),
    ("GPTSentencePieceTokenizer", "nemotron_2_256k.model"): (
        256000, "Nemotron-2 SentencePiece model with 256,000 pieces (get_piece_size)"),
    ("Llama2Tokenizer", "tokenizer.model"): (
        32000, "Llama-2 SentencePiece model with 32,000 pieces (get_piece_size)"),
    ("HuggingFaceTokenizer", "tokenizer"): (
        151669, "Qwen3 tokenizer: len(tokenizer) = 151,643 BPE tokens + 26 added special tokens = 151,669"),
}


def _git(mirror: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(mirror), *args], check=True, capture_output=True, text=True).stdout


def _show(mirror: Path, rev: str, path: str) -> str | None:
    try:
        return _git(mirror, "show", f"{rev}:{path}")
    except subprocess.CalledProcessError:
        return None


def launch_tokens(model_args: dict) -> list[str]:
    """MODEL_ARGS as the CI's _run_training.sh turns them into argv: ``true`` -> the bare flag, a value in
    square brackets -> its words, anything else -> the flag and its value (``false`` is passed as the word)."""
    out: list[str] = []
    for key, value in model_args.items():
        if value is True:
            out.append(key)
            continue
        if value is None or value == "":
            continue
        text = str(value).strip() if not isinstance(value, float) else repr(value)
        if value is False:
            text = "false"
        out.append(key)
        if re.fullmatch(r"\[[^]]+\]", text):
            out.extend(text[1:-1].split())
        else:
            out.append(text)
    return out


def _recipes(mirror: Path, rev: str, yaml) -> list[dict]:
    """Every recipe file: its path, platform folder, model family, nodes x gpus and active/commented cases."""
    out = []
    for path in _git(mirror, "ls-tree", "-r", "--name-only", rev, RECIPES_DIR).split():
        text = _show(mirror, rev, path)
        data = yaml.safe_load(text) if text else None
        if not isinstance(data, dict) or "spec" not in data:
            continue
        spec = data["spec"]
        rows = []
        for product in data.get("products") or []:
            for inner in product.get("products") or []:
                rows.append((product["test_case"][0], inner))
        commented = set(re.findall(r"#\s*-\s*test_case:\s*\[([^\]]+)\]", text))
        out.append({"path": path, "folder": path.split("/")[3], "model": spec.get("model"),
                    "nodes": spec.get("nodes"), "gpus": spec.get("gpus"), "rows": rows, "commented": commented,
                    "platforms": spec.get("platforms")})
    return out


def _world_size(recipes: list[dict], family: str, case: str, platform: str) -> tuple[int | None, str, str]:
    """(world size, recipe path, reason if unknown) for a case run on ``platform`` in the dev environment."""
    folder = PLATFORMS[platform][0]
    hits = []
    commented = []
    for r in recipes:
        if r["folder"] != folder or r["model"] != family:
            continue
        for name, inner in r["rows"]:
            if name != case:
                continue
            plats = inner.get("platforms", [r["platforms"]])
            envs = inner.get("environment", [])
            if platform in plats and "dev" in envs:
                hits.append(r)
        if case in r["commented"]:
            commented.append(r["path"])
    sizes = {(r["nodes"] * r["gpus"]) for r in hits}
    if len(sizes) == 1:
        r = hits[0]
        return r["nodes"] * r["gpus"], r["path"], ""
    if len(sizes) > 1:
        return None, ", ".join(r["path"] for r in hits), (
            "the case is listed in recipes with different world sizes: "
            + ", ".join(f"{r['path']} ({r['nodes']}x{r['gpus']})" for r in hits))
    if commented:
        return None, commented[0], f"only a commented-out entry in {', '.join(commented)} (not run at this revision)"
    return None, "", (f"no recipe under {RECIPES_DIR}/{folder}/ runs it on {platform} in the dev environment "
                      "(release tests run from recipes outside this repository)")


def _vocab(tokens: list[str]) -> tuple[list[str], str]:
    """(--vocab-size flag to add, reason), or ([], reason it cannot be known), or ([], '') when given."""
    flags = dict(zip(tokens, tokens[1:] + [""]))
    if "--vocab-size" in flags or "--padded-vocab-size" in flags:
        return [], ""
    kind = flags.get("--tokenizer-type", "GPT2BPETokenizer")
    source = flags.get("--tokenizer-model") or flags.get("--vocab-file") or ""
    key = (kind, source.rstrip("/").rsplit("/", 1)[-1])
    if key in TOKENIZER_VOCAB:
        size, _ = TOKENIZER_VOCAB[key]
        return ["--vocab-size", str(size)], f"vocabulary of {key[0]} {key[1]} (see tokenizer_vocabularies)"
    return [], f"the vocabulary size of tokenizer {kind} {source!r} is not known here"


#: Flags whose value is a file of the Megatron-LM repository that the importer reads (its text goes into the case).
FILE_FLAGS = ("--tp-comm-overlap-cfg",)


def _named_files(mirror: Path, rev: str, tokens: list[str]) -> dict:
    """{path: text} of the repository files the flags name (``--tp-comm-overlap-cfg``), read at ``rev``; the CI
    launches from the repository root, so the paths are relative to it."""
    out = {}
    for flag, value in zip(tokens, tokens[1:]):
        if flag in FILE_FLAGS:
            text = _show(mirror, rev, value)
            if text is not None:
                out[value] = text
    return out


#: The NGC PyTorch containers Megatron-LM's dev CI ran (docker/.ngc_version.dev over its history), by whether their
#: PyTorch gives Blackwell (compute capability 10.x) the 32 MiB cuBLAS workspace default. pytorch/pytorch PR #175344
#: (merged 2026-02-19) extended it from sm_90 to majors 9, 10 and 12 (CublasHandlePool.cpp parseChosenWorkspaceSize);
#: before it every other GPU had ``:4096:2:16:8`` (8 MiB + 128 KiB). An NGC container carries the PyTorch main of
#: the weeks before its month (25.12: 2.10.0a0), so 26.02 and older predate the PR and 26.04 has it. The goldens agree:
#: the GB200 golden of gpt3_mcore_te_tp2_pp2_cp2 (no CUBLAS_WORKSPACE_CONFIG) holds 885,446,144 B recorded under 26.02
#: (2026-04-14) and 935,777,792 B under 26.04 (2026-05-19), 48 MiB more, level with its H100 twin.
BLACKWELL_32MIB_CUBLAS = {
    "nvcr.io/nvidia/pytorch:25.09-py3": False, "nvcr.io/nvidia/pytorch:25.11-py3": False,
    "nvcr.io/nvidia/pytorch:26.02-py3": False, "nvcr.io/nvidia/pytorch:26.04-py3": True,
    "nvcr.io/nvidia/pytorch:26.06-py3": True,
}
#: The platforms whose GPU is a Blackwell (compute capability 10.x).
BLACKWELL_PLATFORMS = ("dgx_gb200",)


def _recorded(mirror: Path, rev: str, path: str) -> dict:
    """The golden's recording: the newest commit (up to ``rev``) that changed its ``mem-max-allocated-bytes`` or
    ``mem-allocated-bytes`` values (later commits only reformatted the file), its date, and the dev CI's container
    at that commit (``docker/.ngc_version.dev``; the golden was downloaded from that change's CI run)."""
    def memory(commit: str):
        text = _show(mirror, commit, path)
        data = json.loads(text) if text else {}
        return [(data.get(k) or {}).get("values") for k in ("mem-max-allocated-bytes", "mem-allocated-bytes")]
    commits = _git(mirror, "log", "--format=%H %cs", rev, "--", path).split("\n")
    found = None
    for line in filter(None, commits):
        commit, date = line.split()
        if found is not None and memory(commit) != memory(found[0]):
            break
        found = (commit, date)
    container = (_show(mirror, found[0], "docker/.ngc_version.dev") or "").strip() or None
    return {"commit": found[0][:10], "date": found[1], "container": container}


def _supplied_env(platform: str, env: dict, recorded: dict) -> tuple[dict, str]:
    """(environment to add, reason): for a Blackwell golden without CUBLAS_WORKSPACE_CONFIG recorded under a container
    whose PyTorch predates the 32 MiB Blackwell default, that PyTorch's default written out, ``:4096:2:16:8``."""
    if platform not in BLACKWELL_PLATFORMS or "CUBLAS_WORKSPACE_CONFIG" in env:
        return {}, ""
    container = recorded.get("container")
    if container not in BLACKWELL_32MIB_CUBLAS:
        raise SystemExit(f"{platform} golden recorded under {container!r}: add it to BLACKWELL_32MIB_CUBLAS")
    if BLACKWELL_32MIB_CUBLAS[container]:
        return {}, ""
    return {"CUBLAS_WORKSPACE_CONFIG": ":4096:2:16:8"}, (
        f"recorded under {container.rsplit('/', 1)[-1]}, whose PyTorch predates pytorch/pytorch PR #175344: with "
        "CUBLAS_WORKSPACE_CONFIG unset a Blackwell GPU had the :4096:2:16:8 default (8 MiB + 128 KiB per cuBLAS "
        "handle), which today's PyTorch gives only to GPUs before Hopper (see BLACKWELL_32MIB_CUBLAS)")


def _bytes(value) -> int | None:
    """A golden value as an integer byte count; None where the golden has no number ("nan")."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None


def _runs(steps: list[int], values: list) -> dict:
    """A per-step series, losslessly: the logged steps where the value changes, and the values from there on
    (null: no number logged)."""
    at, out = [], []
    for step, value in zip(steps, values):
        if not out or out[-1] != value:
            at.append(step)
            out.append(value)
    return {"from_step": at, "bytes": out}


def importer_outcome(case: dict) -> dict:
    """Our importer on the case's flags (estimator.validation.megatron_ci, as the tests and the site see it):
    estimable, or refused / invalid / no_world_size / incomplete with the reason."""
    ev = evaluate(case, notes=[])
    if ev.status == "compared":
        return {"status": "estimable"}
    return {"status": ev.status, "reason": ev.reason}


def extract(mirror: Path, rev: str) -> dict:
    import yaml   # developer tooling only: the estimator itself never needs PyYAML

    rev = _git(mirror, "rev-parse", rev).strip()
    short = rev[:8]
    recipes = _recipes(mirror, rev, yaml)
    files = _git(mirror, "ls-tree", "-r", "--name-only", rev, CASES_DIR).split()
    cases, skipped = [], []
    for path in files:
        parts = path.split("/")
        if len(parts) != 6 or not GOLDEN.match(parts[5]):
            continue
        family, name, platform = parts[3], parts[4], GOLDEN.match(parts[5]).group(1)
        golden = json.loads(_show(mirror, rev, path))
        if "mem-max-allocated-bytes" not in golden:
            continue
        where = f"{family}/{name} ({platform})"
        config_path = "/".join(parts[:5]) + "/model_config.yaml"
        text = _show(mirror, rev, config_path)
        if text is None:
            skipped.append({"case": where, "reason": "no model_config.yaml beside the golden values"})
            continue
        config = yaml.safe_load(text)
        if family not in GPT_FAMILIES:
            skipped.append({"case": where, "reason": f"family '{family}' does not train with pretrain_gpt.py "
                            "(BERT, T5, hybrid Mamba, multimodal): not a GPT model"})
            continue
        mode = config.get("MODE", "pretraining")
        if mode != "pretraining":
            skipped.append({"case": where, "reason": f"MODE {mode}: not a training run"})
            continue
        if "MODEL_ARGS" not in config or any(k.startswith("MODEL_ARGS_") for k in config):
            skipped.append({"case": where, "reason": "several MODEL_ARGS blocks (checkpoint-consistency test)"})
            continue
        world, recipe, why = _world_size(recipes, family, name, platform)
        golden_rev = _git(mirror, "log", "-1", "--format=%H", rev, "--", path).strip()
        env = {k: str(v) for k, v in (config.get("ENV_VARS") or {}).items()}
        recorded = _recorded(mirror, rev, path)
        supplied_env, env_why = _supplied_env(platform, env, recorded)
        tokens = launch_tokens(config["MODEL_ARGS"])
        supplied, vocab_why = _vocab(tokens)
        files = _named_files(mirror, rev, tokens)
        mem = golden["mem-max-allocated-bytes"]
        cur = golden.get("mem-allocated-bytes", {})
        steps = sorted(int(k) for k in mem["values"])
        per_step = [_bytes(mem["values"][str(s)]) for s in steps]
        current = [_bytes(cur["values"].get(str(s))) for s in steps] if cur else None
        case = {
            "id": f"mlm-{family}-{name}-{PLATFORMS[platform][0]}",
            "family": family,
            "test_case": name,
            "platform": platform,
            "gpu": PLATFORMS[platform][1],
            "test_type": config.get("TEST_TYPE"),
            "sources": {
                "model_config": f"{REPO} @ {short} : {config_path}",
                "golden": f"{REPO} @ {golden_rev[:8]} : {path}",
                "recipe": f"{REPO} @ {short} : {recipe}" if recipe else None,
            },
            "world_size": world,
            "world_size_reason": why or None,
            "logged_rank": world - 1 if world else None,
            "megatron_args": shlex.join(tokens),
            "files": files or None,
            "env": env,
            "recorded": recorded,
            "supplied_args": supplied or None,
            "supplied_reason": vocab_why if supplied else None,
            "supplied_env": supplied_env or None,
            "supplied_env_reason": env_why or None,
            "unsupplied": vocab_why if not supplied and vocab_why else None,
            "measured": {
                "unit": "bytes",
                "logged_steps": {"first": steps[0], "last": steps[-1], "interval": mem.get("step_interval"),
                                 "count": len(steps)},
                "max_allocated_bytes_runs": _runs(steps, per_step),
                # (the .current series only where the case can be estimated: it helps to find what a miss is)
                "allocated_bytes_runs": _runs(steps, current) if current and world else None,
                "peak_allocated_bytes": max(v for v in per_step if v is not None),
            },
        }
        case = {k: v for k, v in case.items() if v is not None}
        case["importer"] = importer_outcome(case)
        cases.append(case)
    cases.sort(key=lambda c: c["id"])
    return {"revision": rev, "cases": cases, "skipped": sorted(skipped, key=lambda s: s["case"])}


HEADER = """\
# Megatron-LM functional-test memory goldens, as validation cases for the estimator (HELD-OUT data: no constant
# of the model is fitted to these runs; their misses were investigated, and model fixes derived from
# Megatron-Core's code, see docs/validation.md).
# Generated by `python validation/megatron_ci.py extract --mirror <Megatron-LM clone>`; do not edit by hand.
# Source: NVIDIA/Megatron-LM @ {rev}, tests/functional_tests/test_cases/<family>/<case>/
#   model_config.yaml (MODEL_ARGS: the pretrain_gpt.py flags; ENV_VARS) and golden_values_dev_dgx_{{h100,gb200}}.json
#   (tensorboard scalars of the LAST rank, megatron/training/global_vars.py: the writer exists on rank
#   world_size - 1 only; logged after every step by megatron/training/training.py training_log).
#   World size: spec.nodes x spec.gpus of the CI recipe that runs the case on that platform
#   (tests/test_utils/recipes/<h100|gb200>/*.yaml).
# MEASURED: `measured:` (bytes, as the golden stores them). OURS: `megatron_args` (the CI's argv rules),
#   `supplied_args` (flags Megatron reads from a tokenizer file we do not have, with the reason), `supplied_env`
#   (what the recording container's PyTorch defaulted to where ENV_VARS is silent, with the reason), `importer`.
# RECORDED: `recorded` (the commit that last changed the golden's memory values, its date, and the dev CI's PyTorch
#   container then, docker/.ngc_version.dev at that commit).
# SOURCE TEXT: `files` (the repository files a flag names that the importer reads, e.g. --tp-comm-overlap-cfg,
#   copied as they are at the revision).
# measured.max_allocated_bytes_runs / allocated_bytes_runs: torch.cuda.memory_stats() allocated_bytes.all.peak
#   (mem-max-allocated-bytes) and .current (mem-allocated-bytes) on the logged rank after each logged step,
#   run-length coded: from_step[i] is the first logged step with the value bytes[i].
# Units: bytes.
"""


def write(data: dict) -> None:
    vocab = [{"tokenizer_type": k[0], "file": k[1], "vocab_size": v[0], "reason": v[1]}
             for k, v in TOKENIZER_VOCAB.items()]
    body = {"source": {"repository": REPO, "revision": data["revision"]}, "tokenizer_vocabularies": vocab,
            "cases": data["cases"], "skipped": data["skipped"]}
    DATA.write_text(HEADER.format(rev=data["revision"]) + yamlio.dump(body), encoding="utf-8")


def refresh() -> None:
    data = yamlio.load(DATA.read_text(encoding="utf-8"))
    for case in data["cases"]:
        case["importer"] = importer_outcome(case)
    write({"revision": data["source"]["revision"], "cases": data["cases"], "skipped": data.get("skipped", [])})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract", help="rewrite the data file from a Megatron-LM clone")
    ex.add_argument("--mirror", type=Path, required=True, help="a clone (bare or not) of NVIDIA/Megatron-LM")
    ex.add_argument("--revision", default="HEAD")
    sub.add_parser("refresh", help="re-run the importer on every case of the data file")
    args = ap.parse_args(argv)
    if args.cmd == "extract":
        data = extract(args.mirror, args.revision)
        write(data)
    else:
        refresh()
        data = yamlio.load(DATA.read_text(encoding="utf-8"))
    counts: dict = {}
    for c in data["cases"]:
        counts[c["importer"]["status"]] = counts.get(c["importer"]["status"], 0) + 1
    print(f"{len(data['cases'])} cases ({counts}), {len(data['skipped'])} skipped -> {DATA.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
