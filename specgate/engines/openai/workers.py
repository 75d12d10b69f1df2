"""Worker processes for loads one event loop cannot hold: `workers: N` (or `auto`) in a served pair's options.

One event loop sends a streamed request for well under a millisecond of CPU, but past a few hundred requests per
second it fills its core and its own stamps start to lag. With `workers` > 1 a run is split among that many
processes, each with its own event loop, connections and share of the slots (`client.split_share`: request i in
schedule order to process i mod n; the slots as evenly as they go, so the total in flight never exceeds the
concurrency). In a closed loop (no request rate) a process whose requests finish early does not take another's,
so the tail of a run can be a little less loaded; with a rate every request still leaves when it is due.

Nothing of the processes' start-up falls inside the measured window: they are started (`spawn`) when the engine
first needs them and kept until `close()`; per run each is handed its share, opens and warms its connections and
says it is ready, and only then does the parent choose one start instant for all (`time.perf_counter()` is
CLOCK_MONOTONIC, one clock for every process of a host, so the stamps of all processes compare). Each hands back
its `ShareResult`; a process that fails, dies or does not answer in time fails the run with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from specgate.engines.openai.client import Share, ShareResult, run_share
from specgate.errors import MeasurementError

LEAD_S = 0.02  # from choosing the start instant to the start: time for every process to hear it
SLOTS_PER_WORKER = 32  # `workers: auto`: one process per this many slots, up to the host's cores


def auto_workers(concurrency: int) -> int:
    """`workers: auto`: one process per 32 slots, at most one per core of this host."""
    return max(1, min(os.cpu_count() or 1, math.ceil(concurrency / SLOTS_PER_WORKER)))


def _serve(conn: Connection) -> None:
    """A worker process: run each share it is handed until told to stop (None) or the parent goes away."""
    while True:
        try:
            share = conn.recv()
        except (EOFError, OSError):
            return
        if share is None:
            return

        def ready() -> float:
            conn.send(("ready", None))
            start = conn.recv()
            if start is None:
                raise RuntimeError("the run was called off before it started")
            return float(start)

        try:
            conn.send(("done", asyncio.run(run_share(share, ready=ready))))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class Workers:
    """`count` worker processes, started once and reused for every run until `close()` (or until a run fails:
    then `broken`, and the engine starts new ones)."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.count = count
        self.broken = False  # a run failed in a way that may leave a process out of step: start afresh
        self._conns: list[Connection] = []
        self._processes: list[Any] = []
        for _ in range(count):
            parent, child = context.Pipe()
            process = context.Process(target=_serve, args=(child,), daemon=True, name="specgate-load-worker")
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)

    def _receive(self, conn: Connection, timeout_s: float, expect: str) -> Any:
        if not conn.poll(timeout_s):
            raise MeasurementError(f"a load worker process did not answer within {timeout_s:g} s (expected {expect})")
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError) as exc:
            raise MeasurementError(f"a load worker process died ({type(exc).__name__}) before {expect}") from None
        if kind == "error":
            raise MeasurementError(f"a load worker process failed: {payload}")
        return payload

    def run(self, shares: Sequence[Share]) -> list[ShareResult]:
        """Hand out the shares (at most one per process), wait until every process is ready, start them together,
        and collect their results."""
        if len(shares) > self.count:
            raise ValueError(f"{len(shares)} shares for {self.count} worker processes")
        conns, failure = [], None
        for conn, share in zip(self._conns, shares, strict=False):
            try:
                conn.send(share)
                conns.append(conn)
            except OSError as exc:
                failure = failure or MeasurementError(f"a load worker process is gone ({type(exc).__name__}: {exc})")
        warm_s = 2 * max(s.connect_timeout_s + s.timeout_s for s in shares)
        ready = []
        for conn in conns:
            try:
                self._receive(conn, warm_s, "ready")
                ready.append(conn)
            except MeasurementError as exc:
                failure = failure or exc
        if failure is not None:
            self.broken = True
            for conn in ready:
                conn.send(None)
            for conn in ready:
                with contextlib.suppress(MeasurementError):
                    self._receive(conn, warm_s, "to call the run off")
            raise failure
        start_s = time.perf_counter() + LEAD_S
        for conn in conns:
            conn.send(start_s)
        bound_s = max(s.duration_s for s in shares) + warm_s
        results = []
        for conn in conns:
            remaining = max(1.0, start_s + bound_s - time.perf_counter())
            try:
                results.append(self._receive(conn, remaining, "the run's results"))
            except MeasurementError as exc:
                failure = failure or exc
        if failure is not None:
            self.broken = True
            raise failure
        return results

    def close(self) -> None:
        """Stop the processes (politely, then by force)."""
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._conns.clear()
        self._processes.clear()
