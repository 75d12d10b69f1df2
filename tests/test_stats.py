"""The statistics the gate decides with: `specgate.stats.decision` (PASS / BLOCK / UNKNOWN, the minimum detectable
effect, the units an UNKNOWN needs) and the estimates of `specgate.comparison` (paired log ratios, the tail's
permutation test, the history's prediction interval, the acceptance drop), against scipy and against their promised
error rates on seeded simulations. The bootstrap interval the reports use is checked against scipy's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from specgate.comparison import P99_TTFT, SPEEDUP, TPOT, acceptance_drop, history, paired, tail
from specgate.measure.samples import ArmSamples, Sample
from specgate.stats.bootstrap import bootstrap_ci
from specgate.stats.decision import decide, mde, units_needed, units_to_pass

THRESHOLD = math.log1p(0.05)


def arm(values: dict[str, float], *, accepted: dict[str, tuple[int, int]] | None = None) -> ArmSamples:
    """An arm whose requests (prompt#0 keys) have the given TPOT, TTFT, E2EL and wall time, and acceptance counts."""
    samples = []
    for key, value in values.items():
        prompt = key.split("#")[0]
        acc, drafted = (accepted or {}).get(key, (0, 0))
        samples.append(Sample(key, prompt, 0, value, value, value, value, 10, drafted, acc, ()))
    return ArmSamples(tuple(samples), tuple(values.values()), tuple(values))


# --- the decision -------------------------------------------------------------------------------------------------


def test_decide_bounds_are_student_t_intervals() -> None:
    d = decide(0.02, 0.012, 9, threshold=THRESHOLD, alpha_block=0.001, alpha_pass=0.01, n=10)
    assert d.upper == pytest.approx(0.02 + scipy_stats.t.ppf(0.99, 9) * 0.012)
    assert d.lower == pytest.approx(0.02 - scipy_stats.t.ppf(0.999, 9) * 0.012)
    assert d.p_value == pytest.approx(scipy_stats.t.sf(0.02 / 0.012, 9))
    assert d.outcome == "UNKNOWN"  # the upper bound (+5.4 %) is above the tolerance and +2 % is not beyond it


@pytest.mark.parametrize(
    ("estimate", "se", "outcome"),
    [(0.0, 0.01, "PASS"), (0.20, 0.02, "BLOCK"), (0.04, 0.02, "UNKNOWN"), (0.10, 0.08, "UNKNOWN")],
    ids=["clearly-within", "clearly-beyond", "near-the-tolerance", "too-noisy"],
)
def test_three_outcomes(estimate: float, se: float, outcome: str) -> None:
    d = decide(estimate, se, 20, threshold=THRESHOLD, alpha_block=0.001, alpha_pass=0.01, n=21)
    assert d.outcome == outcome


def test_significant_but_within_the_tolerance_never_blocks() -> None:
    d = decide(0.03, 0.001, 100, threshold=THRESHOLD, alpha_block=0.001, alpha_pass=0.01, n=101)
    assert d.p_value < 1e-10 and d.outcome == "PASS"


@pytest.mark.parametrize(
    ("sigma", "n"),
    [(0.08, 12), (0.08, 40), (0.01, 16), (0.035, 16), (0.02, 64)],
    ids=["significance-decides", "significance-decides-40", "tolerance-decides", "both", "tolerance-decides-64"],
)
def test_a_change_equal_to_the_mde_ends_regressed_with_the_stated_power(sigma: float, n: int) -> None:
    """The MDE is the true change that ends REGRESSED with probability `power` at a look: simulate whole paired
    comparisons (n units, the t-test's own estimated standard error) at the MDE of the expected se. With a small
    spread the upper bound reaching the tolerance decides, and the bound moves with the estimated se: there the MDE
    lies below the tolerance (a noncentral t at threshold / se overstated it to 5.5 % at σ 1 %, n 16: power 1.0)."""
    alpha_block, alpha_pass = 0.002, 0.01
    se = sigma / math.sqrt(n)
    detectable = decide(0.0, se, n - 1, threshold=THRESHOLD, alpha_block=alpha_block, alpha_pass=alpha_pass, n=n).mde
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(4000):
        d = rng.normal(detectable, sigma, n)
        observed = d.std(ddof=1) / math.sqrt(n)
        decision = decide(
            d.mean(), observed, n - 1, threshold=THRESHOLD, alpha_block=alpha_block, alpha_pass=alpha_pass, n=n
        )
        hits += decision.outcome == "BLOCK"
    assert hits / 4000 == pytest.approx(0.95, abs=0.02)


def test_a_slowdown_that_is_significant_but_not_shown_within_the_tolerance_is_regressed() -> None:
    """+3.5 % measured to ±1 %: significantly slower, and the upper bound (+6 %) does not show it within 5 %."""
    d = decide(0.035, 0.01, 200, threshold=THRESHOLD, alpha_block=0.001, alpha_pass=0.01, n=201)
    assert d.outcome == "BLOCK" and d.lower > 0 and d.upper >= THRESHOLD


def test_where_significance_decides_the_mde_is_scipys_noncentral_t() -> None:
    """A zero threshold leaves only significance to reach: the MDE in units of se is then the noncentrality at which
    a noncentral t exceeds t_block with the stated power (normal approximation within a percent of scipy's)."""
    for df in (5, 10, 30, 200):
        for t_block in (2.0, 3.0, 4.0):
            lam = mde(1.0, df, 0.0, 2.0, t_block)
            assert scipy_stats.nct.sf(t_block, df, lam) == pytest.approx(0.95, abs=0.01), (df, t_block)


def test_units_to_pass_gives_an_unchanged_configuration_its_pass_probability() -> None:
    spread, t_pass = 0.10, scipy_stats.t.ppf(0.995, 200)
    n = units_to_pass(spread, threshold=THRESHOLD, t_pass=t_pass, miss=0.05)
    rng = np.random.default_rng(7)
    passed = 0
    for _ in range(2000):
        d = rng.normal(0.0, spread, n)
        passed += d.mean() + t_pass * d.std(ddof=1) / math.sqrt(n) < THRESHOLD
    assert passed / 2000 == pytest.approx(0.95, abs=0.02)


def test_units_needed_is_the_smallest_n_that_decides() -> None:
    spread, estimate = 0.08, 0.0
    t = scipy_stats.t.ppf(0.99, 1000)
    n = units_needed(estimate, spread, threshold=THRESHOLD, t_pass=t, t_block=t)
    assert estimate + t * spread / math.sqrt(n) < THRESHOLD <= estimate + t * spread / math.sqrt(n - 1)


def test_an_unchanged_configuration_blocks_at_most_alpha() -> None:
    """A/A: 4,000 seeded paired comparisons of 24 units with 10 % per-unit noise block ≤ α_block (+3 σ)."""
    rng = np.random.default_rng(1)
    alpha_block = 0.01
    blocked = 0
    for _ in range(4000):
        d = rng.normal(0.0, 0.10, 24)
        se = d.std(ddof=1) / math.sqrt(24)
        # a tolerance of 0 isolates the significance level (a positive tolerance only lowers it)
        decision = decide(d.mean(), se, 23, threshold=0.0, alpha_block=alpha_block, alpha_pass=0.01, n=24)
        blocked += decision.outcome == "BLOCK"
    assert blocked / 4000 <= alpha_block + 3 * math.sqrt(alpha_block * (1 - alpha_block) / 4000)


# --- the estimates ------------------------------------------------------------------------------------------------


def test_paired_is_the_trimmed_mean_log_ratio_with_yuens_standard_error() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(3.0, 0.5, 16)
    cand = base * rng.lognormal(0.05, 0.04, 16)
    keys = [f"p{i}#0" for i in range(16)]
    est = paired(TPOT, arm(dict(zip(keys, base, strict=True))), arm(dict(zip(keys, cand, strict=True))))
    logs = np.log(cand / base)
    assert est.estimate == pytest.approx(scipy_stats.trim_mean(logs, 0.2))
    assert est.se == pytest.approx(float(scipy_stats.mstats.trimmed_stde(logs, limits=(0.2, 0.2))))
    assert est.df == 16 - 2 * 3 - 1


def test_a_few_spikes_move_neither_the_estimate_nor_the_spread() -> None:
    """Interference stretches 3 of 24 requests of one arm 3×: the mean moves by +14 %, the trimmed mean barely."""
    rng = np.random.default_rng(8)
    base = rng.lognormal(3.0, 0.3, 24)
    cand = base * rng.lognormal(0.0, 0.02, 24)
    cand[[3, 11, 19]] *= 3.0
    keys = [f"p{i}#0" for i in range(24)]
    est = paired(TPOT, arm(dict(zip(keys, base, strict=True))), arm(dict(zip(keys, cand, strict=True))))
    assert np.log(cand / base).mean() > 0.13
    assert abs(est.estimate) < 0.02 and est.se < 0.01


def test_the_exact_work_part_of_tpot_is_split_from_its_noisy_time_part() -> None:
    """A candidate that needs 10 % more steps per token on every prompt (33 steps instead of 30, the same in every
    round) and takes as long per step: the estimate's work part is log(1.1) exactly, and its spread is only the time
    per step's (2 %), not the work's."""
    rng = np.random.default_rng(9)
    before, after = [], []
    for i in range(8):
        for r in range(3):
            key = f"p{i}#{r}"
            for steps, rows in ((30 + 10 * i, before), (33 + 11 * i, after)):
                per_step = 20.0 * rng.lognormal(0, 0.02)
                rows.append(Sample(key, f"p{i}", r, 1.0, per_step * steps / 79, 1.0, 1.0, 80, 0, 0, (), steps=steps))
    est = paired(TPOT, ArmSamples(tuple(before), (), ()), ArmSamples(tuple(after), (), ()))
    assert est.work == pytest.approx(math.log(1.1))
    assert est.estimate == pytest.approx(math.log(1.1), abs=0.02)
    assert est.spread is not None and est.spread < 0.05
    assert "work (steps per token) +10.0 %, exact" in est.how


def test_a_higher_is_better_metric_counts_a_fall_as_worse() -> None:
    keys = [f"p{i}#0" for i in range(8)]
    plain = arm(dict.fromkeys(keys, 100.0))
    fast, slow = arm(dict.fromkeys(keys, 50.0)), arm(dict.fromkeys(keys, 80.0))
    est = paired(SPEEDUP, fast, slow, plain_before=plain, plain_after=plain)
    assert est.estimate == pytest.approx(math.log(2.0 / 1.25))  # 2.0× → 1.25×: worse by log(1.6)


def test_paired_needs_two_common_units() -> None:
    with pytest.raises(ValueError, match="1 prompt#round keys in common"):
        paired(TPOT, arm({"a#0": 1.0, "b#0": 2.0}), arm({"a#0": 1.0, "c#0": 2.0}))


def test_the_tail_permutation_test_reaches_the_level_it_is_given() -> None:
    keys = [f"p{i}#0" for i in range(200)]
    rng = np.random.default_rng(3)
    base = rng.lognormal(5.0, 0.2, 200)
    worse = base.copy()
    worse[np.argsort(base)[-8:]] *= 1.5  # only the slowest 4 % of the requests get slower
    before, after = arm(dict(zip(keys, base, strict=True))), arm(dict(zip(keys, worse, strict=True)))
    est = tail(P99_TTFT, before, after, resamples=4000, seed=0)
    assert est.p_value is not None and est.p_value >= 1 / 4001  # the resolution is 1 / (resamples + 1)
    assert est.p_value < 0.01 and est.estimate == pytest.approx(math.log(1.5), rel=0.2)
    same = tail(P99_TTFT, before, before, resamples=999, seed=0)
    assert same.estimate == 0.0 and same.p_value == 1.0


def test_the_tail_test_is_exact_under_no_change() -> None:
    """A/A percentiles: the permutation p-value is uniform, so P(p ≤ 0.05) ≈ 0.05 (not the bootstrap's excess)."""
    keys = [f"p{i}#0" for i in range(40)]
    hits = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        level = rng.lognormal(5.0, 0.3, 40)
        a, b = level * rng.lognormal(0, 0.1, 40), level * rng.lognormal(0, 0.1, 40)
        est = tail(P99_TTFT, arm(dict(zip(keys, a, strict=True))), arm(dict(zip(keys, b, strict=True))), resamples=399)
        hits += est.p_value is not None and est.p_value <= 0.05
    assert hits / 300 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)


