"""Engines behind one protocol (`specgate.engines.base.Engine`), created by name from the registry
(`specgate.registry`). Engine modules are imported only when an engine is created."""

from __future__ import annotations

import importlib
from pathlib import Path

from specgate.engines.base import ArmRun, Engine, Prompt, RequestTrace, SpecCounters
from specgate.registry import EngineSpec, engine_names, engine_spec, require_engine

__all__ = [
    "ArmRun",
    "Engine",
    "EngineSpec",
    "Prompt",
    "RequestTrace",
    "SpecCounters",
    "create_engine",
    "engine_names",
    "engine_spec",
    "require_engine",
]


def create_engine(name: str, base_dir: Path) -> Engine:
    """A new, unloaded engine; its module is imported only now."""
    module_name, class_name = engine_spec(name).factory.split(":")
    engine: Engine = getattr(importlib.import_module(module_name), class_name)(base_dir)
    return engine
