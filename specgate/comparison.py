"""The one comparison core: how much worse one arm is than another, with the uncertainty of that estimate.

Everything here reads arms' samples (`ArmSamples`, keyed by prompt#round) and returns an `Estimate` on the scale
the decision is made on (`specgate.stats.decision.decide`); `specgate.checks.regression` turns estimates into
checks. The gate (on its live run), the sequential stopping rule (on the rounds so far) and `specgate baseline diff`
(on two files) all call these functions, so they decide alike on the same data.

Three sources of a comparison, from the strongest:

- **beside** (reference mode): the candidate arm and the reference arm measured in the same run, interleaved ABBA.
  Units are prompt × round; each unit's log ratio candidate/reference cancels the prompt's length and the machine's
  drift at that moment. Estimate: the mean log ratio (a geometric-mean ratio); standard error from the units.
- **history** (stored baselines of this machine, ≥ `min_history_runs` runs): each run is summarized by its mean log
  value over the prompt#round keys all runs share; the current run is compared with the history's mean, with the
  history's between-run spread (a prediction interval: se = s·√(1 + 1/k), k − 1 degrees of freedom). Between-run
  drift is what dominates latency on a shared machine; samples of one run cannot see it.
- **within** (one stored run of this machine, when the policy allows fewer than `min_history_runs`): paired units
  against that run, like beside, but blind to between-run drift (the check says so).

Tails (P99) are compared with a paired bootstrap of the percentile's log ratio (resamples enough to reach the
corrected level); acceptance with the relative drop of the pooled acceptance rate, its standard error a jackknife
over prompts (a prompt's verification steps are one cluster).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from specgate.measure.samples import ArmSamples

Kind = Literal["mean", "tail", "speedup"]


@dataclass(frozen=True, slots=True)
class Metric:
    """A latency-type metric: the sample field it reads and how it is compared."""

    name: str
    field: str
    kind: Kind
    higher_is_better: bool = False
    unit: str = "ms"


TTFT = Metric("ttft_ms", "ttft_ms", "mean")
TPOT = Metric("tpot_ms", "tpot_ms", "mean")
E2EL = Metric("e2el_ms", "e2el_ms", "mean")
P99_TTFT = Metric("p99_ttft_ms", "ttft_ms", "tail")
SPEEDUP = Metric("speedup", "wall_ms", "speedup", higher_is_better=True, unit="×")
SPECULATIVE_METRICS: tuple[Metric, ...] = (TTFT, TPOT, E2EL, P99_TTFT, SPEEDUP)
PLAIN_METRICS: tuple[Metric, ...] = (TPOT,)
METRICS: dict[str, Metric] = {m.name: m for m in SPECULATIVE_METRICS}
ACCEPTANCE = "acceptance_rate"
OUTPUT_DRIFT = "output_drift"
TASK_ACCURACY = "task_accuracy"


def metric_key(name: str, arm: str, released: str = "spec") -> str:
    """`ttft_ms` for the released arm, `ar.tpot_ms` or `spec-g6.ttft_ms` for the others."""
    return name if arm == released else f"{arm}.{name}"


def split_key(key: str, released: str = "spec") -> tuple[str, str]:
    """(arm, metric name) of a metric key."""
    arm, _, name = key.rpartition(".")
    return (arm or released), name


@dataclass(frozen=True, slots=True)
class Estimate:
    """How much worse the candidate is, on the decision's scale (positive = worse), with its uncertainty.

    `before`/`after` are the compared statistic in the metric's unit (means, P99, speedup), for people; `spread`
    the per-unit standard deviation (for the units a decision would need), None for run-level comparisons; `p_value`
    an exact one-sided p-value where the test has one (permutation), else it follows from estimate and se."""

    estimate: float
    se: float
    df: float
    n: int
    before: float
    after: float
    how: str
    spread: float | None = None
    log_scale: bool = True
    p_value: float | None = None

    def change(self, value: float | None = None) -> float:
        """A worse-positive value on the decision's scale as a relative change (e.g. +0.052 for 5.2 % worse)."""
        x = self.estimate if value is None else value
        return math.expm1(x) if self.log_scale else x


def _by_key(arm: ArmSamples, field: str) -> dict[str, float]:
    return {k: v for k, v in arm.by_key(field).items() if v > 0}


