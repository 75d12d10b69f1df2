"""The vllm engine's servers, with a stand-in server process (`tests/standin/vllm_standin.py`: vLLM's command line
and routes, no model): start and health, per-request runs through the openai client with each server's own
counters, one server for arms of the same configuration, renewal between rounds, stopping (the whole process group,
also when the gate process is killed), port conflicts, the slowdown plugin's entry point, and the usage error for
`--inject-slowdown` on the openai engine. Real vLLM servers are measured by `scripts/vllm_aa.py`, not here."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specgate.config import GatePolicy, Speculation, load_hardware_profile
from specgate.engines.base import Prompt, RenewsInstances
from specgate.engines.server_process import FATAL, ServerProcess, guard_fatal_signals, stop_all
from specgate.engines.vllm_servers import SETTLE_S, VllmServerEngine, identity
from specgate.engines.vllm_slowdown import MARKER, slowed
from specgate.errors import EngineUnavailableError, MeasurementError
from specgate.measure.progress import ProgressLines
from specgate.measure.protocol import measure_plan
from specgate.plan import Arm, MeasurementPlan

REPO = Path(__file__).resolve().parent.parent
STANDIN = "vllm_standin"
HARDWARE = load_hardware_profile("cpu", REPO / "hardware")
NGRAM = Speculation("prompt_lookup", 3, max_ngram=3)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    return folder


@pytest.fixture
def pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in importable by `python -m`, and the file its processes write their pids to."""
    path = tmp_path / "pids"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "tests" / "standin"), str(REPO)]))
    monkeypatch.setenv("STANDIN_PIDS", str(path))
    monkeypatch.delenv("STANDIN_MODE", raising=False)
    return path


def _arm(name: str, folder: Path, *, pair: str = "cand", spec: bool = True, slowdown: float = 0.0) -> Arm:
    variant = name.removeprefix("ref-")
    return Arm(name, variant, pair, name.startswith("ref-"), str(folder), NGRAM if spec else None, "float32",
               slowdown=slowdown)  # fmt: skip


