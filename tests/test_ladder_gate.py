"""The speed-versus-accuracy ladder: optimisation arms in the config (usage errors for what an engine cannot run),
the ladder's gate logic on the seeded FakeEngine (a rung that loses accuracy is rolled back, one that does not pay is
not worth it, one that does neither passes), its statistics, and its reports rebuilt from `verdict.json`."""

from __future__ import annotations

import json
import re
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import evaluation_of, needs_module, subset_passed
from specgate.accuracy import TaskAccuracy
from specgate.checks import NO_BASELINE, UNUSABLE_BASELINE, Check
from specgate.cli import main
from specgate.config import load_project_config
from specgate.config.optimisation import LadderLimits
from specgate.errors import ConfigError
from specgate.ladder import (
    NOT_WORTH_IT,
    PASS,
    ROLL_BACK,
    UNDECIDED,
    LadderRow,
    accuracy_drop,
    judge_row,
    worst,
)
from specgate.reports.ladder_table import pareto_front
from specgate.run import GateOptions, GateRun
from specgate.store.baselines import load_baseline

MAX_NEW_TOKENS = 8

LADDER_CONFIG = """
pairs:
  fake-pair:
    target: model
    speculation: {method: prompt_lookup, num_tokens: 4}
    default: true
    arms:
      kv-int4: {speculation: null, kv_cache: {dtype: int4}}
      w-int8: {speculation: null, weights: {dtype: int8}}
      w-int2: {speculation: null, weights: {dtype: int2, library: quanto}}
    ladder:
      steps: [kv-int4, w-int8, {arm: w-int2, max_accuracy_drop: 0.05}]
      min_speed_gain: 1.05
workloads:
  docs:
    path: workloads/docs.jsonl
    max_new_tokens: 32
    default: true
  math:
    path: workloads/math.jsonl
    task: numeric
    gate_speed: false
    repetitions: 1
    max_new_tokens: MAX_NEW_TOKENS
    default: true
  long:
    path: workloads/docs.jsonl
    perplexity: true
    gate_speed: false
    repetitions: 1
    max_new_tokens: 4
    default: true
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
""".replace("MAX_NEW_TOKENS", str(MAX_NEW_TOKENS))

# kv-int4: as fast as full precision (does not pay); w-int8: faster and as accurate; w-int2: faster, but half of
# the problems answered wrongly and a higher perplexity.
LADDER_CONFTEST = """
import pytest
from specgate.engines.fake import FakeBehaviour, FakeEngine

PER_ARM = {
    "kv-int4": FakeBehaviour(perplexity=10.2),
    "w-int8": FakeBehaviour(tpot_ms=14.0, ttft_ms=250.0, perplexity=10.3),
    "w-int2": FakeBehaviour(tpot_ms=10.0, ttft_ms=200.0, wrong_share=0.5, perplexity=31.0),
}


def pytest_specgate_run(config, run):
    run.engine_factory = lambda name, base: FakeEngine(FakeBehaviour(), seed=3, per_arm=PER_ARM)
"""


def _answer(prompt_id: str) -> int:
    """The fake engine's last token for this prompt (its full-precision output's final number)."""
    return (zlib.crc32(prompt_id.encode()) * 31 + (MAX_NEW_TOKENS - 1) * 7) % 1000 + 1


@pytest.fixture
def ladder_project(gate_project: Callable[..., Path], pytester: pytest.Pytester) -> Path:
    root = gate_project(config=LADDER_CONFIG)
    problems = [{"id": f"m{i}", "prompt": f"problem {i}", "reference": str(_answer(f"m{i}"))} for i in range(40)]
    (root / "workloads" / "math.jsonl").write_text("\n".join(json.dumps(p) for p in problems) + "\n")
    pytester.makeconftest(LADDER_CONFTEST)
    return root


