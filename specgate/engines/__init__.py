"""Engines behind one protocol; `create_engine` picks one by name and imports it lazily."""

from __future__ import annotations

from pathlib import Path

from specgate.config import ENGINES
from specgate.engines.base import ArmRun, Engine, Prompt, RequestTrace, SpecCounters
from specgate.errors import ConfigError

__all__ = ["ArmRun", "Engine", "Prompt", "RequestTrace", "SpecCounters", "create_engine"]


def create_engine(name: str, base_dir: Path) -> Engine:
    """A new, unloaded engine. Each engine module is imported only when chosen."""
    if name == "transformers":
        from specgate.engines.transformers_engine import TransformersEngine

        return TransformersEngine(base_dir)
    if name == "vllm":
        from specgate.engines.vllm_engine import VllmEngine

        return VllmEngine(base_dir)
    if name == "openai":
        from specgate.engines.openai_engine import OpenAIEngine

        return OpenAIEngine(base_dir)
    raise ConfigError(f"--engine={name!r} is not a known engine. Known: {', '.join(ENGINES)}")