def _engine(tmp_path: Path, arms: list[Arm], **kwargs: object) -> VllmServerEngine:
    kwargs.setdefault("settle_s", 0.0)  # no wait between servers unless a test is about it
    engine = VllmServerEngine(None, module=STANDIN, log_dir=tmp_path / "logs", ready_timeout_s=60, **kwargs)  # type: ignore[arg-type]
    engine.load(arms, HARDWARE)
    return engine


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _gone(pids: list[int], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


PROMPTS = [Prompt(f"p{i}", f"document {i}", 5) for i in range(3)]


def test_arms_of_one_configuration_share_a_server_and_counters_are_each_servers_own(
    tmp_path: Path, model: Path, pids: Path
) -> None:
    arms = [_arm("ar", model, spec=False), _arm("spec", model), _arm("ref-spec", model, pair="ref")]
    engine = _engine(tmp_path, arms)
    try:
        assert isinstance(engine, RenewsInstances) and engine.per_request
        assert identity(engine._instance("spec").setup) == identity(engine._instance("ref-spec").setup)
        runs = {arm.name: engine.run(PROMPTS[:1], arm.name, repetition=0) for arm in arms}
        assert engine.starts() == {"ar": 1, "spec+ref-spec": 1}
        assert len(_pids(pids)) == 2
        assert runs["ar"].counters is None  # plain decoding: no spec-decode counters on its server
        for name in ("spec", "ref-spec"):  # each run's own difference on the shared server: one request's worth
            counters = runs[name].counters
            assert counters is not None and (counters.num_drafts, counters.num_accepted_tokens) == (2, 3)
        assert runs["spec"].traces[0].instance == runs["ref-spec"].traces[0].instance == "spec+ref-spec#1"
        assert runs["ar"].traces[0].instance == "ar#1"
        assert [t.output_tokens for t in runs["spec"].traces] == [5]
        from specgate.measure.samples import arm_samples

        (sample,) = arm_samples((runs["ref-spec"],)).samples  # a one-request run: the server's totals are its own
        assert (sample.drafted, sample.accepted) == (6, 3)
        notes = engine.instance_notes()
        assert any("spec and ref-spec are the same configuration" in n and "one vLLM server" in n for n in notes)
    finally:
        engine.close()
    assert _gone(_pids(pids))


def test_a_request_goes_to_another_cpu_server_only_once_the_last_one_has_stopped_polling(
    tmp_path: Path, model: Path, pids: Path
) -> None:
    engine = _engine(tmp_path, [_arm("ar", model, spec=False), _arm("spec", model)], settle_s=None)
    waits: list[float] = []
    engine._wait = waits.append  # type: ignore[assignment]
    try:
        for arm in ("ar", "ar", "spec", "spec", "ar"):
            engine.run(PROMPTS[:1], arm, repetition=0)
        # two switches (ar → spec, spec → ar); the second follows its server's request at once, so it waits
        assert len(engine._settled) == 2
        assert waits and 0 < waits[-1] <= SETTLE_S
        assert any("switched servers 2 times" in n for n in engine.instance_notes())
        engine._hardware = dataclasses.replace(HARDWARE, backend="cuda", device="cuda:0")
        engine.run(PROMPTS[:1], "spec", repetition=0)  # an accelerator's servers poll on cores of their own
        assert len(engine._settled) == 2
    finally:
        engine.close()


def test_a_measured_call_finds_its_server_started_warm_and_settled_before_the_machine_is_read(
    tmp_path: Path, model: Path, pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readings of the machine around a measured call (pressure, steal, other processes' CPU) cover the request
    only: a server's start, its warm-up and the wait for the last server to go idle happen before them. The server's
    processes count as the gate's own, not as other work."""
    from specgate.engines.server_process import live_groups
    from specgate.measure import protocol

    engine = _engine(tmp_path, [_arm("ar", model, spec=False), _arm("spec", model)], settle_s=0.3)
    seen: list[tuple[dict[str, int], float, int, frozenset[int]]] = []
    real = protocol.read_pressure

    def reading():  # type: ignore[no-untyped-def]
        seen.append((engine.starts(), engine.setup_s, len(engine._settled), live_groups()))
        return real()

    monkeypatch.setattr(protocol, "read_pressure", reading)
    try:
        ar = protocol.timed_run(engine, PROMPTS[:1], "ar", 0, None)
        spec = protocol.timed_run(engine, PROMPTS[:1], "spec", 0, None)
    finally:
        engine.close()
    (ar_before, ar_after), (spec_before, spec_after) = seen[:2], seen[2:]
    assert ar_before[0] == {"ar": 1, "spec": 0} and ar_before[1] > 0  # started and warmed before the first reading
    assert spec_before[0] == {"ar": 1, "spec": 1} and spec_before[2] == 1  # the switch's wait too
    assert ar_after[1:3] == ar_before[1:3] and spec_after[1:3] == spec_before[1:3]  # nothing of it inside
    assert len(spec_before[3]) == 2  # both servers' groups are the gate's own
    assert ar.others_s is not None and spec.others_s is not None
    assert ar.others_s <= ar.wall_s and spec.others_s <= spec.wall_s


def test_a_different_configuration_gets_its_own_server(tmp_path: Path, model: Path, pids: Path) -> None:
    arms = [_arm("spec", model, slowdown=0.1), _arm("ref-spec", model, pair="ref")]
    engine = _engine(tmp_path, arms)
    try:
        assert identity(engine._instance("spec").setup) != identity(engine._instance("ref-spec").setup)
        assert engine.starts() == {"spec": 0, "ref-spec": 0}
    finally:
        engine.close()


def test_the_measurement_renews_every_server_so_each_arm_has_two_instances(
    tmp_path: Path, model: Path, pids: Path
) -> None:
    arms = (_arm("ar", model, spec=False), _arm("spec", model), _arm("ref-spec", model, pair="ref"))
    engine = _engine(tmp_path, list(arms))
    plan = MeasurementPlan("cand", "w", arms, (("spec", "ar"),), beside=(("spec", "ref-spec"),), reference="ref")
    try:
        measurement = measure_plan(engine, plan, PROMPTS, GatePolicy(repetitions=2, warmup=0), hardware="cpu")
        assert engine.starts() == {"ar": 2, "spec+ref-spec": 2}
    finally:
        engine.close()
    by_round = {(t.arm, t.repetition): t.instance for runs in measurement.runs.values() for r in runs for t in r.traces}
    assert by_round[("spec", 0)] == by_round[("ref-spec", 0)] == "spec+ref-spec#1"
    assert by_round[("spec", 1)] == by_round[("ref-spec", 1)] == "spec+ref-spec#2"
    assert by_round[("ar", 0)] != by_round[("ar", 1)]
    assert any("2 instance(s)" in n for n in measurement.instances)
    assert len(_pids(pids)) == 4 and _gone(_pids(pids))


def test_the_progress_lines_say_when_each_server_starts_and_leave_its_start_out_of_the_estimate(
    tmp_path: Path, model: Path, pids: Path
) -> None:
    arms = (_arm("ar", model, spec=False), _arm("spec", model))
    engine = _engine(tmp_path, list(arms))
    plan = MeasurementPlan("cand", "w", arms, (("spec", "ar"),))
    lines: list[str] = []
    setups: list[float] = []

    class Heard(ProgressLines):
        def unit_done(self, plan, round_index, done, planned, work=None, setup_s=0.0):  # type: ignore[no-untyped-def]
            setups.append(setup_s)

    progress = Heard(lambda text, final: lines.append(text), live=False)
    try:
        measure_plan(engine, plan, PROMPTS, GatePolicy(repetitions=2, warmup=0), hardware="cpu", progress=progress)
        assert engine.announce is None  # only while its measurement runs
    finally:
        engine.close()
    said = [line.removeprefix("specgate: cand / w: ") for line in lines if "vLLM server" in line]
    assert sorted(said[0::2]) == [  # two servers, each started twice (the renewal before round 2)
        f"starting the vLLM server of {arm} (instance {n})" for arm in ("ar", "spec") for n in (1, 2)
    ]
    assert len(said) == 8
    for start, up in zip(said[0::2], said[1::2], strict=True):  # each start, then the same server up
        assert up.startswith(f"the vLLM server of {start.split()[5]} is up after ")
    assert setups[0] > 0 and setups[-1] >= setups[0] and setups[-1] == pytest.approx(engine.setup_s)


def test_close_stops_the_whole_process_group_even_a_child_that_ignores_sigterm(
    tmp_path: Path, model: Path, pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_MODE", "child")
    monkeypatch.setattr("specgate.engines.server_process.STOP_TIMEOUT_S", 3.0)
    engine = _engine(tmp_path, [_arm("spec", model)])
    engine.run(PROMPTS[:1], "spec", repetition=0)
    started = _pids(pids)
    assert len(started) == 2 and all(_alive(p) for p in started)
    engine.close()
    assert _gone(started)


def _gate_script(tmp_path: Path, model: Path, then: str) -> Path:
    """A gate process for the lifecycle tests: a vllm engine on the stand-in with one arm, then the code `then`."""
    script = tmp_path / "gate.py"
    head = f"""
        import sys, threading, time
        from pathlib import Path
        sys.path[:0] = [{str(REPO / "tests")!r}, {str(REPO)!r}]
        from test_vllm_servers import HARDWARE, _arm
        from specgate.engines import server_process
        from specgate.engines.vllm_servers import VllmServerEngine
        engine = VllmServerEngine(None, module="vllm_standin", log_dir=Path({str(tmp_path / "logs")!r}))
        engine.load([_arm("spec", Path({str(model)!r}))], HARDWARE)
    """
    script.write_text(textwrap.dedent(head) + textwrap.dedent(then))
    return script


def _deaf_server(pids: Path, gate: subprocess.Popen[str]) -> list[int]:
    """The stand-in the gate is starting, once it has set SIGTERM aside (`deaf-start`)."""
    server: list[int] = []
    deadline = time.monotonic() + 60
    while not server and time.monotonic() < deadline and gate.poll() is None:
        time.sleep(0.1)
        server = _pids(pids)
    assert len(server) == 1 and _alive(server[0])
    time.sleep(1.0)
    return server


def _kill(pids: Path, gate: subprocess.Popen[str]) -> None:
    """Whatever a failed test left running."""
    for pid in _pids(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if gate.poll() is None:
        gate.kill()


def test_a_killed_gate_process_leaves_no_server_behind(tmp_path: Path, model: Path, pids: Path) -> None:
    then = """
        engine._ensure_started(engine._instance("spec"))
        print("ready", flush=True)
        time.sleep(600)
    """
    script = _gate_script(tmp_path, model, then)
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True) as gate:
        try:
            assert gate.stdout is not None and gate.stdout.readline().strip() == "ready"
            server = _pids(pids)
            assert len(server) == 1 and _alive(server[0])
        finally:
            gate.send_signal(signal.SIGKILL)
    assert _gone(server)


def test_a_gate_terminated_while_a_server_starts_stops_that_server(tmp_path: Path, model: Path, pids: Path) -> None:
    """A CI job cancelled during a server's start: SIGTERM to the gate, while the server ignores SIGTERM (as a
    starting vLLM server does, so the kernel's death signal does not end it). The gate stops it and dies of SIGTERM."""
    script = _gate_script(tmp_path, model, 'engine._ensure_started(engine._instance("spec"))\n')
    env = {**os.environ, "STANDIN_MODE": "deaf-start"}
    with subprocess.Popen([sys.executable, str(script)], env=env, text=True) as gate:
        try:
            server = _deaf_server(pids, gate)
            gate.send_signal(signal.SIGTERM)
            assert gate.wait(timeout=60) == -signal.SIGTERM
            assert _gone(server)
        finally:
            _kill(pids, gate)


def test_a_gate_killed_while_a_server_starts_leaves_no_server_behind(tmp_path: Path, model: Path, pids: Path) -> None:
    """SIGKILL to the gate (no handler runs) while its server starts and ignores SIGTERM: the watchdog ends it."""
    then = """
        threading.Thread(target=engine._ensure_started, args=(engine._instance("spec"),), daemon=True).start()
        while not server_process._LIVE:
            time.sleep(0.05)
        print(server_process._watchdog.pid if server_process._watchdog else 0, flush=True)
        time.sleep(600)
    """
    env = {**os.environ, "STANDIN_MODE": "deaf-start"}
    script = _gate_script(tmp_path, model, then)
    with subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True) as gate:
        try:
            assert gate.stdout is not None
            watchdog = int(gate.stdout.readline())
            server = _deaf_server(pids, gate)
            gate.kill()
            assert gate.wait(timeout=60) == -signal.SIGKILL
            assert _gone(server)
            assert watchdog and _gone([watchdog])
        finally:
            _kill(pids, gate)


def test_the_fatal_signal_guard_keeps_a_handler_someone_else_set() -> None:
    def mine(signum: int, frame: object) -> None:
        pass

    saved = {s: signal.getsignal(s) for s in FATAL}
    try:
        signal.signal(signal.SIGTERM, mine)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        guard_fatal_signals()
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def test_a_port_taken_meanwhile_is_retried_on_another(
    tmp_path: Path, model: Path, pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    monkeypatch.setenv("STANDIN_MODE", "port-taken")
    monkeypatch.setenv("STANDIN_TAKEN", str(taken))
    engine = _engine(tmp_path, [_arm("spec", model)])
    try:
        run = engine.run(PROMPTS[:1], "spec", repetition=0)
        assert run.traces[0].ok and engine._instance("spec").server.attempts == 2  # type: ignore[union-attr]
    finally:
        engine.close()


def test_a_foreign_server_on_the_port_is_not_taken_for_ours(tmp_path: Path, pids: Path) -> None:
    foreign = ServerProcess("foreign", lambda port, name: [sys.executable, "-m", STANDIN, "--port", str(port),
                            "--served-model-name", name], log_dir=tmp_path, ready_timeout_s=30)  # fmt: skip
    foreign.start()
    try:
        ours = ServerProcess("ours", lambda port, name: [sys.executable, "-c", "import time; time.sleep(600)"],
                             log_dir=tmp_path, port=lambda: foreign.port, ready_timeout_s=3)  # fmt: skip
        with pytest.raises(EngineUnavailableError, match="not ready within 3 s"):
            ours.start()
        assert not ours.alive
    finally:
        foreign.stop()


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        # the server's own reason on the first line, the line a user reads in the terminal
        (
            "exit",
            r"exited with status 1 before it was ready \(Value error, Total number of attention heads \(9\) must "
            r"be divisible by tensor parallel size \(2\)\.\); its log ends:\n",
        ),
        ("never-ready", "not ready within"),
    ],
)
def test_a_server_that_does_not_start_fails_with_its_log(
    tmp_path: Path, model: Path, pids: Path, monkeypatch: pytest.MonkeyPatch, mode: str, message: str
) -> None:
    monkeypatch.setenv("STANDIN_MODE", mode)
    engine = VllmServerEngine(None, module=STANDIN, log_dir=tmp_path / "logs", ready_timeout_s=3)
    engine.load([_arm("spec", model)], HARDWARE)
    with pytest.raises(EngineUnavailableError, match=message):
        engine.run(PROMPTS[:1], "spec", repetition=0)
    engine.close()
    assert _gone(_pids(pids))


def test_a_server_that_dies_between_runs_fails_the_measurement_with_its_log(
    tmp_path: Path, model: Path, pids: Path
) -> None:
    engine = _engine(tmp_path, [_arm("spec", model)])
    try:
        engine.run(PROMPTS[:1], "spec", repetition=0)
        os.kill(_pids(pids)[0], signal.SIGKILL)
        assert _gone(_pids(pids))
        with pytest.raises(MeasurementError, match="died"):
            engine.run(PROMPTS[:1], "spec", repetition=0)
    finally:
        engine.close()


def test_stop_all_stops_every_live_server(tmp_path: Path, model: Path, pids: Path) -> None:
    engine = _engine(tmp_path, [_arm("ar", model, spec=False), _arm("spec", model)])
    engine.run(PROMPTS[:1], "ar", repetition=0)
    engine.run(PROMPTS[:1], "spec", repetition=0)
    stop_all()  # what atexit runs, also after a KeyboardInterrupt
    assert _gone(_pids(pids))
    engine.close()


def test_the_slowed_arm_loads_the_plugin_through_its_entry_point(tmp_path: Path, model: Path, pids: Path) -> None:
    engine = _engine(tmp_path, [_arm("spec", model, slowdown=0.1), _arm("ref-spec", model, pair="ref")])
    try:
        engine.run(PROMPTS[:1], "spec", repetition=0)
        engine.run(PROMPTS[:1], "ref-spec", repetition=0)
        logs = {p.name: p.read_text() for p in (tmp_path / "logs").glob("*.log")}
        assert MARKER in logs["spec-1-1.log"] and MARKER not in logs["ref-spec-1-1.log"]
    finally:
        engine.close()


def test_a_slowed_arm_whose_plugin_did_not_load_fails(
    tmp_path: Path, model: Path, pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("specgate.engines.vllm_servers.MARKER", "a marker nobody prints")
    engine = _engine(tmp_path, [_arm("spec", model, slowdown=0.1)])
    with pytest.raises(MeasurementError, match="did not load"):
        engine.run(PROMPTS[:1], "spec", repetition=0)
    engine.close()
    assert _gone(_pids(pids))


def test_the_slowdown_spins_its_fraction_of_each_step_that_ran_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    spins: list[float] = []
    clock = iter([10.0, 12.0, 20.0, 20.5])
    monkeypatch.setattr("specgate.engines.vllm_slowdown.spin_for", spins.append)
    monkeypatch.setattr("specgate.engines.vllm_slowdown.time.perf_counter", lambda: next(clock))
    step = slowed(lambda self, ran: ({}, ran), 0.1)
    step(None, True)
    step(None, False)
    assert spins == [pytest.approx(0.2)]


def test_servers_that_do_not_all_fit_run_whole_rounds_and_say_so(tmp_path: Path, model: Path, pids: Path) -> None:
    arms = [_arm("ar", model, spec=False), _arm("spec", model)]
    engine = _engine(tmp_path, arms, memory_bytes=5 << 30)
    try:
        assert not engine.per_request
        assert any("do not fit at once" in n and "at most 1" in n for n in engine.instance_notes())
        engine.run(PROMPTS[:1], "ar", repetition=0)
        engine.run(PROMPTS[:1], "spec", repetition=0)
        assert engine._instance("ar").server is None and engine._instance("spec").server is not None
    finally:
        engine.close()


def test_the_server_command_carries_speculation_parallel_layout_and_gpu_share(model: Path) -> None:
    from specgate.config.parallel import ParallelLayout

    layout = ParallelLayout(tensor_parallel_size=2, pipeline_parallel_size=2)
    gpu = dataclasses.replace(HARDWARE, backend="cuda", device="cuda:0")
    arms = [dataclasses.replace(_arm("spec", model), parallel=layout), _arm("ar", model, spec=False)]
    engine = VllmServerEngine(None, module=STANDIN)
    engine._hardware = gpu
    engine._instances = [None, None]  # type: ignore[list-item]
    engine._max_live = 2
    from specgate.engines.vllm_engine import arm_setup

    argv = engine.command(arm_setup(arms[0], None), 8123, "name")
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == "ngram"
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.450"
    assert argv[argv.index("--port") + 1] == "8123"


def _renewed_measurement(shared: bool) -> tuple[object, object]:
    from specgate.engines.fake import FakeBehaviour, FakeEngine

    arms = (
        Arm("ar", "ar", "cand", False, "m", None, "float32"),
        Arm("spec", "spec", "cand", False, "m", NGRAM, "float32"),
        Arm("ref-spec", "spec", "ref", True, "m", NGRAM, "float32"),
    )
    plan = MeasurementPlan("cand", "w", arms, (("spec", "ar"),), beside=(("spec", "ref-spec"),), reference="ref")
    behaviour = FakeBehaviour(instance_cv=0.03, noise_cv=0.01)
    engine = FakeEngine(behaviour, seed=3, renews=True, shared_instances=[("spec", "ref-spec")] if shared else ())
    engine.load(arms, HARDWARE)
    prompts = [Prompt(f"p{i}", "x", 8) for i in range(6)]
    return measure_plan(engine, plan, prompts, GatePolicy(repetitions=3, warmup=0), hardware="cpu"), engine


@pytest.mark.parametrize("shared", [True, False])
def test_renewed_instances_enter_the_comparison_unless_one_instance_serves_both(shared: bool) -> None:
    from specgate.comparison import TPOT, paired
    from specgate.measure.samples import arm_samples

    measurement, _ = _renewed_measurement(shared)
    spec, ref = (arm_samples(measurement.runs[a]) for a in ("spec", "ref-spec"))  # type: ignore[attr-defined]
    widened = paired(TPOT, ref, spec, instance_spread=0.02)
    plain = paired(TPOT, ref, spec, instance_spread=0.0)
    if shared:
        assert "one instance for both in each unit" in widened.how and widened.se == plain.se
        served = {s.instance for s in spec.samples}
        assert len(served) == 2 and all(name in widened.how for name in served)  # every instance named
    else:
        assert "2 instance pair(s)" in widened.how and widened.se > plain.se
    assert any("2 instance(s)" in note for note in measurement.instances)  # type: ignore[attr-defined]


def test_the_terminal_summary_prints_the_instance_notes() -> None:
    from specgate.evaluation import evaluate
    from specgate.reports.document import VerdictDocument, evaluation_record
    from specgate.reports.provenance import CommitInfo
    from specgate.reports.terminal import verdict_lines

    measurement, _ = _renewed_measurement(True)
    record = evaluation_record(evaluate(measurement))  # type: ignore[arg-type]
    commit = CommitInfo("0" * 40, None, None, False, "specgate", "main")
    document = VerdictDocument(1, "PASS", "cpu", "0", "now", commit, ("cand",), ("w",), (), (), (), (), (record,))
    lines = verdict_lines(document)
    assert "  spec+ref-spec: 2 instance(s) (the same configuration: one instance serves them all)" in lines


def test_the_error_a_user_reads_names_the_servers_root_cause_not_its_wrapper() -> None:
    from specgate.engines.server_process import last_error

    log = (
        "(EngineCore pid=1) ERROR [core.py:1510] EngineCore failed to start.\n"
        "(EngineCore pid=1) ERROR [core.py:1510]     raise ValueError(\n"
        "(EngineCore pid=1) ERROR [core.py:1510] ValueError: current platform cpu does not support ray.\n"
        "Traceback (most recent call last):\n"
        '  File "utils.py", line 1431, in wait_for_engine_startup\n'
        "    raise RuntimeError(\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    assert last_error(log) == "ValueError: current platform cpu does not support ray."
    assert last_error("INFO starting\nINFO shutting down\n") == ""
    assert last_error("OSError: " + "x" * 300, limit=40).endswith("…")
