"""A concurrency sweep: where speculative decoding stops paying as the batch grows.

Speculation spends spare compute on latency; as more requests share each engine step the spare compute goes, and
past some concurrency the verification of drafted tokens costs more than it saves. A workload with `sweep: [1, 2, 4,
8]` measures plain decoding and every gated speculative arm at each level, on the engines that batch (vLLM,
served endpoints), and this module summarizes it per level and arm: output tokens per second, goodput (requests
within the SLA's TTFT and per-token limits, per second), P99 TTFT and TPOT, acceptance, and the paired speedup S.

Design. Rounds are the outer loop and levels the inner one (ascending in even rounds, descending in odd ones, so slow
drift falls on every level alike); at each level the arms run in the plan's balanced order, each arm's whole
workload offered at that concurrency (one unit). Engines that renew instances (the vLLM servers) get new ones
between rounds, so each round is also an instance pair. S at a level is the geometric mean over rounds of plain
decoding's wall time over the arm's (the same requests and, greedy, the same output tokens: a throughput ratio),
with a Student-t 95 % interval on the rounds' log ratios — the rounds are the replicates, never the requests of one
batch, which share one engine step after another.

A level *pays* when the interval's lower end reaches `min_speedup`, does *not pay* when its upper end stays below it,
and is *undecided* otherwise (one round gives no interval: undecided). The knee is the highest level at which
speculation pays at that level and at every level below it. `concurrency_knee` (`specgate.checks.sweep`) gates the
profile's `sla.deployment_concurrency` against it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specgate.config import GatePolicy, SlaLimits
from specgate.engines.base import ArmRun, Engine, LoadShape, Prompt, RenewsInstances
from specgate.engines.openai.metrics import GoodputSlo, measure_goodput
from specgate.measure.metrics import summarize_arm
from specgate.measure.protocol import Measurement, timed_run
from specgate.plan import MeasurementPlan

PAYS, DOES_NOT_PAY, UNDECIDED = "pays", "does not pay", "undecided"


@dataclass(frozen=True, slots=True)
class LevelArm:
    """One arm at one concurrency level, over every round."""

    arm: str
    requests: int
    failed: int
    output_tokens_per_s: float
    goodput_per_s: float
    p99_ttft_ms: float | None
    p99_tpot_ms: float | None
    acceptance_rate: float | None


@dataclass(frozen=True, slots=True)
class LevelSpeedup:
    """S of `arm` over plain decoding (`against`) at one level: the rounds' geometric mean with a t interval."""

    arm: str
    against: str
    value: float
    ci: tuple[float, float]
    rounds: int
    decision: str  # PAYS, DOES_NOT_PAY or UNDECIDED against the sweep's min_speedup


@dataclass(frozen=True, slots=True)
class SweepLevel:
    concurrency: int
    wall_s: float
    arms: tuple[LevelArm, ...]
    speedups: tuple[LevelSpeedup, ...]

    def speedup(self, arm: str) -> LevelSpeedup | None:
        return next((s for s in self.speedups if s.arm == arm), None)

    def arm(self, name: str) -> LevelArm | None:
        return next((a for a in self.arms if a.arm == name), None)


@dataclass(frozen=True, slots=True)
class Knee:
    """Where speculation in `arm` stops paying: `level` is the highest level at which it pays there and at every
    level below (None: not even at the first); `first_not_paying` the lowest level shown not to pay; `undecided`
    the levels whose interval straddles the limit."""

    arm: str
    level: int | None
    first_not_paying: int | None
    undecided: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Sweep:
    """The whole sweep of one pair × workload; `goodput_slo` is (TTFT ms, TPOT ms) a good request stays within."""

    plain: str
    levels: tuple[SweepLevel, ...]
    min_speedup: float
    goodput_slo: tuple[float, float]
    knees: tuple[Knee, ...]
    rounds: int
    wall_s: float
    engine: str = ""
    switch_off: str | None = None  # the engine's option that stops speculating past a batch size, where it has one

    def knee(self, arm: str) -> Knee | None:
        return next((k for k in self.knees if k.arm == arm), None)


