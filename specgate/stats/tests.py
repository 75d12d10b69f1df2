"""Statistics of the regression gate: pure functions, no pytest.

The decision rule (design, "Gate policy"): a metric regresses when a parametric and a rank test both reject "no
change" one-sided in the worse direction at ``alpha``, and the relative change in the worse direction exceeds the
practical ``tolerance``.

- Unpaired samples: Welch's t-test and Mann-Whitney U on the raw per-request samples.
- Paired samples (both key lists given, at least ``MIN_PAIRED_KEYS`` keys in common): the samples are averaged per
  key (prompt) and the deciding tests are their paired analogues, the paired t-test and the Wilcoxon signed-rank
  test on the per-key differences. Welch on the raw samples is not part of this rule: prompts differ several-fold in
  length, and that spread swamps a 10 % slowdown in the raw samples, while the per-key differences cancel it.
- Percentiles: a one-sided bootstrap test of the difference of the percentiles.

The deciding p-value is the largest of the p-values that must all reject; :func:`holm_adjust` applies Holm's
step-down procedure to those across a gate run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from specgate.stats.bootstrap import (
    Interval,
    bootstrap_cis,
    bootstrap_stats,
    interval,
    mean_rows,
    percentile_rows,
    relative_change_rows,
)
from specgate.stats.pvalues import cohens_d, mwu_p, paired_t_p, rank_biserial, welch_p, wilcoxon_p

FloatArray = npt.NDArray[np.float64]
Reducer = Callable[[FloatArray], FloatArray]

MIN_SAMPLES = 2
MIN_PAIRED_KEYS = 6


@dataclass(frozen=True, slots=True)
class Comparison:
    """The evidence and verdict of one metric compared with its baseline.

    ``baseline_value`` and ``current_value`` are the compared statistic: the mean, the mean of the per-key means
    over the common keys when ``paired``, or the percentile named by ``statistic`` ("p99"). ``p_welch`` and ``p_mwu``
    always test the raw samples; ``p_paired`` (Wilcoxon signed-rank) and ``p_paired_t`` test the ``n_keys`` per-key
    differences when ``paired``. All p-values are one-sided in the worse direction. ``p_value`` is the deciding
    p-value (the largest of those that must all reject); ``alpha`` is the level it was held to, Holm-adjusted when
    ``family_size`` > 1. ``effect_size`` is Cohen's d (current minus baseline over the pooled standard deviation of
    the raw samples) for unpaired and percentile comparisons, and the matched-pairs rank-biserial correlation of the
    per-key differences (+1: every key got larger) for paired ones.
    """

    metric: str
    higher_is_better: bool
    n_baseline: int
    n_current: int
    baseline_value: float
    current_value: float
    baseline_ci: Interval
    current_ci: Interval
    relative_change: float
    change_ci: Interval
    p_welch: float
    p_mwu: float
    p_paired: float | None
    paired: bool
    decided_by: str
    effect_size: float
    tolerance: float
    alpha: float
    significant: bool
    regressed: bool
    p_value: float
    p_paired_t: float | None = None
    n_keys: int = 0
    statistic: str = "mean"
    family_size: int = 1

    @property
    def worse_change(self) -> float:
        """The relative change signed so that positive means worse."""
        return -self.relative_change if self.higher_is_better else self.relative_change

    def describe(self) -> str:
        """One line of evidence, e.g. ``ttft_ms: 741.2 → 812.5 ms (+9.6 %, 95% CI +6.1…+13.0 %), Welch p=…``."""
        unit = _unit(self.metric)
        name = self.metric if self.statistic == "mean" else f"{self.metric} {self.statistic.upper()}"
        change = f"{self.relative_change * 100:+.1f} %"
        if not math.isnan(self.change_ci.low):
            change += f", 95% CI {self.change_ci.low * 100:+.1f}…{self.change_ci.high * 100:+.1f} %"
        holm_note = f" (Holm, {self.family_size} tests)" if self.family_size > 1 else ""
        return (
            f"{name}: {_fmt_value(self.baseline_value)} → {_fmt_value(self.current_value)}{unit} ({change}), "
            f"{self._tests_text()}, n={self.n_baseline}/{self.n_current}, α={self.alpha:.3g}{holm_note} — "
            f"{self._verdict_text()}"
        )

    def _tests_text(self) -> str:
        if self.statistic != "mean":
            return f"bootstrap p={_fmt_p(self.p_value)}, d={self.effect_size:.2f}"
        if self.paired:
            return (
                f"paired t p={_fmt_p(self.p_paired_t)}, Wilcoxon p={_fmt_p(self.p_paired)}, "
                f"r={self.effect_size:.2f}, {self.n_keys} keys"
            )
        return f"Welch p={_fmt_p(self.p_welch)}, MWU p={_fmt_p(self.p_mwu)}, d={self.effect_size:.2f}"

    def _verdict_text(self) -> str:
        tolerance = f"tolerance {self.tolerance * 100:g} %"
        if self.regressed:
            return f"REGRESSED ({tolerance})"
        if self.significant:
            return f"worse, within {tolerance}"
        return "no significant regression"


def compare_samples(
    metric: str,
    baseline: Sequence[float],
    current: Sequence[float],
    *,
    higher_is_better: bool,
    alpha: float = 0.01,
    tolerance: float = 0.05,
    baseline_keys: Sequence[str] | None = None,
    current_keys: Sequence[str] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Compare the means of ``current`` and ``baseline`` samples of ``metric`` (see the module docstring for the rule).

    Pairing is used when both key lists are given (one key, e.g. a prompt id, per sample) and at least
    ``MIN_PAIRED_KEYS`` keys are common; the compared values are then the means over the common keys of the per-key
    means. The one-sided Wilcoxon p-value cannot go below 2**-n_keys, so a family of m metrics held at alpha needs
    n_keys >= log2(m / alpha) (10 keys for 8 metrics at 0.01). ``n_boot=0`` skips the bootstrap CIs, which never
    enter the decision. Raises ``ValueError`` on fewer than 2 samples, non-finite values or bad options.
    """
    _check_options(alpha, tolerance, n_boot)
    b, c = _as_samples("baseline", metric, baseline), _as_samples("current", metric, current)
    sign = -1.0 if higher_is_better else 1.0
    pairs = _pair_by_key(metric, b, c, baseline_keys, current_keys)
    p_welch, p_mwu = welch_p(c, b, sign), mwu_p(c, b, sign)
    if isinstance(pairs, str):
        evidence = _Evidence(
            baseline_value=float(np.mean(b)),
            current_value=float(np.mean(c)),
            p_welch=p_welch,
            p_mwu=p_mwu,
            p_value=max(p_welch, p_mwu),
            effect_size=cohens_d(c, b),
            decided_by="Welch t-test + Mann-Whitney U" + pairs,
        )
        cis = bootstrap_cis((b, c), mean_rows, n_boot, seed, joint=False)
    else:
        evidence = _paired_evidence(*pairs, sign, p_welch, p_mwu)
        cis = bootstrap_cis(pairs, mean_rows, n_boot, seed, joint=True)
    return _comparison(metric, (len(b), len(c)), evidence, cis, higher_is_better, alpha, tolerance)