def test_the_ladder_rolls_back_a_step_that_loses_accuracy_and_passes_one_that_does_not(
    pytester: pytest.Pytester, ladder_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = pytester.runpytest("suites/test_sla.py", "suites/test_ladder.py", "-v")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    for item in (
        "accuracy?fake-pair-math-kv-int4? PASSED",
        "accuracy?fake-pair-math-w-int8? PASSED",
        "accuracy?fake-pair-math-w-int2? FAILED",
        "perplexity?fake-pair-long-w-int8? PASSED",
        "perplexity?fake-pair-long-w-int2? FAILED",
    ):
        result.stdout.fnmatch_lines([f"*test_ladder_step_keeps_{item}*"])
    result.stdout.fnmatch_lines(
        [
            "*ladder fake-pair / docs:*",
            "*step*arm*speed gain (95% CI)*verdict*",
            "*ladder decision fake-pair / kv-int4: NOT WORTH IT (docs: speed gain *",
            "*ladder decision fake-pair / w-int8: PASS*",
            "*ladder decision fake-pair / w-int2: ROLL BACK (math: accuracy drop * pts > 5.0 pts*",
            "*RECOMMENDATION: roll back ladder step(s) w-int2 of fake-pair/math*",
            "*RECOMMENDATION: ladder step 1 kv-int4 on fake-pair/docs is not worth it*",
        ]
    )
    per_document = "ar 10.00 · kv-int4 10.20 (+0.20) · w-int8 10.30 (+0.30) · w-int2 31.00 (+21.00)"
    result.stdout.fnmatch_lines([f"*perplexity on * tokens): {per_document}"])
    verdict = json.loads((ladder_project / "reports" / "verdict.json").read_text())
    rows = {r["arm"]: r for r in evaluation_of(verdict, "fake-pair", "math")["ladder"]}
    assert list(rows) == ["ar", "kv-int4", "w-int8", "w-int2"]
    dropped = rows["w-int2"]
    assert dropped["verdict"] == ROLL_BACK and dropped["accuracy_n"] == 40 and rows["ar"]["accuracy"] == 1.0
    assert 0.3 < dropped["accuracy_drop"] < 0.7 and dropped["accuracy_drop_ci"][0] > 0.05
    assert dropped["mcnemar_p"] < 0.001 and dropped["fixed"] == 0 and dropped["agreement"] < 0.7
    assert rows["w-int8"]["accuracy_drop"] == 0.0 and rows["w-int8"]["agreement"] == 1.0
    docs = {r["arm"]: r for r in evaluation_of(verdict, "fake-pair", "docs")["ladder"]}
    assert docs["w-int8"]["speed_gain"] > 1.2 and docs["w-int8"]["speed_gain_ci"][0] > 1.05
    assert docs["kv-int4"]["verdict"] == NOT_WORTH_IT and docs["w-int8"]["verdict"] == PASS
    long = {r["arm"]: r for r in evaluation_of(verdict, "fake-pair", "long")["ladder"]}
    assert long["w-int2"]["perplexity_rise"] == pytest.approx(21.0) and long["kv-int4"]["verdict"] == PASS
    documents = long["w-int2"]["perplexity_by_document"]
    assert len(documents) == len(long["ar"]["perplexity_by_document"]) > 1
    assert all(d["perplexity"] == pytest.approx(31.0) and d["tokens"] > 0 for d in documents)
    # the ladder is stored with the run, in the baselines' format, and reads back step by step
    from specgate.store.baselines import load_baseline

    stored = load_baseline(ladder_project / "reports" / "runs" / "cpu" / "fake-pair" / "math.json").runs[0]
    assert [r.arm for r in stored.ladder] == list(rows) and stored.ladder[3].verdict == ROLL_BACK
    assert set(stored.accuracy) >= {"kv-int4", "w-int8", "w-int2"}
    summary = (ladder_project / "reports" / "summary.md").read_text()
    assert "### Speed-versus-accuracy ladder" in summary and "| 3 | w-int2 |" in summary
    assert f"tokens): {per_document}" in summary
    # every ladder report is rebuilt from verdict.json alone
    (ladder_project / "reports" / "summary.md").unlink()
    capsys.readouterr()
    assert main(["report", "--verdict", str(ladder_project / "reports" / "verdict.json"), "--results", "none"]) == 0
    assert (ladder_project / "reports" / "summary.md").read_text() == summary
    assert "ladder decision fake-pair / w-int2: ROLL BACK" in capsys.readouterr().out


def test_the_ladder_is_in_the_allure_results_with_its_pareto_plot(
    pytester: pytest.Pytester, ladder_project: Path
) -> None:
    needs_module("allure", "pip install 'specgate[reports]'")
    pytester.runpytest("suites/test_ladder.py", "--alluredir=allure")
    names = {
        a["name"]
        for f in (ladder_project / "allure").glob("*-result.json")
        for a in _attachments(json.loads(f.read_text()))
    }
    containers = [json.loads(f.read_text()) for f in (ladder_project / "allure").glob("*-container.json")]
    names |= {a["name"] for c in containers for fixture in c.get("befores", []) for a in _attachments(fixture)}
    assert {"Speed-versus-accuracy ladder", "Ladder: speed vs accuracy (Pareto front)"} <= names


def _attachments(node: dict[str, object]) -> list[dict[str, str]]:
    found = list(node.get("attachments", []))  # type: ignore[call-overload]
    for step in node.get("steps", []):  # type: ignore[attr-defined]
        found += _attachments(step)
    return found


def _config(tmp_path: Path, arms: str, ladder: str = "", engine: str = "") -> Path:
    (tmp_path / "w.jsonl").write_text("\n".join(json.dumps({"id": f"p{i}", "prompt": "x"}) for i in range(8)) + "\n")
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text("{}")
    text = f"""
    pairs:
      p:
        target: model
        speculation: {{method: prompt_lookup, num_tokens: 3}}
        {engine}
        arms:
          {arms}
        {ladder}
    workloads:
      w: {{path: w.jsonl}}
    """
    path = tmp_path / "specgate.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _usage_error(config: Path) -> str:
    with pytest.raises(ConfigError) as raised:
        GateRun.from_options(GateOptions(config=config, hardware_dir=Path(__file__).parent.parent / "hardware"))
    return str(raised.value)


def test_an_arm_the_engine_cannot_run_is_a_usage_error_listing_what_it_can(tmp_path: Path) -> None:
    message = _usage_error(_config(tmp_path, "batch-8: {speculation: null, batching: {max_num_seqs: 8}}"))
    assert "pairs.p.arms.batch-8.batching: engine 'transformers' cannot run a batching arm" in message
    assert "it runs: kv_cache, weights" in message
    message = _usage_error(_config(tmp_path, "kv-fp8: {speculation: null, kv_cache: {dtype: fp8}}"))
    runs = "it runs quanto: int4, int2; hqq: int8, int4, int2"
    assert f"fp8 through 'vllm' is not supported by engine 'transformers'; {runs}" in message


def test_a_missing_quantization_library_is_a_usage_error_with_its_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import specgate.config.optimisation as optimisation

    monkeypatch.setattr(optimisation, "_missing", lambda module: module == "torchao")
    message = _usage_error(_config(tmp_path, "w8: {speculation: null, weights: {dtype: int8}}"))
    assert "torchao needs 'torchao', which is not installed; install it: pip install --no-deps torchao" in message


def test_ladder_steps_must_be_arms_of_the_pair(tmp_path: Path) -> None:
    config = _config(tmp_path, "w-int8: {speculation: null, weights: {dtype: int8}}", "ladder: {steps: [w-int9]}")
    with pytest.raises(ConfigError, match=r"ladder.steps\[0\].arm.*Did you mean 'w-int8'"):
        load_project_config(config)
    config = _config(tmp_path, "w8: {weights: {dtype: int8}}", "ladder: {steps: [w8], max_accuracy_drop: 3}")
    with pytest.raises(ConfigError, match="max_accuracy_drop"):
        load_project_config(config)


def test_stacked_arms_are_parsed_and_timed_against_their_own_plain_arm(tmp_path: Path) -> None:
    from specgate.config import load_hardware_profile
    from specgate.plan import build_plan

    arms = "w8: {speculation: null, weights: {dtype: int8}}\n          w8-pld: {weights: {dtype: int8}}"
    project = load_project_config(_config(tmp_path, arms, "ladder: {steps: [w8, w8-pld]}"))
    hardware = load_hardware_profile("cpu", Path(__file__).parent.parent / "hardware")
    plan = build_plan(project, "p", "w", hardware)
    assert dict(plan.speedups) == {"spec": "ar", "w8-pld": "w8"}
    assert [(s.arm, s.previous) for s in plan.ladder] == [("w8", "ar"), ("w8-pld", "w8")]
    assert plan.arm("w8-pld").describe() == "prompt_lookup γ=3, float32, weights int8 (torchao)"
    assert plan.arm("w8").configuration() != plan.arm("ar").configuration()


def test_accuracy_drop_is_paired_with_mcnemar_and_a_bootstrap_interval() -> None:
    scipy_stats = needs_module("scipy.stats", "pip install scipy")
    full = TaskAccuracy("numeric", 50, 40, 0.8, {f"p{i}": float(i < 40) for i in range(50)})
    step = TaskAccuracy("numeric", 50, 33, 0.66, {f"p{i}": float(i < 31 or 45 <= i < 47) for i in range(50)})
    drop, ci, p, broken, fixed = accuracy_drop(full, step, seed=1)
    assert (broken, fixed) == (9, 2) and drop == pytest.approx(0.14)
    assert p == pytest.approx(scipy_stats.binomtest(9, 11, 0.5).pvalue)
    assert ci is not None and ci[0] < 0.14 < ci[1] and ci[0] > 0.0


def test_a_step_is_rolled_back_not_worth_it_or_passed_by_its_limits() -> None:
    limits = LadderLimits(max_accuracy_drop=0.03, max_perplexity_rise=0.5, min_speed_gain=1.05)
    row = LadderRow(1, "w", "", "ar", "", speed_gain=1.3, accuracy_drop=0.02, perplexity_rise=0.1)
    assert judge_row(row, limits, gate_speed=True) == (PASS, ())
    slow = LadderRow(1, "w", "", "ar", "", speed_gain=1.01, accuracy_drop=0.0)
    assert judge_row(slow, limits, gate_speed=True)[0] == NOT_WORTH_IT
    assert judge_row(slow, limits, gate_speed=False)[0] == PASS  # speed is judged where the workload gates it
    worse = LadderRow(1, "w", "", "ar", "", speed_gain=1.01, accuracy_drop=0.031)
    verdict, reasons = judge_row(worse, limits, gate_speed=True)
    assert verdict == ROLL_BACK and reasons[0] == "accuracy drop 3.1 pts > 3.0 pts"
    perplexity = LadderRow(1, "w", "", "ar", "", perplexity_rise=0.51)
    assert judge_row(perplexity, limits, gate_speed=True)[0] == ROLL_BACK


def test_the_pareto_front_keeps_only_undominated_rungs() -> None:
    points = [("ar", 1.0, 0.5), ("kv", 1.0, 0.49), ("w8", 1.4, 0.5), ("w2", 2.0, 0.1), ("pld", 1.3, 0.45)]
    assert pareto_front(points) == ["w8", "w2"]


def test_vllm_arms_map_to_its_own_arguments() -> None:
    from specgate.config.optimisation import Batching, KvCache, Optimisation, Weights
    from specgate.engines.vllm_engine import optimisation_arguments

    stacked = Optimisation(KvCache("fp8", "vllm"), Weights("awq", "vllm"), Batching(8, 8))
    assert optimisation_arguments(stacked) == {"kv_cache_dtype": "fp8", "quantization": "awq", "max_num_seqs": 8}
    assert optimisation_arguments(Optimisation()) == {}


def test_an_accuracy_drop_on_too_few_changed_answers_is_undecided_not_rolled_back() -> None:
    """One flipped answer of 12 is an 8-point drop that McNemar cannot tell from chance (p = 1): the rung is
    UNDECIDED (it does not block) with about how many problems would tell such a drop from chance, not a measured
    loss; 6 broken of 40 is told from chance and rolled back."""
    from specgate.checks import DRIFT, check
    from specgate.checks.advice import advise

    limits = LadderLimits(max_accuracy_drop=0.03, max_perplexity_rise=0.5, min_speed_gain=1.05)
    flipped = LadderRow(1, "w", "", "ar", "", accuracy_drop=1 / 12, accuracy_n=12, mcnemar_p=1.0, broken=1, fixed=0)
    verdict, reasons = judge_row(flipped, limits, gate_speed=True)
    assert verdict == UNDECIDED
    assert "1 broken, 0 fixed of 12 problems, McNemar p=1 > 0.05" in reasons[0]
    assert "≈ 47 problems would tell a drop of this size from chance" in reasons[0]  # d = δ = 1/12: 12 × 3.84
    real = LadderRow(1, "w", "", "ar", "", accuracy_drop=6 / 40, accuracy_n=40, mcnemar_p=0.031, broken=6, fixed=0)
    assert judge_row(real, limits, gate_speed=True)[0] == ROLL_BACK
    assert worst([NOT_WORTH_IT, UNDECIDED, PASS]) == UNDECIDED and worst([UNDECIDED, ROLL_BACK]) == ROLL_BACK
    rolled = check("ladder_accuracy", ("p", "gsm"), DRIFT, False, "ROLL BACK: step 1 w", details={"ladder": True})
    advice = advise([rolled], [], "cpu")
    assert any(a.startswith("roll back ladder step(s)") and "p/gsm" in a for a in advice), advice


# The ladder against its stored self: w-int2 recorded as harmless (as accurate as full precision, perplexity 10.4).
RECORDED_W_INT2 = "FakeBehaviour(tpot_ms=10.0, ttft_ms=200.0, perplexity=10.4)"
LADDER_W_INT2 = "FakeBehaviour(tpot_ms=10.0, ttft_ms=200.0, wrong_share=0.5, perplexity=31.0)"


def _set_behaviour(root: Path, old: str, new: str) -> None:
    conftest = root / "conftest.py"
    text = conftest.read_text()
    assert old in text
    conftest.write_text(text.replace(old, new))


def _ladder_vs_baseline(root: Path) -> dict[tuple[str, str], dict[str, object]]:
    """(workload, step) → the `regression:ladder:<step>` check of the last run's verdict."""
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    return {
        (c["workload"], c["name"].removeprefix("regression:ladder:")): c
        for c in verdict["checks"]
        if c["name"].startswith("regression:ladder:")
    }


def _record_ladder(
    pytester: pytest.Pytester, root: Path, steps: tuple[str, ...] = ("kv-int4", "w-int8", "w-int2")
) -> None:
    _set_behaviour(root, LADDER_W_INT2, RECORDED_W_INT2)
    result = pytester.runpytest("suites", "--update-baselines")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert all(c["passed"] and "update run" in c["message"] for c in _ladder_vs_baseline(root).values())
    stored = load_baseline(root / "baselines" / "cpu" / "fake-pair" / "math.json").record
    assert [r.arm for r in stored.ladder] == ["ar", *steps]


def test_an_unchanged_ladder_passes_against_its_stored_self_step_by_step(
    pytester: pytest.Pytester, ladder_project: Path
) -> None:
    _record_ladder(pytester, ladder_project)
    result = pytester.runpytest("suites/test_ladder.py", "-v")
    subset_passed(result, ladder_project)  # the ladder suite alone: every check passes, the rest did not run
    for workload in ("math", "long"):
        for step in ("kv-int4", "w-int8", "w-int2"):
            result.stdout.fnmatch_lines([f"*test_ladder_step_vs_baseline?fake-pair-{workload}-{step}? PASSED*"])
    checks = _ladder_vs_baseline(ladder_project)
    assert {w for w, _ in checks} == {"math", "long"}  # not on docs: no answers, no perplexity
    math = checks[("math", "w-int2")]
    assert math["passed"] and math["details"]["outcome"] == "PASS" and math["details"]["step"] == "w-int2"
    message = str(math["message"])
    assert "numeric accuracy 100.0% vs baseline 100.0%: drop 0.0 pts ≤ max 5.0 pts (n=40, baseline n=40" in message
    assert "McNemar exact p=1 on 40 common prompts: 0 broken, 0 fixed" in message
    assert "drop vs full precision 0.0 pts now, 0.0 pts in the baseline" in message
    assert "speed gain over full precision" in message and "verdict PASS, as in the baseline" in message
    long = checks[("long", "w-int2")]
    assert long["passed"] and "perplexity 10.400 vs baseline 10.400" in str(long["message"])
    assert "rise +0.000 ≤ max 0.50" in str(long["message"])


def test_a_step_that_lost_accuracy_against_its_stored_self_blocks_even_when_full_precision_lost_it_too(
    pytester: pytest.Pytester, ladder_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model update that costs full precision and w-int2 the same answers: w-int2 is as good as full precision in
    this run (ladder_accuracy passes), but worse than it was (ladder_step_vs_baseline blocks); `specgate baseline
    diff` on the stored files decides the same."""
    _record_ladder(pytester, ladder_project)
    _set_behaviour(ladder_project, "FakeBehaviour(), seed=3", "FakeBehaviour(wrong_share=0.5), seed=3")
    _set_behaviour(
        ladder_project, RECORDED_W_INT2, RECORDED_W_INT2.replace("perplexity", "wrong_share=0.5, perplexity")
    )
    result = pytester.runpytest("suites/test_ladder.py", "-v")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*test_ladder_step_keeps_accuracy?fake-pair-math-w-int2? PASSED*",
            "*test_ladder_step_vs_baseline?fake-pair-math-w-int2? FAILED*",
            "FAILED fake-pair/math/regression:ladder:w-int2: REGRESSED: step 3 w-int2 (*",
            "*RECOMMENDATION: ladder step(s) w-int2 of fake-pair/math got worse than in the baseline*",
        ]
    )
    checks = _ladder_vs_baseline(ladder_project)
    assert {k for k, c in checks.items() if not c["passed"]} == {("math", "w-int2")}
    failed = checks[("math", "w-int2")]
    details, message = failed["details"], str(failed["message"])
    assert details["outcome"] == "BLOCK" and details["baseline_accuracy"] == 1.0
    assert 0.3 < details["accuracy"] < 0.7 and details["fixed"] == 0 and details["mcnemar_p"] < 0.001
    assert message.startswith("REGRESSED: step 3 w-int2 (")
    assert f"numeric accuracy {details['accuracy']:.1%} vs baseline 100.0%" in message
    assert f"> max 5.0 pts (n=40, baseline n=40; McNemar exact p={details['mcnemar_p']:.2g}" in message
    assert f"{details['broken']} broken, 0 fixed" in message
    assert "drop vs full precision 0.0 pts now, 0.0 pts in the baseline" in message
    # the same decision offline, from the stored baseline and the run's record
    gate = {step: c["passed"] for (workload, step), c in checks.items() if workload == "math"}
    capsys.readouterr()
    status = main(
        [
            "baseline",
            "diff",
            str(ladder_project / "baselines" / "cpu" / "fake-pair" / "math.json"),
            str(ladder_project / "reports" / "runs" / "cpu" / "fake-pair" / "math.json"),
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    diff = {
        m.group(2): m.group(1) == "PASS"
        for line in lines
        if (m := re.match(r"\s+(PASS|FAIL) regression:ladder:(\S+):", line))
    }
    assert diff == gate == {"kv-int4": True, "w-int8": True, "w-int2": False}
    assert status == 1
    assert any(line.startswith("  FAIL regression:ladder:w-int2: REGRESSED: step 3 w-int2") for line in lines)


def test_a_baseline_recorded_without_a_step_blocks_it_with_how_to_record_it(
    pytester: pytest.Pytester, ladder_project: Path
) -> None:
    config = ladder_project / "specgate.yaml"
    full = config.read_text()
    config.write_text(full.replace(", {arm: w-int2, max_accuracy_drop: 0.05}", ""))
    _record_ladder(pytester, ladder_project, ("kv-int4", "w-int8"))
    config.write_text(full)
    result = pytester.runpytest("suites/test_ladder.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    checks = _ladder_vs_baseline(ladder_project)
    assert {k for k, c in checks.items() if not c["passed"]} == {("math", "w-int2"), ("long", "w-int2")}
    blocked = checks[("math", "w-int2")]
    assert blocked["details"]["outcome"] == "NOT RECORDED"
    assert str(blocked["message"]).startswith(
        "BLOCK: step 3 w-int2 (plain decoding, float32, weights int2 (quanto)): the baseline was recorded without "
        "ladder step w-int2 — record it (pytest suites/ --hardware=cpu --pair=fake-pair --update-baselines)"
    ), blocked["message"]
    result.stdout.fnmatch_lines(["*RECOMMENDATION: baseline problem on fake-pair/math: BLOCK: step 3 w-int2*"])
    # an update run records the step (it is not blocked by its own absence), and then it is compared
    result = pytester.runpytest("suites", "--update-baselines")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "this run records it" in str(_ladder_vs_baseline(ladder_project)[("math", "w-int2")]["message"])
    subset_passed(pytester.runpytest("suites/test_ladder.py"), ladder_project)
    assert _ladder_vs_baseline(ladder_project)[("math", "w-int2")]["details"]["outcome"] == "PASS"


def test_a_step_whose_perplexity_rose_over_its_stored_self_blocks_and_so_does_a_missing_or_broken_baseline() -> None:
    from specgate.checks.ladder_baseline import ladder_key, ladder_vs_baseline
    from specgate.checks.subject import Subject
    from specgate.config import SlaLimits
    from specgate.errors import BaselineError
    from specgate.ladder import FULL
    from specgate.measure.perplexity import Perplexity
    from specgate.store.baselines import Baseline
    from specgate.store.records import RunRecord, plan_of

    limits = LadderLimits(max_perplexity_rise=0.5)

    def record(perplexity: float, verdict: str) -> RunRecord:
        rows = (
            LadderRow(0, "ar", "plain", None, FULL, perplexity=10.0),
            LadderRow(1, "kv", "KV int2", "ar", verdict, speed_gain_full=1.2, perplexity=perplexity, limits=limits),
        )
        scored = {"ar": Perplexity("ar", 4, 400, 10.0), "kv": Perplexity("kv", 4, 400, perplexity)}
        return RunRecord("cpu", "p", "long", {}, ladder=rows, perplexity=scored)

    now = record(11.0, ROLL_BACK)
    stored = Baseline(Path("b.json"), "cpu", "p", "long", (record(10.2, PASS),))

    def judged(baseline: Baseline | Exception | None, update: bool = False) -> Check:
        subject = Subject(plan_of(now), now, baseline, "b.json", SlaLimits(), 4, 1)
        return ladder_vs_baseline(subject, update=update, hardware="cpu")[ladder_key("kv")]

    rose = judged(stored)
    assert not rose.passed and rose.details["outcome"] == "BLOCK" and rose.observed == pytest.approx(0.8)
    assert (
        "perplexity 11.000 vs baseline 10.200 (4 documents, 400 tokens; baseline 4, 400): rise +0.800 > max 0.50"
        in (rose.message)
    )
    assert "speed gain over full precision 1.20× now, 1.20× in the baseline, verdict was PASS, now ROLL BACK" in (
        rose.message
    )
    assert judged(Baseline(Path("b.json"), "cpu", "p", "long", (record(10.6, PASS),))).passed  # rise 0.4 ≤ 0.5
    missing = judged(None)
    assert not missing.passed and missing.details["outcome"] == NO_BASELINE
    assert missing.message.startswith("BLOCK: no baseline for cpu/p/long (b.json)")
    assert judged(None, update=True).passed
    broken = judged(BaselineError("b.json: corrupt baseline"))
    assert not broken.passed and broken.message == "BLOCK: b.json: corrupt baseline"
    assert broken.details["outcome"] == UNUSABLE_BASELINE


EQUAL_ACCURACY_CONFIG = """
pairs:
  fake-pair:
    target: model
    speculation: {method: prompt_lookup, num_tokens: 4}
    default: true
    arms:
      w-int8: {speculation: null, weights: {dtype: int8}}
    ladder:
      steps: [w-int8]
workloads:
  math:
    path: workloads/math.jsonl
    task: numeric
    gate_speed: false
    repetitions: 1
    max_new_tokens: MAX_NEW_TOKENS
    default: true
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
""".replace("MAX_NEW_TOKENS", str(MAX_NEW_TOKENS))

# w-int8 answers 10 % of the problems differently from full precision (FakeBehaviour.wrong_share): its final token
# is one more than full precision's on those.
FLIPPING_CONFTEST = """
from specgate.engines.fake import FakeBehaviour, FakeEngine

PER_ARM = {"w-int8": FakeBehaviour(tpot_ms=14.0, ttft_ms=250.0, wrong_share=0.1)}


def pytest_specgate_run(config, run):
    run.engine_factory = lambda name, base: FakeEngine(FakeBehaviour(), seed=3, per_arm=PER_ARM)
"""


def _flipped(prompt_id: str, share: float = 0.1) -> bool:
    """Whether FakeBehaviour(wrong_share=share) answers this problem differently (as the fake engine draws it)."""
    import numpy as np

    return bool(np.random.default_rng([zlib.crc32(prompt_id.encode()), 11]).random() < share)


def test_an_equal_accuracy_rung_that_flips_answers_is_undecided_and_passes(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """A rung with no accuracy cost that changes 10 % of the answers (as many fixed as broken, give or take chance):
    on 200 problems it happens to break 4 points more than it fixes, which McNemar cannot tell from chance. Before,
    the point estimate beyond 3 points made it UNDECIDED → BLOCK (and the same greedy outputs block every run); now
    it passes, saying how many problems would decide a drop of that size."""
    root = gate_project(config=EQUAL_ACCURACY_CONFIG)
    ids = [f"m{i}" for i in range(200)]
    flipped = [pid for pid in ids if _flipped(pid)]
    broken = (len(flipped) + 8) // 2  # broken − fixed ≥ 7 answers of 200: a drop beyond 3 points
    fixed = len(flipped) - broken
    from scipy import stats

    assert fixed > 0 and stats.binomtest(broken, len(flipped), 0.5).pvalue > 0.05  # not told from chance
    wrong_in_full = set(flipped[broken:])  # full precision answers these wrongly, the rung (one more) rightly
    problems = [
        {
            "id": pid,
            "prompt": f"problem {pid}",
            "reference": str(_answer(pid) % 1000 + 1 if pid in wrong_in_full else _answer(pid)),
        }
        for pid in ids
    ]
    (root / "workloads" / "math.jsonl").write_text("\n".join(json.dumps(p) for p in problems) + "\n")
    pytester.makeconftest(FLIPPING_CONFTEST)
    result = pytester.runpytest("suites/test_ladder.py", "-k", "keeps_accuracy", "-v")
    result.stdout.fnmatch_lines(["*test_ladder_step_keeps_accuracy?fake-pair-math-w-int8? PASSED*"])
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    check = next(c for c in verdict["checks"] if c["name"] == "ladder_accuracy")
    row = next(r for r in evaluation_of(verdict, "fake-pair", "math")["ladder"] if r["arm"] == "w-int8")
    assert (row["broken"], row["fixed"], row["verdict"]) == (broken, fixed, UNDECIDED)
    assert check["passed"] and check["message"].startswith("UNDECIDED (passes): step 1 w-int8"), check["message"]
    assert "problems would tell a drop of this size from chance" in check["message"]


def test_a_rung_the_run_only_times_is_not_scored_and_blocks(pytester: pytest.Pytester, ladder_project: Path) -> None:
    """Only the speed workload selected, and w-int2 answers every problem wrong: before, the ladder judged it on speed
    alone (output agreement shown, never judged), the run passed and its baseline was written; now every rung is
    "not scored" and the run blocks without writing a baseline."""
    _set_behaviour(ladder_project, "wrong_share=0.5", "wrong_share=1.0")
    result = pytester.runpytest("suites", "--workload=docs", "--update-baselines")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "FAILED fake-pair/docs/ladder_scored?w-int2?: BLOCK: ladder step w-int2 not scored: *",
            "RECOMMENDATION: score ladder step(s) kv-int4, w-int8, w-int2 of fake-pair/docs in the same run: *",
        ]
    )
    verdict = json.loads((ladder_project / "reports" / "verdict.json").read_text())
    unscored = {c["arm"] for c in verdict["checks"] if c["name"] == "ladder_scored" and not c["passed"]}
    assert unscored == {"kv-int4", "w-int8", "w-int2"}
    assert not (ladder_project / "baselines" / "cpu" / "fake-pair").exists()
    # with a workload that scores the rungs beside it, they are scored: w-int2 is rolled back on its answers
    assert pytester.runpytest("suites/test_ladder.py", "--workload=docs,math").ret == pytest.ExitCode.TESTS_FAILED
    checks = json.loads((ladder_project / "reports" / "verdict.json").read_text())["checks"]
    judged = {(c["name"], c["workload"], c["arm"]): c["passed"] for c in checks}
    assert judged[("ladder_scored", "docs", "w-int2")] and not judged[("ladder_accuracy", "math", "w-int2")]


def test_a_rung_meant_to_be_lossless_is_gated_on_output_agreement(
    pytester: pytest.Pytester, ladder_project: Path
) -> None:
    """kv-int4 declared `lossless: true` changes some of its greedy outputs (2 of the 8 documents) without moving
    perplexity: scored on perplexity alone, it passed before; now its output agreement with full precision blocks
    it, on the speed workload too. w-int8 (quantized weights, not declared) is not held to agreement."""
    config = ladder_project / "specgate.yaml"
    text = config.read_text()
    config.write_text(text.replace("steps: [kv-int4,", "steps: [{arm: kv-int4, lossless: true},"))
    _set_behaviour(
        ladder_project, '"kv-int4": FakeBehaviour(perplexity=10.2)', '"kv-int4": FakeBehaviour(wrong_share=0.5)'
    )
    result = pytester.runpytest("suites/test_ladder.py", "--workload=docs,long")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    verdict = json.loads((ladder_project / "reports" / "verdict.json").read_text())
    perplexity = next(c for c in verdict["checks"] if c["name"] == "ladder_perplexity" and c["arm"] == "kv-int4")
    assert perplexity["passed"]  # what judged it before: its perplexity did not move
    agreement = [c for c in verdict["checks"] if c["name"] == "ladder_agreement"]
    assert {(c["workload"], c["arm"]) for c in agreement} == {("docs", "kv-int4"), ("long", "kv-int4")}
    failed = next(c for c in agreement if c["workload"] == "docs")
    assert not failed["passed"] and 0.1 < failed["observed"] < 0.4, failed["message"]
    assert "is meant to be lossless" in failed["message"] and "drift SLA 0.3%" in failed["message"]


def test_a_speculation_rung_is_lossless_by_default_and_a_quantized_one_is_not() -> None:
    from specgate.config import Speculation
    from specgate.config.optimisation import KvCache, Optimisation
    from specgate.ladder import meant_lossless
    from specgate.plan import Arm, LadderStep, MeasurementPlan

    full = Arm("ar", "ar", "p", False, "model", None, "float32")
    pld = Arm("spec", "spec", "p", False, "model", Speculation("prompt_lookup", 3), "float32", slowdown=0.1)
    kv = Arm(
        "kv", "kv", "p", False, "model", None, "float32", optimisation=Optimisation(kv_cache=KvCache("int4", "quanto"))
    )
    half = Arm("bf16", "bf16", "p", False, "model", None, "bfloat16")
    limits = LadderLimits()
    steps = (LadderStep("spec", "ar", limits), LadderStep("kv", "spec", limits), LadderStep("bf16", "kv", limits))
    plan = MeasurementPlan("p", "w", (full, pld, kv, half), (("spec", "ar"),), ladder=steps)
    assert [meant_lossless(plan, s.arm) for s in steps] == [True, False, False]
    declared = (
        LadderStep("kv", "ar", LadderLimits(lossless=True)),
        LadderStep("spec", "kv", LadderLimits(lossless=False)),
    )
    plan = MeasurementPlan("p", "w", (full, pld, kv), (("spec", "ar"),), ladder=declared)
    assert [meant_lossless(plan, s.arm) for s in declared] == [True, False]


def test_a_ladder_with_a_rolled_back_rung_is_recorded_and_a_rerun_judges_the_rung_against_its_stored_self(
    pytester: pytest.Pytester, ladder_project: Path
) -> None:
    """A rung rolled back is a result to keep: --update-baselines records the run (the rung's rows stored marked ROLL
    BACK) while the verdict still blocks on it; the next run compares the rung with its stored self."""
    recorded = pytester.runpytest("suites", "--update-baselines")
    assert recorded.ret == pytest.ExitCode.TESTS_FAILED, recorded.stdout.str()
    verdict = json.loads((ladder_project / "reports" / "verdict.json").read_text())
    assert verdict["verdict"] == "BLOCK" and not verdict["errors"]
    failed = {(c["name"], c["arm"]) for c in verdict["checks"] if not c["passed"]}
    assert failed == {("ladder_accuracy", "w-int2"), ("ladder_perplexity", "w-int2")}
    assert any("recorded although the run blocked" in n and "(fake-pair/w-int2)" in n for n in verdict["notices"])
    stored = load_baseline(ladder_project / "baselines" / "cpu" / "fake-pair" / "math.json").record
    assert {r.arm: r.verdict for r in stored.ladder}["w-int2"] == ROLL_BACK
    assert (ladder_project / "baselines" / "cpu" / "fake-pair" / "docs.json").exists()

    rerun = pytester.runpytest("suites/test_ladder.py", "-v")  # latency against history needs 3 stored runs
    assert rerun.ret == pytest.ExitCode.TESTS_FAILED, rerun.stdout.str()
    checks = _ladder_vs_baseline(ladder_project)
    assert checks[("math", "w-int2")]["passed"] and checks[("long", "w-int2")]["passed"]
    assert "verdict ROLL BACK, as in the baseline" in str(checks[("math", "w-int2")]["message"])
    verdict = json.loads((ladder_project / "reports" / "verdict.json").read_text())
    failed = {(c["name"], c["arm"]) for c in verdict["checks"] if not c["passed"]}
    assert failed == {("ladder_accuracy", "w-int2"), ("ladder_perplexity", "w-int2")} and not verdict["errors"]
    assert not any("recorded" in n for n in verdict["notices"])  # recorded only on purpose


def test_only_rollbacks_measured_on_evidence_let_a_blocked_run_be_recorded() -> None:
    from specgate.checks import check
    from specgate.checks.verdict import decide_verdict, rolled_back_rungs

    where, ladder = ("p", "w"), {"ladder": True, "step": "kv"}
    rollback = check("ladder_accuracy", where, "drift", False, "ROLL BACK: …", observed=0.4, arm="kv", details=ladder)
    unmeasured = check("ladder_accuracy", where, "drift", False, "BLOCK: no accuracy", arm="kv", details=ladder)
    sla = check("p99_ttft", where, "sla", False, "BLOCK: P99 TTFT 900 ms > 800 ms", observed=900.0)
    assert rolled_back_rungs(decide_verdict("cpu", [rollback], [], [])) == ("p/kv",)
    assert rolled_back_rungs(decide_verdict("cpu", [rollback, sla], [], [])) == ()
    assert rolled_back_rungs(decide_verdict("cpu", [rollback, unmeasured], [], [])) == ()
    assert rolled_back_rungs(decide_verdict("cpu", [rollback], ["engine error"], [])) == ()
    assert rolled_back_rungs(decide_verdict("cpu", [rollback], [], [], not_run=("x",))) == ()
