"""Report writers. Each renders the run's verdict document (`specgate.reports.document`) into its output folder.

`write_reports` builds the document once and runs every writer; the verdict file is always written first, so CI
has a verdict even when an optional report fails. The other writers are imported only when they run, so a
missing optional library (prometheus-client) costs that report, never the gate: a writer that fails is logged,
and named in `verdict.json` under `report_warnings` (the terminal shows them after the verdict).

Reports in the output folder: `verdict.json` (the document, for CI), `summary.md` (merge-request comment),
`metrics.prom` (Prometheus text format), `benchmark.json` (pytest-benchmark records). Allure results go to
`--alluredir`. `render_all` rebuilds the same files from a saved document (`specgate report`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specgate.reports.document import VerdictDocument, build_document, with_warnings, write_document

Writer = Callable[[VerdictDocument, Path], None]

logger = logging.getLogger("specgate.reports")

# module:function of each optional writer, in the order they run (after the verdict)
OPTIONAL_WRITERS = (
    "specgate.reports.summary:write_summary",
    "specgate.reports.prometheus:write_prometheus",
    "specgate.reports.benchmark:write_benchmark",
)
REPORT_FILES = ("verdict.json", "summary.md", "metrics.prom", "benchmark.json")


def _lazy(spec: str) -> Writer:
    module_name, function_name = spec.split(":")

    def writer(document: VerdictDocument, out_dir: Path) -> None:
        function: Writer = getattr(importlib.import_module(module_name), function_name)
        function(document, out_dir)

    writer.__name__ = function_name
    return writer


def render_all(document: VerdictDocument, out_dir: Path) -> VerdictDocument:
    """Write `verdict.json` and every optional report; the document returned names the reports that failed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_document(document, out_dir / "verdict.json")
    problems = []
    for spec in OPTIONAL_WRITERS:
        writer = _lazy(spec)
        try:
            writer(document, out_dir)
        except Exception as exc:  # an optional report must never cost the verdict
            problem = f"report {writer.__name__} failed: {type(exc).__name__}: {exc}"
            logger.warning(problem)
            problems.append(problem)
    if problems:
        document = with_warnings(document, problems)
        write_document(document, out_dir / "verdict.json")
    return document


def write_reports(run: Any) -> VerdictDocument:
    """Build the run's document and write every report into `run.out_dir`."""
    return render_all(build_document(run), run.out_dir)
