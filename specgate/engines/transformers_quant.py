"""What the transformers engine does for an arm's `kv_cache:` and `weights:` (`specgate.config.optimisation`).

Real kernels from maintained libraries, never simulated rounding:
- a quantized KV cache is transformers' `QuantizedCache` with the optimum-quanto backend (int4 or int2) or the HQQ
  backend (int8, int4, int2), per group of 64 values with a scale and a zero point each; the last 128 tokens stay in
  full precision until they are flushed into the quantized store. The first quanto call builds its CPU kernels
  (about two minutes, cached afterwards in torch's extension folder);
- int8 weight-only is torchao's `Int8WeightOnlyConfig` (`quantize_`); int4 and int2 weights are optimum-quanto's
  `quantize(weights=qint4|qint2)` then `freeze` (torchao's int4 needs a kernel package this CPU build lacks).
  The output head stays in full precision: SmolLM-style models tie it to the input embeddings.

Perplexity (`score_document`) feeds a document in chunks through the arm's own cache, so each chunk reads the
chunks before it back from the (quantized) cache, as decoding does.
"""

from __future__ import annotations

import math
from typing import Any

from specgate.config.optimisation import KvCache, Weights
from specgate.errors import EngineUnavailableError

PERPLEXITY_CHUNK = 512


def quantize_weights(model: Any, weights: Weights) -> Any:
    """Quantize `model`'s linear layers in place (weight-only) and return it."""
    try:
        if weights.library == "torchao":
            from torchao.quantization import Int8WeightOnlyConfig, quantize_

            if weights.dtype != "int8":
                raise EngineUnavailableError(f"torchao weight-only {weights.dtype} is not supported here; use int8")
            quantize_(model, Int8WeightOnlyConfig(), filter_fn=_not_head(model))
            return model
        if weights.library == "quanto":
            from optimum.quanto import freeze, qint2, qint4, qint8, quantize

            qtype = {"int8": qint8, "int4": qint4, "int2": qint2}[weights.dtype]
            quantize(model, weights=qtype, exclude=["lm_head"])
            freeze(model)
            return model
    except ImportError as exc:
        raise EngineUnavailableError(f"weights {weights.dtype} through {weights.library}: {exc}") from exc
    raise EngineUnavailableError(f"weights through {weights.library!r}: the transformers engine runs torchao or quanto")


def _not_head(model: Any) -> Any:
    import torch

    head = model.get_output_embeddings()

    def keep(module: Any, fqn: str) -> bool:
        return isinstance(module, torch.nn.Linear) and module is not head

    return keep


def inference_context(weights: Weights | None) -> Any:
    """`torch.inference_mode()`, or `torch.no_grad()` for an arm whose weight kernels reject inference tensors
    (optimum-quanto's)."""
    import torch

    return torch.no_grad() if weights is not None and weights.library == "quanto" else torch.inference_mode()


def kv_cache_kwargs(kv: KvCache) -> dict[str, Any]:
    """The `generate` arguments of a quantized KV cache."""
    return {"cache_implementation": "quantized", "cache_config": {"backend": kv.backend, "nbits": _bits(kv)}}


def _bits(kv: KvCache) -> int:
    return int(kv.dtype.removeprefix("int"))


def new_cache(model: Any, kv: KvCache | None) -> Any:
    """A fresh cache for scoring: the arm's quantized cache, or the default dynamic one."""
    from transformers import DynamicCache, QuantizedCache

    if kv is None:
        return DynamicCache(config=model.config)
    return QuantizedCache(backend=kv.backend, config=model.config, nbits=_bits(kv))


def score_document(
    model: Any, ids: Any, cache: Any, weights: Weights | None = None, chunk: int = PERPLEXITY_CHUNK
) -> tuple[float, int]:
    """(summed negative log-likelihood, tokens scored) of `ids` (1 × n) through the arm's model (its `weights`),
    fed `chunk` tokens at a time."""
    import torch

    total, scored = 0.0, 0
    previous_logits = None
    with inference_context(weights):
        for start in range(0, ids.shape[1], chunk):
            piece = ids[:, start : start + chunk]
            logits = model(piece, past_key_values=cache, use_cache=True).logits.float()
            if previous_logits is not None:
                logits = torch.cat([previous_logits, logits], dim=1)
                piece = torch.cat([ids[:, start - 1 : start], piece], dim=1)
            log_probs = torch.log_softmax(logits[:, :-1], dim=-1)
            nll = -log_probs.gather(-1, piece[:, 1:, None]).squeeze(-1)
            total += float(nll.sum())
            scored += int(nll.numel())
            previous_logits = logits[:, -1:]
    return (total if math.isfinite(total) else float("inf")), scored
