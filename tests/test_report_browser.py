"""The HTML report in a real browser: a blocking FakeEngine gate run with --alluredir, `specgate report`, the report
served over HTTP on 127.0.0.1 and opened in headless Chromium (Debian's, driven by Playwright's Python client).

Needs the Allure 2 command line (with Java), /usr/bin/chromium and playwright: `scripts/install-report-tools.sh`
installs all three; without them the test is skipped with the reason. The screenshot is saved to
`$SPECGATE_SCREENSHOT` (default /tmp/specgate-report.png) for a person to look at.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import needs
from specgate.cli import main
from specgate.cli.report import find_allure

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT = Path(os.environ.get("SPECGATE_SCREENSHOT", "/tmp/specgate-report.png"))
CHECK_TESTS = (
    "test_enough_samples",
    "test_p99_ttft",
    "test_decode_rate",
    "test_speedup",
    "test_acceptance_rate",
    "test_greedy_identity",
)
PLOT = "Speedup measured vs predicted"

pytestmark = [pytest.mark.browser]


@pytest.fixture(autouse=True)
def _report_tools() -> None:
    """The Allure CLI, Java, Chromium and playwright (scripts/install-report-tools.sh; fail in CI when absent)."""
    install = "bash scripts/install-report-tools.sh"
    needs(find_allure() is not None, "the Allure CLI", install)
    needs(shutil.which("java") is not None, "Java (the Allure 2 CLI runs on it)", install)
    needs(Path(CHROMIUM).is_file(), f"Chromium ({CHROMIUM})", install)
    needs(importlib.util.find_spec("playwright") is not None, "playwright (Python client)", install)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Callable[[Path], str]]:
    """Serve a folder on 127.0.0.1 (Allure's pages load their data over HTTP); return its base URL."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def serve(folder: Path) -> str:
        handler = functools.partial(_QuietHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/index.html"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def _case_uid(report: Path, name: str) -> str:
    for path in (report / "data" / "test-cases").glob("*.json"):
        case = json.loads(path.read_text(encoding="utf-8"))
        if case["name"] == name:
            return str(case["uid"])
    raise AssertionError(f"{name} is not in the report")


def _suite_tree_text(page: Any, url: str) -> str:
    page.goto(f"{url}#suites")
    for node in ("cpu", "fake-pair", "docs"):  # hardware → pair → workload, as the labels put them
        page.get_by_text(node, exact=True).first.click()
    page.get_by_text("test_speedup[fake-pair-docs]").wait_for()
    return str(page.inner_text("body"))


def _open_plot(page: Any, url: str, uid: str) -> Any:
    page.goto(f"{url}#testresult/{uid}")
    page.get_by_text("speedup [sla]: FAILED", exact=False).click()  # the step: parameters and evidence
    page.get_by_text("Set up", exact=True).click()
    page.get_by_text("evaluation", exact=True).click()
    page.get_by_text(PLOT, exact=True).click()
    image = page.locator("img[src*='data/attachments/']").first
    image.wait_for()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    return image


def test_generated_report_shows_the_checks_and_a_plot(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], served: Callable[[Path], str]
) -> None:
    from playwright.sync_api import sync_playwright

    gate_project("slowdown=2.0")
    run = pytester.runpytest(
        "suites/test_sla.py", "suites/test_drift.py", "-p", "no:cacheprovider", "--alluredir=reports/allure-results"
    )
    run.assert_outcomes(passed=5, failed=1)
    report = pytester.path / "reports" / "allure-report"
    assert main(["report", "--results", str(pytester.path / "reports" / "allure-results"), "--out", str(report)]) == 0
    url = served(report)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(20_000)
            tree = _suite_tree_text(page, url)
            for name in CHECK_TESTS:
                assert f"{name}[fake-pair-docs]" in tree
            image = _open_plot(page, url, _case_uid(report, "test_speedup[fake-pair-docs]"))
            assert image.evaluate("img => img.naturalWidth") == 640
            body = page.inner_text("body")
            assert "Categories: SLA breach" in body
            assert "speedup S 0." in body
            page.set_viewport_size({"width": 1400, "height": 1800})  # the report scrolls inside its own pane
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert SCREENSHOT.stat().st_size > 10_000


def _gate_results(pytester: pytest.Pytester, folder: str, seed: int) -> Path:
    os.environ["FAKE_SEED"] = str(seed)  # another pipeline of the same build: other timing noise
    try:
        run = pytester.runpytest("suites/test_sla.py", "-p", "no:cacheprovider", f"--alluredir={folder}")
    finally:
        del os.environ["FAKE_SEED"]
    run.assert_outcomes(passed=4, failed=1)
    return pytester.path / folder


def test_history_carried_between_pipelines_draws_the_trend(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], served: Callable[[Path], str]
) -> None:
    from playwright.sync_api import sync_playwright

    gate_project("slowdown=2.0")
    carried = pytester.path / "cache" / "allure-history"  # what a CI cache keeps between pipelines
    reports = []
    for pipeline in (1, 2):  # each pipeline has its own results and report folders, as a fresh CI job does
        results = _gate_results(pytester, f"pipeline{pipeline}/allure-results", seed=pipeline)
        out = pytester.path / f"pipeline{pipeline}" / "allure-report"
        assert main(["report", "--results", str(results), "--out", str(out), "--allure-history", str(carried)]) == 0
        reports.append(out)
    history = json.loads((reports[1] / "history" / "history-trend.json").read_text())
    assert len(history) == 2 and [entry["data"]["failed"] for entry in history] == [1, 1]
    assert len(json.loads((carried / "history-trend.json").read_text())) == 2
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(20_000)
            page.goto(served(reports[1]))
            trend = page.locator("[data-id='history-trend']")
            trend.get_by_text("Trend", exact=True).wait_for()
            trend.locator(".report-line").nth(1).wait_for(state="attached")  # drawn in the background colour
            assert trend.locator(".report-line").count() == 2  # one line per report: this one and the one before
            environment = page.locator("[data-id='environment']")
            environment.get_by_text("Show all").click()
            environment.get_by_text("machine.fake-pair", exact=True).wait_for()
            body = environment.inner_text()
            assert "(fingerprint " in body  # the machine its latency belongs to
        finally:
            browser.close()
