"""Arms in lockstep: the requests of one unit (one prompt, every arm) run at once, taking turns step by step.

Measured one after another, two requests of the same prompt are seconds apart, and whatever the machine does in
between (another process, a clock change, a neighbour on the host) falls on one of them: on a shared 2-vCPU VM two
identical requests then differ by 6–8 % in CPU time. In lockstep each arm's request runs in its own thread, and a
turn passes from arm to arm at every decoding step (every chunk the engine streams): arm A's step k, arm B's step k,
arm A's step k + 1, … Each arm is timed only while it holds the turn, so its times are those of its own steps, and
the arms' steps are milliseconds apart: slow drift and most interference fall on every arm alike.

`Turns` passes the turn among the arms still running, in an order where every arm comes right after every other
equally often (`circuit`); `TurnClock` is an arm's streamer: it records,
at each chunk, the arm's own time so far (wall and process CPU), then hands the turn on and waits for it. Nothing
else runs on the hot path. Only one thread runs engine code at any moment (the others wait on a condition), so the
engine's threads serve whichever arm holds the turn, as they would serve one request alone.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from specgate.engines.clocks import spin_cpu

Span = tuple[float, float]
T = TypeVar("T")


def circuit(k: int) -> tuple[int, ...]:
    """An order of turns for `k` parties, repeated cyclically, in which every party comes right after every other
    exactly once per cycle and never after itself (an Eulerian circuit of the complete directed graph, from 0): for
    3 parties 0 1 0 2 1 2. Whatever one step leaves behind for the next (caches, memory), every arm then inherits
    it from every other arm alike within each unit, not from one arm in one unit and another in the next."""
    if k <= 1:
        return (0,) * k
    unused = {v: [u for u in reversed(range(k)) if u != v] for v in range(k)}
    stack, path = [0], []
    while stack:
        v = stack[-1]
        if unused[v]:
            stack.append(unused[v].pop())
        else:
            path.append(stack.pop())
    path.reverse()
    return tuple(path[:-1])


class Turns:
    """A turn passed among `n` parties in the order of `circuit` (party 0 first); a party that leaves is skipped
    from then on (the order is the circuit of the parties still running)."""

    __slots__ = ("_at", "_cv", "_holder", "_live", "_order")

    def __init__(self, n: int) -> None:
        self._cv = threading.Condition()
        self._live = list(range(n))
        self._order = circuit(n)
        self._at = 0
        self._holder = 0

    def wait(self, me: int) -> None:
        """Block until `me` holds the turn."""
        with self._cv:
            while self._holder != me:
                self._cv.wait()

    def hand_on(self, me: int) -> None:
        """Give the turn to the next party in the order, then wait for it to come back."""
        with self._cv:
            self._at = (self._at + 1) % len(self._order)
            self._holder = self._order[self._at]
            self._cv.notify_all()
            while self._holder != me:
                self._cv.wait()

    def leave(self, me: int) -> None:
        """`me` is done: the turn goes on without it."""
        with self._cv:
            if me not in self._live:
                return
            self._live.remove(me)
            self._order = tuple(self._live[i] for i in circuit(len(self._live)))
            if self._holder == me or self._holder not in self._live:
                self._at = 0
            else:
                self._at = self._order.index(self._holder)
            self._holder = self._order[self._at] if self._order else -1
            self._cv.notify_all()


class TurnClock:
    """An arm's streamer in lockstep: per chunk, the arm's own wall and CPU time since it started (the other arms'
    turns left out), and its size; `spans` are the (start, end) of each turn it held, for energy attribution.

    `start()` waits for the first turn and returns the (wall, CPU) origin; chunk times are that origin plus the
    arm's own time, so they read like an ordinary request's. `stop()` ends the last turn and returns the done time."""

    __slots__ = (
        "_base",
        "_base_cpu",
        "_cpu0",
        "_held",
        "_held_cpu",
        "_me",
        "_prompt_seen",
        "_slowdown",
        "_t0",
        "_turns",
        "cpu",
        "sizes",
        "spans",
        "times",
    )

    def __init__(self, turns: Turns, me: int, slowdown: float = 0.0) -> None:
        self._turns = turns
        self._me = me
        self._slowdown = slowdown
        self._prompt_seen = False
        self._base = self._base_cpu = self._t0 = self._cpu0 = self._held = self._held_cpu = 0.0
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.sizes: list[int] = []
        self.spans: list[Span] = []

    def start(self) -> tuple[float, float]:
        self._turns.wait(self._me)
        self._t0 = self._base = time.perf_counter()
        self._cpu0 = self._base_cpu = time.process_time()
        return self._base, self._base_cpu

    def put(self, value: Any) -> None:
        now = time.perf_counter()
        cpu = time.process_time()
        if not self._prompt_seen:  # generate streams the prompt first: not a step
            self._prompt_seen = True
            return
        if self._slowdown:
            spin_cpu((cpu - self._cpu0) * self._slowdown)
            now, cpu = time.perf_counter(), time.process_time()
        self._held += now - self._t0
        self._held_cpu += cpu - self._cpu0
        self.times.append(self._base + self._held)
        self.cpu.append(self._base_cpu + self._held_cpu)
        self.sizes.append(int(value.numel()))
        self.spans.append((self._t0, now))
        self._turns.hand_on(self._me)
        self._t0 = time.perf_counter()
        self._cpu0 = time.process_time()

    def end(self) -> None:
        pass

    def stop(self) -> float:
        """End the arm's last turn (after its request returned or failed); the done time on the arm's own clock."""
        now = time.perf_counter()
        self._held += now - self._t0
        self.spans.append((self._t0, now))
        self._turns.leave(self._me)
        return self._base + self._held

    @property
    def held_s(self) -> float:
        """The arm's own wall time so far."""
        return self._held


def current_cpu() -> int | None:
    """The CPU the calling thread runs on (Linux), else None."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def together(
    parties: Sequence[Callable[[TurnClock], T]], slowdowns: Sequence[float], *, cpu: int | None = None
) -> list[tuple[T, TurnClock]]:
    """Run each party (one arm's request, given its clock) in its own thread, in lockstep, the first party first;
    their results with their clocks, in the parties' order. A party must call `clock.start()` before its request and
    `clock.stop()` after it (also when it fails), or the others wait forever.

    With `cpu`, every party's thread is bound to that CPU (for an engine that computes in the calling thread alone):
    a thread woken for its turn would otherwise often resume on another CPU, its caches cold, and that cost — the
    harness's, not the engine's — would fall at random on the arms' steps."""
    turns = Turns(len(parties))
    clocks = [TurnClock(turns, i, slowdowns[i]) for i in range(len(parties))]
    results: list[Any] = [None] * len(parties)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            if cpu is not None:
                bind(cpu)
            results[i] = parties[i](clocks[i])
        except BaseException as exc:  # re-raised in the caller's thread below
            errors.append(exc)
            turns.leave(i)

    threads = [threading.Thread(target=body, args=(i,), name=f"specgate-arm-{i}") for i in range(len(parties))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [(results[i], clocks[i]) for i in range(len(parties))]


def bind(cpu: int) -> None:
    """Bind the calling thread to `cpu`, where the system allows it (else leave it where it is)."""
    with contextlib.suppress(OSError, AttributeError):  # no affinity on this system, or not allowed
        os.sched_setaffinity(0, {cpu})
