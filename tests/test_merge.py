"""`specgate merge`: the reports of several gate runs (FakeEngine runs of the real suites) → one verdict, one summary,
one JUnit file, one Allure results folder, with every part labelled `hardware @ runner`; BLOCK when a part blocks,
never reports, cannot be read, or measured another commit, each by name."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specgate.cli import main
from specgate.errors import ConfigError
from specgate.reports.merge import Expected, parse_expected


@pytest.fixture
def part(pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """The reports folder of one gate run on runner-a (verdict, JUnit, Allure results, run records)."""
    root = gate_project()
    config = root / "specgate.yaml"  # latency against a one-run history is reported, not gated: the run passes
    config.write_text(config.read_text().replace("gate:\n", "gate:\n  latency_baseline: optional\n"))
    monkeypatch.setenv("SPECGATE_RUNNER", "runner-a")
    recorded = pytester.runpytest("suites", "-p", "no:cacheprovider", "--update-baselines")
    assert recorded.ret == 0, recorded.stdout.str()
    result = pytester.runpytest(
        "suites",
        "-p",
        "no:cacheprovider",
        "--junitxml=reports/junit.xml",
        "--alluredir=reports/allure-results",
    )
    assert result.ret == 0, result.stdout.str()
    return root / "reports"


def _copy(part: Path, to: Path, **changes: Any) -> Path:
    """Another part: the same reports with fields of its verdict document changed (another runner, say)."""
    shutil.copytree(part, to)
    verdict = json.loads((to / "verdict.json").read_text())
    verdict.update(changes)
    (to / "verdict.json").write_text(json.dumps(verdict))
    return to


def _merged(out: Path) -> dict[str, Any]:
    merged: dict[str, Any] = json.loads((out / "verdict.json").read_text())
    return merged


def test_parts_of_two_runners_merge_into_one_labelled_verdict_junit_allure_and_note(
    part: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _copy(part, tmp_path / "jobs" / "b", runner="runner-b")
    shutil.move(part, tmp_path / "jobs" / "a")
    out = tmp_path / "merged"
    assert main(["merge", str(tmp_path / "jobs"), "--out", str(out), "--expect", "cpu:runner-a cpu:runner-b"]) == 0
    printed = capsys.readouterr().out
    assert "VERDICT: PASS (2 runs merged; 28 checks, 0 failed, 0 errors)" in printed
    assert "PART cpu @ runner-a: PASS (14 checks, 0 failed, 0 errors)" in printed
    merged = _merged(out)
    assert merged["verdict"] == "PASS" and merged["hardware"] == "cpu"
    assert [(p["label"], p["verdict"]) for p in merged["parts"]] == [
        ("cpu @ runner-a", "PASS"),
        ("cpu @ runner-b", "PASS"),
    ]
    assert merged["parts"][1]["source"] == str(other)
    cases = [c.get("name", "") for c in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    assert len(cases) == 28 and sum(c.startswith("cpu @ runner-b / fake-pair / docs / ") for c in cases) == 14
    results = [json.loads(p.read_text()) for p in (out / "allure-results").glob("*-result.json")]
    assert len(results) == 28 and len({r["historyId"] for r in results}) == 28  # not retries of one another
    suites = {label["value"] for r in results for label in r["labels"] if label["name"] == "parentSuite"}
    assert suites == {"cpu @ runner-a", "cpu @ runner-b"}
    assert "cpu@runner-b.hardware=cpu" in (out / "allure-results" / "environment.properties").read_text()
    assert (out / "runs" / "cpu@runner-a" / "cpu" / "fake-pair" / "docs.json").is_file()
    summary = (out / "summary.md").read_text()
    assert "**PASS** on 2 runs" in summary and "| cpu @ runner-b | cpu | runner-b | ✅ PASS | 0 of 14 | 0 |" in summary
    assert main(["verdict", "--verdict", str(out / "verdict.json"), "--pytest-exit", "0"]) == 0
    capsys.readouterr()
    assert main(["comment", "--verdict", str(out / "verdict.json"), "--platform", "gitlab", "--dry-run"]) == 0
    note = capsys.readouterr().out
    assert "### Parts" in note and "<summary><b>cpu @ runner-a</b>: PASS</summary>" in note
    assert main(["report", "--verdict", str(out / "verdict.json"), "--results", str(tmp_path / "none")]) == 0
    assert (out / "summary.md").read_text() == summary  # every report renders from the merged document
    prometheus = (out / "metrics.prom").read_text()
    assert 'specgate_check_passed{category="sla",check="speedup",hardware="cpu",pair="fake-pair"' in prometheus
    benchmarks = json.loads((out / "benchmark.json").read_text())["benchmarks"]
    assert len(benchmarks) == 2 * len(json.loads((other / "benchmark.json").read_text())["benchmarks"])


def test_a_blocked_lost_unreadable_or_other_commit_part_blocks_the_merge_by_name(
    part: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = _copy(part, tmp_path / "b", runner="runner-b", verdict="BLOCK", errors=["the engine died"])
    out = tmp_path / "merged"

    def merge(*args: str) -> dict[str, Any]:
        shutil.rmtree(out, ignore_errors=True)
        assert main(["merge", *args, "--out", str(out)]) == 0
        return _merged(out)

    merged = merge(str(part), str(blocked))
    assert merged["verdict"] == "BLOCK" and merged["errors"] == ["cpu @ runner-b: the engine died"]
    assert main(["verdict", "--verdict", str(out / "verdict.json")]) == 1

    merged = merge(str(part), "--expect", "cpu:runner-a", "--expect", "a800:gpu-a800")
    assert merged["verdict"] == "BLOCK"
    assert merged["errors"][0].startswith("a800 @ gpu-a800: MISSING: expected but never reported")
    cases = [c for c in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    lost = next(c for c in cases if c.get("name") == "a800 @ gpu-a800 / verdict")
    failure = lost.find("failure")
    assert failure is not None and "MISSING: expected but never reported" in failure.get("message", "")
    assert (
        "| a800 @ gpu-a800 | a800 | gpu-a800 | ❓ MISSING | – | – | expected but never"
        in (out / "summary.md").read_text()
    )

    corrupt = _copy(part, tmp_path / "corrupt")
    (corrupt / "verdict.json").write_text('{"schema_version": 2, "verdict": ')
    (tmp_path / "empty").mkdir()
    merged = merge(str(part), str(corrupt), str(tmp_path / "empty"))
    assert [p["verdict"] for p in merged["parts"]] == ["PASS", "UNREADABLE", "MISSING"]
    assert any(e.startswith("corrupt: UNREADABLE: ") and "invalid JSON" in e for e in merged["errors"])
    assert any(e.startswith("empty: MISSING: no verdict.json under ") for e in merged["errors"])

    commit = json.loads((part / "verdict.json").read_text())["commit"]
    other = _copy(part, tmp_path / "other", runner="runner-c", commit={**commit, "id": "f" * 40})
    merged = merge(str(part), str(other))
    assert merged["verdict"] == "BLOCK"
    assert any("the parts measured different commits" in e and "ffffffffffff" in e for e in merged["errors"])

    merged = merge(str(tmp_path / "nowhere"))
    assert merged["verdict"] == "BLOCK" and "does not exist" in merged["errors"][0]
    capsys.readouterr()


def test_expected_parts_read_from_lists_and_ci_matrices() -> None:
    assert parse_expected(["cpu:runner-a, h200", "a800:gpu"]) == [
        Expected("cpu", "runner-a"),
        Expected("h200", None),
        Expected("a800", "gpu"),
    ]
    gitlab = '[{"SPECGATE_HARDWARE": "cpu", "SPECGATE_RUNNER_TAG": "specgate-cpu"}]'
    github = '[{"hardware": "h200", "runs-on": "gpu-h200"}, "a800"]'
    assert parse_expected([gitlab, github]) == [
        Expected("cpu", "specgate-cpu"),
        Expected("h200", "gpu-h200"),
        Expected("a800", None),
    ]
    assert parse_expected([""]) == []
    with pytest.raises(ConfigError, match="names no hardware"):
        parse_expected(['[{"runs-on": "ubuntu-latest"}]'])
    with pytest.raises(ConfigError, match="expected HARDWARE or HARDWARE:RUNNER"):
        parse_expected([":runner"])
