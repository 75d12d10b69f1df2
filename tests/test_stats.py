"""Tests of specgate.stats: known answers against scipy, Holm, degenerate input, and the gate's error rates.

The simulated measurements follow what a gate sees: every prompt has its own level (prompt lengths differ, so
latencies spread several-fold between prompts) and each request scatters around its prompt's level with a CV of
5-8 %. Baseline and current runs use the same prompts, which is what pairing by key exploits.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats as scipy_stats

from specgate.stats.bootstrap import bootstrap_ci
from specgate.stats.tests import (
    Comparison,
    compare_percentile,
    compare_samples,
    holm,
    holm_adjust,
)

FloatArray = npt.NDArray[np.float64]
LATENCY_CV = 0.08  # per-request scatter of a latency around its prompt's level
PROMPT_SPREAD = 0.5  # lognormal sigma of prompt levels: the slowest prompts take ~3x the median


def _keys(n_prompts: int, repetitions: int = 1) -> list[str]:
    return [f"prompt-{i}" for i in range(n_prompts) for _ in range(repetitions)]


def _latency_pair(
    rng: np.random.Generator, n_prompts: int, slowdown: float = 1.0, repetitions: int = 1
) -> tuple[FloatArray, FloatArray]:
    """Baseline and current latencies (ms) of the same prompts; ``slowdown`` multiplies the current side."""
    level = np.repeat(700.0 * rng.lognormal(0.0, PROMPT_SPREAD, n_prompts), repetitions)
    noise = rng.lognormal(0.0, LATENCY_CV, (2, len(level)))
    return level * noise[0], level * noise[1] * slowdown


def _acceptance_pair(
    rng: np.random.Generator, n_prompts: int, factor: float = 1.0, cv: float = 0.05
) -> tuple[FloatArray, FloatArray]:
    """Per-request acceptance rates: prompt levels ~ Beta(12, 8) (mean 0.6, sd 0.11), request scatter CV ``cv``."""
    level = rng.beta(12.0, 8.0, n_prompts)
    noise = 1.0 + cv * rng.standard_normal((2, n_prompts))
    return np.clip(level * noise[0], 0.0, 1.0), np.clip(level * factor * noise[1], 0.0, 1.0)


# --- known answers --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("higher_is_better", [False, True])
def test_unpaired_p_values_equal_scipy(higher_is_better: bool) -> None:
    rng = np.random.default_rng(1)
    baseline, current = rng.lognormal(6.5, 0.3, 30), rng.lognormal(6.6, 0.4, 25)
    alternative = "less" if higher_is_better else "greater"
    result = compare_samples("ttft_ms", baseline, current, higher_is_better=higher_is_better, n_boot=0)
    welch = scipy_stats.ttest_ind(current, baseline, equal_var=False, alternative=alternative)
    mwu = scipy_stats.mannwhitneyu(current, baseline, alternative=alternative)
    assert result.p_welch == pytest.approx(welch.pvalue, rel=1e-9)
    assert result.p_mwu == pytest.approx(mwu.pvalue, rel=1e-9)
    assert result.p_value == max(result.p_welch, result.p_mwu)
    assert not result.paired and result.p_paired is None
    assert result.decided_by == "Welch t-test + Mann-Whitney U"
    pooled_sd = math.sqrt((29 * np.var(baseline, ddof=1) + 24 * np.var(current, ddof=1)) / 53)
    assert result.effect_size == pytest.approx((np.mean(current) - np.mean(baseline)) / pooled_sd)
    assert result.relative_change == pytest.approx(np.mean(current) / np.mean(baseline) - 1.0)


@pytest.mark.parametrize("higher_is_better", [False, True])
def test_paired_p_values_equal_scipy_on_per_key_means(higher_is_better: bool) -> None:
    rng = np.random.default_rng(2)
    baseline, current = _latency_pair(rng, 12, slowdown=1.03, repetitions=3)
    keys = _keys(12, repetitions=3)
    order = rng.permutation(len(current))  # the current run may visit the prompts in another order
    result = compare_samples(
        "e2el_ms",
        baseline,
        current[order],
        higher_is_better=higher_is_better,
        baseline_keys=keys,
        current_keys=[keys[i] for i in order],
        n_boot=0,
    )
    base_means, cur_means = baseline.reshape(12, 3).mean(axis=1), current.reshape(12, 3).mean(axis=1)
    alternative = "less" if higher_is_better else "greater"
    wilcoxon = scipy_stats.wilcoxon(cur_means - base_means, alternative=alternative)
    paired_t = scipy_stats.ttest_rel(cur_means, base_means, alternative=alternative)
    assert result.paired and result.n_keys == 12
    assert (result.n_baseline, result.n_current) == (36, 36)
    assert result.p_paired == pytest.approx(wilcoxon.pvalue, rel=1e-9)
    assert result.p_paired_t == pytest.approx(paired_t.pvalue, rel=1e-9)
    assert result.p_value == max(result.p_paired, result.p_paired_t)
    assert result.current_value == pytest.approx(cur_means.mean())
    assert "Wilcoxon signed-rank" in result.decided_by and "12 keys" in result.decided_by
    assert result.p_welch == pytest.approx(
        scipy_stats.ttest_ind(current, baseline, equal_var=False, alternative=alternative).pvalue, rel=1e-9
    )


def test_rank_biserial_is_one_when_every_key_got_slower() -> None:
    baseline = np.arange(1.0, 9.0)
    result = compare_samples(
        "tpot_ms",
        baseline,
        baseline + np.arange(1.0, 9.0),
        higher_is_better=False,
        baseline_keys=_keys(8),
        current_keys=_keys(8),
        n_boot=0,
    )
    assert result.effect_size == 1.0
    assert result.p_paired == pytest.approx(2.0**-8)  # the exact one-sided Wilcoxon floor for 8 keys


def test_too_few_common_keys_fall_back_to_unpaired_and_say_so() -> None:
    rng = np.random.default_rng(3)
    baseline, current = _latency_pair(rng, 5, repetitions=4)
    result = compare_samples(
        "ttft_ms", baseline, current, higher_is_better=False, baseline_keys=_keys(5, 4), current_keys=_keys(5, 4)
    )
    assert not result.paired
    assert result.decided_by == "Welch t-test + Mann-Whitney U (unpaired: 5 common keys < 6)"


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


def test_bootstrap_cis_cover_the_true_mean_and_change() -> None:
    """Over 400 seeded data sets, the 95 % CIs of the mean and of the relative change cover the truth ~95 %."""
    covered_mean = covered_change = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        baseline, current = rng.normal(100.0, 10.0, 40), rng.normal(110.0, 10.0, 40)
        result = compare_samples("tpot_ms", baseline, current, higher_is_better=False, n_boot=1000, seed=seed)
        covered_mean += result.baseline_ci.low <= 100.0 <= result.baseline_ci.high
        covered_change += result.change_ci.low <= 0.10 <= result.change_ci.high
    assert 0.92 <= covered_mean / 400 <= 0.98
    assert 0.92 <= covered_change / 400 <= 0.98


# --- degenerate input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("value", [0.1, 741.25, 0.0])
def test_identical_constant_samples_give_p_one_without_warnings(paired: bool, value: float) -> None:
    samples = [value] * 8
    keys = _keys(8) if paired else None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = compare_samples(
            "acceptance_rate", samples, samples, higher_is_better=True, baseline_keys=keys, current_keys=keys
        )
        percentile = compare_percentile("ttft_ms", samples, samples)
    assert result.p_welch == result.p_mwu == result.p_value == 1.0
    assert result.p_paired == (1.0 if paired else None)
    assert not result.significant and not result.regressed
    assert result.relative_change == 0.0 and result.effect_size == 0.0
    assert percentile.p_value == 1.0 and not percentile.significant


def test_nearly_identical_samples_raise_no_precision_warning() -> None:
    rng = np.random.default_rng(7)
    baseline, current = 1e6 + 1e-9 * rng.standard_normal(10), 1e6 + 1e-9 * rng.standard_normal(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = compare_samples("e2el_ms", baseline, current, higher_is_better=False)
    assert 0.0 <= result.p_value <= 1.0 and not result.regressed


def test_a_constant_shift_is_certain() -> None:
    result = compare_samples("ttft_ms", [100.0] * 5, [120.0] * 5, higher_is_better=False, n_boot=0)
    assert result.p_welch == 0.0 and result.relative_change == pytest.approx(0.2)
    assert result.significant and result.regressed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"baseline": [1.0], "current": [1.0, 2.0]}, "the baseline has 1 sample"),
        ({"baseline": [1.0, 2.0], "current": []}, "the current has 0 sample"),
        ({"baseline": [1.0, math.nan], "current": [1.0, 2.0]}, "non-finite"),
        ({"baseline": [1.0, 2.0], "current": [1.0, 2.0], "baseline_keys": ["a", "b"]}, "give both"),
        ({"baseline": [1.0, 2.0], "current": [1.0, 2.0], "baseline_keys": ["a"], "current_keys": ["a"]}, "one key"),
        ({"baseline": [1.0, 2.0], "current": [1.0, 2.0], "alpha": 0.0}, "alpha=0.0"),
        ({"baseline": [1.0, 2.0], "current": [1.0, 2.0], "tolerance": -0.1}, "tolerance=-0.1"),
        ({"baseline": [1.0, 2.0], "current": [1.0, 2.0], "n_boot": -1}, "n_boot=-1"),
    ],
)
def test_bad_input_raises_a_clear_value_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        compare_samples("ttft_ms", higher_is_better=False, **kwargs)  # type: ignore[arg-type]


def test_percentile_comparison_needs_enough_resamples_to_reach_alpha() -> None:
    with pytest.raises(ValueError, match=r"n_boot=50 cannot reach alpha=0.01.*n_boot >= 100"):
        compare_percentile("ttft_ms", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], n_boot=50)


# --- percentiles ----------------------------------------------------------------------------------------------------


def test_percentile_comparison_detects_a_tail_regression() -> None:
    rng = np.random.default_rng(8)
    baseline = rng.lognormal(6.5, 0.3, 400)
    current = np.where(rng.random(400) < 0.1, 3.0, 1.0) * rng.lognormal(6.5, 0.3, 400)  # 10 % of requests stall
    result = compare_percentile("ttft_ms", baseline, current, q=99.0)
    assert result.current_value == pytest.approx(np.percentile(current, 99.0))
    assert result.relative_change > 0.3 and result.change_ci.low > 0.0
    assert result.significant and result.regressed
    assert result.decided_by == "bootstrap test of the P99 difference (n_boot=2000)"


def test_percentile_comparison_a_a_false_significance_rate() -> None:
    """200 A/A comparisons of P90 (n=200 per side) at alpha 0.05: the bootstrap test is not anti-conservative."""
    significant = sum(
        compare_percentile(
            "ttft_ms",
            *np.random.default_rng(seed).lognormal(6.5, 0.4, (2, 200)),
            q=90.0,
            alpha=0.05,
            n_boot=400,
            seed=seed,
        ).significant
        for seed in range(200)
    )
    print(f"P90 bootstrap A/A false-significance rate at alpha 0.05: {significant / 200:.3f}")
    assert significant / 200 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 200)


# --- Holm -----------------------------------------------------------------------------------------------------------


def test_holm_textbook_examples() -> None:
    # sorted p 0.01 <= 0.05/4 rejects; 0.02 > 0.05/3 stops: Holm rejects one where Hochberg would reject all four
    assert holm([0.01, 0.02, 0.03, 0.04], 0.05) == [True, False, False, False]
    # 0.005 <= 0.01 and 0.011 <= 0.0125 reject; 0.02 > 0.0167 stops (Bonferroni would reject only 0.005)
    assert holm([0.011, 0.02, 0.03, 0.04, 0.005], 0.05) == [True, False, False, False, True]
    # step-down: once a test fails, later ones are kept even below their own level (0.049 <= 0.05)
    assert holm([0.001, 0.04, 0.045, 0.049], 0.05) == [True, False, False, False]
    assert holm([0.001, 0.002, 0.003], 0.01) == [True, True, True]
    assert holm([], 0.01) == []
    with pytest.raises(ValueError, match="p-values must lie in"):
        holm([0.5, math.nan], 0.01)


def test_holm_adjust_redecides_a_gate_run() -> None:
    rng = np.random.default_rng(9)
    slow = compare_samples(
        "ttft_ms",
        *_latency_pair(rng, 32, 1.3),
        higher_is_better=False,
        n_boot=0,
        baseline_keys=_keys(32),
        current_keys=_keys(32),
    )
    same = [compare_samples(f"m{i}_ms", *_latency_pair(rng, 32), higher_is_better=False, n_boot=0) for i in range(7)]
    adjusted = holm_adjust([*same, slow], alpha=0.01)
    assert [c.family_size for c in adjusted] == [8] * 8
    assert adjusted[-1].alpha == pytest.approx(0.01 / 8)  # the smallest p is held to alpha / m
    assert adjusted[-1].regressed and not any(c.regressed for c in adjusted[:-1])
    assert holm([c.p_value for c in [*same, slow]], 0.01) == [c.significant for c in adjusted]
    assert "α=0.00125 (Holm, 8 tests)" in adjusted[-1].describe()


# --- describe -------------------------------------------------------------------------------------------------------


def test_describe_is_one_line_of_evidence() -> None:
    rng = np.random.default_rng(10)
    baseline, current = rng.normal(741.0, 60.0, 32), rng.normal(815.0, 60.0, 32)
    line = compare_samples("ttft_ms", baseline, current, higher_is_better=False).describe()
    pattern = (
        r"ttft_ms: [\d,.]+ → [\d,.]+ ms \(\+\d+\.\d %, 95% CI \+\d+\.\d…\+\d+\.\d %\), Welch p=\S+, MWU p=\S+, "
        r"d=\d\.\d\d, n=32/32, α=0.01 — REGRESSED \(tolerance 5 %\)"
    )
    assert re.fullmatch(pattern, line), line
    paired = compare_samples(
        "acceptance_rate",
        *_acceptance_pair(rng, 16),
        higher_is_better=True,
        baseline_keys=_keys(16),
        current_keys=_keys(16),
        n_boot=0,
    ).describe()
    assert "paired t p=" in paired and "Wilcoxon p=" in paired and "16 keys" in paired
    assert "CI" not in paired and "no significant regression" in paired


def test_significant_but_within_tolerance_is_not_a_regression() -> None:
    rng = np.random.default_rng(11)
    baseline, current = _latency_pair(rng, 400, slowdown=1.02)  # a real but small 2 % slowdown, many prompts
    result = compare_samples(
        "tpot_ms", baseline, current, higher_is_better=False, baseline_keys=_keys(400), current_keys=_keys(400)
    )
    assert result.significant and not result.regressed
    assert result.describe().endswith("worse, within tolerance 5 %")


# --- the gate's error rates -----------------------------------------------------------------------------------------


def _gate_run(rng: np.random.Generator, n_prompts: int, ttft_slowdown: float, tolerance: float) -> list[Comparison]:
    """One gate decision: 8 metric comparisons of the same configuration (but ``ttft_slowdown``), not yet Holm'd."""
    paired = {"baseline_keys": _keys(n_prompts), "current_keys": _keys(n_prompts), "n_boot": 0, "tolerance": tolerance}
    half = n_prompts // 2  # e2el is measured twice per prompt on half as many prompts
    twice = {**paired, "baseline_keys": _keys(half, 2), "current_keys": _keys(half, 2)}
    decode = 1000.0 / _latency_pair(rng, n_prompts)[0], 1000.0 / _latency_pair(rng, n_prompts)[0]
    return [
        compare_samples("ttft_ms", *_latency_pair(rng, n_prompts, ttft_slowdown), higher_is_better=False, **paired),
        compare_samples("tpot_ms", *_latency_pair(rng, n_prompts), higher_is_better=False, **paired),
        compare_samples("itl_ms", *_latency_pair(rng, n_prompts), higher_is_better=False, **paired),
        compare_samples("e2el_ms", *_latency_pair(rng, half, repetitions=2), higher_is_better=False, **twice),
        compare_samples("acceptance_rate", *_acceptance_pair(rng, n_prompts), higher_is_better=True, **paired),
        compare_samples("decode_tokens_per_s", *decode, higher_is_better=True, n_boot=0, tolerance=tolerance),
        compare_samples(
            "queue_wait_ms",
            *rng.lognormal(3.0, 0.8, (2, n_prompts)),
            higher_is_better=False,
            n_boot=0,
            tolerance=tolerance,
        ),
        compare_samples(
            "system_tokens_per_s",
            *rng.normal(5000.0, 250.0, (2, n_prompts)),
            higher_is_better=True,
            n_boot=0,
            tolerance=tolerance,
        ),
    ]


