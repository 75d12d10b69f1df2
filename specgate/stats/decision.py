"""Three outcomes for a comparison: PASS, BLOCK or UNKNOWN, with the smallest change it could have caught.

A comparison estimates how much worse the candidate is (`estimate`, positive = worse) with a standard error `se`
on `df` degrees of freedom, against a tolerance `threshold` on the same scale (for latencies: log ratios, so the
threshold is log(1 + tolerance)):

- PASS    the one-sided (1 − alpha_pass) upper confidence bound lies below the threshold: whatever the truth, it is
          within the tolerance (an equivalence-style bound, as in TOST);
- BLOCK   the change is significant at alpha_block (one-sided) and the estimate exceeds the threshold;
- UNKNOWN neither: the data cannot tell. More rounds may decide it (`units_needed` says how many units the
          observed spread would need); at the budget, UNKNOWN blocks with that number.

The minimum detectable effect (`mde`) is the smallest true change that would BLOCK with probability `power`:
the estimate must clear both the threshold and the significance bound, so it is max(threshold, t_b · se) + t_p · se.
A PASS is only as strong as its MDE; every regression check states it ("would catch ≥ 4.1 %").

Error rates, with looks = the number of times a comparison is decided as rounds are added: alpha_pass and
alpha_block are the per-look levels (the caller divides by the number of looks, and alpha_block also by the number
of comparisons in the family), so an unchanged configuration blocks with probability ≤ alpha overall and a change
beyond the tolerance passes with probability ≤ alpha_pass × looks per comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["PASS", "BLOCK", "UNKNOWN"]


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one comparison and the numbers behind it, on the comparison's own scale."""

    outcome: Outcome
    estimate: float
    se: float
    df: float
    upper: float
    lower: float
    p_value: float
    threshold: float
    mde: float
    n: int
    units_needed: int | None = None

    @property
    def passed(self) -> bool:
        return self.outcome == "PASS"


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (normal for infinite df)."""
    from scipy import stats

    if math.isinf(df):
        return float(stats.norm.ppf(p))
    return float(stats.t.ppf(p, df))


def _p_worse(estimate: float, se: float, df: float) -> float:
    """One-sided p-value of "no change" against "worse" (estimate > 0)."""
    from scipy import stats

    if se == 0.0:
        return 0.0 if estimate > 0 else 1.0
    z = estimate / se
    return float(stats.norm.sf(z) if math.isinf(df) else stats.t.sf(z, df))


def decide(
    estimate: float,
    se: float,
    df: float,
    *,
    threshold: float,
    alpha_block: float,
    alpha_pass: float,
    n: int,
    power: float = 0.95,
    spread: float | None = None,
    p_value: float | None = None,
) -> Decision:
    """PASS, BLOCK or UNKNOWN for a worse-direction `estimate` with standard error `se` (see the module docstring).

    `spread` is the per-unit standard deviation (se · √n when units are independent); with it an UNKNOWN says how
    many units would decide it at the observed estimate and spread. `p_value` replaces the t-based one when the
    comparison has an exact test of its own (e.g. a permutation test)."""
    if se < 0 or not math.isfinite(estimate) or not math.isfinite(se):
        raise ValueError(f"cannot decide on estimate={estimate!r}, se={se!r}")
    t_pass = t_quantile(1.0 - alpha_pass, df) if se > 0 else 0.0
    t_block = t_quantile(1.0 - alpha_block, df) if se > 0 else 0.0
    upper, lower = estimate + t_pass * se, estimate - t_block * se
    p_value = _p_worse(estimate, se, df) if p_value is None else p_value
    if upper < threshold:
        outcome: Outcome = "PASS"
    elif p_value <= alpha_block and estimate > threshold:
        outcome = "BLOCK"
    else:
        outcome = "UNKNOWN"
    t_power = t_quantile(power, df) if se > 0 else 0.0
    mde = max(threshold, t_block * se) + t_power * se
    needed = None
    if outcome == "UNKNOWN" and spread is not None and spread > 0:
        needed = units_needed(estimate, spread, threshold=threshold, t_pass=t_pass, t_block=t_block)
    return Decision(outcome, estimate, se, df, upper, lower, p_value, threshold, mde, n, needed)


def units_needed(estimate: float, spread: float, *, threshold: float, t_pass: float, t_block: float) -> int:
    """Units at which the observed estimate and spread would decide: PASS when below the threshold, else BLOCK."""
    margin, t = (threshold - estimate, t_pass) if estimate < threshold else (estimate, t_block)
    if margin <= 0:
        return 10**9  # exactly at the threshold: no sample size decides it
    return max(2, math.ceil((t * spread / margin) ** 2))


def mean_and_se(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean, standard error and n of independent units (se 0 for fewer than 2 or identical values)."""
    n = len(values)
    if n == 0:
        raise ValueError("no units to compare")
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0, n
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(variance / n), n


def percent(change: float) -> str:
    """A relative change as a signed percentage with one decimal: 0.041 → "+4.1 %"."""
    return f"{change * 100:+.1f} %"
