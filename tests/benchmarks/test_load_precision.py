"""The openai engine's load generator against a server that logs its own send times: timing error and top rate.

`sse_server.py` runs in its own process on 127.0.0.1 and records, per request, when its first bytes were read and
when each chunk was written (`time.perf_counter()`, the same CLOCK_MONOTONIC as the client's). Set side by side
with the client's trace of the same request (matched by prompt text):

- TTFT error = client TTFT − server TTFT = (server receipt − client send) + (client first arrival − server first
  send): the wire and both event loops' wake-ups. Printed whole and as its two parts.
- ITL error per chunk gap = client gap − server gap; mean-ITL error per request; E2EL error like TTFT's.
- The client's own lag (`ServedRun.client`): send time − when the request was due or its slot freed.

Two benchmarks, figures printed (`pytest -s`), nothing timed asserted:

1. precision: 16 one-token chunks, the first after 20 ms, then every 10 ms, at concurrency 1 and 16.
2. rate: an instant server (all chunks in one write), concurrency 64: sustained requests/s and client CPU per
   request (process CPU time over the run / requests, the worker processes' included), from one process and from
   two (`workers: 2`, started before the measured run).

With guidellm installed (`SPECGATE_GUIDELLM=/path/to/guidellm`, or on PATH) both run guidellm too, in the same
session against the same server, and print its figures beside specgate's; without it that part is skipped. The
tests assert what holds on any machine: every request succeeds and is logged once with all its chunks; causality
(the client's send stamp precedes the server's receipt, each server write precedes its arrival at the client — a
stamp taken in the wrong place breaks it); sends follow the schedule's order; the client's lag is reported.

    SPECGATE_GUIDELLM=/tmp/guidellm-venv/bin/guidellm \
        nice -n 19 .venv/bin/pytest tests/benchmarks/test_load_precision.py -p no:randomly -s
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import needs_module
from specgate.config import PairConfig, Speculation, load_hardware_profile
from specgate.engines.base import LoadShape, Prompt, RequestTrace
from specgate.engines.openai.engine import OpenAIEngine
from specgate.engines.openai.schedule import Spread
from specgate.plan import pair_arms

needs_module("httpx", "pip install 'specgate[openai]'")

REPO = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("sse_server.py")
TOKENS = 16
PRECISION_REQUESTS = {1: 150, 16: 480}
RATE_REQUESTS = 3000


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def log(self) -> list[dict[str, Any]]:
        import httpx

        records: list[dict[str, Any]] = httpx.get(f"{self.url}/log", trust_env=False, timeout=30).json()
        return records


def _start(first_ms: float, gap_ms: float) -> Served:
    command = [sys.executable, str(SERVER), "--tokens", str(TOKENS), "--first-ms", str(first_ms)]
    process = subprocess.Popen([*command, "--gap-ms", str(gap_ms)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("PORT "), line
    return Served(f"http://127.0.0.1:{int(line.split()[1])}", process)


@pytest.fixture(scope="module")
def paced() -> Iterator[Served]:
    """The paced server: first chunk after 20 ms, then one every 10 ms."""
    served = _start(20.0, 10.0)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def instant() -> Iterator[Served]:
    served = _start(0.0, 0.0)
    yield served
    served.stop()


def _engine(url: str, concurrency: int, workers: int = 1) -> OpenAIEngine:
    options = {
        "endpoints": {"spec": url},
        "concurrency": concurrency,
        "workers": workers,
        "metrics_path": None,
        "max_requests": 100_000,
    }
    pair = PairConfig("bench", "bench-model", Speculation("prompt_lookup", 4, options=options))
    hardware = load_hardware_profile("cpu", REPO / "hardware")
    engine = OpenAIEngine(REPO)
    engine.load([a for a in pair_arms(pair, hardware) if a.name == "spec"], hardware)
    return engine


def _prompts(n: int, tag: str) -> list[Prompt]:
    return [Prompt(id=f"{tag}-{i}", text=f"{tag} prompt {i}", max_new_tokens=TOKENS) for i in range(n)]


def _spread(values_s: Sequence[float]) -> str:
    return Spread.of(values_s).describe()


def _host_floor() -> str:
    """How late this process wakes from a 5 ms sleep right now (the CPU is shared): a floor under every error."""
    overshoot = []
    for _ in range(200):
        start = time.perf_counter()
        time.sleep(0.005)
        overshoot.append(time.perf_counter() - start - 0.005)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"host: wake-up from a 5 ms sleep {_spread(overshoot)}; load average {load}; {os.cpu_count()} CPUs"


def _guidellm() -> str | None:
    return os.environ.get("SPECGATE_GUIDELLM") or shutil.which("guidellm")


def _run_guidellm(url: str, concurrency: int, count: int, tag: str, folder: Path) -> tuple[dict[str, Any], float]:
    """One guidellm run (concurrent profile, `count` requests of the prompts `tag`); its report and CPU seconds
    (its own process and its workers)."""
    guidellm = _guidellm()
    assert guidellm is not None
    data = folder / f"{tag}.jsonl"
    data.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in _prompts(count, tag)))
    report = folder / f"{tag}.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [
            guidellm,
            "run",
            "--backend",
            f"kind=openai_http,target={url}",
            "--profile",
            f"kind=concurrent,streams={concurrency}",
            "--constraint",
            f"kind=max_requests,count={count}",
            "--data",
            f"kind=json_file,path={data}",
            "--output",
            f"kind=json,path={report}",
            "--disable-console",
        ],
        check=True,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=900,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    benchmark: dict[str, Any] = json.loads(report.read_text())["benchmarks"][0]
    return benchmark, cpu_s


def _server_ttft(record: dict[str, Any]) -> float:
    return float(record["sent_s"][0] - record["received_s"])


def _server_mean_itl(record: dict[str, Any]) -> float:
    sent = record["sent_s"]
    return float((sent[-1] - sent[0]) / (len(sent) - 1))


def _errors(traces: Sequence[RequestTrace], log: dict[str, dict[str, Any]], texts: dict[str, str]) -> dict[str, Any]:
    found: dict[str, list[float]] = {k: [] for k in ("ttft", "to_server", "to_client", "gap", "mean_itl", "e2el")}
    for trace in traces:
        record = log[texts[trace.prompt_id]]
        sent, arrived = np.asarray(record["sent_s"]), np.asarray(trace.chunk_times_s)
        assert len(arrived) == len(sent) == TOKENS, (len(arrived), len(sent))
        # causality: a stamp taken after the event it stands for (e.g. a send stamped after the write) breaks these
        assert trace.submit_s <= record["received_s"], (trace.submit_s, record["received_s"])
        assert (arrived >= sent).all(), arrived - sent
        found["ttft"].append((arrived[0] - trace.submit_s) - _server_ttft(record))
        found["to_server"].append(record["received_s"] - trace.submit_s)
        found["to_client"].append(arrived[0] - sent[0])
        found["gap"].extend(np.diff(arrived) - np.diff(sent))
        found["mean_itl"].append((arrived[-1] - arrived[0]) / (TOKENS - 1) - _server_mean_itl(record))
        found["e2el"].append((arrived[-1] - trace.submit_s) - (sent[-1] - record["received_s"]))
    return found


def _guidellm_errors(benchmark: dict[str, Any], log: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"ttft": [], "mean_itl": []}
    for request in benchmark["requests"]["successful"]:
        body = json.loads(request["request_args"])["body"]
        content = body["messages"][-1]["content"]
        text = content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
        record = log[text]
        found["ttft"].append(request["time_to_first_token_ms"] / 1000.0 - _server_ttft(record))
        found["mean_itl"].append(request["inter_token_latency_ms"] / 1000.0 - _server_mean_itl(record))
    return found


@pytest.mark.parametrize("concurrency", [1, 16])
def test_timing_error_against_the_servers_own_log(paced: Served, concurrency: int, tmp_path: Path) -> None:
    count = PRECISION_REQUESTS[concurrency]
    engine = _engine(paced.url, concurrency)
    paced.log()  # only this run's requests from here on
    prompts = _prompts(count, f"c{concurrency}")
    run = engine.run(prompts, "spec", repetition=0, load=LoadShape(concurrency))
    log = {record["prompt"]: record for record in paced.log()}
    assert all(t.ok for t in run.traces), {t.error for t in run.traces}
    assert len(log) == count, "every request reached the server once"
    texts = {p.id: p.text for p in prompts}
    errors = _errors(run.traces, log, texts)
    client = engine.served_runs[-1].client
    assert client.n_sent == count and client.warm_connections == concurrency
    print(f"\n{_host_floor()}")
    print(f"specgate, concurrency {concurrency}, {count} requests of {TOKENS} one-token chunks (20 ms, then 10 ms):")
    print(f"  TTFT error        {_spread(errors['ttft'])}  (nothing excluded; the first request included)")
    print(f"    send → server   {_spread(errors['to_server'])}")
    print(f"    server → client {_spread(errors['to_client'])}")
    print(f"  ITL error (gaps)  {_spread(errors['gap'])}  ({len(errors['gap'])} gaps)")
    print(f"  mean-ITL error    {_spread(errors['mean_itl'])}")
    print(f"  E2EL error        {_spread(errors['e2el'])}")
    print(f"  client: {client.describe()}")
    if _guidellm() is None:
        print("  guidellm: not installed (SPECGATE_GUIDELLM=/path/to/guidellm to compare)")
        return
    benchmark, _ = _run_guidellm(paced.url, concurrency, count, f"guidellm-c{concurrency}", tmp_path)
    log = {record["prompt"]: record for record in paced.log()}
    assert len(benchmark["requests"]["successful"]) == count
    theirs = _guidellm_errors(benchmark, log)
    print(f"guidellm, concurrency {concurrency}, {count} requests:")
    print(f"  TTFT error        {_spread(theirs['ttft'])}")
    print(f"  mean-ITL error    {_spread(theirs['mean_itl'])}")


def _cpu_s(pids: Sequence[int]) -> float:
    """User + system CPU seconds of running processes, from /proc/<pid>/stat."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def _specgate_rate(served: Served, count: int, tag: str, workers: int) -> tuple[float, float, int]:
    engine = _engine(served.url, 64, workers)
    try:
        if workers > 1:  # start the worker processes (once per engine, outside every measured window)
            engine.run(_prompts(64, f"{tag}-start"), "spec", repetition=-1, load=LoadShape(64))
            served.log()
        pids = [] if engine._workers is None else [p.pid for p in engine._workers._processes]
        cpu, children = time.process_time(), _cpu_s(pids)
        run = engine.run(_prompts(count, tag), "spec", repetition=0, load=LoadShape(64))
        cpu_s = time.process_time() - cpu + _cpu_s(pids) - children
    finally:
        engine.close()
    assert all(t.ok for t in run.traces), {t.error for t in run.traces}
    client = engine.served_runs[-1].client
    assert client.n_sent == count and client.achieved_rate_per_s is not None and client.processes == workers
    return count / run.wall_s, cpu_s / count, client.connections_opened


