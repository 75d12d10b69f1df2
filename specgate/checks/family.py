"""The family of one arm's mean latency comparisons: one level shared by correlated statistics (max-t).

TTFT, TPOT, E2EL and the speedup of a candidate arm against its reference are estimated on the same units (prompt ×
round), and some are nearly the same statistic. `family_significance` gives the max-t critical value and each
comparison's adjusted p-value (`specgate.stats.simultaneous`), from the correlation of their per-unit values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from specgate.comparison import Estimate
from specgate.stats.robust import winsorized
from specgate.stats.simultaneous import adjusted_p, critical


def family_significance(estimates: Mapping[str, Estimate], alpha: float) -> tuple[float, dict[str, float]]:
    """The max-t critical value and each comparison's family-adjusted p-value for the mean comparisons of one arm
    (estimated on the same units: their correlation is that of the winsorized per-unit values on the units they
    share, scaled by the share of units in common)."""
    names = [k for k, e in estimates.items() if e.se > 0 and e.units]
    if len(names) < 2:
        return math.nan, {}
    k = len(names)
    corr = np.eye(k)
    tables = {n: winsorized_units(estimates[n].units) for n in names}
    for i in range(k):
        for j in range(i + 1, k):
            a, b = tables[names[i]], tables[names[j]]
            common = sorted(set(a) & set(b))
            if len(common) < 3:
                continue
            x, y = np.asarray([a[u] for u in common]), np.asarray([b[u] for u in common])
            if x.std() == 0 or y.std() == 0:
                continue
            rho = float(np.corrcoef(x, y)[0, 1]) * len(common) / math.sqrt(len(a) * len(b))
            corr[i, j] = corr[j, i] = rho
    df = min(estimates[n].df for n in names)
    t_values = [estimates[n].estimate / estimates[n].se for n in names]
    adjusted = adjusted_p(t_values, corr, df, alpha)
    significant = any(p <= alpha for p in adjusted)  # the bounds decide something only then
    return critical(corr, df, alpha, exact=significant), dict(zip(names, adjusted, strict=True))


def winsorized_units(units: Mapping[str, float]) -> dict[str, float]:
    keys = list(units)
    values = winsorized(np.asarray([units[k] for k in keys]).reshape(-1, 1))[:, 0]
    return dict(zip(keys, values.tolist(), strict=True))
