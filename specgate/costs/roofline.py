"""The batch-1 decode roofline of a pair's target model on the profile's memory bandwidth, and the fraction reached.

Each plain decoding step streams every weight and the KV cache of the context once, so on `bandwidth_gb_s` decode
cannot beat bandwidth / (weight bytes + KV bytes per token × context tokens) (`specgate.hardware.economics`). The
model facts come from the resolved target folder: `config.json` for layers, KV heads and head size, the parameter
count from the safetensors headers (exact) or, without them, from `config.json` for a llama-style decoder (an
estimate, said so). Weights and KV cache are counted at the run's dtype. The context is the mean over the reference
arm's completed requests of prompt tokens + (output tokens − 1) / 2, the mean length during decoding.

Engines without a local model folder (an HTTP endpoint, the fake engine) get a roofline "n/a" with the reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate.config import HardwareProfile
from specgate.engines.base import ArmRun
from specgate.hardware.economics import kv_cache_bytes_per_token, roofline_decode_tokens_per_s, roofline_fraction
from specgate.measure.metrics import ArmSummary

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the roofline needs to know about a decoder-only model."""

    parameters: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    max_context_tokens: int | None
    parameters_source: str


def count_safetensors_parameters(folder: Path) -> int | None:
    """The number of weights stored in a folder's `*.safetensors` files (read from their headers), or None."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with file.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header: dict[str, Any] = json.loads(handle.read(size))
        total += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
    return total


def estimate_parameters(config: Mapping[str, Any]) -> int:
    """Parameters of a llama-style decoder from its Hugging Face config: attention (q, k, v, o), a gated MLP, two
    norms per layer, the embeddings (twice when the head is not tied) and the final norm."""
    hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlp = 3 * hidden * int(config["intermediate_size"])
    embeddings = int(config["vocab_size"]) * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    return layers * (attention + mlp + 2 * hidden) + embeddings + hidden


def load_model_facts(folder: Path) -> ModelFacts:
    """Read `folder/config.json` (and the safetensors headers). Raises `ValueError` saying what is missing."""
    path = folder / "config.json"
    try:
        config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
    config = config.get("text_config", config)
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads") if k not in config]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}")
    heads = int(config["num_attention_heads"])
    counted = count_safetensors_parameters(folder)
    if counted is None:
        counted, source = estimate_parameters(config), "estimated from config.json"
    else:
        source = "counted in the safetensors headers"
    window = config.get("max_position_embeddings")
    return ModelFacts(
        parameters=counted,
        num_layers=int(config["num_hidden_layers"]),
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
        max_context_tokens=None if window is None else int(window),
        parameters_source=source,
    )


def mean_decode_context(runs: Sequence[ArmRun]) -> float | None:
    """Mean context length while decoding: prompt tokens + (output tokens − 1) / 2 over completed requests."""
    contexts = [t.prompt_tokens + (t.output_tokens - 1) / 2 for r in runs for t in r.traces if t.ok]
    return sum(contexts) / len(contexts) if contexts else None


@dataclass(frozen=True, slots=True)
class Roofline:
    """The decode bound and how much of it each arm reaches; `fraction` is the reference arm's (plain decoding).

    A speculative arm can pass 1.0: one verification step reads the weights once for several tokens.
    """

    reference: str
    bandwidth_gb_s: float
    dtype: str
    bound_tokens_per_s: float | None = None
    parameters: int | None = None
    weight_bytes: float | None = None
    kv_bytes_per_token: int | None = None
    mean_context_tokens: float | None = None
    measured_tokens_per_s: Mapping[str, float] = field(default_factory=dict)
    fractions: Mapping[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def fraction(self) -> float | None:
        return self.fractions.get(self.reference)


def summarize_roofline(
    folder: Path | None,
    hardware: HardwareProfile,
    dtype: str,
    plain: str,
    runs: Sequence[ArmRun],
    summaries: Mapping[str, ArmSummary],
) -> Roofline:
    """The roofline of a pair's target, placed against the decode rate of every arm; "n/a" (bound None, the reason
    in `note`) when it cannot be known. `plain` is the plain-decoding arm whose `runs` give the context length."""
    base = Roofline(plain, hardware.memory_bandwidth_gb_s, dtype)
    if folder is None:
        return _na(base, "the engine has no local model folder to read the model's size from")
    if hardware.memory_bandwidth_gb_s <= 0:
        return _na(base, f"profile {hardware.name!r} has no memory_bandwidth_gb_s")
    if dtype not in DTYPE_BYTES:
        return _na(base, f"dtype {dtype!r} has no known size; known: {', '.join(DTYPE_BYTES)}")
    try:
        facts = load_model_facts(folder)
    except ValueError as exc:
        return _na(base, str(exc))
    context = mean_decode_context(runs)
    if context is None:
        return _na(base, f"no completed request in arm {plain}")
    size = DTYPE_BYTES[dtype]
    weight_bytes = facts.parameters * size
    kv = kv_cache_bytes_per_token(facts.num_layers, facts.num_kv_heads, facts.head_dim, size)
    bound = roofline_decode_tokens_per_s(weight_bytes, kv, round(context), hardware.memory_bandwidth_gb_s)
    measured = {arm: s.decode_tokens_per_s.mean for arm, s in summaries.items() if s.decode_tokens_per_s is not None}
    return Roofline(
        reference=plain,
        bandwidth_gb_s=hardware.memory_bandwidth_gb_s,
        dtype=dtype,
        bound_tokens_per_s=bound,
        parameters=facts.parameters,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv,
        mean_context_tokens=context,
        measured_tokens_per_s=measured,
        fractions={arm: roofline_fraction(rate, bound) for arm, rate in measured.items()},
        note=f"{facts.parameters:,} parameters ({facts.parameters_source}) at {dtype}",
    )


def _na(base: Roofline, reason: str) -> Roofline:
    return Roofline(base.reference, base.bandwidth_gb_s, base.dtype, note=f"n/a: {reason}")
