"""Sampled-decoding losslessness: known χ² answers, no false alarms on A/A, and the power that is claimed.

The synthetic arms imitate sampling at temperature 0.7 and top-p 0.95 over a small vocabulary. A draft-distribution
bug (a verify step that accepts the draft's token too readily) makes the candidate sample from a mixture of the
target and the draft distribution, (1 − λ) p + λ d, with λ chosen for a given total-variation distance from p.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgate.engines.base import RequestTrace
from specgate.measure.sampled_decoding import collect_samples
from specgate.stats.distribution import (
    ENDED,
    RECOMMENDED_POSITIONS,
    RECOMMENDED_PROMPTS,
    RECOMMENDED_SAMPLES_PER_ARM,
    DistributionTest,
    compare_distributions,
    min_detectable_tv,
    power_note,
)

ALPHA = 0.01
Dist = np.ndarray


def _sampling_distribution(logits: Dist, temperature: float = 0.7, top_p: float = 0.95) -> Dist:
    """Softmax at ``temperature``, then nucleus truncation at ``top_p``, along the last axis."""
    z = logits / temperature
    probs = np.exp(z - z.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    order = np.argsort(-probs, axis=-1)
    ranked = np.take_along_axis(probs, order, axis=-1)
    keep = np.zeros(probs.shape, dtype=bool)
    np.put_along_axis(keep, order, np.cumsum(ranked, axis=-1) - ranked < top_p, axis=-1)
    truncated = np.where(keep, probs, 0.0)
    return truncated / truncated.sum(axis=-1, keepdims=True)


def _target_and_candidate(rng: np.random.Generator, tv: float, vocab: int = 32) -> tuple[Dist, Dist]:
    """A target distribution and the candidate's: shifted toward a correlated draft by exactly ``tv``."""
    logits = rng.normal(0.0, 2.0, vocab)
    target = _sampling_distribution(logits)
    if tv == 0.0:
        return target, target
    noise = 0.5
    while True:  # a draft that disagrees with the target by at least tv
        draft = _sampling_distribution(logits + rng.normal(0.0, noise, vocab))
        distance = 0.5 * float(np.abs(target - draft).sum())
        if distance >= tv:
            break
        noise *= 1.3
    mix = tv / distance
    return target, (1.0 - mix) * target + mix * draft


def _draw(rng: np.random.Generator, per_position: list[Dist], n: int) -> list[list[int]]:
    columns = [rng.choice(len(p), size=n, p=p) for p in per_position]
    return np.stack(columns, axis=1).tolist()


def _independent_positions(rng: np.random.Generator, prompts: int, positions: int, n: int, tv: float) -> dict:
    samples = {}
    for prompt in range(prompts):
        pairs = [_target_and_candidate(rng, tv) for _ in range(positions)]
        samples[f"p{prompt}"] = {
            "ar": _draw(rng, [p for p, _ in pairs], n),
            "spec": _draw(rng, [q for _, q in pairs], n),
        }
    return samples


def _markov_chain(rng: np.random.Generator, positions: int, vocab: int = 12) -> tuple[Dist, list[Dist]]:
    """A first-token distribution and per-position transition matrices; token 0 is end-of-sequence."""
    first = _sampling_distribution(rng.normal(0.0, 1.5, vocab))
    return first, [_sampling_distribution(rng.normal(0.0, 1.5, (vocab, vocab))) for _ in range(positions)]


def _sample_chain(rng: np.random.Generator, first: Dist, transitions: list[Dist], n: int) -> list[list[int]]:
    """Sequences where each token depends on the one before, ending at token 0 (so lengths differ)."""
    tokens = np.empty((n, len(transitions)), dtype=np.int64)
    tokens[:, 0] = rng.choice(len(first), size=n, p=first)
    for k in range(1, len(transitions)):
        cumulative = np.cumsum(transitions[k][tokens[:, k - 1]], axis=1)
        tokens[:, k] = np.minimum((cumulative < rng.random((n, 1))).sum(axis=1), len(first) - 1)
    sequences = []
    for row in tokens.tolist():
        end = row.index(0) + 1 if 0 in row else len(row)
        sequences.append(row[:end])
    return sequences


def _counts_samples(ar: dict[int, int], spec: dict[int, int]) -> dict:
    def expand(counts: dict[int, int]) -> list[list[int]]:
        return [[token] for token, count in counts.items() for _ in range(count)]

    return {"q": {"ar": expand(ar), "spec": expand(spec)}}


def _test(samples: dict, **options: object) -> DistributionTest:
    return compare_distributions(samples, reference="ar", candidate="spec", **options)  # type: ignore[arg-type]


# --- known answers ------------------------------------------------------------------------------------------------


