"""Configuration: hardware profiles (`hardware/*.yaml`) and the project config (`specgate.yaml`), validated into
frozen models. Loading never imports an engine or torch."""

from __future__ import annotations

from specgate.config.hardware import DTYPES, HardwareProfile, SlaLimits, known_profiles, load_hardware_profile, with_sla
from specgate.config.policy import GatePolicy
from specgate.config.project import (
    DEFAULT_ARMS,
    REFERENCE_PREFIX,
    SPECULATION_METHODS,
    TASKS,
    ArmSpec,
    PairConfig,
    ProjectConfig,
    SamplingConfig,
    Speculation,
    WorkloadConfig,
    load_project_config,
)
from specgate.config.validation import did_you_mean, parse_selection

__all__ = [
    "DEFAULT_ARMS",
    "DTYPES",
    "REFERENCE_PREFIX",
    "SPECULATION_METHODS",
    "TASKS",
    "ArmSpec",
    "GatePolicy",
    "HardwareProfile",
    "PairConfig",
    "ProjectConfig",
    "SamplingConfig",
    "SlaLimits",
    "Speculation",
    "WorkloadConfig",
    "did_you_mean",
    "known_profiles",
    "load_hardware_profile",
    "load_project_config",
    "parse_selection",
    "with_sla",
]
