"""The concurrency sweep: where speculation stops paying, the knee, and the gate on the deployment's concurrency.

The FakeEngine's `batch_cost` makes every target step dearer per token it verifies as the batch grows, so
speculation (γ + 1 tokens verified per step) loses its gain past some concurrency, as on a real engine."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CONFIG, evaluation_of
from specgate.checks.sweep import concurrency_knee, sweep_advice
from specgate.cli import main
from specgate.config import GatePolicy, SlaLimits, Speculation, WorkloadConfig
from specgate.engines.base import Prompt
from specgate.engines.fake import FakeBehaviour, FakeEngine
from specgate.errors import ConfigError
from specgate.evaluation import Evaluation
from specgate.measure.sweep import DOES_NOT_PAY, PAYS, UNDECIDED, measure_sweep, summarize_sweep
from specgate.measuring import measure_sweep_workload
from specgate.plan import two_arm_plan

LEVELS = (1, 2, 4, 8)
# γ=4 at acceptance 0.85: S ≈ 1.9 alone; at 8 in flight a speculative step costs 1 + 0.03·7·5 ≈ 2.05 against plain
# decoding's 1.21, and S falls below 1.15
KNEE_AT_4 = FakeBehaviour(batch_cost=0.03, request_cv=0.02)


def _prompts(n: int = 8) -> list[Prompt]:
    return [Prompt(f"p{i}", f"document {i} " * 20, max_new_tokens=32) for i in range(n)]


def _engine(behaviour: FakeBehaviour = KNEE_AT_4, seed: int = 0, renews: bool = False) -> FakeEngine:
    return FakeEngine(behaviour, seed=seed, batched=True, renews=renews)


def _sweep_evaluation(
    rounds: int = 3, behaviour: FakeBehaviour = KNEE_AT_4, switch_off: str | None = None
) -> Evaluation:
    import dataclasses

    from specgate.config import HardwareProfile

    plan = two_arm_plan("fake", "sweep", Speculation("prompt_lookup", 4))
    engine = _engine(behaviour)
    engine._arms = {arm.name: arm for arm in plan.arms}
    workload = WorkloadConfig("sweep", Path("none.jsonl"), sweep=LEVELS)
    policy = GatePolicy(repetitions=rounds, warmup=0, min_samples=4)
    hardware = HardwareProfile("cpu", "cpu", "cpu")
    evaluation = measure_sweep_workload(engine, plan, workload, _prompts(), policy, hardware, SlaLimits())
    assert evaluation.sweep is not None
    return dataclasses.replace(evaluation, sweep=dataclasses.replace(evaluation.sweep, switch_off=switch_off))


def test_the_sweep_finds_the_knee_where_the_speedup_interval_leaves_the_limit() -> None:
    evaluation = _sweep_evaluation()
    sweep = evaluation.sweep
    assert [lv.concurrency for lv in sweep.levels] == list(LEVELS)
    decisions = [lv.speedup("spec").decision for lv in sweep.levels]
    assert decisions == [PAYS, PAYS, PAYS, DOES_NOT_PAY]
    knee = sweep.knee("spec")
    assert (knee.level, knee.first_not_paying, knee.undecided) == (4, 8, ())
    values = [lv.speedup("spec").value for lv in sweep.levels]
    assert values == sorted(values, reverse=True)  # the gain falls as the batch grows
    for level in sweep.levels:
        s = level.speedup("spec")
        assert s.rounds == 3 and s.ci[0] < s.value < s.ci[1]
        plain, spec = level.arm("ar"), level.arm("spec")
        assert plain.acceptance_rate is None and 0.5 < spec.acceptance_rate < 1.0
        assert plain.requests == spec.requests == 3 * 8
        assert plain.output_tokens_per_s > 0 and spec.p99_tpot_ms is not None


def test_the_deployment_concurrency_is_gated_against_the_knee() -> None:
    evaluation = _sweep_evaluation(switch_off="num_speculative_tokens_per_batch_size")
    inside = concurrency_knee(evaluation, "spec", SlaLimits(deployment_concurrency=4))
    assert inside.passed, inside.message
    assert "speculation pays up to 4 in flight" in inside.message and "does not pay" in inside.message
    beyond = concurrency_knee(evaluation, "spec", SlaLimits(deployment_concurrency=8))
    assert not beyond.passed
    assert beyond.message.startswith("BLOCK: speculation does not pay at 8 in flight")
    assert "num_speculative_tokens_per_batch_size: [[1, 4, 4], [5, N, 0]]" in beyond.message
    # 6 was not measured: the next level up (8) judges it
    between = concurrency_knee(evaluation, "spec", SlaLimits(deployment_concurrency=6))
    assert not between.passed and "at 8 in flight" in between.message
    unmeasured = concurrency_knee(evaluation, "spec", SlaLimits(deployment_concurrency=16))
    assert not unmeasured.passed and "add 16 to workloads.sweep.sweep" in unmeasured.message
    assert beyond.details["knee"] == 4 and beyond.failure is not None


def test_one_round_decides_nothing_and_the_gate_blocks_as_undecided() -> None:
    evaluation = _sweep_evaluation(rounds=1)
    sweep = evaluation.sweep
    assert {lv.speedup("spec").decision for lv in sweep.levels} == {UNDECIDED}
    assert all(math.isnan(lv.speedup("spec").ci[0]) for lv in sweep.levels)
    verdict = concurrency_knee(evaluation, "spec", SlaLimits(deployment_concurrency=1))
    assert not verdict.passed and verdict.message.startswith("BLOCK: undecided")
    assert verdict.details["outcome"] == "UNKNOWN"


@pytest.mark.parametrize(
    ("switch_off", "expected"),
    [
        ("disable_by_batch_size", "set `disable_by_batch_size: 5`"),
        (None, "cap each speculative replica at 4 requests in flight (--max-num-seqs 4)"),
    ],
)
def test_the_advice_speaks_the_installed_engines_terms(switch_off: str | None, expected: str) -> None:
    advice = sweep_advice(_sweep_evaluation(switch_off=switch_off))
    assert len(advice) == 1 and expected in advice[0] and "it does not pay from 8 in flight" in advice[0]


def test_speculation_that_never_pays_is_told_to_serve_plain_decoding() -> None:
    evaluation = _sweep_evaluation(behaviour=FakeBehaviour(batch_cost=0.03, request_cv=0.02, draft_cost=1.5))
    assert evaluation.sweep.knee("spec").level is None
    check = concurrency_knee(evaluation, "spec", SlaLimits())
    assert not check.passed and "does not pay at 1 in flight" in check.message
    assert "serve plain decoding" in sweep_advice(evaluation)[0]


def test_levels_alternate_direction_and_servers_are_renewed_between_rounds() -> None:
    plan = two_arm_plan("fake", "sweep", Speculation("prompt_lookup", 4))
    engine = _engine(renews=True)
    engine._arms = {arm.name: arm for arm in plan.arms}
    calls: list[tuple[str, int | None]] = []
    run = engine.run

    def spy(prompts, arm, *, repetition, load=None):  # type: ignore[no-untyped-def]
        calls.append((arm, None if load is None else load.concurrency))
        return run(prompts, arm, repetition=repetition, load=load)

    engine.run = spy  # type: ignore[method-assign]
    lines: list[str] = []
    runs = measure_sweep(engine, plan, _prompts(4), GatePolicy(repetitions=2, warmup=0), (1, 4), lines.append)
    assert [c for _, c in calls] == [1, 1, 4, 4, 4, 4, 1, 1]
    assert engine.starts == ["ar", "spec"]  # one renewal, before the second round
    assert {len(r) for by_arm in runs.values() for r in by_arm.values()} == {2}
    assert len(lines) == 4 and lines[-1].startswith("round 2/2, 1 in flight done (4/4 level-rounds)")
    sweep = summarize_sweep(plan, runs, SlaLimits(), 1.0)
    assert sweep.rounds == 2 and [k.arm for k in sweep.knees] == ["spec"]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ("[4]", "list at least two concurrency levels"),
        ("[4, 2]", "levels must be ≥ 1 and ascending"),
        ("[0, 2]", "levels must be ≥ 1 and ascending"),
        ("[1, 2]\n    concurrency: 4", "a sweep sets the concurrency per level"),
    ],
)
def test_a_malformed_sweep_is_refused_with_what_to_write(tmp_path: Path, sweep: str, message: str) -> None:
    from specgate.config import load_project_config

    text = CONFIG.format(target="model").replace(
        "  qa:\n    path: workloads/docs.jsonl\n", f"  qa:\n    path: workloads/docs.jsonl\n    sweep: {sweep}\n"
    )
    (tmp_path / "specgate.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_project_config(tmp_path / "specgate.yaml")


SWEEP_CONFTEST = """
import pytest
from specgate.engines.fake import FakeBehaviour, FakeEngine


