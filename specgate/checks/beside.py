"""Beside the reference: the candidate's arms against the reference's arms measured in the same run.

`beside_latency` gives the `reference:<metric>` latency checks (the sequential stopping rule calls it on partial
rounds too), `beside` every `reference:*` check: latency, acceptance, the released arm's outputs and task accuracy.
Latency is read in the run's clock (`specgate.comparison.clock_of`); an UNKNOWN on a busy machine says how busy it
was (`specgate.checks.interference`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from specgate.checks import Against, reference_key
from specgate.checks.acceptance import acceptance_check, shared_positions
from specgate.checks.interference import busy
from specgate.checks.levels import acceptance_levels
from specgate.checks.regression import (
    Levels,
    accuracy_check,
    latency_keys,
    metric_checks,
    output_drift_check,
)
from specgate.checks.subject import Results, Subject
from specgate.comparison import (
    ACCEPTANCE,
    E2EL_AS_SPEEDUP,
    OUTPUT_DRIFT,
    P99_TTFT,
    TASK_ACCURACY,
    Metric,
    clock_of,
    metric_key,
    paired,
    tail,
    unit_speedups,
)
from specgate.config import GatePolicy
from specgate.measure.samples import ArmSamples
from specgate.plan import MeasurementPlan
from specgate.store.records import RunRecord


def samples_for(record: RunRecord, arm: str, metric: Metric) -> ArmSamples:
    """An arm's samples for a metric: TTFT reads the one-token probes too."""
    return record.ttft_view(arm) if metric.field == "ttft_ms" else record.arms[arm]


def beside_estimate(
    plan: MeasurementPlan,
    record: RunRecord,
    metric: Metric,
    arm: str,
    policy: GatePolicy,
    alpha: float,
    spread: float = 0.0,
) -> object:
    """The estimate of one metric of a candidate arm against its reference arm, both measured in this run, in the
    run's clock (`clock_of`). With one plain arm for both, the speedup ratio is the two arms' own time ratio (the
    plain arm's times cancel unit by unit), so it needs no plain-decoding request in the unit."""
    reference = dict(plan.beside)[arm]
    plain_cand, plain_ref = plan.baseline_of(arm), plan.baseline_of(reference)
    before, after = samples_for(record, reference, metric), samples_for(record, arm, metric)
    clock = clock_of(policy.clock, record.arms[reference], record.arms[arm])
    probes = " with TTFT probes" if metric.field == "ttft_ms" and record.probes else ""
    how = f"paired by prompt and round beside the reference ({reference}){probes}"
    if metric.kind == "tail":
        return tail(metric, before, after, resamples=_resamples(policy, alpha), seed=policy.seed, how=how, clock=clock)
    if metric.kind == "speedup" and plain_cand is not None and plain_cand == plain_ref:
        found = paired(
            E2EL_AS_SPEEDUP, before, after, how=f"{how}, one plain arm for both", clock=clock, instance_spread=spread
        )
        plain = record.arms[plain_cand]
        shown = [unit_speedups(a, plain, clock) for a in (before, after)]
        if not all(shown):
            return found
        return dataclasses.replace(
            found, before=float(np.mean(list(shown[0].values()))), after=float(np.mean(list(shown[1].values())))
        )
    return paired(
        metric,
        before,
        after,
        plain_before=None if plain_ref is None else record.arms[plain_ref],
        plain_after=None if plain_cand is None else record.arms[plain_cand],
        how=how,
        clock=clock,
        instance_spread=spread,
    )


def _resamples(policy: GatePolicy, alpha: float) -> int:
    """Enough bootstrap resamples for the tail's corrected level, never fewer than the policy's."""
    return max(policy.bootstrap_resamples, math.ceil(20 / alpha))


def beside_latency(
    subject: Subject, policy: GatePolicy, levels: Levels, budget: str = "", *, tails: bool = True
) -> Results:
    """`reference:<metric>` latency checks of a plan (the sequential stopping rule calls this on partial rounds)."""
    plan = subject.plan

    def estimate(metric: Metric, arm: str) -> object:
        return beside_estimate(
            plan, subject.record, metric, arm, policy, levels.alpha_block, subject.sla.instance_spread
        )

    record = subject.record
    return metric_checks(
        Against.REFERENCE,
        (plan.pair, plan.workload),
        tuple(k for k in latency_keys(plan, beside=True) if tails or not k.endswith(P99_TTFT.name)),
        plan.released,
        estimate,  # type: ignore[arg-type]
        subject.sla,
        levels,
        lambda arm: f"{dict(plan.beside)[arm]} measured beside it",
        units_per_round=subject.units_per_round,
        budget=budget,
        interference=_busy_text([record.arms.get(a) for pair in plan.beside for a in pair]),
    )


def _busy_text(arms: list[ArmSamples | None]) -> str:
    """How busy the machine was, for an UNKNOWN: interference the guest measured, or that it measured none (then the
    spread comes from below it — other guests on a shared host, frequency changes — or from the configuration)."""
    found = busy(arms)
    if found.wait_share is None and found.others_share is None and found.pressure_share is None:
        return ""
    if not found.busy:
        return (
            f"{found.describe()}, so this spread comes from the configuration or from below the machine (other "
            "guests on a shared host, clock changes): a runner reserved for the gate decides in fewer rounds"
        )
    return f"{found.describe()}: rerun on a quieter runner (or one reserved for the gate)"


def beside(subject: Subject, policy: GatePolicy, levels: Levels, budget: str) -> Results:
    """Every `reference:*` check of a pair × workload."""
    plan, record = subject.plan, subject.record
    where = (plan.pair, plan.workload)
    results = beside_latency(subject, policy, levels, budget)
    for arm, ref_arm in plan.beside:
        if plan.arm(arm).speculative:
            key = reference_key(metric_key(ACCEPTANCE, arm, plan.released))
            results[key] = acceptance_check(
                key.name,
                where,
                record.acceptance_view(ref_arm),
                record.acceptance_view(arm),
                subject.sla,
                acceptance_levels(policy, subject.acceptance_steps, record.acceptance_view(arm)),
                f"{ref_arm} measured beside it",
                arm=arm,
                hint=subject.pool_hint,
                lengths=shared_positions(plan, arm, ref_arm),
            )
    released = plan.released
    reference = dict(plan.beside).get(released)
    if reference is not None:
        same = dict(record.models.get(released, {})) == dict(record.models.get(reference, {}))
        results[reference_key(OUTPUT_DRIFT)] = output_drift_check(
            reference_key(OUTPUT_DRIFT).name,
            where,
            record.arms[reference],
            record.arms[released],
            same,
            subject.sla,
            f"{reference} measured beside it",
            arm=released,
        )
        if record.accuracy:
            results[reference_key(TASK_ACCURACY)] = accuracy_check(
                reference_key(TASK_ACCURACY).name,
                where,
                record.accuracy.get(reference),
                record.accuracy.get(released),
                subject.sla,
                f"{reference} measured beside it",
                arm=released,
            )
    return results
