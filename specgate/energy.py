"""Energy, cost and peak memory per arm: an observer around every measured engine call, and the per-arm report.

`ArmMonitor` is the `RunObserver` that `GateRun.measure` passes to `measure_pair`. Around each engine call it resets
and reads the backend's peak memory and records the call's time window. One `TelemetrySampler` (the profile's
`telemetry` source) runs from the first measured call to `finish()`; the energy of an arm is the energy inside that
arm's windows: the increase of the source's energy counter where it has one (RAPL, NVML), else the integral of the
power samples, both linearly interpolated between samples (`window_energy_j`).

`summarize_energy` turns the observation into an `ArmEnergy` per arm, using the wall time and output tokens of the
arm's `ArmSummary` (the numbers the checks use): cost per 1k output tokens from the profile's price, energy per 1k
tokens measured or, marked `energy_estimated`, the profile's power_w × wall time; and the candidate arm's saving
against the reference, as the field reports it ("cost -30 %, energy -25 %").

Telemetry never fails the gate: a source that cannot start here falls back to 'none', with a note.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specgate.config import HardwareProfile
from specgate.engines.base import ArmRun
from specgate.gate import INFRASTRUCTURE, Check
from specgate.hardware.backends import HardwareBackend
from specgate.hardware.economics import cost_per_1k_tokens_usd, energy_per_1k_tokens_j, estimated_energy_j, saving
from specgate.hardware.telemetry import PowerReading, TelemetrySampler, TelemetrySummary
from specgate.metrics import ArmSummary
from specgate.roofline import summarize_roofline

if TYPE_CHECKING:
    from specgate.evaluation import Evaluation

Window = tuple[float, float]
GIB = 1024**3


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


def _device_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


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
        self._windows.setdefault(arm, []).append((self._opened, time.perf_counter()))
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
            sampler = self._sampler or TelemetrySampler(source, self.interval_s, _device_index(self.hardware.device))
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
        if getattr(self.backend, "peak_is_lifetime", False):
            return "peak memory is the process's lifetime peak RSS (the peak could not be reset per call)"
        if self.backend.name == "cpu":
            return (
                "peak memory is this process's peak RSS per engine call (model weights included, and memory the "
                "allocator kept from earlier calls)"
            )
        return "peak memory is torch's peak allocated device memory per engine call"


@dataclass(frozen=True, slots=True)
class ArmEnergy:
    """Cost, energy and peak memory of one arm. `energy_estimated`: profile power_w × wall time, not measured."""

    arm: str
    wall_s: float
    output_tokens: int
    energy_j: float | None
    energy_estimated: bool
    cost_per_1k_tokens_usd: float | None
    energy_per_1k_tokens_j: float | None
    peak_memory_bytes: int | None
    mean_power_w: float | None
    note: str = ""


@dataclass(frozen=True, slots=True)
class EnergyReport:
    """`ArmEnergy` per arm, and the candidate's relative change against the reference (negative = saving)."""

    telemetry: str
    reference: str
    candidate: str
    arms: Mapping[str, ArmEnergy]
    cost_saving: float | None
    energy_saving: float | None
    peak_memory_by_prompt: Mapping[str, int] = field(default_factory=dict)
    telemetry_summary: TelemetrySummary | None = None
    note: str = ""

    @property
    def estimated(self) -> bool:
        return any(a.energy_estimated for a in self.arms.values())

    def saving_text(self) -> str:
        """The candidate's change as the field reports it: "cost -30 %, energy -25 % (estimated)"."""
        parts = []
        if self.cost_saving is not None:
            parts.append(f"cost {percent(self.cost_saving)}")
        if self.energy_saving is not None:
            parts.append(f"energy {percent(self.energy_saving)}" + (" (estimated)" if self.estimated else ""))
        return ", ".join(parts) or "n/a"


def percent(change: float) -> str:
    """A relative change as a signed whole percentage: -0.3 → "-30 %"."""
    return f"{change * 100:+.0f} %"


def _energy(
    summary: ArmSummary, observed: ArmObservation | None, hardware: HardwareProfile
) -> tuple[float | None, bool, float | None, str]:
    """(energy J, estimated, mean power W, note) of one arm."""
    if observed is not None and observed.measured_energy_j is not None:
        energy = observed.measured_energy_j
        return energy, False, energy / observed.observed_s if observed.observed_s > 0 else None, ""
    if hardware.power_w > 0:
        note = f"energy estimated: profile power_w {hardware.power_w:g} W × wall {summary.wall_s:.1f} s"
        return estimated_energy_j(hardware.power_w, summary.wall_s), True, hardware.power_w, note
    return None, False, None, "no energy: no measured power and no power_w in the profile"


