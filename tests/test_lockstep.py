"""Arms in lockstep (`specgate.engines.lockstep`): turns pass round-robin, each arm is timed on its own turns only,
and the real engine's lockstep units return what the same requests return one after another."""

from __future__ import annotations

import itertools
import os
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from specgate.config import GatePolicy, HardwareProfile, Speculation, WorkloadConfig
from specgate.config.policy import read_gate
from specgate.engines.base import ArmRun, Prompt
from specgate.engines.fake import FakeEngine
from specgate.engines.lockstep import TurnClock, circuit, current_cpu, together
from specgate.errors import ConfigError
from specgate.measure.protocol import LOCKSTEP, measure_plan
from specgate.measure.workloads import load_workload
from specgate.plan import two_arm_plan

REPO = Path(__file__).resolve().parent.parent
TARGET = "embedded:smollm2-135m-instruct"


class Tensor:
    """What a streamer is handed: something with `numel()`."""

    def __init__(self, n: int) -> None:
        self.n = n

    def numel(self) -> int:
        return self.n


def stepper(name: str, steps: int, log: list[str], fail_at: int | None = None) -> Callable[[TurnClock], str]:
    """A party that streams the prompt, then `steps` chunks, logging each step it takes."""

    def party(clock: TurnClock) -> str:
        clock.start()
        try:
            clock.put(Tensor(100))  # the prompt: not a step, no turn handed on
            for k in range(steps):
                if k == fail_at:
                    raise RuntimeError(f"{name} failed at step {k}")
                log.append(name)
                clock.put(Tensor(1))
        finally:
            clock.stop()
        return name

    return party


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_in_the_order_of_turns_every_arm_follows_every_other_once_and_never_itself(k: int) -> None:
    order = circuit(k)
    follows = Counter((order[i - 1], order[i]) for i in range(len(order)))
    assert order[0] == 0
    assert follows == Counter({(a, b): 1 for a in range(k) for b in range(k) if a != b})


def test_turns_follow_that_order_and_skip_a_party_that_finished() -> None:
    log: list[str] = []
    together([stepper("a", 6, log), stepper("b", 6, log), stepper("c", 6, log)], [0.0, 0.0, 0.0])
    assert log[:6] == ["abc"[i] for i in circuit(3)]
    log = []
    done = together([stepper("a", 3, log), stepper("b", 1, log), stepper("c", 2, log)], [0.0, 0.0, 0.0])
    assert log == ["a", "b", "a", "c", "a", "c"]  # a b a c, then b is done: a and c alternate
    assert [name for name, _ in done] == ["a", "b", "c"]
    assert [len(clock.times) for _, clock in done] == [3, 1, 2]


def test_each_arm_is_timed_on_its_own_turns_only() -> None:
    log: list[str] = []
    done = together([stepper("a", 4, log), stepper("b", 4, log)], [0.0, 0.0])
    spans = sorted((span, name) for name, clock in done for span in clock.spans)
    for (first, _), (second, _) in itertools.pairwise(spans):
        assert first[1] <= second[0], "two arms' turns overlap"
    assert [name for _, name in spans] == ["a", "b"] * 5  # four steps and the tail of each request, alternating
    for _, clock in done:
        assert clock.held_s == pytest.approx(sum(end - start for start, end in clock.spans))
        assert clock.times == sorted(clock.times)


def test_a_failing_arm_leaves_the_others_running_and_the_error_reaches_the_caller() -> None:
    log: list[str] = []
    with pytest.raises(RuntimeError, match="b failed at step 1"):
        together([stepper("a", 3, log), stepper("b", 3, log, fail_at=1)], [0.0, 0.0])
    assert log == ["a", "b", "a", "a"]
    assert threading.active_count() == 1 or all(not t.name.startswith("specgate-arm") for t in threading.enumerate())


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="thread affinity is Linux's")
def test_with_a_cpu_every_arm_runs_bound_to_that_cpu() -> None:
    cpu = current_cpu()
    assert cpu is not None and cpu in os.sched_getaffinity(0)

    def party(clock: TurnClock) -> set[int]:
        clock.start()
        clock.stop()
        return os.sched_getaffinity(0)

    done = together([party, party], [0.0, 0.0], cpu=cpu)
    assert [mask for mask, _ in done] == [{cpu}, {cpu}]
    assert os.sched_getaffinity(0) != {cpu} or len(os.sched_getaffinity(0)) == 1  # the caller is left as it was


