"""Regression checks: the candidate against the reference measured beside it, or against this machine's baselines.

Every latency comparison ends PASS, BLOCK or UNKNOWN (`specgate.stats.decision`) and says the smallest slowdown it
would have caught. Names: `reference:<metric>` against the reference arm measured in the same run (reference mode),
`regression:<metric>` against the stored baseline. Metric keys are `ttft_ms`, `tpot_ms`, `e2el_ms`, `p99_ttft_ms`,
`speedup` and `acceptance_rate` for the released arm `spec`, prefixed with the arm for others (`ar.tpot_ms`).

Levels: an UNKNOWN may be decided by more rounds, so a comparison is looked at up to `looks` times; PASS holds its
upper bound at α / looks, BLOCK its significance at α / (looks × family), family being the number of groups of
latency comparisons of the run: the mean comparisons of one candidate arm against its reference (TTFT, TPOT, E2EL,
the speedup: nearly the same statistic several times) share one level through the max-t method
(`specgate.stats.simultaneous`), and each arm's P99 comparison is a group of its own. An unchanged configuration
therefore ends REGRESSED with probability ≤ α, and a slowdown beyond the tolerance passes a comparison with
probability ≤ α (a release passes only when every comparison passes, so no split is needed on that side).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass

from specgate.accuracy import TaskAccuracy, compare_accuracy
from specgate.checks import DRIFT, REGRESSION, Against, Check, RegressionKey, check
from specgate.checks.family import family_significance
from specgate.comparison import (
    ACCEPTANCE,
    METRICS,
    PLAIN_METRICS,
    SPECULATIVE_METRICS,
    Estimate,
    Metric,
    changed_outputs,
    metric_key,
    split_key,
)
from specgate.config import SlaLimits
from specgate.evaluation import first_divergence
from specgate.measure.samples import ArmSamples
from specgate.plan import MeasurementPlan
from specgate.stats.decision import Decision, decide, percent

Where = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Levels:
    """The error levels of one look at one comparison (see the module docstring)."""

    alpha: float
    looks: int = 1
    family: int = 1

    @property
    def alpha_pass(self) -> float:
        return self.alpha / max(1, self.looks)

    @property
    def alpha_block(self) -> float:
        return self.alpha / (max(1, self.looks) * max(1, self.family))


def latency_keys(plan: MeasurementPlan, *, beside: bool) -> tuple[str, ...]:
    """The latency and acceptance metric keys compared for a plan: beside the reference arms, or against the stored
    baseline (every candidate arm)."""
    arms = [plan.arm(a) for a, _ in plan.beside] if beside else list(plan.candidates)
    keys: list[str] = []
    for arm in arms:
        metrics = [m.name for m in SPECULATIVE_METRICS] + [ACCEPTANCE] if arm.speculative else [PLAIN_METRICS[0].name]
        keys += [metric_key(name, arm.name, plan.released) for name in metrics]
    return tuple(keys)


def judged_beside(plan: MeasurementPlan, arm: str) -> bool:
    """Whether a speculative candidate arm's acceptance is judged beside a speculative reference arm
    (`reference:acceptance_rate`): the released draft measured in the same run, on the same timed prompts and, while
    undecided, over the same acceptance pool, in the same runtime."""
    reference = dict(plan.beside).get(arm)
    return reference is not None and plan.arm(arm).speculative and plan.arm(reference).speculative


def stored_keys(plan: MeasurementPlan) -> tuple[str, ...]:
    """The metrics compared with the stored baseline (`regression:*`). Without a reference: every latency metric
    and acceptance. In reference mode latency is judged beside the reference, and so is the acceptance of an arm
    with a speculative reference arm beside it: the stored run holds only the prompts it measured (its timed ones,
    unless it needed the pool), so a new draft compared with it on those could never be told from the old one
    while the comparison beside the reference extends both arms over the pool. Only the acceptance of an arm with
    no speculative reference arm beside it is compared with the stored baseline."""
    keys = latency_keys(plan, beside=False)
    if plan.reference is None:
        return keys
    kept = []
    for key in keys:
        arm, name = split_key(key, plan.released)
        if name == ACCEPTANCE and not judged_beside(plan, arm):
            kept.append(key)
    return tuple(kept)


def statistical(key: str) -> bool:
    """Whether a key's comparison counts in the run's family (latency, tail, speedup; not acceptance)."""
    return split_key(key)[1] in METRICS or split_key(key)[1] == "tpot_ms"


def groups(keys: tuple[str, ...], released: str = "spec") -> int:
    """How many groups of the run's family `keys` make: per arm, its mean comparisons and its tail, each one."""
    found = set()
    for key in keys:
        if statistical(key):
            arm, name = split_key(key, released)
            found.add((arm, METRICS[name].kind == "tail" if name in METRICS else False))
    return len(found)