def _paired(before: Mapping[str, float], after: Mapping[str, float], sign: float) -> tuple[list[str], np.ndarray]:
    keys = sorted(set(before) & set(after))
    return keys, np.asarray([sign * math.log(after[k] / before[k]) for k in keys], dtype=np.float64)


def unit_speedups(arm: ArmSamples, plain: ArmSamples) -> dict[str, float]:
    """Per prompt#round: the plain arm's request time over the arm's (a whole-arm engine's requests too)."""
    mine, base = _by_key(arm, "wall_ms"), _by_key(plain, "wall_ms")
    return {k: base[k] / mine[k] for k in sorted(set(mine) & set(base))}


def _values(samples: ArmSamples, metric: Metric, plain: ArmSamples | None) -> dict[str, float]:
    if metric.kind == "speedup":
        if plain is None:
            raise ValueError("a speedup needs the plain-decoding arm")
        return unit_speedups(samples, plain)
    return _by_key(samples, metric.field)


def paired(
    metric: Metric,
    before: ArmSamples,
    after: ArmSamples,
    *,
    plain_before: ArmSamples | None = None,
    plain_after: ArmSamples | None = None,
    how: str = "paired by prompt and round",
) -> Estimate:
    """A mean metric (or the speedup), candidate `after` against `before`, paired by prompt#round."""
    b, a = _values(before, metric, plain_before), _values(after, metric, plain_after)
    sign = -1.0 if metric.higher_is_better else 1.0
    keys, d = _paired(b, a, sign)
    if len(keys) < 2:
        raise ValueError(f"{metric.name}: {len(keys)} prompt#round keys in common; at least 2 are needed")
    sd = float(np.std(d, ddof=1))
    return Estimate(
        estimate=float(d.mean()),
        se=sd / math.sqrt(len(d)),
        df=len(d) - 1,
        n=len(d),
        before=float(np.mean([b[k] for k in keys])),
        after=float(np.mean([a[k] for k in keys])),
        how=f"{how}, {len(keys)} units",
        spread=sd,
    )


