"""The openai engine's HTTP/1.1 client and its scheduler, without a server: bytes in, events and stamps out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import numpy as np
import pytest

from specgate.engines.openai.schedule import Spread, run_schedule, summarize_dispatch
from specgate.engines.openai.wire import Connection, Exchange, Origin, WireError, encode_request


class FakeTransport:
    """Records what the connection writes and when; closing is remembered."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, bytes]] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append((time.perf_counter(), data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _connection() -> tuple[Connection, FakeTransport]:
    connection, transport = Connection(read_timeout_s=60.0), FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + _chunk(b'data: {"a": 1}\r\n\r\n')  # CRLF line ends
    + _chunk(b'data: {"b"')  # one event over two chunks
    + _chunk(b": 2}\n\n: a comment\n\n")
    + _chunk(b"event: x\ndata: line1\ndata:line2\n\n")  # two data lines
    + _chunk(b"data: [DONE]\n\n")
    + b"0\r\n\r\n"
)
EVENTS = ['{"a": 1}', '{"b": 2}', "line1\nline2", "[DONE]"]


def _exchange(loop: asyncio.AbstractEventLoop) -> tuple[Exchange, list[tuple[str, float]]]:
    events: list[tuple[str, float]] = []
    return Exchange(lambda data, now: events.append((data, now)), loop), events


@pytest.mark.parametrize("split", range(len(STREAM) + 1))
def test_a_chunked_stream_gives_the_same_events_however_split(loop: asyncio.AbstractEventLoop, split: int) -> None:
    connection, transport = _connection()
    exchange, events = _exchange(loop)
    sent_s = connection.send(b"POST / HTTP/1.1\r\n\r\n", exchange)
    connection.data_received(STREAM[:split])
    connection.data_received(STREAM[split:])
    assert [data for data, _ in events] == EVENTS
    assert exchange.done.done() and exchange.status == 200 and exchange.done.result() >= sent_s
    assert connection.reusable and not transport.closed  # at a message boundary: kept for the next request


def test_each_event_carries_the_time_its_bytes_were_read(loop: asyncio.AbstractEventLoop) -> None:
    connection, _ = _connection()
    exchange, events = _exchange(loop)
    connection.send(b"POST / HTTP/1.1\r\n\r\n", exchange)
    head, rest = STREAM.split(b"\r\n\r\n", 1)
    before = time.perf_counter()
    connection.data_received(head + b"\r\n\r\n" + rest[:40])
    middle = time.perf_counter()
    connection.data_received(rest[40:])
    assert before <= events[0][1] <= middle <= events[-1][1]


def test_the_send_stamp_is_read_before_the_bytes_are_written(loop: asyncio.AbstractEventLoop) -> None:
    connection, transport = _connection()
    exchange, _ = _exchange(loop)
    request = encode_request("POST", Origin.of("http://127.0.0.1:8000"), "/v1/completions", {}, b"{}")
    sent_s = connection.send(request, exchange)
    ((written_s, data),) = transport.writes
    assert sent_s <= written_s and data == request
    assert request.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
    assert request.endswith(b"Content-Length: 2\r\n\r\n{}")


def test_an_error_status_keeps_the_start_of_the_body_and_the_connection(loop: asyncio.AbstractEventLoop) -> None:
    connection, _ = _connection()
    exchange, events = _exchange(loop)
    connection.send(b"POST / HTTP/1.1\r\n\r\n", exchange)
    body = b'{"error": "' + b"x" * 2000 + b'"}'
    connection.data_received(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 500 \r\nContent-Length: %d\r\n\r\n" % len(body))
    connection.data_received(body)
    assert exchange.done.done() and events == []
    assert (exchange.status, exchange.reason_phrase) == (500, "Internal Server Error")
    assert bytes(exchange.error_body) == body[:480]
    assert connection.reusable


def test_connection_close_is_honoured(loop: asyncio.AbstractEventLoop) -> None:
    connection, transport = _connection()
    exchange, _ = _exchange(loop)
    connection.send(b"GET / HTTP/1.1\r\n\r\n", exchange)
    connection.data_received(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    assert exchange.done.done() and transport.closed and not connection.reusable


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_a_response_without_a_body_ends_at_its_headers(loop: asyncio.AbstractEventLoop, status: bytes) -> None:
    """204 and 304 have no body and often no Content-Length: the exchange ends at the headers (not at the read
    timeout, waiting for a body until the server closes), and the connection stays usable."""
    connection, _ = _connection()
    exchange, events = _exchange(loop)
    connection.send(b"GET /health HTTP/1.1\r\n\r\n", exchange)
    connection.data_received(b"HTTP/1.1 " + status + b"\r\nServer: x\r\n\r\n")
    assert exchange.done.done() and events == [] and connection.reusable
    second, _ = _exchange(loop)
    connection.send(b"GET / HTTP/1.1\r\n\r\n", second)
    connection.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert second.done.done() and second.status == 200


def test_a_body_read_until_close_ends_with_the_connection(loop: asyncio.AbstractEventLoop) -> None:
    connection, _ = _connection()
    exchange, events = _exchange(loop)
    connection.send(b"POST / HTTP/1.1\r\n\r\n", exchange)
    connection.data_received(b"HTTP/1.0 200 OK\r\n\r\ndata: [DONE]\n\n")
    assert not exchange.done.done()
    connection.connection_lost(None)
    assert exchange.done.done() and [d for d, _ in events] == ["[DONE]"] and not connection.reusable


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (STREAM[:150], "closed"),  # the server went away mid-body
        (b"SSH-2.0-OpenSSH\r\n\r\n", "protocol"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "protocol"),
    ],
)
def test_a_broken_response_fails_the_exchange_and_closes(
    loop: asyncio.AbstractEventLoop, data: bytes, kind: str
) -> None:
    connection, transport = _connection()
    exchange, _ = _exchange(loop)
    connection.send(b"POST / HTTP/1.1\r\n\r\n", exchange)
    connection.data_received(data)
    if kind == "closed":
        connection.connection_lost(None)
    error = exchange.done.exception()
    assert isinstance(error, WireError) and error.kind == kind
    assert not connection.reusable and (transport.closed or kind == "closed")


