"""Faults in the middle of a gate run: each ends in BLOCK (or a usage error) with the reason, what was measured
and the reason are in reports/, and a stored baseline is left byte for byte as it was.

Engine faults run the real suites through pytester on a FakeEngine that misbehaves from its `FAULT_AT`-th call on
(`SPECGATE_TEST_FAULT` picks how); served faults run the OpenAI engine against local 127.0.0.1 servers; disk faults
make `fsync` fail with ENOSPC or EROFS under one folder, as a full or read-only disk does.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_module

REPO = Path(__file__).resolve().parent.parent
BASELINE = Path("baselines/cpu/fake-pair/docs.json")
PARTIAL = Path("reports/partial/cpu/fake-pair/docs.json")
SUITES = ("suites/test_sla.py", "suites/test_drift.py", "suites/test_regression.py")

FAULTY_CONFTEST = """
import dataclasses
import math
import os

import pytest
from specgate.engines.fake import FakeEngine

FAULT_AT = 5


class FaultyEngine(FakeEngine):
    calls = 0

    def run(self, prompts, arm, *, repetition, load=None):
        FaultyEngine.calls += 1
        fault = os.environ.get("SPECGATE_TEST_FAULT", "none")
        late = FaultyEngine.calls >= FAULT_AT
        if late and fault == "raise":
            raise RuntimeError("engine exploded: device lost")
        if late and fault == "oom":
            raise MemoryError("cannot allocate 2.0 GiB for the KV cache")
        if late and fault == "interrupt":
            raise KeyboardInterrupt
        result = super().run(prompts, arm, repetition=repetition, load=load)
        if not late or fault not in ("nan", "inf", "empty"):
            return result
        bad = {"nan": math.nan, "inf": math.inf}.get(fault)
        traces = tuple(
            dataclasses.replace(t, chunk_times_s=(), chunk_tokens=(), output_ids=(), output_text="")
            if bad is None
            else dataclasses.replace(t, chunk_times_s=tuple(bad for _ in t.chunk_times_s), done_s=bad)
            for t in result.traces
        )
        return dataclasses.replace(result, traces=traces)


def pytest_specgate_run(config, run):
    FaultyEngine.calls = 0
    run.engine_factory = lambda name, base: FaultyEngine(seed=int(os.environ.get("FAKE_SEED", "0")))
"""


def _verdict(root: Path) -> dict[str, Any]:
    verdict: dict[str, Any] = json.loads((root / "reports" / "verdict.json").read_text())
    return verdict


@pytest.fixture
def faulty_project(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> Callable[[], tuple[Path, bytes]]:
    """A gate project with a recorded baseline (a healthy run); returns the root and the baseline's bytes."""

    def make() -> tuple[Path, bytes]:
        root = gate_project()
        (root / "conftest.py").write_text(FAULTY_CONFTEST)
        monkeypatch.setenv("SPECGATE_TEST_FAULT", "none")
        result = pytester.runpytest(*SUITES, "--update-baselines")
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()
        return root, (root / BASELINE).read_bytes()

    return make


ENGINE_FAULTS = {
    # fault: what the verdict must say (a substring of one of its errors or failed checks)
    "raise": "RuntimeError: engine exploded: device lost",
    "oom": "MemoryError: cannot allocate 2.0 GiB for the KV cache",
    "nan": "the engine reported non-finite times (NaN or inf)",
    "inf": "the engine reported non-finite times (NaN or inf)",
    "empty": "15× no output",
}


def _reasons(verdict: dict[str, Any]) -> str:
    return "\n".join([*verdict["errors"], *(c["message"] for c in verdict["checks"] if not c["passed"])])


