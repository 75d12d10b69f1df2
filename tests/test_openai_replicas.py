"""A served pair behind a router: a round-robin router stand-in on 127.0.0.1 in front of two replica stand-ins
(`test_openai_engine.FakeServer`, each with vLLM's spec-decode counters on its own `/metrics`). With `metrics_urls`
the arm's acceptance is the sum of the replicas' counters, each replica listed with its own; one replica that cannot
be read leaves the run without counters, naming it; the options are validated like endpoints."""

from __future__ import annotations

import http.client
import itertools
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_openai_engine import FakeServer, _engine, _prompts, serve  # noqa: F401 - `serve` is the fixture

from specgate.config import SlaLimits
from specgate.engines.base import SpecCounters
from specgate.engines.openai.load import parse_settings
from specgate.engines.openai.metrics import MetricsReading
from specgate.engines.openai.replicas import sum_readings
from specgate.errors import ConfigError


class Router(ThreadingHTTPServer):
    """Sends each completion to the next replica in turn and relays its answer; has no `/metrics` of its own."""

    daemon_threads = False

    def __init__(self, replicas: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), _RouterHandler)
        self.replicas = replicas
        self.turn = itertools.cycle(range(len(replicas)))
        self.lock = threading.Lock()
        self.sent = [0] * len(replicas)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def relay(self, index: int, method: str, path: str, headers: dict[str, str], body: bytes | None) -> Any:
        parts = urlsplit(self.replicas[index])
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()  # the whole stream: this stand-in is about counters, not timing
        connection.close()
        return response.status, response.getheader("Content-Type", "application/json"), data


class _RouterHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Router

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, kind: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._reply(404, "text/plain", b"no metrics on the router\n")
            return
        self._reply(*self.server.relay(0, "GET", self.path, {}, None))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            index = next(self.server.turn)
            self.server.sent[index] += 1
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        self._reply(*self.server.relay(index, "POST", self.path, headers, body))


@pytest.fixture
def router() -> Iterator[Callable[[list[str]], Router]]:
    started: list[tuple[Router, threading.Thread]] = []

    def start(replicas: list[str]) -> Router:
        server = Router(replicas)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_acceptance_behind_a_router_is_the_sum_of_each_replicas_metrics(
    serve: Callable[..., FakeServer],  # noqa: F811 - the fixture imported above
    router: Callable[[list[str]], Router],
) -> None:
    replicas = [serve(), serve()]
    front = router([r.url for r in replicas])
    urls = [f"{r.url}/metrics" for r in replicas]
    engine = _engine({"spec": front.url}, metrics_urls={"spec": urls})
    engine.run(_prompts(2), "spec", repetition=-1)  # cumulative counters: the next run sees only its own
    run = engine.run(_prompts(6), "spec", repetition=0)
    assert all(t.ok for t in run.traces) and front.sent == [4, 4]
    per_replica = SpecCounters(2 * 3 * 3, 2 * 12 * 3, 2 * 5 * 3, (18, 6, 6, 0))  # 3 requests each, 2 engine labels
    assert run.counters == SpecCounters(36, 144, 60, (36, 12, 12, 0))
    record = engine.served_runs[-1]
    assert record.note is None and record.server is not None and record.server.requests == 6
    assert list(record.replicas) == urls
    assert [v.counters for v in record.replicas.values()] == [per_replica, per_replica]
    assert [v.requests for v in record.replicas.values()] == [3, 3]

    alone = _engine({"spec": front.url})  # the router's own /metrics has no counters: not exposed, said so
    assert alone.run(_prompts(2), "spec", repetition=0).counters is None
    assert f"{front.url}/metrics" in (alone.served_runs[-1].note or "")


def test_a_replica_that_cannot_be_read_leaves_no_partial_sum(
    serve: Callable[..., FakeServer],  # noqa: F811 - the fixture imported above
    router: Callable[[list[str]], Router],
) -> None:
    replicas = [serve(), serve(metrics=False)]
    front = router([r.url for r in replicas])
    urls = [f"{r.url}/metrics" for r in replicas]
    engine = _engine({"spec": front.url}, metrics_urls={"spec": urls})
    run = engine.run(_prompts(4), "spec", repetition=0)
    assert run.counters is None and all(t.ok for t in run.traces)
    note = engine.served_runs[-1].note or ""
    assert note.startswith("one of 2 replicas unread, so no sum: ") and urls[1] in note and "HTTP 404" in note


def test_summing_readings_and_validating_metrics_urls() -> None:
    a = MetricsReading(SpecCounters(1, 4, 2, (2, 0)), {"ttft": (0.5, 5.0)})
    b = MetricsReading(SpecCounters(2, 8, 5, (3, 1, 1)), {"ttft": (1.0, 5.0), "e2el": (2.0, 4.0)})
    total = sum_readings([a, b])
    assert total.counters == SpecCounters(3, 12, 7, (5, 1, 1))
    assert total.histograms == {"ttft": (1.5, 10.0), "e2el": (2.0, 4.0)}

    def settings(**options: Any) -> Any:
        return parse_settings("served", {"endpoints": {"spec": "http://127.0.0.1:8000"}, **options}, "m", SlaLimits())

    assert settings(metrics_urls={"spec": "http://127.0.0.1:9001/metrics"}).metrics_urls == {
        "spec": ("http://127.0.0.1:9001/metrics",)
    }
    with pytest.raises(ConfigError, match=r"metrics_urls\.spec: host '10\.0\.0\.11' is not loopback"):
        settings(metrics_urls={"spec": ["http://10.0.0.11:8000/metrics"]})
    listed = settings(metrics_urls={"spec": ["http://10.0.0.11:8000/metrics"]}, allowed_hosts=["10.0.0.11"])
    assert listed.metrics_urls["spec"] == ("http://10.0.0.11:8000/metrics",)
    with pytest.raises(ConfigError, match=r"metrics_urls\.spec: 'http://127\.0\.0\.1:9001': give the whole URL"):
        settings(metrics_urls={"spec": ["http://127.0.0.1:9001"]})
    with pytest.raises(ConfigError, match=r"metrics_urls\.spec: expected a list of /metrics URLs"):
        settings(metrics_urls={"spec": []})
