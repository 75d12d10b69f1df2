"""Many runners, one verdict, as the GitLab template runs it: gitlab-ci-local runs `mode: matrix` with two parts (two
hardware profiles of this machine, each on its "runner", with the FakeEngine), then specgate-merge: one verdict,
one note posted to a local stand-in of GitLab's Notes API, one JUnit file with both parts' testcases. A part whose
reports are gone (a lost runner) makes the merge job block, naming it, and the note is updated in place."""

from __future__ import annotations

import json
import secrets
import shutil
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from test_ci_templates import FAKE_CONFIG, Pipeline, make_project
from test_comment import FakeApi, fake_api  # noqa: F401 - the stand-in API and its fixture

from conftest import FAKE_CONFTEST, REPO

PARTS = [
    {"SPECGATE_HARDWARE": "cpu", "SPECGATE_RUNNER_TAG": "runner-a"},
    {"SPECGATE_HARDWARE": "cpu-b", "SPECGATE_RUNNER_TAG": "runner-b"},
]


def _testcases(junit: Path) -> list[str]:
    return [case.get("name", "") for case in ET.parse(junit).getroot().iter("testcase")]


def test_gitlab_matrix_gates_on_two_runners_and_merges_into_one_verdict_and_one_note(
    tmp_path: Path,
    fake_api: Callable[[str, str], FakeApi],  # noqa: F811 - the fixture imported above
) -> None:
    token = secrets.token_hex(8)
    api = fake_api("gitlab", token)
    documents = "\n".join(json.dumps({"id": f"p{i}", "prompt": f"document {i} " * 20}) for i in range(8))
    second = (REPO / "hardware" / "cpu.yaml").read_text().replace("name: cpu\n", "name: cpu-b\n")
    files = {
        "specgate.yaml": textwrap.dedent(FAKE_CONFIG),
        "conftest.py": FAKE_CONFTEST.format(behaviour="", seed=0),
        "workloads/docs.jsonl": documents + "\n",
        "model/config.json": "{}",
        "hardware/cpu-b.yaml": second,
    }
    inputs = {
        "reference": "none",
        "changes": ["specgate.yaml", "conftest.py", "hardware/**/*"],
        "mode": "matrix",
        "matrix": PARTS,
        "expect": "cpu:runner-a cpu-b:runner-b",
        "pytest_args": "--specgate-lock-timeout=600",
    }
    project = make_project(tmp_path / "project", files, inputs)
    manual = [arg for p in PARTS for arg in ("--manual", f"specgate-part-baselines: [{','.join(p.values())}]")]
    recorded = project.run(*manual)  # on main: each part's runner records its own baselines
    assert recorded.ret == 0, recorded.output
    for folder in (project.root / ".gitlab-ci-local" / "artifacts").glob("specgate-part-baselines*"):
        shutil.copytree(folder / "baselines", project.root / "baselines", dirs_exist_ok=True)
    assert {p.name for p in (project.root / "baselines").iterdir()} == {"cpu", "cpu-b"}
    project.commit("baselines recorded by specgate-part-baselines")
    (project.root / "conftest.py").write_text(FAKE_CONFTEST.format(behaviour="", seed=1))
    project.commit("another build of the same configuration", branch="candidate")
    api_env = [
        "GITLAB_CI=true",
        f"CI_API_V4_URL=http://{api.host}/api/v4",
        "CI_PROJECT_ID=42",
        "CI_MERGE_REQUEST_IID=7",
        f"SPECGATE_GITLAB_TOKEN={token}",
    ]
    variables = [arg for value in api_env for arg in ("--variable", value)]
    pipeline = project.run(*variables, merge_request=True)
    assert pipeline.ret == 0, pipeline.output
    assert not pipeline.artifacts("specgate-gate").exists()  # the one-runner job is off in matrix mode
    merged = pipeline.artifacts("specgate-merge") / "reports"
    verdict = json.loads((merged / "verdict.json").read_text())
    assert verdict["verdict"] == "PASS", verdict["errors"]
    labels = [part["label"] for part in verdict["parts"]]
    assert sorted(labels) == ["cpu @ runner-a", "cpu-b @ runner-b"]
    assert {part["document"]["hardware"] for part in verdict["parts"]} == {"cpu", "cpu-b"}
    assert "VERDICT: PASS (2 runs merged" in pipeline.output
    cases = _testcases(merged / "junit.xml")
    for label in labels:
        assert any(name.startswith(f"{label} / fake-pair / docs / ") for name in cases), cases
    assert any((merged / "allure-results").glob("*-result.json"))
    assert len(api.own_notes()) == 1, api.requests  # the parts post nothing; the merge job posts the one note
    note = api.own_notes()[0]["body"]
    assert "**PASS** on 2 runs" in note and "cpu @ runner-a" in note and "cpu-b @ runner-b" in note
    assert [r for r in api.requests if r[0] == "POST"] == [("POST", "/api/v4/projects/42/merge_requests/7/notes")]

    lost = _merge_without(project, "cpu-b", variables)
    assert lost.ret != 0, lost.output
    assert "VERDICT: BLOCK" in lost.output and "PART cpu-b @ runner-b: MISSING" in lost.output
    verdict = json.loads((lost.artifacts("specgate-merge") / "reports" / "verdict.json").read_text())
    assert verdict["verdict"] == "BLOCK"
    assert any(e.startswith("cpu-b @ runner-b: MISSING: expected but never reported") for e in verdict["errors"])
    cases = _testcases(lost.artifacts("specgate-merge") / "reports" / "junit.xml")
    assert "cpu-b @ runner-b / verdict" in cases and any(c.startswith("cpu @ runner-a / fake-pair") for c in cases)
    assert len(api.own_notes()) == 1  # updated in place
    note = api.own_notes()[0]["body"]
    assert "**BLOCK** on 2 runs" in note and "expected but never reported" in note


def _merge_without(project: object, hardware: str, variables: list[str]) -> Pipeline:
    """Run the merge job again, alone, after the reports of one part were lost."""
    from test_ci_templates import Project

    assert isinstance(project, Project)
    artifacts = project.root / ".gitlab-ci-local" / "artifacts"
    for folder in artifacts.glob("specgate-part*"):
        for part in (folder / "specgate-parts").glob(f"{hardware}@*"):
            shutil.rmtree(part)
    shutil.rmtree(artifacts / "specgate-merge", ignore_errors=True)
    return project.run(*variables, "specgate-merge", merge_request=True, keep=True)
