"""Task accuracy in the gate, on the FakeEngine: stored in the baseline, compared between arms and with the baseline."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from specgate.store.baselines import load_baseline

CONFIG = """
pairs:
  fake-pair:
    target: model
    speculation: {{method: prompt_lookup, num_tokens: 4}}
workloads:
  math:
    path: workloads/math.jsonl
    task: numeric
    max_new_tokens: {tokens}
"""


def fake_answer(prompt_id: str, position: int) -> int:
    """The FakeEngine's token at a position (see `FakeEngine._token`): its output text is the token ids."""
    return (zlib.crc32(prompt_id.encode()) * 31 + position * 7) % 1000 + 1


def math_project(gate_project: Callable[..., Path], tokens: int, answer_at: int) -> Path:
    root = gate_project(config=CONFIG.format(tokens=tokens))
    lines = [
        json.dumps({"id": f"q{i}", "prompt": f"question {i}", "reference": str(fake_answer(f"q{i}", answer_at))})
        for i in range(8)
    ]
    (root / "workloads" / "math.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_accuracy_stored_and_shorter_output_blocks(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = math_project(gate_project, tokens=32, answer_at=31)  # the answer is the last number of the output
    first = pytester.runpytest("suites", "--update-baselines")
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()
    stored = load_baseline(root / "baselines/cpu/fake-pair/math.json")
    assert stored.record.accuracy["spec"].accuracy == 1.0
    assert stored.record.accuracy["ar"].n == 8
    (root / "specgate.yaml").write_text(CONFIG.format(tokens=16))  # a shorter output cuts the answer off
    result = pytester.runpytest("suites", "-k", "task_accuracy")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*numeric accuracy 0.0% vs baseline 100.0%: drop 100.0 pts > max 3.0 pts (n=8*"])


def test_accuracy_lost_by_speculation_blocks_between_arms(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = math_project(gate_project, tokens=32, answer_at=31)
    conftest = root / "conftest.py"
    conftest.write_text(conftest.read_text().replace("FakeBehaviour()", "FakeBehaviour(wrong_token_at=31)"))
    result = pytester.runpytest("suites/test_drift.py", "-k", "task_accuracy")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*spec vs ar: REGRESSED: numeric accuracy 0.0% vs baseline 100.0%*McNemar exact p=*"])


def test_accuracy_checks_are_deselected_on_workloads_without_references(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    gate_project()
    result = pytester.runpytest("suites", "--collect-only", "-q", "-k", "task_accuracy")
    result.stdout.fnmatch_lines(["*deselected*"])
    assert not [line for line in result.outlines if "task_accuracy" in line and "::" in line]


def test_accuracy_probe_without_speed_checks(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    math_project(gate_project, tokens=32, answer_at=31)
    config = pytester.path / "specgate.yaml"
    config.write_text(config.read_text().replace("task: numeric", "task: numeric\n    gate_speed: false"))
    result = pytester.runpytest("suites", "--collect-only", "-q")
    names = [line.split("::")[1].split("[")[0] for line in result.outlines if "::" in line]
    assert set(names) == {
        "test_greedy_identity",
        "test_task_accuracy_same_in_both_arms",
        "test_enough_samples",
        "test_outputs_match_baseline",
        "test_task_accuracy_not_lower",
    }
