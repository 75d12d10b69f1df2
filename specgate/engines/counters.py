"""Speculation counters as engines report them: cumulative totals, turned into what happened during one run."""

from __future__ import annotations

import itertools

from specgate.engines.base import SpecCounters
from specgate.errors import MeasurementError


def counters_delta(before: SpecCounters | None, after: SpecCounters | None) -> SpecCounters | None:
    """What happened between two readings of cumulative counters (None when the engine has none)."""
    if after is None:
        return None
    if before is None:
        return after
    positions = itertools.zip_longest(before.accepted_per_position, after.accepted_per_position, fillvalue=0)
    delta = SpecCounters(
        num_drafts=after.num_drafts - before.num_drafts,
        num_draft_tokens=after.num_draft_tokens - before.num_draft_tokens,
        num_accepted_tokens=after.num_accepted_tokens - before.num_accepted_tokens,
        accepted_per_position=tuple(b - a for a, b in positions),
    )
    counts = (delta.num_drafts, delta.num_draft_tokens, delta.num_accepted_tokens, *delta.accepted_per_position)
    if min(counts) < 0:
        raise MeasurementError(f"vLLM's spec-decode counters went backwards ({before} → {after}); engine restarted?")
    return delta
