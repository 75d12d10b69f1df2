"""Cost, energy and peak memory per arm, from what the monitor observed (`specgate.measure.monitor`) and the profile.

Energy is measured where telemetry reads power (NVML, nvidia-smi, npu-smi, RAPL) and otherwise estimated from the
profile's `power_w` × wall time, and marked as an estimate. Cost is the profile's price per hour × wall time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specgate.config import HardwareProfile
from specgate.hardware.economics import cost_per_1k_tokens_usd, energy_per_1k_tokens_j, estimated_energy_j, saving
from specgate.hardware.telemetry import TelemetrySummary
from specgate.measure.metrics import ArmSummary
from specgate.measure.monitor import ArmObservation, Observation

GIB = 1024**3


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
            parts.append(f"cost {whole_percent(self.cost_saving)}")
        if self.energy_saving is not None:
            parts.append(f"energy {whole_percent(self.energy_saving)}" + (" (estimated)" if self.estimated else ""))
        return ", ".join(parts) or "n/a"


def whole_percent(change: float) -> str:
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
