"""One process's share of a served run: warmed connections, the schedule, one streamed request per prompt.

`run_share` is what sends a run, in the engine's own process (`workers: 1`) and in each worker process alike
(`specgate.engines.openai.workers`): it opens and warms one connection per slot, says it is ready, starts the
schedule at `start_s` (a `time.perf_counter()` instant, or now) and returns the requests' `ResponseStream`s and the
scheduler's `Dispatch`. Everything it takes and returns is plain data, so a worker process can be handed a share
and hand back its result.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from specgate.engines.base import Prompt
from specgate.engines.openai.schedule import Dispatch, run_schedule
from specgate.engines.openai.sse import ResponseStream, StreamError, describe_http_error
from specgate.engines.openai.wire import Connection, Exchange, Origin, Pool, WireError


@dataclass(frozen=True, slots=True)
class Share:
    """The requests one process sends: `indices` are their places in the run (prompt order), `requests` the
    encoded bytes (built before any clock starts), `offsets` when each is due after the start, `slots` how many it
    may have in flight."""

    root: str
    indices: tuple[int, ...]
    prompts: tuple[Prompt, ...]
    requests: tuple[bytes, ...]
    offsets: tuple[float, ...]
    slots: int
    warm_request: bytes
    timeout_s: float
    connect_timeout_s: float
    duration_s: float


@dataclass(frozen=True, slots=True)
class ShareResult:
    """What one process measured: its streams and dispatch (in the order of `Share.indices`), its connections
    (warmed before the start, opened during the run), when its schedule started and when its last request ended."""

    indices: tuple[int, ...]
    streams: tuple[ResponseStream, ...]
    dispatch: Dispatch
    warmed: int
    opened: int
    start_s: float
    end_s: float


async def send_streamed(
    pool: Pool, request: bytes, stream: ResponseStream, timeout_s: float, connect_timeout_s: float
) -> float | None:
    """One streaming request on a pooled connection; returns when its bytes left (None: they never did, e.g. no
    connection). Every failure ends up in `stream.error`."""
    connection: Connection | None = None
    try:
        connection = await pool.acquire()
        exchange = Exchange(stream.receive, asyncio.get_running_loop())
        stream.submit_s = connection.send(request, exchange)
        stream.done_s = await exchange.done
        if exchange.status != 200:
            raise StreamError(describe_http_error(exchange.status, exchange.reason_phrase, bytes(exchange.error_body)))
        stream.end()
    except StreamError as exc:
        stream.error = str(exc)
    except WireError as exc:
        stream.error = stream.describe_wire_error(exc, timeout_s, connect_timeout_s)
    finally:
        if connection is not None:
            pool.release(connection)
        stream.done_s = stream.done_s or time.perf_counter()
    return stream.submit_s or None


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a measured window, and the objects alive before it frozen out of
    its reach. A full collection walks every object of the process (a pytest session's heap: milliseconds) and
    stops the event loop meanwhile: any arrival that falls in it is stamped that much late, which was most of
    the client's TTFT error at its 99th percentile. Reference counting still frees what a run drops; whatever
    cycles it leaves are collected when the window ends, outside every clock."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


async def run_share(
    share: Share, *, ready: Callable[[], float | None] | None = None, start_s: float | None = None
) -> ShareResult:
    """Warm one connection per slot, then call `ready` (which may return the start instant, blocking until it is
    chosen), then send the share on its schedule from `start_s` (default: now)."""
    streams = [ResponseStream(p) for p in share.prompts]
    pool = Pool(Origin.of(share.root), connect_timeout_s=share.connect_timeout_s, read_timeout_s=share.timeout_s)
    await pool.warm(min(share.slots, len(share.prompts)), share.warm_request)

    async def send(index: int) -> float | None:
        return await send_streamed(
            pool, share.requests[index], streams[index], share.timeout_s, share.connect_timeout_s
        )

    with collector_paused():
        if ready is not None:
            start_s = ready() or start_s
        start_s = time.perf_counter() if start_s is None else start_s
        dispatch = await run_schedule(
            len(share.prompts),
            send,
            share.offsets,
            concurrency=share.slots,
            duration_s=share.duration_s,
            start_s=start_s,
        )
        end_s = time.perf_counter()
    pool.close()
    return ShareResult(share.indices, tuple(streams), dispatch, pool.warmed, pool.opened, start_s, end_s)


def split_share(share: Share, workers: int) -> list[Share]:
    """The share split among `workers` processes: request i (in schedule order) to process i mod n, the slots as
    evenly as they go (the first `slots % n` one more); a process left without a slot gets no request."""
    n = max(1, min(workers, share.slots, len(share.indices)))
    order = sorted(range(len(share.indices)), key=lambda i: share.offsets[i])
    parts = []
    for w in range(n):
        mine = sorted(order[w::n])
        parts.append(
            Share(
                root=share.root,
                indices=tuple(share.indices[i] for i in mine),
                prompts=tuple(share.prompts[i] for i in mine),
                requests=tuple(share.requests[i] for i in mine),
                offsets=tuple(share.offsets[i] for i in mine),
                slots=share.slots // n + (1 if w < share.slots % n else 0),
                warm_request=share.warm_request,
                timeout_s=share.timeout_s,
                connect_timeout_s=share.connect_timeout_s,
                duration_s=share.duration_s,
            )
        )
    return parts


def merge_results(count: int, results: Sequence[ShareResult]) -> tuple[list[ResponseStream], Dispatch]:
    """The processes' results put back in prompt order: one stream and one dispatch entry per request."""
    streams: list[ResponseStream | None] = [None] * count
    merged = Dispatch([0.0] * count, [None] * count, [None] * count, [False] * count, [None] * count)
    for result in results:
        d = result.dispatch
        for local, index in enumerate(result.indices):
            streams[index] = result.streams[local]
            merged.due_s[index] = d.due_s[local]
            merged.released_s[index] = d.released_s[local]
            merged.sent_s[index] = d.sent_s[local]
            merged.finished[index] = d.finished[local]
            merged.outcomes[index] = d.outcomes[local]
    missing = [i for i, s in enumerate(streams) if s is None]
    if missing:
        raise ValueError(f"requests {missing} were in no process's share")
    return [s for s in streams if s is not None], merged
