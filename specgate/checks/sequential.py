"""What more measuring would decide: more rounds for latency beside the reference, more prompts for acceptance.

- `stop_rule`: in reference mode, rounds continue while a latency comparison beside the reference is UNKNOWN (up to
  `gate.max_repetitions`; `specgate.measure.protocol`).
- `extend_acceptance`: when a speculative arm's acceptance cannot be told from its reference's on the timed
  prompts, the workload's acceptance pool is measured step by step (`specgate.measure.pool`).

Both decide with the very functions the final checks use, at the levels the final checks hold (their looks counted),
so stopping early never changes what a check would say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specgate.checks import Check
from specgate.checks.judgement import beside_latency
from specgate.checks.levels import acceptance_levels, looks_of
from specgate.checks.regression import Levels, acceptance_check
from specgate.checks.subject import Subject
from specgate.config import GatePolicy, SlaLimits, WorkloadConfig
from specgate.engines.base import Engine, Prompt
from specgate.measure.pool import extend_over_pool, pool_steps
from specgate.measure.protocol import Measurement, RunObserver
from specgate.measure.samples import arm_samples, probe_samples
from specgate.measure.workloads import load_workload
from specgate.plan import MeasurementPlan
from specgate.store.records import RunRecord


def stop_rule(
    plan: MeasurementPlan, hardware: str, sla: SlaLimits, policy: GatePolicy, family: int, prompts: int
) -> Callable[[Measurement], bool]:
    """Stop adding rounds once no latency comparison beside the reference is UNKNOWN (reference mode)."""
    levels = Levels(policy.alpha, looks_of(policy, True), family)

    def stop(measurement: Measurement) -> bool:
        arms = {arm: arm_samples(runs) for arm, runs in measurement.runs.items()}
        probes = {arm: probe_samples(runs) for arm, runs in measurement.probes.items()}
        record = RunRecord(hardware, plan.pair, plan.workload, arms, probes=probes)
        results = beside_latency(Subject(plan, record, None, "", sla, prompts, 0), policy, levels)
        outcomes = [r.details.get("outcome") if isinstance(r, Check) else "UNKNOWN" for r in results.values()]
        # a blocked comparison blocks the release whatever the others say; otherwise every one must be decided
        return "BLOCK" in outcomes or "UNKNOWN" not in outcomes

    return stop


def undecided_acceptance(
    plan: MeasurementPlan, hardware: str, sla: SlaLimits, policy: GatePolicy, steps: tuple[int, ...]
) -> Callable[[Measurement], list[str]]:
    """The arms (candidate and reference) whose acceptance comparison beside the reference is UNKNOWN on a
    measurement so far, timed requests and acceptance pool together (`specgate.measure.pool`)."""

    def undecided(measurement: Measurement) -> list[str]:
        arms = {arm: arm_samples(runs) for arm, runs in measurement.runs.items()}
        pool = {arm: arm_samples(runs) for arm, runs in measurement.pool.items()}
        record = RunRecord(hardware, plan.pair, plan.workload, arms, pool=pool)
        found: list[str] = []
        for arm, ref_arm in plan.beside:
            if plan.arm(arm).speculative:
                check = acceptance_check(
                    "", ("", ""), record.acceptance_view(ref_arm), record.acceptance_view(arm), sla,
                    acceptance_levels(policy, steps, record.acceptance_view(arm)), "", arm=arm,
                )  # fmt: skip
                if check.details.get("outcome") == "UNKNOWN":
                    found += [arm, ref_arm]
        return found

    return undecided


def pool_hint(plan: MeasurementPlan, workload: WorkloadConfig) -> str:
    """Where more prompts for an undecided acceptance comparison come from, in words."""
    name = f"workloads.{workload.name}.acceptance_prompts"
    if plan.reference is None:
        return (
            f"; against a stored baseline the pool is not measured: gate beside a reference (pairs.{plan.pair}."
            f"reference or --reference=PAIR) to extend over {name}"
        )
    if workload.acceptance_prompts is None:
        return f"; set {name} (with that many prompts in {workload.path.name}) to extend the comparison over them"
    return (
        f"; the acceptance pool ({name}: {workload.acceptance_prompts}) is spent: add prompts to "
        f"{workload.path.name} and raise it"
    )


def acceptance_steps(plan: MeasurementPlan, workload: WorkloadConfig, timed: int) -> tuple[int, ...]:
    """The prompt counts an acceptance comparison is looked at: the pool's steps in reference mode, else none."""
    pooled = plan.beside and workload.acceptance_prompts
    return pool_steps(timed, workload.acceptance_prompts) if pooled else ()


def extend_acceptance(
    engine: Engine,
    measurement: Measurement,
    workload: WorkloadConfig,
    sla: SlaLimits,
    policy: GatePolicy,
    observer: RunObserver | None = None,
) -> Measurement:
    """The measurement, extended over the workload's acceptance pool while an acceptance comparison beside the
    reference is UNKNOWN (reference mode with `acceptance_prompts` only)."""
    plan, prompts = measurement.plan, measurement.prompts
    if not plan.beside or not workload.acceptance_prompts:
        return measurement
    pool: Sequence[Prompt] = load_workload(workload, limit=workload.acceptance_prompts)[len(prompts) :]
    steps = acceptance_steps(plan, workload, len(prompts))
    undecided = undecided_acceptance(plan, measurement.hardware, sla, policy, steps)
    return extend_over_pool(engine, measurement, pool, undecided, observer) if pool else measurement
