"""The architecture's promises: arms are data (a third arm needs no code), the gate and `specgate baseline diff`
decide alike, every report is rebuilt from `verdict.json`, the gate runs without pytest as the README shows, and the
package has no import cycle and no oversized module."""

from __future__ import annotations

import ast
import json
import re
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import CONFIG, evaluation_of, subset_passed
from specgate.cli import main

REPO = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 450

THIRD_ARM = CONFIG.replace(
    "    speculation: {{method: prompt_lookup, num_tokens: 4}}\n    default: true\n",
    "    speculation: {{method: prompt_lookup, num_tokens: 4}}\n    default: true\n"
    "    arms:\n      spec-g2: {{speculation: {{method: prompt_lookup, num_tokens: 2}}}}\n",
).format(target="model")


def test_a_third_arm_declared_in_the_config_is_measured_checked_and_reported(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project(config=THIRD_ARM)
    result = pytester.runpytest("suites/test_sla.py", "suites/test_drift.py", "--alluredir=allure", "-v")
    subset_passed(result, root)
    result.stdout.fnmatch_lines(
        ["*test_speedup?fake-pair-docs-spec-g2? PASSED*", "*  arm spec-g2 (prompt_lookup γ=2, float32): S *"]
    )
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    arms = {arm["name"]: arm for arm in evaluation_of(verdict, "fake-pair", "docs")["arms"]}
    assert list(arms) == ["ar", "spec", "spec-g2"]
    assert arms["spec-g2"]["speedup"]["arm"] == "spec-g2" and arms["spec-g2"]["speedup"]["gamma"] == 2
    assert max(len(d) for d in _drafts(arms["spec-g2"])) <= 2  # the fake drafts the arm's own γ
    keyed = {c["name"] + "/" + str(c["arm"]) for c in verdict["checks"]}
    assert {"speedup/spec-g2", "greedy_identity/spec-g2", "p99_ttft/spec-g2", "speedup/spec"} <= keyed
    summary = (root / "reports" / "summary.md").read_text()
    assert "| fake-pair | docs | spec-g2 |" in summary
    allure = [json.loads(p.read_text()) for p in (root / "allure").glob("*-result.json")]
    assert "test_speedup[fake-pair-docs-spec-g2]" in {r["name"] for r in allure}


def _drafts(arm: dict[str, Any]) -> list[list[int]]:
    acceptance = arm["summary"]["acceptance"]
    return [acceptance["per_position"]]


def test_specgate_report_rebuilds_summary_metrics_and_terminal_from_verdict_json(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = gate_project(behaviour="slowdown=3.0")
    result = pytester.runpytest("suites/test_sla.py", "suites/test_drift.py")
    reports = root / "reports"
    written = {name: (reports / name).read_text() for name in ("summary.md", "metrics.prom", "verdict.json")}
    terminal = result.outlines[result.outlines.index(next(x for x in result.outlines if "specgate verdict" in x)) + 1 :]
    for name in ("summary.md", "metrics.prom"):
        (reports / name).unlink()
    capsys.readouterr()
    assert main(["report", "--verdict", str(reports / "verdict.json"), "--results", str(root / "none")]) == 0
    printed = capsys.readouterr().out.splitlines()
    for name, text in written.items():
        assert (reports / name).read_text() == text, name
    verdict_lines = printed[: printed.index(next(x for x in printed if x.startswith("verdict file:"))) + 1]
    assert verdict_lines == terminal[: len(verdict_lines)]
    assert verdict_lines[0].startswith("VERDICT: BLOCK") and any(x.startswith("FAILED ") for x in verdict_lines)


def test_the_gate_and_baseline_diff_decide_alike_on_the_same_files(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = gate_project()
    assert pytester.runpytest("suites", "--update-baselines").ret == pytest.ExitCode.OK
    conftest = root / "conftest.py"
    conftest.write_text(conftest.read_text().replace("FakeBehaviour()", "FakeBehaviour(slowdown=1.3)"))
    pytester.runpytest("suites/test_regression.py")
    gate = {
        c["name"]: c["passed"]
        for c in json.loads((root / "reports" / "verdict.json").read_text())["checks"]
        if c["name"].startswith("regression:")
    }
    assert not all(gate.values())  # the slower build blocks somewhere …
    assert any(gate.values())  # … and passes elsewhere: a real mix to agree on
    baseline = root / "baselines" / "cpu" / "fake-pair" / "docs.json"
    run = root / "reports" / "runs" / "cpu" / "fake-pair" / "docs.json"
    capsys.readouterr()
    status = main(["baseline", "diff", str(baseline), str(run)])
    lines = capsys.readouterr().out.splitlines()
    diff = {m.group(2): m.group(1) == "PASS" for line in lines if (m := re.match(r"\s+(PASS|FAIL) (\S+):", line))}
    assert diff == gate
    assert status == 1


EXAMPLE = re.compile(r"<!-- python example -->\n```python\n(.*?)```", re.S)


def test_the_documented_python_example_runs_the_gate_without_pytest(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    gate_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from specgate.engines.fake import FakeEngine

    example = EXAMPLE.search((REPO / "docs" / "ci.md").read_text(encoding="utf-8"))
    assert example is not None, "docs/ci.md lost its python example"
    root = gate_project()
    (root / "conftest.py").unlink()  # no pytest here: the example drives the gate itself
    monkeypatch.chdir(root)
    monkeypatch.setattr("specgate.engines.create_engine", lambda name, base: FakeEngine())  # no real model in CI
    exec(compile(example.group(1), "docs/ci.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "PASS" in printed or "BLOCK" in printed
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    assert {c["name"] for c in verdict["checks"]} >= {"samples", "speedup", "greedy_identity"}
    assert (root / "reports" / "summary.md").is_file()


def _imports(path: Path, package: Path) -> set[str]:
    module = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
    base = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            parent = base.split(".")[: len(base.split(".")) - node.level + 1] if node.level else []
            root = ".".join([*parent, node.module] if node.module else parent)
            found.update({root, *(f"{root}.{a.name}" for a in node.names)})
    return found


def find_cycles(package: Path) -> list[list[str]]:
    """Import cycles among the modules of `package` (lazy and type-checking imports count: they tie modules all
    the same)."""
    modules = {
        ".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in package.rglob("*.py")
    }
    graph = {name: {t for t in _imports(p, package) if t in modules and t != name} for name, p in modules.items()}
    cycles: list[list[str]] = []
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> None:
        if node in path:
            cycles.append([*path[path.index(node) :], node])
            return
        if node in done:
            return
        done.add(node)
        for nxt in sorted(graph[node]):
            walk(nxt, [*path, node])

    for name in sorted(graph):
        walk(name, [])
    return cycles


def test_the_package_has_no_import_cycle_and_no_oversized_module() -> None:
    package = REPO / "specgate"
    cycles = find_cycles(package)
    assert not cycles, [" -> ".join(c) for c in cycles]
    sizes = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines()) for p in package.rglob("*.py")}
    assert not {k: v for k, v in sizes.items() if v > MAX_MODULE_LINES}


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import x\n")
    (package / "b.py").write_text(textwrap.dedent("def f():\n    from pkg import a\n"))
    (package / "c.py").write_text("from . import a\n")
    assert find_cycles(package) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_in_ci_a_missing_dependency_fails_instead_of_skipping(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`needs_module` skips on a developer's machine but fails under CI=true, where CI installs everything."""
    shutil.copy(REPO / "tests" / "conftest.py", pytester.path / "conftest.py")
    pytester.makepyfile(
        test_dep="""
        from conftest import needs_module

        def test_uses_it():
            needs_module("specgate_no_such_module", "pip install it")
        """
    )
    for ci, outcome in (("", {"skipped": 1}), ("true", {"failed": 1})):
        monkeypatch.setenv("CI", ci)
        result = pytester.runpytest_subprocess()
        result.assert_outcomes(**outcome)
    result.stdout.fnmatch_lines(["*specgate_no_such_module*missing*CI=true: CI installs it*"])