def pytest_specgate_run(config, run):
    run.engine_factory = lambda name, base: FakeEngine(FakeBehaviour(batch_cost=0.03, request_cv=0.02), batched=True)
"""


@pytest.mark.parametrize(("deployment", "passed"), [(4, True), (8, False)])
def test_a_sweep_workload_is_gated_reported_and_rebuilt_from_its_verdict(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], deployment: int, passed: bool
) -> None:
    config = CONFIG.format(target="model").replace(
        "    default: true\n  other-pair:",
        f"    default: true\n    sla: {{deployment_concurrency: {deployment}}}\n  other-pair:",
    )
    config = config.replace("gate:\n  repetitions: 2", "gate:\n  repetitions: 3").replace(
        "  qa:\n",
        "  docs_sweep:\n    path: workloads/docs.jsonl\n    max_new_tokens: 32\n    sweep: [1, 2, 4, 8]\n  qa:\n",
    )
    root = gate_project(config=config)
    pytester.makeconftest(SWEEP_CONFTEST)
    result = pytester.runpytest(
        "suites/", "--workload=docs_sweep", "--engine=vllm", "--alluredir=allure", "-v"
    )  # the fake batches as vLLM does
    outcome = "PASSED" if passed else "FAILED"
    result.stdout.fnmatch_lines([f"*test_concurrency_knee?fake-pair-docs_sweep? {outcome}*"])
    keys = {c.split("[")[0] for c in result.outlines if "::test_" in c}
    assert not any("p99_ttft" in k or "greedy_identity" in k for k in keys)  # only the sweep's own checks
    result.stdout.fnmatch_lines(
        ["*concurrency sweep fake-pair / docs_sweep:*", "*knee of spec: speculation pays up to 4 in flight*"]
    )
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    sweep = evaluation_of(verdict, "fake-pair", "docs_sweep")["sweep"]
    assert [lv["concurrency"] for lv in sweep["levels"]] == [1, 2, 4, 8] and sweep["knees"][0]["level"] == 4
    summary = (root / "reports" / "summary.md").read_text()
    assert "### Where speculation stops paying (concurrency sweep)" in summary and "| 8 | spec |" in summary
    if not passed:
        assert any("Speculate (spec) up to 4 concurrent requests" in r for r in verdict["recommendations"])
    (root / "reports" / "summary.md").unlink()
    assert main(["report", "--verdict", str(root / "reports" / "verdict.json"), "--results", str(root / "no")]) == 0
    assert (root / "reports" / "summary.md").read_text() == summary
    containers = [json.loads(p.read_text()) for p in (root / "allure").glob("*-container.json")]
    befores = [b for c in containers for b in c.get("befores", []) if b["name"] == "evaluation"]
    names = {a["name"] for b in befores for a in b.get("attachments", [])}
    assert {"Concurrency sweep", "Sweep: speedup against concurrency"} <= names


def test_a_sweep_on_an_engine_that_takes_one_request_at_a_time_is_a_usage_error(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    config = CONFIG.format(target="model").replace(
        "  qa:\n", "  docs_sweep:\n    path: workloads/docs.jsonl\n    sweep: [1, 4]\n  qa:\n"
    )
    gate_project(config=config)
    result = pytester.runpytest("suites/", "--workload=docs_sweep")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*workload 'docs_sweep' is a concurrency sweep (1, 4 in flight) but the 'transformers' engine runs one "
            "request at a time*drop workloads.docs_sweep.sweep*"
        ]
    )


def test_a_sweep_that_pays_at_every_level_says_the_knee_lies_beyond_it() -> None:
    evaluation = _sweep_evaluation(behaviour=FakeBehaviour(batch_cost=0.0, request_cv=0.02))
    sweep = evaluation.sweep
    assert sweep.knee("spec").level == 8 and sweep.knee("spec").first_not_paying is None
    (advice,) = sweep_advice(evaluation)
    assert "pays at every level measured, up to 8 in flight (where it stops lies beyond)" in advice
    assert "no switch-off is needed up to there" in advice and "num_speculative_tokens" not in advice


def test_the_summary_bars_mark_the_limit_on_every_level() -> None:
    from specgate.reports.sweep_table import bars

    lines = bars(_sweep_evaluation().sweep)
    assert len(lines) == 4 and all(line.count("|") == 1 for line in lines)
    full = [line.split()[2].index("|") for line in lines]
    assert len(set(full)) == 1  # the limit stands at one place; the bars shrink past it as S falls
    assert [line.split()[2].count("█") for line in lines] == sorted(
        (x.split()[2].count("█") for x in lines), reverse=True
    )


def test_failed_requests_in_the_sweep_block_it_by_name() -> None:
    evaluation = _sweep_evaluation(behaviour=FakeBehaviour(batch_cost=0.03, request_cv=0.02, fail_arm="spec"))
    check = concurrency_knee(evaluation, "spec", SlaLimits(deployment_concurrency=1))
    assert not check.passed and check.message.startswith("BLOCK: requests failed in the sweep (spec 24 of 24 at 1")
    assert {lv.speedup("spec").decision for lv in evaluation.sweep.levels} == {UNDECIDED}


def test_a_sweeps_servers_announce_their_starts_while_it_runs_and_not_after() -> None:
    """An engine that starts instances (`StartsInstances`) tells the progress lines of each start during a sweep, as
    during any measurement, and is quiet again once the sweep is done."""
    from specgate.config import HardwareProfile
    from specgate.engines.base import StartsInstances
    from specgate.measure.progress import ProgressLines

    class Starting(FakeEngine):
        def __init__(self) -> None:
            super().__init__(KNEE_AT_4, seed=0, batched=True)
            self.announce: Callable[[str], None] | None = None
            self.setup_s = 0.0
            self.up: set[str] = set()

        def ready(self, arm: str, prompts: object) -> None:
            if arm not in self.up:
                self.up.add(arm)
                if self.announce is not None:
                    self.announce(f"starting the server of {arm}")

        def run(self, prompts, arm, *, repetition, load=None):  # type: ignore[no-untyped-def]
            self.ready(arm, prompts)
            return super().run(prompts, arm, repetition=repetition, load=load)

    plan = two_arm_plan("fake", "sweep", Speculation("prompt_lookup", 4))
    engine = Starting()
    assert isinstance(engine, StartsInstances)
    engine._arms = {arm.name: arm for arm in plan.arms}
    lines: list[str] = []
    progress = ProgressLines(lambda text, final: lines.append(text), live=False)
    workload = WorkloadConfig("sweep", Path("none.jsonl"), sweep=LEVELS)
    policy = GatePolicy(repetitions=2, warmup=0, min_samples=4)
    hardware = HardwareProfile("cpu", "cpu", "cpu")
    measure_sweep_workload(engine, plan, workload, _prompts(), policy, hardware, SlaLimits(), progress)
    assert [line for line in lines if "starting the server" in line] == [
        "specgate: fake / sweep: starting the server of ar",
        "specgate: fake / sweep: starting the server of spec",
    ]
    assert engine.announce is None
