"""Progress lines on pytest's terminal while a measurement runs (the first gate item of a workload measures the
whole workload: minutes on a CPU). Output capturing is suspended for each line, so they reach the terminal or the
CI log as they happen; on a terminal the line is rewritten in place, in a log one line at a time (at least one a
minute)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from specgate.measure.progress import ProgressLines


def attach_progress(config: pytest.Config) -> ProgressLines | None:
    """A `ProgressLines` that writes to pytest's terminal, or None when the session is quiet (`-qq`)."""
    if config.get_verbosity() < -1:
        return None
    reporter: Any = config.pluginmanager.get_plugin("terminalreporter")
    live = bool(reporter is not None and reporter.isatty)
    pending = [False]

    def write(text: str, final: bool) -> None:
        terminal: Any = config.pluginmanager.get_plugin("terminalreporter")
        capture: Any = config.pluginmanager.get_plugin("capturemanager")
        if terminal is None:
            return
        suspended = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
        with suspended:
            if live and not final:
                if not pending[0]:
                    terminal.ensure_newline()
                terminal.rewrite(text, erase=True)
                pending[0] = True
            elif pending[0]:
                terminal.rewrite(text, erase=True)
                terminal.line("")
                pending[0] = False
            else:
                terminal.write_line(text)

    return ProgressLines(write, live=live)
