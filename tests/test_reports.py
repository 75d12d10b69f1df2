"""Reports of a gate run: summary.md, metrics.prom, benchmark.json, Allure results and the `specgate report` CLI.

Gate runs use the seeded FakeEngine through `gate_project` (tests/conftest.py): the default behaviour passes every
SLA check, `slowdown=2.0` makes the speedup check fail, `wrong_token_at` makes outputs drift. Numbers in each report
are checked against `verdict.json`, written from the same evaluation by a different writer.
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import arm_summaries, evaluate_fake, evaluation_of, subset_passed
from specgate import __version__
from specgate.cli import build_parser, main
from specgate.cli.report import report
from specgate.config import GatePolicy, SlaLimits
from specgate.engines.base import Prompt
from specgate.engines.fake import FakeBehaviour, FakeEngine
from specgate.evaluation import Evaluation
from specgate.pytest_plugins.allure import KNOWN_SHAPES, categories, environment_properties, literal
from specgate.reports.benchmark import benchmark_stats
from specgate.reports.plots import drift_html, evaluation_plots

SUITES = ("suites/test_sla.py", "suites/test_drift.py")
PNG = b"\x89PNG\r\n\x1a\n"
SLOW = "slowdown=2.0"


def run_gate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*SUITES, "-p", "no:cacheprovider", *args)


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def prom_samples(path: Path) -> list[tuple[str, dict[str, str], float]]:
    text = path.read_text(encoding="utf-8")
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def prom_value(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    found = [v for n, lab, v in samples if n == name and labels.items() <= lab.items()]
    assert len(found) == 1, f"{name} {labels}: {len(found)} samples"
    return found[0]


@pytest.fixture
def project(gate_project: Callable[..., Path]) -> Callable[..., Path]:
    return gate_project


# --- summary.md, metrics.prom and benchmark.json against a known verdict ---------------------------------------


def _assert_passing_summary(summary: str, arms: dict[str, Any]) -> None:
    assert "specgate: **PARTIAL** on `cpu`" in summary
    assert "0 of 6 checks failed" in summary
    assert "### Failed checks" not in summary
    assert re.search(r"^\| fake-pair \| docs \| ar \| .* \| plain decoding \|", summary, re.M)
    spec_row = re.search(r"^\| fake-pair \| docs \| spec \| (\d+) \|.*$", summary, re.M)
    assert spec_row is not None
    assert int(spec_row.group(1)) == round(arms["spec"]["ttft_ms"]["p99"])
    assert "every check that ran passed, but" in summary and "### Not run (deselected)" in summary


def _assert_passing_prometheus(path: Path, arms: dict[str, Any], speedup: float) -> None:
    samples = prom_samples(path)
    assert prom_value(samples, "specgate_verdict_passed", hardware="cpu") == 0.0  # a subset (PARTIAL) is no pass
    checks = [(lab["check"], v) for n, lab, v in samples if n == "specgate_check_passed"]
    assert len(checks) == 6
    assert all(v == 1.0 for _, v in checks)
    where = {"pair": "fake-pair", "workload": "docs", "hardware": "cpu"}
    for arm, speculative in (("ar", "off"), ("spec", "on")):
        p99 = prom_value(samples, "specgate_ttft_seconds", arm=arm, speculative=speculative, stat="p99", **where)
        assert p99 == pytest.approx(arms[arm]["ttft_ms"]["p99"] / 1000)
    measured = prom_value(samples, "specgate_speedup_ratio", speculative="on", estimate="measured")
    assert measured == pytest.approx(speedup)
    assert not [lab for n, lab, _ in samples if n == "specgate_speedup_ratio" and lab["speculative"] == "off"]


def _assert_passing_benchmark(bench: dict[str, Any], arms: dict[str, Any], speedup: float) -> None:
    assert set(bench) >= {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    by_arm = {b["params"]["arm"]: b for b in bench["benchmarks"]}
    assert set(by_arm) == {"ar", "spec"}
    for arm, record in by_arm.items():
        assert record["stats"]["rounds"] == 16  # 8 prompts x 2 repetitions
        assert record["stats"]["mean"] == pytest.approx(arms[arm]["e2el_ms"]["mean"] / 1000)
        assert record["extra_info"]["ttft_ms_p99"] == pytest.approx(arms[arm]["ttft_ms"]["p99"])
    assert by_arm["ar"]["extra_info"]["speculative"] == "off"
    assert by_arm["spec"]["extra_info"]["speedup"]["value"] == pytest.approx(speedup)


def test_passing_run_writes_summary_prometheus_and_benchmark(pytester: pytest.Pytester, project: Any) -> None:
    reports = project() / "reports"
    run_gate(pytester).assert_outcomes(passed=6)
    verdict = load(reports / "verdict.json")
    assert verdict["verdict"] == "PARTIAL"  # the SLA and drift suites: every check passed, the catalogue's rest not run
    assert verdict["failed_checks"] == [] and verdict["errors"] == []
    assert verdict["report_warnings"] == []
    arms = arm_summaries(verdict, "fake-pair", "docs")
    speedup = next(a for a in evaluation_of(verdict, "fake-pair", "docs")["arms"] if a["name"] == "spec")["speedup"]
    _assert_passing_summary((reports / "summary.md").read_text(encoding="utf-8"), arms)
    _assert_passing_prometheus(reports / "metrics.prom", arms, speedup["value"])
    _assert_passing_benchmark(load(reports / "benchmark.json"), arms, speedup["value"])


def test_blocking_run_names_the_failed_check_everywhere(pytester: pytest.Pytester, project: Any) -> None:
    root = project(SLOW)
    result = run_gate(pytester)
    result.assert_outcomes(passed=5, failed=1)
    reports = root / "reports"
    verdict = load(reports / "verdict.json")
    assert verdict["verdict"] == "BLOCK"
    assert verdict["failed_checks"] == ["fake-pair/docs/speedup"]
    message = next(c["message"] for c in verdict["checks"] if c["name"] == "speedup")

    summary = (reports / "summary.md").read_text(encoding="utf-8")
    assert "specgate: **BLOCK** on `cpu`" in summary
    assert "1 of 6 checks failed" in summary
    failed = summary.split("### Failed checks", 1)[1].split("###", 1)[0]
    assert f"| `speedup` | fake-pair / docs | sla | {message} |" in failed
    assert "`p99_ttft`" not in failed
    advice = summary.split("### Recommendation", 1)[1]
    assert "turn speculation off for pair 'fake-pair' on hardware 'cpu'" in advice

    samples = prom_samples(reports / "metrics.prom")
    assert prom_value(samples, "specgate_verdict_passed", hardware="cpu") == 0.0
    assert prom_value(samples, "specgate_check_passed", check="speedup", category="sla") == 0.0
    assert prom_value(samples, "specgate_check_passed", check="p99_ttft") == 1.0
    assert prom_value(samples, "specgate_speedup_ratio", estimate="measured") < 1.15

    means = {b["params"]["arm"]: b["stats"]["mean"] for b in load(reports / "benchmark.json")["benchmarks"]}
    assert means["spec"] > means["ar"]
    result.stdout.fnmatch_lines(["*specgate reports in *: verdict.json, summary.md, metrics.prom, benchmark.json"])


def test_a_failing_report_is_a_warning_never_the_verdict(
    pytester: pytest.Pytester, project: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import specgate.reports

    broken = ("specgate.reports.summary:no_such_writer", *specgate.reports.OPTIONAL_WRITERS)
    monkeypatch.setattr(specgate.reports, "OPTIONAL_WRITERS", broken)
    root = project()
    result = run_gate(pytester)
    verdict = subset_passed(result, root)
    assert verdict["report_warnings"] == [
        "report no_such_writer failed: AttributeError: module 'specgate.reports.summary' has no attribute "
        "'no_such_writer'"
    ]
    assert (root / "reports" / "benchmark.json").is_file()
    result.stdout.fnmatch_lines(["*specgate WARNING: report no_such_writer failed: AttributeError*"])


class _Pushgateway(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(("PUT", self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def pushgateway() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pushgateway)
    _Pushgateway.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_port}", _Pushgateway.received
    server.shutdown()
    server.server_close()
    thread.join()


def test_metrics_are_pushed_when_a_pushgateway_is_named(
    pytester: pytest.Pytester, project: Any, monkeypatch: pytest.MonkeyPatch, pushgateway: Any
) -> None:
    address, received = pushgateway
    monkeypatch.setenv("SPECGATE_PUSHGATEWAY", address)
    project(SLOW)
    run_gate(pytester).assert_outcomes(passed=5, failed=1)
    assert [(method, path) for method, path, _ in received] == [("PUT", "/metrics/job/specgate/hardware/cpu")]
    assert b'specgate_check_passed{category="sla",check="speedup"' in received[0][2]


# --- pytest-benchmark compatibility -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 9, 16, 33])
def test_benchmark_stats_match_pytest_benchmark(n: int) -> None:
    import numpy as np
    from pytest_benchmark.stats import Stats

    samples = list(np.random.default_rng(n).lognormal(0.0, 0.5, size=n))
    samples[-1] *= 10  # an outlier, so the fences matter
    reference = Stats()
    for value in samples:
        reference.update(value)
    ours = benchmark_stats(samples)
    for field in Stats.fields:
        assert ours[field] == pytest.approx(getattr(reference, field)), field
    assert ours["data"] == samples


def test_pytest_benchmark_compare_reads_two_gate_runs(pytester: pytest.Pytester, project: Any) -> None:
    project()
    run_gate(pytester, "--specgate-out=before").assert_outcomes(passed=6)
    pytester.makeconftest(
        (pytester.path / "conftest.py").read_text().replace("FakeBehaviour()", f"FakeBehaviour({SLOW})")
    )
    run_gate(pytester, "--specgate-out=after").assert_outcomes(passed=5, failed=1)
    command = [
        sys.executable,
        "-m",
        "pytest_benchmark",
        "compare",
        "before/benchmark.json",
        "after/benchmark.json",
        "--group-by=group",
        "--columns=min,mean,max,rounds",
    ]
    done = subprocess.run(command, cwd=pytester.path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "e2el[fake-pair-docs-" in line]
    assert len(lines) == 4, done.stdout
    assert {"before", "after"} <= {word for line in lines for word in re.split(r"[\s()/]+", line)}


# --- Allure results ------------------------------------------------------------------------------------------------


def _results(folder: Path, kind: str) -> list[dict[str, Any]]:
    return [load(path) for path in sorted(folder.glob(f"*-{kind}.json"))]


def _assert_labels_and_steps(tests: dict[str, dict[str, Any]]) -> None:
    speedup = tests["test_speedup[fake-pair-docs]"]
    labels = {(label["name"], label["value"]) for label in speedup["labels"]}
    expected = {
        ("epic", "cpu"),
        ("feature", "fake-pair"),
        ("story", "docs"),
        ("parentSuite", "cpu"),
        ("suite", "fake-pair"),
        ("subSuite", "docs"),
    }
    assert expected <= labels
    (step,) = speedup["steps"]
    assert step["name"].startswith("speedup [sla]: FAILED - speedup S ")
    assert step["status"] == "failed"
    parameters = {p["name"]: p["value"] for p in step["parameters"]}
    assert float(parameters["limit"]) == 1.15
    assert float(parameters["observed"]) < 1.15
    assert step["attachments"][0]["name"] == "evidence: speedup"
    assert tests["test_p99_ttft[fake-pair-docs]"]["steps"][0]["status"] == "passed"


def _assert_attachments_once(results_dir: Path) -> None:
    containers = _results(results_dir, "container")
    befores = [b for c in containers for b in c.get("befores", []) if b["name"] == "evaluation"]
    assert len(befores) == 1  # once per pair x workload
    attachments = {a["name"]: a["source"] for a in befores[0]["attachments"]}
    assert set(attachments) == {
        "Metrics per arm",
        "TTFT CDF",
        "TPOT CDF",
        "Acceptance per draft position",
        "Speedup measured vs predicted",
        "Speedup waterfall (cost model)",
        "Drift: first divergences side by side",
    }
    assert (results_dir / attachments["TTFT CDF"]).read_bytes().startswith(PNG)
    assert "<th>spec</th>" in (results_dir / attachments["Metrics per arm"]).read_text(encoding="utf-8")


def _assigned_categories(results_dir: Path, tests: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Which categories each non-passed test falls in, matched as Allure 2 matches (whole message, DOTALL)."""
    known = load(results_dir / "categories.json")
    assigned = {}
    for name, test in tests.items():
        if test["status"] != "passed":
            message = test["statusDetails"]["message"]
            assigned[name] = [
                c["name"]
                for c in known
                if test["status"] in c["matchedStatuses"] and re.fullmatch(c.get("messageRegex", ".*"), message, re.S)
            ]
    return assigned