def _fmt(value: float, unit: str) -> str:
    if unit == "×":
        return f"{value:.2f}×"
    return f"{value:,.1f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


def decision_text(decision: Decision, estimate: Estimate, tolerance: float, levels: Levels) -> str:
    """The outcome in words, with the interval, the MDE (per look) and, for UNKNOWN, what would decide it."""
    change, upper, mde = estimate.change(), estimate.change(decision.upper), estimate.change(decision.mde)
    caught = f"would catch ≥ {mde:.1%} at this look"
    if decision.outcome == "PASS":
        return (
            f"PASS: {percent(change)} worse at most {percent(upper)} ({1 - levels.alpha_pass:.1%} upper bound) < "
            f"tolerance {tolerance:.0%}; {caught}"
        )
    if decision.outcome == "BLOCK":
        return (
            f"REGRESSED: {percent(change)}, significantly worse (lower bound "
            f"{percent(estimate.change(decision.lower))}, "
            f"p={decision.p_value:.2g} ≤ α {levels.alpha_block:.2g}) and not within tolerance {tolerance:.0%} (upper "
            f"bound {percent(upper)}); {caught}"
        )
    return (
        f"UNKNOWN: {percent(change)}, upper bound {percent(upper)} ≥ tolerance {tolerance:.0%} and not significant "
        f"(p={decision.p_value:.2g} > α {levels.alpha_block:.2g}); {caught}"
    )


def latency_check(
    name: str,
    where: Where,
    metric: Metric,
    estimate: Estimate,
    tolerance: float,
    levels: Levels,
    against: str,
    *,
    arm: str,
    units_per_round: int | None = None,
    budget: str = "",
    undecided: Callable[[Decision, Estimate], str] | None = None,
    family: tuple[float, float] | None = None,
    interference: str = "",
) -> Check:
    """A latency-type comparison decided and turned into its check. `undecided` says what would decide an UNKNOWN
    (default: the rounds or units the observed spread needs); `family` is (max-t critical value, adjusted p-value)
    when the comparison shares its level with others on the same units; `interference` names how busy the machine
    was (said with an UNKNOWN)."""
    decision = decide(
        estimate.estimate,
        estimate.se,
        estimate.df,
        threshold=math.log1p(tolerance),
        alpha_block=levels.alpha_block,
        alpha_pass=levels.alpha_pass,
        n=estimate.n,
        spread=estimate.spread,
        p_value=estimate.p_value if family is None else family[1],
        t_block=None if family is None else family[0],
    )
    label = metric.name.upper() if metric.kind == "tail" else metric.name
    outcome = decision.outcome
    if outcome == "UNKNOWN" and metric.kind == "tail":
        # a percentile of a few dozen requests cannot be bounded within a few percent: tails are compared for
        # detection only (BLOCK when significantly worse beyond the tolerance), with what they would catch
        outcome = "PASS"
        text = (
            f"PASS (detection only): {percent(estimate.change())}, not significantly worse (p={decision.p_value:.2g}); "
            f"a percentile of {estimate.n} units cannot be bounded within {tolerance:.0%}: would catch ≥ "
            f"{estimate.change(decision.mde):.1%}"
        )
    else:
        text = decision_text(decision, estimate, tolerance, levels)
    if outcome == "UNKNOWN":
        more = undecided(decision, estimate) if undecided else _what_would_decide(decision, units_per_round, budget)
        text = "BLOCK: " + text + (f" — {interference}" if interference else "") + more
    clock = " (CPU time)" if estimate.clock == "cpu" else ""
    message = (
        f"{text}. {label}{clock} {_fmt(estimate.before, metric.unit)} → {_fmt(estimate.after, metric.unit)}, "
        f"{estimate.how}, against {against}"
    )
    return check(
        name,
        where,
        REGRESSION,
        outcome == "PASS",
        message,
        observed=estimate.after,
        limit=tolerance,
        unit=metric.unit,
        n=estimate.n,
        ci=(estimate.change(decision.lower), estimate.change(decision.upper)),
        baseline=estimate.before,
        details={
            "outcome": outcome,
            "relative_change": estimate.change(),
            "mde": estimate.change(decision.mde),
            "p_value": decision.p_value,
            "alpha_block": levels.alpha_block,
            "alpha_pass": levels.alpha_pass,
            "looks": levels.looks,
            "family": levels.family,
            "units_needed": decision.units_needed,
            "against": against,
            "method": estimate.how,
            "clock": estimate.clock,
            "work": estimate.work,
            "spread": estimate.spread,
            "interference": interference,
        },
        arm=arm,
    )


def _what_would_decide(decision: Decision, units_per_round: int | None, budget: str) -> str:
    if decision.units_needed is None:
        return f" — more data needed{budget}"
    if units_per_round:
        rounds = math.ceil(decision.units_needed / units_per_round)
        return f" — the observed spread needs ≈ {rounds} rounds ({decision.units_needed} units){budget}"
    return f" — the observed spread needs ≈ {decision.units_needed} units{budget}"


