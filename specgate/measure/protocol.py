"""The measurement protocol: warm-up, arms interleaved in alternating order, rounds, optional early stopping.

Warm-up requests (the first `warmup` prompts, in every arm, just before the arm's first measured call) are run and
discarded. Then each round runs every prompt in every arm of the plan. Engines that take one request at a time
run the arms prompt by prompt, in the order `MeasurementPlan.order` gives: every two arms swap their order from one
prompt to the next and from one round to the next (ABBA), so slow drift of the machine (thermal, other load) falls
on every arm alike; engines that batch run whole arms, alternating the order per round. Runs are recorded in
execution order, so unit k of one arm pairs with unit k of every other arm (same prompt, same round).

With a `stop` rule and `policy.max_repetitions` above `policy.repetitions`, rounds continue one at a time after the
first `repetitions` until `stop(measurement so far)` says every decision is clear, or `max_repetitions` is reached.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from specgate.config import GatePolicy
from specgate.engines.base import ArmRun, Engine, LoadShape, Prompt, RequestTrace
from specgate.errors import MeasurementError
from specgate.plan import MeasurementPlan


@dataclass(frozen=True, slots=True)
class Measurement:
    """The raw result of measuring one plan: runs per arm in execution order, with what the engine ran.

    `models` are the model files' hashes by arm and role; `cost_ratios` the draft/target step cost c by arm;
    `probes` the time-to-first-token probes by arm (one-token requests, see `measure_plan`); `pool` the acceptance
    pool's requests by arm, on `pool_prompts` (`specgate.measure.pool`)."""

    plan: MeasurementPlan
    hardware: str
    engine: str
    prompts: tuple[Prompt, ...]
    runs: Mapping[str, tuple[ArmRun, ...]]
    versions: Mapping[str, str] = field(default_factory=dict)
    models: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    cost_ratios: Mapping[str, float | None] = field(default_factory=dict)
    rounds: int = 0
    probes: Mapping[str, tuple[ArmRun, ...]] = field(default_factory=dict)
    pool: Mapping[str, tuple[ArmRun, ...]] = field(default_factory=dict)
    pool_prompts: tuple[Prompt, ...] = ()
    started_at: float = 0.0
    duration_s: float = 0.0

    @property
    def pair(self) -> str:
        return self.plan.pair

    @property
    def workload(self) -> str:
        return self.plan.workload

    @property
    def arms(self) -> tuple[str, ...]:
        return self.plan.names


class RunObserver(Protocol):
    """Watches every measured engine call (telemetry, peak memory). Must be cheap: it sits beside the hot path."""

    def before_run(self, arm: str) -> None: ...

    def after_run(self, arm: str, run: ArmRun) -> None: ...


StopRule = Callable[[Measurement], bool]


def measure_plan(
    engine: Engine,
    plan: MeasurementPlan,
    prompts: Sequence[Prompt],
    policy: GatePolicy,
    *,
    hardware: str,
    observer: RunObserver | None = None,
    stop: StopRule | None = None,
    probes: int = 0,
    load: LoadShape | None = None,
) -> Measurement:
    """Run every arm of the plan on the prompts of a loaded engine, round by round (see the module docstring).

    With `probes` (engines that take one request at a time), each prompt is also sent `probes` more times per arm
    and round with a one-token output budget, interleaved like the rest: their time to first token is the same
    prefill as a full request's, at a fraction of its cost, so a TTFT comparison gets several times more units. They
    are kept apart (`Measurement.probes`) and feed nothing but TTFT. Engines that run a whole arm at once offer its
    requests as `load` says (the workload's load shape; None: the engine's default)."""
    if not prompts:
        raise MeasurementError(f"workload {plan.workload!r} has no prompts to measure")
    started = time.time()
    clock = time.perf_counter()
    runs: dict[str, list[ArmRun]] = {arm: [] for arm in plan.names}
    probe_runs: dict[str, list[ArmRun]] = {arm: [] for arm in plan.names}
    warmed: set[str] = set()
    rounds = 0

    def run(batch: Sequence[Prompt], arm: str, repetition: int) -> None:
        if arm not in warmed:  # just before the arm's first measured call: engines that switch arms start once
            warmed.add(arm)
            for prompt in prompts[: policy.warmup]:
                engine.run([prompt], arm, repetition=-1)
        if observer is not None:
            observer.before_run(arm)
        result = checked_run(
            engine.run(batch, arm, repetition=repetition)
            if engine.per_request
            else engine.run(batch, arm, repetition=repetition, load=load)
        )
        if observer is not None:
            observer.after_run(arm, result)
        runs[arm].append(result)

    def snapshot() -> Measurement:
        return Measurement(
            plan=plan,
            hardware=hardware,
            engine=engine.name,
            prompts=tuple(prompts),
            runs={arm: tuple(r) for arm, r in runs.items()},
            versions=dict(engine.versions()),
            models={arm: {role: m.sha256 for role, m in engine.models(arm).items()} for arm in plan.names},
            cost_ratios={arm: engine.cost_ratio(arm) for arm in plan.names},
            rounds=rounds,
            started_at=started,
            duration_s=time.perf_counter() - clock,
            probes={arm: tuple(r) for arm, r in probe_runs.items() if r},
        )

    last = max(policy.repetitions, policy.max_repetitions if stop is not None else 0)
    for repetition in range(last):
        if engine.per_request:
            for index, prompt in enumerate(prompts):
                for arm in plan.order(repetition, index):
                    run([prompt], arm, repetition)
                probe = replace(prompt, max_new_tokens=1)
                for turn in range(probes):
                    for arm in plan.order(repetition, index + turn + 1):
                        probe_runs[arm].append(checked_run(engine.run([probe], arm, repetition=repetition)))
        else:
            for arm in plan.order(repetition):
                run(list(prompts), arm, repetition)
        rounds = repetition + 1
        if stop is not None and policy.repetitions <= rounds < last and stop(snapshot()):
            break
    return snapshot()


NON_FINITE = "the engine reported non-finite times (NaN or inf): a broken clock or a numerical fault of the engine"


def checked_run(run: ArmRun) -> ArmRun:
    """`run` with every request whose times are not finite numbers marked failed: such a request is an engine
    fault, never a latency (NaN would compare false with every SLA, and inf would make every statistic inf)."""
    if not math.isfinite(run.wall_s):
        raise MeasurementError(f"arm {run.arm!r}: {NON_FINITE} (wall time {run.wall_s})")
    if all(_finite(t) for t in run.traces):
        return run
    traces = tuple(t if _finite(t) else replace(t, error=NON_FINITE) for t in run.traces)
    return replace(run, traces=traces)


def _finite(trace: RequestTrace) -> bool:
    return all(math.isfinite(x) for x in (trace.submit_s, trace.done_s, *trace.chunk_times_s))
