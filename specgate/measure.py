"""The measurement protocol: warm-up, interleaved arms, repetitions.

Warm-up requests (the first `warmup` prompts, in every arm, just before the arm's first measured call) are run and
discarded. Then each repetition runs every
prompt in every arm. Engines that take one request at a time alternate the arm order per prompt and per
repetition (ar→spec, spec→ar, …), so slow drift of the machine (thermal, other load) falls on both arms alike;
batching engines run whole arms, alternating the order per repetition. Runs are recorded in execution order, so
unit k of one arm pairs with unit k of every other arm (same prompts, same repetition).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specgate.config import GatePolicy
from specgate.engines.base import ArmRun, Engine, Prompt
from specgate.errors import MeasurementError


@dataclass(frozen=True, slots=True)
class Measurement:
    """The raw result of measuring one pair on one workload: runs per arm, reference arm first."""

    pair: str
    workload: str
    hardware: str
    engine: str
    arms: tuple[str, ...]
    prompts: tuple[Prompt, ...]
    runs: Mapping[str, tuple[ArmRun, ...]]
    versions: Mapping[str, str] = field(default_factory=dict)
    models: Mapping[str, str] = field(default_factory=dict)
    cost_ratio: float | None = None
    gamma: int | None = None
    started_at: float = 0.0
    duration_s: float = 0.0

    @property
    def reference(self) -> str:
        return self.arms[0]


class RunObserver(Protocol):
    """Watches every measured engine call (telemetry, peak memory). Must be cheap: it sits beside the hot path."""

    def before_run(self, arm: str) -> None: ...

    def after_run(self, arm: str, run: ArmRun) -> None: ...


def _order(arms: Sequence[str], flip: bool) -> list[str]:
    return list(reversed(arms)) if flip else list(arms)


def measure_pair(
    engine: Engine,
    prompts: Sequence[Prompt],
    policy: GatePolicy,
    *,
    pair: str,
    workload: str,
    hardware: str,
    gamma: int | None = None,
    observer: RunObserver | None = None,
    stop: Callable[[Measurement, int], bool] | None = None,
) -> Measurement:
    """Run every arm of a loaded engine on the prompts according to the gate policy.

    With `policy.max_repetitions` above `policy.repetitions` and a `stop` rule, repetitions continue one look at a
    time after the first `repetitions`, until `stop(measurement so far, look)` says the decision is clear or
    `max_repetitions` is reached (see `specgate.sequential`).
    """
    if not prompts:
        raise MeasurementError(f"workload {workload!r} has no prompts to measure")
    arms = tuple(engine.arms)
    started = time.time()
    clock = time.perf_counter()
    runs: dict[str, list[ArmRun]] = {arm: [] for arm in arms}
    warmed: set[str] = set()

    def run(batch: Sequence[Prompt], arm: str, repetition: int) -> None:
        if arm not in warmed:  # just before the arm's first measured call: engines that switch arms start once
            warmed.add(arm)
            for prompt in prompts[: policy.warmup]:
                engine.run([prompt], arm, repetition=-1)
        if observer is not None:
            observer.before_run(arm)
        result = engine.run(batch, arm, repetition=repetition)
        if observer is not None:
            observer.after_run(arm, result)
        runs[arm].append(result)

    def snapshot() -> Measurement:
        return Measurement(
            pair=pair,
            workload=workload,
            hardware=hardware,
            engine=engine.name,
            arms=arms,
            prompts=tuple(prompts),
            runs={arm: tuple(r) for arm, r in runs.items()},
            versions=dict(engine.versions()),
            models={role: model.sha256 for role, model in getattr(engine, "resolved", {}).items()},
            cost_ratio=getattr(engine, "cost_ratio", None),
            gamma=gamma,
            started_at=started,
            duration_s=time.perf_counter() - clock,
        )

    last = max(policy.repetitions, policy.max_repetitions if stop is not None else 0)
    for repetition in range(last):
        if engine.per_request:
            for index, prompt in enumerate(prompts):
                for arm in _order(arms, (index + repetition) % 2 == 1):
                    run([prompt], arm, repetition)
        else:
            for arm in _order(arms, repetition % 2 == 1):
                run(list(prompts), arm, repetition)
        look = repetition + 2 - policy.repetitions
        if stop is not None and look >= 1 and repetition + 1 < last and stop(snapshot(), look):
            break
    return snapshot()
