"""Hardware profiles and the project config, validated into frozen models.

`load_hardware_profile` reads `hardware/<name>.yaml`; `load_project_config` reads `specgate.yaml` (pairs,
workloads, gate policy). Every problem is a `ConfigError` that names the file, the key, what is allowed and the
closest match, so that the plugin can turn it into a `pytest.UsageError` before anything runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from specgate.errors import ConfigError

BACKENDS = ("cpu", "cuda", "npu")
ENGINES = ("transformers", "vllm", "openai")
TELEMETRY_SOURCES = ("none", "nvml", "nvidia-smi", "npu-smi", "rapl")
DTYPES = ("float32", "bfloat16", "float16")
SPECULATION_METHODS = ("prompt_lookup", "draft_model", "eagle", "eagle3", "mtp")
TASKS = ("generate", "numeric", "span", "summary")


def did_you_mean(value: str, allowed: Sequence[str]) -> str:
    """' Did you mean 'x'?' for the closest allowed value, or '' when nothing is close."""
    close = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


def _fail(source: str, key: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: '{key}': {message}")


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
    source: str = ""


@dataclass(frozen=True, slots=True)
class Speculation:
    """How the `spec` arm speculates. `num_tokens` is the draft length γ."""

    method: str
    num_tokens: int
    draft: str | None = None
    draft_layers: int | None = None
    max_ngram: int = 3
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PairConfig:
    """A target model with its speculation: the unit the gate judges."""

    name: str
    target: str
    speculation: Speculation
    dtype: str | None = None
    engine: str | None = None
    default: bool = False
    description: str = ""
    sla: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """A JSONL file of prompts and how to read it."""

    name: str
    path: Path
    max_new_tokens: int = 64
    limit: int | None = None
    task: str = "generate"
    gate_speed: bool = True
    repetitions: int | None = None
    template: str | None = None
    default: bool = False
    description: str = ""
    fields: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """How the gate measures and decides (see DESIGN.md, Gate policy)."""

    alpha: float = 0.01
    repetitions: int = 2
    max_repetitions: int = 0
    warmup: int = 1
    min_samples: int = 4
    bootstrap_resamples: int = 2000
    seed: int = 0


@dataclass(frozen=True, slots=True)
class ProjectConfig:
    """`specgate.yaml`: the pairs, workloads and gate policy of a project."""

    pairs: Mapping[str, PairConfig]
    workloads: Mapping[str, WorkloadConfig]
    gate: GatePolicy
    source: Path

    def default_pairs(self) -> list[str]:
        marked = [name for name, pair in self.pairs.items() if pair.default]
        return marked or list(self.pairs)

    def default_workloads(self) -> list[str]:
        marked = [name for name, workload in self.workloads.items() if workload.default]
        return marked or list(self.workloads)


def _check_keys(data: Mapping[str, Any], allowed: Sequence[str], source: str, where: str) -> None:
    for key in data:
        if key not in allowed:
            raise _fail(
                source,
                f"{where}{key}",
                f"unknown key.{did_you_mean(str(key), allowed)} Allowed: {', '.join(sorted(allowed))}",
            )


def _check_choice(value: Any, allowed: Sequence[str], source: str, key: str) -> str:
    if value not in allowed:
        raise _fail(
            source, key, f"{value!r} is not allowed.{did_you_mean(str(value), allowed)} Allowed: {', '.join(allowed)}"
        )
    return str(value)


def _typed(value: Any, kind: type | tuple[type, ...], source: str, key: str) -> Any:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise _fail(source, key, f"expected a number, got {value!r}")
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _fail(source, key, f"expected {name}, got {value!r}")
    return value


def _read_yaml(path: Path) -> Any:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}. Fix the syntax at the line shown.") from exc


def _mapping(data: Any, source: str, key: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise _fail(source, key, f"expected a mapping, got {type(data).__name__}")
    return data


def _sla(data: Any, source: str, base: SlaLimits) -> SlaLimits:
    raw = _mapping(data, source, "sla")
    allowed = [f.name for f in fields(SlaLimits)]
    _check_keys(raw, allowed, source, "sla.")
    values = {k: float(_typed(v, (int, float), source, f"sla.{k}")) for k, v in raw.items()}
    return replace(base, **values)


def known_profiles(hardware_dir: Path) -> list[str]:
    return sorted(p.stem for p in hardware_dir.glob("*.yaml"))


def load_hardware_profile(name: str, hardware_dir: Path) -> HardwareProfile:
    """Read and validate `hardware_dir/<name>.yaml`."""
    known = known_profiles(hardware_dir)
    if name not in known:
        raise ConfigError(
            f"--hardware={name!r} is not a known profile.{did_you_mean(name, known)} "
            f"Known: {', '.join(known) or '(none)'} (from {hardware_dir}). Add hardware/{name}.yaml to define it."
        )
    path = hardware_dir / f"{name}.yaml"
    source = str(path)
    raw = _mapping(_read_yaml(path), source, "(top level)")
    allowed = [f.name for f in fields(HardwareProfile) if f.name != "source"]
    _check_keys(raw, allowed, source, "")
    for required in ("name", "backend", "device"):
        if required not in raw:
            raise _fail(source, required, "required key is missing")
    if raw["name"] != name:
        raise _fail(source, "name", f"is {raw['name']!r} but the file is {name}.yaml; make them equal")
    _check_choice(raw["backend"], BACKENDS, source, "backend")
    _check_choice(raw.get("engine", "transformers"), ENGINES, source, "engine")
    _check_choice(raw.get("telemetry", "none"), TELEMETRY_SOURCES, source, "telemetry")
    _check_choice(raw.get("dtype", "float32"), DTYPES, source, "dtype")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "sla":
            values[key] = _sla(value, source, SlaLimits())
        elif key == "threads":
            values[key] = None if value is None else int(_typed(value, int, source, key))
        elif key in ("memory_bandwidth_gb_s", "peak_tflops_bf16", "power_w", "price_per_hour_usd"):
            values[key] = float(_typed(value, (int, float), source, key))
        else:
            values[key] = str(_typed(value, str, source, key))
    return HardwareProfile(**values, source=source)


def _speculation(data: Any, source: str, where: str) -> Speculation:
    raw = _mapping(data, source, where)
    allowed = [f.name for f in fields(Speculation)]
    _check_keys(raw, allowed, source, f"{where}.")
    if "method" not in raw:
        raise _fail(source, f"{where}.method", f"required; one of {', '.join(SPECULATION_METHODS)}")
    method = _check_choice(raw["method"], SPECULATION_METHODS, source, f"{where}.method")
    num_tokens = int(_typed(raw.get("num_tokens", 3), int, source, f"{where}.num_tokens"))
    if not 1 <= num_tokens <= 64:
        raise _fail(source, f"{where}.num_tokens", f"draft length must be 1..64, got {num_tokens}")
    draft = raw.get("draft")
    if method != "prompt_lookup" and not draft:
        raise _fail(source, f"{where}.draft", f"method {method!r} needs a draft model (a path or embedded:<name>)")
    layers = raw.get("draft_layers")
    return Speculation(
        method=method,
        num_tokens=num_tokens,
        draft=None if draft is None else str(_typed(draft, str, source, f"{where}.draft")),
        draft_layers=None if layers is None else int(_typed(layers, int, source, f"{where}.draft_layers")),
        max_ngram=int(_typed(raw.get("max_ngram", 3), int, source, f"{where}.max_ngram")),
        options=dict(_mapping(raw.get("options", {}), source, f"{where}.options")),
    )


def _pair(name: str, data: Any, source: str) -> PairConfig:
    where = f"pairs.{name}"
    raw = _mapping(data, source, where)
    allowed = [f.name for f in fields(PairConfig) if f.name != "name"]
    _check_keys(raw, allowed, source, f"{where}.")
    if "target" not in raw:
        raise _fail(source, f"{where}.target", "required: a model folder, a .gguf file or embedded:<name>")
    if "speculation" not in raw:
        raise _fail(source, f"{where}.speculation", "required: e.g. {method: prompt_lookup, num_tokens: 3}")
    sla_raw = _mapping(raw.get("sla", {}), source, f"{where}.sla")
    _check_keys(sla_raw, [f.name for f in fields(SlaLimits)], source, f"{where}.sla.")
    return PairConfig(
        name=name,
        target=str(_typed(raw["target"], str, source, f"{where}.target")),
        speculation=_speculation(raw["speculation"], source, f"{where}.speculation"),
        dtype=None if raw.get("dtype") is None else _check_choice(raw["dtype"], DTYPES, source, f"{where}.dtype"),
        engine=None if raw.get("engine") is None else _check_choice(raw["engine"], ENGINES, source, f"{where}.engine"),
        default=bool(raw.get("default", False)),
        description=str(raw.get("description", "")),
        sla={k: float(_typed(v, (int, float), source, f"{where}.sla.{k}")) for k, v in sla_raw.items()},
    )


def _workload(name: str, data: Any, source: str, base_dir: Path) -> WorkloadConfig:
    where = f"workloads.{name}"
    raw = _mapping(data, source, where)
    allowed = [f.name for f in fields(WorkloadConfig) if f.name != "name"]
    _check_keys(raw, allowed, source, f"{where}.")
    if "path" not in raw:
        raise _fail(source, f"{where}.path", "required: a JSONL file, relative to the config file")
    path = (base_dir / str(raw["path"])).resolve()
    limit = raw.get("limit")
    fields_map = _mapping(raw.get("fields", {}), source, f"{where}.fields")
    _check_keys(fields_map, ["id", "prompt", "reference", "system"], source, f"{where}.fields.")
    return WorkloadConfig(
        name=name,
        path=path,
        max_new_tokens=int(_typed(raw.get("max_new_tokens", 64), int, source, f"{where}.max_new_tokens")),
        limit=None if limit is None else int(_typed(limit, int, source, f"{where}.limit")),
        task=_check_choice(raw.get("task", "generate"), TASKS, source, f"{where}.task"),
        gate_speed=bool(_typed(raw.get("gate_speed", True), bool, source, f"{where}.gate_speed")),
        template=None
        if raw.get("template") is None
        else str(_typed(raw["template"], str, source, f"{where}.template")),
        repetitions=None
        if raw.get("repetitions") is None
        else int(_typed(raw["repetitions"], int, source, f"{where}.repetitions")),
        default=bool(raw.get("default", False)),
        description=str(raw.get("description", "")),
        fields={str(k): str(v) for k, v in fields_map.items()},
    )


def _gate(data: Any, source: str) -> GatePolicy:
    raw = _mapping(data, source, "gate")
    allowed = [f.name for f in fields(GatePolicy)]
    _check_keys(raw, allowed, source, "gate.")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        kind: type | tuple[type, ...] = (int, float) if key == "alpha" else int
        values[key] = _typed(value, kind, source, f"gate.{key}")
    policy = GatePolicy(**values)
    if not 0 < policy.alpha < 0.5:
        raise _fail(source, "gate.alpha", f"must be in (0, 0.5), got {policy.alpha}")
    if policy.repetitions < 1 or policy.warmup < 0:
        raise _fail(source, "gate.repetitions", "repetitions must be ≥ 1 and warmup ≥ 0")
    return policy


def load_project_config(path: Path) -> ProjectConfig:
    """Read and validate `specgate.yaml`."""
    source = str(path)
    if not path.is_file():
        raise ConfigError(f"{path}: project config not found. Create specgate.yaml or pass --specgate-config=PATH.")
    raw = _mapping(_read_yaml(path) or {}, source, "(top level)")
    _check_keys(raw, ["pairs", "workloads", "gate"], source, "")
    pairs_raw = _mapping(raw.get("pairs", {}), source, "pairs")
    workloads_raw = _mapping(raw.get("workloads", {}), source, "workloads")
    if not pairs_raw:
        raise _fail(source, "pairs", "at least one pair is required")
    if not workloads_raw:
        raise _fail(source, "workloads", "at least one workload is required")
    return ProjectConfig(
        pairs={str(n): _pair(str(n), d, source) for n, d in pairs_raw.items()},
        workloads={str(n): _workload(str(n), d, source, path.parent) for n, d in workloads_raw.items()},
        gate=_gate(raw.get("gate", {}), source),
        source=path,
    )


def parse_selection(option: str, values: Sequence[str] | None, known: Sequence[str], default: list[str]) -> list[str]:
    """Validate a `--pair`/`--workload` selection (repeatable, comma-separated) against the config."""
    if not values:
        return default
    chosen: list[str] = []
    for value in values:
        for name in (v.strip() for v in value.split(",")):
            if not name:
                continue
            if name == "all":
                chosen.extend(n for n in known if n not in chosen)
                continue
            if name not in known:
                raise ConfigError(
                    f"--{option}={name!r} is not in the project config.{did_you_mean(name, known)} "
                    f"Known: {', '.join(known)}, or 'all'."
                )
            if name not in chosen:
                chosen.append(name)
    return chosen


def effective_sla(hardware: HardwareProfile, pair: PairConfig) -> SlaLimits:
    """The profile's SLA limits with the pair's overrides applied."""
    return replace(hardware.sla, **dict(pair.sla))