def test_the_tail_test_counts_the_permutations_that_give_exactly_the_observed_change() -> None:
    """A P99 of 64 units is set by the top two: every permutation that leaves the top units unswapped gives exactly
    the observed change (an atom of the permutation distribution). Computed two ways, the observed value and the
    atom differed in the last bit, no permutation counted as extreme, and an unchanged configuration read p = 1/24001
    (REGRESSED on a real quiet run). Here the top unit alone differs: p is the chance it stays unswapped, about 1/2."""
    keys = [f"p{i}#0" for i in range(64)]
    for seed in range(40):
        rng = np.random.default_rng(seed)
        before = rng.lognormal(6.5, 0.05, 64)
        after = before.copy()
        top = int(np.argmax(before))
        after[top] *= 1.0 + rng.uniform(0.01, 0.08)
        pair = arm(dict(zip(keys, before, strict=True))), arm(dict(zip(keys, after, strict=True)))
        est = tail(P99_TTFT, *pair, resamples=2000, seed=seed)
        assert est.estimate > 0
        assert est.p_value is not None and est.p_value > 0.3, seed


def test_history_uses_the_between_run_spread_as_a_prediction_interval() -> None:
    keys = [f"p{i}#0" for i in range(8)]
    levels = [1.00, 1.04, 0.97, 1.02]
    runs = [(arm(dict.fromkeys(keys, 100.0 * x)), None) for x in levels]
    est = history(TPOT, runs, (arm(dict.fromkeys(keys, 110.0)), None))
    logs = np.log(levels)
    assert est.df == 3 and est.n == 4
    assert est.estimate == pytest.approx(math.log(1.10) - logs.mean())
    assert est.se == pytest.approx(logs.std(ddof=1) * math.sqrt(1 + 1 / 4))
    with pytest.raises(ValueError, match="at least 2 stored runs"):
        history(TPOT, runs[:1], runs[0])


