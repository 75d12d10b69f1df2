"""How busy the machine was while an arm was measured, in words a verdict can carry.

From the samples alone (so a stored record says it too): the share of its requests' time the engine spent waiting
in the run queue for a CPU (`Sample.wait_ms`, the engine's own threads: what other work on the machine cost it),
the share of the machine's CPU that processes other than the gate and its servers took (`others_ms`), the
machine's CPU pressure (`pressure_ms`: some task waited) and steal time (`steal_ms`: the hypervisor ran other
guests), and the units measured again after heavy interference. A unit whose engine waited `INTERFERED` of its
time or more (where the engine's wait is not measured, as in a server's processes: whose requests met other
processes taking `INTERFERED_OTHERS` of the machine) counts as measured under interference: tail SLAs are judged
without such units, and an UNKNOWN that coincides with a busy machine says so, instead of blaming the
configuration. Pressure decides "busy" only where other processes' CPU is not measured: it counts the waits of the
gate's own processes too (a vLLM server's worker spins on a CPU while its other processes want one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specgate.measure.samples import ArmSamples, Sample

INTERFERED = 0.05  # a request that waited for a CPU 5 % of its time or more
INTERFERED_OTHERS = 0.10  # a request while other processes took 10 % of the machine's CPU or more
BUSY_WAIT = 0.05  # an arm whose requests waited 5 % of their time in all: the machine was busy
BUSY_OTHERS = 0.10
BUSY_PRESSURE = 0.25
BUSY_STEAL = 0.05


def interfered(sample: Sample) -> bool:
    """Whether the request waited for a CPU `INTERFERED` of its time or more; where its wait is not measured,
    whether other processes took `INTERFERED_OTHERS` of the machine's CPU or more meanwhile."""
    if sample.wait_ms is not None:
        return sample.e2el_ms > 0 and sample.wait_ms >= INTERFERED * sample.e2el_ms
    others = sample.others_ms
    return others is not None and sample.wall_ms > 0 and others >= INTERFERED_OTHERS * sample.wall_ms


def measured(sample: Sample) -> bool:
    """Whether the request's interference was measured (`interfered` can say yes)."""
    return sample.wait_ms is not None or sample.others_ms is not None


def _share(parts: list[float | None], totals: list[float]) -> float | None:
    known = [(p, t) for p, t in zip(parts, totals, strict=True) if p is not None]
    total = sum(t for _, t in known)
    return None if not known or total <= 0 else sum(p for p, _ in known) / total


@dataclass(frozen=True, slots=True)
class Busy:
    """How busy the machine was for some samples (None: not measured)."""

    wait_share: float | None
    pressure_share: float | None
    steal_share: float | None
    units: int
    interfered_units: int
    remeasured: int
    others_share: float | None = None

    @property
    def busy(self) -> bool:
        pressure = self.others_share is None and (self.pressure_share or 0.0) >= BUSY_PRESSURE
        return (
            (self.wait_share or 0.0) >= BUSY_WAIT
            or (self.others_share or 0.0) >= BUSY_OTHERS
            or pressure
            or (self.steal_share or 0.0) >= BUSY_STEAL
        )

    def describe(self) -> str:
        """e.g. "the machine was busy: the measured process waited for a CPU 31 % of its time, other processes took
        48 % of the machine's CPU (CPU pressure 45 %, steal 0 %; 12 of 48 requests under interference, 3 measured
        again)"."""
        parts = []
        if self.wait_share is not None:
            parts.append(f"the measured process waited for a CPU {self.wait_share:.0%} of its time")
        if self.others_share is not None:
            parts.append(f"other processes took {self.others_share:.0%} of the machine's CPU")
        detail = []
        if self.pressure_share is not None:
            own = " with the gate's own processes' waits" if self.others_share is not None else ""
            detail.append(f"CPU pressure {self.pressure_share:.0%}{own}")
        if self.steal_share is not None:
            detail.append(f"steal {self.steal_share:.0%}")
        if self.units and (self.wait_share is not None or self.others_share is not None):
            detail.append(f"{self.interfered_units} of {self.units} requests under interference")
        if self.remeasured:
            detail.append(f"{self.remeasured} measured again")
        head = "the machine was busy" if self.busy else "the machine was quiet"
        if not parts and not detail:
            return "interference not measured"
        text = ", ".join(parts) or "interference of the process not measured"
        return f"{head}: {text}" + (f" ({'; '.join(detail)})" if detail else "")


def busy(arms: Iterable[ArmSamples | None]) -> Busy:
    """How busy the machine was over the latest attempts of the given arms' samples."""
    latest: list[Sample] = []
    remeasured = 0
    for arm in arms:
        if arm is None:
            continue
        latest += arm.latest().samples
        remeasured += arm.remeasured
    totals = [s.e2el_ms for s in latest]
    walls = [s.wall_ms for s in latest]
    return Busy(
        wait_share=_share([s.wait_ms for s in latest], totals),
        pressure_share=_share([s.pressure_ms for s in latest], walls),
        steal_share=_share([s.steal_ms for s in latest], walls),
        others_share=_share([s.others_ms for s in latest], walls),
        units=len(latest),
        interfered_units=sum(interfered(s) for s in latest),
        remeasured=remeasured,
    )
