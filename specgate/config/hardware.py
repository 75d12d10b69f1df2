"""Hardware profiles (`hardware/<name>.yaml`): where models run, what it costs, and the SLA limits there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from specgate.config.parallel import ParallelLayout, parse_parallel
from specgate.config.validation import check_choice, check_keys, did_you_mean, fail, mapping, read_yaml, typed
from specgate.errors import ConfigError
from specgate.registry import TELEMETRY_SOURCES, backend_names, engine_names

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, slots=True)
class SlaLimits:
    """Service-level limits the gate asserts. Defaults are the field's production values."""

    p99_ttft_ms: float = 800.0
    min_decode_tokens_per_s: float = 200.0
    min_speedup: float = 1.15
    max_drift: float = 0.003
    max_acceptance_drop: float = 0.05
    min_acceptance_rate: float = 0.5
    rollback_latency_factor: float = 1.2
    regression_tolerance: float = 0.05
    max_accuracy_drop: float = 0.03
    # how much two instances of one engine configuration differ (relative sd, e.g. 0.02 for two vLLM servers started
    # alike): arms served by different instances are compared with it folded into the interval
    instance_spread: float = 0.0
    # the most requests the deployment has in flight at once: a concurrency sweep (a workload's `sweep`) blocks
    # unless speculation is shown to pay (S ≥ min_speedup) at every measured level up to it
    deployment_concurrency: float = 1.0


SLA_KEYS: tuple[str, ...] = tuple(f.name for f in fields(SlaLimits))


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """A `hardware/<name>.yaml` profile: where models run, what it costs, and the SLA limits there."""

    name: str
    backend: str
    device: str
    description: str = ""
    threads: int | None = None
    dtype: str = "float32"
    engine: str = "transformers"
    memory_bandwidth_gb_s: float = 0.0
    peak_tflops_bf16: float = 0.0
    power_w: float = 0.0
    price_per_hour_usd: float = 0.0
    telemetry: str = "none"
    sla: SlaLimits = field(default_factory=SlaLimits)
    parallel: ParallelLayout = field(default_factory=ParallelLayout)
    source: str = ""


def sla_limits(data: Any, source: str, base: SlaLimits, where: str = "sla") -> SlaLimits:
    """`base` with the overrides of an `sla:` mapping."""
    raw = mapping(data, source, where)
    check_keys(raw, SLA_KEYS, source, f"{where}.")
    values = {k: float(typed(v, (int, float), source, f"{where}.{k}")) for k, v in raw.items()}
    return replace(base, **values)


def known_profiles(hardware_dir: Path) -> list[str]:
    """The profiles of the repository's `hardware_dir` and those shipped with specgate."""
    return sorted(profile_files(hardware_dir))


def profile_files(hardware_dir: Path) -> dict[str, Path]:
    """name → file: the shipped profiles, overridden by the repository's of the same name."""
    from specgate.shipped import shipped

    packaged = shipped("hardware")
    found = {} if packaged is None else {p.stem: p for p in packaged.glob("*.yaml")}
    found.update({p.stem: p for p in hardware_dir.glob("*.yaml")})
    return found


def load_hardware_profile(name: str, hardware_dir: Path) -> HardwareProfile:
    """Read and validate `hardware_dir/<name>.yaml`, or the profile of that name shipped with specgate."""
    files = profile_files(hardware_dir)
    known = sorted(files)
    if name not in known:
        raise ConfigError(
            f"--hardware={name!r} is not a known profile.{did_you_mean(name, known)} "
            f"Known: {', '.join(known) or '(none)'} (from {hardware_dir} and specgate's own). Add "
            f"hardware/{name}.yaml to define it."
        )
    path = files[name]
    source = str(path)
    raw = mapping(read_yaml(path), source, "(top level)")
    allowed = [f.name for f in fields(HardwareProfile) if f.name != "source"]
    check_keys(raw, allowed, source, "")
    for required in ("name", "backend", "device"):
        if required not in raw:
            raise fail(source, required, "required key is missing")
    if raw["name"] != name:
        raise fail(source, "name", f"is {raw['name']!r} but the file is {name}.yaml; make them equal")
    check_choice(raw["backend"], backend_names(), source, "backend")
    check_choice(raw.get("engine", "transformers"), engine_names(), source, "engine")
    check_choice(raw.get("telemetry", "none"), TELEMETRY_SOURCES, source, "telemetry")
    check_choice(raw.get("dtype", "float32"), DTYPES, source, "dtype")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "sla":
            values[key] = sla_limits(value, source, SlaLimits())
        elif key == "parallel":
            values[key] = parse_parallel(value, source, key)
        elif key == "threads":
            values[key] = None if value is None else int(typed(value, int, source, key))
        elif key in ("memory_bandwidth_gb_s", "peak_tflops_bf16", "power_w", "price_per_hour_usd"):
            values[key] = float(typed(value, (int, float), source, key))
        else:
            values[key] = str(typed(value, str, source, key))
    return HardwareProfile(**values, source=source)


def with_sla(profile: HardwareProfile, overrides: Mapping[str, float]) -> SlaLimits:
    """The profile's SLA limits with per-pair overrides applied."""
    return replace(profile.sla, **dict(overrides))