def compare_percentile(
    metric: str,
    baseline: Sequence[float],
    current: Sequence[float],
    *,
    q: float = 99.0,
    higher_is_better: bool = False,
    alpha: float = 0.01,
    tolerance: float = 0.05,
    n_boot: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Compare the ``q``-th percentiles of ``current`` and ``baseline`` with a one-sided bootstrap test.

    The samples are resampled independently ``n_boot`` times; the p-value is (1 + #{resampled differences not worse
    than 0}) / (n_boot + 1), so the comparison is significant when the one-sided (1 - alpha) bootstrap interval of
    the difference excludes 0 in the worse direction. The smallest attainable p is 1 / (n_boot + 1): under Holm with
    m metrics use n_boot >= m / alpha. Extreme percentiles need many samples (the P99 of 32 samples is about their
    maximum, and the bootstrap of a maximum is unreliable): plan n >= 10 * 100 / (100 - q). Welch and MWU p-values
    of the raw samples are reported but do not decide; the effect size is Cohen's d of the raw samples.
    """
    _check_options(alpha, tolerance, n_boot)
    if not 0.0 < q <= 100.0:
        raise ValueError(f"{metric}: q={q!r} is not a percentile; give 0 < q <= 100, e.g. q=99.0 for P99")
    if 1.0 / (n_boot + 1) > alpha:
        raise ValueError(
            f"{metric}: n_boot={n_boot} cannot reach alpha={alpha}: the smallest bootstrap p-value is "
            f"1/(n_boot+1); use n_boot >= {math.ceil(1.0 / alpha)}"
        )
    b, c = _as_samples("baseline", metric, baseline), _as_samples("current", metric, current)
    sign = -1.0 if higher_is_better else 1.0
    boot_b, boot_c = bootstrap_stats((b, c), percentile_rows(q), n_boot, seed, joint=False)
    p_value = (1.0 + float(np.count_nonzero(sign * (boot_c - boot_b) <= 0.0))) / (n_boot + 1.0)
    evidence = _Evidence(
        baseline_value=float(np.percentile(b, q)),
        current_value=float(np.percentile(c, q)),
        p_welch=welch_p(c, b, sign),
        p_mwu=mwu_p(c, b, sign),
        p_value=p_value,
        effect_size=cohens_d(c, b),
        decided_by=f"bootstrap test of the P{q:g} difference (n_boot={n_boot})",
        statistic=f"p{q:g}",
    )
    cis = interval(boot_b, 0.95), interval(boot_c, 0.95), interval(relative_change_rows(boot_c, boot_b), 0.95)
    return _comparison(metric, (len(b), len(c)), evidence, cis, higher_is_better, alpha, tolerance)


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which hypotheses Holm's step-down procedure rejects, controlling the family-wise error rate at ``alpha``."""
    return _holm_levels(p_values, alpha)[0]


