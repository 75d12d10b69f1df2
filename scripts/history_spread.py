"""What between-run spread history mode (`--reference=none`) needs to pass an unchanged build within 5 %.

Without a reference, a latency metric of this run is compared with the last k stored runs of this machine
(`specgate.comparison.history`): the estimate is this run's level minus the history's mean (log scale), its standard
error the runs' spread s times √(1 + 1/k) (a prediction interval: one run of the candidate differs from the mean by
that spread however many runs are stored), and `specgate.stats.decision.decide` passes it when estimate +
t(1 − α, k − 1) · se < log(1 + tolerance), α the policy's (one look in history mode).

Per history size k this prints, with the gate's defaults (α 0.01, tolerance 5 %):
- the largest spread at which an unchanged run exactly at the history's mean passes (bisected on `decide` itself);
- the largest spread at which an unchanged run passes in `--pass` (95 %) of runs, the spread being what both the
  stored runs and this one are drawn with (seeded simulation of the same formula, 20 000 draws per point).

    python scripts/history_spread.py
    python scripts/history_spread.py --alpha 0.01 --tolerance 0.05 --runs 3,5,10,20
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np

from specgate.config import GatePolicy, SlaLimits
from specgate.stats.decision import decide, t_quantile

RUNS = (3, 5, 10, 20)  # gate.min_history_runs (3), gate.history_runs (5), longer histories
DRAWS = 20_000


def passes(estimate: float, spread: float, runs: int, alpha: float, tolerance: float) -> bool:
    """The gate's decision on one run against a history of `runs` runs with between-run spread `spread` (log)."""
    se = spread * math.sqrt(1 + 1 / runs)
    decision = decide(
        estimate, se, runs - 1, threshold=math.log1p(tolerance), alpha_block=alpha, alpha_pass=alpha, n=runs
    )
    return decision.outcome == "PASS"


def spread_at_the_mean(runs: int, alpha: float, tolerance: float) -> float:
    """The largest spread (log) at which a run exactly at the history's mean passes: bisected on `decide`."""
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if passes(0.0, middle, runs, alpha, tolerance) else (low, middle)
    return low


def pass_rate(spread: float, runs: int, alpha: float, tolerance: float, seed: int = 0) -> float:
    """How often an unchanged run passes when it and the `runs` stored ones vary by `spread` (log) from run to run."""
    rng = np.random.default_rng(seed)
    levels = rng.normal(0.0, spread, size=(DRAWS, runs))
    now = rng.normal(0.0, spread, size=DRAWS)
    estimate = now - levels.mean(axis=1)
    se = levels.std(axis=1, ddof=1) * math.sqrt(1 + 1 / runs)
    upper = estimate + t_quantile(1 - alpha, runs - 1) * se
    return float(np.mean(upper < math.log1p(tolerance)))


def spread_for(probability: float, runs: int, alpha: float, tolerance: float) -> float:
    """The largest spread (log) at which an unchanged run passes with `probability` (bisected, common draws)."""
    low, high = 0.0, spread_at_the_mean(runs, alpha, tolerance)
    for _ in range(30):
        middle = (low + high) / 2
        low, high = (middle, high) if pass_rate(middle, runs, alpha, tolerance) >= probability else (low, middle)
    return low


def table(runs: Sequence[int], alpha: float, tolerance: float, probability: float) -> list[str]:
    lines = [
        f"| stored runs k | t(1−α, k−1)·√(1+1/k) | max spread, run at the mean | max spread, {probability:.0%} of "
        "unchanged runs pass |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for k in runs:
        factor = t_quantile(1 - alpha, k - 1) * math.sqrt(1 + 1 / k)
        at_mean = math.expm1(spread_at_the_mean(k, alpha, tolerance))
        likely = math.expm1(spread_for(probability, k, alpha, tolerance))
        lines.append(f"| {k} | {factor:.2f} | {at_mean:.2%} | {likely:.2%} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    policy, sla = GatePolicy(), SlaLimits()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alpha", type=float, default=policy.alpha, help="gate.alpha (default %(default)s)")
    parser.add_argument("--tolerance", type=float, default=sla.regression_tolerance, help="regression_tolerance")
    parser.add_argument("--runs", default=",".join(map(str, RUNS)), help="history sizes, comma-separated (≥ 2)")
    parser.add_argument("--pass", dest="probability", type=float, default=policy.pass_probability)
    args = parser.parse_args(argv)
    runs = [int(r) for r in args.runs.split(",") if r]
    if not runs or min(runs) < 2 or not 0 < args.alpha < 1 or not 0 < args.tolerance < 1:
        parser.error("runs must be ≥ 2, alpha and tolerance in (0, 1)")
    print(
        f"history mode: one look, α {args.alpha}, tolerance {args.tolerance:.0%}; spread = the between-run standard "
        "deviation of a metric's level (relative)"
    )
    print("\n".join(table(runs, args.alpha, args.tolerance, args.probability)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
