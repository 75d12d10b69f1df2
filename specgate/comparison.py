"""The one comparison core: how much worse one arm is than another, with the uncertainty of that estimate.

Everything here reads arms' samples (`ArmSamples`, keyed by prompt#round) and returns an `Estimate` on the scale
the decision is made on (`specgate.stats.decision.decide`); `specgate.checks.regression` turns estimates into
checks. The gate (on its live run), the sequential stopping rule (on the rounds so far) and `specgate baseline diff`
(on two files) all call these functions, so they decide alike on the same data.

Three sources of a comparison, from the strongest:

- **beside** (reference mode): the candidate arm and the reference arm measured in the same run, interleaved in a
  balanced order. Units are prompt × round; each unit's log ratio candidate/reference cancels the prompt's length
  and the machine's drift at that moment. Estimate: the 20 % trimmed mean of the log ratios with Yuen's standard
  error (`specgate.stats.robust`: a few requests stretched by another process on the machine move neither the
  estimate nor the spread). The log ratio is split into work and time per unit of work where the work is exact: a
  request's decoding steps per output token repeat exactly under greedy decoding, so the TPOT ratio's work part
  (steps per token, candidate over reference) is known without noise and only its time per step is estimated.
- **history** (stored baselines of this machine, ≥ `min_history_runs` runs): each run is summarized by its mean log
  value over the prompt#round keys all runs share; the current run is compared with the history's mean, with the
  history's between-run spread (a prediction interval: se = s·√(1 + 1/k), k − 1 degrees of freedom). Between-run
  drift is what dominates latency on a shared machine; samples of one run cannot see it.
- **within** (one stored run of this machine, when the policy allows fewer than `min_history_runs`): paired units
  against that run, like beside, but blind to between-run drift (the check says so).

Tails (P99) are compared with a paired permutation test of the percentile's log ratio; acceptance with the
relative drop of the pooled acceptance rate, its standard error a jackknife over prompts (a prompt's verification
steps are one cluster).

Times are read in one `clock`: `wall` (what a user waits) or `cpu` (the engine's CPU time, where it measured it:
the same work, but not stretched by other processes on a busy machine). Every comparison of a run uses the same
clock (`clock_of`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from specgate.measure.samples import ArmSamples, Sample
from specgate.stats.decision import percent
from specgate.stats.robust import trimmed

Kind = Literal["mean", "tail", "speedup"]


Clock = Literal["wall", "cpu"]
STOP_AFTER = 25  # a tail test stops once this many permutations were as extreme as the observed change
PERMUTATION_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Metric:
    """A latency-type metric: the sample field it reads (`cpu_field` in CPU time) and how it is compared."""

    name: str
    field: str
    kind: Kind
    higher_is_better: bool = False
    unit: str = "ms"
    cpu_field: str = ""

    def source(self, clock: Clock) -> str:
        """The sample field read in `clock`."""
        return self.cpu_field if clock == "cpu" and self.cpu_field else self.field


TTFT = Metric("ttft_ms", "ttft_ms", "mean", cpu_field="cpu_ttft_ms")
TPOT = Metric("tpot_ms", "tpot_ms", "mean", cpu_field="cpu_tpot_ms")
E2EL = Metric("e2el_ms", "e2el_ms", "mean", cpu_field="cpu_e2el_ms")
P99_TTFT = Metric("p99_ttft_ms", "ttft_ms", "tail", cpu_field="cpu_ttft_ms")
SPEEDUP = Metric("speedup", "wall_ms", "speedup", higher_is_better=True, unit="×", cpu_field="cpu_e2el_ms")
# the speedup beside a reference that shares the plain arm: S_ref / S_cand = the candidate's request time over the
# reference's, unit by unit (worse when it takes longer)
E2EL_AS_SPEEDUP = Metric("speedup", "wall_ms", "mean", cpu_field="cpu_e2el_ms")
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

    `before`/`after` are the compared statistic in the metric's unit and `clock` (means, P99, speedup), for people;
    `spread` the per-unit standard deviation (for the units a decision would need), None for run-level comparisons;
    `p_value` an exact one-sided p-value where the test has one (permutation), else it follows from estimate and se;
    `work` the exact part of `estimate` (the change in decoding steps per token; 0 when there is none), the rest
    being the noisy change in time per step; `units` the worse-positive per-unit values the estimate was made of
    (their noisy part), by unit key, for the correlations of a family of comparisons."""

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
    work: float = 0.0
    clock: Clock = "wall"
    units: Mapping[str, float] = field(default_factory=dict)

    def change(self, value: float | None = None) -> float:
        """A worse-positive value on the decision's scale as a relative change (e.g. +0.052 for 5.2 % worse)."""
        x = self.estimate if value is None else value
        return math.expm1(x) if self.log_scale else x


