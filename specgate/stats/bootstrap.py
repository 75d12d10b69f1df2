"""Bootstrap resampling: a percentile interval of any statistic (seeded, so reproducible), for reports and
benchmarks. The gate's decisions do not rest on it (`specgate.stats.decision`, `specgate.comparison`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_BOOT_CHUNK_ELEMENTS = 1 << 22  # bounds the memory of one block of bootstrap resamples (32 MiB of float64)


@dataclass(frozen=True, slots=True)
class Interval:
    """A closed interval."""

    low: float
    high: float


def bootstrap_ci(
    samples: Sequence[float],
    statistic: Callable[[FloatArray], float],
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval of ``statistic`` over ``samples`` (seeded, so reproducible)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} must lie strictly between 0 and 1, e.g. 0.95")
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot!r} must be at least 1; 2000 is usual")
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim != 1 or len(x) < 2 or not np.all(np.isfinite(x)):
        raise ValueError("bootstrap_ci needs at least 2 finite samples")
    rng = np.random.default_rng(seed)
    rows_per_block = max(1, _BOOT_CHUNK_ELEMENTS // len(x))
    stats: list[float] = []
    for start in range(0, n_boot, rows_per_block):
        block = x[rng.integers(0, len(x), size=(min(rows_per_block, n_boot - start), len(x)))]
        stats.extend(statistic(row) for row in block)
    low, high = np.quantile(np.asarray(stats), [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return Interval(float(low), float(high))
