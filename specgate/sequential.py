"""Optional sequential stopping of a measurement against its baseline (`gate.max_repetitions`).

The method: after the fixed `repetitions`, every further repetition is one look of a group-sequential test with
`looks = max_repetitions − repetitions + 1` equally spaced looks and O'Brien-Fleming boundaries
(`specgate.stats.sequential_decision`), run per mean metric on the paired per-prompt relative differences against
the baseline (one-sided paired t converted to z), each at α / (number of metrics). The measurement stops early when

- a metric crosses its boundary with a change beyond the tolerance ("regressed": the gate will block), or
- every metric is clearly within tolerance: the one-sided (1 − α) upper confidence bound of its worse-direction
  change is below the tolerance ("not regressed": more samples cannot make it a regression worth blocking).

Otherwise it continues up to `max_repetitions`. The final checks are the usual fixed-sample tests on everything
measured; because the run stops only when those are already clear, the false-block rate stays at the gate's α
(the efficacy boundaries are stricter than the fixed test, and a futility stop can only pass).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from specgate.baselines import ArmSamples, Baseline, arm_samples
from specgate.config import GatePolicy, SlaLimits
from specgate.evaluation import Evaluation
from specgate.measure import Measurement
from specgate.regression import METRICS, RegressionMetric
from specgate.stats import sequential_decision

StopRule = Callable[[Measurement, int], bool]


def relative_differences(metric: RegressionMetric, baseline: Baseline, evaluation: Evaluation) -> list[float]:
    """Per-key relative change current/baseline − 1, signed so that positive is worse."""
    m = evaluation.measurement
    current = {arm: arm_samples(evaluation, arm) for arm in m.arms}
    sign = -1.0 if metric.higher_is_better else 1.0
    if metric.statistic == "ratio":
        before = _ratios(baseline.arms, m.reference, evaluation.candidate)
        now = _ratios(current, m.reference, evaluation.candidate)
    else:
        arm = evaluation.candidate if metric.arm == "candidate" else m.reference
        before = dict(zip(*reversed(baseline.arms[arm].values(metric.field)), strict=True))
        now = dict(zip(*reversed(current[arm].values(metric.field)), strict=True))
    return [sign * (now[k] / before[k] - 1) for k in sorted(set(before) & set(now)) if before[k] > 0]


def _ratios(arms: object, reference: str, candidate: str) -> dict[str, float]:
    samples: dict[str, ArmSamples] = arms  # type: ignore[assignment]
    ref, cand = samples[reference], samples[candidate]
    return {k: r / c for k, r, c in zip(ref.run_keys, ref.run_walls_s, cand.run_walls_s, strict=True) if c > 0}


def _z_and_upper(differences: list[float], alpha: float) -> tuple[float, float, float]:
    """Paired one-sided z (from t), mean, and the (1 − α) upper confidence bound of the mean difference."""
    from scipy import stats

    n = len(differences)
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    if sd == 0:
        return (math.inf if mean > 0 else -math.inf if mean < 0 else 0.0), mean, mean
    t = mean / (sd / math.sqrt(n))
    z = float(stats.norm.isf(stats.t.sf(t, n - 1)))
    upper = mean + float(stats.t.isf(alpha, n - 1)) * sd / math.sqrt(n)
    return z, mean, upper


def sequential_stop(baseline: Baseline, sla: SlaLimits, policy: GatePolicy, task: str = "generate") -> StopRule:
    """The stop rule `measure_pair` calls after each look (see the module docstring)."""
    looks = policy.max_repetitions - policy.repetitions + 1
    metrics = [m for m in METRICS if m.statistic != "p99"]
    level = policy.alpha / len(metrics)

    def stop(measurement: Measurement, look: int) -> bool:
        evaluation = Evaluation(measurement, sla, policy, task)
        futile = True
        for metric in metrics:
            differences = relative_differences(metric, baseline, evaluation)
            if len(differences) < 3:
                return False
            z, mean, upper = _z_and_upper(differences, level)
            decision = sequential_decision(
                z, mean, look=look, looks=looks, alpha=level, tolerance=sla.regression_tolerance
            )
            if decision.decision == "regressed":
                return True
            futile = futile and upper < sla.regression_tolerance
        return futile

    return stop
