"""JUnit XML (`--junitxml`) that reads like the gate: one testcase per check, named hardware / pair / workload /
check (`cpu / smollm2-pld / doc_edit / speedup`), the check's evidence as the failure message.

pytest's own junitxml plugin writes the file; this plugin only renames the testcases of gate items. The name is
put on the item's report (so it travels with the report from a pytest-xdist worker) and set on the testcase when
the report reaches the XML writer, the way pytest's `record_xml_attribute` sets attributes. Classname, file, line
and the failure element stay pytest's; the failure message is pytest's short form, `Failed: <evidence>`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from specgate.pytest_plugins.items import ITEM_CHECK, item_target

REPORT_ATTRIBUTE = "specgate_junit_name"
FAILURE_ATTRIBUTE = "specgate_failure"
MARKER = "specgate_check"


def junit_name(item: pytest.Item, hardware: str) -> str | None:
    """hardware / pair / workload / check for a gate item; None for other tests."""
    check = item.stash.get(ITEM_CHECK, None)
    if check is not None:  # the check's own name, with its arm where the name does not say it (as `Check.key`)
        return " / ".join((hardware, *check.key.split("/", 2)))
    target = item_target(item)
    marker = item.get_closest_marker(MARKER)
    if target is None or marker is None:
        return None
    name = str(marker.args[0])  # the item failed before its check was computed: the catalogue's name
    if target.param not in (None, "spec"):
        name = f"{name}[{target.param}]"
    return " / ".join((hardware, target.pair, target.workload, name))


class JunitNames:
    """Names the testcases of gate items in pytest's JUnit XML."""

    def __init__(self, config: pytest.Config, hardware: str) -> None:
        self.config = config
        self.hardware = hardware

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        name = junit_name(item, self.hardware) if item.get_closest_marker("gate") else None
        if name is not None:
            setattr(report, REPORT_ATTRIBUTE, name)
        check = item.stash.get(ITEM_CHECK, None)
        if report.failed and report.when == "call" and check is not None and check.failure is not None:
            setattr(report, FAILURE_ATTRIBUTE, check.failure.value)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = getattr(report, REPORT_ATTRIBUTE, None)  # set above, here or on an xdist worker
        writer = _junit_writer(self.config)
        if isinstance(name, str) and writer is not None:
            writer.node_reporter(report).add_attribute("name", name)

    @pytest.hookimpl(trylast=True, specname="pytest_runtest_logreport")
    def pytest_runtest_logreport_failure_type(self, report: pytest.TestReport) -> None:
        """The kind of failure as the `type` of the failure element pytest's writer has just added."""
        kind = getattr(report, FAILURE_ATTRIBUTE, None)
        writer = _junit_writer(self.config)
        if isinstance(kind, str) and writer is not None:
            failures = [node for node in writer.node_reporter(report).nodes if node.tag == "failure"]
            if failures:
                failures[-1].set("type", kind)


def _junit_writer(config: pytest.Config) -> Any:
    """pytest's JUnit XML writer of this session (None on xdist workers, which send their reports instead)."""
    from _pytest.junitxml import xml_key  # where `record_xml_attribute` finds it too

    return config.stash.get(xml_key, None)
