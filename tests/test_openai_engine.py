"""The openai engine against a small in-process OpenAI-compatible server with injectable faults (fast, no model).

`FakeServer` is `http.server` in a thread on 127.0.0.1: it streams chat or completion chunks with chunked transfer
encoding, honours `return_token_ids`, `stream_options.include_usage` and `continuous_usage_stats` as vLLM does,
counts requests in flight, records arrival times, serves `/v1/models`, `/version` and a `/metrics` whose vLLM
spec-decode counters grow by fixed amounts per request, and injects one fault per request as told: a hang, an
HTTP 500, a malformed chunk, a connection closed mid-stream, or a stream that ends without `data: [DONE]`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import arm_summaries, evaluation_of, needs_module
from specgate.config import PairConfig, Speculation, load_hardware_profile
from specgate.engines import create_engine
from specgate.engines.base import ArmRun, LoadShape, Prompt, RequestTrace, SpecCounters, arrival_offsets
from specgate.engines.openai.engine import OpenAIEngine
from specgate.engines.openai.metrics import GoodputSlo, measure_goodput, read_metrics, server_delta
from specgate.engines.openai.schedule import run_schedule
from specgate.errors import ConfigError, EngineUnavailableError, MeasurementError

needs_module("httpx", "pip install 'specgate[openai]'")

REPO = Path(__file__).resolve().parent.parent
MODEL = "served-model"
KEY = "sk-test-7f3a9c1e5b2d4f60"


@dataclasses.dataclass
class Behaviour:
    """What the server does. `faults[i]` is the fault of the i-th POST (`default_fault` for the rest)."""

    tokens: int = 6
    tokens_per_chunk: int = 1
    first_token_delay_s: float = 0.05
    chunk_delay_s: float = 0.02
    usage: bool = True
    metrics: bool = True
    spec_counters: bool = True
    key: str | None = None
    echo_auth_in_errors: bool = False
    faults: dict[int, str] = dataclasses.field(default_factory=dict)
    default_fault: str = "none"
    keep_alive: bool = True


class FakeServer(ThreadingHTTPServer):
    """An OpenAI-compatible streaming server for tests (see the module docstring)."""

    daemon_threads = False  # server_close() joins the handler threads: nothing outlives a test

    def __init__(self, behaviour: Behaviour) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = behaviour
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self.arrivals: list[float] = []
        self.bodies: list[dict[str, Any]] = []
        self.auth_headers: list[str | None] = []
        self.completed = 0
        self.warmed_ports: set[int] = set()  # client ports that asked GET /v1/models
        self.post_ports: list[int] = []  # the client port of each POST

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (it read a fault and closed) is expected; anything else is reported."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def metrics_text(self) -> str:
        n = self.completed
        lines = [
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f'vllm:time_to_first_token_seconds_sum{{model_name="{MODEL}"}} {0.05 * n}',
            f'vllm:time_to_first_token_seconds_count{{model_name="{MODEL}"}} {n}',
        ]
        if self.behaviour.spec_counters:
            for engine in ("0", "1"):
                labels = f'engine="{engine}",model_name="{MODEL}"'
                lines += [
                    "# TYPE vllm:spec_decode_num_drafts counter",
                    f"vllm:spec_decode_num_drafts_total{{{labels}}} {3 * n}",
                    "# TYPE vllm:spec_decode_num_draft_tokens counter",
                    f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {12 * n}",
                    "# TYPE vllm:spec_decode_num_accepted_tokens counter",
                    f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {5 * n}",
                    "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
                    *(
                        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{p}"}} {c * n}'
                        for p, c in enumerate((3, 1, 1, 0))
                    ),
                ]
        return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10
    server: FakeServer
    counted = False

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def end_headers(self) -> None:
        if not self.server.behaviour.keep_alive:
            self.send_header("Connection", "close")
            self.close_connection = True
        super().end_headers()

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        key = self.server.behaviour.key
        if self.path.startswith("/v1/") and key is not None and self.headers.get("Authorization") != f"Bearer {key}":
            self._send_json(401, {"error": {"message": "invalid API key"}})  # as vLLM's --api-key guards /v1
        elif self.path == "/v1/models":
            with self.server.lock:
                self.server.warmed_ports.add(self.client_address[1])
            self._send_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif self.path == "/version":
            self._send_json(200, {"version": "fake-1.0"})
        elif self.path == "/metrics" and self.server.behaviour.metrics:
            data = self.server.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server, behaviour = self.server, self.server.behaviour
        auth = self.headers.get("Authorization")
        with server.lock:
            index = len(server.arrivals)
            server.arrivals.append(time.perf_counter())
            server.bodies.append(body)
            server.auth_headers.append(auth)
            server.post_ports.append(self.client_address[1])
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
        self.counted = True
        try:
            if behaviour.key is not None and auth != f"Bearer {behaviour.key}":
                self._send_json(401, {"error": {"message": "invalid API key"}})
                return
            self._respond(body, behaviour.faults.get(index, behaviour.default_fault), auth)
        finally:
            self._leave()

    def _leave(self) -> None:
        """The request is no longer in flight: before the stream's last event, which frees the client's slot."""
        if self.counted:
            self.counted = False
            with self.server.lock:
                self.server.in_flight -= 1

    def _chunk(self, payload: str | bytes) -> None:
        data = payload if isinstance(payload, bytes) else f"data: {payload}\n\n".encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _respond(self, body: dict[str, Any], fault: str, auth: str | None) -> None:
        behaviour = self.server.behaviour
        if fault == "500":
            echo = f" (request had Authorization: {auth})" if behaviour.echo_auth_in_errors else ""
            self._send_json(500, {"error": {"message": f"internal error{echo}"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chat = "messages" in body
        if chat:
            self._chunk(json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
        time.sleep(behaviour.first_token_delay_s)
        if fault == "hang":
            self.server.stop.wait(30)
            self.close_connection = True
            return
        self._stream_tokens(body, chat, fault)

    def _stream_tokens(self, body: dict[str, Any], chat: bool, fault: str) -> None:
        behaviour = self.server.behaviour
        options = body.get("stream_options") or {}
        usage = behaviour.usage and options.get("include_usage")
        continuous = usage and options.get("continuous_usage_stats")
        sent = 0
        while sent < behaviour.tokens:
            if sent and fault == "close":
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if sent and fault == "malformed":
                self._chunk('{"choices": [{"index": 0, "text": "unterminated')
            ids = list(range(100 + sent, 100 + min(sent + behaviour.tokens_per_chunk, behaviour.tokens)))
            sent += len(ids)
            text = "".join(f" t{i}" for i in ids)
            choice: dict[str, Any] = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            choice["finish_reason"] = "length" if sent == behaviour.tokens else None
            if body.get("return_token_ids"):
                choice["token_ids"] = ids
            chunk: dict[str, Any] = {"choices": [choice]}
            if continuous:
                chunk["usage"] = {"prompt_tokens": 7, "completion_tokens": sent, "total_tokens": 7 + sent}
            self._chunk(json.dumps(chunk))
            time.sleep(behaviour.chunk_delay_s)
        if usage:
            self._chunk(json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": sent}}))
        with self.server.lock:
            self.server.completed += 1
        self._leave()
        if fault != "no_done":
            self._chunk("[DONE]")
        self._chunk(b"")


@pytest.fixture
def serve() -> Iterator[Callable[..., FakeServer]]:
    """Start fake servers (closed, with their threads joined, at teardown)."""
    started: list[tuple[FakeServer, threading.Thread]] = []

    def start(**behaviour: Any) -> FakeServer:
        server = FakeServer(Behaviour(**behaviour))
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _pair(endpoints: dict[str, str], **options: Any) -> PairConfig:
    speculation = Speculation("prompt_lookup", 4, options={"endpoints": endpoints, **options})
    return PairConfig(name="served", target=MODEL, speculation=speculation)


def _engine(endpoints: dict[str, str], **options: Any) -> OpenAIEngine:
    """An engine loaded with the arms of the pair that have an endpoint."""
    from specgate.plan import pair_arms

    engine = OpenAIEngine(REPO)
    hardware = load_hardware_profile("cpu", REPO / "hardware")
    arms = [a for a in pair_arms(_pair(endpoints, **options), hardware) if a.name in endpoints] or list(
        pair_arms(_pair(endpoints, **options), hardware)
    )
    engine.load(arms, hardware)
    return engine


def _prompts(n: int, max_new_tokens: int = 6) -> list[Prompt]:
    return [Prompt(id=f"p{i}", text=f"prompt {i}", max_new_tokens=max_new_tokens, system="be brief") for i in range(n)]


# ---- well-formed streams ------------------------------------------------------------------------------------------


TOKEN_MODES = {
    # name: (engine options, server behaviour, expected source, expected chunk sizes for 5 tokens, 2 per chunk)
    "token_ids": ({}, {}, "token_ids", (2, 2, 1)),
    "usage_per_chunk": ({"token_ids": False}, {}, "usage per chunk", (2, 2, 1)),
    "total_from_usage": ({"token_ids": False, "continuous_usage": False}, {}, "chunks, total from usage", (1, 1, 3)),
    "chunks_only": ({"token_ids": False}, {"usage": False}, "chunks", (1, 1, 1)),
}


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("mode", sorted(TOKEN_MODES))
def test_well_formed_stream_gives_ttft_itl_tokens_and_finish_reason(
    serve: Callable[..., FakeServer], api: str, mode: str
) -> None:
    options, behaviour, source, sizes = TOKEN_MODES[mode]
    server = serve(tokens=5, tokens_per_chunk=2, first_token_delay_s=0.08, chunk_delay_s=0.03, **behaviour)
    engine = _engine({"spec": server.url}, api=api, **options)
    run = engine.run(_prompts(1, max_new_tokens=5), "spec", repetition=0)
    (trace,) = run.traces
    assert trace.ok and trace.error is None
    assert trace.chunk_tokens == sizes and trace.output_tokens == sum(sizes)
    assert trace.output_text == " t100 t101 t102 t103 t104"
    assert trace.output_ids == ((100, 101, 102, 103, 104) if mode == "token_ids" else ())
    assert trace.finish_reason == "length"
    assert trace.prompt_tokens == (7 if behaviour.get("usage", True) else 0)
    ttft = trace.chunk_times_s[0] - trace.submit_s
    gaps = np.diff(trace.chunk_times_s)
    # lower bounds only: the server sleeps before each event, so these hold on any machine however slow
    assert ttft >= 0.08, "the role event of chat is not a token: TTFT waits for the first text"
    assert len(gaps) == 2 and all(g >= 0.015 for g in gaps)
    assert trace.submit_s < trace.chunk_times_s[0] <= trace.chunk_times_s[-1] <= trace.done_s
    assert engine.served_runs[-1].token_count_source == source
    body = server.bodies[-1]
    assert body["stream"] is True and body["temperature"] == 0.0 and body["max_tokens"] == 5
    assert body["stream_options"]["include_usage"] is True
    if api == "chat":
        assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "prompt 0"}]
    else:
        assert body["prompt"] == "be brief\n\nprompt 0"


def test_run_works_from_inside_a_running_event_loop(serve: Callable[..., FakeServer]) -> None:
    import asyncio

    server = serve()
    engine = _engine({"spec": server.url})

    async def notebook_cell() -> ArmRun:
        return engine.run(_prompts(2), "spec", repetition=0)  # a notebook's loop is already running here

    run = asyncio.run(notebook_cell())
    assert [t.ok for t in run.traces] == [True, True]


def test_create_engine_returns_the_openai_engine_with_a_named_protocol() -> None:
    engine = create_engine("openai", REPO)
    assert isinstance(engine, OpenAIEngine)
    assert engine.name == "openai" and engine.per_request is False


# ---- acceptance from /metrics -------------------------------------------------------------------------------------


def test_acceptance_counters_are_metrics_deltas_summed_over_engines(serve: Callable[..., FakeServer]) -> None:
    server = serve()
    engine = _engine({"spec": server.url})
    engine.run(_prompts(1), "spec", repetition=-1)  # the counters are cumulative: a later run sees only its own
    run = engine.run(_prompts(3), "spec", repetition=0)
    assert run.counters == SpecCounters(2 * 3 * 3, 2 * 12 * 3, 2 * 5 * 3, (18, 6, 6, 0))
    record = engine.served_runs[-1]
    assert record.note is None and record.server is not None
    assert record.server.requests == 3 and record.server.ttft_mean_ms == pytest.approx(50.0)


@pytest.mark.parametrize("behaviour", [{"spec_counters": False}, {"metrics": False}])
def test_missing_counters_are_none_with_a_note(serve: Callable[..., FakeServer], behaviour: dict[str, bool]) -> None:
    server = serve(**behaviour)
    engine = _engine({"ar": server.url})
    run = engine.run(_prompts(2), "ar", repetition=0)
    assert run.counters is None
    assert all(t.ok for t in run.traces)
    note = engine.served_runs[-1].note
    assert note is not None and "not exposed by this server" in note and server.url in note
    assert engine.notes == [note]


def test_read_metrics_and_server_delta() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
        'vllm:spec_decode_num_drafts_created{engine="0"} 1.7e9\n'
        "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 40\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 25\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 7\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 9\n'
        "# TYPE vllm:request_time_per_output_token_seconds histogram\n"
        'vllm:request_time_per_output_token_seconds_bucket{le="+Inf"} 4\n'
        "vllm:request_time_per_output_token_seconds_sum 0.2\n"
        "vllm:request_time_per_output_token_seconds_count 4\n"
    )
    reading = read_metrics(text)
    assert reading.counters == SpecCounters(10, 40, 25, (9, 7))
    assert reading.histograms == {"tpot": (0.2, 4.0)}
    start = read_metrics(text.replace(" 10\n", " 4\n").replace("sum 0.2", "sum 0.1").replace("count 4", "count 2"))
    delta = server_delta(start, reading)
    assert delta.counters == SpecCounters(6, 0, 0, (0, 0))
    assert delta.tpot_mean_ms == pytest.approx(50.0) and delta.ttft_mean_ms is None
    with pytest.raises(MeasurementError, match="went backwards"):
        server_delta(reading, start)


# ---- faults: each is recorded with its reason, never dropped; a run with no success raises ------------------------


FAULTS = {
    "hang": "read timeout: the server sent nothing for 1 s after 0 chunks (server hang?)",
    "500": 'HTTP 500 Internal Server Error: {"error": {"message": "internal error"}}',
    "malformed": 'malformed chunk (event 2): not JSON: \'{"choices": [{"index": 0, "text": "unterminated\'',
    "close": "connection closed mid-stream after 1 chunks (the server closed the connection)",
    "no_done": "connection closed mid-stream: the stream ended before 'data: [DONE]' after 6 chunks",
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_faulty_request_is_recorded_with_its_reason(serve: Callable[..., FakeServer], fault: str) -> None:
    server = serve(faults={2: fault}, chunk_delay_s=0.005)
    engine = _engine({"spec": server.url}, api="completions", timeout_s=1.0)
    run = engine.run(_prompts(4), "spec", repetition=0)
    assert [t.prompt_id for t in run.traces] == ["p0", "p1", "p2", "p3"]
    failed = [t for t in run.traces if not t.ok]
    assert len(failed) == 1 and failed[0].error is not None
    assert failed[0].error.startswith(FAULTS[fault]), failed[0].error
    assert all(t.error is None and t.output_tokens == 6 for t in run.traces if t is not failed[0])
    record = engine.served_runs[-1]
    assert record.n_failed == 1 and record.errors == {failed[0].error: 1}
    assert record.goodput.n_good <= 3


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_run_where_every_request_fails_raises_with_the_reason(serve: Callable[..., FakeServer], fault: str) -> None:
    server = serve(default_fault=fault)
    engine = _engine({"spec": server.url}, api="completions", timeout_s=1.0, concurrency=2)
    with pytest.raises(MeasurementError) as excinfo:
        engine.run(_prompts(2), "spec", repetition=-1)
    message = str(excinfo.value)
    assert message.startswith(f"all 2 requests to the 'spec' endpoint {server.url} failed: 2× ")
    assert FAULTS[fault] in message


def test_a_server_gone_after_load_fails_every_request_unsent(serve: Callable[..., FakeServer]) -> None:
    server = serve()
    engine = _engine({"spec": server.url}, concurrency=2, connect_timeout_s=1)
    server.shutdown()
    server.server_close()
    with pytest.raises(MeasurementError, match=r"failed: 2× cannot connect to the server: ConnectionRefusedError"):
        engine.run(_prompts(2), "spec", repetition=0)
    client = engine.served_runs[-1].client
    assert client.n_sent == 0 and client.warm_connections == 0 and client.sent_s == (None, None)


def test_unreachable_endpoint_fails_at_load() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(EngineUnavailableError, match=rf"'ar' endpoint http://127.0.0.1:{port} does not answer"):
        _engine({"ar": f"http://127.0.0.1:{port}"}, connect_timeout_s=1)


def test_a_model_the_server_does_not_serve_is_a_config_error(serve: Callable[..., FakeServer]) -> None:
    server = serve()
    with pytest.raises(ConfigError, match=r"serves \['served-model'\], not 'other'; set speculation.options.model"):
        _engine({"spec": server.url}, model="other")


# ---- load: concurrency, Poisson arrivals, bounds ------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_limit_is_honoured(serve: Callable[..., FakeServer], concurrency: int) -> None:
    server = serve(chunk_delay_s=0.02)
    engine = _engine({"spec": server.url}, concurrency=concurrency)
    run = engine.run(_prompts(7), "spec", repetition=0)
    assert all(t.ok for t in run.traces)
    assert server.max_in_flight == concurrency
    assert engine.served_runs[-1].concurrency == concurrency


def test_the_workloads_load_shape_overrides_the_pairs_options(serve: Callable[..., FakeServer]) -> None:
    server = serve(chunk_delay_s=0.02)
    engine = _engine({"spec": server.url}, concurrency=4)
    run = engine.run(_prompts(6), "spec", repetition=0, load=LoadShape(concurrency=1))  # latency mode
    assert all(t.ok for t in run.traces)
    assert server.max_in_flight == 1 and engine.served_runs[-1].concurrency == 1
    engine.run(_prompts(6), "spec", repetition=1)  # no load shape: the pair's options
    assert server.max_in_flight == 4


def test_connections_are_opened_and_warmed_before_the_first_request(serve: Callable[..., FakeServer]) -> None:
    server = serve(chunk_delay_s=0.005)
    engine = _engine({"spec": server.url}, concurrency=3)
    run = engine.run(_prompts(9), "spec", repetition=0)
    assert all(t.ok for t in run.traces)
    assert set(server.post_ports) <= server.warmed_ports, "a measured request opened its own connection"
    assert len(set(server.post_ports)) == 3  # one keep-alive connection per slot, reused
    client = engine.served_runs[-1].client
    assert (client.warm_connections, client.connections_opened, client.n_sent) == (3, 0, 9)
    assert client.sent_s == tuple(t.submit_s for t in run.traces)


def test_a_server_that_closes_connections_gets_new_ones_counted(serve: Callable[..., FakeServer]) -> None:
    server = serve(keep_alive=False, chunk_delay_s=0.005)
    engine = _engine({"spec": server.url}, concurrency=2)
    run = engine.run(_prompts(4), "spec", repetition=0)
    assert all(t.ok for t in run.traces), [t.error for t in run.traces]
    assert len(set(server.post_ports)) == 4
    client = engine.served_runs[-1].client
    assert (client.warm_connections, client.connections_opened) == (0, 4)


def test_poisson_offsets_come_from_the_seeded_rng() -> None:
    offsets = arrival_offsets(6, 5.0, seed=11, repetition=2)
    gaps = np.random.default_rng([11, 3]).exponential(1 / 5.0, size=5)
    assert offsets == pytest.approx((0.0, *np.cumsum(gaps)))
    assert arrival_offsets(6, 5.0, seed=11, repetition=2) == offsets
    assert arrival_offsets(6, 5.0, seed=12, repetition=2) != offsets
    assert arrival_offsets(6, 5.0, seed=11, repetition=3) != offsets
    assert arrival_offsets(3, None, seed=11, repetition=2) == (0.0, 0.0, 0.0)
    many = np.diff(arrival_offsets(4000, 5.0, seed=0, repetition=0))
    assert many.mean() == pytest.approx(0.2, rel=0.05)


def test_requests_arrive_at_the_poisson_offsets(serve: Callable[..., FakeServer]) -> None:
    server = serve(tokens=2, chunk_delay_s=0.001, first_token_delay_s=0.001)
    engine = _engine({"spec": server.url}, request_rate=4.0, seed=3, concurrency=8)
    run = engine.run(_prompts(6), "spec", repetition=0)
    assert all(t.ok for t in run.traces)
    expected = np.asarray(arrival_offsets(6, 4.0, seed=3, repetition=0))
    assert expected[-1] > 0.5  # the schedule is spread out, so "all at once" would miss it by far
    arrived = np.asarray(server.arrivals) - server.arrivals[0]
    submitted = np.asarray([t.submit_s for t in run.traces]) - run.traces[0].submit_s
    # the schedule is followed: spread out as planned (sent all at once, the last would arrive at ≈ 0 s), in its
    # order; how closely is the load generator's precision, measured in benchmarks (a loaded machine delays sends)
    for observed in (submitted, arrived):
        assert observed[-1] >= 0.5 * expected[-1] and np.abs(observed - expected).max() < 2.0, (observed, expected)
        assert list(np.argsort(observed, kind="stable")) == list(range(6))
    record = engine.served_runs[-1]
    assert record.request_rate == 4.0 and record.client.offered_rate_per_s == 4.0
    assert record.client.queued is not None and record.client.n_sent == 6
    pairs = zip(record.client.due_s, record.client.sent_s, strict=True)
    assert all(sent is not None and sent >= due for due, sent in pairs), "a request left before it was due"


def test_the_scheduler_stops_at_the_time_bound() -> None:
    import asyncio

    started: list[int] = []

    async def send(index: int) -> float:
        started.append(index)
        if index == 1:
            raise RuntimeError("boom")
        await asyncio.sleep(0.05 if index == 0 else 10)
        return 0.0

    outcomes = asyncio.run(run_schedule(4, send, (0.0, 0.0, 0.0, 0.0), concurrency=3, duration_s=0.3)).outcomes
    assert outcomes[0] is None and outcomes[1] == "RuntimeError: boom"
    assert outcomes[2] == "cancelled in flight: the run reached its time bound duration_s=0.3"
    assert outcomes[3] == "cancelled in flight: the run reached its time bound duration_s=0.3"
    outcomes = asyncio.run(run_schedule(2, send, (0.0, 5.0), concurrency=1, duration_s=0.1)).outcomes
    assert outcomes == [None, "never sent: the run reached its time bound duration_s=0.1"]


def test_a_run_over_the_count_bound_is_refused_before_sending(serve: Callable[..., FakeServer]) -> None:
    server = serve()
    engine = _engine({"spec": server.url}, max_requests=2)
    with pytest.raises(MeasurementError, match=r"a run of 3 requests exceeds speculation\.options\.max_requests=2"):
        engine.run(_prompts(3), "spec", repetition=0)
    assert server.arrivals == []


def test_goodput_counts_completed_requests_within_every_slo() -> None:
    def trace(ttft: float, tpot: float, error: str | None = None) -> RequestTrace:
        times = (ttft, ttft + tpot, ttft + 2 * tpot) if error is None else ()
        return RequestTrace("p", "spec", 0, 0.0, times, (1,) * len(times), (), "", 1, error=error)

    run = ArmRun("spec", (trace(0.1, 0.01), trace(0.9, 0.01), trace(0.1, 0.05), trace(0, 0, "HTTP 500")), 2.0)
    goodput = measure_goodput(run, GoodputSlo(ttft_ms=500, tpot_ms=20))
    assert (goodput.n_requests, goodput.n_good) == (4, 1)
    assert goodput.goodput_per_s == 0.5 and goodput.requests_per_s == 2.0
    assert measure_goodput(run, GoodputSlo()).n_good == 3


def test_goodput_slo_defaults_to_the_sla(serve: Callable[..., FakeServer]) -> None:
    sla = load_hardware_profile("cpu", REPO / "hardware").sla
    server = serve()
    engine = _engine({"spec": server.url})
    tpot_ms = 1000.0 / sla.min_decode_tokens_per_s
    assert engine.settings.goodput_slo == GoodputSlo(ttft_ms=sla.p99_ttft_ms, tpot_ms=tpot_ms, e2el_ms=None)
    engine = _engine({"spec": server.url}, goodput_slo={"ttft_ms": 100, "e2el_ms": 900})
    assert engine.settings.goodput_slo == GoodputSlo(ttft_ms=100.0, tpot_ms=tpot_ms, e2el_ms=900.0)


# ---- settings -----------------------------------------------------------------------------------------------------


BAD_OPTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "unknown key": ({"concurency": 4}, "speculation.options.concurency: unknown key. Did you mean 'concurrency'?"),
    "not loopback": ({"endpoints": {"ar": "http://10.1.2.3:8000"}}, "endpoints.ar: host '10.1.2.3' is not loopback"),
    "public host": ({"endpoints": {"ar": "https://api.example.com"}}, "host 'api.example.com' is not loopback"),
    "with /v1": ({"endpoints": {"ar": "http://127.0.0.1:8000/v1"}}, "give the server root"),
    "credentials": ({"endpoints": {"ar": "http://u:p@127.0.0.1:8000"}}, "credentials in the URL are not allowed"),
    "bad scheme": ({"endpoints": {"ar": "ftp://127.0.0.1"}}, "give an http:// or https:// URL"),
    "no endpoints": ({"endpoints": {}}, "speculation.options.endpoints: required"),
    "zero concurrency": ({"concurrency": 0}, "speculation.options.concurrency: must be > 0, got 0"),
    "float concurrency": ({"concurrency": 2.5}, "concurrency: expected an integer, got 2.5"),
    "negative rate": ({"request_rate": -1}, "request_rate: must be > 0"),
    "bad api": ({"api": "chats"}, "api: 'chats' is not allowed. Did you mean 'chat'?"),
    "bad flag": ({"token_ids": "yes"}, "token_ids: expected true or false"),
    "bad slo": ({"goodput_slo": {"ttft": 1}}, "goodput_slo.ttft: unknown key. Did you mean 'ttft_ms'?"),
    "bad metrics path": ({"metrics_path": "metrics"}, "metrics_path: expected a path starting with '/'"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_options_are_config_errors_naming_pair_and_key(case: str) -> None:
    options, message = BAD_OPTIONS[case]
    options = {"endpoints": {"ar": "http://127.0.0.1:1"}, **options}
    with pytest.raises(ConfigError) as excinfo:
        _engine(**options)
    assert str(excinfo.value).startswith("pair 'served': speculation.options.")
    assert message in str(excinfo.value)


def test_a_listed_host_is_allowed_and_localhost_is_loopback() -> None:
    from specgate.config import SlaLimits
    from specgate.engines.openai.load import parse_settings

    pair = _pair({"ar": "http://gpu-box:8000/", "spec": "http://localhost:8001"}, allowed_hosts=["gpu-box"])
    settings = parse_settings(pair.name, pair.speculation.options, pair.target, SlaLimits())
    assert settings.endpoints == {"ar": "http://gpu-box:8000", "spec": "http://localhost:8001"}
    assert settings.model == MODEL and settings.api == "chat" and settings.concurrency == 1


# ---- the API key --------------------------------------------------------------------------------------------------


def test_api_key_is_sent_but_never_shown(
    serve: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SPECGATE_TEST_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    server = serve(key=KEY, faults={1: "500"}, echo_auth_in_errors=True)
    engine = _engine({"spec": server.url}, api_key_env="SPECGATE_TEST_KEY")
    run = engine.run(_prompts(3), "spec", repetition=0)
    assert server.auth_headers == [f"Bearer {KEY}"] * 3
    assert [t.ok for t in run.traces] == [True, False, True]
    assert run.traces[1].error == (
        'HTTP 500 Internal Server Error: {"error": {"message": "internal error (request had Authorization: '
        'Bearer ***)"}}'
    )
    shown = [repr(engine), str(engine), repr(run), repr(engine.served_runs), repr(vars(engine)), caplog.text]
    shown.append(json.dumps(dict(engine.versions())))
    assert all(KEY not in text for text in shown)
    assert "Authorization" not in caplog.text


def test_a_missing_api_key_variable_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECGATE_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="api_key_env: the environment variable 'SPECGATE_TEST_KEY' is not set"):
        _engine({"spec": "http://127.0.0.1:1"}, api_key_env="SPECGATE_TEST_KEY")


def test_a_wrong_api_key_is_refused_at_load(serve: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_TEST_KEY", "wrong-key")
    server = serve(key=KEY)
    with pytest.raises(ConfigError, match=r"refused the API key \(HTTP 401\)"):
        _engine({"spec": server.url}, api_key_env="SPECGATE_TEST_KEY")


# ---- the gate: a faulty server blocks, with the reason in verdict.json --------------------------------------------


GATE_CONFIG = """
pairs:
  served:
    target: {model}
    engine: openai
    speculation:
      method: prompt_lookup
      num_tokens: 4
      options:
        endpoints: {{ar: "{ar}", spec: "{spec}"}}
        api: completions
        concurrency: 2
        timeout_s: 2
        api_key_env: SPECGATE_TEST_KEY
