"""The measurement protocol: warm-up, arms interleaved in a balanced order, rounds sized by what is still undecided.

Warm-up requests (the first `warmup` prompts, in every arm, just before the arm's first measured call) are run and
discarded. Then each round runs every prompt in every active arm of the plan. Engines that take one request at a
time run the arms prompt by prompt, in the order `MeasurementPlan.order` gives (a Williams design: every arm comes
first, last and after every other arm equally often over the prompts and rounds, so slow drift of the machine and
the cost of switching from one arm to another fall on every arm alike); engines that batch run whole arms, in the
same rotation per round. Runs are recorded in execution order, so unit k of one arm pairs with unit k of every
other arm (same prompt, same round).

In reference mode, a plain-decoding arm that only a speedup reads (`MeasurementPlan.speedup_only`: the plain
arm the reference shares with the candidate) runs in the first round only, where that round alone gives it
`policy.min_samples` units: the speedup is measured on the units both arms ran (`measure_speedup`), greedy outputs
repeat from one round to the next, and the comparisons beside the reference do not read it.

After the first `policy.repetitions` rounds, a `planner` (in reference mode: `specgate.checks.sequential`) looks at
the measurement so far and answers `Next`: how many more rounds, and of which arms — only the arms of comparisons
still undecided (an arm whose every comparison is decided is not measured again). It is asked again after each
batch, up to `policy.looks` looks and `policy.max_repetitions` rounds.

A unit (one prompt in one round, every active arm) measured while the engine waited for a CPU more than
`HEAVY_WAIT` of its time is measured again right away, up to `policy.remeasure` of a round's units: both attempts
stay in the record (`Sample.attempt`), comparisons read the last, and the reports count them.

Where the engine can (`RunsInLockstep`) and `policy.interleave` is `step`, a unit's arms do not run one after
another: they run at once, taking turns at every decoding step, each timed on its own turns
(`specgate.engines.lockstep`), so that their steps are milliseconds apart and what the machine does meanwhile falls
on every arm alike; the TTFT probes stay one request at a time (a probe is a single step).

Around every engine call the machine is read (`specgate.measure.pressure`: CPU pressure, steal, other processes'
CPU; an engine that starts instances gets the arm's ready first, outside the readings), and a `Progress` hears
about every unit, so a long measurement is never silent.

An engine that keeps one long-lived instance per arm configuration (`RenewsInstances`: vLLM servers) is asked for
new instances of the active arms before round 2 and before the first round of each batch a look adds: every arm is
then served by at least two instances, units of one round share theirs, and the comparisons fold the instances'
spread into their intervals (`specgate.comparison`). `Measurement.instances` keeps the engine's account of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from specgate.config import GatePolicy
from specgate.engines.base import (
    ArmRun,
    Engine,
    LoadShape,
    Prompt,
    RenewsInstances,
    RequestTrace,
    RunsInLockstep,
    ServesFromElsewhere,
    StartsInstances,
    announcing,
)
from specgate.errors import MeasurementError
from specgate.measure.pressure import between, read_pressure
from specgate.plan import MeasurementPlan

HEAVY_WAIT = 0.25  # a request that waited for a CPU a quarter of its time or more is measured again
LOCKSTEP = (
    "arms in lockstep: each unit's arms ran at once, taking turns at every decoding step, each timed on its own "
    "turns (gate.interleave: step)"
)
FIRST_ROUND_ONLY = (
    "{arm}: read by the speedups alone, measured in the first round only (the comparisons beside the reference do "
    "not read it)"
)


@dataclass(frozen=True, slots=True)
class Measurement:
    """The raw result of measuring one plan: runs per arm in execution order, with what the engine ran.

    `models` are the model files' hashes by arm and role; `cost_ratios` the draft/target step cost c by arm;
    `probes` the time-to-first-token probes by arm (one-token requests, see `measure_plan`); `pool` the acceptance
    pool's requests by arm, on `pool_prompts` (`specgate.measure.pool`); `rounds_by_arm` how many rounds each arm
    was measured (arms whose comparisons were decided stop early); `looks` the decisions taken while measuring;
    `notes` how the arms were measured, in words (e.g. in lockstep)."""

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
    rounds_by_arm: Mapping[str, int] = field(default_factory=dict)
    looks: tuple[str, ...] = ()
    instances: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

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


@dataclass(frozen=True, slots=True)
class Next:
    """A planner's answer: measure `rounds` more rounds (0: stop) of `arms` (None: the arms measured so far), and
    why, in words (for the progress lines and the record)."""

    rounds: int
    arms: tuple[str, ...] | None = None
    why: str = ""


Planner = Callable[["Measurement"], "Next | bool"]
StopRule = Planner  # a planner that answers True (stop) or False (one more round) is accepted too


class Progress(Protocol):
    """Hears how a measurement goes (`specgate.measure.progress` prints it)."""

    def started(self, plan: MeasurementPlan, units: int, rounds: int) -> None: ...

    def unit_done(
        self,
        plan: MeasurementPlan,
        round_index: int,
        done: int,
        planned: int,
        work: tuple[int, int] | None = None,
        setup_s: float = 0.0,
    ) -> None:
        """A unit (a prompt in every active arm; a whole round for engines that run whole arms) is done: `done` of
        `planned` so far; `work` counts arm-requests (done, planned), as the units of later rounds may run fewer
        arms; `setup_s` is the time spent so far starting and warming the engine's instances (`StartsInstances`),
        not measuring."""

    def looked(self, plan: MeasurementPlan, round_index: int, next_rounds: Next) -> None: ...

    def note(self, plan: MeasurementPlan, text: str) -> None:
        """A line about the measurement in words (a concurrency sweep's levels as they are done)."""


@dataclass(slots=True)
class _Runs:
    """What a measurement has run so far (mutable, private to `measure_plan`)."""

    engine: Engine
    plan: MeasurementPlan
    prompts: Sequence[Prompt]
    policy: GatePolicy
    observer: RunObserver | None
    load: LoadShape | None
    runs: dict[str, list[ArmRun]]
    probes: dict[str, list[ArmRun]]
    warmed: set[str] = field(default_factory=set)
    work: int = 0  # arm-requests of the units done, for the progress estimate
    setup_base: float = 0.0  # the engine's `StartsInstances.setup_s` when the measurement began

    def warm(self, arm: str) -> None:
        """Just before the arm's first measured call: warm-up requests (engines that switch arms start once)."""
        if arm not in self.warmed:
            self.warmed.add(arm)
            for prompt in self.prompts[: self.policy.warmup]:
                self.engine.run([prompt], arm, repetition=-1)

    def call(self, batch: Sequence[Prompt], arm: str, repetition: int) -> ArmRun:
        engine = self.engine
        self.warm(arm)
        if self.observer is not None:
            self.observer.before_run(arm)
        load = None if engine.per_request and not _load_mode(self.load) else self.load
        result = timed_run(engine, batch, arm, repetition, load)
        if self.observer is not None:
            self.observer.after_run(arm, result)
        return result

    def together(self, prompt: Prompt, order: Sequence[str], repetition: int) -> list[ArmRun]:
        """The unit's arms in lockstep (`RunsInLockstep`): the machine's pressure and steal over the unit are shared
        out by each arm's own time."""
        engine = self.engine
        assert isinstance(engine, RunsInLockstep)
        for arm in order:
            self.warm(arm)
            if self.observer is not None:
                self.observer.before_run(arm)
        before = read_pressure()
        started = time.perf_counter()
        runs = engine.run_lockstep(prompt, order, repetition=repetition)
        unit_s = time.perf_counter() - started
        met = between(before, read_pressure())
        results = []
        for arm, run in zip(order, runs, strict=True):
            share = run.wall_s / unit_s if unit_s > 0 else 0.0
            shared = replace(
                run,
                pressure_s=None if met.pressure_s is None else met.pressure_s * share,
                steal_s=None if met.steal_s is None else met.steal_s * share,
                others_s=None if met.others_s is None else met.others_s * share,
            )
            result = checked_run(accounted(shared, [prompt], repetition))
            if self.observer is not None:
                self.observer.after_run(arm, result)
            results.append(result)
        return results

    def unit(self, prompt: Prompt, order: Sequence[str], repetition: int) -> list[ArmRun]:
        if len(order) > 1 and lockstep(self.engine, self.policy):
            results = self.together(prompt, order, repetition)
        else:
            results = [self.call([prompt], arm, repetition) for arm in order]
        for result in results:
            self.runs[result.arm].append(result)
        return results


def lockstep(engine: Engine, policy: GatePolicy) -> bool:
    """Whether a unit's arms run in lockstep: the policy asks for it (`interleave: step`) and the engine can."""
    return policy.interleave == "step" and isinstance(engine, RunsInLockstep) and engine.lockstep


def heavy(run: ArmRun) -> bool:
    """Whether any request of the call waited for a CPU `HEAVY_WAIT` of its time or more."""
    return any(
        t.wait_s is not None and t.done_s > t.submit_s and t.wait_s >= HEAVY_WAIT * (t.done_s - t.submit_s)
        for t in run.traces
    )


def measure_plan(
    engine: Engine,
    plan: MeasurementPlan,
    prompts: Sequence[Prompt],
    policy: GatePolicy,
    *,
    hardware: str,
    observer: RunObserver | None = None,
    stop: Planner | None = None,
    probes: int = 0,
    load: LoadShape | None = None,
    progress: Progress | None = None,
) -> Measurement:
    """Run the arms of the plan on the prompts of a loaded engine, round by round (see the module docstring).

    With `probes` (engines that take one request at a time), each prompt is also sent `probes` more times per arm
    and round with a one-token output budget, interleaved like the rest: their time to first token is the same
    prefill as a full request's, at a fraction of its cost, so a TTFT comparison gets several times more units. They
    are kept apart (`Measurement.probes`), feed nothing but TTFT, and go to the arms compared beside each other
    (`MeasurementPlan.compared`) only: an arm only timed for its speedup (plain decoding) gets none. Engines that
    run a whole arm at once offer its requests as `load` says (the workload's load shape; None: the engine's
    default). `stop` plans the rounds after the first `policy.repetitions` (see `Next`)."""
    if not prompts:
        raise MeasurementError(f"workload {plan.workload!r} has no prompts to measure")
    started = time.time()
    clock = time.perf_counter()
    state = _Runs(
        engine, plan, prompts, policy, observer, load, {a: [] for a in plan.names}, {a: [] for a in plan.names}
    )
    rounds_by_arm = dict.fromkeys(plan.names, 0)
    looks: list[str] = []

    def snapshot(rounds: int) -> Measurement:
        return Measurement(
            plan=plan,
            hardware=hardware,
            engine=engine.name,
            prompts=tuple(prompts),
            runs={arm: tuple(r) for arm, r in state.runs.items()},
            versions=dict(engine.versions()),
            models={arm: {role: m.sha256 for role, m in engine.models(arm).items()} for arm in plan.names},
            cost_ratios={arm: engine.cost_ratio(arm) for arm in plan.names},
            rounds=rounds,
            started_at=started,
            duration_s=time.perf_counter() - clock,
            probes={arm: tuple(r) for arm, r in state.probes.items() if r},
            rounds_by_arm=dict(rounds_by_arm),
            looks=tuple(looks),
            instances=engine.instance_notes() if isinstance(engine, RenewsInstances) else (),
            notes=(
                *((LOCKSTEP,) if len(plan.names) > 1 and lockstep(engine, policy) and not _load_mode(load) else ()),
                *(FIRST_ROUND_ONLY.format(arm=a) for a in first_only if rounds_by_arm[a] < rounds),
            ),
        )

    last = max(policy.repetitions, policy.max_repetitions if stop is not None else 0)
    active = plan.names
    first_only = plan.speedup_only if len(prompts) >= policy.min_samples else ()
    planned = policy.repetitions
    if progress is not None:
        progress.started(plan, len(prompts), planned)
    say = None if progress is None else lambda text: progress.note(plan, text)
    with announcing(engine, say) as setup_base:
        state.setup_base = setup_base
        rounds = 0
        renew_at = {1}  # new instances before the second round and before each batch of rounds a look adds
        while rounds < planned:
            if rounds in renew_at and isinstance(engine, RenewsInstances):
                engine.renew(active)
            after = tuple(a for a in active if a not in first_only) if rounds == 0 else active
            _round(state, active, rounds, probes, progress, (planned, len(after)))
            for arm in active:
                rounds_by_arm[arm] += 1
            rounds += 1
            active = after
            if rounds < planned or stop is None or rounds >= last or len(looks) + 1 >= max(1, policy.looks):
                continue
            next_rounds = _next(stop(snapshot(rounds)))
            looks.append(f"after round {rounds}: {next_rounds.why or ('stop' if not next_rounds.rounds else 'more')}")
            if progress is not None:
                progress.looked(plan, rounds, next_rounds)
            if next_rounds.rounds <= 0:
                break
            planned = min(last, rounds + next_rounds.rounds)
            renew_at.add(rounds)
            if next_rounds.arms is not None:
                active = tuple(a for a in plan.names if a in next_rounds.arms)
        return snapshot(rounds)


def _next(answer: Next | bool) -> Next:
    if isinstance(answer, Next):
        return answer
    return Next(0, why="every comparison decided") if answer else Next(1, why="undecided")


def _round(
    state: _Runs,
    arms: Sequence[str],
    repetition: int,
    probes: int,
    progress: Progress | None,
    planned: tuple[int, int],
) -> None:
    """One round of the active `arms`; `planned` is (the rounds planned, the arms of each round after this one)."""
    plan, prompts, policy = state.plan, state.prompts, state.policy

    def done(units: int, count: int) -> None:
        """`count` more units done, `units` of the workload's so far."""
        state.work += count * len(arms)
        if progress is not None:
            left = (repetition + 1) * len(prompts) - units
            later = (planned[0] - repetition - 1) * len(prompts) * planned[1]
            work = (state.work, state.work + left * len(arms) + later)
            engine = state.engine
            setup = engine.setup_s - state.setup_base if isinstance(engine, StartsInstances) else 0.0
            progress.unit_done(plan, repetition, units, len(prompts) * planned[0], work, setup)

    if not state.engine.per_request or _load_mode(state.load):
        for arm in plan.order(repetition, 0, arms):
            state.runs[arm].append(state.call(list(prompts), arm, repetition))
        done((repetition + 1) * len(prompts), len(prompts))
        return
    budget = math.floor(policy.remeasure * len(prompts))
    for index, prompt in enumerate(prompts):
        order = plan.order(repetition, index, arms)
        results = state.unit(prompt, order, repetition)
        if budget > 0 and any(heavy(r) for r in results):  # measured again, the first attempt kept
            budget -= 1
            state.unit(prompt, order, repetition)
        probe = replace(prompt, max_new_tokens=1)
        probed = [arm for arm in arms if arm in plan.compared]
        for turn in range(probes if len(probed) > 1 else 0):
            for arm in plan.order(repetition, index + turn + 1, probed):
                state.probes[arm].append(state.call([probe], arm, repetition))
        done(repetition * len(prompts) + index + 1, 1)


def timed_run(engine: Engine, batch: Sequence[Prompt], arm: str, repetition: int, load: LoadShape | None) -> ArmRun:
    """One engine call with what the machine did meanwhile (see the module docstring), every prompt sent accounted
    for and every time checked (`accounted`, `checked_run`); `load` None is the engine's default (one at a time)."""
    if isinstance(engine, StartsInstances):
        engine.ready(arm, batch)
    before = read_pressure()
    result = (
        engine.run(batch, arm, repetition=repetition)
        if load is None
        else engine.run(batch, arm, repetition=repetition, load=load)
    )
    met = between(before, read_pressure())
    others = None if isinstance(engine, ServesFromElsewhere) else met.others_s  # its servers are not told apart
    result = replace(result, pressure_s=met.pressure_s, steal_s=met.steal_s, others_s=others)
    return checked_run(accounted(result, batch, repetition))


def _load_mode(load: LoadShape | None) -> bool:
    """Whether a workload offers several requests at a time: then even an engine that could take one request at a
    time runs whole arms (validation refuses load shapes for engines that cannot)."""
    return load is not None and (load.concurrency > 1 or load.request_rate is not None)


def accounted(run: ArmRun, batch: Sequence[Prompt], repetition: int) -> ArmRun:
    """`run` with exactly one trace per prompt sent: a prompt the engine returned no trace for becomes a failed
    request ("engine returned N of M"), and a trace for a prompt not sent, or a second one for the same prompt, is
    marked failed too — so a comparison is never made on the survivors of an engine that dropped the slow ones."""
    sent = [p.id for p in batch]
    if sorted(t.prompt_id for t in run.traces) == sorted(sent):
        return run
    reason = f"the engine returned {len(run.traces)} traces for the {len(sent)} requests sent"
    kept: dict[str, RequestTrace] = {}
    extra = []
    for trace in run.traces:
        if trace.prompt_id in sent and trace.prompt_id not in kept:
            kept[trace.prompt_id] = trace
        else:
            extra.append(replace(trace, error=f"{reason}: a trace not asked for ({trace.prompt_id})"))
    missing = [
        RequestTrace(pid, run.arm, repetition, 0.0, (), (), (), "", 0, error=f"{reason}: none for this request")
        for pid in sent
        if pid not in kept
    ]
    return replace(run, traces=(*kept.values(), *missing, *extra))


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
