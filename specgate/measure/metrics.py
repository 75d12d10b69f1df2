"""Metrics from request traces, exactly as docs/concepts.md ("Metrics") defines them.

Per request, with t0 the submit time: TTFT = first token − t0; E2EL = last token − t0; TPOT = (E2EL − TTFT) /
(output tokens − 1); decode rate = 1 / TPOT; ITL = gaps between streamed chunks; effective throughput = output
tokens / E2EL. Per arm: system throughput = all output tokens / wall time. Acceptance rate α = accepted / drafted;
mean acceptance length τ = 1 + accepted / drafts; per-position acceptance[i] = drafts with ≥ i+1 accepted / drafts.
Speedup S = wall time of the reference arm / wall time of the speculative arm over the same prompts.
Predicted speedup (Leviathan et al. 2023) = (1 − α^(γ+1)) / ((1 − α)(γc + 1)).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from specgate.engines.base import ArmRun, RequestTrace, SpecCounters, request_metrics

CONFIDENCE = 0.95
FEW_UNITS = 10  # below this many paired units a speedup's interval is the jackknife's, not the bootstrap's
# consecutive gaps of one request are not independent draws, and the gate judges latency on per-request figures
ITL_NO_CI = "ITL gaps are not independent draws: no interval (latency is judged per request)"


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of a sample: mean with its 95 % bootstrap CI, and percentiles (p99 with its CI)."""

    n: int
    mean: float
    mean_ci: tuple[float, float]
    p50: float
    p90: float
    p99: float
    p99_ci: tuple[float, float]
    minimum: float
    maximum: float
    no_interval: str | None = None  # why `mean_ci` and `p99_ci` are missing (written as null)


@dataclass(frozen=True, slots=True)
class Acceptance:
    """How much of the draft the target accepted, over a whole arm."""

    drafted_tokens: int
    accepted_tokens: int
    drafts: int
    rate: float | None
    mean_length: float | None
    per_position: tuple[float, ...]
    source: str


@dataclass(frozen=True, slots=True)
class ArmSummary:
    """Everything measured about one arm on one workload."""

    arm: str
    n_requests: int
    n_failed: int
    output_tokens: int
    wall_s: float
    ttft_ms: Distribution | None
    tpot_ms: Distribution | None
    itl_ms: Distribution | None
    e2el_ms: Distribution | None
    decode_tokens_per_s: Distribution | None
    effective_tokens_per_s: Distribution | None
    system_tokens_per_s: float
    acceptance: Acceptance | None
    errors: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Speedup:
    """Measured speedup of `arm` over `reference`, with a paired bootstrap CI, next to the predicted one."""

    reference: str
    arm: str
    value: float
    ci: tuple[float, float]
    n_units: int
    predicted: float | None
    gamma: int | None
    cost_ratio: float | None
    no_interval: str | None = None  # why `ci` is missing (written as null)