def test_a_a_gate_runs_do_not_block() -> None:
    """1,000 seeded A/A gate runs of 8 Holm-corrected comparisons, 24-32 prompts per side, block <= 1 %."""
    blocked = blocked_without_tolerance = single_rejections = 0
    for seed in range(1000):
        rng = np.random.default_rng(seed)
        n_prompts = int(rng.integers(24, 33))
        run = _gate_run(rng, n_prompts, ttft_slowdown=1.0, tolerance=0.05)
        blocked += any(c.regressed for c in holm_adjust(run, alpha=0.01))
        # the statistics alone, with no practical tolerance: Holm promises a family-wise error <= alpha
        blocked_without_tolerance += any(holm([c.p_value for c in run], 0.01))
        single_rejections += sum(c.p_value <= 0.01 for c in run)
    print(
        f"A/A: blocked {blocked / 1000:.3f}; family-wise significant without tolerance "
        f"{blocked_without_tolerance / 1000:.3f}; single comparisons significant {single_rejections / 8000:.4f}"
    )
    assert blocked / 1000 <= 0.01
    assert blocked_without_tolerance / 1000 <= 0.01 + 3 * math.sqrt(0.01 * 0.99 / 1000)
    assert single_rejections / 8000 <= 0.01 + 3 * math.sqrt(0.01 * 0.99 / 8000)


