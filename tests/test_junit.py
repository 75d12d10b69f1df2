"""JUnit XML of a gate run (`--junitxml`), read back with junitparser as a CI's test view reads it: one testcase per
check named hardware / pair / workload / check, the failed check's evidence as its failure message and its kind as
the failure's type, a check whose
measurement broke as an error under the same name, and other tests under pytest's own names."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_module

OWN_TEST = """
def test_something_else():
    assert 1 + 1 == 2
"""


def _cases(path: Path) -> dict[str, Any]:
    junitparser = needs_module("junitparser", "pip install junitparser (the dev extra)")
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = [xml] if isinstance(xml, junitparser.TestSuite) else list(xml)
    cases = [case for suite in suites for case in suite]
    names = [case.name for case in cases]
    assert len(names) == len(set(names)), f"duplicate testcase names: {names}"
    return {case.name: case for case in cases}


def test_one_testcase_per_check_named_by_hardware_pair_workload_and_check(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project("slowdown=2.0")
    pytester.makepyfile(test_own=OWN_TEST)
    run = pytester.runpytest(
        "suites/test_sla.py", "suites/test_drift.py", "test_own.py", "-p", "no:cacheprovider", "--junitxml=junit.xml"
    )
    run.assert_outcomes(passed=6, failed=1)
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    cases = _cases(root / "junit.xml")
    expected = {
        "cpu / " + check["pair"] + " / " + check["workload"] + " / " + check["name"] for check in verdict["checks"]
    }
    assert set(cases) == expected | {"test_something_else"}
    assert len(verdict["checks"]) == 6
    speedup = cases["cpu / fake-pair / docs / speedup"]
    (failure,) = speedup.result
    evidence = next(c["message"] for c in verdict["checks"] if c["name"] == "speedup")
    assert type(failure).__name__ == "Failure"
    assert failure.message == f"Failed: {evidence}"
    assert failure.type == "sla"  # the kind of failure, from the check, not from its message
    assert evidence.startswith("speedup S 0.")
    assert speedup.classname == "suites.test_sla"
    for name in expected - {"cpu / fake-pair / docs / speedup"}:
        assert cases[name].is_passed, name
    assert cases["test_something_else"].classname == "test_own"


BROKEN_ENGINE = """
import pytest


def _crash(name, base):
    raise RuntimeError("the engine did not start: no device")


def pytest_specgate_run(config, run):
    run.engine_factory = _crash
"""


def test_a_check_whose_engine_broke_is_an_error_under_its_check_name(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    pytester.makeconftest(BROKEN_ENGINE)
    run = pytester.runpytest("suites/test_sla.py", "-p", "no:cacheprovider", "--junitxml=junit.xml")
    run.assert_outcomes(errors=5)
    cases = _cases(root / "junit.xml")
    names = {"samples", "p99_ttft", "decode_rate", "speedup", "acceptance_rate"}
    assert set(cases) == {f"cpu / fake-pair / docs / {name}" for name in names}
    for case in cases.values():
        (error,) = case.result
        assert type(error).__name__ == "Error"
        assert "the engine did not start: no device" in (error.text or "")
