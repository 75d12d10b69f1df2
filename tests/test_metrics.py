"""Every metric of DESIGN.md on hand-built traces with known answers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from specgate.engines.base import ArmRun, RequestTrace, SpecCounters
from specgate.measure.metrics import (
    FEW_UNITS,
    bootstrap_interval,
    jackknife_ratio_interval,
    measure_speedup,
    predicted_speedup,
    request_metrics,
    summarize_acceptance,
    summarize_arm,
    summarize_values,
)


def trace(
    times: tuple[float, ...],
    sizes: tuple[int, ...],
    *,
    submit: float = 10.0,
    drafted: tuple[int, ...] = (),
    accepted: tuple[int, ...] = (),
    prompt: str = "p",
    error: str | None = None,
) -> RequestTrace:
    n = sum(sizes)
    return RequestTrace(
        prompt,
        "spec",
        0,
        submit,
        times,
        sizes,
        tuple(range(n)),
        "",
        5,
        drafted,
        accepted,
        done_s=times[-1] if times else submit,
        error=error,
    )


def test_latency_metrics_follow_the_pinned_definitions() -> None:
    # submit at 10.0; chunks at 10.5 (1 token), 10.6 (3 tokens), 10.9 (2 tokens): 6 tokens.
    m = request_metrics(trace((10.5, 10.6, 10.9), (1, 3, 2)))
    assert m is not None
    assert m.ttft_ms == pytest.approx(500.0)
    assert m.e2el_ms == pytest.approx(900.0)
    assert m.tpot_ms == pytest.approx((900.0 - 500.0) / 5)
    assert m.decode_tokens_per_s == pytest.approx(1000.0 / 80.0)
    assert m.itl_ms == pytest.approx((100.0, 300.0))
    assert m.effective_tokens_per_s == pytest.approx(6 / 0.9)


def test_single_token_request_has_no_tpot_and_failed_request_no_metrics() -> None:
    single = request_metrics(trace((10.2,), (1,)))
    assert single is not None and single.tpot_ms is None and single.decode_tokens_per_s is None
    assert request_metrics(trace((), (), error="boom")) is None


def test_acceptance_rate_length_and_per_position() -> None:
    # Steps: drafted 3 accepted 3; drafted 3 accepted 1; drafted 3 accepted 0; a step with nothing drafted (ignored).
    t = trace((11.0, 11.1, 11.2, 11.3), (4, 2, 1, 1), drafted=(3, 3, 3, 0), accepted=(3, 1, 0, 0))
    acc = summarize_acceptance([t])
    assert acc is not None
    assert acc.rate == pytest.approx(4 / 9)
    assert acc.drafts == 3
    assert acc.mean_length == pytest.approx(1 + 4 / 3)
    assert acc.per_position == pytest.approx((2 / 3, 1 / 3, 1 / 3))
    assert acc.source == "per-request verification steps"


def test_acceptance_from_engine_counters_when_no_steps() -> None:
    counters = SpecCounters(
        num_drafts=64, num_draft_tokens=256, num_accepted_tokens=159, accepted_per_position=(54, 42, 34, 29)
    )
    acc = summarize_acceptance([trace((11.0,), (1,))], counters)
    assert acc is not None
    assert acc.rate == pytest.approx(159 / 256)
    assert acc.mean_length == pytest.approx(1 + 159 / 64)
    assert acc.per_position == pytest.approx((54 / 64, 42 / 64, 34 / 64, 29 / 64))
    assert acc.source == "engine counters"


def test_plain_decoding_has_no_acceptance() -> None:
    assert summarize_acceptance([trace((11.0, 11.1), (1, 1))]) is None


def test_distribution_percentiles_and_ci_cover_the_mean() -> None:
    values = [float(v) for v in range(1, 101)]
    d = summarize_values(values)
    assert d is not None
    assert d.mean == pytest.approx(50.5)
    assert d.p50 == pytest.approx(50.5)
    assert d.p90 == pytest.approx(90.1)
    assert d.p99 == pytest.approx(99.01)
    assert d.mean_ci[0] < 50.5 < d.mean_ci[1]
    assert d.mean_ci[1] - d.mean_ci[0] < 15
    assert summarize_values([]) is None


def test_arm_summary_counts_failures_and_system_throughput() -> None:
    ok = trace((10.5, 10.6), (1, 3))
    bad = trace((), (), error="timeout")
    summary = summarize_arm("spec", [ArmRun("spec", (ok, bad), wall_s=2.0)])
    assert summary.n_requests == 2
    assert summary.n_failed == 1
    assert summary.output_tokens == 4
    assert summary.system_tokens_per_s == pytest.approx(2.0)


def _unit(arm: str, prompt: str, repetition: int, wall: float) -> ArmRun:
    one = dataclasses.replace(trace((10.5,), (1,), prompt=prompt), arm=arm, repetition=repetition)
    return ArmRun(arm, (one,), wall_s=wall)


def test_speedup_is_ratio_of_paired_wall_times_with_ci() -> None:
    keys = [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    ar = [_unit("ar", p, r, w) for (p, r), w in zip(keys, (4.0, 4.2, 3.8, 4.0), strict=True)]
    spec = [_unit("spec", p, r, w) for (p, r), w in zip(keys, (2.0, 2.1, 1.9, 2.0), strict=True)]
    s = measure_speedup(ar, spec, gamma=3, cost_ratio=0.0, acceptance_rate=0.5)
    assert s is not None
    assert s.value == pytest.approx(2.0)
    assert s.ci == pytest.approx((2.0, 2.0))
    assert s.predicted == pytest.approx((1 - 0.5**4) / 0.5)
    assert measure_speedup(ar, [_unit("spec", "c", 0, 1.0)]) is None


def test_a_speedup_over_a_few_units_has_an_interval_that_covers() -> None:
    """Three paired units (a load-mode arm's rounds): the percentile bootstrap's interval covered the true speedup in
    three quarters of simulated runs (1,504 of 2,000) where it states 95 %; the jackknife-t interval that
    measure_speedup uses below FEW_UNITS covers it in at least 93 %; the bootstrap is kept where the units are many."""
    rng = np.random.default_rng(7)
    true_speedup, trials, units = 2.0, 2000, 3
    covered = {"jackknife": 0, "bootstrap": 0}
    for trial in range(trials):
        plain = 10.0 * np.exp(rng.normal(0.0, 0.15, units))
        spec = plain / true_speedup * np.exp(rng.normal(0.0, 0.15, units))
        low, high = jackknife_ratio_interval(plain, spec)
        covered["jackknife"] += low <= true_speedup <= high
        pairs = np.stack([plain, spec], axis=1)
        low, high = bootstrap_interval(pairs, lambda r: r.sum(axis=1)[:, 0] / r.sum(axis=1)[:, 1], seed=trial)
        covered["bootstrap"] += low <= true_speedup <= high
    assert covered["jackknife"] / trials >= 0.93  # 1,909 of 2,000
    assert covered["bootstrap"] / trials < 0.80
    ar = [_unit("ar", p, 0, w) for p, w in zip("abc", (4.0, 5.0, 3.0), strict=True)]
    spec = [_unit("spec", p, 0, w) for p, w in zip("abc", (2.0, 2.0, 2.0), strict=True)]
    s = measure_speedup(ar, spec)
    assert s is not None and s.value == pytest.approx(2.0)
    assert s.ci == pytest.approx(jackknife_ratio_interval(np.array([4.0, 5.0, 3.0]), np.array([2.0, 2.0, 2.0])))
    assert s.ci[0] < 1.5 and s.ci[1] > 2.6  # t on 2 degrees of freedom: wide, as three units are
    many = [_unit("ar", str(p), 0, 4.0 + p % 3) for p in range(FEW_UNITS)]
    fast = [_unit("spec", str(p), 0, 2.0) for p in range(FEW_UNITS)]
    pairs = np.asarray([[a.wall_s, b.wall_s] for a, b in zip(many, fast, strict=True)])
    bootstrap = bootstrap_interval(pairs, lambda r: r.sum(axis=1)[:, 0] / r.sum(axis=1)[:, 1])
    assert measure_speedup(many, fast).ci == pytest.approx(bootstrap)  # type: ignore[union-attr]


def test_speedup_pairs_the_rounds_both_arms_ran() -> None:
    # The plain arm ran rounds 0-1; the speculative arm went on to rounds 2-5 beside its reference, and its unit
    # ("a", 1) was measured twice (re-measured after interference: the last attempt counts).
    ar = [_unit("ar", p, r, 4.0) for r in range(2) for p in ("a", "b")]
    spec = [_unit("spec", p, r, 2.0) for r in range(6) for p in ("a", "b")]
    spec.insert(2, _unit("spec", "a", 1, 8.0))  # the first attempt, superseded
    s = measure_speedup(ar, spec)
    assert s is not None and s.n_units == 4 and s.value == pytest.approx(2.0)


def test_predicted_speedup_matches_leviathan() -> None:
    # α=0.8, γ=5, c=0.1: (1 - 0.8^6) / ((1 - 0.8)(5·0.1 + 1)) = 0.737856 / 0.3
    assert predicted_speedup(0.8, 5, 0.1) == pytest.approx((1 - 0.8**6) / (0.2 * 1.5))
    assert predicted_speedup(1.0, 4, 0.0) == pytest.approx(5.0)
    assert predicted_speedup(0.0, 4, 0.25) == pytest.approx(0.5)
    assert not math.isnan(predicted_speedup(0.999999, 4, 0.1))
