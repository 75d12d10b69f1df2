"""The command-line options of the specgate plugin: one group, read like pytest's own (short help, the default)."""

from __future__ import annotations

import pytest

DEFAULT_LOCK_TIMEOUT_S = 3600.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specgate", "specgate: release gate for speculative decoding")
    group.addoption(
        "--hardware",
        default="cpu",
        metavar="PROFILE",
        help="Hardware profile: hardware/<PROFILE>.yaml of the repository, else specgate's own (default: cpu).",
    )
    group.addoption(
        "--pair",
        action="append",
        metavar="NAME",
        help="Pair(s) to gate, repeatable or comma-separated; 'all' for every pair "
        "(default: the pairs marked default in specgate.yaml).",
    )
    group.addoption(
        "--workload",
        action="append",
        metavar="NAME",
        help="Workload(s) to run, repeatable or comma-separated; 'all' for every workload "
        "(default: the workloads marked default).",
    )
    group.addoption(
        "--engine",
        default=None,
        metavar="NAME",
        help="Override the engine of every pair: transformers, vllm or openai (default: per pair/profile).",
    )
    group.addoption(
        "--specgate-config",
        default=None,
        metavar="PATH",
        help="Project config (default: specgate.yaml in the rootdir).",
    )
    group.addoption(
        "--hardware-dir",
        default=None,
        metavar="DIR",
        help="Folder of hardware profiles (default: hardware/ beside the project config).",
    )
    group.addoption(
        "--baselines-dir",
        default=None,
        metavar="DIR",
        help="Folder of stored baselines (default: baselines/ beside the project config).",
    )
    group.addoption(
        "--update-baselines",
        action="store_true",
        default=False,
        help="Write this run's measurements as the new baselines (only on purpose: reference builds).",
    )
    group.addoption(
        "--reference",
        default=None,
        metavar="PAIR",
        help="Measure PAIR (the released configuration) beside every selected pair and judge the regression on "
        "the two, on this machine in this run; 'none' switches reference mode off (default: pairs.<pair>.reference).",
    )
    group.addoption(
        "--inject-slowdown",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="Self-test of the gate's power: add FRACTION (e.g. 0.10) of every decode step's time to the candidate's "
        "arms. Printed loudly in the verdict; refused with --update-baselines (default: 0, off).",
    )
    group.addoption(
        "--accept",
        action="append",
        default=None,
        metavar="CHECK",
        help="With --update-baselines: record this run although these comparisons against the baseline failed, as an "
        "intended change (output_drift, task_accuracy, acceptance_rate; repeatable or comma-separated). Needs "
        "--accept-reason.",
    )
    group.addoption(
        "--accept-reason",
        default="",
        metavar="TEXT",
        help="Why the accepted change is intended; kept in the baseline's history with who and when.",
    )
    group.addoption(
        "--record-missing-baselines",
        default=None,
        metavar="DIR",
        help="For a merge request that adds a pair or workload: its missing baselines do not block, and a run that "
        "passes writes them under DIR (never over an existing file), to commit from the job's artifacts.",
    )
    group.addoption(
        "--specgate-out",
        default=None,
        metavar="DIR",
        help="Output folder for verdict.json and reports (default: reports/ beside the project config).",
    )
    group.addoption(
        "--specgate-lock-timeout",
        type=_seconds,
        default=DEFAULT_LOCK_TIMEOUT_S,
        metavar="SECONDS",
        help="How long to wait while another gate session measures on this machine; 0 fails at once "
        f"(default: {DEFAULT_LOCK_TIMEOUT_S:g}).",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(f"--specgate-lock-timeout={text!r}: expected seconds, e.g. 600 or 0") from None
    if not value >= 0:
        raise pytest.UsageError(f"--specgate-lock-timeout={text!r}: must be ≥ 0 (0 fails at once)")
    return value
