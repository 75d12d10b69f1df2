"""What a user sees while a pair × workload is measured: progress lines from the start, at every look, and never a
promise of rounds the budget will not run (FakeEngine, the gate's own planner and protocol)."""

from __future__ import annotations

import dataclasses

from specgate.checks.levels import family_size
from specgate.checks.sequential import stop_rule
from specgate.config import GatePolicy, SlaLimits, Speculation
from specgate.engines.base import Prompt
from specgate.engines.fake import FakeBehaviour, FakeEngine
from specgate.measure.progress import ProgressLines
from specgate.measure.protocol import measure_plan
from specgate.plan import Arm, MeasurementPlan

PROMPTS = tuple(Prompt(f"doc-{i}", "text", max_new_tokens=24) for i in range(4))


def _plan() -> MeasurementPlan:
    pld = Speculation("prompt_lookup", 4)
    arms = (
        Arm("ar", "ar", "fake", False, "model", None, "float32"),
        Arm("spec", "spec", "fake", False, "model", pld, "float32"),
        Arm("ref-spec", "spec", "released", True, "model", pld, "float32"),
    )
    return MeasurementPlan(
        "fake", "w", arms, (("spec", "ar"), ("ref-spec", "ar")), beside=(("spec", "ref-spec"),), reference="released"
    )


def _lines(max_repetitions: int, request_cv: float, noise_cv: float = 0.05) -> list[str]:
    plan = _plan()
    policy = GatePolicy(repetitions=2, max_repetitions=max_repetitions, warmup=0, ttft_probes=1, looks=3)
    engine = FakeEngine(FakeBehaviour(request_cv=request_cv, noise_cv=noise_cv), seed=3)
    engine.load(plan.arms, None)  # type: ignore[arg-type]
    lines: list[str] = []
    progress = ProgressLines(lambda text, final: lines.append(text), live=False, every_s=0.0)
    stop = stop_rule(plan, "cpu", SlaLimits(), policy, family_size([(plan, True)]), len(PROMPTS), 1)
    measure_plan(
        engine, plan, PROMPTS, policy, hardware="cpu", stop=stop, probes=1, progress=progress
    )  # fmt: skip
    return lines


def test_lines_from_the_first_unit_to_the_decision() -> None:
    lines = _lines(max_repetitions=40, request_cv=0.0, noise_cv=0.01)  # quiet enough to decide after round 2
    assert lines[0] == "specgate: measuring fake / w: arms ar, spec, ref-spec; 4 prompts × 2 rounds to start with"
    assert any(line.startswith("specgate: fake / w: round 1, prompt 1/4; 1/8 units") for line in lines)
    look = next(line for line in lines if "after round 2" in line)
    assert "tpot_ms PASS" in look and look.endswith("→ stop")


def test_a_look_never_promises_rounds_the_budget_will_not_run() -> None:
    lines = _lines(max_repetitions=3, request_cv=0.3)
    look = next(line for line in lines if "after round 2" in line)
    assert "UNKNOWN" in look
    assert "gate.max_repetitions allows 1" in look and look.endswith("→ 1 more round(s) of spec, ref-spec")


def test_ttft_probes_go_to_the_arms_compared_beside_each_other_only() -> None:
    """The probes feed the TTFT comparison of spec with ref-spec; plain decoding, timed only for the speedup, gets
    none (a third of the probes' time on the documents)."""
    plan = _plan()
    policy = GatePolicy(repetitions=2, max_repetitions=2, warmup=0, ttft_probes=3)
    engine = FakeEngine(FakeBehaviour(), seed=3)
    engine.load(plan.arms, None)  # type: ignore[arg-type]
    measurement = measure_plan(engine, plan, PROMPTS, policy, hardware="cpu", probes=3)
    counted = {arm: sum(len(run.traces) for run in runs) for arm, runs in measurement.probes.items()}
    assert counted == {"spec": 3 * 2 * len(PROMPTS), "ref-spec": 3 * 2 * len(PROMPTS)}
    runs = {arm: len(measurement.runs[arm]) for arm in plan.names}  # plain decoding: the first round only
    assert runs == {"ar": len(PROMPTS), "spec": 2 * len(PROMPTS), "ref-spec": 2 * len(PROMPTS)}