def clock_of(requested: str, *arms: ArmSamples | None) -> Clock:
    """The clock comparisons read: `wall` or `cpu` as requested; `auto` is `cpu` when every sample of the arms has its
    CPU times (the engine measured them: one request at a time on a CPU backend), else `wall`."""
    if requested in ("wall", "cpu"):
        return requested  # type: ignore[return-value]
    samples = [s for arm in arms if arm is not None for s in arm.latest().samples]
    return "cpu" if samples and all(s.cpu_e2el_ms is not None for s in samples) else "wall"


def _by_key(arm: ArmSamples, field_name: str) -> dict[str, float]:
    return {k: v for k, v in arm.latest().by_key(field_name).items() if v is not None and v > 0}


def unit_speedups(arm: ArmSamples, plain: ArmSamples, clock: Clock = "wall") -> dict[str, float]:
    """Per prompt#round: the plain arm's request time over the arm's (a whole-arm engine's requests too)."""
    name = SPEEDUP.source(clock)
    mine, base = _by_key(arm, name), _by_key(plain, name)
    return {k: base[k] / mine[k] for k in sorted(set(mine) & set(base))}


def _values(samples: ArmSamples, metric: Metric, plain: ArmSamples | None, clock: Clock) -> dict[str, float]:
    if metric.kind == "speedup":
        if plain is None:
            raise ValueError("a speedup needs the plain-decoding arm")
        return unit_speedups(samples, plain, clock)
    return _by_key(samples, metric.source(clock))


def _steps_per_token(arm: ArmSamples) -> dict[str, float]:
    return {
        s.key: s.steps / (s.output_tokens - 1)
        for s in arm.latest().samples
        if s.steps is not None and s.steps > 0 and s.output_tokens > 1
    }


def _work(metric: Metric, before: ArmSamples, after: ArmSamples, keys: Sequence[str], sign: float) -> np.ndarray:
    """The exact part of each unit's log ratio: the change in decoding steps per token (TPOT only), when it repeats
    exactly from round to round of every prompt (greedy decoding); zeros otherwise."""
    if metric is not TPOT:
        return np.zeros(len(keys))
    b, a = _steps_per_token(before), _steps_per_token(after)
    if not all(k in b and k in a for k in keys):
        return np.zeros(len(keys))
    work = np.asarray([sign * math.log(a[k] / b[k]) for k in keys])
    by_prompt: dict[str, set[float]] = {}
    for key, value in zip(keys, work, strict=True):
        by_prompt.setdefault(key.split("#")[0], set()).add(round(float(value), 12))
    return work if all(len(v) == 1 for v in by_prompt.values()) else np.zeros(len(keys))


def paired(
    metric: Metric,
    before: ArmSamples,
    after: ArmSamples,
    *,
    plain_before: ArmSamples | None = None,
    plain_after: ArmSamples | None = None,
    how: str = "paired by prompt and round",
    clock: Clock = "wall",
    instance_spread: float = 0.0,
) -> Estimate:
    """A mean metric (or the speedup), candidate `after` against `before`, paired by prompt#round: the trimmed mean
    of the per-unit log ratios' time part plus their exact work part (see the module docstring). Where the two arms
    were served by different engine instances, the instances' own difference is folded into the standard error
    (`_instance_variance`)."""
    b, a = _values(before, metric, plain_before, clock), _values(after, metric, plain_after, clock)
    sign = -1.0 if metric.higher_is_better else 1.0
    keys = sorted(set(b) & set(a))
    if len(keys) < 2:
        raise ValueError(f"{metric.name}: {len(keys)} prompt#round keys in common; at least 2 are needed")
    ratios = np.asarray([sign * math.log(a[k] / b[k]) for k in keys], dtype=np.float64)
    work = _work(metric, before, after, keys, sign)
    time_part = trimmed(ratios - work)
    exact = float(work.mean())
    split = f"; work (steps per token) {percent(math.expm1(exact))}, exact" if work.any() else ""
    variance, df, instances = _instance_variance(before, after, keys, ratios - work, time_part.se, instance_spread)
    return Estimate(
        estimate=exact + time_part.estimate,
        se=math.sqrt(time_part.se**2 + variance),
        df=time_part.df if df is None else df,
        n=len(keys),
        before=float(np.mean([b[k] for k in keys])),
        after=float(np.mean([a[k] for k in keys])),
        how=f"{how}, {len(keys)} units, 20 % trimmed mean{split}{instances}",
        spread=time_part.spread,
        work=exact,
        clock=clock,
        units=dict(zip(keys, (ratios - work).tolist(), strict=True)),
    )


