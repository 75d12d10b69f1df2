"""TTFT and peak memory against context length, and the checks of the long-context suite.

A context length is a prompt's declared `context_target` (from a workload built by `specgate.longdoc`), or else its
measured prompt tokens. Per length: the median TTFT of each arm over its completed requests, the peak memory of the
engine calls on those prompts (one-prompt calls, from the `ArmMonitor`), and how many requests failed.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specgate.checks import INFRASTRUCTURE, Check, check
from specgate.costs.energy import GIB
from specgate.engines.base import request_metrics
from specgate.evaluation import Evaluation


@dataclass(frozen=True, slots=True)
class ContextPoint:
    """One context length of a long workload."""

    context_tokens: int
    prompt_ids: tuple[str, ...]
    prompt_tokens: int
    requests: int
    failed: int
    ttft_ms: Mapping[str, float]
    peak_memory_bytes: int | None


def context_points(evaluation: Evaluation, targets: Mapping[str, int] | None = None) -> list[ContextPoint]:
    """The measurement grouped by context length, shortest first."""
    measurement = evaluation.measurement
    traces = [t for runs in measurement.runs.values() for run in runs for t in run.traces]
    measured = {t.prompt_id: t.prompt_tokens for t in traces}
    length = {p.id: (targets or {}).get(p.id, measured.get(p.id, 0)) for p in measurement.prompts}
    peaks = {} if evaluation.energy is None else evaluation.energy.peak_memory_by_prompt
    points = []
    for tokens in sorted(set(length.values())):
        ids = tuple(p for p, n in length.items() if n == tokens)
        mine = [t for t in traces if t.prompt_id in ids]
        ttft: dict[str, float] = {}
        for arm in measurement.arms:
            values = [m.ttft_ms for t in mine if t.arm == arm and (m := request_metrics(t)) is not None]
            if values:
                ttft[arm] = statistics.median(values)
        known = [peaks[p] for p in ids if p in peaks]
        points.append(
            ContextPoint(
                context_tokens=tokens,
                prompt_ids=ids,
                prompt_tokens=max((measured.get(p, 0) for p in ids), default=0),
                requests=len(mine),
                failed=sum(1 for t in mine if not t.ok),
                ttft_ms=ttft,
                peak_memory_bytes=max(known) if known else None,
            )
        )
    return points


def describe_points(points: Sequence[ContextPoint]) -> str:
    """One phrase per context length: "2048 tok (prompt 2041): TTFT ar 3.1 s / spec 3.2 s, peak 1.05 GiB"."""
    phrases = []
    for p in points:
        ttft = " / ".join(f"{arm} {ms / 1000:.2f} s" for arm, ms in p.ttft_ms.items()) or "no TTFT"
        memory = "n/a" if p.peak_memory_bytes is None else f"{p.peak_memory_bytes / GIB:.2f} GiB"
        phrases.append(f"{p.context_tokens} tok (prompt {p.prompt_tokens}): TTFT {ttft}, peak memory {memory}")
    return "; ".join(phrases)


def _details(points: Sequence[ContextPoint]) -> dict[str, object]:
    return {
        "context_tokens": [p.context_tokens for p in points],
        "prompt_tokens": [p.prompt_tokens for p in points],
        "ttft_ms": [dict(p.ttft_ms) for p in points],
        "peak_memory_bytes": [p.peak_memory_bytes for p in points],
    }


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} ms"


def context_coverage(where: tuple[str, str], points: Sequence[ContextPoint], minimum: int = 3) -> Check:
    """At least `minimum` context lengths were measured, every request at every length completed, and the prompts the
    engine saw grow with the declared length (a silent truncation would make them equal)."""
    problems = [f"only {len(points)} context length(s), {minimum} needed"] if len(points) < minimum else []
    problems += [f"{p.context_tokens} tok: {p.failed} of {p.requests} requests failed" for p in points if p.failed]
    problems += [f"{p.context_tokens} tok: no request measured" for p in points if not p.requests]
    problems += [
        f"{b.context_tokens} tok: the engine saw {b.prompt_tokens} prompt tokens, not more than {a.prompt_tokens} "
        f"at {a.context_tokens} tok"
        for a, b in itertools.pairwise(points)
        if b.prompt_tokens <= a.prompt_tokens and b.prompt_tokens > 0  # 0: the engine does not count prompt tokens
    ]
    done = sum(p.requests - p.failed for p in points)
    if problems:
        message = "BLOCK: long-context coverage: " + "; ".join(problems)
    else:
        message = f"{len(points)} context lengths, all {done} requests completed: {describe_points(points)}"
    return check(
        "context_coverage",
        where,
        INFRASTRUCTURE,
        not problems,
        message,
        observed=float(len(points)),
        limit=float(minimum),
        unit="context lengths",
        n=done,
        details=_details(points),
    )


def ttft_growth(where: tuple[str, str], points: Sequence[ContextPoint]) -> Check:
    """Median TTFT at the longest context is above that at the shortest, in every arm. Prefill is at least linear in
    the prompt, so a flat TTFT means the prompts were not processed as claimed (a prefix cache, a truncation). Only
    the extremes are compared: on a shared machine neighbouring lengths can swap places, 2k against 8k do not."""
    if len(points) < 2:
        problems = [f"{len(points)} context length(s): growth needs two or more"]
    else:
        short, long = points[0], points[-1]
        problems = [
            f"arm {arm}: TTFT at {long.context_tokens} tok ({_ms(long.ttft_ms.get(arm))}) not above "
            f"{short.context_tokens} tok ({_ms(short.ttft_ms.get(arm))})"
            for arm in sorted({arm for p in points for arm in p.ttft_ms})
            if not long.ttft_ms.get(arm, 0.0) > short.ttft_ms.get(arm, float("inf"))
        ]
    head = "BLOCK: TTFT does not grow with context length: " + "; ".join(problems) if problems else "TTFT grows"
    return check(
        "ttft_growth",
        where,
        INFRASTRUCTURE,
        not problems,
        f"{head} ({describe_points(points)})",
        unit="ms",
        details=_details(points),
    )
