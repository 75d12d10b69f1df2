"""Regression checks: the current run against the stored baseline of the same hardware, pair and workload.

Latency and speedup are compared with `specgate.stats` (paired by prompt and repetition where both runs have the
same keys; Welch + Mann-Whitney otherwise) and a practical tolerance; the family-wise false-block rate of the whole
run is held at the gate's α with Holm's procedure over every statistical comparison of the run. The acceptance
rate is an SLA on the stored value: the gate passes only when the (1 − α) upper confidence bound of the relative
drop stays within `max_acceptance_drop`, so a real drop at the limit blocks, and an unchanged pair (greedy counts
are exactly reproducible) never does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specgate.baselines import ArmSamples, Baseline, arm_samples
from specgate.config import GatePolicy, SlaLimits
from specgate.evaluation import Evaluation
from specgate.gate import REGRESSION, Check
from specgate.stats import Comparison, compare_percentile, compare_samples


@dataclass(frozen=True, slots=True)
class RegressionMetric:
    """A metric compared with the baseline. `arm` is "candidate" (speculation on) or "reference"."""

    name: str
    arm: str
    field: str
    higher_is_better: bool
    statistic: str = "mean"


METRICS: tuple[RegressionMetric, ...] = (
    RegressionMetric("ttft_ms", "candidate", "ttft_ms", higher_is_better=False),
    RegressionMetric("tpot_ms", "candidate", "tpot_ms", higher_is_better=False),
    RegressionMetric("e2el_ms", "candidate", "e2el_ms", higher_is_better=False),
    RegressionMetric("p99_ttft_ms", "candidate", "ttft_ms", higher_is_better=False, statistic="p99"),
    RegressionMetric("reference_tpot_ms", "reference", "tpot_ms", higher_is_better=False),
    RegressionMetric("speedup", "both", "wall_s", higher_is_better=True, statistic="ratio"),
)
ACCEPTANCE = "acceptance_rate"
OUTPUT_DRIFT = "output_drift"
TASK_ACCURACY = "task_accuracy"
METRIC_NAMES: tuple[str, ...] = (*(m.name for m in METRICS), ACCEPTANCE, OUTPUT_DRIFT)


def _unit_ratios(arms: dict[str, ArmSamples], reference: str, candidate: str) -> tuple[list[float], list[str]]:
    ref, cand = arms[reference], arms[candidate]
    ratios = [r / c for r, c in zip(ref.run_walls_s, cand.run_walls_s, strict=True) if c > 0]
    return ratios, list(ref.run_keys[: len(ratios)])


def compare_metric(
    metric: RegressionMetric, baseline: Baseline, evaluation: Evaluation, policy: GatePolicy, sla: SlaLimits
) -> Comparison:
    """One statistical comparison, not yet corrected for the run's other comparisons."""
    m = evaluation.measurement
    current = {arm: arm_samples(evaluation, arm) for arm in m.arms}
    stored = dict(baseline.arms)
    if metric.statistic == "ratio":
        base_values, base_keys = _unit_ratios(stored, m.reference, evaluation.candidate)
        cur_values, cur_keys = _unit_ratios(current, m.reference, evaluation.candidate)
    else:
        arm = evaluation.candidate if metric.arm == "candidate" else m.reference
        base_values, base_keys = stored[arm].values(metric.field)
        cur_values, cur_keys = current[arm].values(metric.field)
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