def output_drift_check(
    name: str,
    where: Where,
    before: ArmSamples | None,
    after: ArmSamples | None,
    same_models: bool,
    sla: SlaLimits,
    against: str,
    *,
    arm: str,
) -> Check:
    """Greedy outputs against the other side's. With the same model files they must not drift beyond the SLA
    (greedy decoding is deterministic); with other files drift is expected and reported, and accuracy decides."""
    if before is None or after is None:
        return check(name, where, REGRESSION, False, f"BLOCK: no outputs to compare [{against}]", arm=arm)
    common, changed = changed_outputs(before, after)
    share = len(changed) / len(common) if common else 1.0
    ok = bool(common) and (share <= sla.max_drift or not same_models)
    detail = ""
    if changed:
        old, new = before.outputs, after.outputs
        first = changed[0]
        similarity = sum(difflib.SequenceMatcher(None, old[k], new[k]).ratio() for k in changed) / len(changed)
        detail = (
            f"; first: {first} at token {first_divergence(old[first], new[first])}; mean token similarity of changed "
            f"outputs {similarity:.2f}"
        )
    reason = (
        "same model files: greedy outputs must match"
        if same_models
        else "other model files: drift expected, task accuracy decides"
    )
    message = (
        f"outputs: {len(changed)}/{len(common)} requests changed ({share:.1%}, SLA {sla.max_drift:.1%}; {reason})"
        f"{detail} [{against}]"
    )
    return check(
        name,
        where,
        REGRESSION if same_models else DRIFT,
        ok,
        message,
        observed=share,
        limit=sla.max_drift,
        n=len(common),
        details={"same_models": same_models},
        arm=arm,
    )


def accuracy_check(
    name: str,
    where: Where,
    before: TaskAccuracy | None,
    after: TaskAccuracy | None,
    sla: SlaLimits,
    against: str,
    *,
    arm: str,
) -> Check:
    """Task accuracy must not fall more than `max_accuracy_drop` (absolute) below the other side's."""
    if before is None or after is None:
        message = (
            f"BLOCK: no task accuracy to compare ({against} has {'none' if before is None else 'one'}; this run "
            f"{'none' if after is None else 'one'})"
        )
        return check(name, where, REGRESSION, False, message, arm=arm)
    passed, message = compare_accuracy(before, after, sla.max_accuracy_drop)
    return check(
        name,
        where,
        REGRESSION,
        passed,
        f"{message} [{against}]",
        observed=after.accuracy,
        limit=sla.max_accuracy_drop,
        n=after.n,
        baseline=before.accuracy,
        arm=arm,
    )


Compare = Callable[[Metric, str], Estimate]


def metric_checks(
    side: Against,
    where: Where,
    keys: tuple[str, ...],
    released: str,
    estimate: Compare,
    sla: SlaLimits,
    levels: Levels,
    against: Callable[[str], str],
    *,
    units_per_round: int | None = None,
    budget: str = "",
    undecided: Callable[[Decision, Estimate], str] | None = None,
    interference: str = "",
) -> dict[RegressionKey, Check | Exception]:
    """The latency checks of `keys` (acceptance excluded), each from `estimate(metric, arm)`, by check key; the
    mean comparisons of each arm share their level (`family_significance`)."""
    results: dict[RegressionKey, Check | Exception] = {}
    estimates: dict[str, tuple[Metric, str, Estimate]] = {}
    for key in keys:
        arm, name = split_key(key, released)
        if name == ACCEPTANCE:
            continue
        metric = METRICS.get(name) or next(m for m in PLAIN_METRICS if m.name == name)
        try:
            estimates[key] = (metric, arm, estimate(metric, arm))
        except (ValueError, KeyError) as exc:
            found = RegressionKey(side, key)
            results[found] = ValueError(f"{found.name} cannot be compared: {exc}")
    shared: dict[str, tuple[float, float]] = {}
    for arm in dict.fromkeys(a for _, a, _ in estimates.values()):
        means = {k: e for k, (m, a, e) in estimates.items() if a == arm and m.kind != "tail"}
        critical_t, adjusted = family_significance(means, levels.alpha_block)
        shared.update({k: (critical_t, p) for k, p in adjusted.items()})
    for key, (metric, arm, value) in estimates.items():
        found = RegressionKey(side, key)
        results[found] = latency_check(
            found.name,
            where,
            metric,
            value,
            sla.regression_tolerance,
            levels,
            against(arm),
            arm=arm,
            units_per_round=units_per_round,
            budget=budget,
            undecided=undecided,
            family=shared.get(key),
            interference=interference,
        )
    return results