def holm_adjust(comparisons: Sequence[Comparison], alpha: float) -> list[Comparison]:
    """Re-decide a gate run's comparisons as one family: Holm on each deciding ``p_value``, at family level ``alpha``.

    Each returned comparison carries the Holm level of its rank as ``alpha`` and the family size.
    """
    rejected, levels = _holm_levels([c.p_value for c in comparisons], alpha)
    return [
        replace(
            c,
            alpha=level,
            significant=reject,
            regressed=reject and c.worse_change > c.tolerance,
            family_size=len(comparisons),
        )
        for c, reject, level in zip(comparisons, rejected, levels, strict=True)
    ]


# --- validation and pairing -------------------------------------------------------------------------------------


def _check_options(alpha: float, tolerance: float, n_boot: int) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha!r} must lie strictly between 0 and 1, e.g. 0.01")
    if not tolerance >= 0.0:
        raise ValueError(f"tolerance={tolerance!r} must be a relative change >= 0, e.g. 0.05 for 5 %")
    if n_boot < 0:
        raise ValueError(f"n_boot={n_boot!r} must be >= 0 (0 skips the bootstrap CIs)")


def _as_samples(side: str, metric: str, values: Sequence[float]) -> FloatArray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or len(x) < MIN_SAMPLES:
        raise ValueError(
            f"{metric}: the {side} has {x.size} sample(s); at least {MIN_SAMPLES} are needed to compare. "
            "Run more requests or repetitions."
        )
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{metric}: the {side} holds non-finite values (NaN or inf); drop or fix those requests")
    return x


def _pair_by_key(
    metric: str,
    baseline: FloatArray,
    current: FloatArray,
    baseline_keys: Sequence[str] | None,
    current_keys: Sequence[str] | None,
) -> tuple[FloatArray, FloatArray] | str:
    """Per-key means over the common keys, sorted by key; or why the comparison is unpaired."""
    if baseline_keys is None and current_keys is None:
        return ""
    if baseline_keys is None or current_keys is None:
        raise ValueError(f"{metric}: give both baseline_keys and current_keys to pair by key, or neither")
    for side, values, keys in (("baseline", baseline, baseline_keys), ("current", current, current_keys)):
        if len(keys) != len(values):
            raise ValueError(
                f"{metric}: {side}_keys has {len(keys)} entries for {len(values)} samples; give one key per sample"
            )
    b_keys, b_means = _per_key_means(baseline, baseline_keys)
    c_keys, c_means = _per_key_means(current, current_keys)
    _, b_index, c_index = np.intersect1d(b_keys, c_keys, assume_unique=True, return_indices=True)
    if len(b_index) < MIN_PAIRED_KEYS:
        return f" (unpaired: {len(b_index)} common keys < {MIN_PAIRED_KEYS})"
    return b_means[b_index], c_means[c_index]


