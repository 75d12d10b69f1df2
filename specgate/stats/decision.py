"""Three outcomes for a comparison: PASS, BLOCK or UNKNOWN, with the smallest change it could have caught.

A comparison estimates how much worse the candidate is (`estimate`, positive = worse) with a standard error `se`
on `df` degrees of freedom, against a tolerance `threshold` on the same scale (for latencies: log ratios, so the
threshold is log(1 + tolerance)):

- PASS    the one-sided (1 − alpha_pass) upper confidence bound lies below the threshold: whatever the truth, it is
          within the tolerance (an equivalence-style bound, as in TOST);
- BLOCK   "REGRESSED": the candidate is significantly worse (one-sided, at alpha_block) and the upper bound does
          not show it within the tolerance — it is worse, and it may be worse by more than the tolerance;
- UNKNOWN neither: the data cannot tell. More units may decide it (`units_needed` says how many the observed
          spread would need); at the budget, UNKNOWN blocks with that number.

A change significantly worse but shown within the tolerance (upper bound below it) passes: it is the tolerance's
purpose. Both BLOCK and UNKNOWN stop a release; BLOCK says the data show a slowdown, UNKNOWN that they cannot
tell.

The minimum detectable effect (`mde`) is the smallest true change that ends REGRESSED with probability `power`
at this look's standard error, degrees of freedom and levels. REGRESSED needs two things of the estimate d and its
estimated standard error ŝ: significance, d − t_block · ŝ > 0, and an upper bound that reaches the threshold,
d + t_pass · ŝ ≥ threshold. Each is a linear combination d + k · ŝ, which (Jennett and Welch's normal approximation
of the noncentral t, within 1 % of the exact one for df ≥ 5) is normal with mean δ + k · se · (1 − 1/(4 df)) and
variance se² · (1 + k² / (2 df)). The MDE is the δ at which both hold with probability `power` (their
probabilities multiplied: the two are positively correlated, so the power at the stated MDE is at least
`power`). When the standard error is small against the threshold the second decides: then the MDE lies below the
threshold by about (t_pass − z_power) · se — a noncentral t with the threshold divided by the *true* se as its
critical value would overstate it, because the bound moves with ŝ. It is a per-look figure.

Error rates, with looks = the number of times a comparison may be decided: alpha_pass and alpha_block are the
per-look levels (the caller divides by the number of looks, and alpha_block also by the family of comparisons
that share the run's α), so an unchanged configuration ends REGRESSED with probability ≤ alpha overall, and a
change beyond the tolerance passes a comparison with probability ≤ alpha_pass × looks. How often an unchanged
configuration ends UNKNOWN depends on the spread and the units measured: the gate sizes its run for it
(`units_to_pass`).
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
    t_block: float | None = None,
) -> Decision:
    """PASS, BLOCK or UNKNOWN for a worse-direction `estimate` with standard error `se` (see the module docstring).

    `spread` is the per-unit standard deviation (se · √n when units are independent); with it an UNKNOWN says how
    many units would decide it at the observed estimate and spread. `p_value` replaces the t-based one when the
    comparison has a test of its own (a permutation test, or a p-value adjusted for a family of correlated
    comparisons), and `t_block` the significance bound's critical value then (e.g. a simultaneous one)."""
    if se < 0 or not math.isfinite(estimate) or not math.isfinite(se):
        raise ValueError(f"cannot decide on estimate={estimate!r}, se={se!r}")
    t_pass = t_quantile(1.0 - alpha_pass, df) if se > 0 else 0.0
    if t_block is None:
        t_block = t_quantile(1.0 - alpha_block, df) if se > 0 else 0.0
    upper, lower = estimate + t_pass * se, estimate - t_block * se
    p_value = _p_worse(estimate, se, df) if p_value is None else p_value
    if upper < threshold:
        outcome: Outcome = "PASS"
    elif p_value <= alpha_block and estimate > 0:
        outcome = "BLOCK"
    else:
        outcome = "UNKNOWN"
    needed = None
    if outcome == "UNKNOWN" and spread is not None and spread > 0:
        needed = units_needed(estimate, spread, threshold=threshold, t_pass=t_pass, t_block=t_block)
    return Decision(
        outcome,
        estimate,
        se,
        df,
        upper,
        lower,
        p_value,
        threshold,
        mde(se, df, threshold, t_pass, t_block, power),
        n,
        needed,
    )


def mde(se: float, df: float, threshold: float, t_pass: float, t_block: float, power: float = 0.95) -> float:
    """The smallest true change that ends REGRESSED with probability `power` (see the module docstring)."""
    if se <= 0:
        return 0.0
    bias = 1.0 if math.isinf(df) else 1.0 - 1.0 / (4.0 * max(df, 1.0))

    def spread(k: float) -> float:  # the standard deviation of (d + k · ŝ) / se
        return 1.0 if math.isinf(df) else math.sqrt(1.0 + k * k / (2.0 * max(df, 1.0)))

    # δ / se must reach `significant` for the significance bound and `reaching` for the upper bound, each alone
    significant, reaching = t_block * bias, threshold / se - t_pass * bias
    width_s, width_r = spread(t_block), spread(t_pass)

    def achieved(delta: float) -> float:
        return _phi((delta - significant) / width_s) * _phi((delta - reaching) / width_r)

    z = t_quantile(power, math.inf)
    low = max(significant + z * width_s, reaching + z * width_r)  # each alone at `power`: the product falls short
    high = low + 4.0 * max(width_s, width_r)
    for _ in range(60):  # bisection on the product, increasing in δ
        middle = 0.5 * (low + high)
        low, high = (middle, high) if achieved(middle) < power else (low, middle)
    return high * se


def _phi(x: float) -> float:
    """The standard normal distribution function."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def units_needed(estimate: float, spread: float, *, threshold: float, t_pass: float, t_block: float) -> int:
    """Units at which the observed estimate and spread would decide: PASS when below the threshold, else BLOCK."""
    margin, t = (threshold - estimate, t_pass) if estimate < threshold else (estimate, t_block)
    if margin <= 0:
        return 10**9  # exactly at the threshold: no sample size decides it
    return max(2, math.ceil((t * spread / margin) ** 2))


def units_to_pass(spread: float, *, threshold: float, t_pass: float, miss: float) -> int:
    """Units at which an unchanged configuration (true change 0) passes with probability 1 − `miss`: its upper bound,
    0 + (z_{1−miss} + t_pass) · spread / √n on average plus noise, stays below the threshold."""
    if spread <= 0:
        return 2
    z = t_quantile(1.0 - miss, math.inf)
    return max(2, math.ceil(((z + t_pass) * spread / threshold) ** 2))


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
