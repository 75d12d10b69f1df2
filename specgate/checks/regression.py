"""Regression checks: a run against the stored baseline of the same hardware, pair and workload.

`compare_runs` compares two `RunRecord`s (see `specgate.comparison`) and returns one `Check` per metric; the gate
calls `pending_comparisons` for every pair × workload first and decides the statistical comparisons of the whole
run together (Holm), while `specgate baseline diff` decides the comparisons of one pair of files. The acceptance
rate is an SLA on the stored value: the check passes only when the (1 − α) upper confidence bound of the relative
drop stays within `max_acceptance_drop`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from specgate.accuracy import compare_accuracy
from specgate.checks import DRIFT, REGRESSION, Check
from specgate.comparison import (
    ACCEPTANCE,
    METRICS,
    OUTPUT_DRIFT,
    TASK_ACCURACY,
    Arms,
    acceptance_drop_bound,
    compare_metric,
    holm_family,
)
from specgate.config import GatePolicy, SlaLimits
from specgate.evaluation import first_divergence
from specgate.stats.tests import Comparison
from specgate.store.records import RunRecord

Where = tuple[str, str]


def comparison_check(where: Where, comparison: Comparison, source: str) -> Check:
    verdict = "REGRESSED" if comparison.regressed else "no regression"
    return Check(
        name=f"regression:{comparison.metric}",
        pair=where[0],
        workload=where[1],
        category=REGRESSION,
        passed=not comparison.regressed,
        message=f"{verdict}: {comparison.describe()} [baseline {source}]",
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
            "baseline_file": source,
        },
    )


def acceptance_check(
    where: Where, before: RunRecord, after: RunRecord, arm: str, source: str, sla: SlaLimits, policy: GatePolicy
) -> Check:
    """Pass only when the acceptance rate has, with confidence 1 − α, not dropped more than the allowed share."""
    name = f"regression:{ACCEPTANCE}"
    stored, current = before.arms.get(arm), after.arms.get(arm)
    rate_before = None if stored is None else stored.acceptance_rate
    rate_now = None if current is None else current.acceptance_rate
    if stored is None or current is None or rate_before is None or rate_now is None:
        message = f"BLOCK: acceptance rate missing (baseline {rate_before}, current {rate_now}) [baseline {source}]"
        return Check(name, where[0], where[1], REGRESSION, False, message)
    try:
        drop, upper = acceptance_drop_bound(stored, current, 1 - policy.alpha)
    except ValueError as exc:
        return Check(name, where[0], where[1], REGRESSION, False, f"BLOCK: {exc} [baseline {source}]")
    ok = upper <= sla.max_acceptance_drop
    message = (
        f"acceptance rate {rate_before:.4f} → {rate_now:.4f}: relative drop {drop:+.1%} "
        f"({1 - policy.alpha:.0%} upper bound {upper:+.1%}, jackknife over prompts) {'≤' if ok else '>'} allowed "
        f"{sla.max_acceptance_drop:.0%} (n={len(current.samples)} requests) [baseline {source}]"
    )
    return Check(
        name,
        where[0],
        where[1],
        REGRESSION,
        ok,
        message,
        observed=rate_now,
        limit=sla.max_acceptance_drop,
        baseline=rate_before,
        n=len(current.samples),
        details={"relative_drop": drop, "upper_bound": upper},
    )


def output_drift_check(
    where: Where, before: RunRecord, after: RunRecord, arm: str, source: str, sla: SlaLimits
) -> Check:
    """Outputs against the baseline's. With the same model files they must not drift beyond the SLA (greedy decoding
    is deterministic); after a model update they are expected to change, and the check reports by how much."""
    old = before.arms[arm].outputs if arm in before.arms else {}
    new = after.arms[arm].outputs if arm in after.arms else {}
    common = sorted(set(old) & set(new))
    changed = [k for k in common if old[k] != new[k]]
    share = len(changed) / len(common) if common else 1.0
    same_models = dict(before.models.get(arm, {})) == dict(after.models.get(arm, {}))
    ok = bool(common) and (share <= sla.max_drift or not same_models)
    detail = ""
    if changed:
        first = changed[0]
        similarity = sum(difflib.SequenceMatcher(None, old[k], new[k]).ratio() for k in changed) / len(changed)
        detail = (
            f"; first: {first} at token {first_divergence(old[first], new[first])}; mean token similarity "
            f"of changed outputs {similarity:.2f}"
        )
    reason = (
        "same model files as the baseline: greedy outputs must match"
        if same_models
        else "model files changed since the baseline: drift expected, task accuracy decides"
    )
    message = (
        f"outputs vs baseline: {len(changed)}/{len(common)} requests changed ({share:.1%}, SLA "
        f"{sla.max_drift:.1%}; {reason}){detail} [baseline {source}]"
    )
    return Check(
        f"regression:{OUTPUT_DRIFT}",
        where[0],
        where[1],
        REGRESSION if same_models else DRIFT,
        ok,
        message,
        observed=share,
        limit=sla.max_drift,
        n=len(common),
        details={"same_models": same_models},
    )


def accuracy_check(where: Where, before: RunRecord, after: RunRecord, arm: str, source: str, sla: SlaLimits) -> Check:
    """Task accuracy of the released arm must not fall more than `max_accuracy_drop` (absolute) below the baseline."""
    old, new = before.accuracy.get(arm), after.accuracy.get(arm)
    if old is None or new is None:
        message = (
            f"BLOCK: no task accuracy to compare (baseline {source} has {'none' if old is None else 'one'}; this run "
            f"{'none' if new is None else 'one'}). Re-record the baseline with --update-baselines."
        )
        return Check(f"regression:{TASK_ACCURACY}", where[0], where[1], REGRESSION, False, message)
    passed, message = compare_accuracy(old, new, sla.max_accuracy_drop)
    return Check(
        f"regression:{TASK_ACCURACY}",
        where[0],
        where[1],
        REGRESSION,
        passed,
        f"{message} [baseline {source}]",
        observed=new.accuracy,
        limit=sla.max_accuracy_drop,
        n=new.n,
        baseline=old.accuracy,
    )


Pending = tuple[str, Comparison]


def pending_comparisons(
    where: Where, before: RunRecord, after: RunRecord, source: str, arms: Arms, policy: GatePolicy, sla: SlaLimits
) -> tuple[dict[str, Check | Exception], list[Pending]]:
    """The deterministic checks of one pair × workload, decided, and its statistical comparisons, not yet corrected
    for the run's other comparisons (see `decide_comparisons`)."""
    from specgate.errors import MeasurementError

    done: dict[str, Check | Exception] = {
        ACCEPTANCE: acceptance_check(where, before, after, arms.released, source, sla, policy),
        OUTPUT_DRIFT: output_drift_check(where, before, after, arms.released, source, sla),
    }
    if before.accuracy or after.accuracy:  # a workload with reference answers (either side missing them blocks)
        done[TASK_ACCURACY] = accuracy_check(where, before, after, arms.released, source, sla)
    pending: list[Pending] = []
    for metric in METRICS:
        try:
            pending.append((metric.name, compare_metric(metric, before, after, arms, policy, sla)))
        except (ValueError, KeyError) as exc:
            done[metric.name] = MeasurementError(f"cannot compare {metric.name} with {source}: {exc}")
    return done, pending


def decide_comparisons(pending: Sequence[tuple[Where, str, Comparison]], alpha: float) -> list[Check]:
    """Holm over every statistical comparison of the run, each turned into its check."""
    adjusted = holm_family([c for _, _, c in pending], alpha)
    return [comparison_check(where, c, source) for (where, source, _), c in zip(pending, adjusted, strict=True)]


def compare_runs(
    before: RunRecord, after: RunRecord, source: str, arms: Arms, policy: GatePolicy, sla: SlaLimits
) -> dict[str, Check | Exception]:
    """Every regression check of one pair of runs (their statistical comparisons one Holm family)."""
    where = (after.pair, after.workload)
    done, pending = pending_comparisons(where, before, after, source, arms, policy, sla)
    decided = decide_comparisons([(where, source, c) for _, c in pending], policy.alpha)
    done.update({name: check for (name, _), check in zip(pending, decided, strict=True)})
    return done
