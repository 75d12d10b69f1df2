"""Fixtures for specgate's own tests. `gate_project` lays out a small gate project in a pytester folder."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import scipy.stats  # noqa: F401 - imported once here: pytester's in-process runs drop modules imported inside them,
import yaml  # noqa: F401

# and extension modules (numpy's, scipy's, yaml's, torch's) cannot be loaded twice in one process: the second load
# crashes the interpreter; nor can jsonschema's (rpds, a Rust extension), which the schema check below uses inside
# those runs. The plugin imports torch only when a run needs it (the CPU backend's check does), so it is imported
# here when installed.
with contextlib.suppress(ImportError):  # a served-only install: the runs that would import it are skipped
    import torch  # noqa: F401


pytest_plugins = ["pytester"]


REPO = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def needs(available: bool, what: str, install: str) -> None:
    """A dependency a test needs: skipped when absent on a developer's machine; in CI (`CI=true`), which installs
    every one of them, an absent dependency is a broken install and fails the test."""
    if available:
        return
    message = f"{what} is missing: {install}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: CI installs it, so its absence is a broken install)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def subset_passed(result: pytest.RunResult, root: Path) -> dict[str, Any]:
    """A run of a subset of the suites whose every check passed: PARTIAL, failing like a BLOCK (a subset is not a
    release verdict), with no failed check and no error. Returns the verdict document."""
    verdict: dict[str, Any] = json.loads((root / "reports" / "verdict.json").read_text())
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert verdict["verdict"] == "PARTIAL" and verdict["not_run"], verdict["verdict"]
    assert not verdict["failed_checks"] and not verdict["errors"], (verdict["failed_checks"], verdict["errors"])
    return verdict


def needs_module(name: str, install: str) -> Any:
    """Import a module a test needs (see `needs`)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        needs(False, f"{name} ({exc})", install)


@pytest.fixture(scope="session", autouse=True)
def machine_lock_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Gate sessions of these tests take a lock file of their own, not this machine's (a real gate run measuring
    on it would hold them up; they measure nothing real)."""
    path = tmp_path_factory.mktemp("machine-lock") / "machine.lock"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECGATE_MACHINE_LOCK", str(path))
        yield path


def json_problems(text: str, schema_name: str) -> list[str]:
    """Why `text` is not strict JSON valid against a schema specgate ships (empty when it is)."""
    from specgate.reports.schemas import shipped

    def reject(constant: str) -> None:
        raise ValueError(f"not strict JSON: bare {constant}")

    try:
        data = json.loads(text, parse_constant=reject)
    except ValueError as exc:
        return [str(exc)]
    validator = jsonschema.Draft202012Validator(shipped(schema_name))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"[:300] for e in validator.iter_errors(data)]


@pytest.fixture(autouse=True)
def written_json_is_strict_and_valid(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every verdict document and run record (baseline) a test makes specgate write is strict JSON and valid against
    the shipped schema: checked as it is written, in this process and in pytester's in-process runs."""
    from specgate.reports import document, schemas
    from specgate.store import baselines

    problems: list[str] = []

    def wrap(module: Any, name: str, schema_name: str) -> None:
        real = getattr(module, name)

        def checked(value: Any) -> str:
            text: str = real(value)
            problems.extend(f"{schema_name}: {p}" for p in json_problems(text, schema_name))
            return text

        monkeypatch.setattr(module, name, checked)

    wrap(document, "document_json", schemas.VERDICT)
    wrap(baselines, "dumps_readable", schemas.RUN_RECORD)
    yield
    assert not problems, problems[:5]


FAKE_CONFTEST = """
import os
import pytest
from specgate.engines.fake import FakeBehaviour, FakeEngine

BEHAVIOUR = FakeBehaviour({behaviour})


def pytest_specgate_run(config, run):
    seed = int(os.environ.get("FAKE_SEED", {seed}))  # another run of the same build: other timing noise
    run.engine_factory = lambda name, base: FakeEngine(BEHAVIOUR, seed=seed)
"""

CONFIG = """
pairs:
  fake-pair:
    target: {target}
    speculation: {{method: prompt_lookup, num_tokens: 4}}
    default: true
  other-pair:
    target: {target}
    speculation: {{method: prompt_lookup, num_tokens: 2}}
workloads:
  docs:
    path: workloads/docs.jsonl
    max_new_tokens: 32
    default: true
  qa:
    path: workloads/docs.jsonl
    max_new_tokens: 16
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
"""


@pytest.fixture
def gate_project(pytester: pytest.Pytester) -> Callable[..., Path]:
    """Lay out a gate project (config, profiles, a workload, the real suites) driven by the FakeEngine."""

    def make(behaviour: str = "", seed: int = 0, prompts: int = 8, config: str | None = None) -> Path:
        root = pytester.path
        shutil.copytree(REPO / "hardware", root / "hardware")
        shutil.copytree(REPO / "suites", root / "suites", ignore=shutil.ignore_patterns("__pycache__"))
        (root / "workloads").mkdir()
        lines = [json.dumps({"id": f"p{i}", "prompt": f"document {i} " * 20}) for i in range(prompts)]
        (root / "workloads" / "docs.jsonl").write_text("\n".join(lines) + "\n")
        (root / "model").mkdir()
        (root / "model" / "config.json").write_text("{}")
        text = config if config is not None else CONFIG.format(target="model")
        (root / "specgate.yaml").write_text(textwrap.dedent(text))
        pytester.makeconftest(FAKE_CONFTEST.format(behaviour=behaviour, seed=seed))
        pytester.makeini("[pytest]\nfilterwarnings =\n    ignore::pytest.PytestAssertRewriteWarning\n")
        return root

    return make


def evaluation_of(verdict: dict[str, Any], pair: str, workload: str) -> dict[str, Any]:
    """The record of one pair × workload in a verdict document (as JSON)."""
    found: dict[str, Any] = next(e for e in verdict["evaluations"] if (e["pair"], e["workload"]) == (pair, workload))
    return found


def arm_summaries(verdict: dict[str, Any], pair: str, workload: str) -> dict[str, dict[str, Any]]:
    """arm name → its summary (ArmSummary as JSON) in a verdict document."""
    return {arm["name"]: arm["summary"] for arm in evaluation_of(verdict, pair, workload)["arms"]}


def measure_fake(
    engine: Any, prompts: Any, policy: Any, *, pair: str = "fake", workload: str = "w", gamma: int = 4
) -> Any:
    """Measure the default ar/spec plan (prompt lookup, γ=`gamma`) on a test engine."""
    from specgate.config import Speculation
    from specgate.measure.protocol import measure_plan
    from specgate.plan import two_arm_plan

    plan = two_arm_plan(pair, workload, Speculation("prompt_lookup", gamma))
    if hasattr(engine, "_arms"):
        engine._arms = {arm.name: arm for arm in plan.arms}
    return measure_plan(engine, plan, prompts, policy, hardware="cpu")


def evaluate_fake(engine: Any, prompts: Any, policy: Any, *, task: str = "generate", **kwargs: Any) -> Any:
    """`measure_fake`, summarized for the checks."""
    from specgate.evaluation import evaluate

    return evaluate(measure_fake(engine, prompts, policy, **kwargs), task=task, seed=policy.seed)
