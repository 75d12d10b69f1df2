"""One machine, one measurement at a time: gate items under pytest-xdist are refused with a usage error (exit status 4,
no verdict file from any worker), while sessions without gate items distribute as usual; a second gate session on
the same machine waits for the first, naming it, or blocks with the holder's command line; the machine's lock is
released when its holder dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import REPO, needs_module
from specgate.cli import main
from specgate.measure.machine_lock import MachineBusyError, MachineLock, hold_machine, read_holder

XDIST = "pytest-xdist (pip install pytest-xdist; scripts/setup.sh --tests installs it)"
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from specgate.measure.machine_lock import hold_machine
    with hold_machine(timeout_s=0, path=Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(600)
    """
)
# a gate session that, once it measures (holds the machine), waits in its first check while HOLD_FILE exists
HOLDING_CONFTEST = """
import os, time
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    hold = os.environ.get("HOLD_FILE")
    while hold and os.path.exists(hold):
        time.sleep(0.05)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return {**env, "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]), **extra}


def _until(condition: Callable[[], bool], what: str, process: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended before {what}: {process.returncode}")
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_a_held_lock_names_its_holder_and_is_released_when_the_holder_dies(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    path = tmp_path / "machine.lock"
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True, env=_env())
    processes.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    recorded = read_holder(path)
    assert recorded is not None and recorded.pid == holder.pid and str(script) in recorded.command
    lock = MachineLock(path)
    with pytest.raises(MachineBusyError) as refused:
        lock.acquire(timeout_s=0)
    assert f"pid {holder.pid} (" in str(refused.value) and str(script) in str(refused.value)
    assert "not waiting (timeout 0)" in str(refused.value) and not lock.held
    told: list[str] = []
    with pytest.raises(MachineBusyError, match=r"waited \d+ s"):
        lock.acquire(timeout_s=0.3, on_wait=told.append)
    assert len(told) == 1 and f"pid {holder.pid}" in told[0] and "at most 0.3 s" in told[0]
    holder.send_signal(signal.SIGKILL)  # no release, no clean-up: the kernel drops the lock with the process
    holder.wait()
    lock.acquire(timeout_s=60)
    assert lock.held
    mine = read_holder(path)
    assert mine is not None and mine.pid == os.getpid()
    lock.release()
    with hold_machine(timeout_s=0, path=path) as again:  # released means free again
        assert again.held


def test_gate_items_under_xdist_are_refused_with_a_usage_error_and_no_verdict(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    needs_module("xdist", XDIST)
    root = gate_project()
    result = pytester.runpytest_subprocess("suites/", "-n", "2", "--hardware=cpu", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["ERROR: specgate: gate checks do not run under pytest-xdist (-n 2 --dist load): each worker would load*"]
    )
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()
    assert not (root / "reports").exists()  # no worker wrote a partial verdict, and the controller none either
    status = main(["verdict", "--verdict", str(root / "reports" / "verdict.json"), "--pytest-exit", str(result.ret)])
    assert status == 2  # the CI job's status: no verdict, the release is blocked

    plain = pytester.makepyfile(test_plain="def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    distributed = pytester.runpytest_subprocess(str(plain), "-n", "2", "-p", "no:cacheprovider")
    assert distributed.ret == pytest.ExitCode.OK, distributed.stdout.str()
    distributed.assert_outcomes(passed=2)
    assert not (root / "reports").exists()


def _gate(root: Path, out: str, *options: str, hold: Path | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "pytest", "suites/test_sla.py", "--hardware=cpu", "-p", "no:cacheprovider"]
    extra = {"HOLD_FILE": str(hold)} if hold is not None else {}
    with open(root / f"{out}.log", "w") as log:  # the process has its own copy of the handle
        return subprocess.Popen(
            [*command, f"--specgate-out={out}", *options],
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(**extra),
        )


def test_a_second_gate_session_waits_for_the_first_or_blocks_naming_it(
    pytester: pytest.Pytester,
    gate_project: Callable[..., Path],
    processes: list[subprocess.Popen[str]],
    machine_lock_of_the_tests: Path,
) -> None:
    root = gate_project()
    (root / "conftest.py").write_text((root / "conftest.py").read_text() + HOLDING_CONFTEST)
    hold = root / "hold"
    hold.touch()
    first = _gate(root, "first", hold=hold)
    processes.append(first)
    lock = machine_lock_of_the_tests

    def first_holds() -> bool:
        holder = read_holder(lock)
        return holder is not None and holder.pid == first.pid

    _until(first_holds, "the first session to hold the machine", first)

    refused = _gate(root, "refused", "--specgate-lock-timeout=0")
    processes.append(refused)
    assert refused.wait(timeout=300) == pytest.ExitCode.TESTS_FAILED, (root / "refused.log").read_text()
    verdict = json.loads((root / "refused" / "verdict.json").read_text())
    assert verdict["verdict"] == "BLOCK" and verdict["checks"] == []
    reason = next(e for e in verdict["errors"] if e.startswith("not measured: "))
    assert f"pid {first.pid} (" in reason and "pytest suites/test_sla.py" in reason and "--specgate-out=first" in reason
    assert (
        "specgate: not measured: another gate session is measuring on this machine"
        in (root / "refused.log").read_text()
    )

    waiting = _gate(root, "second", "--specgate-lock-timeout=600")
    processes.append(waiting)
    _until(lambda: "waiting for the machine" in (root / "second.log").read_text(), "the wait notice", waiting)
    notice = next(x for x in (root / "second.log").read_text().splitlines() if "waiting for the machine" in x)
    assert f"pid {first.pid} (" in notice and "--specgate-out=first" in notice and "(at most 600 s)" in notice
    assert not (root / "second" / "verdict.json").exists()  # it measures nothing while it waits
    hold.unlink()
    # the SLA suite alone: every check passes and the run is PARTIAL (a subset), which fails like a BLOCK
    assert first.wait(timeout=300) == pytest.ExitCode.TESTS_FAILED, (root / "first.log").read_text()
    assert waiting.wait(timeout=300) == pytest.ExitCode.TESTS_FAILED, (root / "second.log").read_text()
    assert json.loads((root / "second" / "verdict.json").read_text())["verdict"] == "PARTIAL"
    assert json.loads((root / "first" / "verdict.json").read_text())["verdict"] == "PARTIAL"
    holder = read_holder(lock)
    assert holder is not None and holder.pid == waiting.pid  # the second measured after the first, holding it
