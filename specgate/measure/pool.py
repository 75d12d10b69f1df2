"""The acceptance pool: more prompts for the acceptance comparison, measured only when the timed ones cannot tell.

Under greedy decoding a prompt's verification steps repeat exactly from round to round, so more rounds add nothing
to an acceptance comparison: only more prompts do. A workload's `acceptance_prompts` names how many prompts of its
file the comparison may use; the prompts after the timed ones (`limit`) form the pool. When the acceptance of a
speculative arm cannot be told from its reference's on the timed prompts (UNKNOWN), the pool is measured in steps
(`pool_steps`: ×5 each, capped at the pool), in the compared arms only, one request per prompt and arm, alternating
which arm goes first, until every comparison is decided or the pool is spent. Pool requests feed acceptance only,
never latency, speedup, outputs or accuracy.

Each comparison is looked at once per step. α is spent over the looks in proportion to the prompts looked at
(`look_share`: n_k / Σ n, a weighted Bonferroni split), so both error rates hold over all looks while the look at the
whole pool, the one that must tell equal drafts apart, keeps most of its power.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from specgate.engines.base import ArmRun, Engine, Prompt
from specgate.measure.protocol import Measurement, RunObserver, accounted

GROWTH = 5


def pool_steps(timed: int, pool: int | None) -> tuple[int, ...]:
    """The prompt counts at which acceptance is looked at: the timed prompts, then ×5 each step up to the pool."""
    steps = [timed]
    while pool is not None and steps[-1] < pool:
        steps.append(min(pool, steps[-1] * GROWTH))
    return tuple(steps)


def look_share(steps: Sequence[int], used: int) -> float:
    """The share of α held by the look at `used` prompts (the first step at or above it) among `steps`."""
    if len(steps) < 2:
        return 1.0
    at = next((n for n in steps if n >= used), steps[-1])
    return at / sum(steps)


def measure_pool(
    engine: Engine, arms: Sequence[str], prompts: Sequence[Prompt], observer: RunObserver | None = None
) -> dict[str, tuple[ArmRun, ...]]:
    """One greedy request per prompt in each arm (round 0), arms alternating first from prompt to prompt; whole-arm
    engines get the prompts as one batch per arm."""
    runs: dict[str, list[ArmRun]] = {arm: [] for arm in arms}

    def run(batch: list[Prompt], arm: str) -> None:
        if observer is not None:
            observer.before_run(arm)
        result = accounted(engine.run(batch, arm, repetition=0), batch, 0)
        if observer is not None:
            observer.after_run(arm, result)
        runs[arm].append(result)

    if engine.per_request:
        for index, prompt in enumerate(prompts):
            for arm in arms if index % 2 == 0 else reversed(arms):
                run([prompt], arm)
    else:
        for arm in arms:
            run(list(prompts), arm)
    return {arm: tuple(r) for arm, r in runs.items()}


def extend_over_pool(
    engine: Engine,
    measurement: Measurement,
    pool: Sequence[Prompt],
    undecided: Callable[[Measurement], Sequence[str]],
    observer: RunObserver | None = None,
) -> Measurement:
    """The measurement with pool requests added while `undecided(measurement)` names arms whose acceptance
    comparison is still UNKNOWN (candidate and reference arms both), step by step (`pool_steps`)."""
    timed = len(measurement.prompts)
    used = 0
    for size in pool_steps(timed, timed + len(pool))[1:]:
        arms = list(dict.fromkeys(undecided(measurement)))
        if not arms:
            break
        batch = pool[used : size - timed]
        used = size - timed
        added = measure_pool(engine, arms, batch, observer)
        merged = {arm: tuple(measurement.pool.get(arm, ())) + added.get(arm, ()) for arm in {*measurement.pool, *arms}}
        measurement = replace(measurement, pool=merged, pool_prompts=measurement.pool_prompts + tuple(batch))
    return measurement
