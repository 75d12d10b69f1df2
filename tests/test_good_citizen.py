"""The plugin in a repository's own test sessions: with `specgate.yaml` present, a session that collects no gate test
reads no config, imports nothing heavy, prints nothing and writes nothing; a broken config fails only gate
sessions; gate parametrisation touches only gate tests. (`scripts/plugin_overhead.py` measures the time it adds.)"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

USER_TESTS = """
import sys

import pytest


@pytest.fixture(params=["EURUSD", "USDJPY"])
def pair(request):
    return request.param


def test_currency_pair(pair):
    assert len(pair) == 6


def test_workload_free():
    assert 1 + 1 == 2


def test_nothing_heavy_was_imported():
    heavy = [m for m in ("torch", "transformers", "numpy", "scipy", "specgate.run", "specgate.config")
             if m in sys.modules]
    assert heavy == []
"""


# what pytester (its subprocess's output and base temp) and pytest-benchmark (.benchmarks) write themselves
OTHERS = ("stdout", "stderr", "runpytest-", ".benchmarks")


def _files(root: Path) -> set[Path]:
    found = {p.relative_to(root) for p in root.rglob("*") if "__pycache__" not in p.parts}
    return {p for p in found if not p.parts[0].startswith(OTHERS)}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
    return env


def test_a_session_without_gate_tests_reads_nothing_imports_nothing_prints_nothing_writes_nothing(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project()
    (root / "conftest.py").unlink()  # the fake engine's conftest imports specgate's engines itself
    pytester.makepyfile(test_user=USER_TESTS)
    before = _files(root)
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    result = pytester.runpytest_subprocess("test_user.py", "-p", "no:cacheprovider", "-rA")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_currency_pair?EURUSD?*", "*test_currency_pair?USDJPY?*"])
    said = [line for line in result.outlines + result.errlines if "specgate" in line.lower()]
    assert [line for line in said if not line.startswith("plugins: ")] == []  # pytest's own list of plugins
    assert _files(root) - before == set()


def test_a_broken_config_fails_only_sessions_that_collect_gate_tests(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    pytester.makepyfile(test_user=USER_TESTS.replace("test_nothing_heavy", "nothing_heavy"))
    broken = "pairs:\n  fake-pair:\n    targte: model\nworkloads:\n  docs: {path: docs.jsonl}\n"
    (root / "specgate.yaml").write_text(broken)
    unrelated = pytester.runpytest("test_user.py", "-p", "no:cacheprovider")
    assert unrelated.ret == pytest.ExitCode.OK, unrelated.stdout.str()
    unrelated.assert_outcomes(passed=3)
    assert not (root / "reports").exists()

    gate = pytester.runpytest("suites", "-p", "no:cacheprovider")
    assert gate.ret == pytest.ExitCode.USAGE_ERROR
    gate.stderr.fnmatch_lines(["*specgate.yaml*targte*unknown key*Did you mean 'target'*"])
    assert not (root / "reports").exists()


def test_a_gate_test_in_a_repository_without_config_is_a_usage_error_naming_the_fix(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_gate="import pytest\n\n@pytest.mark.specgate_check('samples')\ndef test_samples(gate_check):\n"
        "    gate_check()\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gate tests were collected but there is no project config*specgate init*"])


def test_gate_parametrisation_touches_only_gate_tests(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """One session with the suites and a user's test with its own `pair` fixture: the suites are parametrized over
    the gate's pairs, the user's test over its own parameters only."""
    gate_project()
    pytester.makepyfile(test_user=USER_TESTS.replace("test_nothing_heavy", "nothing_heavy"))
    result = pytester.runpytest("suites/test_sla.py", "test_user.py", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    ids = [line for line in result.outlines if "::" in line]
    assert "test_user.py::test_currency_pair[EURUSD]" in ids
    assert "test_user.py::test_currency_pair[USDJPY]" in ids
    assert not any("test_currency_pair[fake-pair" in line for line in ids)
    assert any("test_sla.py::test_speedup[fake-pair-docs]" in line for line in ids)


def test_the_plugin_module_imports_nothing_heavy() -> None:
    """What every pytest session of an environment with specgate installed pays: the entry point's import."""
    import subprocess

    code = (
        "import sys; import specgate.plugin; "
        "print(sorted(m for m in sys.modules if m.startswith(('specgate.', 'numpy', 'scipy', 'torch', 'yaml'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['specgate.plugin', 'specgate.pytest_plugins', 'specgate.pytest_plugins.options']"
