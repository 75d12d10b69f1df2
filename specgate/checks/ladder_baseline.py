"""The ladder against the stored baseline: each step of this run against the same step as it was recorded
(`regression:ladder:<arm>`), so a later model or engine update is judged rung by rung, not only at the top.

A step's task accuracy may not fall more than its own `max_accuracy_drop` below its stored accuracy (the evidence:
both accuracies, n, the drop and the exact McNemar test on the prompts both scored, and the step's drop against full
precision now and in the baseline); its perplexity on long documents may not rise more than its own
`max_perplexity_rise` over the stored one. The step's speed gain over full precision and its verdict, now and as
stored, are shown beside them: they inform and do not decide (latency across runs is `no_regression`'s, judged on
this machine's history only). A baseline recorded without the step blocks and says how to record it (an update run
records it); one of another engine or dtype is not comparable, since kernels decide near-ties, and blocks like the
outputs do. Pure functions of the two records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specgate.accuracy import TaskAccuracy, compare_accuracy, mcnemar_p
from specgate.checks import NO_BASELINE, REGRESSION, UNUSABLE_BASELINE, Check, RegressionKey, baseline_key, check
from specgate.checks.subject import Subject
from specgate.hardware.fingerprint import Fingerprint
from specgate.ladder import LadderRow
from specgate.measure.perplexity import Perplexity
from specgate.plan import LadderStep
from specgate.store.records import RunRecord

# `details["outcome"]` of a ladder step without a stored counterpart, and of one this run did not score
NOT_RECORDED = "NOT RECORDED"
NOT_MEASURED = "NOT MEASURED"


def ladder_key(arm: str) -> RegressionKey:
    """The check's key for ladder step `arm`: `regression:ladder:<arm>`."""
    return baseline_key(f"ladder:{arm}")


@dataclass(frozen=True, slots=True)
class Comparison:
    """One comparison of a step with its stored self: whether it holds, in words, and its numbers."""

    passed: bool
    text: str
    observed: float | None
    limit: float
    details: Mapping[str, float | int | None]


def ladder_vs_baseline(subject: Subject, *, update: bool, hardware: str) -> dict[RegressionKey, Check]:
    """One `regression:ladder:<arm>` check per ladder step of the plan (none without a ladder)."""
    plan, record, baseline = subject.plan, subject.record, subject.baseline
    results: dict[RegressionKey, Check] = {}
    for step in plan.ladder:
        if baseline is None:
            result = _no_baseline(subject, step.arm, update, hardware)
        elif isinstance(baseline, Exception):
            result = _check(subject, step.arm, False, f"BLOCK: {baseline}", UNUSABLE_BASELINE)
        else:
            latest = baseline.latest_comparable(record.fingerprint)
            if latest is None:
                result = _not_comparable(subject, step.arm, baseline.machines())
            else:
                result = step_vs_stored(subject, step, latest, update=update)
        results[ladder_key(step.arm)] = result
    return results


def step_vs_stored(subject: Subject, step: LadderStep, stored: RunRecord, *, update: bool) -> Check:
    """Step `step.arm` of this run against the same step of the stored run `stored`."""
    record, arm = subject.record, step.arm
    now, then = _row(record, arm), _row(stored, arm)
    head = f"step {now.step if now else '?'} {arm}" + (f" ({now.description})" if now else "")
    accuracy, stored_accuracy = record.accuracy.get(arm), stored.accuracy.get(arm)
    perplexity, stored_perplexity = record.perplexity.get(arm), stored.perplexity.get(arm)
    sides = (("task accuracy", accuracy, stored_accuracy), ("perplexity", perplexity, stored_perplexity))
    missing = [what for what, mine, theirs in sides if mine is not None and theirs is None]
    if (now is not None and then is None) or missing:
        without = f"ladder step {arm}" if then is None else f"the {' or '.join(missing)} of ladder step {arm}"
        recorded = f"the baseline was recorded without {without}"
        if update:
            message = f"update run: {recorded}; this run records it [baseline {subject.source}]"
            return _check(subject, arm, True, message, "UPDATE")
        message = (
            f"BLOCK: {head}: {recorded} — record it (pytest suites/ --hardware={record.hardware} --pair={record.pair} "
            f"--update-baselines) [baseline {subject.source}]"
        )
        return _check(subject, arm, False, message, NOT_RECORDED)
    unscored = [what for what, mine, theirs in sides if mine is None and theirs is not None]
    if unscored:
        message = (
            f"BLOCK: {head}: this run scored no {' or '.join(unscored)} for ladder step {arm}, the baseline did "
            f"(does the engine score it?) [baseline {subject.source}]"
        )
        return _check(subject, arm, False, message, NOT_MEASURED)
    comparisons = []
    if accuracy is not None and stored_accuracy is not None:
        comparisons.append(_accuracy(accuracy, stored_accuracy, step, now, then))
    if perplexity is not None and stored_perplexity is not None:
        comparisons.append(_perplexity(perplexity, stored_perplexity, step))
    passed = all(c.passed for c in comparisons)
    compared = "; ".join(c.text for c in comparisons) or "no task accuracy or perplexity on this workload to compare"
    outcome = "PASS" if passed else "BLOCK"
    message = (
        f"{'' if passed else 'REGRESSED: '}{head} against its stored self: {compared}; {_information(now, then)} "
        f"[baseline {subject.source}]"
    )
    first = comparisons[0] if comparisons else None
    details: dict[str, object] = {}
    for c in comparisons:
        details.update(c.details)
    return _check(
        subject,
        arm,
        passed,
        message,
        outcome,
        observed=None if first is None else first.observed,
        limit=None if first is None else first.limit,
        n=None if accuracy is None else accuracy.n,
        baseline=None if stored_accuracy is None else stored_accuracy.accuracy,
        more=details,
    )


