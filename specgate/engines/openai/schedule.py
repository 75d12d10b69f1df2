"""When each request of a served run is sent: the scheduler, and what it records about its own precision.

`run_schedule` keeps `concurrency` workers, one per slot. A free worker takes the next request in schedule order,
waits until it is due (`offsets[i]` seconds after the start; all due at once without a rate) and sends it, so the
configured concurrency is held without a burst of tasks and requests leave in the order of their due times.
With a Poisson rate, a request due while every slot is busy waits for one: that wait is *queueing*, the offered
load exceeding the concurrency, and is kept apart from the client's own *lag*.

Per request the scheduler records three times (`time.perf_counter()` seconds): `due_s` (the start plus its
offset), `released_s` (when a worker took it: the later of its due time and a free slot), and the send time that
`send` returns (just before its bytes were written). `summarize_dispatch` turns them into `ClientTiming`: the
offered rate, the achieved one, the lag (send time − max(due, slot free): the client's own delay, waking up and
writing) and the queueing (slot free − due, when positive).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

SPIN_S = 0.001


@dataclass(frozen=True, slots=True)
class Spread:
    """P50, P99 and the maximum of a list of durations, in milliseconds (zeros for an empty list)."""

    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Spread:
        if not seconds:
            return cls(0.0, 0.0, 0.0)
        import numpy as np

        values = 1000.0 * np.asarray(seconds, dtype=float)
        return cls(float(np.percentile(values, 50)), float(np.percentile(values, 99)), float(values.max()))

    def describe(self) -> str:
        return f"P50 {self.p50_ms:.3f} / P99 {self.p99_ms:.3f} / max {self.max_ms:.3f} ms"


@dataclass(frozen=True, slots=True)
class ClientTiming:
    """How faithfully the client kept its schedule in one run (see the module docstring).

    `offered_rate_per_s` is the configured Poisson rate (None: as fast as the concurrency allows);
    `achieved_rate_per_s` is requests sent per second between the first and the last send. `queued` is None
    without a rate: every request is then due at the start, and waiting for a slot is the concurrency at work.
    `due_s`, `sent_s` are per request, in prompt order (`sent_s` is None for a request never sent).
    `warm_connections` were opened before the clock started; `connections_opened` during the run (a server
    closed an idle one); `processes` sent the run (`workers`), each with its own event loop."""

    offered_rate_per_s: float | None
    achieved_rate_per_s: float | None
    lag: Spread
    queued: Spread | None
    n_sent: int
    due_s: tuple[float, ...]
    sent_s: tuple[float | None, ...]
    warm_connections: int
    connections_opened: int
    processes: int = 1

    def describe(self) -> str:
        offered = "as fast as slots free" if self.offered_rate_per_s is None else f"{self.offered_rate_per_s:g}/s"
        achieved = "n/a" if self.achieved_rate_per_s is None else f"{self.achieved_rate_per_s:.1f}/s"
        queued = "" if self.queued is None else f"; queued for a slot {self.queued.describe()}"
        processes = f", from {self.processes} processes" if self.processes > 1 else ""
        return (
            f"offered {offered}, achieved {achieved}{processes}; send lag {self.lag.describe()}{queued}; "
            f"{self.warm_connections} warm connections, {self.connections_opened} opened during the run"
        )


@dataclass(slots=True)
class Dispatch:
    """The scheduler's record of one run, per request in prompt order (filled while it runs)."""

    due_s: list[float]
    released_s: list[float | None]
    sent_s: list[float | None]
    finished: list[bool]
    outcomes: list[str | None]


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    """Sleep until loop time `when`: the selector's millisecond timeout wakes late, so the last `SPIN_S` yields
    to the loop instead (other requests' events keep being handled)."""
    if when - loop.time() > SPIN_S:
        await asyncio.sleep(when - loop.time() - SPIN_S)
    while loop.time() < when:
        await asyncio.sleep(0)


async def run_schedule(
    count: int,
    send: Callable[[int], Awaitable[float | None]],
    offsets: Sequence[float],
    *,
    concurrency: int,
    duration_s: float,
    start_s: float | None = None,
) -> Dispatch:
    """Send request i (`send(i)`, which returns the time its bytes left, or None when they never did) when due
    and a slot is free; stop everything at `duration_s`. The schedule starts at `start_s` (a `time.perf_counter()`
    instant; default now): several processes given one instant start together.

    Each outcome is None when `send` finished, or why it did not: never sent, or cancelled in flight, at the time
    bound, or the exception `send` raised. Nothing is retried."""
    loop = asyncio.get_running_loop()
    clock_to_loop = loop.time() - time.perf_counter()
    if start_s is not None and start_s > time.perf_counter():
        await _sleep_until(loop, start_s + clock_to_loop)
    start = time.perf_counter() if start_s is None else start_s
    dispatch = Dispatch([start + o for o in offsets], [None] * count, [None] * count, [False] * count, [None] * count)
    taken = iter(sorted(range(count), key=lambda i: offsets[i]))

    async def worker() -> None:
        for index in taken:
            due, took = dispatch.due_s[index], time.perf_counter()
            if due > took:
                await _sleep_until(loop, due + clock_to_loop)
            dispatch.released_s[index] = max(due, took)
            try:
                dispatch.sent_s[index] = await send(index)
            except Exception as exc:
                dispatch.outcomes[index] = f"{type(exc).__name__}: {exc}"
            dispatch.finished[index] = True

    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, count))]
    if not workers:
        return dispatch
    _, pending = await asyncio.wait(workers, timeout=duration_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for index in range(count):
        if not dispatch.finished[index]:
            state = "never sent" if dispatch.released_s[index] is None else "cancelled in flight"
            dispatch.outcomes[index] = f"{state}: the run reached its time bound duration_s={duration_s:g}"
    return dispatch


def summarize_dispatch(
    dispatch: Dispatch, rate: float | None, *, warm_connections: int, connections_opened: int, processes: int = 1
) -> ClientTiming:
    """The run's `ClientTiming`: offered and achieved rate, lag and queueing (see the module docstring)."""
    lags, queued, sent = [], [], []
    for due, released, sent_s in zip(dispatch.due_s, dispatch.released_s, dispatch.sent_s, strict=True):
        if released is None or sent_s is None:
            continue
        lags.append(max(0.0, sent_s - released))
        queued.append(released - due)
        sent.append(sent_s)
    span = max(sent) - min(sent) if len(sent) > 1 else 0.0
    return ClientTiming(
        offered_rate_per_s=rate,
        achieved_rate_per_s=(len(sent) - 1) / span if span > 0 else None,
        lag=Spread.of(lags),
        queued=None if rate is None else Spread.of(queued),
        n_sent=len(sent),
        due_s=tuple(dispatch.due_s),
        sent_s=tuple(dispatch.sent_s),
        warm_connections=warm_connections,
        connections_opened=connections_opened,
        processes=processes,
    )
