"""What more measuring would decide: more rounds for latency beside the reference, more prompts for acceptance.

- `stop_rule`: in reference mode, rounds continue while a latency comparison beside the reference is UNKNOWN, in
  batches sized from the spread measured so far, in the arms of the undecided comparisons only (up to
  `gate.max_repetitions` rounds and `gate.looks` looks; `specgate.measure.protocol`).
- `undecided_acceptance`: the arms whose acceptance cannot be told from their reference's yet, on the timed prompts
  and the pool measured so far (`specgate.measuring` then measures the workload's acceptance pool step by step).

Both decide with the very functions the final checks use, at the levels the final checks hold (their looks counted),
so stopping early never changes what a check would say.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from specgate.checks import Check, Outcome, RegressionKey
from specgate.checks.acceptance import acceptance_check, shared_positions
from specgate.checks.beside import beside_latency
from specgate.checks.levels import acceptance_levels, looks_of
from specgate.checks.regression import Levels
from specgate.checks.subject import Subject
from specgate.config import GatePolicy, SlaLimits, WorkloadConfig
from specgate.measure.pool import pool_steps
from specgate.measure.protocol import Measurement, Next
from specgate.measure.samples import arm_samples, probe_samples
from specgate.plan import MeasurementPlan
from specgate.stats.decision import percent, t_quantile, units_needed, units_to_pass
from specgate.store.records import RunRecord


def stop_rule(
    plan: MeasurementPlan, hardware: str, sla: SlaLimits, policy: GatePolicy, family: int, prompts: int, probes: int = 0
) -> Callable[[Measurement], Next]:
    """The planner of a reference-mode measurement (`specgate.measure.protocol`): stop once no latency comparison
    beside the reference is UNKNOWN (or one is REGRESSED: the release is blocked whatever the others say); else size
    the next batch of rounds from the spread measured so far, so that each undecided comparison would pass with
    probability `policy.pass_probability` (shared among them) if the configurations were the same, and measure only
    the arms those comparisons read."""
    levels = Levels(policy.alpha, looks_of(policy, True), family)

    def plan_next(measurement: Measurement) -> Next:
        arms = {arm: arm_samples(runs) for arm, runs in measurement.runs.items()}
        probed = {arm: probe_samples(runs) for arm, runs in measurement.probes.items()}
        record = RunRecord(hardware, plan.pair, plan.workload, arms, probes=probed)
        # tails are compared for detection only (never UNKNOWN): more rounds are not for them
        results = beside_latency(Subject(plan, record, None, "", sla, prompts, 0), policy, levels, tails=False)
        checks = {key: r for key, r in results.items() if isinstance(r, Check)}
        if any(c.outcome is Outcome.BLOCK for c in checks.values()):
            blocked = ", ".join(k.name for k, c in checks.items() if c.outcome is Outcome.BLOCK)
            return Next(0, why=f"{blocked} REGRESSED ({_said(checks)})")
        undecided = {n: c for n, c in checks.items() if c.outcome is Outcome.UNKNOWN}
        failed = [k for k, r in results.items() if not isinstance(r, Check)]
        said = _said(checks)
        if not undecided and not failed:
            return Next(0, why=f"every comparison decided ({said})")
        miss = (1.0 - policy.pass_probability) / max(1, len(undecided))
        rounds = 1
        for key, check in undecided.items():
            mean_ttft = key.statistic.endswith("ttft_ms") and "p99" not in key.statistic  # probes add its units
            per_round = prompts * (1 + probes) if mean_ttft else prompts
            rounds = max(rounds, _rounds_to_decide(check, levels, miss, per_round))
        needed = {a for c in undecided.values() if c.arm for a in (c.arm, dict(plan.beside).get(c.arm, c.arm))}
        needed |= set(plan.names) if failed else set()
        left = policy.max_repetitions - measurement.rounds
        if rounds > left:  # said, so that a progress line never promises rounds the budget will not run
            said += f"; the spread asks for {rounds} more round(s), gate.max_repetitions allows {max(0, left)}"
            rounds = max(0, left)
        return Next(rounds, tuple(a for a in plan.names if a in needed), why=said)

    return plan_next


def _said(checks: dict[RegressionKey, Check]) -> str:
    """The running decisions in a few words: "tpot_ms PASS +0.3 % (≤ +2.1 %); …"."""
    parts = []
    for key, check in checks.items():
        change, ci = check.details.get("relative_change"), check.ci
        outcome = "REGRESSED" if check.outcome is Outcome.BLOCK else str(check.outcome and check.outcome.value)
        numbers = "" if change is None else f" {percent(change)}" + ("" if ci is None else f" (≤ {percent(ci[1])})")
        parts.append(f"{key.statistic} {outcome}{numbers}")
    return "; ".join(parts)


def _rounds_to_decide(check: Check, levels: Levels, miss: float, per_round: int) -> int:
    """More rounds an UNKNOWN comparison needs: to pass with probability 1 − `miss` if nothing changed (its estimate
    below the tolerance), else to be told significant, at the spread measured so far."""
    n = check.n or 0
    mde, change = check.details.get("mde"), check.details.get("relative_change")
    spread = check.details.get("spread")
    if not n or spread is None or change is None or mde is None:
        return 1
    threshold = math.log1p(check.limit or 0.0)
    t_pass = t_quantile(1 - levels.alpha_pass, max(1, n - 1))
    estimate = math.log1p(change)
    if estimate < threshold:
        target = units_to_pass(spread, threshold=threshold, t_pass=t_pass, miss=miss)
    else:
        target = units_needed(estimate, spread, threshold=threshold, t_pass=t_pass, t_block=t_pass)
    return max(1, math.ceil((min(target, 10**6) - n) / max(1, per_round)))


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
                    "",
                    ("", ""),
                    record.acceptance_view(ref_arm),
                    record.acceptance_view(arm),
                    sla,
                    acceptance_levels(policy, steps, record.acceptance_view(arm)),
                    "",
                    arm=arm,
                    lengths=shared_positions(plan, arm, ref_arm),
                )
                if check.outcome is Outcome.UNKNOWN:
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
