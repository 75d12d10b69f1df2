"""What a user sees while a pair × workload is measured: progress lines from the start, at every look, and never a
promise of rounds the budget will not run (FakeEngine, the gate's own planner and protocol)."""

from __future__ import annotations

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


def _lines(max_repetitions: int, request_cv: float) -> list[str]:
    plan = _plan()
    policy = GatePolicy(repetitions=2, max_repetitions=max_repetitions, warmup=0, ttft_probes=1, looks=3)
    engine = FakeEngine(FakeBehaviour(request_cv=request_cv), seed=3)
    engine.load(plan.arms, None)  # type: ignore[arg-type]
    lines: list[str] = []
    progress = ProgressLines(lambda text, final: lines.append(text), live=False, every_s=0.0)
    stop = stop_rule(plan, "cpu", SlaLimits(), policy, family_size([(plan, True)]), len(PROMPTS), 1)
    measure_plan(
        engine, plan, PROMPTS, policy, hardware="cpu", stop=stop, probes=1, progress=progress
    )  # fmt: skip
    return lines


def test_lines_from_the_first_unit_to_the_decision() -> None:
    lines = _lines(max_repetitions=40, request_cv=0.0)
    assert lines[0] == "specgate: measuring fake / w: arms ar, spec, ref-spec; 4 prompts × 2 rounds to start with"
    assert any(line.startswith("specgate: fake / w: round 1, prompt 1/4; 1/8 units") for line in lines)
    look = next(line for line in lines if "after round 2" in line)
    assert "tpot_ms PASS" in look and look.endswith("→ stop")


def test_a_look_never_promises_rounds_the_budget_will_not_run() -> None:
    lines = _lines(max_repetitions=3, request_cv=0.3)
    look = next(line for line in lines if "after round 2" in line)
    assert "UNKNOWN" in look
    assert "gate.max_repetitions allows 1" in look and look.endswith("→ 1 more round(s) of spec, ref-spec")
