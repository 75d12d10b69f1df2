"""The second audit's gate-correctness cases, each a scenario that passed (or could never pass) before: a subset
of the catalogue is PARTIAL, an engine that drops traces fails them, an update run does not record a slower build.
(Acceptance, accuracy and the ladder have theirs beside their checks.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from specgate.engines.base import ArmRun, LoadShape, Prompt
from specgate.engines.fake import FakeBehaviour, FakeEngine
from specgate.measure.protocol import accounted

RELAXED = "gate:\n  latency_baseline: optional\n"


def _verdict(root: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((root / "reports" / "verdict.json").read_text())
    return result


def _relaxed(root: Path) -> None:
    """Latency against a one-run history is reported, not gated: the checks of a recorded build then pass."""
    config = root / "specgate.yaml"
    config.write_text(config.read_text().replace("gate:\n", RELAXED))


def test_a_deselected_subset_of_the_catalogue_is_partial_and_fails(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """`-k "not regression"` on a build that passes every selected check: PASS with exit 0 before, now PARTIAL."""
    root = gate_project()
    result = pytester.runpytest("suites", "-k", "not regression")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    verdict = _verdict(root)
    assert verdict["verdict"] == "PARTIAL"
    assert not [c for c in verdict["checks"] if not c["passed"]]  # every check that ran passed
    result.stdout.fnmatch_lines(["VERDICT: PARTIAL*", "NOT RUN (a subset is not a release verdict): *"])


def test_last_failed_after_a_fix_is_partial(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build with a greedy-drift bug fails its drift checks; fixed, `--lf` reruns only those: before, PASS and
    exit 0 for the whole release; now PARTIAL."""
    root = gate_project()
    _relaxed(root)
    assert pytester.runpytest("suites", "--update-baselines").ret == pytest.ExitCode.OK
    conftest = root / "conftest.py"
    healthy = conftest.read_text()
    conftest.write_text(healthy.replace("FakeBehaviour()", "FakeBehaviour(wrong_token_at=3)"))
    assert pytester.runpytest("suites", "-p", "cacheprovider").ret == pytest.ExitCode.TESTS_FAILED
    conftest.write_text(healthy)
    rerun = pytester.runpytest("suites", "-p", "cacheprovider", "--lf")
    assert rerun.ret == pytest.ExitCode.TESTS_FAILED
    assert _verdict(root)["verdict"] == "PARTIAL"