def _instance_variance(
    before: ArmSamples, after: ArmSamples, keys: Sequence[str], values: np.ndarray, se: float, spread: float
) -> tuple[float, float | None, str]:
    """The variance an engine instance adds to a comparison of arms served by different instances, the degrees of
    freedom when the data had to estimate it, and the words for `how`.

    Units served by the same pair of instances share one instance difference η = u_cand − u_ref, Var η = 2σ²
    (σ the relative spread between instances); over K such pairs the mean's share is 2σ²/K. σ is the profile's
    `instance_spread` (measured beforehand); with ≥ 3 instance pairs the data estimate it too (the between-pair
    variance of their means less the within-pair part), and the larger of the two is used (its K − 1 degrees of
    freedom then)."""
    mine = {s.key: s.instance for s in before.latest().samples}
    theirs = {s.key: s.instance for s in after.latest().samples}
    pairs = [(mine.get(k, ""), theirs.get(k, "")) for k in keys]
    if all(b == a for b, a in pairs):
        served = list(dict.fromkeys(b for b, _ in pairs if b))  # in the order they served
        return 0.0, None, f"; one instance for both in each unit ({', '.join(served)})" if served else ""
    groups: dict[tuple[str, str], list[float]] = {}
    for pair, value in zip(pairs, values, strict=True):
        groups.setdefault(pair, []).append(float(value))
    k = len(groups)
    declared = 2 * math.log1p(spread) ** 2 / k
    estimated: float = 0.0
    df: float | None = None
    if k >= 3:
        means = np.asarray([np.mean(v) for v in groups.values()])
        within = (se**2) * len(values) / float(np.mean([len(v) for v in groups.values()]))
        estimated = max(0.0, float(np.var(means, ddof=1)) - within) / k
        if estimated > declared:
            df = float(k - 1)
    variance = max(declared, estimated)
    words = (
        f"; {k} instance pair(s) (candidate {len({p[1] for p in pairs})}, reference {len({p[0] for p in pairs})}), "
        f"their spread folded in (±{math.sqrt(variance) * 100:.1f} %)"
    )
    return variance, df, words


