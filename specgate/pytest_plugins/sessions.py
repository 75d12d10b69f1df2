"""One machine, one measurement at a time, on the pytest side: registered from `specgate.plugin` for a gate run.

pytest-xdist: gate items are refused under distribution (`-n 2`, `--dist`, `--tx`). Each worker would build its own
gate, load the engines and measure at the same time as the others on the same machine (every timing corrupted),
each would write a partial `verdict.json` into the same folder, and the controller, which runs no item itself, could
exit 0 beside a blocked verdict. So a worker that collects a gate item deselects everything, runs nothing and writes
no verdict, and tells the controller why (through `workeroutput`); the controller (`specgate.plugin`'s xdist
hooks) ends with pytest's usage-error status (4) and the reason. Sessions that collect no gate item (specgate's own
tests, say) are left alone.

Two sessions at once: a session that is about to run gate items takes the machine's lock first
(`specgate.measure.machine_lock`), and holds it until its verdict is written and its engines are closed. A second
session waits, saying whom it waits for, for at most `--specgate-lock-timeout` seconds; then it runs no gate item
and blocks with the holder's command line.
"""

from __future__ import annotations

import sys

import pytest

from specgate.measure.machine_lock import MachineBusyError, MachineLock
from specgate.run import GateRun

REFUSED = "specgate_refused"
XDIST_REFUSAL = (
    "specgate: gate checks do not run under pytest-xdist ({how}): each worker would load the engines and measure "
    "at the same time on this machine, so every latency would be wrong, and each would write its own partial "
    "verdict. Run the gate without -n/--dist (e.g. pytest suites/ -p no:xdist); to spread a gate over machines, "
    "run one job per runner and combine their verdicts with `specgate merge`"
)


def distribution(config: pytest.Config) -> str | None:
    """How pytest-xdist distributes this session (e.g. "-n 2 --dist load"), or None when it does not."""
    dist = getattr(config.option, "dist", "no")
    if dist in (None, "no") or getattr(config.option, "collectonly", False):
        return None
    workers = getattr(config.option, "numprocesses", None)
    return f"-n {workers} --dist {dist}" if workers else f"--dist {dist}"


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class OneMeasurement:
    """Refuses gate items under xdist, and holds the machine's lock while the session measures."""

    def __init__(self, config: pytest.Config, run: GateRun) -> None:
        self.config = config
        self.run = run
        self.lock = MachineLock()

    # --- pytest-xdist ----------------------------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)  # after specgate's own modifyitems has marked the gate items
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not is_worker(config) or not any(item.get_closest_marker("gate") for item in items):
            return
        how = str(config.workerinput.get("specgate_distribution") or "pytest-xdist")  # type: ignore[attr-defined]
        config.workeroutput[REFUSED] = XDIST_REFUSAL.format(how=how)  # type: ignore[attr-defined]
        config.hook.pytest_deselected(items=list(items))
        items[:] = []
        self.run.items.asked = False  # this worker gates nothing: no verdict of its own

    # --- the machine's lock ----------------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if is_worker(self.config) or not self.run.items.expected or session.config.option.collectonly:
            return None
        timeout = float(self.config.getoption("specgate_lock_timeout"))
        try:
            waited = self.lock.acquire(timeout, self._say)
        except MachineBusyError as exc:
            self.run.errors.append(f"not measured: {exc}")
            self._say(f"not measured: {exc}")
            return True  # no gate item runs; the verdict blocks with the reason
        if waited >= 1.0:
            self._say(f"the machine is free after {waited:.0f} s; measuring")
        return None

    def _say(self, message: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"specgate: {message}", yellow=True)
        else:
            print(f"specgate: {message}", file=sys.stderr, flush=True)

    # --- the end ---------------------------------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)  # after specgate's own sessionfinish wrote the verdict and closed the engines
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.lock.release()

    def pytest_unconfigure(self) -> None:
        self.lock.release()


def register_sessions(config: pytest.Config, run: GateRun) -> None:
    """Register `OneMeasurement` for a gate run."""
    config.pluginmanager.register(OneMeasurement(config, run), "specgate-one-measurement")