def test_update_baselines_refuses_a_subset(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    root = gate_project()
    result = pytester.runpytest("suites", "-k", "not regression", "--update-baselines")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not (root / "baselines" / "cpu" / "fake-pair").exists()
    result.stdout.fnmatch_lines(["*no baseline was written, because it ran a subset of the applicable checks*"])


DROPPING_CONFTEST = """
import pytest
from specgate.engines.base import ArmRun
from specgate.engines.fake import FakeBehaviour, FakeEngine

SLOW = {"p0", "p1", "p2", "p3"}


class Dropping(FakeEngine):
    def run(self, prompts, arm, *, repetition, load=None):
        result = super().run(prompts, arm, repetition=repetition, load=load)
        if arm != "spec":
            return result
        return ArmRun(arm, tuple(t for t in result.traces if t.prompt_id not in SLOW), result.wall_s)


def pytest_specgate_run(config, run):
    run.engine_factory = lambda name, base: Dropping(FakeBehaviour(), seed=0, per_arm={"spec": FakeBehaviour()})
"""


class DroppingEngine(FakeEngine):
    """Returns no trace for the requests of `dropped` prompts in one arm (as a server that loses slow ones)."""

    def __init__(self, arm: str, dropped: set[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._drop_arm, self._dropped = arm, dropped

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int, load: LoadShape | None = None) -> ArmRun:
        result = super().run(prompts, arm, repetition=repetition, load=load)
        if arm != self._drop_arm:
            return result
        return ArmRun(arm, tuple(t for t in result.traces if t.prompt_id not in self._dropped), result.wall_s)


def test_a_missing_or_extra_trace_is_a_failed_request() -> None:
    prompts = [Prompt(f"p{i}", "text", 8) for i in range(4)]
    engine = DroppingEngine("spec", {"p1"}, behaviour=FakeBehaviour())
    run = accounted(engine.run(prompts, "spec", repetition=0), prompts, 0)
    assert len(run.traces) == 4
    failed = [t for t in run.traces if not t.ok]
    assert [t.prompt_id for t in failed] == ["p1"]
    assert "the engine returned 3 traces for the 4 requests sent" in (failed[0].error or "")
    doubled = ArmRun("spec", (*run.traces[:1], *run.traces[:1]), 1.0)
    marked = accounted(doubled, prompts[:1], 0)
    assert [t.ok for t in marked.traces] == [True, False]


def test_an_engine_that_drops_the_slow_requests_blocks(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """A candidate 50 % slower on 4 of 8 prompts whose engine returns no trace for exactly those: before, judged on
    the 4 survivors, the release passed; now the missing requests fail it."""
    gate_project()
    pytester.makeconftest(DROPPING_CONFTEST)
    result = pytester.runpytest("suites", "-k", "samples")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*arm spec: 8 of 16 requests failed (8× the engine returned 0 traces for the 1 requests sent*"]
    )


REFERENCE_CONFIG = """
pairs:
  fake-pair:
    target: model
    speculation: {method: prompt_lookup, num_tokens: 4}
    default: true
    reference: released
  released:
    target: model
    speculation: {method: prompt_lookup, num_tokens: 4}
workloads:
  docs:
    path: workloads/docs.jsonl
    max_new_tokens: 32
    default: true
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
"""

RUNTIME_CONFTEST = """
import os
import pytest
from specgate.engines.fake import FakeBehaviour, FakeEngine

SLOWER = float(os.environ.get("SLOWER", "1.0"))  # every arm, candidate and reference alike
TORCH = os.environ.get("TORCH", "2.13.0")


def pytest_specgate_run(config, run):
    seed = int(os.environ.get("FAKE_SEED", "0"))
    behaviour = FakeBehaviour(noise_cv=0.01, ttft_ms=300.0 * SLOWER, tpot_ms=20.0 * SLOWER)
    run.engine_factory = lambda name, base: FakeEngine(behaviour, seed=seed, versions={"torch": TORCH})
"""


def _environment_check(root: Path) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in _verdict(root)["checks"] if c["name"] == "regression:environment")
    return found


def test_a_runtime_change_that_slows_both_arms_alike_is_seen(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every arm 30 % slower after a torch bump: beside the reference nothing changed (before: PASS); the released
    arm's runtime differs from the baseline's, so it is compared with this machine's history — none yet: BLOCK with
    how to record it; with three stored runs: REGRESSED."""
    root = gate_project(config=REFERENCE_CONFIG)
    pytester.makeconftest(RUNTIME_CONFTEST)
    monkeypatch.setenv("FAKE_SEED", "0")
    assert pytester.runpytest("suites", "--update-baselines").ret == pytest.ExitCode.OK
    same = pytester.runpytest("suites")
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()
    assert _environment_check(root)["message"].startswith("PASS: the released configuration (ref-spec) runs in")
    monkeypatch.setenv("SLOWER", "1.3")
    monkeypatch.setenv("TORCH", "2.14.0")
    slower = pytester.runpytest("suites")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED
    beside = [c for c in _verdict(root)["checks"] if c["name"].startswith("reference:")]
    assert beside and all(c["passed"] for c in beside)  # reference mode alone cannot see it
    check = _environment_check(root)
    assert not check["passed"] and "torch: 2.13.0 → 2.14.0" in check["message"]
    assert "this machine has 1 of the 3 stored runs" in check["message"]
    assert (
        check["details"]["outcome"] == "NOT RECORDED"
        and "--pair=fake-pair --engine=fake --update-baselines" in (check["message"])
    )
    advice = [r for r in _verdict(root)["recommendations"] if "regression:environment" in r]
    assert advice and advice[0].startswith("no history of the released build on this machine for fake-pair/docs")
    monkeypatch.setenv("SLOWER", "1.0")
    monkeypatch.setenv("TORCH", "2.13.0")
    for seed in (1, 2):
        monkeypatch.setenv("FAKE_SEED", str(seed))
        assert pytester.runpytest("suites", "--update-baselines").ret == pytest.ExitCode.OK
    monkeypatch.setenv("SLOWER", "1.3")
    monkeypatch.setenv("TORCH", "2.14.0")
    monkeypatch.setenv("FAKE_SEED", "3")
    assert pytester.runpytest("suites").ret == pytest.ExitCode.TESTS_FAILED
    check = _environment_check(root)
    assert check["details"]["outcome"] == "BLOCK" and check["message"].startswith("REGRESSED: the runtime changed")


def test_a_merge_request_that_adds_a_pair_records_its_missing_baseline_as_an_artifact(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """No baseline for a new pair: before, every such merge request blocked; with --record-missing-baselines the run
    passes and writes the baseline beside the reports, never over an existing file, never into baselines/."""
    root = gate_project()
    _relaxed(root)
    result = pytester.runpytest("suites", "--record-missing-baselines=reports/new-baselines")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    written = root / "reports" / "new-baselines" / "cpu" / "fake-pair" / "docs.json"
    assert json.loads(written.read_text())["pair"] == "fake-pair"
    assert not (root / "baselines" / "cpu" / "fake-pair").exists()
    message = next(c for c in _verdict(root)["checks"] if c["name"] == "regression:output_drift")["message"]
    assert "no baseline yet (a new pair or workload)" in message and "reports/new-baselines/cpu/fake-pair" in message
    before = written.read_bytes()
    assert pytester.runpytest("suites", "--record-missing-baselines=reports/new-baselines").ret == pytest.ExitCode.OK
    assert written.read_bytes() == before  # never over an existing file
    without = pytester.runpytest("suites")
    assert without.ret == pytest.ExitCode.TESTS_FAILED  # without the option a missing baseline still blocks


NEW_DRAFT_CONFTEST = """
import os
from specgate.engines.fake import FakeBehaviour, FakeEngine

DRAFT = int(os.environ.get("DRAFT", "0"))  # 1: the candidate's new draft accepts other tokens, at the same rate


def pytest_specgate_run(config, run):
    behaviour = FakeBehaviour(noise_cv=0.01)
    candidate = FakeBehaviour(noise_cv=0.01, draft=DRAFT)
    run.engine_factory = lambda name, base: FakeEngine(behaviour, seed=0, per_arm={"spec": candidate})
"""


def test_a_new_draft_of_equal_acceptance_beside_the_reference_passes(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reference mode, a recorded baseline of the released draft, then a candidate with a new draft that accepts as
    often: beside the reference the comparison extends both arms over the acceptance pool and passes. Before, the
    candidate was also compared with the stored baseline on the 8 timed prompts it holds: UNKNOWN → BLOCK in every
    run, with the hint that the pool was spent."""
    config = REFERENCE_CONFIG.replace(
        "    max_new_tokens: 32\n", "    max_new_tokens: 80\n    limit: 8\n    acceptance_prompts: 300\n"
    )
    root = gate_project(config=config, prompts=300)
    pytester.makeconftest(NEW_DRAFT_CONFTEST)
    assert pytester.runpytest("suites", "--update-baselines").ret == pytest.ExitCode.OK
    monkeypatch.setenv("DRAFT", "1")
    result = pytester.runpytest("suites")
    checks = {c["name"]: c for c in _verdict(root)["checks"]}
    beside = checks["reference:acceptance_rate"]
    assert beside["passed"] and beside["n"] > 8, beside["message"]  # decided over the pool, beside the reference
    assert "regression:acceptance_rate" not in checks
    assert result.ret == pytest.ExitCode.OK, [c["message"] for c in checks.values() if not c["passed"]]
