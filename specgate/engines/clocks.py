"""How much CPU a request used, and how long it waited for one: the clocks an engine reads around a request.

On a shared machine wall time counts everything the machine did meanwhile; the CPU time of the engine's threads
counts only the engine's own work, and the time those threads spent runnable but waiting in the kernel's run queue
(`/proc/<pid>/task/<tid>/schedstat`, second field, nanoseconds) is exactly the delay other work caused. Reading
every thread's schedstat costs ~10 µs for a few threads: it is read at submit and when the request is done, never
between streamed tokens. Where `/proc` has no schedstat (macOS, some containers) the wait is unknown (None).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _threads(pid: int) -> list[Path]:
    try:
        return list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []


class RunQueueClock:
    """The summed CPU time and run-queue wait (seconds) of every thread of some processes (this one by default)."""

    __slots__ = ("_pids",)

    def __init__(self, pids: Sequence[int] | None = None) -> None:
        self._pids = tuple(pids) if pids else (os.getpid(),)

    @property
    def available(self) -> bool:
        return Path(f"/proc/{self._pids[0]}/schedstat").exists()

    def read(self) -> tuple[float, float] | None:
        """(CPU seconds, run-queue wait seconds) summed over the processes' current threads; None without /proc."""
        cpu = wait = 0
        seen = False
        for pid in self._pids:
            for task in _threads(pid):
                try:
                    fields = (task / "schedstat").read_bytes().split()
                except OSError:  # the thread ended meanwhile
                    continue
                cpu += int(fields[0])
                wait += int(fields[1])
                seen = True
        return (cpu / 1e9, wait / 1e9) if seen else None


def waited(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    """Run-queue wait between two readings (threads that ended meanwhile can make it shrink: never below 0)."""
    if before is None or after is None:
        return None
    return max(0.0, after[1] - before[1])


def spin_cpu(seconds: float) -> None:
    """Burn `seconds` of this process's CPU time (not wall time): an injected slowdown that a busy machine
    stretches exactly as it stretches the work it imitates, and that CPU-time measurements see too."""
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        pass


class ChunkClock:
    """A minimal streamer: the arrival time, process CPU time and size of each chunk. Nothing else runs on the hot
    path (unless the arm has an injected slowdown, which burns CPU here)."""

    __slots__ = ("_last_cpu", "_prompt_seen", "_slowdown", "cpu", "sizes", "times")

    def __init__(self, slowdown: float = 0.0) -> None:
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.sizes: list[int] = []
        self._prompt_seen = False
        self._last_cpu = 0.0
        self._slowdown = slowdown

    def start(self) -> tuple[float, float]:
        """The request's (wall, CPU) origin, read just before it is submitted."""
        self._last_cpu = time.process_time()
        return time.perf_counter(), self._last_cpu

    def put(self, value: Any) -> None:
        now = time.perf_counter()
        cpu = time.process_time()
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        if self._slowdown:
            spin_cpu((cpu - self._last_cpu) * self._slowdown)
            now, cpu = time.perf_counter(), time.process_time()
        self._last_cpu = cpu
        self.times.append(now)
        self.cpu.append(cpu)
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        pass

    def stop(self) -> float:
        """The done time, read when the request returned (or failed)."""
        return time.perf_counter()