def test_an_event_the_stream_refuses_fails_the_exchange(loop: asyncio.AbstractEventLoop) -> None:
    connection, transport = _connection()

    def refuse(data: str, now: float) -> None:
        raise ValueError(f"bad event {data}")

    exchange = Exchange(refuse, loop)
    connection.send(b"POST / HTTP/1.1\r\n\r\n", exchange)
    connection.data_received(STREAM)
    assert str(exchange.done.exception()) == 'bad event {"a": 1}'
    assert transport.closed


def test_silence_past_the_read_timeout_fails_the_exchange() -> None:
    async def silent() -> BaseException | None:
        connection = Connection(read_timeout_s=0.05)
        connection.connection_made(FakeTransport())  # type: ignore[arg-type]
        exchange = Exchange(lambda data, now: None, asyncio.get_running_loop())
        connection.send(b"POST / HTTP/1.1\r\n\r\n", exchange)
        await asyncio.wait([exchange.done], timeout=30)
        return exchange.done.exception()

    error = asyncio.run(silent())
    assert isinstance(error, WireError) and error.kind == "read timeout"


# ---- the scheduler ------------------------------------------------------------------------------------------------


def test_requests_leave_in_the_order_of_their_due_times() -> None:
    offsets = (0.06, 0.0, 0.04, 0.02, 0.05, 0.01)
    order: list[int] = []

    async def send(index: int) -> float:
        order.append(index)
        return time.perf_counter()

    dispatch = asyncio.run(run_schedule(6, send, offsets, concurrency=6, duration_s=60))
    assert order == list(np.argsort(offsets))
    assert dispatch.outcomes == [None] * 6
    for due, sent in zip(dispatch.due_s, dispatch.sent_s, strict=True):
        assert sent is not None and sent >= due  # never early


def test_the_concurrency_is_held_and_never_exceeded() -> None:
    in_flight, peak = 0, 0

    async def send(index: int) -> float:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (index % 3))
        in_flight -= 1
        return time.perf_counter()

    dispatch = asyncio.run(run_schedule(40, send, (0.0,) * 40, concurrency=5, duration_s=60))
    assert peak == 5 and all(dispatch.finished)


def test_the_client_lag_and_queueing_are_reported() -> None:
    async def send(index: int) -> float:
        sent = time.perf_counter()
        await asyncio.sleep(0.02)
        return sent

    offsets = (0.0, 0.0, 0.0, 0.03)
    dispatch = asyncio.run(run_schedule(4, send, offsets, concurrency=2, duration_s=60))
    timing = summarize_dispatch(dispatch, 50.0, warm_connections=2, connections_opened=0)
    assert timing.n_sent == 4 and timing.sent_s == tuple(dispatch.sent_s) and timing.due_s == tuple(dispatch.due_s)
    assert timing.offered_rate_per_s == 50.0 and timing.achieved_rate_per_s is not None
    assert timing.lag.p50_ms >= 0 and timing.lag.max_ms >= timing.lag.p99_ms >= timing.lag.p50_ms
    assert timing.queued is not None and timing.queued.max_ms >= 20.0  # the third waited for a slot ≥ 20 ms
    assert "send lag P50" in timing.describe() and "queued for a slot" in timing.describe()
    closed_loop = summarize_dispatch(dispatch, None, warm_connections=2, connections_opened=0)
    assert closed_loop.queued is None and "queued" not in closed_loop.describe()


def test_spread_has_known_percentiles() -> None:
    spread = Spread.of([0.001 * i for i in range(1, 101)])
    assert spread.p50_ms == pytest.approx(50.5) and spread.p99_ms == pytest.approx(99.01)
    assert spread.max_ms == pytest.approx(100.0) and Spread.of([]) == Spread(0.0, 0.0, 0.0)