def test_a_table_is_pearsons_chi_square_of_homogeneity() -> None:
    from scipy import stats

    result = _test(_counts_samples({7: 30, 8: 50, 9: 20}, {7: 40, 8: 45, 9: 15}), method="chi2-holm")
    expected = stats.chi2_contingency([[30, 50, 20], [40, 45, 15]], correction=False)
    (table,) = result.tables
    assert table.statistic == pytest.approx(expected.statistic)
    assert table.p_value == pytest.approx(expected.pvalue)
    assert (table.df, table.prompt_id, table.position) == (2, "q", 0)
    assert table.tv_distance == pytest.approx(0.10)
    assert result.p_value == pytest.approx(expected.pvalue)


def test_rare_tokens_are_merged_so_expected_counts_reach_five() -> None:
    from scipy import stats

    # token 3 (2 + 2 samples, expected 2 per arm) is too rare even as "other": it joins the smallest kept token
    result = _test(_counts_samples({1: 48, 2: 50, 3: 2}, {1: 50, 2: 48, 3: 2}), method="chi2-holm")
    (table,) = result.tables
    assert table.df == 1
    assert table.statistic == pytest.approx(stats.chi2_contingency([[50, 50], [52, 48]], correction=False).statistic)
    # ten rare tokens per arm pool into an "other" bin large enough to stand on its own
    ar = {1: 45, 2: 45} | {t: 1 for t in range(10, 20)}
    spec = {1: 45, 2: 45} | {t: 1 for t in range(20, 30)}
    (table,) = _test(_counts_samples(ar, spec), method="chi2-holm").tables
    assert table.df == 2
    assert table.statistic == pytest.approx(0.0)


def test_a_sample_that_ended_early_is_a_category_of_its_own() -> None:
    samples = {"q": {"ar": [[5, 6]] * 60, "spec": [[5, 6]] * 30 + [[5]] * 30}}
    result = _test(samples, method="chi2-holm")
    assert not result.passed
    assert result.skipped == 1  # position 0: token 5 everywhere
    (table,) = result.tables
    assert (table.position, table.tv_distance) == (1, 0.5)
    assert "prompt 'q' position 1" in result.decided_by
    assert ENDED == -1


def test_constant_output_passes_and_too_few_samples_block() -> None:
    same = _test({"q": {"ar": [[1, 2]] * 20, "spec": [[1, 2]] * 20}})
    assert same.passed
    assert same.decided_by == "every sample of both arms has the same token at every position"
    few = _test({"q": {"ar": [[1]] * 5, "spec": [[2]] * 5}})
    assert not few.passed
    assert "too few samples to test, take more" in few.message


def test_a_single_localized_bug_is_found_where_it_is() -> None:
    rng = np.random.default_rng(5)
    samples = _independent_positions(rng, 3, 6, 200, 0.0)
    target, candidate = _target_and_candidate(rng, 0.4)
    for arm, distribution in (("ar", target), ("spec", candidate)):
        for row, token in zip(samples["p2"][arm], rng.choice(32, size=200, p=distribution), strict=True):
            row[5] = int(token)
    result = _test(samples, n_permutations=199)
    assert not result.passed
    assert "largest single difference at prompt 'p2' position 5" in result.message
    assert result.p_holm is not None and result.p_holm < ALPHA / 2


# --- no false alarms ----------------------------------------------------------------------------------------------


def test_chi2_holm_a_a_rejects_at_most_alpha() -> None:
    rng = np.random.default_rng(2024)
    rejected = sum(
        not _test(_independent_positions(rng, 4, 8, 100, 0.0), method="chi2-holm").passed for _ in range(300)
    )
    assert rejected <= 6  # ≤ 2 % of 300 runs at α = 1 %


def test_combined_a_a_rejects_at_most_alpha_with_dependent_positions_and_early_ends() -> None:
    rng = np.random.default_rng(11)
    rejected, permutation_p = 0, []
    for seed in range(300):
        samples = {}
        for prompt in range(3):
            first, transitions = _markov_chain(rng, 6)
            samples[f"p{prompt}"] = {arm: _sample_chain(rng, first, transitions, 80) for arm in ("ar", "spec")}
        result = _test(samples, n_permutations=199, seed=seed)
        rejected += not result.passed
        permutation_p.append(result.p_permutation)
    assert rejected <= 6
    # the permutation p-value is exact: uniform under A/A, whatever the dependence between positions
    assert 0.4 <= np.mean(np.array(permutation_p) <= 0.5) <= 0.6
    assert np.mean(np.array(permutation_p) <= 0.1) <= 0.15


# --- power --------------------------------------------------------------------------------------------------------


def test_a_draft_distribution_bug_of_tv_0_1_is_detected_at_the_recommended_sizes() -> None:
    rng = np.random.default_rng(99)
    detected = 0
    for seed in range(30):
        samples = _independent_positions(
            rng, RECOMMENDED_PROMPTS, RECOMMENDED_POSITIONS, RECOMMENDED_SAMPLES_PER_ARM, tv=0.1
        )
        detected += not _test(samples, n_permutations=199, seed=seed).passed
    assert detected >= 27  # ≥ 90 % of runs