class LockstepFake(FakeEngine):
    """A FakeEngine that says it runs arms in lockstep (each arm's request after the other's, recording the calls):
    enough to see the protocol choose the path."""

    def __init__(self, lockstep: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lockstep = lockstep
        self.units: list[tuple[str, ...]] = []

    def run_lockstep(self, prompt: Prompt, arms: Sequence[str], *, repetition: int) -> list[ArmRun]:
        self.units.append(tuple(arms))
        return [self.run([prompt], arm, repetition=repetition) for arm in arms]


def fake_measurement(interleave: str, lockstep: bool = True) -> tuple[LockstepFake, Any]:
    plan = two_arm_plan("fake", "doc_edit", Speculation("prompt_lookup", num_tokens=3))
    engine = LockstepFake(lockstep)
    engine.load(plan.arms, HardwareProfile(name="cpu", backend="cpu", device="cpu"))
    prompts = [Prompt(id=f"p{i}", text="x " * 40, max_new_tokens=16) for i in range(3)]
    policy = GatePolicy(repetitions=2, warmup=0, min_samples=1, interleave=interleave)
    return engine, measure_plan(engine, plan, prompts, policy, hardware="cpu", probes=1)


def test_units_run_in_lockstep_where_the_engine_can_and_the_record_says_so() -> None:
    engine, measurement = fake_measurement("step")
    assert len(engine.units) == 6  # 3 prompts × 2 rounds; the one-token probes stay one request at a time
    assert {frozenset(unit) for unit in engine.units} == {frozenset(("ar", "spec"))}
    assert measurement.notes == (LOCKSTEP,)
    assert all(len(runs) == 6 for runs in measurement.runs.values())


@pytest.mark.parametrize(("interleave", "lockstep"), [("request", True), ("step", False)])
def test_one_arm_after_the_other_when_asked_or_when_the_engine_cannot_here(interleave: str, lockstep: bool) -> None:
    engine, measurement = fake_measurement(interleave, lockstep)
    assert engine.units == []
    assert measurement.notes == ()


def test_an_unknown_interleave_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"gate\.interleave.*step.*request"):
        read_gate({"interleave": "token"}, "specgate.yaml")


@pytest.mark.model
def test_the_real_engine_in_lockstep_returns_what_it_returns_one_request_at_a_time() -> None:
    from specgate.engines.transformers_engine import TransformersEngine

    plan = two_arm_plan("real", "doc_edit", Speculation("prompt_lookup", num_tokens=3), target=TARGET)
    engine = TransformersEngine(REPO)
    engine.load(plan.arms, HardwareProfile(name="cpu", backend="cpu", device="cpu", threads=1, dtype="float32"))
    workload = WorkloadConfig("doc_edit", REPO / "suites/workloads/doc_edit.jsonl", max_new_tokens=24, limit=1)
    prompt = next(iter(load_workload(workload)))
    try:
        alone = {arm: engine.run([prompt], arm, repetition=0).traces[0] for arm in ("spec", "ar")}
        runs = engine.run_lockstep(prompt, ["spec", "ar"], repetition=0)
    finally:
        engine.close()
    assert engine.lockstep
    assert [run.arm for run in runs] == ["spec", "ar"]
    for run in runs:
        trace, solo = run.traces[0], alone[run.arm]
        assert trace.output_ids == solo.output_ids
        assert (trace.drafted, trace.accepted) == (solo.drafted, solo.accepted)  # each thread counts its own steps
        assert len(run.spans) == len(trace.chunk_times_s) + 1  # a turn per step, and the request's tail
        assert run.wall_s == pytest.approx(sum(end - start for start, end in run.spans))
        assert trace.cpu_ttft_s is not None and trace.cpu_e2el_s is not None and trace.wait_s is not None
    spec, plain = runs
    assert sum(spec.traces[0].drafted) > 0 and sum(plain.traces[0].drafted) == 0
    first_turns = sorted([(span[0], "spec") for span in spec.spans] + [(span[0], "ar") for span in plain.spans])
    assert [name for _, name in first_turns[:4]] == ["spec", "ar", "spec", "ar"]
