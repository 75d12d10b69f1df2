"""Bootstrap resampling: intervals of any statistic, and the resampled statistics the comparisons test on.

Resampling is seeded (reproducible) and done in blocks that bound the memory of one block of resamples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Reducer = Callable[[FloatArray], FloatArray]

_BOOT_CHUNK_ELEMENTS = 1 << 22  # bounds the memory of one block of bootstrap resamples (32 MiB of float64)


@dataclass(frozen=True, slots=True)
class Interval:
    """A closed interval; both ends are NaN when it was not computed (``n_boot=0``)."""

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

    def rows(block: FloatArray) -> FloatArray:
        return np.fromiter((statistic(row) for row in block), dtype=np.float64, count=len(block))

    (stats,) = bootstrap_stats((x,), rows, n_boot, seed, joint=False)
    return interval(stats, confidence)


def mean_rows(block: FloatArray) -> FloatArray:
    return np.asarray(block.mean(axis=1), dtype=np.float64)


def percentile_rows(q: float) -> Reducer:
    def rows(block: FloatArray) -> FloatArray:
        return np.asarray(np.percentile(block, q, axis=1), dtype=np.float64)

    return rows


def bootstrap_stats(
    samples: tuple[FloatArray, ...], reducer: Reducer, n_boot: int, seed: int, *, joint: bool
) -> tuple[FloatArray, ...]:
    """``n_boot`` resampled statistics per sample; ``joint`` resamples the same indices (paired keys) in all."""
    rng = np.random.default_rng(seed)
    n_max = max(len(x) for x in samples)
    rows_per_block = max(1, _BOOT_CHUNK_ELEMENTS // n_max)
    blocks: list[list[FloatArray]] = [[] for _ in samples]
    for start in range(0, n_boot, rows_per_block):
        rows = min(rows_per_block, n_boot - start)
        shared = rng.integers(0, len(samples[0]), size=(rows, len(samples[0]))) if joint else None
        for out, x in zip(blocks, samples, strict=True):
            index = shared if shared is not None else rng.integers(0, len(x), size=(rows, len(x)))
            out.append(reducer(x[index]))
    return tuple(np.concatenate(out) if out else np.empty(0) for out in blocks)


def bootstrap_cis(
    pair: tuple[FloatArray, FloatArray], reducer: Reducer, n_boot: int, seed: int, *, joint: bool
) -> tuple[Interval, Interval, Interval]:
    """95 % CIs of the baseline statistic, the current statistic and the relative change; NaN when n_boot=0."""
    if n_boot == 0:
        missing = Interval(math.nan, math.nan)
        return missing, missing, missing
    boot_b, boot_c = bootstrap_stats(pair, reducer, n_boot, seed, joint=joint)
    return interval(boot_b, 0.95), interval(boot_c, 0.95), interval(relative_change_rows(boot_c, boot_b), 0.95)


def relative_change_rows(current: FloatArray, baseline: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        change = (current - baseline) / np.abs(baseline)
    return np.where(current == baseline, 0.0, change)


def interval(stats: FloatArray, confidence: float) -> Interval:
    with np.errstate(invalid="ignore"):  # an infinite relative change would make the interpolation warn
        low, high = np.quantile(stats, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return Interval(float(low), float(high))