workloads:
  docs:
    path: workloads/docs.jsonl
    max_new_tokens: 6
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
"""


def _gate_run(pytester: pytest.Pytester, ar: str, spec: str) -> tuple[dict[str, Any], str]:
    root = pytester.path
    shutil.copytree(REPO / "hardware", root / "hardware")
    shutil.copytree(REPO / "suites", root / "suites", ignore=shutil.ignore_patterns("__pycache__", "workloads"))
    (root / "workloads").mkdir()
    lines = [json.dumps({"id": f"p{i}", "prompt": f"document {i}"}) for i in range(6)]
    (root / "workloads" / "docs.jsonl").write_text("\n".join(lines) + "\n")
    (root / "specgate.yaml").write_text(GATE_CONFIG.format(model=MODEL, ar=ar, spec=spec))
    pytester.makeini("[pytest]\nfilterwarnings =\n    ignore::pytest.PytestAssertRewriteWarning\n")
    result = pytester.runpytest_inprocess("suites", "-p", "no:cacheprovider")
    assert result.ret != 0
    verdict: dict[str, Any] = json.loads((root / "reports" / "verdict.json").read_text())
    everything = "".join(p.read_text(errors="replace") for p in (root / "reports").rglob("*") if p.is_file())
    return verdict, everything + result.stdout.str() + result.stderr.str()


def _samples_check(verdict: dict[str, Any]) -> dict[str, Any]:
    checks: list[dict[str, Any]] = [c for c in verdict["checks"] if c["name"] == "samples"]
    assert len(checks) == 1
    return checks[0]


@pytest.mark.parametrize("fault", ["close", "malformed"])
def test_gate_blocks_when_some_requests_fail(
    pytester: pytest.Pytester, serve: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    monkeypatch.setenv("SPECGATE_TEST_KEY", KEY)
    ar, spec = serve(key=KEY), serve(key=KEY, faults={3: fault}, chunk_delay_s=0.005)
    verdict, output = _gate_run(pytester, ar.url, spec.url)
    assert verdict["verdict"] == "BLOCK"
    check = _samples_check(verdict)
    assert check["passed"] is False
    assert check["message"].startswith("BLOCK: cannot measure reliably: arm spec: 1 of 12 requests failed (1× ")
    assert FAULTS[fault] in check["message"]  # the cause reaches the verdict
    assert arm_summaries(verdict, "served", "docs")["spec"]["n_failed"] == 1
    assert KEY not in output


@pytest.mark.parametrize("fault", ["hang", "500"])
def test_gate_blocks_with_the_reason_when_a_server_fails_every_request(
    pytester: pytest.Pytester, serve: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    monkeypatch.setenv("SPECGATE_TEST_KEY", KEY)
    ar, spec = serve(key=KEY), serve(key=KEY, default_fault=fault, echo_auth_in_errors=True)
    verdict, output = _gate_run(pytester, ar.url, spec.url)
    assert verdict["verdict"] == "BLOCK"
    reason = {
        "hang": FAULTS["hang"].replace("1 s", "2 s"),
        "500": 'HTTP 500 Internal Server Error: {"error": {"message": "internal error (request had Authorization: '
        'Bearer ***)"}}',
    }[fault]
    expected = f"MeasurementError: all 1 requests to the 'spec' endpoint {spec.url} failed: 1× {reason}"
    assert any(expected in error for error in verdict["errors"]), verdict["errors"]
    assert KEY not in output


def test_gate_with_healthy_servers_passes_the_samples_check(
    pytester: pytest.Pytester, serve: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECGATE_TEST_KEY", KEY)
    ar, spec = serve(key=KEY, spec_counters=False), serve(key=KEY)
    verdict, _ = _gate_run(pytester, ar.url, spec.url)
    assert _samples_check(verdict)["passed"] is True
    arms = arm_summaries(verdict, "served", "docs")
    assert arms["spec"]["acceptance"]["source"] == "engine counters"
    assert arms["spec"]["acceptance"]["rate"] == pytest.approx(5 / 12)
    assert arms["ar"]["acceptance"] is None
    assert evaluation_of(verdict, "served", "docs")["versions"]["server.spec"] == "fake-1.0"