@pytest.mark.parametrize("fault", sorted(ENGINE_FAULTS))
def test_an_engine_fault_mid_run_blocks_keeps_the_partial_runs_and_the_baseline(
    pytester: pytest.Pytester,
    faulty_project: Callable[[], tuple[Path, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    root, baseline = faulty_project()
    monkeypatch.setenv("SPECGATE_TEST_FAULT", fault)
    for update in ([], ["--update-baselines"]):
        result = pytester.runpytest(*SUITES, *update)
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
        verdict = _verdict(root)
        assert verdict["verdict"] == "BLOCK"
        assert ENGINE_FAULTS[fault] in _reasons(verdict), _reasons(verdict)
        assert (root / BASELINE).read_bytes() == baseline
    if fault in ("raise", "oom"):
        partial = json.loads((root / PARTIAL).read_text())
        assert partial["reason"] == ENGINE_FAULTS[fault]
        assert len(partial["runs"]) >= 1 and partial["runs"][0]["traces"]  # what ran before the fault
        log = (root / "reports" / "errors.log").read_text()
        assert "Traceback (most recent call last)" in log and ENGINE_FAULTS[fault] in log


def test_an_engine_error_is_reported_once_in_two_lines_with_its_remedy(
    pytester: pytest.Pytester, faulty_project: Callable[[], tuple[Path, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = faulty_project()
    monkeypatch.setenv("SPECGATE_TEST_FAULT", "raise")
    result = pytester.runpytest(*SUITES)
    output = result.stdout.str()
    assert "Traceback" not in output and "conftest.py:" not in output, output
    cause = "RuntimeError: engine exploded: device lost"
    first = [i for i, line in enumerate(result.outlines) if line == f"specgate: fake-pair/docs: {cause}"]
    assert len(first) == 1, output
    assert "traceback in reports/errors.log (or run with -v / --tb=long)" in result.outlines[first[0] + 1]
    verdict = _verdict(root)
    errors = [e for e in verdict["errors"] if cause in e]
    assert len(errors) == 1, verdict["errors"]
    assert errors[0].startswith(f"fake-pair/docs: {cause}; ") and "checks could not run" in errors[0]
    assert len([line for line in result.outlines if line.startswith("ERROR fake-pair/docs:")]) == 1
    assert len(result.outlines) < 80, output  # one line per affected check at most, never a traceback each
    verbose = pytester.runpytest(*SUITES, "--tb=long")
    assert "Traceback" in verbose.stdout.str() or "raise RuntimeError" in verbose.stdout.str()


def test_the_library_reports_each_cause_once_too(tmp_path: Path, gate_project: Callable[..., Path]) -> None:
    """`GateRun.run_all()` (no pytest) counts a failed measurement once, with the checks it cost."""
    from specgate.engines.fake import FakeEngine
    from specgate.run import GateOptions, GateRun

    root = gate_project()

    class Broken(FakeEngine):
        def run(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("engine exploded")

    run = GateRun.from_options(GateOptions(config=root / "specgate.yaml"))
    run.engine_factory = lambda name, base: Broken()
    verdict = run.run_all()
    run.finish()
    assert verdict.verdict == "BLOCK"
    mine = [e for e in run.verdict().errors if "engine exploded" in e]
    assert len(mine) == 1 and "checks could not run" in mine[0], run.verdict().errors
    assert "Traceback" in (root / "reports" / "errors.log").read_text()


def test_ctrl_c_during_a_measurement_blocks_with_the_partial_runs(
    pytester: pytest.Pytester, faulty_project: Callable[[], tuple[Path, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, baseline = faulty_project()
    monkeypatch.setenv("SPECGATE_TEST_FAULT", "interrupt")
    result = pytester.runpytest(*SUITES, "--update-baselines", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    verdict = _verdict(root)
    assert verdict["verdict"] == "BLOCK"
    assert any("interrupted" in e for e in verdict["errors"])
    partial = json.loads((root / PARTIAL).read_text())
    assert partial["reason"] == "the session was interrupted during this measurement"
    assert partial["runs"]
    assert (root / BASELINE).read_bytes() == baseline
    result.stdout.fnmatch_lines(["VERDICT: BLOCK*"])


# ---- disks that fill up or refuse writes ---------------------------------------------------------------------------


def _failing_fsync(monkeypatch: pytest.MonkeyPatch, folder: Path, code: int) -> None:
    """`os.fsync` of a file under `folder` fails as a full (ENOSPC) or read-only (EROFS) disk makes it fail."""
    real = os.fsync

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if target.startswith(str(folder)):
            raise OSError(code, os.strerror(code), target)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")


@needs_proc
def test_a_full_disk_while_writing_reports_blocks_and_says_so(
    pytester: pytest.Pytester, faulty_project: Callable[[], tuple[Path, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, baseline = faulty_project()
    shutil.rmtree(root / "reports")
    _failing_fsync(monkeypatch, root / "reports", errno.ENOSPC)
    result = pytester.runpytest(*SUITES, "--update-baselines")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    output = result.stdout.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output
    result.stdout.fnmatch_lines(["VERDICT: BLOCK*", "ERROR run records not written to *reports/runs*No space left*"])
    assert not (root / "reports" / "verdict.json").exists()
    assert (root / BASELINE).read_bytes() == baseline  # a run that could not keep its records is not recorded
    assert not [p for p in (root / "reports").rglob("*") if p.is_file()]  # no partial file left behind


@needs_proc
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["full", "read-only"])
def test_an_unwritable_baseline_folder_during_update_blocks_and_keeps_the_baseline(
    pytester: pytest.Pytester,
    faulty_project: Callable[[], tuple[Path, bytes]],
    monkeypatch: pytest.MonkeyPatch,
    code: int,
) -> None:
    root, baseline = faulty_project()
    _failing_fsync(monkeypatch, root / "baselines", code)
    monkeypatch.setenv("FAKE_SEED", "1")
    result = pytester.runpytest(*SUITES, "--update-baselines")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    verdict = _verdict(root)
    assert verdict["verdict"] == "BLOCK"
    assert any("baseline not updated" in e and os.strerror(code) in e for e in verdict["errors"]), verdict["errors"]
    assert (root / BASELINE).read_bytes() == baseline
    assert not [p.name for p in (root / BASELINE).parent.iterdir() if p.name != "docs.json"]  # no temp file left


def test_a_baseline_corrupted_before_the_run_is_a_usage_error_and_kept(
    pytester: pytest.Pytester, faulty_project: Callable[[], tuple[Path, bytes]]
) -> None:
    root, baseline = faulty_project()
    corrupt = baseline[: len(baseline) // 2]
    (root / BASELINE).write_bytes(corrupt)
    result = pytester.runpytest(*SUITES, "--update-baselines")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*baselines/cpu/fake-pair/docs.json: corrupt baseline (not valid JSON*"])
    assert (root / BASELINE).read_bytes() == corrupt


# ---- served endpoints: 5xx, stalls, refused connections, a server killed mid-stream ------------------------------

SERVED_CONFIG = """
pairs:
  served:
    target: served-model
    engine: openai
    default: true
    speculation:
      method: prompt_lookup
      num_tokens: 4
      options:
        endpoints: {{ar: "{ar}", spec: "{spec}"}}
        api: completions
        timeout_s: 1
        connect_timeout_s: 1
workloads:
  docs:
    path: workloads/docs.jsonl
    max_new_tokens: 6
    default: true
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
"""

SERVED_BASELINE = Path("baselines/cpu/served/docs.json")


@pytest.fixture
def served_project(pytester: pytest.Pytester) -> Callable[[str, str], Path]:
    needs_module("httpx", "pip install 'specgate[openai]'")

    def make(ar: str, spec: str) -> Path:
        root = pytester.path
        shutil.copytree(REPO / "hardware", root / "hardware", dirs_exist_ok=True)
        if not (root / "suites").exists():
            shutil.copytree(REPO / "suites", root / "suites", ignore=shutil.ignore_patterns("__pycache__", "workloads"))
        (root / "workloads").mkdir(exist_ok=True)
        lines = [json.dumps({"id": f"p{i}", "prompt": f"document {i}"}) for i in range(6)]
        (root / "workloads" / "docs.jsonl").write_text("\n".join(lines) + "\n")
        (root / "specgate.yaml").write_text(SERVED_CONFIG.format(ar=ar, spec=spec))
        pytester.makeini("[pytest]\nfilterwarnings =\n    ignore::pytest.PytestAssertRewriteWarning\n")
        return root

    return make


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _stored_baseline(root: Path) -> bytes:
    """A stored baseline of the served pair (its content does not matter: the fault must leave it as it was)."""
    from specgate.store.baselines import Baseline, write_baseline
    from specgate.store.records import RunRecord

    path = root / SERVED_BASELINE
    write_baseline(path, Baseline(path, "cpu", "served", "docs", (RunRecord("cpu", "served", "docs", {}),)))
    return path.read_bytes()


def _served_gate(pytester: pytest.Pytester, root: Path) -> tuple[pytest.RunResult, dict[str, Any], str]:
    result = pytester.runpytest_inprocess(*SUITES, "--update-baselines", "-p", "no:cacheprovider")
    verdict = _verdict(root)
    return result, verdict, _reasons(verdict)


SERVER_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    MODE, PORT = sys.argv[1], int(sys.argv[2])
    posts = 0

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _json(self, status, payload):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self._json(200, {"data": [{"id": "served-model"}]})
            else:
                self._json(404, {})

        def do_POST(self):
            global posts
            self.rfile.read(int(self.headers["Content-Length"]))
            posts += 1
            if MODE == "5xx" and posts > 3:
                self._json(503, {"error": {"message": "overloaded"}})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(6):
                if MODE == "stall" and posts > 3 and i == 2:
                    time.sleep(30)
                if MODE == "die" and posts > 3 and i == 2:
                    print("dying", flush=True)
                    import os; os._exit(9)  # the server process is killed mid-stream
                chunk = {"choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if i == 5 else None}]}
                data = f"data: {json.dumps(chunk)}\\n\\n".encode()
                self.wfile.write(f"{len(data):x}\\r\\n".encode() + data + b"\\r\\n")
                self.wfile.flush()
                time.sleep(0.005)
            data = b"data: [DONE]\\n\\n"
            self.wfile.write(f"{len(data):x}\\r\\n".encode() + data + b"\\r\\n0\\r\\n\\r\\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()
""")


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Start a separate server process (a stand-in for vLLM's) that misbehaves as told; killed at teardown."""
    started: list[subprocess.Popen[str]] = []
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)

    def start(mode: str) -> str:
        port = _free_port()
        proc = subprocess.Popen([sys.executable, str(script), mode, str(port)], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


SERVED_FAULTS = {
    # fault: the reason the verdict must give
    "5xx": "HTTP 503 Service Unavailable",
    "stall": "read timeout: the server sent nothing for 1 s",
    "die": "cannot connect to the server: ConnectionRefusedError",  # the requests after the one it died in
}


@pytest.mark.parametrize("fault", sorted(SERVED_FAULTS))
def test_a_server_that_fails_mid_run_blocks_with_the_reason_and_keeps_the_baseline(
    pytester: pytest.Pytester,
    served_project: Callable[[str, str], Path],
    server_process: Callable[[str], str],
    fault: str,
) -> None:
    root = served_project(server_process("healthy"), server_process(fault))
    baseline = _stored_baseline(root)
    result, verdict, reasons = _served_gate(pytester, root)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert verdict["verdict"] == "BLOCK"
    assert SERVED_FAULTS[fault] in reasons, reasons
    assert (root / SERVED_BASELINE).read_bytes() == baseline
    assert "Traceback" not in result.stdout.str()


def test_connection_refused_blocks_with_the_reason_and_keeps_the_baseline(
    pytester: pytest.Pytester, served_project: Callable[[str, str], Path], server_process: Callable[[str], str]
) -> None:
    root = served_project(server_process("healthy"), f"http://127.0.0.1:{_free_port()}")
    baseline = _stored_baseline(root)
    result, verdict, reasons = _served_gate(pytester, root)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert verdict["verdict"] == "BLOCK"
    assert "does not answer (ConnectError" in reasons and "Start the server" in reasons, reasons
    assert (root / SERVED_BASELINE).read_bytes() == baseline
    assert (root / "reports" / "errors.log").is_file()
