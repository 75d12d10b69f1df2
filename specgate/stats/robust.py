"""A location that a few spikes cannot move: the trimmed mean with Yuen's standard error.

On a shared machine, interference does not add Gaussian noise to a request's time: it stretches a few requests by
a factor (another process took the CPU for a while). A mean and its standard deviation let those few decide both
the estimate and the spread. The 20 % trimmed mean drops the smallest and the largest fifth of the paired log
ratios, and Yuen's standard error is computed from the winsorized variance (the dropped values replaced by the
nearest kept one):

    se = s_w / ((1 − 2g) √n),   df = n − 2⌊g n⌋ − 1

(Yuen 1974; Wilcox, *Introduction to Robust Estimation and Hypothesis Testing*, §4.4). Under Gaussian noise it
loses about 6 % of the mean's efficiency; with spikes it keeps its spread where the mean's grows with them.
`scripts/estimator_power.py` compares it with the mean and the Hodges–Lehmann estimate on recorded runs and on
simulated ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TRIM = 0.2


@dataclass(frozen=True, slots=True)
class Location:
    """A location estimate of independent units, its standard error, degrees of freedom and per-unit spread."""

    estimate: float
    se: float
    df: float
    n: int

    @property
    def spread(self) -> float:
        """The per-unit spread the standard error stands for (se · √n)."""
        return self.se * math.sqrt(self.n)


def trimmed(values: Sequence[float] | np.ndarray, trim: float = TRIM) -> Location:
    """The `trim`-trimmed mean of `values` with Yuen's standard error (see the module docstring). Fewer than 5 units
    are not trimmed (the mean and its ordinary standard error)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 0:
        raise ValueError("no units to compare")
    if n == 1:
        return Location(float(x[0]), 0.0, 0.0, 1)
    g = math.floor(trim * n) if n >= 5 else 0
    kept = x[g : n - g]
    winsorized = np.concatenate([np.full(g, x[g]), kept, np.full(g, x[n - g - 1])])
    s_w = float(np.std(winsorized, ddof=1))
    share = 1.0 - 2.0 * trim if g else 1.0  # Yuen's (1 − 2γ), with γ the nominal share
    return Location(float(kept.mean()), s_w / (share * math.sqrt(n)), float(n - 2 * g - 1), n)


def winsorized(values: np.ndarray, trim: float = TRIM) -> np.ndarray:
    """`values` (one unit per row, any number of columns) winsorized column by column, for correlations between
    trimmed means (they are the winsorized values' correlations)."""
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[0]
    g = math.floor(trim * n) if n >= 5 else 0
    if g == 0:
        return x
    ordered = np.sort(x, axis=0)
    return np.clip(x, ordered[g], ordered[n - g - 1])
