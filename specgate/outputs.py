"""What a finished gate run leaves behind, written so that a full disk or a read-only folder costs files, never the
verdict.

In order: the run records (`<out>/runs/`), the faults (`<out>/errors.log` and the partial runs of measurements that
did not finish, `specgate.faults`), the baselines (with `--update-baselines`, only from a run that passed: after the
records, so a run that could not write them is not recorded) and the reports (`verdict.json` first). A write that
fails is an error of the run, so the verdict blocks and says which output was lost and why; when even `verdict.json`
cannot be written the document is still built, for the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from specgate.evaluation import Evaluation
from specgate.faults import FaultLog
from specgate.reports.document import VerdictDocument

FIX_DISK = "free disk space or make the folder writable, then run the gate again"


class Stopped(Protocol):
    """Whether the session was interrupted (`specgate.run.GateItems`)."""

    interrupted: bool


class FinishedRun(Protocol):
    """What the writing reads of a `specgate.run.GateRun`."""

    out_dir: Path
    errors: list[str]
    faults: FaultLog

    @property
    def items(self) -> Stopped: ...

    def evaluations(self) -> list[Evaluation]: ...

    def write_runs(self) -> list[Path]: ...

    def write_baselines(self) -> list[Path]: ...


def write_outputs(run: FinishedRun, hardware: str) -> VerdictDocument:
    """Write everything (see the module docstring) and return the verdict document."""
    from specgate.reports import write_reports
    from specgate.reports.document import build_document

    measured = [e.where for e in run.evaluations()]
    steps: Sequence[tuple[str, Callable[[], object]]] = (
        ("run records", run.write_runs),
        (
            "errors.log and partial runs",
            lambda: run.faults.write(run.out_dir, hardware, measured, run.items.interrupted),
        ),
        ("baselines", run.write_baselines),
    )
    for what, step in steps:
        _guarded(run, what, step)
    document: VerdictDocument | None = None
    try:
        document = write_reports(run)
    except OSError as exc:
        run.errors.append(_lost(run, "reports (verdict.json)", exc))
    return document if document is not None else build_document(run)


def _guarded(run: FinishedRun, what: str, step: Callable[[], object]) -> None:
    try:
        step()
    except OSError as exc:
        run.errors.append(_lost(run, what, exc))


def _lost(run: FinishedRun, what: str, exc: OSError) -> str:
    where = exc.filename or run.out_dir
    return f"{what} not written to {where}: {exc.strerror or exc}; {FIX_DISK}"