def test_an_accuracy_probe_measures_a_reference_of_the_same_configuration_once() -> None:
    """On a workload that gates no speed, ref-spec (the same configuration and model files as spec) would repeat
    spec's greedy outputs token for token: it is measured once, its runs are spec's under its own name, and a note
    says so. A reference that differs (another draft length; a stand-in arm of another behaviour) is measured."""
    from specgate.measuring import measured_once, same_answers

    class Counting(FakeEngine):
        def run(self, prompts, arm, *, repetition, load=None):  # type: ignore[no-untyped-def]
            ran.append(arm)
            return super().run(prompts, arm, repetition=repetition, load=load)

    plan, ran = _plan(), []
    engine = Counting(FakeBehaviour(), seed=3)
    engine.load(plan.arms, None)  # type: ignore[arg-type]
    twins = same_answers(engine, plan)
    assert twins == {"ref-spec": "spec"}
    measured = plan.without(tuple(twins))
    assert measured.names == ("ar", "spec") and measured.beside == () and measured.speedups == (("spec", "ar"),)
    policy = GatePolicy(repetitions=1, max_repetitions=1, warmup=0, ttft_probes=0)
    measurement = measured_once(
        measure_plan(engine, measured, PROMPTS, policy, hardware="cpu"), plan, twins, {"ref-spec": {}}
    )
    assert measurement.plan == plan and set(ran) == {"ar", "spec"}
    spec, ref = measurement.runs["spec"], measurement.runs["ref-spec"]
    assert [t.output_ids for r in ref for t in r.traces] == [t.output_ids for r in spec for t in r.traces]
    assert {t.arm for r in ref for t in r.traces} == {"ref-spec"} and {r.arm for r in ref} == {"ref-spec"}
    assert any("ref-spec: the same configuration and model files as spec" in note for note in measurement.notes)

    other = FakeEngine(FakeBehaviour(), seed=3, per_arm={"spec": FakeBehaviour(acceptance=0.5)})
    other.load(plan.arms, None)  # type: ignore[arg-type]
    assert same_answers(other, plan) == {}
    longer = Arm("spec", "spec", "fake", False, "model", Speculation("prompt_lookup", 6), "float32")
    assert same_answers(engine, dataclasses.replace(plan, arms=(plan.arms[0], longer, plan.arms[2]))) == {}


def test_the_time_left_counts_the_arms_later_rounds_run() -> None:
    """Beside a reference, plain decoding runs in the first round only: the estimate counts arm-requests (3 per unit
    in round 1, 2 in round 2), not units, so it does not promise round 1's pace for round 2."""
    plan = _plan()
    policy = GatePolicy(repetitions=2, max_repetitions=2, warmup=0, ttft_probes=0)
    engine = FakeEngine(FakeBehaviour(), seed=3)
    engine.load(plan.arms, None)  # type: ignore[arg-type]
    heard: list[tuple[int, int, tuple[int, int] | None]] = []

    class Heard(ProgressLines):
        def unit_done(self, plan, round_index, done, planned, work=None, setup_s=0.0):  # type: ignore[no-untyped-def]
            heard.append((done, planned, work))

    measure_plan(engine, plan, PROMPTS, policy, hardware="cpu", progress=Heard(lambda t, f: None, live=False))
    n = len(PROMPTS)
    assert heard[0] == (1, 2 * n, (3, 3 * n + 2 * n))
    assert heard[n] == (n + 1, 2 * n, (3 * n + 2, 3 * n + 2 * n))
    assert heard[-1] == (2 * n, 2 * n, (5 * n, 5 * n))
    now = [0.0]
    lines: list[str] = []
    progress = ProgressLines(lambda text, final: lines.append(text), live=False, every_s=0.0, clock=lambda: now[0])
    progress.started(plan, n, 2)
    now[0] = 3.0  # one unit of three arm-requests, a second each
    progress.unit_done(plan, 0, 1, 2 * n, (3, 5 * n))
    assert lines[-1].endswith(f"1/{2 * n} units, 0m03s elapsed, about 0m{5 * n - 3:02d}s left")


def test_the_time_left_leaves_out_the_time_spent_starting_servers() -> None:
    plan = _plan()
    now = [0.0]
    lines: list[str] = []
    progress = ProgressLines(lambda text, final: lines.append(text), live=False, every_s=0.0, clock=lambda: now[0])
    progress.started(plan, 4, 2)
    now[0] = 93.0  # one unit of three arm-requests, a second each, after 90 s of server starts
    progress.unit_done(plan, 0, 1, 8, (3, 30), 90.0)
    assert lines[-1].endswith("1/8 units, 1m33s elapsed, about 0m27s left")
    progress.note(plan, "the vLLM server of spec is up after 40 s")
    assert lines[-1] == "specgate: fake / w: the vLLM server of spec is up after 40 s"


def test_without_a_terminal_a_line_comes_before_the_next_unit_would_end_past_a_minute() -> None:
    """Units of 25 s: the line is written at the unit that ends 50 s after the last line (the next, as long, would
    end past 60 s), so no minute goes by without a line while units keep their length."""
    plan = _plan()
    now = [0.0]
    lines: list[str] = []
    progress = ProgressLines(lambda text, final: lines.append(text), live=False, clock=lambda: now[0])
    progress.started(plan, 8, 2)
    written = []
    for unit in range(1, 9):
        now[0] = 25.0 * unit
        count = len(lines)
        progress.unit_done(plan, 0, unit, 16)
        if len(lines) > count:
            written.append(now[0])
    assert written == [50.0, 100.0, 150.0, 200.0]
    gaps = [b - a for a, b in zip([0.0, *written], written, strict=False)]
    assert max(gaps) <= 60.0
