"""Time a full, strict build of the documentation site (every preset page included).

Usage: ``python benchmarks/site_build.py [--runs N]``. Builds into a temporary directory with
``mkdocs build --strict`` (as the tests and CI do), ``N`` times (default 1), and prints the wall time of
each build and the time the estimator's tables hook spent rendering its markers (from its log line).
Target: at most 10 s for the whole site on a 2-core machine. Exits 1 if a build fails.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 10.0
HOOK_LINE = re.compile(r"estimator tables: (\d+) markers rendered in ([0-9.]+) s")


def build_once(site_dir: Path) -> tuple[float, str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                          cwd=ROOT, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(1)
    return elapsed, proc.stdout + proc.stderr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="number of builds (default 1)")
    args = ap.parse_args(argv)
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            elapsed, log = build_once(Path(tmp) / f"site{i}")
            pages = sum(1 for _ in (Path(tmp) / f"site{i}").rglob("index.html"))
            m = HOOK_LINE.search(log)
            hook = f"; tables hook {float(m.group(2)):.2f} s for {m.group(1)} markers" if m else ""
            print(f"build {i + 1}: {elapsed:.2f} s, {pages} pages{hook}")
            times.append(elapsed)
    best = min(times)
    print(f"site build: {best:.2f} s (best of {len(times)}; target <= {TARGET_S:.0f} s) on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
