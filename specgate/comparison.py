"""The one comparison core: a run against a stored run, metric by metric, with the statistics.

The gate, the sequential stopping rule and `specgate baseline diff` all call `compare_runs` on two `RunRecord`s
(a baseline read back from a file, or the live run in its stored form), so they reach the same decisions on the
same data. `specgate.checks.regression` turns each result into a `Check`.

Latency and speedup are compared with `specgate.stats.tests` (paired by prompt and round where both runs have the
same keys; Welch + Mann-Whitney otherwise) and a practical tolerance; the family-wise false-block rate of a whole
run is held at the gate's α with Holm's procedure over every statistical comparison of the run (`holm_family`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specgate.config import GatePolicy, SlaLimits
from specgate.measure.samples import ArmSamples
from specgate.stats.tests import Comparison, compare_percentile, compare_samples, holm_adjust
from specgate.store.records import RunRecord


@dataclass(frozen=True, slots=True)
class RegressionMetric:
    """A metric compared with the baseline. `arm` is "released" (the arm a PASS releases) or "plain"."""

    name: str
    arm: str
    field: str
    higher_is_better: bool
    statistic: str = "mean"


METRICS: tuple[RegressionMetric, ...] = (
    RegressionMetric("ttft_ms", "released", "ttft_ms", higher_is_better=False),
    RegressionMetric("tpot_ms", "released", "tpot_ms", higher_is_better=False),
    RegressionMetric("e2el_ms", "released", "e2el_ms", higher_is_better=False),
    RegressionMetric("p99_ttft_ms", "released", "ttft_ms", higher_is_better=False, statistic="p99"),
    RegressionMetric("reference_tpot_ms", "plain", "tpot_ms", higher_is_better=False),
    RegressionMetric("speedup", "both", "wall_s", higher_is_better=True, statistic="ratio"),
)
ACCEPTANCE = "acceptance_rate"
OUTPUT_DRIFT = "output_drift"
TASK_ACCURACY = "task_accuracy"
METRIC_NAMES: tuple[str, ...] = (*(m.name for m in METRICS), ACCEPTANCE, OUTPUT_DRIFT)


@dataclass(frozen=True, slots=True)
class Arms:
    """Which arms of the two runs are compared: the released arm and the plain-decoding arm."""

    released: str = "spec"
    plain: str = "ar"


def _unit_ratios(arms: Mapping[str, ArmSamples], plain: str, released: str) -> tuple[list[float], list[str]]:
    ref, cand = arms[plain], arms[released]
    ratios = [r / c for r, c in zip(ref.run_walls_s, cand.run_walls_s, strict=True) if c > 0]
    return ratios, list(ref.run_keys[: len(ratios)])


def compare_metric(
    metric: RegressionMetric, before: RunRecord, after: RunRecord, arms: Arms, policy: GatePolicy, sla: SlaLimits
) -> Comparison:
    """One statistical comparison, not yet corrected for the run's other comparisons. Raises ValueError or KeyError
    when the runs cannot be compared (too few samples, an arm missing)."""
    if metric.statistic == "ratio":
        base_values, base_keys = _unit_ratios(before.arms, arms.plain, arms.released)
        cur_values, cur_keys = _unit_ratios(after.arms, arms.plain, arms.released)
    else:
        arm = arms.released if metric.arm == "released" else arms.plain
        base_values, base_keys = before.arms[arm].values(metric.field)
        cur_values, cur_keys = after.arms[arm].values(metric.field)
    if metric.statistic == "p99":
        return compare_percentile(
            metric.name,
            base_values,
            cur_values,
            q=99.0,
            higher_is_better=metric.higher_is_better,
            alpha=policy.alpha,
            tolerance=sla.regression_tolerance,
            n_boot=policy.bootstrap_resamples,
            seed=policy.seed,
        )
    return compare_samples(
        metric.name,
        base_values,
        cur_values,
        higher_is_better=metric.higher_is_better,
        alpha=policy.alpha,
        tolerance=sla.regression_tolerance,
        baseline_keys=base_keys,
        current_keys=cur_keys,
        n_boot=policy.bootstrap_resamples,
        seed=policy.seed,
    )


def acceptance_drop_bound(before: ArmSamples, now: ArmSamples, confidence: float) -> tuple[float, float]:
    """Relative drop of the pooled acceptance rate and its one-sided upper confidence bound.

    Prompts are the units (repetitions of a prompt form one cluster: greedy acceptance repeats exactly), paired by
    prompt when both runs share them. The bound is the drop plus a Student-t quantile (n − 1 degrees of freedom)
    times the jackknife standard error over prompts: with a few dozen prompts a percentile bootstrap is too narrow.
    An unchanged pair has a standard error of 0 and gets a bound equal to its drop, 0.
    """
    import numpy as np
    from scipy import stats

    def per_prompt(arm: ArmSamples) -> dict[str, tuple[int, int]]:
        totals: dict[str, tuple[int, int]] = {}
        for sample in arm.samples:
            acc, dra = totals.get(sample.prompt_id, (0, 0))
            totals[sample.prompt_id] = (acc + sample.accepted, dra + sample.drafted)
        return totals

    base, cur = per_prompt(before), per_prompt(now)
    common = sorted(set(base) & set(cur))
    if len(common) < 2:
        raise ValueError("acceptance needs at least 2 prompts in common with the baseline")
    a = np.asarray([base[k] for k in common], dtype=float)
    b = np.asarray([cur[k] for k in common], dtype=float)

    def drop_of(keep: np.ndarray) -> float:
        rate_a = a[keep, 0].sum() / max(a[keep, 1].sum(), 1.0)
        rate_b = b[keep, 0].sum() / max(b[keep, 1].sum(), 1.0)
        return float(1 - rate_b / rate_a) if rate_a > 0 else 0.0

    n = len(common)
    drop = drop_of(np.ones(n, dtype=bool))
    leave_one_out = np.asarray([drop_of(np.arange(n) != i) for i in range(n)])
    se = float(np.sqrt((n - 1) / n * ((leave_one_out - leave_one_out.mean()) ** 2).sum()))
    return drop, drop + float(stats.t.ppf(confidence, n - 1)) * se


def holm_family(comparisons: Sequence[Comparison], alpha: float) -> list[Comparison]:
    """Holm over the whole run: the chance that any comparison of an A/A run blocks stays ≤ α."""
    return holm_adjust(comparisons, alpha) if comparisons else []
