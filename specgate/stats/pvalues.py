"""One-sided p-values and effect sizes of two samples (sign = +1 when larger is worse, −1 when smaller is worse).

Computed directly where scipy warns on near-constant samples, which the gate must tolerate: a difference without
any variance is certain (p = 0 or 1).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def alternative(sign: float) -> Literal["greater", "less"]:
    return "greater" if sign > 0 else "less"


def constant_p(difference: float, sign: float) -> float:
    """The p-value when there is no variance at all: the difference is certain."""
    return 0.0 if sign * difference > 0.0 else 1.0


def welch_p(current: FloatArray, baseline: FloatArray, sign: float) -> float:
    """Welch's t-test, computed directly: scipy warns on near-constant samples, which the gate must tolerate."""
    from scipy import stats

    var_c, var_b = np.var(current, ddof=1) / len(current), np.var(baseline, ddof=1) / len(baseline)
    difference = float(np.mean(current) - np.mean(baseline))
    if np.ptp(current) == 0.0 and np.ptp(baseline) == 0.0:
        return constant_p(float(current[0] - baseline[0]), sign)
    df = (var_c + var_b) ** 2 / (var_c**2 / (len(current) - 1) + var_b**2 / (len(baseline) - 1))
    return float(stats.t.sf(sign * difference / math.sqrt(var_c + var_b), df))


def mwu_p(current: FloatArray, baseline: FloatArray, sign: float) -> float:
    from scipy import stats

    if np.ptp(np.concatenate([current, baseline])) == 0.0:
        return 1.0
    return float(stats.mannwhitneyu(current, baseline, alternative=alternative(sign)).pvalue)


def paired_t_p(differences: FloatArray, sign: float) -> float:
    from scipy import stats

    if np.ptp(differences) == 0.0:
        return constant_p(float(differences[0]), sign)
    standard_error = float(np.std(differences, ddof=1)) / math.sqrt(len(differences))
    return float(stats.t.sf(sign * float(np.mean(differences)) / standard_error, len(differences) - 1))


def wilcoxon_p(differences: FloatArray, sign: float) -> float:
    from scipy import stats

    if not np.any(differences != 0.0):
        return 1.0
    return float(stats.wilcoxon(differences, alternative=alternative(sign)).pvalue)


def cohens_d(current: FloatArray, baseline: FloatArray) -> float:
    n_c, n_b = len(current), len(baseline)
    pooled_var = ((n_c - 1) * np.var(current, ddof=1) + (n_b - 1) * np.var(baseline, ddof=1)) / (n_c + n_b - 2)
    difference = float(np.mean(current) - np.mean(baseline))
    if pooled_var == 0.0:
        return 0.0 if difference == 0.0 else math.copysign(math.inf, difference)
    return difference / math.sqrt(float(pooled_var))


def rank_biserial(differences: FloatArray) -> float:
    """Matched-pairs rank-biserial correlation: (rank sum of increases - rank sum of decreases) / total rank sum."""
    from scipy import stats

    nonzero = differences[differences != 0.0]
    if len(nonzero) == 0:
        return 0.0
    ranks = stats.rankdata(np.abs(nonzero))
    return float((ranks[nonzero > 0].sum() - ranks[nonzero < 0].sum()) / ranks.sum())
