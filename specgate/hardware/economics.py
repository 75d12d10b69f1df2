"""Cost, energy and roofline arithmetic: pure functions, no I/O.

Definitions (pinned in docs/concepts.md, "Metrics"):

- Cost per 1k output tokens = price per device-hour * wall hours / output tokens * 1000.
- Energy per 1k output tokens = energy (J) / output tokens * 1000, from telemetry or, when telemetry has no power,
  estimated as the profile's board power * wall time (the caller marks such a value as an estimate).
- Roofline for batch-1 decode: each new token reads every weight once plus the KV cache of the whole context, so
  the memory-bound ceiling is bandwidth / (weight bytes + KV bytes per token * context tokens).

Bandwidth is in vendor units, GB/s with GB = 1e9 bytes, as datasheets state it.
"""

from __future__ import annotations

import math

__all__ = [
    "cost_per_1k_tokens_usd",
    "energy_per_1k_tokens_j",
    "estimated_energy_j",
    "kv_cache_bytes_per_token",
    "roofline_decode_tokens_per_s",
    "roofline_fraction",
    "saving",
]

_SECONDS_PER_HOUR = 3600.0
_BYTES_PER_GB = 1e9


def _require_finite(name: str, value: float, *, positive: bool = False) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if not positive and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def cost_per_1k_tokens_usd(price_per_hour_usd: float, wall_s: float, output_tokens: int) -> float:
    """Device cost of producing 1000 output tokens: price * wall hours / tokens * 1000.

    `price_per_hour_usd` is the price of the devices the run used (one device-hour times the device count for a
    multi-device run). Raises `ValueError` for a negative price or time, or for zero tokens.
    """
    _require_finite("price_per_hour_usd", price_per_hour_usd)
    _require_finite("wall_s", wall_s)
    _require_finite("output_tokens", output_tokens, positive=True)
    return price_per_hour_usd * (wall_s / _SECONDS_PER_HOUR) / output_tokens * 1000.0


def energy_per_1k_tokens_j(energy_j: float, output_tokens: int) -> float:
    """Energy spent per 1000 output tokens, in joules."""
    _require_finite("energy_j", energy_j)
    _require_finite("output_tokens", output_tokens, positive=True)
    return energy_j / output_tokens * 1000.0


def estimated_energy_j(power_w: float, wall_s: float) -> float:
    """Energy if the device drew `power_w` for the whole `wall_s`. An upper-bound estimate at board power (TDP);
    the caller must label the result as estimated."""
    _require_finite("power_w", power_w)
    _require_finite("wall_s", wall_s)
    return power_w * wall_s


def kv_cache_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: float) -> int:
    """Bytes of KV cache one token occupies: 2 (K and V) * layers * KV heads * head dim * bytes per element.

    `num_kv_heads` is the grouped-query count (`num_key_value_heads` in a Hugging Face config), not the number
    of attention heads. `dtype_bytes` may be fractional for sub-byte caches (0.5 for 4-bit).
    """
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
        _require_finite(name, value, positive=True)
    _require_finite("dtype_bytes", dtype_bytes, positive=True)
    return math.ceil(2 * num_layers * num_kv_heads * head_dim * dtype_bytes)


def roofline_decode_tokens_per_s(
    weight_bytes: float, kv_bytes_per_token: float, context_tokens: int, bandwidth_gb_s: float
) -> float:
    """Memory-bandwidth ceiling on batch-1 decode speed, in tokens/s.

    Each decode step streams all weights plus the KV cache of `context_tokens` earlier tokens:
    tokens/s <= bandwidth_gb_s * 1e9 / (weight_bytes + kv_bytes_per_token * context_tokens).
    """
    _require_finite("weight_bytes", weight_bytes, positive=True)
    _require_finite("kv_bytes_per_token", kv_bytes_per_token)
    _require_finite("context_tokens", context_tokens)
    _require_finite("bandwidth_gb_s", bandwidth_gb_s, positive=True)
    bytes_per_token = weight_bytes + kv_bytes_per_token * context_tokens
    return bandwidth_gb_s * _BYTES_PER_GB / bytes_per_token


def roofline_fraction(measured_tokens_per_s: float, bound: float) -> float:
    """How much of the roofline a measurement reaches: measured / bound (1.0 = at the memory-bandwidth limit)."""
    _require_finite("measured_tokens_per_s", measured_tokens_per_s)
    _require_finite("bound", bound, positive=True)
    return measured_tokens_per_s / bound


def saving(reference: float, candidate: float) -> float:
    """Relative change of `candidate` against `reference`: (candidate - reference) / reference.

    Negative is a saving: a cost of 0.70 against 1.00 gives -0.30, reported as "cost -30 %".
    """
    _require_finite("reference", reference, positive=True)
    _require_finite("candidate", candidate)
    return (candidate - reference) / reference