def test_the_permutation_test_pools_evidence_that_single_tables_miss() -> None:
    rng = np.random.default_rng(8)
    runs = [(_independent_positions(rng, 4, 8, 100, tv=0.1), seed) for seed in range(20)]
    by_permutation = sum(not _test(s, method="permutation", n_permutations=199, seed=k).passed for s, k in runs)
    by_holm = sum(not _test(s, method="chi2-holm").passed for s, _ in runs)
    assert by_permutation >= 18
    assert by_holm <= 16  # the reason the default combines both


def test_the_single_position_power_bound_holds_by_simulation() -> None:
    n, prompts, positions = RECOMMENDED_SAMPLES_PER_ARM, RECOMMENDED_PROMPTS, RECOMMENDED_POSITIONS
    bound = min_detectable_tv(n, tables=prompts * positions, method="chi2-holm")
    rng = np.random.default_rng(3)

    def coins(heads: float = 0.5) -> list[list[int]]:
        return (rng.random((n, positions)) < heads).astype(int).tolist()

    def detection_rate(tv: float, runs: int) -> float:
        hits = 0
        for _ in range(runs):  # every table a fair coin, but position 0 of one prompt shifted by tv: the worst case
            samples = {f"p{i}": {"ar": coins(), "spec": coins()} for i in range(prompts)}
            for row, token in zip(samples["p0"]["spec"], rng.random(n) < 0.5 + tv, strict=True):
                row[0] = int(token)
            hits += not _test(samples, method="chi2-holm").passed
        return hits / runs

    assert detection_rate(bound, runs=60) >= 0.7  # claimed: 80 %
    assert detection_rate(bound / 2, runs=60) <= 0.25  # and not loose by a factor of two (χ² theory: 8 %)


def test_min_detectable_tv_solves_the_noncentral_chi_square_power() -> None:
    from scipy import stats

    tv = min_detectable_tv(200, tables=32, alpha=0.01, power=0.8, df=4, method="chi2-holm")
    critical = stats.chi2.isf(0.01 / 32, 4)
    assert stats.ncx2.sf(critical, 4, 2 * 200 * tv**2) == pytest.approx(0.8)
    assert min_detectable_tv(800, tables=32, df=4, method="chi2-holm") == pytest.approx(tv / 2)
    assert min_detectable_tv(200, tables=32, df=4) > tv  # combined: the χ² part runs at α / 2
    note = power_note(200, tables=32, df=4)
    assert note.startswith("with 200 samples per arm and prompt, a shift of total-variation distance ≥ 0.2")
    with pytest.raises(ValueError, match="not 'permutation'"):
        min_detectable_tv(200, method="permutation")


# --- inputs -------------------------------------------------------------------------------------------------------


def test_results_are_reproducible_and_report_their_design() -> None:
    samples = _independent_positions(np.random.default_rng(1), 2, 4, 50, 0.0)
    first, second = _test(samples, seed=4), _test(samples, seed=4)
    assert first == second
    assert first.method == "combined"
    assert (first.n_prompts, first.positions, first.n_samples, first.n_permutations) == (2, 4, 100, 999)
    assert first.p_value == pytest.approx(min(1.0, 2 * min(first.p_permutation or 1, first.p_holm or 1)))
    assert first.p_permutation is not None and first.p_permutation >= 1 / 1000
    assert len(first.tables) + first.skipped == 8
    assert math.isfinite(first.statistic)


@pytest.mark.parametrize(
    ("samples", "options", "error"),
    [
        ({"q": {"ar": [[1]] * 5}}, {}, "prompt 'q': arm 'spec' has 0 samples; need ≥ 2"),
        ({"q": {"ar": [[1]] * 5, "spec": [[1]]}}, {}, "arm 'spec' has 1 samples"),
        ({}, {}, "no prompts"),
        ({"q": {"ar": [[1]] * 5, "spec": [[1]] * 5}}, {"method": "ks"}, "method='ks' is not known"),
        ({"q": {"ar": [[1]] * 5, "spec": [[1]] * 5}}, {"alpha": 1.0}, "alpha=1.0 must lie strictly between"),
        ({"q": {"ar": [[1]] * 5, "spec": [[1]] * 5}}, {"n_permutations": 99}, "use at least 199"),
    ],
)
def test_bad_inputs_say_what_is_wrong(samples: dict, options: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        _test(samples, **options)


def test_collect_samples_groups_completed_traces_by_prompt_and_arm() -> None:
    def trace(prompt: str, arm: str, ids: tuple[int, ...], error: str | None = None) -> RequestTrace:
        return RequestTrace(prompt, arm, 0, 0.0, (0.1,), (len(ids),), ids, "", 3, error=error)

    traces = [trace("a", "ar", (1, 2, 3)), trace("a", "spec", (1, 2)), trace("a", "spec", (9,), error="timeout")]
    assert collect_samples(traces, positions=2) == {"a": {"ar": [(1, 2)], "spec": [(1, 2)]}}