def tail(
    metric: Metric,
    before: ArmSamples,
    after: ArmSamples,
    *,
    q: float = 99.0,
    resamples: int,
    seed: int = 0,
    how: str = "paired permutation test",
) -> Estimate:
    """The q-th percentile, `after` against `before`: the log ratio of the two percentiles, tested with a paired
    permutation test (within each prompt#round unit the two labels are swapped at random, which is exact when the
    configurations do not differ; the bootstrap of an extreme percentile is not). The p-value's resolution is
    1/(resamples + 1): give resamples ≥ 20 / α. `se` is the spread of the permutation distribution, for the MDE."""
    b, a = _by_key(before, metric.field), _by_key(after, metric.field)
    keys = sorted(set(b) & set(a))
    if len(keys) < 4:
        raise ValueError(f"{metric.name}: {len(keys)} prompt#round keys in common; a percentile needs at least 4")
    xb, xa = np.asarray([b[k] for k in keys]), np.asarray([a[k] for k in keys])
    observed = math.log(float(np.percentile(xa, q)) / float(np.percentile(xb, q)))
    rng = np.random.default_rng(seed)
    chunk = max(1, (1 << 22) // len(keys))
    null = []
    for start in range(0, resamples, chunk):
        swap = rng.random((min(chunk, resamples - start), len(keys))) < 0.5
        pa, pb = np.where(swap, xb, xa), np.where(swap, xa, xb)
        null.append(np.log(np.percentile(pa, q, axis=1) / np.percentile(pb, q, axis=1)))
    values = np.concatenate(null)
    sign = -1.0 if metric.higher_is_better else 1.0
    p_value = (1.0 + float(np.count_nonzero(sign * values >= sign * observed))) / (len(values) + 1.0)
    return Estimate(
        estimate=sign * observed,
        se=float(np.std(values, ddof=1)),
        df=math.inf,
        n=len(keys),
        before=float(np.percentile(xb, q)),
        after=float(np.percentile(xa, q)),
        how=f"{how} of {len(keys)} units ({resamples:,} permutations)",
        p_value=p_value,
    )


def _run_level(samples: ArmSamples, metric: Metric, plain: ArmSamples | None, keys: Sequence[str]) -> float:
    """One run's summary on the log scale: the mean log value over `keys` (the P99's log for tails)."""
    values = _values(samples, metric, plain)
    if metric.kind == "tail":
        return math.log(float(np.percentile([values[k] for k in keys], 99.0)))
    return float(np.mean([math.log(values[k]) for k in keys]))


def history(
    metric: Metric,
    runs: Sequence[tuple[ArmSamples, ArmSamples | None]],
    current: tuple[ArmSamples, ArmSamples | None],
) -> Estimate:
    """The current run against the runs of the same machine, with the between-run spread (≥ 2 runs).

    `runs` and `current` are (the arm's samples, its plain arm's samples for the speedup)."""
    if len(runs) < 2:
        raise ValueError(f"{metric.name}: a between-run spread needs at least 2 stored runs, got {len(runs)}")
    keys = set(_values(current[0], metric, current[1]))
    for arm, plain in runs:
        keys &= set(_values(arm, metric, plain))
    common = sorted(keys)
    if len(common) < 2:
        raise ValueError(f"{metric.name}: the stored runs and this run share {len(common)} prompt#round keys")
    sign = -1.0 if metric.higher_is_better else 1.0
    levels = np.asarray([_run_level(arm, metric, plain, common) for arm, plain in runs])
    now = _run_level(current[0], metric, current[1], common)
    k = len(levels)
    spread = float(np.std(levels, ddof=1))
    return Estimate(
        estimate=sign * (now - float(levels.mean())),
        se=spread * math.sqrt(1 + 1 / k),
        df=k - 1,
        n=k,
        before=math.exp(float(levels.mean())),
        after=math.exp(now),
        how=f"against {k} runs of this machine (between-run spread {math.expm1(spread):.1%}), {len(common)} keys",
    )


def acceptance_drop(before: ArmSamples, after: ArmSamples) -> Estimate:
    """Relative drop of the pooled acceptance rate (positive = `after` accepts less), its standard error a
    jackknife over the prompts both runs share, paired by prompt (a prompt's verification steps are one cluster;
    its rounds repeat the same greedy counts). Raises ValueError when it cannot be computed."""

    def per_prompt(arm: ArmSamples) -> dict[str, tuple[int, int]]:
        totals: dict[str, tuple[int, int]] = {}
        first = min((s.repetition for s in arm.samples), default=0)
        for sample in arm.samples:
            if sample.repetition == first:
                acc, dra = totals.get(sample.prompt_id, (0, 0))
                totals[sample.prompt_id] = (acc + sample.accepted, dra + sample.drafted)
        return totals

    base, cur = per_prompt(before), per_prompt(after)
    common = sorted(set(base) & set(cur))
    if len(common) < 2:
        raise ValueError(f"acceptance needs at least 2 prompts in common, got {len(common)}")
    a = np.asarray([base[k] for k in common], dtype=float)
    b = np.asarray([cur[k] for k in common], dtype=float)
    if a[:, 1].sum() == 0 or a[:, 0].sum() == 0:
        raise ValueError("the reference side accepted no draft tokens, so a relative drop is undefined")

    def drop(keep: np.ndarray) -> float:
        rate_a = a[keep, 0].sum() / max(a[keep, 1].sum(), 1.0)
        rate_b = b[keep, 0].sum() / max(b[keep, 1].sum(), 1.0)
        return float(1 - rate_b / rate_a) if rate_a > 0 else 0.0

    n = len(common)
    everything = drop(np.ones(n, dtype=bool))
    leave_one_out = np.asarray([drop(np.arange(n) != i) for i in range(n)])
    se = float(np.sqrt((n - 1) / n * ((leave_one_out - leave_one_out.mean()) ** 2).sum()))
    return Estimate(
        estimate=everything,
        se=se,
        df=n - 1,
        n=n,
        before=float(a[:, 0].sum() / a[:, 1].sum()),
        after=float(b[:, 0].sum() / max(b[:, 1].sum(), 1.0)),
        how=f"jackknife over {n} prompts",
        spread=se * math.sqrt(n),
        log_scale=False,
    )


def changed_outputs(before: ArmSamples, after: ArmSamples) -> tuple[list[str], list[str]]:
    """(the keys both have, the keys whose greedy outputs differ)."""
    old, new = before.outputs, after.outputs
    common = sorted(set(old) & set(new))
    return common, [k for k in common if old[k] != new[k]]