def test_maximum_request_rate_at_concurrency_64(instant: Served, tmp_path: Path) -> None:
    rounds = int(os.environ.get("SPECGATE_BENCH_ROUNDS", "1"))
    print(f"\n{_host_floor()}")
    print(f"instant server, concurrency 64, {RATE_REQUESTS} requests of {TOKENS} chunks per run:")
    for index in range(rounds):
        for workers in (1, 2):
            instant.log()
            rate, cpu_per_request_s, opened = _specgate_rate(instant, RATE_REQUESTS, f"rate{index}w{workers}", workers)
            assert len(instant.log()) == RATE_REQUESTS
            print(
                f"  specgate  {rate:7.1f} req/s, client CPU {1000 * cpu_per_request_s:.3f} ms/request "
                f"({workers} process{'es' if workers > 1 else ''}, {opened} connections opened beyond the 64 warm ones)"
            )
        if _guidellm() is None:
            print("  guidellm: not installed (SPECGATE_GUIDELLM=/path/to/guidellm to compare)")
            continue
        small, small_cpu_s = _run_guidellm(instant.url, 64, 64, f"gsmall{index}", tmp_path)
        benchmark, cpu_s = _run_guidellm(instant.url, 64, RATE_REQUESTS, f"grate{index}", tmp_path)
        done = len(benchmark["requests"]["successful"])
        assert done == RATE_REQUESTS and len(small["requests"]["successful"]) == 64
        instant.log()
        processes = benchmark["scheduler_state"]["num_processes"]
        print(
            f"  guidellm  {done / benchmark['duration']:7.1f} req/s, client CPU {1000 * cpu_s / done:.3f} ms/request "
            f"with start-up, {1000 * (cpu_s - small_cpu_s) / (done - 64):.3f} ms/request marginal "
            f"({processes} worker processes)"
        )