def comparison_check(comparison: Comparison, evaluation: Evaluation, baseline: Baseline) -> Check:
    pair, workload = evaluation.where
    verdict = "REGRESSED" if comparison.regressed else "no regression"
    message = f"{verdict}: {comparison.describe()} [baseline {baseline.path}]"
    return Check(
        name=f"regression:{comparison.metric}",
        pair=pair,
        workload=workload,
        category=REGRESSION,
        passed=not comparison.regressed,
        message=message,
        observed=comparison.current_value,
        limit=comparison.tolerance,
        n=comparison.n_current,
        ci=(comparison.current_ci.low, comparison.current_ci.high),
        baseline=comparison.baseline_value,
        details={
            "p_value": comparison.p_value,
            "p_welch": comparison.p_welch,
            "p_mwu": comparison.p_mwu,
            "p_paired": comparison.p_paired,
            "decided_by": comparison.decided_by,
            "relative_change": comparison.relative_change,
            "effect_size": comparison.effect_size,
            "alpha": comparison.alpha,
            "baseline_file": str(baseline.path),
        },
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
    everything = np.ones(n, dtype=bool)
    drop = drop_of(everything)
    leave_one_out = np.asarray([drop_of(np.arange(n) != i) for i in range(n)])
    se = float(np.sqrt((n - 1) / n * ((leave_one_out - leave_one_out.mean()) ** 2).sum()))
    return drop, drop + float(stats.t.ppf(confidence, n - 1)) * se


def acceptance_check(baseline: Baseline, evaluation: Evaluation, sla: SlaLimits, policy: GatePolicy) -> Check:
    """Pass only when the acceptance rate has, with confidence 1 − α, not dropped more than the allowed share."""
    pair, workload = evaluation.where
    name = f"regression:{ACCEPTANCE}"
    stored = baseline.arms.get(evaluation.candidate)
    current = arm_samples(evaluation, evaluation.candidate)
    before, now = (None if stored is None else stored.acceptance_rate), current.acceptance_rate
    if stored is None or before is None or now is None:
        return Check(
            name,
            pair,
            workload,
            REGRESSION,
            False,
            f"BLOCK: acceptance rate missing (baseline {before}, current {now}) [baseline {baseline.path}]",
        )
    try:
        drop, upper = acceptance_drop_bound(stored, current, 1 - policy.alpha)
    except ValueError as exc:
        return Check(name, pair, workload, REGRESSION, False, f"BLOCK: {exc} [baseline {baseline.path}]")
    ok = upper <= sla.max_acceptance_drop
    message = (
        f"acceptance rate {before:.4f} → {now:.4f}: relative drop {drop:+.1%} "
        f"({1 - policy.alpha:.0%} upper bound {upper:+.1%}, jackknife over prompts) {'≤' if ok else '>'} allowed "
        f"{sla.max_acceptance_drop:.0%} (n={len(current.samples)} requests) [baseline {baseline.path}]"
    )
    return Check(
        name,
        pair,
        workload,
        REGRESSION,
        ok,
        message,
        observed=now,
        limit=sla.max_acceptance_drop,
        baseline=before,
        n=len(current.samples),
        details={"relative_drop": drop, "upper_bound": upper},
    )


def output_drift_check(baseline: Baseline, evaluation: Evaluation, sla: SlaLimits) -> Check:
    """Outputs against the baseline's. With the same model files they must not drift beyond the SLA (greedy decoding
    is deterministic); after a model update they are expected to change, and the check reports by how much."""
    import difflib

    from specgate.evaluation import first_divergence

    pair, workload = evaluation.where
    arm = evaluation.candidate
    before = {s.key: s.output_ids for s in baseline.arms[arm].samples} if arm in baseline.arms else {}
    now = {s.key: s.output_ids for s in arm_samples(evaluation, arm).samples}
    common = sorted(set(before) & set(now))
    changed = [k for k in common if before[k] != now[k]]
    share = len(changed) / len(common) if common else 1.0
    same_models = dict(baseline.provenance.get("models", {})) == dict(evaluation.measurement.models)
    ok = bool(common) and (share <= sla.max_drift or not same_models)
    detail = ""
    if changed:
        first = changed[0]
        similarity = sum(difflib.SequenceMatcher(None, before[k], now[k]).ratio() for k in changed) / len(changed)
        detail = (
            f"; first: {first} at token {first_divergence(before[first], now[first])}; mean token similarity "
            f"of changed outputs {similarity:.2f}"
        )
    reason = (
        "same model files as the baseline: greedy outputs must match"
        if same_models
        else "model files changed since the baseline: drift expected, task accuracy decides"
    )
    message = (
        f"outputs vs baseline: {len(changed)}/{len(common)} requests changed ({share:.1%}, SLA "
        f"{sla.max_drift:.1%}; {reason}){detail} [baseline {baseline.path}]"
    )
    return Check(
        f"regression:{OUTPUT_DRIFT}",
        pair,
        workload,
        REGRESSION if same_models else "drift",
        ok,
        message,
        observed=share,
        limit=sla.max_drift,
        n=len(common),
        details={"same_models": same_models},
    )


def accuracy_check(baseline: Baseline, evaluation: Evaluation, sla: SlaLimits) -> Check:
    """Task accuracy of the released arm must not fall more than `max_accuracy_drop` (absolute) below the baseline."""
    from specgate.accuracy import compare_accuracy

    pair, workload = evaluation.where
    before = baseline.accuracy.get(evaluation.candidate)
    now = evaluation.accuracy.get(evaluation.candidate)
    if before is None or now is None:
        return Check(
            f"regression:{TASK_ACCURACY}",
            pair,
            workload,
            REGRESSION,
            False,
            f"BLOCK: no task accuracy to compare (baseline {baseline.path} has "
            f"{'none' if before is None else 'one'}; this run {'none' if now is None else 'one'}). "
            "Re-record the baseline with --update-baselines.",
        )
    passed, message = compare_accuracy(before, now, sla.max_accuracy_drop)
    return Check(
        f"regression:{TASK_ACCURACY}",
        pair,
        workload,
        REGRESSION,
        passed,
        f"{message} [baseline {baseline.path}]",
        observed=now.accuracy,
        limit=sla.max_accuracy_drop,
        n=now.n,
        baseline=before.accuracy,
    )


def holm_family(comparisons: Sequence[Comparison], alpha: float) -> list[Comparison]:
    """Holm over the whole run: the chance that any comparison of an A/A run blocks stays ≤ α."""
    from specgate.stats import holm_adjust

    return holm_adjust(comparisons, alpha) if comparisons else []
