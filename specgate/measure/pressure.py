"""How busy the machine was around an engine call: CPU pressure, steal time, and the CPU other processes used.

`/proc/pressure/cpu` (Linux ≥ 4.20 with PSI) counts, in microseconds, the time during which at least one runnable
task waited for a CPU (`some`); `/proc/stat`'s `steal` column counts the CPU time a hypervisor gave to other guests
(in clock ticks, `os.sysconf("SC_CLK_TCK")` per second, summed over CPUs). Both are machine-wide: they say the
machine was busy, not that this process waited (the engine's own run-queue wait says that,
`specgate.engines.clocks`), and pressure counts the waits of the gate's own processes too: a vLLM server's worker
spins on a CPU while the gate and the server's other processes want one, so on a small machine pressure is high
with nothing else running.

What other work took is measured apart: the CPU time the whole machine used (`/proc/stat`: user, nice, system, irq,
softirq) less the CPU time of the gate's own processes (this process and every process in the group of a server it
started, `server_process.live_groups`), read from `/proc/<pid>/stat`. Processes that came and went meanwhile are
counted in the machine's time, so a short-lived co-tenant (a compiler, a test run) is not missed. Where one of the
gate's own processes ended between two readings its last CPU time is unknown, and so is the other work's (None).

A reading is a few small file reads (~20 µs for the gate alone; ~2 ms while servers run, one `/proc` scan), taken
outside the measured request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specgate.engines.server_process import live_groups

PSI_CPU = Path("/proc/pressure/cpu")
PROC_STAT = Path("/proc/stat")
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class PressureReading:
    """Cumulative counters at one moment (seconds); None where the machine does not tell. `used_s` is the CPU time
    every process used, summed over `cpus` CPUs; `own_s` the CPU time of each of the gate's own processes by pid."""

    some_s: float | None
    steal_s: float | None
    used_s: float | None = None
    cpus: int = 0
    own_s: Mapping[int, float] | None = None


@dataclass(frozen=True, slots=True)
class Interference:
    """Between two readings (seconds of wall time): `pressure_s` some task waited for a CPU, `steal_s` the
    hypervisor's other guests ran, `others_s` the CPU time other processes used divided by the number of CPUs (the
    share of the machine they took is `others_s` over the wall time); None where unknown."""

    pressure_s: float | None
    steal_s: float | None
    others_s: float | None


def _psi_some() -> float | None:
    try:
        text = PSI_CPU.read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("some"):
            for field in line.split():
                if field.startswith("total="):
                    return int(field[6:]) / 1e6
    return None


def _stat() -> tuple[float | None, float | None, int]:
    """(steal seconds, used CPU seconds, number of CPUs) from `/proc/stat`."""
    try:
        lines = PROC_STAT.read_bytes().splitlines()
    except OSError:
        return None, None, 0
    fields = lines[0].split() if lines else []
    if len(fields) < 9 or fields[0] != b"cpu":
        return None, None, 0
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    cpus = sum(1 for line in lines[1:] if line.startswith(b"cpu"))
    return steal / tick, (user + nice + system + irq + softirq) / tick, cpus


def _cpu_of(stat: bytes, tick: int) -> tuple[int, float] | None:
    """(process group, CPU seconds: user + system) from a `/proc/<pid>/stat` line."""
    rest = stat[stat.rfind(b")") + 2 :].split()  # the command name, in parentheses, may hold spaces
    if len(rest) < 13:
        return None
    return int(rest[2]), (int(rest[11]) + int(rest[12])) / tick


def own_cpu(groups: frozenset[int]) -> dict[int, float] | None:
    """The CPU seconds of this process and of every process in `groups`, by pid; None without `/proc`."""
    tick = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    pids = [str(me)] if not groups else [entry.name for entry in os.scandir(PROC) if entry.name.isdigit()]
    found: dict[int, float] = {}
    for pid in pids:
        try:
            with open(PROC / pid / "stat", "rb") as f:
                parsed = _cpu_of(f.read(), tick)
        except OSError:  # it ended meanwhile, or no /proc
            continue
        if parsed is not None and (int(pid) == me or parsed[0] in groups):
            found[int(pid)] = parsed[1]
    return found if me in found else None


def read_pressure() -> PressureReading:
    steal, used, cpus = _stat()
    return PressureReading(_psi_some(), steal, used, cpus, own_cpu(live_groups()))


def _others(before: PressureReading, after: PressureReading) -> float | None:
    if before.used_s is None or after.used_s is None or before.own_s is None or after.own_s is None:
        return None
    if after.cpus <= 0 or not before.own_s.keys() <= after.own_s.keys():
        return None  # one of the gate's own processes ended meanwhile: its last CPU time is unknown
    own = sum(after.own_s[pid] - before.own_s.get(pid, 0.0) for pid in after.own_s)
    return max(0.0, after.used_s - before.used_s - own) / after.cpus


def between(before: PressureReading, after: PressureReading) -> Interference:
    """What the machine did between two readings."""
    some = None if before.some_s is None or after.some_s is None else max(0.0, after.some_s - before.some_s)
    steal = None if before.steal_s is None or after.steal_s is None else max(0.0, after.steal_s - before.steal_s)
    return Interference(some, steal, _others(before, after))