def arm_energy(summary: ArmSummary, observed: ArmObservation | None, hardware: HardwareProfile) -> ArmEnergy:
    """Cost and energy per 1k output tokens of one arm, with its wall time and tokens from `summary`."""
    energy, estimated, mean_power, note = _energy(summary, observed, hardware)
    notes = [note] if note else []
    tokens, price = summary.output_tokens, hardware.price_per_hour_usd
    if tokens <= 0:
        notes.append("no output tokens: nothing to count per 1k tokens")
    if price <= 0:
        notes.append("no cost: the profile has no price_per_hour_usd")
    cost = cost_per_1k_tokens_usd(price, summary.wall_s, tokens) if tokens > 0 and price > 0 else None
    return ArmEnergy(
        arm=summary.arm,
        wall_s=summary.wall_s,
        output_tokens=tokens,
        energy_j=energy,
        energy_estimated=estimated,
        cost_per_1k_tokens_usd=cost,
        energy_per_1k_tokens_j=None if energy is None or tokens <= 0 else energy_per_1k_tokens_j(energy, tokens),
        peak_memory_bytes=None if observed is None else observed.peak_memory_bytes,
        mean_power_w=mean_power,
        note="; ".join(notes),
    )


def _saving(reference: float | None, candidate: float | None) -> float | None:
    if reference is None or candidate is None or reference <= 0:
        return None
    return saving(reference, candidate)


def summarize_energy(
    observation: Observation,
    summaries: Mapping[str, ArmSummary],
    hardware: HardwareProfile,
    reference: str,
    candidate: str,
) -> EnergyReport:
    """The energy report of one measurement: `ArmEnergy` per arm and the candidate's savings."""
    arms = {arm: arm_energy(summary, observation.arms.get(arm), hardware) for arm, summary in summaries.items()}
    ref, cand = arms[reference], arms[candidate]
    different = candidate != reference
    comparable = different and ref.energy_estimated == cand.energy_estimated
    return EnergyReport(
        telemetry=observation.telemetry,
        reference=reference,
        candidate=candidate,
        arms=arms,
        cost_saving=_saving(ref.cost_per_1k_tokens_usd, cand.cost_per_1k_tokens_usd) if different else None,
        energy_saving=_saving(ref.energy_per_1k_tokens_j, cand.energy_per_1k_tokens_j) if comparable else None,
        peak_memory_by_prompt=dict(observation.peak_memory_by_prompt),
        telemetry_summary=observation.telemetry_summary,
        note=observation.note,
    )


def attach_resources(
    evaluation: Evaluation,
    observation: Observation | None,
    hardware: HardwareProfile,
    *,
    dtype: str,
    model_folder: Path | None,
) -> None:
    """Set `evaluation.energy` (from the monitor's observation, when there is one) and `evaluation.roofline`."""
    if observation is not None:
        evaluation.energy = summarize_energy(
            observation, evaluation.summaries, hardware, evaluation.measurement.reference, evaluation.candidate
        )
    evaluation.roofline = summarize_roofline(
        model_folder, hardware, dtype, evaluation.measurement, evaluation.summaries
    )


def check_energy_reported(where: tuple[str, str], report: EnergyReport | None) -> Check:
    """Cost and energy per 1k output tokens are known for every arm (estimates allowed, and said to be)."""
    if report is None:
        missing = ["no energy report: the measurement ran without the monitor"]
    else:
        missing = [
            f"arm {a.arm}: {a.note or 'no cost or energy'}"
            for a in report.arms.values()
            if a.cost_per_1k_tokens_usd is None or a.energy_per_1k_tokens_j is None
        ]
    if report is None or missing:
        message = "BLOCK: cost/energy per 1k tokens not reported: " + "; ".join(missing)
        return Check("cost_energy_reported", where[0], where[1], INFRASTRUCTURE, False, message)
    ref, cand = report.arms[report.reference], report.arms[report.candidate]
    kind = "estimated from profile power" if report.estimated else f"measured ({report.telemetry})"
    message = (
        f"cost ${ref.cost_per_1k_tokens_usd:.4f} → ${cand.cost_per_1k_tokens_usd:.4f} per 1k tokens, energy "
        f"{ref.energy_per_1k_tokens_j:.0f} → {cand.energy_per_1k_tokens_j:.0f} J per 1k tokens ({kind}), "
        f"{report.reference} → {report.candidate}: {report.saving_text()}"
    )
    return Check(
        "cost_energy_reported",
        where[0],
        where[1],
        INFRASTRUCTURE,
        True,
        message,
        observed=cand.energy_per_1k_tokens_j,
        unit="J/1k tokens",
        details={"estimated": report.estimated, "cost_saving": report.cost_saving},
    )
