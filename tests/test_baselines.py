"""Baseline store and comparison mode, end to end on the FakeEngine (pytester), plus atomic writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specgate.errors import BaselineError
from specgate.store.baselines import dumps_readable, load_baseline

BASELINE = Path("baselines/cpu/fake-pair/docs.json")


def _verdict(root: Path) -> dict[str, object]:
    return json.loads((root / "reports" / "verdict.json").read_text())


def test_missing_baseline_blocks_with_the_fix(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    gate_project()
    result = pytester.runpytest("suites", "-k", "regression")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*BLOCK: no baseline for cpu/fake-pair/docs (*docs.json) — run the reference build with --update-baselines*"]
    )
    _assert_only_baseline_advice(result.stdout.str())


def _assert_only_baseline_advice(output: str) -> None:
    """The outputs and acceptance checks of a run without a usable baseline block for the baseline: the advice says
    so, never that acceptance dropped or outputs changed."""
    advice = [line for line in output.splitlines() if line.startswith("RECOMMENDATION:")]
    assert any(line.startswith("RECOMMENDATION: baseline problem on fake-pair/docs: BLOCK: ") for line in advice)
    assert not any("acceptance dropped" in line or "outputs changed" in line for line in advice), advice


def _record(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, seeds: range) -> None:
    """Record one baseline run per seed (runs of the same build minutes apart: other timing noise)."""
    for seed in seeds:
        monkeypatch.setenv("FAKE_SEED", str(seed))
        result = pytester.runpytest("suites", "--update-baselines")
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()


def _regression_checks(root: Path) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _verdict(root)["checks"] if c["category"] == "regression"}  # type: ignore[union-attr]


def test_update_writes_a_fingerprinted_baseline_and_latency_waits_for_a_history(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project()
    _record(pytester, monkeypatch, range(1))
    stored = load_baseline(root / BASELINE)
    (run,) = stored.runs
    assert set(run.arms) == {"ar", "spec"} and len(run.arms["spec"].samples) == 16
    assert run.engine == "fake" and run.fingerprint is not None and run.fingerprint.cpu
    monkeypatch.setenv("FAKE_SEED", "99")
    again = pytester.runpytest("suites")
    assert again.ret == pytest.ExitCode.TESTS_FAILED  # fail closed: one run says nothing about this machine's drift
    checks = _regression_checks(root)
    assert checks["regression:acceptance_rate"]["passed"] and checks["regression:output_drift"]["passed"]
    latency = [c for name, c in checks.items() if name.endswith(("_ms", "speedup"))]
    assert latency and all(not c["passed"] for c in latency)
    assert all("only 1 run(s) of this machine are stored; 3 are needed" in c["message"] for c in latency)
    assert not any("REGRESSED" in c["message"] for c in checks.values())


def test_with_three_runs_of_a_steady_machine_the_same_build_passes_and_a_slower_one_blocks(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project(behaviour="noise_cv=0.01")  # runs differ by ≈ 0.2 %: a quiet, dedicated machine
    _record(pytester, monkeypatch, range(3))
    assert len(load_baseline(root / BASELINE).runs) == 3
    monkeypatch.setenv("FAKE_SEED", "99")
    same = pytester.runpytest("suites")
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()
    ttft = _regression_checks(root)["regression:ttft_ms"]
    assert "against 3 runs of this machine" in ttft["message"] and "would catch ≥" in ttft["message"]
    conftest = root / "conftest.py"
    conftest.write_text(conftest.read_text().replace("noise_cv=0.01", "noise_cv=0.01, slowdown=1.5"))
    slower = pytester.runpytest("suites", "-k", "regression")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED
    slower.stdout.fnmatch_lines(["FAILED fake-pair/docs/regression:tpot_ms: REGRESSED: +4[89].*"])
    assert "against 3 runs of this machine" in _regression_checks(root)["regression:tpot_ms"]["message"]


def test_a_history_too_noisy_to_bound_the_tolerance_blocks_and_says_what_would_decide(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project(behaviour="noise_cv=0.3")  # a busy shared machine: runs differ by several percent
    _record(pytester, monkeypatch, range(3))
    monkeypatch.setenv("FAKE_SEED", "99")
    result = pytester.runpytest("suites", "-k", "regression")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    undecided = [c for c in _regression_checks(root).values() if c.get("details", {}).get("outcome") == "UNKNOWN"]
    assert undecided, "a 30 % per-request noise over 3 runs cannot bound a 5 % tolerance"
    for check in undecided:
        assert check["message"].startswith("BLOCK: UNKNOWN"), check["message"]
        assert "stored runs to decide" in check["message"] or "differ too much" in check["message"]
        assert "--reference=PAIR" in check["message"]


def test_each_machine_keeps_its_last_history_runs(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project()  # runs differ by ≈ 1 %: with 2 runs the history cannot decide, and update runs record
    config = root / "specgate.yaml"
    config.write_text(config.read_text().replace("gate:\n", "gate:\n  history_runs: 2\n  min_history_runs: 2\n"))
    _record(pytester, monkeypatch, range(3))
    runs = load_baseline(root / BASELINE).runs
    assert len(runs) == 2 and runs[0].recorded_at <= runs[1].recorded_at


def _foreign(path: Path) -> None:
    """Make the stored run look recorded on another machine (an Intel Xeon without AVX-512)."""
    document = json.loads(path.read_text())
    for run in document["runs"]:
        run["fingerprint"]["cpu"] = "Intel(R) Xeon(R) CPU @ 2.00GHz"
        run["fingerprint"]["cpu_flags"] = ["sse4_2", "avx", "avx2", "fma", "f16c"]
    path.write_text(json.dumps(document))


def test_a_baseline_of_another_machine_compares_no_latency_but_everything_else(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project()
    _record(pytester, monkeypatch, range(3))
    _foreign(root / BASELINE)
    result = pytester.runpytest("suites")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    checks = _regression_checks(root)
    assert not any("REGRESSED" in c["message"] for c in checks.values())
    latency = checks["regression:tpot_ms"]["message"]
    assert "latency not comparable — baseline recorded on Intel(R) Xeon(R) CPU @ 2.00GHz" in latency
    assert "this machine is " in latency and "cpu: Intel(R) Xeon(R) CPU @ 2.00GHz ≠ " in latency
    assert "--update-baselines" in latency and "--reference=PAIR" in latency
    result.stdout.fnmatch_lines(["RECOMMENDATION: no latency baseline of this machine for fake-pair/docs: record*"])
    for name in ("regression:acceptance_rate", "regression:output_drift"):
        assert checks[name]["passed"], checks[name]["message"]
    config = root / "specgate.yaml"
    config.write_text(config.read_text().replace("gate:\n", "gate:\n  latency_baseline: optional\n"))
    optional = pytester.runpytest("suites")
    assert optional.ret == pytest.ExitCode.OK, optional.stdout.str()
    assert "not gated (latency_baseline: optional)" in _regression_checks(root)["regression:tpot_ms"]["message"]


def test_a_baseline_of_another_engine_is_no_reference_for_outputs_or_latency(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's kernels are not transformers': a changed output against the other engine's baseline is not drift."""
    root = gate_project()
    _record(pytester, monkeypatch, range(1))
    path = root / BASELINE
    document = json.loads(path.read_text())
    for run in document["runs"]:
        run["fingerprint"]["engine"] = "vllm"
    path.write_text(json.dumps(document))
    result = pytester.runpytest("suites/test_regression.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    checks = _regression_checks(root)
    assert not any("REGRESSED" in c["message"] for c in checks.values())
    for name in ("regression:output_drift", "regression:acceptance_rate"):
        message = checks[name]["message"]
        assert "outputs and acceptance not comparable — the baseline was recorded with vllm (float32)" in message
        assert "this run uses fake (tests only) (float32)" in message
        assert "--pair=fake-pair --engine=fake --update-baselines" in message  # recorded with this run's engine


def test_a_blocked_run_never_becomes_the_baseline(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    root = gate_project(behaviour="slowdown=3.0, acceptance=0.2")  # speculation does not pay: the SLA blocks
    result = pytester.runpytest("suites", "--update-baselines")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not (root / BASELINE).exists()
    assert any("no baseline was written, because the run blocked" in e for e in _verdict(root)["errors"])  # type: ignore[union-attr]


def test_baseline_is_never_written_without_the_flag(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    pytester.runpytest("suites")
    assert not (root / "baselines").exists()


def test_corrupt_baseline_is_a_clear_error_and_is_kept_even_by_an_update(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    path = root / BASELINE
    path.parent.mkdir(parents=True)
    path.write_text('{"schema_version": 2, "runs": [')
    result = pytester.runpytest("suites", "-k", "regression")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # found at configure time, before any engine starts
    result.stderr.fnmatch_lines(["*baselines/cpu/fake-pair/docs.json: corrupt baseline (not valid JSON*"])
    pytester.runpytest("suites", "--update-baselines")
    assert path.read_text() == '{"schema_version": 2, "runs": ['


def test_a_history_file_of_another_schema_is_a_clear_error_and_nothing_is_replaced(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    path = root / BASELINE
    path.parent.mkdir(parents=True)
    old = json.dumps({"schema_version": 1, "hardware": "cpu", "pair": "fake-pair", "workload": "docs", "arms": {}})
    path.write_text(old)
    with pytest.raises(BaselineError, match=r"docs\.json: baseline schema_version 1, this specgate reads 2, 3"):
        load_baseline(path)
    result = pytester.runpytest("suites", "--update-baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*baseline schema_version 1, this specgate reads 2, 3*delete it (git rm FILE)*"])
    assert path.read_text() == old


def test_a_baseline_of_another_pair_is_refused(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project()
    _record(pytester, monkeypatch, range(1))
    moved = root / "baselines" / "cpu" / "other-pair" / "docs.json"
    moved.parent.mkdir(parents=True)
    (root / BASELINE).rename(moved)
    with pytest.raises(BaselineError, match="holds the baseline of cpu/fake-pair/docs, not cpu/other-pair/docs"):
        load_baseline(moved, ("cpu", "other-pair", "docs"))


def test_readable_dump_has_one_sample_per_line() -> None:
    doc = {
        "schema_version": 2,
        "runs": [{"arms": {"ar": {"samples": [{"key": "a#0", "ttft_ms": 1.5}, {"key": "b#0"}]}}}],
    }
    text = dumps_readable(doc)
    assert json.loads(text) == doc
    assert '  {"key": "a#0", "ttft_ms": 1.5},' in text.splitlines()


WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from specgate.store.atomic import write_atomic
    from specgate.store.baselines import dumps_readable
    path, stall = Path(sys.argv[1]), sys.argv[2] == "stall"
    real_fsync = os.fsync
    def fsync(fd):
        real_fsync(fd)
        if stall:  # the data is in the temp file; hold here so the kill lands mid-update
            print("writing", flush=True)
            time.sleep(60)
    os.fsync = fsync
    doc = {"schema_version": 2, "runs": [{"arms": {"ar": {"samples": [{"key": str(i)} for i in range(1000)]}}}]}
    write_atomic(path, dumps_readable(doc))
    print("done", flush=True)
""")


def _writer(script: Path, path: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(script), str(path), mode], stdout=subprocess.PIPE, text=True)


def test_sigkill_during_update_leaves_old_or_new_never_partial(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    old = dumps_readable({"schema_version": 2, "runs": []})
    path.write_text(old)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    with _writer(script, path, "stall") as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert path.read_text() == old
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".baseline.json.")]  # the killed write's temp
    with _writer(script, path, "finish") as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
    assert len(json.loads(path.read_text())["runs"][0]["arms"]["ar"]["samples"]) == 1000


def test_an_acceptance_drop_against_the_baseline_blocks_with_its_advice(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project()
    _record(pytester, monkeypatch, range(1))
    conftest = root / "conftest.py"
    conftest.write_text(conftest.read_text().replace("FakeBehaviour()", "FakeBehaviour(acceptance=0.6, draft=1)"))
    result = pytester.runpytest("suites/test_regression.py", "-k", "acceptance")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    check = _regression_checks(root)["regression:acceptance_rate"]
    assert check["details"]["outcome"] == "BLOCK", check["message"]
    result.stdout.fnmatch_lines(
        ["RECOMMENDATION: acceptance dropped on fake-pair/docs (REGRESSED: *keep the released*"]
    )
