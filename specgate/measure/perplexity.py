"""Perplexity on long documents, per arm: how much a quantized KV cache or quantized weights cost the model.

Engines that can score text (`specgate.engines.base.ScoresPerplexity`) return, per document, the summed negative
log-likelihood of its tokens and how many were scored; the transformers engine feeds each document in chunks
through the arm's own KV cache, so a quantized cache is read back quantized, as in decoding. Perplexity is exp of
the mean NLL over every scored token of every document.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specgate.engines.base import Prompt, ScoresPerplexity
from specgate.plan import MeasurementPlan

MAX_DOCUMENT_TOKENS = 8192


@dataclass(frozen=True, slots=True)
class Perplexity:
    """An arm's perplexity on long documents: exp of the mean negative log-likelihood over every scored token."""

    arm: str
    documents: int
    tokens: int
    value: float
    per_document: tuple[float, ...] = ()
    document_ids: tuple[str, ...] = ()  # the prompts' ids, in the order of `per_document`
    tokens_per_document: tuple[int, ...] = ()


def summarize_perplexity(arm: str, scores: Sequence[tuple[float, int]], ids: Sequence[str] = ()) -> Perplexity:
    """Perplexity from (summed NLL, tokens) per document (`ids` names them)."""
    tokens = sum(n for _, n in scores)
    nll = math.fsum(s for s, _ in scores)
    value = math.exp(nll / tokens) if tokens else float("nan")
    per_document = tuple(math.exp(s / n) if n else float("nan") for s, n in scores)
    return Perplexity(arm, len(scores), tokens, value, per_document, tuple(ids), tuple(n for _, n in scores))


def measure_perplexity(
    engine: ScoresPerplexity, plan: MeasurementPlan, prompts: Sequence[Prompt], max_tokens: int = MAX_DOCUMENT_TOKENS
) -> dict[str, Perplexity]:
    """Each ladder arm's perplexity (full precision's too) on the prompts' texts, the long documents."""
    arms = [plan.plain, *(step.arm for step in plan.ladder)]
    texts, ids = [p.text for p in prompts], [p.id for p in prompts]
    return {arm: summarize_perplexity(arm, engine.perplexity(arm, texts, max_tokens=max_tokens), ids) for arm in arms}
