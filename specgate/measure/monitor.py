"""Watching arms while they run: per-arm time windows, peak memory, and one telemetry sampler across them all.

`ArmMonitor` is the `RunObserver` of a measurement: before and after every engine call it notes the time and the
peak memory; `finish()` stops the sampler and attributes the measured energy to each arm's windows
(`window_energy_j`). What it sees is an `Observation`; `specgate.costs.energy` turns it into cost and energy per
1k tokens.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specgate.config import HardwareProfile
from specgate.engines.base import ArmRun
from specgate.hardware.backends import HardwareBackend, device_index
from specgate.hardware.telemetry import PowerReading, TelemetrySampler, TelemetrySummary

Window = tuple[float, float]


def _interpolate(times: Sequence[float], values: Sequence[float], t: float) -> float:
    """The piecewise-linear value at `t`, held constant before the first and after the last sample."""
    i = bisect.bisect_right(times, t)
    if i == 0:
        return values[0]
    if i == len(times):
        return values[-1]
    t0, t1, v0, v1 = times[i - 1], times[i], values[i - 1], values[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1


def _power_integral(times: Sequence[float], powers: Sequence[float], start: float, end: float) -> float:
    points = [start, *(t for t in times if start < t < end), end]
    values = [_interpolate(times, powers, t) for t in points]
    return sum((values[i] + values[i + 1]) / 2 * (points[i + 1] - points[i]) for i in range(len(points) - 1))


def window_energy_j(readings: Sequence[PowerReading], windows: Sequence[Window]) -> float | None:
    """Energy (J) inside the time `windows`, from telemetry samples; None when they carry neither energy nor power.

    With a cumulative energy counter (two or more readings) it is the counter's increase across each window; else
    the integral of the power samples over each window. Between samples both are linear; outside the sampled span
    the power is held at the nearest sample and the counter does not move.
    """
    ordered = sorted(readings, key=lambda r: r.t_s)
    counter = [(r.t_s, r.energy_j) for r in ordered if r.energy_j is not None]
    if len(counter) >= 2:
        times, joules = [t for t, _ in counter], [e for _, e in counter]
        return sum(_interpolate(times, joules, b) - _interpolate(times, joules, a) for a, b in windows)
    power = [(r.t_s, r.power_w) for r in ordered if r.power_w is not None]
    if not power:
        return None
    times, watts = [t for t, _ in power], [p for _, p in power]
    return sum(_power_integral(times, watts, a, b) for a, b in windows)


@dataclass(frozen=True, slots=True)
class ArmObservation:
    """What the monitor saw of one arm: its engine calls, their total time, measured energy and peak memory."""

    arm: str
    calls: int
    observed_s: float
    measured_energy_j: float | None
    peak_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class Observation:
    """The monitor's result for one measurement. `peak_memory_by_prompt` covers one-prompt engine calls only."""

    telemetry: str
    arms: Mapping[str, ArmObservation]
    peak_memory_by_prompt: Mapping[str, int] = field(default_factory=dict)
    telemetry_summary: TelemetrySummary | None = None
    note: str = ""


class ArmMonitor:
    """A `RunObserver`: per-arm time windows and peak memory, with one telemetry sampler across all of them.

    Call `finish()` after the measurement (also when it failed) to stop the sampler and get the `Observation`.
    """

    def __init__(
        self,
        hardware: HardwareProfile,
        backend: HardwareBackend,
        *,
        interval_s: float = 0.1,
        sampler: TelemetrySampler | None = None,
    ) -> None:
        self.hardware = hardware
        self.backend = backend
        self.interval_s = interval_s
        self._sampler = sampler
        self._started = False
        self._memory = True
        self._opened = 0.0
        self._notes: list[str] = []
        self._windows: dict[str, list[Window]] = {}
        self._peaks: dict[str, int] = {}
        self._prompt_peaks: dict[str, int] = {}
        self.observation: Observation | None = None

    def before_run(self, arm: str) -> None:
        if not self._started:
            self._start_sampler()
        if self._memory:
            try:
                self.backend.reset_peak_memory()
            except Exception as exc:  # memory is reported, never gated: losing it must not stop the run
                self._memory_lost(exc)
        self._opened = time.perf_counter()

    def after_run(self, arm: str, run: ArmRun) -> None:
        self._windows.setdefault(arm, []).extend(run.spans or ((self._opened, time.perf_counter()),))
        peak = self._read_peak()
        if peak is None:
            return
        self._peaks[arm] = max(self._peaks.get(arm, 0), peak)
        if len(run.traces) == 1:
            prompt = run.traces[0].prompt_id
            self._prompt_peaks[prompt] = max(self._prompt_peaks.get(prompt, 0), peak)

    def _read_peak(self) -> int | None:
        if not self._memory:
            return None
        try:
            return self.backend.peak_memory_bytes()
        except Exception as exc:  # see before_run
            self._memory_lost(exc)
            return None

    def _memory_lost(self, exc: Exception) -> None:
        self._memory = False
        self._notes.append(f"peak memory unavailable ({type(exc).__name__}: {exc})")

    def _start_sampler(self) -> None:
        self._started = True
        source = self.hardware.telemetry
        try:
            sampler = self._sampler or TelemetrySampler(source, self.interval_s, device_index(self.hardware.device))
            sampler.start()
        except Exception as exc:  # telemetry is reported, never gated
            self._notes.append(f"telemetry {source!r} unavailable here ({exc}); fell back to 'none'")
            sampler = TelemetrySampler("none")
            sampler.start()
        self._sampler = sampler

    def finish(self) -> Observation:
        """Stop the sampler and attribute energy to each arm's windows; calling it again returns the same result."""
        if self.observation is not None:
            return self.observation
        summary: TelemetrySummary | None = None
        readings: tuple[PowerReading, ...] = ()
        source = "none"
        if self._sampler is not None:
            source = self._sampler.source
            try:
                summary = self._sampler.stop()
                readings = self._sampler.power_readings()
            except Exception as exc:  # see _start_sampler
                self._notes.append(f"telemetry {source!r} failed to stop ({exc}); no measured energy")
        if summary is not None and summary.note:
            self._notes.insert(0, summary.note)
        self._notes.append(self._memory_note())
        arms = {
            arm: ArmObservation(
                arm, len(spans), sum(b - a for a, b in spans), window_energy_j(readings, spans), self._peaks.get(arm)
            )
            for arm, spans in self._windows.items()
        }
        note = "; ".join(n for n in self._notes if n)
        self.observation = Observation(source, arms, dict(self._prompt_peaks), summary, note)
        return self.observation

    def _memory_note(self) -> str:
        if not self._peaks:
            return ""
        if self.backend.peak_is_lifetime:
            return "peak memory is the process's lifetime peak RSS (the peak could not be reset per call)"
        return f"peak memory is {self.backend.peak_memory}"
