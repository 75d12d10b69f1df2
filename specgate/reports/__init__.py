"""Report writers. Each takes the finished `GateRun` and writes into its output folder.

`write_reports` runs every writer; the verdict file is always written first, so CI has a verdict even when an
optional report (plots, Allure attachments) fails. The other writers are imported only when they run, so a
missing optional library (prometheus-client, matplotlib) costs that report, never the gate: a writer that fails
is logged, and named in `verdict.json` under `report_warnings` (the terminal shows them after the verdict).

Reports in the output folder: `verdict.json` (CI), `summary.md` (merge-request comment), `metrics.prom`
(Prometheus text format), `benchmark.json` (pytest-benchmark records). Allure results go to `--alluredir`.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable

from specgate.run import GateRun

ReportWriter = Callable[[GateRun], None]

logger = logging.getLogger("specgate.reports")

# module:function of each optional writer, in the order they run (after the verdict)
OPTIONAL_WRITERS = (
    "specgate.reports.summary:write_summary",
    "specgate.reports.prometheus:write_prometheus",
    "specgate.reports.benchmark:write_benchmark",
)


def _lazy(spec: str) -> ReportWriter:
    module_name, function_name = spec.split(":")

    def writer(run: GateRun) -> None:
        function: ReportWriter = getattr(importlib.import_module(module_name), function_name)
        function(run)

    writer.__name__ = function_name
    return writer


def writers() -> list[ReportWriter]:
    """The verdict writer, then every optional writer."""
    from specgate.reports.verdict import write_verdict

    return [write_verdict, *(_lazy(spec) for spec in OPTIONAL_WRITERS)]


def write_reports(run: GateRun) -> list[str]:
    """Write every report of the run into `run.out_dir`; return a warning per optional report that failed."""
    run.out_dir.mkdir(parents=True, exist_ok=True)
    first, *others = writers()
    first(run)
    problems = []
    for writer in others:
        try:
            writer(run)
        except Exception as exc:  # an optional report must never cost the verdict
            problem = f"report {writer.__name__} failed: {type(exc).__name__}: {exc}"
            logger.warning(problem)
            problems.append(problem)
    if problems:
        record_report_warnings(run, problems)
    return problems


def record_report_warnings(run: GateRun, problems: list[str]) -> None:
    """Add the failed reports to the verdict file already written, leaving the verdict itself as it was."""
    from specgate.reports.verdict import write_atomic

    path = run.out_dir / "verdict.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["report_warnings"] = [*document.get("report_warnings", []), *problems]
    write_atomic(path, json.dumps(document, indent=2, default=str) + "\n")


def report_warnings(run: GateRun) -> list[str]:
    """The report warnings recorded in the run's verdict file (empty when there is none)."""
    try:
        document = json.loads((run.out_dir / "verdict.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(w) for w in document.get("report_warnings", [])]
