"""Measuring one pair × workload the way the gate does: the protocol with its planner and observers, the acceptance
pool, then the evaluation (summaries, speedups, accuracy, perplexity). `GateRun` calls `measure_workload` once
per pair × workload and caches what it returns (or the error it raised)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specgate.checks.sequential import acceptance_steps, stop_rule, undecided_acceptance
from specgate.config import GatePolicy, HardwareProfile, SlaLimits, WorkloadConfig
from specgate.engines.base import (
    ArmRun,
    ArmsMayDiffer,
    Engine,
    ExplainsDivergences,
    LoadShape,
    Prompt,
    RenewsInstances,
    ScoresPerplexity,
    SwitchesOffSpeculation,
    announcing,
)
from specgate.evaluation import Evaluation, evaluate
from specgate.hardware.backends import HardwareBackend, get_backend
from specgate.measure.monitor import ArmMonitor
from specgate.measure.perplexity import measure_perplexity
from specgate.measure.pool import extend_over_pool
from specgate.measure.protocol import Measurement, Planner, Progress, RunObserver, measure_plan
from specgate.measure.sweep import level_measurement, measure_sweep, summarize_sweep, sweep_arms
from specgate.measure.workloads import load_workload
from specgate.plan import MeasurementPlan


def policy_of(policy: GatePolicy, workload: WorkloadConfig) -> GatePolicy:
    """The gate policy for a workload: a workload's own `repetitions` fixes its rounds (e.g. an accuracy probe:
    greedy outputs repeat exactly, one pass is enough)."""
    if workload.repetitions is None:
        return policy
    return dataclasses.replace(policy, repetitions=workload.repetitions, max_repetitions=workload.repetitions)


def planner(
    plan: MeasurementPlan,
    workload: WorkloadConfig,
    hardware: str,
    sla: SlaLimits,
    policy: GatePolicy,
    family: int,
    prompts: int,
) -> Planner | None:
    """In reference mode, the rounds after the first ones, sized while a latency comparison beside the reference is
    UNKNOWN (`specgate.checks.sequential.stop_rule`); None where no more rounds can be added."""
    if not plan.beside or not workload.gate_speed or policy.max_repetitions <= policy.repetitions:
        return None
    return stop_rule(plan, hardware, sla, policy, family, prompts, policy.ttft_probes)


def measure_workload(
    engine: Engine,
    plan: MeasurementPlan,
    workload: WorkloadConfig,
    run_policy: GatePolicy,
    hardware: HardwareProfile,
    sla: SlaLimits,
    family: int,
    recorder: Callable[[RunObserver], RunObserver],
    progress: Progress | None = None,
    backend: HardwareBackend | None = None,
) -> Evaluation:
    """Measure and evaluate one pair × workload (see the module docstring). `family` is the number of groups of
    latency comparisons of the run (their levels); `recorder` wraps the memory and telemetry monitor in the run's
    fault recorder; `backend` is the profile's hardware backend (resolved here when None)."""

    policy = policy_of(run_policy, workload)
    prompts = load_workload(workload)
    if workload.sweep:
        return measure_sweep_workload(engine, plan, workload, prompts, policy, hardware, sla, progress)
    twins = {} if workload.gate_speed else same_answers(engine, plan)
    measured = plan.without(tuple(twins)) if twins else plan
    stop = planner(measured, workload, hardware.name, sla, policy, family, len(prompts))
    monitor = ArmMonitor(hardware, backend or get_backend(hardware.backend, hardware.device))
    try:
        probes = policy.ttft_probes if plan.beside and workload.gate_speed else 0
        measurement = measure_plan(
            engine,
            measured,
            prompts,
            policy,
            hardware=hardware.name,
            stop=stop,
            probes=probes,
            observer=recorder(monitor),
            load=LoadShape.of(workload),
            progress=progress,
        )
        measurement = extend_acceptance(engine, measurement, workload, sla, policy, monitor)
    finally:
        observation = monitor.finish()
    if twins:
        measurement = measured_once(measurement, plan, twins, {ref: engine.models(ref) for ref in twins})
    models = engine.models(plan.plain)
    scores = isinstance(engine, ScoresPerplexity) and plan.ladder and workload.perplexity
    return evaluate(
        measurement,
        task=workload.task,
        seed=policy.seed,
        hardware=hardware,
        observation=observation,
        model_folder=models["target"].folder if "target" in models else None,
        explainer=engine if isinstance(engine, ExplainsDivergences) else None,
        perplexity=measure_perplexity(engine, plan, prompts) if scores else None,  # type: ignore[arg-type]
        gate_speed=workload.gate_speed,
    )


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


