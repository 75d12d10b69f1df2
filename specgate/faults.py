"""Faults of a gate run: each cause reported once, with its remedy; its traceback and what was measured before it
kept in the output folder.

A measurement that fails (an engine error, a server that stops answering, NaN from a model) fails every check that
needs it, and they all re-raise the same cached exception: `FaultLog.record` keeps one `Fault` per cause (the
exception's type and message), counts the checks it cost, and keeps its full traceback. `FaultLog.recorder` wraps
the measurement's observer so every arm run that completed is kept too: when a measurement fails or the session is
interrupted, `FaultLog.write` saves those runs with the reason under `<out>/partial/<hardware>/<pair>/<workload>.json`
and every traceback in `<out>/errors.log`.
"""

from __future__ import annotations

import shutil
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from specgate.engines.base import ArmRun
from specgate.errors import (
    BaselineError,
    ConfigError,
    EngineUnavailableError,
    MeasurementError,
    SpecgateError,
)
from specgate.measure.protocol import RunObserver
from specgate.store.atomic import write_atomic
from specgate.store.codec import dumps, to_data

E = TypeVar("E", bound=BaseException)
ERRORS_LOG = "errors.log"
PARTIAL_DIR = "partial"
PARTIAL_SCHEMA_VERSION = 1

_REMEDIES: tuple[tuple[type[BaseException], str], ...] = (
    (MeasurementError, "the engine or server failed while measuring: fix the cause and run the gate again"),
    (EngineUnavailableError, "start the server or install the engine it names, then run the gate again"),
    (ConfigError, "fix the configuration it names (found only when the engine started), then run again"),
    (BaselineError, "restore the baseline file from git or record it again on the reference build"),
    (SpecgateError, "fix the cause it names and run the gate again"),
    (OSError, "check the disk space and permissions of the path it names, then run again"),
)
UNEXPECTED = "an error inside the engine or the gate, not a verdict on the release; if not the engine's, report it"


def remedy(exc: BaseException) -> str:
    """What to do about an exception raised inside a measurement or a check."""
    return next((text for kind, text in _REMEDIES if isinstance(exc, kind)), UNEXPECTED)


def cause(exc: BaseException) -> str:
    """`Type: message`, the message's first line (a traceback, if any, is in the log)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else '(no message)'}"


@dataclass(slots=True)
class Fault:
    """One cause of failure: where it was first seen, the checks it cost, its remedy and full traceback."""

    where: str
    first: str
    cause: str
    remedy: str
    traceback: str
    checks: int = 1

    def message(self) -> str:
        """The verdict's line for this cause."""
        cost = f"; {self.checks} checks could not run" if self.checks > 1 else ""
        return f"{self.where}: {self.cause}{cost} — {self.remedy}"


@dataclass
class _Recorder:
    """A `RunObserver` that keeps every completed arm run of one pair × workload, then hands on to `inner`."""

    runs: list[ArmRun]
    inner: RunObserver

    def before_run(self, arm: str) -> None:
        self.inner.before_run(arm)

    def after_run(self, arm: str, run: ArmRun) -> None:
        self.runs.append(run)
        self.inner.after_run(arm, run)


@dataclass
class FaultLog:
    """The faults of one run, one per cause, and the arm runs each measurement completed (mutable: it accumulates)."""

    faults: dict[str, Fault] = field(default_factory=dict)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    runs: dict[tuple[str, str], list[ArmRun]] = field(default_factory=dict)

    def record(self, exc: BaseException, where: str, check: str) -> tuple[Fault, bool]:
        """Count `check` against the fault `exc` (seen at `where`); True when this cause is new."""
        key = f"{type(exc).__qualname__}: {exc}"
        known = self.faults.get(key)
        if known is not None:
            known.checks += 1
            return known, False
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        fault = Fault(where, check, cause(exc), remedy(exc), trace)
        self.faults[key] = fault
        return fault, True

    def measurement_failed(self, pair: str, workload: str, exc: E) -> E:
        """Note why a measurement failed (its partial runs are saved with the reason); returns `exc`."""
        self.failed[(pair, workload)] = cause(exc)
        return exc

    def recorder(self, pair: str, workload: str, inner: RunObserver) -> RunObserver:
        """An observer for the measurement of `pair` × `workload` that keeps its completed arm runs."""
        runs = self.runs.setdefault((pair, workload), [])
        runs.clear()  # a measurement is made once; a new one replaces what an earlier attempt left
        return _Recorder(runs, inner)

    def messages(self) -> list[str]:
        return [fault.message() for fault in self.faults.values()]

    def write(self, out_dir: Path, hardware: str, measured: Iterable[tuple[str, str]], interrupted: bool) -> list[Path]:
        """`errors.log` (every traceback; removed when there is none) and the partial runs of every measurement that
        did not finish, with its reason. Returns the files written."""
        written = []
        log = out_dir / ERRORS_LOG
        if self.faults:
            write_atomic(log, "\n".join(_log_entry(f) for f in self.faults.values()))
            written.append(log)
        else:
            log.unlink(missing_ok=True)
        shutil.rmtree(out_dir / PARTIAL_DIR, ignore_errors=True)  # what an earlier run left is not this run's
        done = set(measured)
        for (pair, workload), runs in self.runs.items():
            if (pair, workload) in done:
                continue
            reason = self.failed.get((pair, workload)) or (
                "the session was interrupted during this measurement" if interrupted else "the measurement did not end"
            )
            path = out_dir / PARTIAL_DIR / hardware / pair / f"{workload}.json"
            document = {
                "schema_version": PARTIAL_SCHEMA_VERSION,
                "hardware": hardware,
                "pair": pair,
                "workload": workload,
                "reason": reason,
                "runs": [to_data(run) for run in runs],
            }
            write_atomic(path, dumps(document, indent=1, default=str) + "\n")
            written.append(path)
        return written


def _log_entry(fault: Fault) -> str:
    return (
        f"=== {fault.where}: {fault.cause}\n"
        f"first in: {fault.first}; checks affected: {fault.checks}\nremedy: {fault.remedy}\n\n{fault.traceback}"
    )