def _accuracy(
    now: TaskAccuracy, then: TaskAccuracy, step: LadderStep, row: LadderRow | None, stored: LadderRow | None
) -> Comparison:
    """Task accuracy against the stored step's, within the step's `max_accuracy_drop`, with the paired evidence."""
    limit = step.limits.max_accuracy_drop
    if now.task != then.task:
        text = f"task accuracy not comparable: the baseline scored task {then.task!r}, this run {now.task!r}"
        return Comparison(False, text, None, limit, {})
    passed, text = compare_accuracy(then, now, limit)
    test = mcnemar_p(then, now)
    full_now = None if row is None else row.accuracy_drop
    full_then = None if stored is None else stored.accuracy_drop
    text += f"; drop vs full precision {_points(full_now)} now, {_points(full_then)} in the baseline"
    details: dict[str, float | int | None] = {
        "accuracy": now.accuracy,
        "baseline_accuracy": then.accuracy,
        "accuracy_drop": then.accuracy - now.accuracy,
        "mcnemar_p": None if test is None else test[0],
        "broken": None if test is None else test[3],
        "fixed": None if test is None else test[2],
    }
    return Comparison(passed, text, then.accuracy - now.accuracy, limit, details)


def _perplexity(now: Perplexity, then: Perplexity, step: LadderStep) -> Comparison:
    """Perplexity on long documents against the stored step's, within the step's `max_perplexity_rise`."""
    limit = step.limits.max_perplexity_rise
    rise = now.value - then.value
    passed = rise <= limit
    text = (
        f"perplexity {now.value:.3f} vs baseline {then.value:.3f} ({now.documents} documents, {now.tokens} tokens; "
        f"baseline {then.documents}, {then.tokens}): rise {rise:+.3f} {'≤' if passed else '>'} max {limit:.2f}"
    )
    details: dict[str, float | int | None] = {
        "perplexity": now.value,
        "baseline_perplexity": then.value,
        "perplexity_rise": rise,
    }
    return Comparison(passed, text, rise, limit, details)


def _information(now: LadderRow | None, then: LadderRow | None) -> str:
    """The step's speed gain over full precision and its verdict, now and in the baseline (shown, not judged)."""
    gain_now = None if now is None else now.speed_gain_full
    gain_then = None if then is None else then.speed_gain_full
    speed = f"speed gain over full precision {_times(gain_now)} now, {_times(gain_then)} in the baseline"
    verdict_now = "?" if now is None else now.verdict
    verdict_then = "?" if then is None else then.verdict
    verdict = (
        f"verdict {verdict_now}, as in the baseline"
        if verdict_now == verdict_then
        else f"verdict was {verdict_then}, now {verdict_now}"
    )
    return f"{speed}, {verdict} (speed is judged across runs by no_regression, not here)"


def _points(drop: float | None) -> str:
    return "–" if drop is None else f"{drop * 100:.1f} pts"


def _times(gain: float | None) -> str:
    return "–" if gain is None else f"{gain:.2f}×"


def _row(record: RunRecord, arm: str) -> LadderRow | None:
    return next((r for r in record.ladder if r.arm == arm), None)


def _check(
    subject: Subject,
    arm: str,
    passed: bool,
    message: str,
    outcome: str,
    *,
    more: dict[str, object] | None = None,
    observed: float | None = None,
    limit: float | None = None,
    n: int | None = None,
    baseline: float | None = None,
) -> Check:
    plan = subject.plan
    details = {"ladder": True, "step": arm, "outcome": outcome, **(more or {})}
    return check(
        ladder_key(arm).name,
        (plan.pair, plan.workload),
        REGRESSION,
        passed,
        message,
        observed=observed,
        limit=limit,
        n=n,
        baseline=baseline,
        details=details,
        arm=arm,
    )


def _no_baseline(subject: Subject, arm: str, update: bool, hardware: str) -> Check:
    """Like the other `regression:*` checks without a stored baseline: an update run records one, else it blocks."""
    plan = subject.plan
    if update:
        message = f"update run: no comparison; the baseline is written to {subject.source} at the end of the session"
        return _check(subject, arm, True, message, "UPDATE")
    message = (
        f"BLOCK: no baseline for {hardware}/{plan.pair}/{plan.workload} ({subject.source}) — run the reference "
        "build with --update-baselines"
    )
    return _check(subject, arm, False, message, NO_BASELINE)


def _not_comparable(subject: Subject, arm: str, machines: list[Fingerprint]) -> Check:
    """No stored run of this engine and dtype: a step's accuracy and perplexity depend on the kernels, so they are
    not compared with another engine's (it blocks whatever `latency_baseline` says: they are not latency)."""
    record = subject.record
    stacks = ", ".join(sorted({f"{f.engine} ({f.dtype})" for f in machines}))
    mine = record.fingerprint
    reason = f"the baseline was recorded with {stacks}; this run uses {mine.engine} ({mine.dtype})" if mine else ""
    engine = f" --engine={record.engine}" if record.engine else ""
    message = (
        f"BLOCK: ladder step {arm} not comparable — {reason} — record one with it (pytest suites/ "
        f"--hardware={record.hardware} --pair={subject.plan.pair}{engine} --update-baselines) [baseline "
        f"{subject.source}]"
    )
    return _check(subject, arm, False, message, "NOT COMPARABLE", more={"what": "ladder"})
