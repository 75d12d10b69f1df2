"""The significance levels of the regression comparisons: how often a comparison may be looked at, how many
latency comparisons share the run's α (the Holm/Bonferroni family), and the share of α an acceptance pool step
spends."""

from __future__ import annotations

from specgate.checks.regression import Levels, groups, latency_keys
from specgate.config import GatePolicy
from specgate.measure.pool import look_share
from specgate.measure.samples import ArmSamples
from specgate.plan import MeasurementPlan


def acceptance_levels(policy: GatePolicy, steps: tuple[int, ...], samples: ArmSamples | None) -> Levels:
    """The level of an acceptance comparison: α, or its share for the pool step it was decided at."""
    used = len({s.prompt_id for s in samples.samples}) if samples is not None else 0
    return Levels(policy.alpha * look_share(steps, used))


def looks_of(policy: GatePolicy, reference: bool) -> int:
    """How often a comparison may be looked at: at most `policy.looks` times in reference mode (after the first
    rounds, then after each batch of rounds sized from the spread; never more than there are rounds to add), once
    otherwise."""
    if not reference:
        return 1
    return max(1, min(policy.looks, policy.max_repetitions - policy.repetitions + 1))


def family_size(plans: list[tuple[MeasurementPlan, bool]]) -> int:
    """The number of groups of latency comparisons the run gates (on workloads that gate speed): per pair ×
    workload × candidate arm, its mean comparisons (one group, `specgate.checks.family`) and its tail (another).

    `plans` are (plan, whether its workload gates speed)."""
    count = 0
    for plan, speed in plans:
        if not speed:
            continue
        keys = latency_keys(plan, beside=True) if plan.reference else latency_keys(plan, beside=False)
        count += groups(keys, plan.released)
    return max(1, count)
