"""The accuracy rule's error rates on the shipped probe sizes: how often it blocks a change with no accuracy cost that
flips answers, and how often it catches a real drop — exactly, not by sampling.

A change is modelled per problem: each of n problems is broken (right before, wrong now) with probability p_b,
fixed with probability p_f, else unchanged, independently. "Equal accuracy, 10 % flips" is p_b = p_f = 0.05; a real
drop δ with flips f is p_b = (f + δ) / 2, p_f = (f − δ) / 2. Every outcome (broken, fixed) is judged by the gate's own
`specgate.accuracy.decide_accuracy` on per-problem results built for it, and weighted by its multinomial probability
(outcomes beyond 1e-12 of the mass are left out), so the rates are the rule's, to that precision. The old rule (block
when the point estimate drops more than the limit) is computed beside it.

    python scripts/accuracy_rule_rates.py            # the table in docs/statistics.md (limit 3 points)
    python scripts/accuracy_rule_rates.py --limit 0.05 --sizes 40,200
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from scipy import stats

from specgate.accuracy import TaskAccuracy, decide_accuracy

SIZES = (12, 80, 200, 240)  # the old ref_math and ref_fields; the public sets' limit; the shipped probes now
FLIPS = 0.10


def _results(n: int, broken: int, fixed: int) -> tuple[TaskAccuracy, TaskAccuracy]:
    """Before and after on n problems: `broken` right → wrong, `fixed` wrong → right, the rest right in both
    (the rule reads only the changed answers and the accuracies' difference)."""
    before = {f"q{i}": 1.0 for i in range(n)}
    after = dict(before)
    for i in range(broken):
        after[f"q{i}"] = 0.0
    for i in range(broken, broken + fixed):
        before[f"q{i}"] = 0.0
    right_before, right_after = sum(before.values()), sum(after.values())
    return (
        TaskAccuracy("numeric", n, right_before, right_before / n, before),
        TaskAccuracy("numeric", n, right_after, right_after / n, after),
    )


def rates(n: int, p_broken: float, p_fixed: float, limit: float) -> tuple[float, float, float]:
    """(old rule blocks, new rule blocks, new rule undecided) for n problems and the per-problem change rates."""
    old = new = undecided = 0.0
    changed = stats.binom(n, p_broken + p_fixed)
    share = p_broken / (p_broken + p_fixed) if p_broken + p_fixed else 0.0
    low, high = (int(x) for x in changed.interval(1 - 1e-12))
    for discordant in range(low, high + 1):
        weight = float(changed.pmf(discordant))
        split = stats.binom(discordant, share)
        for broken in range(discordant + 1):
            probability = weight * float(split.pmf(broken))
            if probability < 1e-15:
                continue
            fixed = discordant - broken
            if (broken - fixed) / n > limit + 1e-12:
                old += probability
            decision = decide_accuracy(*_results(n, broken, fixed), max_drop=limit)
            if decision.outcome == "REGRESSED":
                new += probability
            elif decision.outcome == "UNDECIDED":
                undecided += probability
    return old, new, undecided


def table(sizes: Sequence[int], limit: float, flips: float = FLIPS) -> list[str]:
    """The markdown table: per probe size, the false-block rate of an equal-accuracy change flipping `flips` of the
    answers (old and new rule, and how often the new one is undecided), and the chance to block real drops."""
    lines = [
        f"| problems | equal accuracy, {flips:.0%} flipped: old rule blocks | new rule blocks | new rule undecided "
        f"(passes) | true drop 5 pts: old / new blocks | true drop 10 pts: old / new blocks |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in sizes:
        old, new, undecided = rates(n, flips / 2, flips / 2, limit)
        drops = []
        for drop in (0.05, 0.10):
            f = max(flips, drop)
            o, b, _ = rates(n, (f + drop) / 2, (f - drop) / 2, limit)
            drops.append(f"{o:.1%} / {b:.1%}")
        lines.append(f"| {n} | {old:.1%} | {new:.1%} | {undecided:.1%} | {drops[0]} | {drops[1]} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float, default=0.03, help="max_accuracy_drop (default 0.03: 3 points)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="problem counts, comma-separated")
    parser.add_argument("--flips", type=float, default=FLIPS, help="share of answers an equal-accuracy change flips")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if not sizes or min(sizes) < 1 or not 0 < args.flips < 1 or not 0 <= args.limit < 1 or math.isnan(args.limit):
        parser.error("sizes must be positive, flips in (0, 1), limit in [0, 1)")
    print(f"accuracy rule, limit {args.limit * 100:.1f} points (block: drop > limit and exact McNemar p ≤ 0.05)")
    print("\n".join(table(sizes, args.limit, args.flips)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
