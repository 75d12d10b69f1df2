"""The ladder's checks: each rung of a pair's `ladder:` against full precision (`specgate.ladder`).

`ladder_accuracy` blocks a rung whose task accuracy fell more than its `max_accuracy_drop` below full precision's
(the evidence: both accuracies, the paired drop with its 95 % CI, the exact McNemar test, the previous rung);
`ladder_perplexity` blocks one whose perplexity on long documents rose more than its `max_perplexity_rise`. Both
recommend rolling that rung back. `ladder_agreement` blocks a rung meant to be lossless whose greedy outputs differ
from full precision's beyond the drift SLA; `ladder_scored` blocks a rung that the run only times (no workload
selected scores it). A rung that does not pay is not a failure of the release: `ladder_advice` says it is not worth
it.
"""

from __future__ import annotations

from specgate.checks import DRIFT, Check, check
from specgate.config import SlaLimits
from specgate.evaluation import Evaluation
from specgate.ladder import NOT_WORTH_IT, LadderRow, accuracy_drop_is_real, too_few_answers


def _row(evaluation: Evaluation, arm: str) -> LadderRow | None:
    return next((r for r in evaluation.ladder if r.arm == arm), None)


def _ci(row: LadderRow) -> str:
    if row.accuracy_drop_ci is None:
        return ""
    low, high = row.accuracy_drop_ci
    return f", 95% CI {low * 100:+.1f}…{high * 100:+.1f} pts"


def ladder_accuracy(evaluation: Evaluation, arm: str) -> Check:
    """A rung may not lose more than its limit of task accuracy against full precision."""
    row, name = _row(evaluation, arm), "ladder_accuracy"
    details = {"ladder": True, "step": arm}
    if row is None or row.limits is None or row.accuracy is None or row.accuracy_drop is None:
        message = f"BLOCK: ladder step {arm!r} has no task accuracy to compare with full precision"
        return check(name, evaluation.where, DRIFT, False, message, arm=arm, details=details)
    limit = row.limits.max_accuracy_drop
    within = row.accuracy_drop <= limit + 1e-12
    real = accuracy_drop_is_real(row)
    passed = within or not real  # an undecided drop does not block: it says how many problems would decide it
    full = evaluation.ladder[0]
    mcnemar = (
        ""
        if row.mcnemar_p is None
        else f"; McNemar exact p={row.mcnemar_p:.2g}: {row.broken} broken, {row.fixed} fixed"
    )
    outcome, then = "", ""
    if not within:
        outcome = "ROLL BACK: " if real else "UNDECIDED (passes): "
        then = f"; roll back step {row.step} ({arm})" if real else f"; {too_few_answers(row)}"
    message = (
        f"{outcome}step {row.step} {arm} ({row.description}): accuracy {row.accuracy:.1%} vs full precision "
        f"{full.accuracy or 0:.1%}, drop {row.accuracy_drop * 100:.1f} pts{_ci(row)} {'≤' if within else '>'} max "
        f"{limit * 100:.1f} pts (n={row.accuracy_n}{mcnemar}){then}"
    )
    if not within and not real:
        details["undecided"] = True
    return check(
        name,
        evaluation.where,
        DRIFT,
        passed,
        message,
        observed=row.accuracy_drop,
        limit=limit,
        n=row.accuracy_n,
        ci=row.accuracy_drop_ci,
        baseline=full.accuracy,
        arm=arm,
        details=details,
    )


def ladder_perplexity(evaluation: Evaluation, arm: str) -> Check:
    """A rung may not raise perplexity on long documents by more than its limit."""
    row, name = _row(evaluation, arm), "ladder_perplexity"
    details = {"ladder": True, "step": arm}
    if row is None or row.limits is None or row.perplexity is None or row.perplexity_rise is None:
        message = f"BLOCK: ladder step {arm!r} has no perplexity to compare (does the engine score documents?)"
        return check(name, evaluation.where, DRIFT, False, message, arm=arm, details=details)
    limit = row.limits.max_perplexity_rise
    passed = row.perplexity_rise <= limit
    scored = evaluation.perplexity.get(arm)
    size = "" if scored is None else f" ({scored.documents} documents, {scored.tokens} tokens)"
    full = evaluation.ladder[0].perplexity or 0.0
    message = (
        f"step {row.step} {arm} ({row.description}): perplexity {row.perplexity:.3f} vs full precision {full:.3f}"
        f"{size}, rise {row.perplexity_rise:+.3f} {'≤' if passed else '>'} max {limit:.2f}"
        + ("" if passed else f"; roll back step {row.step} ({arm})")
    )
    return check(
        name,
        evaluation.where,
        DRIFT,
        passed,
        message,
        observed=row.perplexity_rise,
        limit=limit,
        baseline=full,
        arm=arm,
        details=details,
    )


def ladder_agreement(evaluation: Evaluation, arm: str, sla: SlaLimits) -> Check:
    """A rung meant to be lossless (speculation alone, or `lossless: true`) reproduces full precision's greedy
    outputs: the share of requests whose output differs may not exceed the drift SLA. Judged on every workload,
    a speed workload too: it needs no reference answers."""
    row, name = _row(evaluation, arm), "ladder_agreement"
    details = {"ladder": True, "step": arm}
    if row is None or row.agreement is None:
        message = f"BLOCK: ladder step {arm!r} has no output in common with full precision to compare"
        return check(name, evaluation.where, DRIFT, False, message, arm=arm, details=details)
    differ = 1.0 - row.agreement
    passed = differ <= sla.max_drift + 1e-12
    message = (
        f"step {row.step} {arm} ({row.description}) is meant to be lossless: {differ:.1%} of its greedy outputs "
        f"differ from full precision's {'≤' if passed else '>'} drift SLA {sla.max_drift:.1%}"
        + (
            ""
            if passed
            else f"; roll back step {row.step} ({arm}), or mark it `lossless: false` if it is not meant to be"
        )
    )
    return check(
        name, evaluation.where, DRIFT, passed, message, observed=differ, limit=sla.max_drift, arm=arm, details=details
    )


def ladder_scored(where: tuple[str, str], arm: str, scoring: list[str]) -> Check:
    """A rung is judged on task accuracy or perplexity somewhere in the run: on a workload that only times it, the
    run must also select one that scores it (`scoring`: the selected workloads with reference answers or
    `perplexity: true`), else a rung that answers every problem wrong would pass on its speed."""
    name, details = "ladder_scored", {"ladder": True, "step": arm, "unscored": not scoring}
    if scoring:
        message = f"ladder step {arm} is scored in this run on {', '.join(scoring)}; {where[1]} times it"
        return check(name, where, DRIFT, True, message, arm=arm, details=details)
    message = (
        f"BLOCK: ladder step {arm} not scored: {where[0]}/{where[1]} only times it, and this run selects no workload "
        "with reference answers (task:) or perplexity (perplexity: true) to judge what it costs — a rung that "
        "answered every problem wrong would pass on speed; add one to --workload"
    )
    return check(name, where, DRIFT, False, message, arm=arm, details=details)


def ladder_advice(evaluation: Evaluation) -> list[str]:
    """ "Not worth it" for each rung that does not pay on this workload."""
    pair, workload = evaluation.where
    return [
        f"ladder step {row.step} {row.arm} on {pair}/{workload} is not worth it: {'; '.join(row.reasons)} — drop it "
        "from the release, or measure it where it pays (longer sequences, more requests in flight)"
        for row in evaluation.ladder
        if row.verdict == NOT_WORTH_IT
    ]