def _detection_rate(trial: Callable[[np.random.Generator], Comparison], trials: int = 200) -> float:
    return sum(trial(np.random.default_rng(seed)).regressed for seed in range(trials)) / trials


def test_a_10_percent_latency_slowdown_is_detected() -> None:
    """32 prompts per side, prompt levels spread ~3x, request CV 8 %: pairing by prompt must catch +10 %."""

    def paired(rng: np.random.Generator) -> Comparison:
        return compare_samples(
            "ttft_ms",
            *_latency_pair(rng, 32, 1.10),
            higher_is_better=False,
            baseline_keys=_keys(32),
            current_keys=_keys(32),
            n_boot=0,
        )

    def unpaired(rng: np.random.Generator) -> Comparison:
        return compare_samples("ttft_ms", *_latency_pair(rng, 32, 1.10), higher_is_better=False, n_boot=0)

    paired_rate, unpaired_rate = _detection_rate(paired), _detection_rate(unpaired)
    print(f"+10 % latency, 32 prompts: paired rule detects {paired_rate:.3f}, unpaired rule {unpaired_rate:.3f}")
    assert paired_rate >= 0.95
    assert unpaired_rate < 0.5  # the spread between prompts hides the slowdown from Welch + MWU on raw samples


def test_a_10_percent_slowdown_blocks_a_holm_corrected_gate_run() -> None:
    """The same slowdown on one metric of an 8-metric gate run, held to Holm's alpha/8, needs 48 prompts."""

    def blocked_rate(n_prompts: int) -> float:
        runs = (_gate_run(np.random.default_rng(10_000 + seed), n_prompts, 1.10, 0.05) for seed in range(200))
        return sum(any(c.regressed for c in holm_adjust(run, alpha=0.01)) for run in runs) / 200

    rate_48, rate_32 = blocked_rate(48), blocked_rate(32)
    print(f"+10 % ttft in an 8-metric Holm gate run: blocked {rate_48:.3f} with 48 prompts, {rate_32:.3f} with 32")
    assert rate_48 >= 0.95


