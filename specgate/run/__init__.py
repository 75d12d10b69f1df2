"""The gate run: `GateRun`, the pytest-free entry point, and the parts it is made of (`scope`: what it judges and
the lookups; `memo`: engines and measurements made once; `records`: records and baselines; `items`: how far its gate
checks got)."""

from specgate.run.gate import EngineFactory, GateOptions, GateRun
from specgate.run.items import GateItems
from specgate.run.scope import NO_REFERENCE, RunScope

__all__ = ["NO_REFERENCE", "EngineFactory", "GateItems", "GateOptions", "GateRun", "RunScope"]
