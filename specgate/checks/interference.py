"""How busy the machine was while an arm was measured, in words a verdict can carry.

From the samples alone (so a stored record says it too): the share of its requests' time the engine spent waiting
in the run queue for a CPU (`Sample.wait_ms`, the engine's own threads: what other work on the machine cost it),
the machine's CPU pressure (`pressure_ms`: some task waited) and steal time (`steal_ms`: the hypervisor ran other
guests), and the units measured again after heavy interference. A unit whose engine waited `INTERFERED` of its
time or more counts as measured under interference: tail SLAs are judged without such units, and an UNKNOWN that
coincides with a busy machine says so, instead of blaming the configuration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specgate.measure.samples import ArmSamples, Sample

INTERFERED = 0.05  # a request that waited for a CPU 5 % of its time or more
BUSY_WAIT = 0.05  # an arm whose requests waited 5 % of their time in all: the machine was busy
BUSY_PRESSURE = 0.25
BUSY_STEAL = 0.05


def interfered(sample: Sample) -> bool:
    """Whether the request waited for a CPU `INTERFERED` of its time or more."""
    return sample.wait_ms is not None and sample.e2el_ms > 0 and sample.wait_ms >= INTERFERED * sample.e2el_ms


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

    @property
    def busy(self) -> bool:
        return (
            (self.wait_share or 0.0) >= BUSY_WAIT
            or (self.pressure_share or 0.0) >= BUSY_PRESSURE
            or (self.steal_share or 0.0) >= BUSY_STEAL
        )

    def describe(self) -> str:
        """e.g. "the machine was busy: the measured process waited for a CPU 31 % of its time (CPU pressure 45 %,
        steal 0 %; 12 of 48 requests under interference, 3 measured again)"."""
        parts = []
        if self.wait_share is not None:
            parts.append(f"the measured process waited for a CPU {self.wait_share:.0%} of its time")
        detail = []
        if self.pressure_share is not None:
            detail.append(f"CPU pressure {self.pressure_share:.0%}")
        if self.steal_share is not None:
            detail.append(f"steal {self.steal_share:.0%}")
        if self.units and self.wait_share is not None:
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
        units=len(latest),
        interfered_units=sum(interfered(s) for s in latest),
        remeasured=remeasured,
    )
