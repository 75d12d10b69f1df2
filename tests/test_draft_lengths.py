"""Acceptance across draft lengths: a candidate that drafts more tokens per step lowers the acceptance rate α =
accepted / drafted by construction, even when each position accepts as often as before. Beside a reference of
another draft length, acceptance is compared on the positions both draft; equal lengths keep α's own comparison."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specgate.comparison import acceptance_drop
from specgate.engines.base import ArmRun, RequestTrace
from specgate.measure.samples import ArmSamples, arm_samples, at_least

CONFIG = """
pairs:
  fake-pair:
    target: model
    speculation: {{method: prompt_lookup, num_tokens: {candidate}}}
    default: true
    reference: released
  released:
    target: model
    speculation: {{method: prompt_lookup, num_tokens: 3}}
workloads:
  docs:
    path: workloads/docs.jsonl
    max_new_tokens: 80
    limit: 8
    acceptance_prompts: 300
    default: true
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
  latency_baseline: optional
"""

CONFTEST = """
import os
from specgate.engines.fake import FakeBehaviour, FakeEngine


def pytest_specgate_run(config, run):
    released = FakeBehaviour(noise_cv=0.01, acceptance=0.7)
    candidate = FakeBehaviour(noise_cv=0.01, acceptance=float(os.environ.get("ACCEPTANCE", "0.7")))
    run.engine_factory = lambda name, base: FakeEngine(released, seed=0, per_arm={"spec": candidate})
"""


def _acceptance(root: Path) -> dict[str, Any]:
    checks = json.loads((root / "reports" / "verdict.json").read_text())["checks"]
    found: dict[str, Any] = next(c for c in checks if c["name"] == "reference:acceptance_rate")
    return found


def _arm(steps: list[tuple[int, int]], prompts: int = 6) -> ArmSamples:
    """An arm whose every prompt ran the same verification steps (drafted, accepted)."""
    traces = [
        RequestTrace(
            f"p{i}",
            "spec",
            0,
            0.0,
            (0.1, 0.2),
            (1, 1),
            (1, 2),
            "",
            4,
            drafted=tuple(d for d, _ in steps),
            accepted=tuple(a for _, a in steps),
        )
        for i in range(prompts)
    ]
    return arm_samples([ArmRun("spec", traces, 1.0)])


def test_at_least_counts_the_steps_reaching_each_position() -> None:
    assert at_least((3, 0, 2)) == (2, 2, 1)
    assert at_least(()) == ()


def test_the_rate_on_shared_positions_caps_each_step() -> None:
    # γ 3: accepted 2 of 3, 3 of 3; γ 6: 2 of 6 and 5 of 6 — the same first three positions
    short, long = _arm([(3, 2), (3, 3)]), _arm([(6, 2), (6, 5)])
    plain = acceptance_drop(short, long)
    assert plain.before == pytest.approx(5 / 6) and plain.after == pytest.approx(7 / 12)  # α drops 30 %
    shared = acceptance_drop(short, long, positions=3)
    assert shared.before == shared.after == pytest.approx(5 / 6) and shared.estimate == pytest.approx(0.0)
    assert "first 3 draft position(s)" in shared.how


def test_totals_alone_cannot_be_compared_position_by_position() -> None:
    arm = _arm([(3, 2)])
    totals = ArmSamples(
        tuple(dataclasses.replace(s, drafted_at=(), accepted_at=()) for s in arm.samples), arm.run_walls_s, arm.run_keys
    )
    with pytest.raises(ValueError, match="only total drafted and accepted tokens"):
        acceptance_drop(totals, arm, positions=3)


def test_a_longer_draft_that_accepts_as_often_per_position_passes_beside_the_reference(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """γ 3 → 6 with the same per-position acceptance: α itself falls (about 0.50 → 0.35), the comparison on the
    three positions both draft passes and says so. Before, α's comparison blocked it."""
    root = gate_project(config=CONFIG.format(candidate=6), prompts=300)
    pytester.makeconftest(CONFTEST)
    pytester.runpytest("suites", "-k", "acceptance")
    check = _acceptance(root)
    assert check["passed"], check["message"]
    assert "per-position acceptance on the 3 draft position(s) both draft (γ 3 → 6" in check["message"]
    runs = json.loads((root / "reports" / "verdict.json").read_text())["evaluations"][0]["arms"]
    rates = {arm["name"]: arm["summary"]["acceptance"]["rate"] for arm in runs if arm["summary"]["acceptance"]}
    assert rates["spec"] < 0.8 * rates["ref-spec"]  # the plain rate α would have read a drop of more than 20 %


def test_a_longer_draft_that_agrees_less_still_blocks(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project(config=CONFIG.format(candidate=6), prompts=300)
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv("ACCEPTANCE", "0.5")
    pytester.runpytest("suites", "-k", "acceptance")
    check = _acceptance(root)
    assert not check["passed"] and check["message"].startswith("REGRESSED: per-position acceptance"), check["message"]


def test_equal_draft_lengths_keep_the_plain_rate(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project(config=CONFIG.format(candidate=3), prompts=300)
    pytester.makeconftest(CONFTEST)
    pytester.runpytest("suites", "-k", "acceptance")
    check = _acceptance(root)
    assert check["passed"] and check["message"].startswith("PASS: acceptance rate"), check["message"]
