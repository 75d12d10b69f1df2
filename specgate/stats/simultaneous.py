"""Significance for a family of correlated comparisons: the max-t critical value and adjusted p-values.

The latency comparisons of one candidate arm against its reference (TTFT, TPOT, E2EL, the speedup) are made on the
same requests, and some are nearly the same statistic (E2EL and the speedup of a shared plain arm move with TPOT).
A Bonferroni split spends α on each as if they were independent; the max-t method spends it once on the family:
under "no change", the studentized estimates are jointly t with the correlation matrix `corr` of the estimates,
and a comparison is significant at family level α when its t exceeds the (1 − α) quantile of their maximum
(Hothorn, Bretz and Westfall 2008, the single-step method of `multcomp`). For independent comparisons this is
Šidák's split; for identical ones it is the single test's level.

The multivariate t probabilities come from scipy's quasi-Monte-Carlo integration (Genz), seeded so that the same
data always give the same decision; their error (~1e-4 absolute) is far below the levels used here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

SEED = 20240611


def _max_cdf(x: float, corr: np.ndarray, df: float) -> float:
    """P(max_i T_i ≤ x) for T jointly t(df) (normal for infinite df) with correlation `corr`."""
    from scipy import stats

    k = corr.shape[0]
    if k == 1:
        return float(stats.norm.cdf(x) if math.isinf(df) else stats.t.cdf(x, df))
    upper = np.full(k, x)
    if math.isinf(df) or df > 1000:
        value = stats.multivariate_normal(mean=np.zeros(k), cov=corr, allow_singular=True, seed=SEED).cdf(upper)
    else:
        value = stats.multivariate_t(loc=np.zeros(k), shape=corr, df=df, allow_singular=True, seed=SEED).cdf(upper)
    return float(min(1.0, max(0.0, value)))


def nearest_correlation(corr: np.ndarray) -> np.ndarray:
    """`corr` made a valid correlation matrix (symmetric, unit diagonal, eigenvalues ≥ 0), clipped to [−1, 1]."""
    c = np.clip((np.asarray(corr, dtype=np.float64) + np.asarray(corr).T) / 2, -1.0, 1.0)
    np.fill_diagonal(c, 1.0)
    values, vectors = np.linalg.eigh(c)
    if values.min() >= 0:
        valid: np.ndarray = c
        return valid
    fixed: np.ndarray = vectors @ np.diag(np.clip(values, 1e-9, None)) @ vectors.T
    d = np.sqrt(np.diag(fixed))
    result: np.ndarray = fixed / np.outer(d, d)
    return result


def effective_tests(corr: np.ndarray) -> float:
    """Li and Ji's (2005) effective number of independent tests among correlated ones, from the eigenvalues λ of
    their correlation matrix: Σ [λ ≥ 1] + (λ − ⌊λ⌋)."""
    values = np.abs(np.linalg.eigvalsh(nearest_correlation(corr)))
    return float(max(1.0, sum((v >= 1.0) + (v - math.floor(v)) for v in values)))


def adjusted_p(t_values: Sequence[float], corr: np.ndarray, df: float, alpha: float = 1.0) -> list[float]:
    """One-sided family-adjusted p-values: P(max_j T_j ≥ t_i) under "no change". Exact (multivariate t) where the
    single test's p-value is ≤ `alpha`, so that a decision at `alpha` is exact; elsewhere Šidák's adjustment with
    the effective number of tests (`effective_tests`), which is only needed to report it (it exceeds `alpha`)."""
    from scipy import stats

    c = nearest_correlation(corr)
    m = effective_tests(c)
    found = []
    for t in t_values:
        if not math.isfinite(t):
            found.append(0.0 if t > 0 else 1.0)
            continue
        single = float(stats.norm.sf(t) if math.isinf(df) else stats.t.sf(t, df))
        found.append(1.0 - _max_cdf(t, c, df) if single <= alpha else 1.0 - (1.0 - single) ** m)
    return found


def critical(corr: np.ndarray, df: float, alpha: float, *, exact: bool = True) -> float:
    """The one-sided max-t critical value: P(max_i T_i ≥ c) = alpha under "no change" (`exact=False`: Šidák's with
    the effective number of tests, for reporting bounds that decide nothing)."""
    from scipy import optimize, stats

    c = nearest_correlation(corr)
    k = c.shape[0]
    single = float(stats.norm.isf(alpha) if math.isinf(df) else stats.t.isf(alpha, df))
    if k == 1:
        return single
    if not exact:
        level = 1.0 - (1.0 - alpha) ** (1.0 / effective_tests(c))
        return float(stats.norm.isf(level) if math.isinf(df) else stats.t.isf(level, df))
    bonferroni = float(stats.norm.isf(alpha / k) if math.isinf(df) else stats.t.isf(alpha / k, df))
    if bonferroni - single < 1e-6:
        return single

    def excess(x: float) -> float:
        return 1.0 - _max_cdf(x, c, df) - alpha

    if excess(single) <= 0:  # the integration's error near a single test's level: no split is needed
        return single
    if excess(bonferroni) >= 0:
        return bonferroni
    return float(optimize.brentq(excess, single, bonferroni, xtol=1e-4))