def bootstrap_interval(
    values: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], n_boot: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI; `statistic` maps an (n_boot, n) array of resamples to n_boot values."""
    n = values.shape[0]
    if n < 2:
        value = float(statistic(values[np.newaxis, ...])[0]) if n else float("nan")
        return (value, value)
    rng = np.random.default_rng(seed)
    resamples = values[rng.integers(0, n, size=(n_boot, n))]
    stats = statistic(resamples)
    tail = 100 * (1 - CONFIDENCE) / 2
    return (float(np.percentile(stats, tail)), float(np.percentile(stats, 100 - tail)))


def jackknife_ratio_interval(numerator: np.ndarray, denominator: np.ndarray) -> tuple[float, float]:
    """The CONFIDENCE interval of Σ numerator / Σ denominator over a few paired units: the jackknife standard error
    of its logarithm (leave one unit out) with Student's t on n − 1 degrees of freedom. Over so few units the
    percentile bootstrap is too narrow (three units have ten distinct resamples; it covered about three quarters of
    the time where 95 % was stated, tests/test_metrics.py)."""
    from scipy.special import stdtrit  # not scipy.stats: importing it probes torch, which a served-only install lacks

    n = len(numerator)
    centre = math.log(float(numerator.sum()) / float(denominator.sum()))
    left_out = np.log((numerator.sum() - numerator) / (denominator.sum() - denominator))
    se = math.sqrt((n - 1) / n * float(np.sum((left_out - left_out.mean()) ** 2)))
    half = float(stdtrit(n - 1, 1 - (1 - CONFIDENCE) / 2)) * se
    return (math.exp(centre - half), math.exp(centre + half))


def summarize_values(
    values: Sequence[float], seed: int = 0, with_ci: bool = True, no_interval: str = "not computed"
) -> Distribution | None:
    """Mean, percentiles and bootstrap CIs of a sample (unless `with_ci` is false: NaN, with the reason
    `no_interval`); None for an empty one."""
    if not values:
        return None
    data = np.asarray(values, dtype=float)
    p50, p90, p99 = (float(v) for v in np.percentile(data, [50, 90, 99]))
    no_ci = (float("nan"), float("nan"))
    return Distribution(
        n=int(data.size),
        mean=float(data.mean()),
        mean_ci=bootstrap_interval(data, lambda r: r.mean(axis=1), seed=seed) if with_ci else no_ci,
        p50=p50,
        p90=p90,
        p99=p99,
        p99_ci=bootstrap_interval(data, lambda r: np.percentile(r, 99, axis=1), seed=seed) if with_ci else no_ci,
        minimum=float(data.min()),
        maximum=float(data.max()),
        no_interval=None if with_ci else no_interval,
    )


def summarize_acceptance(traces: Sequence[RequestTrace], counters: SpecCounters | None = None) -> Acceptance | None:
    """Acceptance from per-step counts when the engine gives them, else from the engine's run counters."""
    steps = [(d, a) for t in traces for d, a in zip(t.drafted, t.accepted, strict=True) if d > 0]
    if steps:
        drafted = sum(d for d, _ in steps)
        accepted = sum(a for _, a in steps)
        longest = max(d for d, _ in steps)
        per_position = tuple(sum(1 for _, a in steps if a >= i + 1) / len(steps) for i in range(longest))
        return _acceptance(drafted, accepted, len(steps), per_position, "per-request verification steps")
    if counters is not None and counters.num_drafts > 0:
        per_position = tuple(c / counters.num_drafts for c in counters.accepted_per_position)
        return _acceptance(
            counters.num_draft_tokens,
            counters.num_accepted_tokens,
            counters.num_drafts,
            per_position,
            "engine counters",
        )
    if any(t.drafted for t in traces):
        return _acceptance(0, 0, 0, (), "per-request verification steps")
    return None


def _acceptance(drafted: int, accepted: int, drafts: int, per_position: tuple[float, ...], source: str) -> Acceptance:
    return Acceptance(
        drafted_tokens=drafted,
        accepted_tokens=accepted,
        drafts=drafts,
        rate=accepted / drafted if drafted else None,
        mean_length=1 + accepted / drafts if drafts else None,
        per_position=per_position,
        source=source,
    )


def summarize_arm(arm: str, runs: Sequence[ArmRun], seed: int = 0) -> ArmSummary:
    """Summary of all measured (non-warm-up) runs of one arm."""
    traces = [t for run in runs for t in run.traces]
    per_request = [m for m in (request_metrics(t) for t in traces) if m is not None]
    tokens = sum(m.output_tokens for m in per_request)
    wall_s = sum(run.wall_s for run in runs)
    counters = _sum_counters([run.counters for run in runs])
    return ArmSummary(
        arm=arm,
        n_requests=len(traces),
        n_failed=len(traces) - len(per_request),
        output_tokens=tokens,
        wall_s=wall_s,
        ttft_ms=summarize_values([m.ttft_ms for m in per_request], seed),
        tpot_ms=summarize_values([m.tpot_ms for m in per_request if m.tpot_ms is not None], seed),
        itl_ms=summarize_values([x for m in per_request for x in m.itl_ms], seed, with_ci=False, no_interval=ITL_NO_CI),
        e2el_ms=summarize_values([m.e2el_ms for m in per_request], seed),
        decode_tokens_per_s=summarize_values(
            [r for m in per_request if (r := m.decode_tokens_per_s) is not None], seed
        ),
        effective_tokens_per_s=summarize_values([m.effective_tokens_per_s for m in per_request], seed),
        system_tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        acceptance=summarize_acceptance(traces, counters),
        errors=dict(Counter(t.error or "no output" for t in traces if not t.ok)),
    )


