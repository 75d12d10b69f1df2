"""What a gate run judges, and the lookups every part of it makes: the selected pairs and workloads, each pair's
engine, SLA and reference, and each pair × workload's measurement plan (built once) and the comparison family."""

from __future__ import annotations

from dataclasses import dataclass, field

from specgate.checks.levels import family_size
from specgate.config import GatePolicy, HardwareProfile, PairConfig, ProjectConfig, SlaLimits, WorkloadConfig, with_sla
from specgate.hardware.backends import HardwareBackend, get_backend
from specgate.plan import Arm, MeasurementPlan, build_plan, engine_arms

NO_REFERENCE = "none"


@dataclass
class RunScope:
    """The configuration a run was given and what it selected. `reference_override` names the pair measured beside
    every selected pair, or `"none"` to switch a configured reference off; `inject_slowdown` is the self-test."""

    hardware: HardwareProfile
    project: ProjectConfig
    pairs: list[str]
    workloads: list[str]
    engine_override: str | None = None
    reference_override: str | None = None
    inject_slowdown: float = 0.0
    _plans: dict[tuple[str, str], MeasurementPlan] = field(default_factory=dict, init=False, repr=False)
    _family: int | None = field(default=None, init=False, repr=False)
    _backend: HardwareBackend | None = field(default=None, init=False, repr=False)

    @property
    def policy(self) -> GatePolicy:
        return self.project.gate

    def backend(self) -> HardwareBackend:
        """The profile's hardware backend, resolved once (its runtime is checked by `GateRun.from_options` where a
        selected engine runs local models)."""
        if self._backend is None:
            self._backend = get_backend(self.hardware.backend, self.hardware.device, profile=self.hardware.name)
        return self._backend

    def pair(self, name: str) -> PairConfig:
        return self.project.pairs[name]

    def workload(self, name: str) -> WorkloadConfig:
        return self.project.workloads[name]

    def engine_name(self, pair_name: str) -> str:
        return self.engine_override or self.pair(pair_name).engine or self.hardware.engine

    def sla(self, pair_name: str) -> SlaLimits:
        return with_sla(self.hardware, self.pair(pair_name).sla)

    def reference_of(self, pair_name: str) -> str | None:
        """The pair measured beside `pair_name` (reference mode), or None."""
        override = self.reference_override
        if override == NO_REFERENCE:
            return None
        chosen = override or self.pair(pair_name).reference
        return None if chosen == pair_name else chosen

    def plan(self, pair_name: str, workload_name: str) -> MeasurementPlan:
        """The pair × workload's arms, order and comparisons (`specgate.plan`), built on the first call."""
        key = (pair_name, workload_name)
        if key not in self._plans:
            self._plans[key] = build_plan(
                self.project,
                pair_name,
                workload_name,
                self.hardware,
                reference=self.reference_of(pair_name),
                slowdown=self.inject_slowdown,
            )
        return self._plans[key]

    def arms(self, pair_name: str) -> tuple[Arm, ...]:
        """Every arm the pair's engine loads: the arms of its plans on the selected workloads."""
        return engine_arms([self.plan(pair_name, w) for w in self.workloads])

    def family(self) -> int:
        """The number of latency comparisons the run gates (the multiple-comparison family)."""
        if self._family is None:
            plans = [(self.plan(p, w), self.workload(w).gate_speed) for p in self.pairs for w in self.workloads]
            self._family = family_size(plans)
        return self._family
