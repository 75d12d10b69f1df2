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


def test_update_writes_baseline_then_same_config_passes(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    first = pytester.runpytest("suites", "--update-baselines")
    assert first.ret == pytest.ExitCode.OK
    stored = load_baseline(root / BASELINE)
    assert set(stored.arms) == {"ar", "spec"}
    assert len(stored.arms["spec"].samples) == 16
    assert stored.record.engine == "fake"
    again = pytester.runpytest("suites", "-p", "no:randomly")
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    again.stdout.fnmatch_lines(["*VERDICT: PASS*"])
    checks = [c for c in _verdict(root)["checks"] if c["category"] == "regression"]  # type: ignore[union-attr]
    assert len(checks) == 8
    statistical = [c for c in checks if c["name"] not in ("regression:acceptance_rate", "regression:output_drift")]
    assert len(statistical) == 6
    assert all("Holm, 6 tests" in c["message"] for c in statistical), [c["message"] for c in statistical]


def test_slower_build_blocks_with_statistics(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    root = gate_project()
    assert pytester.runpytest("suites", "--update-baselines").ret == pytest.ExitCode.OK
    (root / "conftest.py").write_text(
        (root / "conftest.py").read_text().replace("FakeBehaviour()", "FakeBehaviour(slowdown=1.5)")
    )
    result = pytester.runpytest("suites", "-k", "regression")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*REGRESSED: tpot_ms: * → * ms (+*%*Wilcoxon p=*"])
    assert not (root / BASELINE).with_suffix(".json.tmp").exists()


def test_baseline_is_never_written_without_the_flag(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    pytester.runpytest("suites")
    assert not (root / "baselines").exists()


def test_corrupt_baseline_is_a_clear_error_and_is_kept(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    path = root / BASELINE
    path.parent.mkdir(parents=True)
    path.write_text('{"schema_version": 1, "arms": {')
    result = pytester.runpytest("suites", "-k", "regression")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*docs.json: corrupt baseline (not valid JSON*"])
    assert path.read_text() == '{"schema_version": 1, "arms": {'


def test_incompatible_schema_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(
        json.dumps(
            {"schema_version": 99, "hardware": "cpu", "pair": "p", "workload": "w", "arms": {}, "provenance": {}}
        )
    )
    with pytest.raises(BaselineError, match=r"b\.json: baseline schema_version 99, this specgate reads 1"):
        load_baseline(path)


def test_readable_dump_has_one_sample_per_line() -> None:
    doc = {"schema_version": 1, "arms": {"ar": {"samples": [{"key": "a#0", "ttft_ms": 1.5}, {"key": "b#0"}]}}}
    text = dumps_readable(doc)
    assert json.loads(text) == doc
    assert '        {"key": "a#0", "ttft_ms": 1.5},' in text.splitlines()


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
    doc = {"schema_version": 1, "arms": {"ar": {"samples": [{"key": str(i)} for i in range(1000)]}}}
    write_atomic(path, dumps_readable(doc))
    print("done", flush=True)
""")


def _writer(script: Path, path: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(script), str(path), mode], stdout=subprocess.PIPE, text=True)


def test_sigkill_during_update_leaves_old_or_new_never_partial(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    old = dumps_readable({"schema_version": 1, "arms": {}})
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
    assert len(json.loads(path.read_text())["arms"]["ar"]["samples"]) == 1000