def test_a_5_percent_acceptance_drop_is_detected() -> None:
    """Acceptance rates around per-prompt levels (mean 0.6, sd 0.11), request CV 5 %, a 5 % relative drop.

    The tolerance is 2 %: a drop equal to the tolerance is flagged only about half the time (next test). With 48
    prompts the paired t-test's noncentrality is ~4.9; at 32 prompts it is ~4.0, where even an ideal one-sided
    t-test at alpha 0.01 has only 92 % power (noncentral t), so 95 % needs the larger workload.
    """

    def trial(n_prompts: int) -> Callable[[np.random.Generator], Comparison]:
        def compare(rng: np.random.Generator) -> Comparison:
            return compare_samples(
                "acceptance_rate",
                *_acceptance_pair(rng, n_prompts, 0.95),
                higher_is_better=True,
                tolerance=0.02,
                baseline_keys=_keys(n_prompts),
                current_keys=_keys(n_prompts),
                n_boot=0,
            )

        return compare

    rate_48, rate_32 = _detection_rate(trial(48)), _detection_rate(trial(32))
    print(f"-5 % acceptance, tolerance 2 %: detected {rate_48:.3f} with 48 prompts, {rate_32:.3f} with 32")
    assert rate_48 >= 0.95


def test_a_drop_equal_to_the_tolerance_is_a_coin_flip() -> None:
    """With tolerance 5 %, a true 5 % drop exceeds the tolerance only when its estimate lands above it."""

    def compare(rng: np.random.Generator) -> Comparison:
        return compare_samples(
            "acceptance_rate",
            *_acceptance_pair(rng, 200, 0.95),
            higher_is_better=True,
            baseline_keys=_keys(200),
            current_keys=_keys(200),
            n_boot=0,
        )

    rate = _detection_rate(compare)
    print(f"-5 % acceptance, tolerance 5 %, 200 prompts: detected {rate:.3f}")
    assert 0.3 <= rate <= 0.7
