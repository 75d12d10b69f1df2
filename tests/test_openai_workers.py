"""The openai engine's load worker processes (`workers: N`) against the in-process fake server of
test_openai_engine: shares, one start instant, one clock, the concurrency held, failures reported."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import pytest
import test_openai_engine
from test_openai_engine import FakeServer, _engine, _prompts

from conftest import needs_module
from specgate.engines.base import arrival_offsets
from specgate.engines.openai.client import Share, merge_results, split_share
from specgate.engines.openai.load import parse_settings
from specgate.engines.openai.schedule import Dispatch
from specgate.engines.openai.workers import auto_workers
from specgate.errors import ConfigError, MeasurementError

serve = test_openai_engine.serve  # the fake servers' fixture

needs_module("httpx", "pip install 'specgate[openai]'")


def _share(count: int, slots: int, offsets: tuple[float, ...] | None = None) -> Share:
    prompts = tuple(_prompts(count))
    return Share(
        root="http://127.0.0.1:9",
        indices=tuple(range(count)),
        prompts=prompts,
        requests=tuple(f"request {i}".encode() for i in range(count)),
        offsets=offsets or (0.0,) * count,
        slots=slots,
        warm_request=b"GET",
        timeout_s=1.0,
        connect_timeout_s=1.0,
        duration_s=10.0,
    )


def test_split_share_deals_requests_in_schedule_order_and_slots_evenly() -> None:
    offsets = (0.5, 0.1, 0.4, 0.2, 0.3, 0.0, 0.6)
    parts = split_share(_share(7, slots=5, offsets=offsets), 2)
    assert [p.slots for p in parts] == [3, 2]
    # schedule order is 5, 1, 3, 4, 2, 0, 6: every other one to each process
    assert [p.indices for p in parts] == [(2, 3, 5, 6), (0, 1, 4)]
    for part in parts:
        assert part.offsets == tuple(offsets[i] for i in part.indices)
        assert part.requests == tuple(f"request {i}".encode() for i in part.indices)
        assert tuple(p.id for p in part.prompts) == tuple(f"p{i}" for i in part.indices)
    assert sorted(i for p in parts for i in p.indices) == list(range(7))
    assert len(split_share(_share(7, slots=2), 4)) == 2  # never more processes than slots
    assert len(split_share(_share(1, slots=8), 4)) == 1  # nor than requests


def test_merge_results_puts_every_request_back_in_prompt_order() -> None:
    from specgate.engines.openai.client import ShareResult
    from specgate.engines.openai.sse import ResponseStream

    parts = split_share(_share(5, slots=2), 2)
    results = []
    for part in parts:
        n = len(part.indices)
        dispatch = Dispatch(
            [float(i) for i in part.indices], [None] * n, [i + 0.5 for i in part.indices], [True] * n, [None] * n
        )
        results.append(
            ShareResult(part.indices, tuple(ResponseStream(p) for p in part.prompts), dispatch, 1, 0, 0.0, 1.0)
        )
    streams, merged = merge_results(5, results)
    assert [s.prompt.id for s in streams] == [f"p{i}" for i in range(5)]
    assert merged.due_s == [0.0, 1.0, 2.0, 3.0, 4.0] and merged.sent_s == [0.5, 1.5, 2.5, 3.5, 4.5]
    first = results[0]  # indices (0, 2, 4); without its last request, request 4 is in no share
    short = ShareResult(first.indices[:2], first.streams[:2], first.dispatch, 1, 0, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"\[4\]"):
        merge_results(5, [short, results[1]])


def test_workers_option_is_validated() -> None:
    from specgate.config import SlaLimits

    endpoints = {"endpoints": {"spec": "http://127.0.0.1:8000"}}
    sla = SlaLimits()
    assert parse_settings("p", {**endpoints, "concurrency": 8, "workers": 2}, "m", sla).workers == 2
    assert parse_settings("p", endpoints, "m", sla).workers == 1
    auto = parse_settings("p", {**endpoints, "concurrency": 64, "workers": "auto"}, "m", sla).workers
    assert auto == auto_workers(64) == min(os.cpu_count() or 1, 2)
    for bad, why in ((0, "must be > 0"), (3, "give ≤ 2"), ("many", "'auto'"), (1.5, "integer")):
        with pytest.raises(ConfigError, match=why) as info:
            parse_settings("p", {**endpoints, "concurrency": 2, "workers": bad}, "m", sla)
        assert "speculation.options.workers" in str(info.value)


def test_two_worker_processes_send_every_request_on_warmed_connections(serve: Callable[..., FakeServer]) -> None:
    server = serve(chunk_delay_s=0.01)
    engine = _engine({"spec": server.url}, concurrency=4, workers=2)
    try:
        runs = [engine.run(_prompts(10), "spec", repetition=r) for r in range(2)]  # the processes are reused
    finally:
        engine.close()
    for run in runs:
        assert [t.prompt_id for t in run.traces] == [f"p{i}" for i in range(10)]
        assert all(t.ok for t in run.traces), [t.error for t in run.traces]
        assert all(t.chunk_tokens == (1,) * 6 for t in run.traces)
    assert len(server.arrivals) == 20
    assert server.max_in_flight <= 4, "the processes together exceeded the concurrency"
    assert set(server.post_ports) <= server.warmed_ports, "a measured request opened its own connection"
    for record in engine.served_runs:
        client = record.client
        assert client.processes == 2 and "from 2 processes" in client.describe()
        assert (client.warm_connections, client.connections_opened, client.n_sent) == (4, 0, 10)
    # one clock across processes: each request left before the server read it (CLOCK_MONOTONIC is host-wide)
    sent = sorted(t.submit_s for run in runs for t in run.traces)
    assert all(s <= a for s, a in zip(sent, sorted(server.arrivals), strict=True))


def test_worker_processes_keep_the_poisson_schedule(serve: Callable[..., FakeServer]) -> None:
    server = serve(tokens=2, chunk_delay_s=0.001, first_token_delay_s=0.001)
    engine = _engine({"spec": server.url}, request_rate=5.0, seed=4, concurrency=4, workers=2)
    try:
        run = engine.run(_prompts(8), "spec", repetition=0)
    finally:
        engine.close()
    assert all(t.ok for t in run.traces)
    expected = np.asarray(arrival_offsets(8, 5.0, seed=4, repetition=0))
    record = engine.served_runs[-1]
    due = np.asarray(record.client.due_s)
    # both processes started at one instant: every due time is that instant plus the request's offset
    assert np.allclose(due - due[0], expected - expected[0], atol=1e-9)
    assert all(s is not None and s >= d for d, s in zip(record.client.due_s, record.client.sent_s, strict=True))
    # Two processes send: requests due closer together than the client's own send lag may leave in either order
    # (here two are due 2.9 ms apart); every pair due further apart than twice the largest lag leaves in order.
    lag = max(s - d for d, s in zip(record.client.due_s, record.client.sent_s, strict=True))
    submitted = np.asarray([t.submit_s for t in run.traces])
    apart = [(i, j) for i in range(8) for j in range(i + 1, 8) if abs(expected[i] - expected[j]) > 2 * lag]
    assert len(apart) >= 20  # most of the 28 pairs: a lag that large would fail the schedule anyway
    assert all((submitted[i] < submitted[j]) == (expected[i] < expected[j]) for i, j in apart)


def test_a_failing_share_fails_the_run_and_fresh_processes_serve_the_next(serve: Callable[..., FakeServer]) -> None:
    server = serve(chunk_delay_s=0.001)
    engine = _engine({"spec": server.url}, concurrency=2, workers=2)
    try:
        engine.run(_prompts(4), "spec", repetition=0)
        first = engine._workers
        assert first is not None
        first._processes[1].kill()  # a worker process dies (OOM kill, say)
        first._processes[1].join()
        with pytest.raises(MeasurementError, match="load worker process"):
            engine.run(_prompts(4), "spec", repetition=1)
        run = engine.run(_prompts(4), "spec", repetition=2)
        assert engine._workers is not first and all(t.ok for t in run.traces)
    finally:
        engine.close()
    assert engine._workers is None


def test_no_garbage_collection_runs_inside_the_measured_window(serve: Callable[..., FakeServer]) -> None:
    """A collection stops the event loop; inside the window it would delay whichever arrival it met. With the
    collector's threshold at 1 (a collection on almost every allocation) none may start between the first send and
    the last arrival (thousands start around it), and the collector is back to its state after the run."""
    import gc

    server = serve(chunk_delay_s=0.002)
    engine = _engine({"spec": server.url}, concurrency=2)
    starts: list[float] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            starts.append(time.perf_counter())

    threshold = gc.get_threshold()
    gc.set_threshold(1)
    gc.callbacks.append(record)
    try:
        run = engine.run(_prompts(6), "spec", repetition=0)
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*threshold)
        engine.close()
    assert all(t.ok for t in run.traces)
    first = min(t.submit_s for t in run.traces)
    last = max(t.chunk_times_s[-1] for t in run.traces)
    inside = [s for s in starts if first <= s <= last]
    assert starts, "the threshold of 1 triggers collections around the run"
    assert not inside, f"{len(inside)} collections ran inside the measured window"
    assert gc.isenabled() and gc.get_freeze_count() == 0, "the collector is left as it was found"