def same_answers(engine: Engine, plan: MeasurementPlan) -> dict[str, str]:
    """On a workload that gates no speed (an accuracy probe), the reference arms that would repeat the candidate's
    greedy outputs token for token: the same configuration with the same model files ({reference: candidate})."""

    def files(arm: str) -> dict[str, str]:
        return {role: model.sha256 for role, model in engine.models(arm).items()}

    alike = engine.answers_alike if isinstance(engine, ArmsMayDiffer) else (lambda arm, other: True)
    return {ref: cand for ref, cand in plan.twins().items() if files(ref) == files(cand) and alike(ref, cand)}


def measured_once(
    measurement: Measurement, plan: MeasurementPlan, twins: Mapping[str, str], models: Mapping[str, Mapping[str, Any]]
) -> Measurement:
    """The measurement of `plan` less its `twins` arms, with each twin's runs those of the candidate it repeats
    (renamed) and a note that says so: an accuracy probe of one configuration beside itself measures it once."""

    def renamed(runs: tuple[ArmRun, ...], arm: str) -> tuple[ArmRun, ...]:
        return tuple(
            dataclasses.replace(r, arm=arm, traces=tuple(dataclasses.replace(t, arm=arm) for t in r.traces))
            for r in runs
        )

    def twinned(by_arm: Mapping[str, Any], copy: Callable[[Any, str], Any] = lambda v, _: v) -> dict[str, Any]:
        return {**by_arm, **{ref: copy(by_arm[cand], ref) for ref, cand in twins.items() if cand in by_arm}}

    notes = tuple(
        f"{ref}: the same configuration and model files as {cand}, whose greedy outputs it would repeat token for "
        "token on this accuracy probe: measured once, its results are those of " + cand
        for ref, cand in twins.items()
    )
    return dataclasses.replace(
        measurement,
        plan=plan,
        runs=twinned(measurement.runs, renamed),
        pool=twinned(measurement.pool, renamed),
        probes=twinned(measurement.probes, renamed),
        models={**measurement.models, **{ref: {role: m.sha256 for role, m in models[ref].items()} for ref in twins}},
        cost_ratios=twinned(measurement.cost_ratios),
        rounds_by_arm=twinned(measurement.rounds_by_arm),
        notes=(*measurement.notes, *notes),
    )


def measure_sweep_workload(
    engine: Engine,
    plan: MeasurementPlan,
    workload: WorkloadConfig,
    prompts: Sequence[Prompt],
    policy: GatePolicy,
    hardware: HardwareProfile,
    sla: SlaLimits,
    progress: Progress | None = None,
) -> Evaluation:
    """A concurrency sweep (`specgate.measure.sweep`): the evaluation of its first level, for the checks that read
    one (enough samples), with the whole sweep beside it."""
    arms = sweep_arms(plan)
    swept = plan.without(tuple(a for a in plan.names if a not in arms))
    levels = workload.sweep
    if progress is not None:
        progress.started(swept, len(prompts), policy.repetitions)
    started, clock = time.time(), time.perf_counter()
    say = None if progress is None else lambda text: progress.note(swept, text)
    with announcing(engine, say):  # a sweep's servers start while it runs, too
        runs = measure_sweep(engine, swept, prompts, policy, levels, say)
    wall = time.perf_counter() - clock
    frame = Measurement(
        plan=swept,
        hardware=hardware.name,
        engine=engine.name,
        prompts=tuple(prompts),
        runs={},
        versions=dict(engine.versions()),
        models={arm: {role: m.sha256 for role, m in engine.models(arm).items()} for arm in arms},
        cost_ratios={arm: engine.cost_ratio(arm) for arm in arms},
        rounds=policy.repetitions,
        started_at=started,
        duration_s=wall,
        rounds_by_arm=dict.fromkeys(arms, policy.repetitions),
        instances=engine.instance_notes() if isinstance(engine, RenewsInstances) else (),
        notes=(
            f"a concurrency sweep over {', '.join(map(str, levels))} requests in flight, {policy.repetitions} rounds; "
            f"the arms' summaries are those of the first level ({levels[0]} in flight)",
        ),
    )
    evaluation = evaluate(
        level_measurement(frame, runs[levels[0]]), task=workload.task, seed=policy.seed, hardware=hardware
    )
    switch_off = engine.speculation_switch_off() if isinstance(engine, SwitchesOffSpeculation) else None
    sweep = summarize_sweep(swept, runs, sla, wall, policy.seed, engine.name, switch_off)
    return dataclasses.replace(evaluation, sweep=sweep)