def _sum_counters(counters: Sequence[SpecCounters | None]) -> SpecCounters | None:
    present = [c for c in counters if c is not None]
    if not present:
        return None
    width = max(len(c.accepted_per_position) for c in present)
    per_pos = [
        sum(c.accepted_per_position[i] for c in present if i < len(c.accepted_per_position)) for i in range(width)
    ]
    return SpecCounters(
        num_drafts=sum(c.num_drafts for c in present),
        num_draft_tokens=sum(c.num_draft_tokens for c in present),
        num_accepted_tokens=sum(c.num_accepted_tokens for c in present),
        accepted_per_position=tuple(per_pos),
    )


def predicted_speedup(acceptance_rate: float, gamma: int, cost_ratio: float) -> float:
    """Expected speedup of speculative decoding (Leviathan et al. 2023, eq. for walltime improvement)."""
    a = min(max(acceptance_rate, 0.0), 1.0)
    expected_tokens = gamma + 1.0 if a >= 1.0 else (1 - a ** (gamma + 1)) / (1 - a)
    return expected_tokens / (gamma * cost_ratio + 1)


def _run_key(run: ArmRun) -> tuple[tuple[str, int], ...]:
    """The requests a run served, as (prompt, repetition) pairs in order."""
    return tuple((t.prompt_id, t.repetition) for t in run.traces)


def measure_speedup(
    reference: Sequence[ArmRun],
    candidate: Sequence[ArmRun],
    *,
    gamma: int | None = None,
    cost_ratio: float | None = None,
    acceptance_rate: float | None = None,
    seed: int = 0,
) -> Speedup | None:
    """S = Σ wall(reference) / Σ wall(candidate) over paired runs: the runs of the two arms that served the same
    requests (prompts and repetitions), wherever they stand in the measurement order. Rounds that only one arm ran
    (a comparison beside the reference that needed more rounds than the plain arm) are left out; None when no run
    pairs."""
    by_key = {_run_key(r): r for r in reference}  # a unit measured again after interference: its last attempt
    last = {_run_key(c): c for c in candidate}
    pairs_of = [(by_key[k], c) for k, c in last.items() if k in by_key]
    if not pairs_of:
        return None
    ref = np.asarray([r.wall_s for r, _ in pairs_of])
    cand = np.asarray([c.wall_s for _, c in pairs_of])
    if cand.sum() <= 0:
        return None
    pairs = np.stack([ref, cand], axis=1)

    def ratio(resamples: np.ndarray) -> np.ndarray:
        sums = resamples.sum(axis=1)
        return np.asarray(sums[:, 0] / sums[:, 1])

    if len(pairs) < 2:
        ci = (float("nan"), float("nan"))
    elif len(pairs) < FEW_UNITS:
        ci = jackknife_ratio_interval(ref, cand)
    else:
        ci = bootstrap_interval(pairs, ratio, seed=seed)
    predicted = None
    if gamma is not None and cost_ratio is not None and acceptance_rate is not None:
        predicted = predicted_speedup(acceptance_rate, gamma, cost_ratio)
    return Speedup(
        reference=pairs_of[0][0].arm,
        arm=pairs_of[0][1].arm,
        value=float(ref.sum() / cand.sum()),
        ci=ci,
        n_units=len(pairs),
        predicted=predicted,
        gamma=gamma,
        cost_ratio=cost_ratio,
        no_interval=None if len(pairs) > 1 else "1 paired engine call: no spread to resample",
    )
