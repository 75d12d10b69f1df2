"""How busy the machine was around an engine call: CPU pressure stall information and steal time.

`/proc/pressure/cpu` (Linux ≥ 4.20 with PSI) counts, in microseconds, the time during which at least one runnable
task waited for a CPU (`some`); `/proc/stat`'s `steal` column counts the CPU time a hypervisor gave to other guests
(in clock ticks, `os.sysconf("SC_CLK_TCK")` per second, summed over CPUs). Both are machine-wide: they say the
machine was busy, not that this process waited (the engine's own run-queue wait says that,
`specgate.engines.clocks`). Each reading is two small file reads (~10 µs), taken outside the measured request.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PSI_CPU = Path("/proc/pressure/cpu")
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True, slots=True)
class PressureReading:
    """Cumulative counters at one moment (seconds); None where the machine does not tell."""

    some_s: float | None
    steal_s: float | None


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


def _steal() -> float | None:
    try:
        with PROC_STAT.open("rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != b"cpu":
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def read_pressure() -> PressureReading:
    return PressureReading(_psi_some(), _steal())


def between(before: PressureReading, after: PressureReading) -> tuple[float | None, float | None]:
    """(pressure seconds, steal seconds) between two readings."""
    some = None if before.some_s is None or after.some_s is None else max(0.0, after.some_s - before.some_s)
    steal = None if before.steal_s is None or after.steal_s is None else max(0.0, after.steal_s - before.steal_s)
    return some, steal
