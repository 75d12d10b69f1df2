"""Verdict, exit status and fail-closed behaviour of a whole gate run, on the FakeEngine (seeded, simulated)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import subset_passed

SLA_SUITES = ("suites/test_sla.py", "suites/test_drift.py")


def _verdict(root: Path) -> dict[str, object]:
    return json.loads((root / "reports" / "verdict.json").read_text())


def test_healthy_pair_passes_every_check_it_runs_and_the_subset_is_partial(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """The SLA and drift suites alone: every check passes, and the run is PARTIAL (the regression checks of the
    catalogue did not run), failing like a BLOCK. A whole run that passes exits 0 (tests/test_baselines.py)."""
    root = gate_project()
    result = pytester.runpytest(*SLA_SUITES)
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "*specgate verdict*",
            "VERDICT: PARTIAL (hardware cpu; 6 checks, 0 failed, 0 errors; * applicable checks not run)",
            "NOT RUN (a subset is not a release verdict): fake-pair/docs/no_regression*",
            "fake-pair / docs: S *× (95% CI *); α *, τ *",
        ]
    )
    verdict = subset_passed(result, root)
    assert {c["name"] for c in verdict["checks"]} == {  # type: ignore[union-attr]
        "samples",
        "p99_ttft",
        "decode_rate",
        "speedup",
        "acceptance_rate",
        "greedy_identity",
    }
    (evaluation,) = verdict["evaluations"]  # type: ignore[misc]
    arms = {arm["name"]: arm for arm in evaluation["arms"]}
    assert set(arms) == {"ar", "spec"}
    assert arms["ar"]["summary"]["n_requests"] == 16


def test_slow_speculation_blocks_with_evidence_and_turn_off_advice(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project(behaviour="slowdown=3.0, acceptance=0.2")
    result = pytester.runpytest(*SLA_SUITES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "VERDICT: BLOCK*",
            "FAILED fake-pair/docs/speedup: speedup S 0.*× < 1.15× (spec vs ar, n=16 paired runs, 95% CI *",
            "*RECOMMENDATION: turn speculation off for pair 'fake-pair' on hardware 'cpu' "
            "(S 0.*× < 1.15×, α 0.* < 0.50)*",
        ]
    )
    verdict = _verdict(root)
    assert verdict["verdict"] == "BLOCK"
    assert "fake-pair/docs/speedup" in verdict["failed_checks"]  # type: ignore[operator]
    assert "fake-pair/docs/acceptance_rate" in verdict["failed_checks"]  # type: ignore[operator]
    assert verdict["recommendations"]


def test_acceptance_below_the_floor_with_a_paying_speedup_says_what_rolling_back_costs(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """A long draft can fall under the α floor while speculation still pays: the advice keeps the rollback rule but
    never claims that speculation does not pay."""
    gate_project(behaviour="acceptance=0.55, draft_cost=0.0")
    result = pytester.runpytest(*SLA_SUITES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "FAILED fake-pair/docs/acceptance_rate: acceptance rate α 0.* < floor 0.50*",
            "*RECOMMENDATION: turn speculation off for pair 'fake-pair' on hardware 'cpu' (α 0.* < 0.50, the "
            "rollback floor), although it still pays here (S *× ≥ 1.15×): *a shorter draft (num_tokens)*",
        ]
    )
    assert "speculation does not pay here" not in result.stdout.str()


def test_wrong_token_in_speculative_path_is_caught_at_its_position(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    gate_project(behaviour="wrong_token_at=5")
    result = pytester.runpytest(*SLA_SUITES, "-k", "greedy_identity")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*greedy drift 100.0% > 0.3%: 16/16 requests differ; first: prompt 'p*' rep * at token 5*"]
    )


def test_engine_failure_blocks_never_passes(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    root = gate_project(behaviour="fail_arm='spec'")
    result = pytester.runpytest(*SLA_SUITES)
    assert result.ret != pytest.ExitCode.OK
    verdict = _verdict(root)
    assert verdict["verdict"] == "BLOCK"
    result.stdout.fnmatch_lines(["*BLOCK: cannot measure reliably: arm spec: 16 of 16 requests failed*"])


def test_too_few_samples_is_a_usage_error_before_anything_runs(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    gate_project(prompts=1)
    result = pytester.runpytest(*SLA_SUITES, "-k", "samples")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*workload 'docs' (workloads/docs.jsonl): 1 prompt(s) × 2 round(s) = 2 requests per arm, the gate needs "
            "gate.min_samples=4*"
        ]
    )


def test_failed_requests_leave_too_few_samples_and_block(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project(prompts=2)
    result = pytester.runpytest(*SLA_SUITES, "-k", "samples")
    subset_passed(result, root)  # 2 prompts × 2 rounds = 4 requests per arm: enough
    conftest = root / "conftest.py"
    conftest.write_text(conftest.read_text().replace("FakeBehaviour()", "FakeBehaviour(fail_arm='ar')"))
    result = pytester.runpytest(*SLA_SUITES, "-k", "samples")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*arm ar: 4 of 4 requests failed*arm ar: 0 completed requests < 4 required*"])
    assert _verdict(root)["verdict"] == "BLOCK"


def test_a_check_that_crashes_blocks_with_the_reason(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    (root / "suites" / "test_crash.py").write_text(
        "def test_crash(evaluation, gate_check):\n    raise RuntimeError('probe exploded')\n"
    )
    result = pytester.runpytest("suites/test_crash.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    verdict = _verdict(root)
    assert verdict["verdict"] == "BLOCK"
    assert any("probe exploded" in e for e in verdict["errors"])  # type: ignore[union-attr]


def test_skipped_check_is_not_a_pass(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    root = gate_project()
    (root / "suites" / "test_skip.py").write_text(
        "import pytest\n\ndef test_skip(evaluation, gate_check):\n    pytest.skip('not measured')\n"
    )
    result = pytester.runpytest("suites/test_skip.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert _verdict(root)["verdict"] == "BLOCK"


def test_deselecting_every_check_blocks(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    root = gate_project()
    result = pytester.runpytest(*SLA_SUITES, "-k", "no_such_check")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # not pytest's "no tests collected" (5), which CI may ignore
    verdict = _verdict(root)
    assert verdict["verdict"] == "BLOCK"
    assert any("no gate check ran" in e for e in verdict["errors"])  # type: ignore[union-attr]


def test_an_interrupted_session_is_not_a_pass(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    """Ctrl-C after some checks passed: the verdict file says BLOCK (a partial run), never PASS."""
    root = gate_project()
    suite = root / "suites" / "test_zz_interrupt.py"
    suite.write_text(
        "import pytest\n\n"
        "@pytest.mark.specgate_check('tpot_slo')\n"
        "def test_interrupt(evaluation, gate_check):\n"
        "    raise KeyboardInterrupt\n"
    )
    result = pytester.runpytest(*SLA_SUITES, str(suite))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    verdict = _verdict(root)
    assert verdict["verdict"] == "BLOCK"
    assert any("interrupted" in e for e in verdict["errors"])  # type: ignore[union-attr]


def test_a_run_stopped_early_by_maxfail_is_not_a_pass(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project("wrong_token_at=5")
    result = pytester.runpytest(*reversed(SLA_SUITES), "--maxfail=1")  # the drift check fails first
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    verdict = _verdict(root)
    assert verdict["verdict"] == "BLOCK"
    assert any("did not run to the end" in e for e in verdict["errors"])  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("behaviour", "args", "advice"),
    [
        (
            "slowdown=1.3",
            ("--reference=other-pair", "suites/test_regression.py"),
            "latency regression on fake-pair/docs: *",
        ),
        ("wrong_token_at=5", SLA_SUITES, "outputs changed on fake-pair/docs (greedy drift 100.0% * do not release"),
        ("ttft_ms=4000", SLA_SUITES, "SLA breached on fake-pair/docs: p99_ttft *vs 2,500 ms*rollback rule*"),
        ("fail_arm='spec'", SLA_SUITES, "the measurement of fake-pair/docs is not usable (*16 of 16 requests failed*"),
    ],
    ids=["latency-regression", "drift", "sla", "failed-requests"],
)
def test_each_kind_of_failure_gets_its_own_advice(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], behaviour: str, args: tuple[str, ...], advice: str
) -> None:
    root = gate_project(behaviour=behaviour)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"RECOMMENDATION: {advice}"])
    recommendations = _verdict(root)["recommendations"]
    assert not any("fix the failed checks" in r for r in recommendations)  # type: ignore[union-attr]
    if "fail_arm" in behaviour:  # the other checks failed because of the broken measurement: no advice of theirs
        assert not any(r.startswith(("outputs changed", "SLA breached")) for r in recommendations)  # type: ignore[union-attr]


def test_an_infrastructure_error_says_nothing_unmeasured_passes(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    conftest = root / "conftest.py"
    conftest.write_text(conftest.read_text().replace("FakeEngine(BEHAVIOUR, seed=seed)", "1 / 0"))
    result = pytester.runpytest(*SLA_SUITES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["RECOMMENDATION: the run could not measure everything (*ZeroDivisionError*"])
    assert _verdict(root)["verdict"] == "BLOCK"