def _per_key_means(values: FloatArray, keys: Sequence[str]) -> tuple[npt.NDArray[np.str_], FloatArray]:
    unique, inverse = np.unique(np.asarray([str(k) for k in keys]), return_inverse=True)
    sums = np.bincount(inverse, weights=values, minlength=len(unique))
    return unique, sums / np.bincount(inverse, minlength=len(unique))


# --- evidence ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Evidence:
    """What the tests found, before the verdict: the compared values, p-values and effect size."""

    baseline_value: float
    current_value: float
    p_welch: float
    p_mwu: float
    p_value: float
    effect_size: float
    decided_by: str
    p_paired_t: float | None = None
    p_wilcoxon: float | None = None
    n_keys: int = 0
    statistic: str = "mean"


def _paired_evidence(baseline: FloatArray, current: FloatArray, sign: float, p_welch: float, p_mwu: float) -> _Evidence:
    differences = current - baseline
    p_t, p_w = paired_t_p(differences, sign), wilcoxon_p(differences, sign)
    return _Evidence(
        baseline_value=float(np.mean(baseline)),
        current_value=float(np.mean(current)),
        p_welch=p_welch,
        p_mwu=p_mwu,
        p_value=max(p_t, p_w),
        effect_size=rank_biserial(differences),
        decided_by=f"paired t-test + Wilcoxon signed-rank (paired by key, {len(differences)} keys)",
        p_paired_t=p_t,
        p_wilcoxon=p_w,
        n_keys=len(differences),
    )


def _comparison(
    metric: str,
    sizes: tuple[int, int],
    evidence: _Evidence,
    cis: tuple[Interval, Interval, Interval],
    higher_is_better: bool,
    alpha: float,
    tolerance: float,
) -> Comparison:
    change = _relative_change(evidence.current_value, evidence.baseline_value)
    significant = evidence.p_value <= alpha
    return Comparison(
        metric=metric,
        higher_is_better=higher_is_better,
        n_baseline=sizes[0],
        n_current=sizes[1],
        baseline_value=evidence.baseline_value,
        current_value=evidence.current_value,
        baseline_ci=cis[0],
        current_ci=cis[1],
        relative_change=change,
        change_ci=cis[2],
        p_welch=evidence.p_welch,
        p_mwu=evidence.p_mwu,
        p_paired=evidence.p_wilcoxon,
        paired=evidence.p_wilcoxon is not None,
        decided_by=evidence.decided_by,
        effect_size=evidence.effect_size,
        tolerance=tolerance,
        alpha=alpha,
        significant=significant,
        regressed=significant and (-change if higher_is_better else change) > tolerance,
        p_value=evidence.p_value,
        p_paired_t=evidence.p_paired_t,
        n_keys=evidence.n_keys,
        statistic=evidence.statistic,
    )


def _relative_change(current: float, baseline: float) -> float:
    if baseline == 0.0:
        return 0.0 if current == 0.0 else math.copysign(math.inf, current)
    return (current - baseline) / abs(baseline)


# --- Holm ---------------------------------------------------------------------------------------------------------


def _holm_levels(p_values: Sequence[float], alpha: float) -> tuple[list[bool], list[float]]:
    """Holm's rejections and the level each hypothesis is held to at its rank (alpha / (m - rank))."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha!r} must lie strictly between 0 and 1, e.g. 0.01")
    if any(not 0.0 <= p <= 1.0 for p in p_values):
        raise ValueError(f"p-values must lie in [0, 1]; got {list(p_values)!r}")
    m = len(p_values)
    rejected, levels = [False] * m, [alpha] * m
    still_rejecting = True
    for rank, i in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        levels[i] = alpha / (m - rank)
        still_rejecting = still_rejecting and p_values[i] <= levels[i]
        rejected[i] = still_rejecting
    return rejected, levels


# --- formatting ---------------------------------------------------------------------------------------------------


def _unit(metric: str) -> str:
    for suffix, unit in (("_ms", " ms"), ("_tokens_per_s", " tok/s"), ("_per_s", " /s"), ("_s", " s")):
        if metric.endswith(suffix):
            return unit
    return ""


def _fmt_value(value: float) -> str:
    return f"{value:,.1f}" if abs(value) >= 100.0 else f"{value:.3g}"


def _fmt_p(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.2g}"