def describe_knee(sweep: Sweep, knee: Knee) -> str:
    """The knee in words: where speculation pays, and where it stops (or that the sweep did not reach that)."""
    top = sweep.levels[-1].concurrency if sweep.levels else 0
    if knee.level is None:
        found = "speculation is not shown to pay at any level"
    elif knee.level == top:
        found = f"speculation pays at every level measured, up to {top} in flight (where it stops lies beyond)"
    else:
        found = f"speculation pays up to {knee.level} in flight"
    if knee.first_not_paying is not None:
        found += f"; it does not pay from {knee.first_not_paying} in flight"
    if knee.undecided:
        found += f"; undecided at {', '.join(map(str, knee.undecided))}"
    return found


def sweep_arms(plan: MeasurementPlan) -> tuple[str, ...]:
    """The arms a sweep measures: plain decoding and the gated speculative arms (a reference is not swept)."""
    return tuple(a for a in plan.names if a == plan.plain or a in plan.gated)


def measure_sweep(
    engine: Engine,
    plan: MeasurementPlan,
    prompts: Sequence[Prompt],
    policy: GatePolicy,
    levels: Sequence[int],
    say: Callable[[str], None] | None = None,
) -> dict[int, dict[str, list[ArmRun]]]:
    """Every arm's runs at every level (see the module docstring); `say` hears a line after each level of a round."""
    arms = sweep_arms(plan)
    runs: dict[int, dict[str, list[ArmRun]]] = {c: {a: [] for a in arms} for c in levels}
    for arm in arms:  # warm-up, untimed (a server specgate starts also warms itself)
        for prompt in prompts[: policy.warmup]:
            engine.run([prompt], arm, repetition=-1)
    started, done, total = time.perf_counter(), 0, policy.repetitions * len(levels)
    for r in range(policy.repetitions):
        if r and isinstance(engine, RenewsInstances):
            engine.renew(arms)
        for index, level in enumerate(levels if r % 2 == 0 else tuple(reversed(levels))):
            for arm in plan.order(r, index, arms):
                runs[level][arm].append(timed_run(engine, prompts, arm, r, LoadShape(level)))
            done += 1
            if say is not None:
                elapsed = time.perf_counter() - started
                left = elapsed / done * (total - done)
                say(
                    f"round {r + 1}/{policy.repetitions}, {level} in flight done ({done}/{total} level-rounds), "
                    f"{elapsed / 60:.1f} min elapsed, about {left / 60:.1f} min left"
                )
    return runs


def level_measurement(measurement: Measurement, runs: Mapping[str, Sequence[ArmRun]]) -> Measurement:
    """`measurement` (the sweep's frame) with one level's runs."""
    return replace(measurement, runs={arm: tuple(r) for arm, r in runs.items()})


def summarize_sweep(
    plan: MeasurementPlan,
    runs: Mapping[int, Mapping[str, Sequence[ArmRun]]],
    sla: SlaLimits,
    wall_s: float,
    seed: int = 0,
    engine: str = "",
    switch_off: str | None = None,
) -> Sweep:
    """The sweep's table and knees (see the module docstring)."""
    arms = sweep_arms(plan)
    slo = (sla.p99_ttft_ms, 1000.0 / sla.min_decode_tokens_per_s)
    levels = []
    for level, by_arm in sorted(runs.items()):
        rows = tuple(_level_arm(arm, by_arm[arm], slo, seed) for arm in arms)
        speedups = tuple(
            _speedup(arm, plan.plain, by_arm[plan.plain], by_arm[arm], sla.min_speedup)
            for arm in arms
            if arm != plan.plain
        )
        wall = sum(r.wall_s for arm in arms for r in by_arm[arm])
        levels.append(SweepLevel(level, wall, rows, speedups))
    knees = tuple(knee_of(levels, arm) for arm in arms if arm != plan.plain)
    rounds = min((len(r) for by_arm in runs.values() for r in by_arm.values()), default=0)
    return Sweep(plan.plain, tuple(levels), sla.min_speedup, slo, knees, rounds, wall_s, engine, switch_off)


