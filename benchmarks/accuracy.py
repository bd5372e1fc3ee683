"""Estimated against measured peak memory for every case of validation/measured.yaml.

Prints case, measured, estimated, error %, and the median and max absolute error, separately for the
precise cases (SimuMax B200 runs with full launch configurations) and for all cases.

    python benchmarks/accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from estimator.validation import compare_case, load_cases, summary  # noqa: E402


def main() -> int:
    rows = [compare_case(c) for c in load_cases()]
    print(f"{'case':58} {'measured GiB':>12} {'estimated GiB':>13} {'error %':>8}  precise")
    for r in rows:
        print(f"{r.id:58} {r.measured_gib:12.2f} {r.estimated_gib:13.2f} {r.error_pct:+8.2f}  "
              f"{'yes' if r.precise else 'no (assumed fields)'}")
    s = summary(rows)
    for name, v in s.items():
        print(f"{name:8} cases {v['cases']:3}  median |error| {v['median_abs_error_pct']:.2f} %  "
              f"max |error| {v['max_abs_error_pct']:.2f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