def tail(
    metric: Metric,
    before: ArmSamples,
    after: ArmSamples,
    *,
    q: float = 99.0,
    resamples: int,
    seed: int = 0,
    how: str = "paired permutation test",
    clock: Clock = "wall",
) -> Estimate:
    """The q-th percentile, `after` against `before`: the log ratio of the two percentiles, tested with a paired
    permutation test (within each prompt#round unit the two labels are swapped at random, which is exact when the
    configurations do not differ; the bootstrap of an extreme percentile is not). The p-value's resolution is
    1/(resamples + 1): give resamples ≥ 20 / α. The permutations stop early once `STOP_AFTER` of them were at least
    as extreme as the observed change (Besag and Clifford's sequential p-value, h / l: a change that is clearly
    not significant needs a few hundred permutations, not thousands). `se` is the spread of the permutation
    distribution, for the MDE."""
    name = metric.source(clock)
    b, a = _by_key(before, name), _by_key(after, name)
    keys = sorted(set(b) & set(a))
    if len(keys) < 4:
        raise ValueError(f"{metric.name}: {len(keys)} prompt#round keys in common; a percentile needs at least 4")
    xb, xa = np.asarray([b[k] for k in keys]), np.asarray([a[k] for k in keys])
    # with the permutations' own arithmetic: the unswapped ones reproduce it bit for bit, and must count as extreme
    observed = float(np.log(_percentile_rows(xa[None, :], q) / _percentile_rows(xb[None, :], q))[0])
    sign = -1.0 if metric.higher_is_better else 1.0
    rng = np.random.default_rng(seed)
    chunk = max(1, min(PERMUTATION_CHUNK, (1 << 22) // len(keys)))
    null: list[np.ndarray] = []
    done = extreme = 0
    while done < resamples and extreme < STOP_AFTER:
        swap = rng.random((min(chunk, resamples - done), len(keys))) < 0.5
        pa, pb = np.where(swap, xb, xa), np.where(swap, xa, xb)
        values = np.log(_percentile_rows(pa, q) / _percentile_rows(pb, q))
        null.append(values)
        done += len(values)
        extreme += int(np.count_nonzero(sign * values >= sign * observed))
    spread = np.concatenate(null)
    p_value = extreme / done if extreme >= STOP_AFTER else (1.0 + extreme) / (done + 1.0)
    stopped = f", stopped after {done:,}: clearly not significant" if done < resamples else ""
    return Estimate(
        estimate=sign * observed,
        se=float(np.std(spread, ddof=1)),
        df=math.inf,
        n=len(keys),
        before=float(np.percentile(xb, q)),
        after=float(np.percentile(xa, q)),
        how=f"{how} of {len(keys)} units ({resamples:,} permutations{stopped})",
        p_value=p_value,
        clock=clock,
    )


def _percentile_rows(x: np.ndarray, q: float) -> np.ndarray:
    """numpy's linear-interpolation percentile of each row, from the two order statistics it needs (a partial sort:
    O(n) per row instead of a full one)."""
    n = x.shape[1]
    position = q / 100.0 * (n - 1)
    low = math.floor(position)
    high = min(low + 1, n - 1)
    parts = np.partition(x, [low, high], axis=1)
    weight = position - low
    result: np.ndarray = parts[:, low] * (1.0 - weight) + parts[:, high] * weight
    return result


def _run_level(
    samples: ArmSamples, metric: Metric, plain: ArmSamples | None, keys: Sequence[str], clock: Clock
) -> float:
    """One run's summary on the log scale: the trimmed mean log value over `keys` (the P99's log for tails)."""
    values = _values(samples, metric, plain, clock)
    if metric.kind == "tail":
        return math.log(float(np.percentile([values[k] for k in keys], 99.0)))
    return trimmed([math.log(values[k]) for k in keys]).estimate


def history(
    metric: Metric,
    runs: Sequence[tuple[ArmSamples, ArmSamples | None]],
    current: tuple[ArmSamples, ArmSamples | None],
    clock: Clock = "wall",
) -> Estimate:
    """The current run against the runs of the same machine, with the between-run spread (≥ 2 runs).

    `runs` and `current` are (the arm's samples, its plain arm's samples for the speedup)."""
    if len(runs) < 2:
        raise ValueError(f"{metric.name}: a between-run spread needs at least 2 stored runs, got {len(runs)}")
    keys = set(_values(current[0], metric, current[1], clock))
    for arm, plain in runs:
        keys &= set(_values(arm, metric, plain, clock))
    common = sorted(keys)
    if len(common) < 2:
        raise ValueError(f"{metric.name}: the stored runs and this run share {len(common)} prompt#round keys")
    sign = -1.0 if metric.higher_is_better else 1.0
    levels = np.asarray([_run_level(arm, metric, plain, common, clock) for arm, plain in runs])
    now = _run_level(current[0], metric, current[1], common, clock)
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
        clock=clock,
    )


def acceptance_drop(before: ArmSamples, after: ArmSamples, positions: int | None = None) -> Estimate:
    """Relative drop of the pooled acceptance rate (positive = `after` accepts less), its standard error a
    jackknife over the prompts both runs share, paired by prompt (a prompt's verification steps are one cluster;
    its rounds repeat the same greedy counts). With `positions`, the rate over the first that many draft positions
    only (each step's drafted and accepted counts capped there): two draft lengths compared on the positions both
    draft, since a longer draft lowers the plain rate by construction. Raises ValueError when it cannot be
    computed."""

    def counts(sample: Sample) -> tuple[int, int]:
        if positions is None:
            return sample.accepted, sample.drafted
        if sample.drafted and not sample.drafted_at:
            raise ValueError(
                "the engine reported only total drafted and accepted tokens, not per verification step, so two "
                "draft lengths cannot be compared position by position"
            )
        return sum(sample.accepted_at[:positions]), sum(sample.drafted_at[:positions])

    def per_prompt(arm: ArmSamples) -> dict[str, tuple[int, int]]:
        totals: dict[str, tuple[int, int]] = {}
        latest = arm.latest().samples
        first = min((s.repetition for s in latest), default=0)
        for sample in latest:
            if sample.repetition == first:
                acc, dra = totals.get(sample.prompt_id, (0, 0))
                accepted, drafted = counts(sample)
                totals[sample.prompt_id] = (acc + accepted, dra + drafted)
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
        how=f"jackknife over {n} prompts"
        + ("" if positions is None else f", on the first {positions} draft position(s) both drafted"),
        spread=se * math.sqrt(n),
        log_scale=False,
    )


def changed_outputs(before: ArmSamples, after: ArmSamples) -> tuple[list[str], list[str]]:
    """(the keys both have, the keys whose greedy outputs differ)."""
    old, new = before.outputs, after.outputs
    common = sorted(set(old) & set(new))
    return common, [k for k in common if old[k] != new[k]]
