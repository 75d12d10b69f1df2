"""Hardware: device backends (CPU, CUDA, Ascend NPU), telemetry sampling, and cost/energy arithmetic.

- `backends`: `get_backend(backend, device)` returns a `HardwareBackend` (check_available, synchronize,
  peak memory).
- `telemetry`: `TelemetrySampler(source)` samples power, memory and utilization while an arm runs; pure parsers
  for nvidia-smi and npu-smi output.
- `economics`: cost and energy per 1k tokens, the batch-1 decode roofline, relative savings.

The profiles themselves are the YAML files in the repository's `hardware/` folder. Nothing here imports torch at
import time.
"""

from __future__ import annotations

from specgate.hardware.backends import BACKENDS, HardwareBackend, get_backend
from specgate.hardware.economics import (
    cost_per_1k_tokens_usd,
    energy_per_1k_tokens_j,
    estimated_energy_j,
    kv_cache_bytes_per_token,
    roofline_decode_tokens_per_s,
    roofline_fraction,
    saving,
)
from specgate.hardware.telemetry import SOURCES, TelemetrySampler, TelemetrySummary, estimate_missing_energy

__all__ = [
    "BACKENDS",
    "SOURCES",
    "HardwareBackend",
    "TelemetrySampler",
    "TelemetrySummary",
    "cost_per_1k_tokens_usd",
    "energy_per_1k_tokens_j",
    "estimate_missing_energy",
    "estimated_energy_j",
    "get_backend",
    "kv_cache_bytes_per_token",
    "roofline_decode_tokens_per_s",
    "roofline_fraction",
    "saving",
]