def _level_arm(arm: str, runs: Sequence[ArmRun], slo: tuple[float, float], seed: int) -> LevelArm:
    summary = summarize_arm(arm, runs, seed=seed)
    good = sum(measure_goodput(run, GoodputSlo(ttft_ms=slo[0], tpot_ms=slo[1])).n_good for run in runs)
    wall = summary.wall_s
    acceptance = summary.acceptance
    return LevelArm(
        arm=arm,
        requests=summary.n_requests,
        failed=summary.n_failed,
        output_tokens_per_s=summary.output_tokens / wall if wall > 0 else 0.0,
        goodput_per_s=good / wall if wall > 0 else 0.0,
        p99_ttft_ms=None if summary.ttft_ms is None else summary.ttft_ms.p99,
        p99_tpot_ms=None if summary.tpot_ms is None else summary.tpot_ms.p99,
        acceptance_rate=None if acceptance is None else acceptance.rate,
    )


def _speedup(
    arm: str, plain: str, plain_runs: Sequence[ArmRun], arm_runs: Sequence[ArmRun], limit: float
) -> LevelSpeedup:
    """Paired by round; a round with a failed request is left out (its wall time would fake a speedup)."""
    by_round = {r.traces[0].repetition: r for r in plain_runs if r.traces and _complete(r)}
    logs = np.asarray(
        [
            math.log(by_round[r.traces[0].repetition].wall_s / r.wall_s)
            for r in arm_runs
            if r.traces and _complete(r) and r.traces[0].repetition in by_round and r.wall_s > 0
        ]
    )
    if not len(logs):
        return LevelSpeedup(arm, plain, float("nan"), (float("nan"), float("nan")), 0, UNDECIDED)
    value = float(np.exp(logs.mean()))
    if len(logs) < 2:
        return LevelSpeedup(arm, plain, value, (float("nan"), float("nan")), 1, UNDECIDED)
    from scipy import stats  # here: importing scipy.stats probes torch, which a served-only install lacks

    half = float(stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs)))
    low, high = float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))
    decision = PAYS if low >= limit else DOES_NOT_PAY if high < limit else UNDECIDED
    return LevelSpeedup(arm, plain, value, (low, high), len(logs), decision)


def _complete(run: ArmRun) -> bool:
    return all(t.error is None for t in run.traces)


def knee_of(levels: Sequence[SweepLevel], arm: str) -> Knee:
    """The arm's knee over the levels, ascending (see `Knee`)."""
    knee: int | None = None
    prefix = True
    first_not: int | None = None
    undecided = []
    for level in levels:
        s = level.speedup(arm)
        decision = UNDECIDED if s is None else s.decision
        if decision == DOES_NOT_PAY and first_not is None:
            first_not = level.concurrency
        if decision == UNDECIDED:
            undecided.append(level.concurrency)
        prefix = prefix and decision == PAYS
        if prefix:
            knee = level.concurrency
    return Knee(arm, knee, first_not, tuple(undecided))


def needed_levels(sweep: Sweep, deployment: int) -> tuple[SweepLevel, ...] | None:
    """The levels that must pay for a deployment of `deployment` requests in flight: every level up to the first
    one at or above it (an unmeasured level in between is judged by the next measured one); None when the sweep
    stops below it."""
    above = [lv for lv in sweep.levels if lv.concurrency >= deployment]
    if not above:
        return None
    return tuple(lv for lv in sweep.levels if lv.concurrency <= above[0].concurrency)