def test_acceptance_drop_is_the_relative_drop_of_the_pooled_rate() -> None:
    keys = [f"p{i}#0" for i in range(4)]
    before = arm(dict.fromkeys(keys, 1.0), accepted={k: (30, 40) for k in keys})
    after = arm(dict.fromkeys(keys, 1.0), accepted={k: (27, 40) for k in keys})
    est = acceptance_drop(before, after)
    assert est.estimate == pytest.approx(1 - 0.675 / 0.75) and est.se == pytest.approx(0.0)
    nothing = arm(dict.fromkeys(keys, 1.0), accepted={k: (0, 40) for k in keys})
    with pytest.raises(ValueError, match="accepted no draft tokens"):
        acceptance_drop(nothing, after)


# --- the bootstrap of the reports ---------------------------------------------------------------------------------


def test_bootstrap_ci_matches_scipy_percentile_bootstrap() -> None:
    samples = np.random.default_rng(4).lognormal(6.0, 0.4, 80)
    ours = bootstrap_ci(samples, lambda x: float(np.median(x)), n_boot=4000, seed=5)
    theirs = scipy_stats.bootstrap(
        (samples,), np.median, confidence_level=0.95, n_resamples=4000, method="percentile", rng=6
    ).confidence_interval
    width = theirs.high - theirs.low
    assert ours.low == pytest.approx(theirs.low, abs=0.1 * width)
    assert ours.high == pytest.approx(theirs.high, abs=0.1 * width)
    assert bootstrap_ci(samples, lambda x: float(np.median(x)), n_boot=4000, seed=5) == ours  # seeded


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"confidence": 1.0}, "confidence=1.0"), ({"n_boot": 0}, "n_boot=0"), ({"samples": [1.0]}, "at least 2")],
)
def test_bootstrap_bad_input_is_a_clear_value_error(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"samples": [1.0, 2.0, 3.0], "statistic": lambda x: float(np.mean(x)), **kwargs}
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(**args)  # type: ignore[arg-type]