def test_allure_results_carry_labels_steps_attachments_and_categories(pytester: pytest.Pytester, project: Any) -> None:
    project(f"{SLOW}, wrong_token_at=5")
    run_gate(pytester, "--alluredir=allure").assert_outcomes(passed=4, failed=2)
    results_dir = pytester.path / "allure"
    tests = {r["name"]: r for r in _results(results_dir, "result")}
    _assert_labels_and_steps(tests)
    _assert_attachments_once(results_dir)
    properties = (results_dir / "environment.properties").read_text(encoding="ascii")
    for line in ("hardware=cpu", "engine.fake-pair=fake", "verdict=BLOCK", f"specgate={__version__}"):
        assert f"\n{line}\n" in f"\n{properties}"
    assert "git.commit=" in properties
    assert re.search(r"\nmachine\.fake-pair=.*\(fingerprint [0-9a-f]{12}\)\n", properties), properties
    assert _assigned_categories(results_dir, tests) == {
        "test_speedup[fake-pair-docs]": ["SLA breach"],
        "test_greedy_identity[fake-pair-docs]": ["Drift: output differs from the reference"],
    }


def test_allure_attachment_failure_is_a_warning(
    pytester: pytest.Pytester, project: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import specgate.reports.plots

    def broken(evaluation: Evaluation, *args: Any, **kwargs: Any) -> list[Any]:
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(specgate.reports.plots, "evaluation_plots", broken)
    root = project()
    result = run_gate(pytester, "--alluredir=allure")
    result.assert_outcomes(passed=6)
    subset_passed(result, root)
    result.stdout.fnmatch_lines(["*specgate WARNING: Allure attachments for fake-pair/docs failed: ImportError*"])


def test_categories_match_only_their_own_failures() -> None:
    from specgate.checks import Check, Failure

    checks = [
        Check("p99_ttft", "p", "w", "sla", False, "P99 TTFT 912 ms > SLA 800 ms (n=64; x|y [z] {a} 1+1?)"),
        Check("samples", "p", "w", "infrastructure", False, "BLOCK: cannot measure reliably: arm spec: 3 < 4"),
        Check(
            "regression:ttft_ms",
            "p",
            "w",
            "regression",
            False,
            "REGRESSED: TTFT +12.0% (p=0.001)",
            details={"outcome": "BLOCK"},
        ),
        Check(
            "reference:tpot_ms", "p", "w", "regression", False, "BLOCK: UNKNOWN: +3 %", details={"outcome": "UNKNOWN"}
        ),
        Check(
            "reference:acceptance_rate",
            "p",
            "w",
            "regression",
            False,
            "REGRESSED: acceptance rate 0.7 → 0.5",
            details={"outcome": "BLOCK"},
        ),
        Check("reference:ttft_ms", "p", "w", "regression", True, "PASS: +0.1 %", details={"outcome": "PASS"}),
    ]
    kinds = [c.failure for c in checks]
    assert kinds == [Failure.SLA, Failure.INFRASTRUCTURE, Failure.LATENCY, Failure.UNDECIDED, Failure.ACCEPTANCE, None]
    found = {c["name"]: c.get("messageRegex") for c in categories(checks) if "failed" in c["matchedStatuses"]}
    for check in checks[:-1]:
        matching = [name for name, regex in found.items() if re.fullmatch(regex or ".*", f"Failed: {check.message}")]
        assert matching == [check.failure.heading], (check.message, matching)  # type: ignore[union-attr]
    assert not [name for name, regex in found.items() if re.fullmatch(regex or ".*", "Failed: PASS: +0.1 %")]
    assert literal("a.b(c)") == r"a\.b\(c\)"
    broken = [c for c in categories(checks) if c["matchedStatuses"] == ["broken"]]
    assert broken == [{"name": "Infrastructure error", "matchedStatuses": ["broken"]}]
    # the known shapes of each kind match no other kind's messages (a result falls in one category)
    for kind, shapes in KNOWN_SHAPES.items():
        for shape in shapes:
            matching = [name for name, regex in found.items() if re.fullmatch(regex or ".*", f"{shape}…")]
            assert matching == [kind.heading], (shape, matching)


def test_environment_properties_are_ascii_and_escaped() -> None:
    text = environment_properties({"hardware": "cpu", "pair name": "qwen=7b: τ", "path": "C:\\x"})
    assert text == "hardware=cpu\npair\\ name=qwen\\=7b\\: \\u03c4\npath=C\\:\\\\x\n"
    text.encode("ascii")


# --- plots ---------------------------------------------------------------------------------------------------------


def _evaluation(behaviour: FakeBehaviour) -> Evaluation:
    prompts = [Prompt(f"p{i}", f"prompt {i}", 24) for i in range(4)]
    policy = GatePolicy(repetitions=2, warmup=0)
    return evaluate_fake(FakeEngine(behaviour), prompts, policy, pair="pair", workload="load", gamma=behaviour.gamma)


def test_plots_render_png_for_both_arms_and_drift_side_by_side() -> None:
    plots = evaluation_plots(_evaluation(FakeBehaviour(wrong_token_at=3)), SlaLimits())
    assert [p.name for p in plots] == [
        "TTFT CDF",
        "TPOT CDF",
        "Acceptance per draft position",
        "Speedup measured vs predicted",
        "Speedup waterfall (cost model)",
    ]
    assert all(p.png.startswith(PNG) and len(p.png) > 10_000 for p in plots)
    drift = drift_html(_evaluation(FakeBehaviour(wrong_token_at=3)))
    assert drift is not None
    assert "8 of 8 requests differ" in drift
    assert "<th>ar (reference)</th><th>spec</th>" in drift
    assert drift_html(_evaluation(FakeBehaviour())) is None


# --- the specgate command line ---------------------------------------------------------------------------------


def _fake_allure(folder: Path, exit_code: int = 0) -> Path:
    script = folder / "fake-allure"
    script.write_text(
        "#!/bin/sh\n"
        'echo "$@" > "$(dirname "$0")/args.txt"\n'
        'while [ "$1" != "-o" ]; do shift; done; mkdir -p "$2"; echo "<html></html>" > "$2/index.html"\n'
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)
    return script


def test_report_command_runs_allure_generate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results, out = tmp_path / "results", tmp_path / "html"
    results.mkdir()
    (results / "x-result.json").write_text("{}")
    (out / "history").mkdir(parents=True)
    (out / "history" / "history.json").write_text("{}")
    allure = _fake_allure(tmp_path)
    verdict = str(tmp_path / "verdict.json")
    assert (
        main(["report", "--results", str(results), "--out", str(out), "--allure", str(allure), "--verdict", verdict])
        == 0
    )
    assert (tmp_path / "args.txt").read_text().split() == ["generate", str(results), "-o", str(out), "--clean"]
    assert (results / "history" / "history.json").is_file()  # trends carry over
    assert f"Allure report: {out / 'index.html'}" in capsys.readouterr().out


def test_report_command_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    missing = tmp_path / "verdict.json"
    assert main(["report", "--results", str(results), "--verdict", str(missing)]) == 2
    assert f"neither {missing} nor Allure results in {results}: run the gate first" in capsys.readouterr().err
    (results / "x-result.json").write_text("{}")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SPECGATE_ALLURE", raising=False)
    assert main(["report", "--results", str(results), "--verdict", str(missing)]) == 2
    assert "Allure's command line was not found; install it with scripts/install-report-tools.sh" in (
        capsys.readouterr().err
    )
    failing = _fake_allure(tmp_path, exit_code=3)
    monkeypatch.setenv("SPECGATE_ALLURE", str(failing))
    assert main(["report", "--results", str(results), "--out", str(tmp_path / "o"), "--verdict", str(missing)]) == 1
    assert "failed (exit 3)" in capsys.readouterr().err


def test_cli_has_room_for_other_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "report" in capsys.readouterr().out
    assert build_parser().parse_args(["report"]).handler is report
    from specgate.cli import baseline

    assert build_parser().parse_args(["baseline", "list"]).handler is baseline.run


def test_informational_commands_leave_the_last_verdict_byte_for_byte(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """IDEs run --collect-only all the time: no informational command may overwrite the last real verdict."""
    root = gate_project()
    subset_passed(pytester.runpytest("suites/test_sla.py"), root)
    before = {p: p.read_bytes() for p in (root / "reports").rglob("*") if p.is_file()}
    assert root / "reports" / "verdict.json" in before
    for args in (("--collect-only",), ("--co", "-q"), ("--fixtures",), ("--markers",), ("--fixtures-per-test",)):
        result = pytester.runpytest("suites", *args)
        assert result.ret == pytest.ExitCode.OK, (args, result.stdout.str())
        assert "VERDICT" not in result.stdout.str(), args
        after = {p: p.read_bytes() for p in (root / "reports").rglob("*") if p.is_file()}
        assert after == before, args


def test_the_summary_of_a_blocked_run_names_only_repository_relative_paths(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project(behaviour="slowdown=1.5")
    result = pytester.runpytest("suites")  # no baseline: the regression checks block, naming the baseline file
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    summary = (root / "reports" / "summary.md").read_text()
    assert "baselines/cpu/fake-pair/docs.json" in summary
    assert str(root) not in summary and "/tmp/" not in summary


def test_a_speedup_without_an_interval_says_why_instead_of_printing_nan() -> None:
    """One round of a batched engine is one paired engine call: there is no spread to resample, and the report says
    so (it printed `95% CI nan–nan`)."""
    from specgate.measure.metrics import Speedup
    from specgate.reports.tables import speedup_interval

    one = Speedup("ar", "spec", 1.61, (float("nan"), float("nan")), 1, None, 3, 0.0)
    assert speedup_interval(one) == "no CI: 1 paired engine call"
    assert speedup_interval(Speedup("ar", "spec", 1.61, (1.5, 1.7), 8, None, 3, 0.0)) == "95% CI 1.50–1.70"
