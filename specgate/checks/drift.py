"""Drift checks: does speculation change what the model says?

- `greedy_identity`: greedy speculative decoding is lossless, so an arm's outputs must equal its plain-decoding
  arm's (drift within the SLA, default 0.3 %), with the first divergence and the target's logit margin there.
- `task_accuracy`: on workloads with reference answers, an arm's accuracy must not fall below its plain arm's by
  more than `max_accuracy_drop` (exact McNemar p-value as evidence).
- `content_flags`: the share of outputs a content checker flags (word list, regex) may not differ between an arm
  and its plain arm by more than the drift SLA (a workload opts in with `content:`).
- `sampled_distribution`: with sampling (temperature, top-p) the arm must draw its first tokens from the same
  distribution as plain decoding (a workload opts in with `sampling:`; `specgate.stats.distribution`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specgate.accuracy import compare_accuracy
from specgate.checks import DRIFT, Check, check
from specgate.config import SlaLimits
from specgate.evaluation import Evaluation
from specgate.stats.distribution import DistributionTest


def greedy_identity(evaluation: Evaluation, arm: str, sla: SlaLimits) -> Check:
    """Greedy speculative decoding is lossless: drift against the plain arm must stay within the SLA."""
    result = evaluation.losslessness[arm]
    ok = result.n > 0 and result.drift <= sla.max_drift
    if result.n == 0:
        message = "BLOCK: no request completed in both arms, so outputs cannot be compared"
    elif result.differing == 0:
        message = f"greedy output identical in {result.n}/{result.n} requests (drift 0 % ≤ {sla.max_drift:.1%})"
    else:
        first = result.divergences[0]
        message = (
            f"greedy drift {result.drift:.1%} > {sla.max_drift:.1%}: {result.differing}/{result.n} "
            f"requests differ; first: prompt {first.prompt_id!r} rep {first.repetition} at token "
            f"{first.position} ({result.against}: …{first.reference_excerpt}… vs "
            f"{arm}: …{first.candidate_excerpt}…; {first.explanation()})"
        )
    return check(
        "greedy_identity",
        evaluation.where,
        DRIFT,
        ok,
        message,
        observed=result.drift,
        limit=sla.max_drift,
        n=result.n,
        details={
            "divergences": [d.position for d in result.divergences],
            "margins": [d.margin for d in result.divergences if d.margin is not None],
        },
        arm=arm,
    )


def task_accuracy(evaluation: Evaluation, arm: str, sla: SlaLimits) -> Check:
    """Speculation must not cost task accuracy: the arm against its plain-decoding arm."""
    plain = evaluation.plan.baseline_of(arm) or evaluation.plan.plain
    reference, candidate = evaluation.accuracy.get(plain), evaluation.accuracy.get(arm)
    if reference is None or candidate is None:
        message = f"BLOCK: workload task {evaluation.task!r} gave no accuracy to compare"
        return check("task_accuracy", evaluation.where, DRIFT, False, message, arm=arm)
    passed, message = compare_accuracy(reference, candidate, sla.max_accuracy_drop)
    return check(
        "task_accuracy",
        evaluation.where,
        DRIFT,
        passed,
        f"{arm} vs {plain}: {message}",
        observed=candidate.accuracy,
        limit=sla.max_accuracy_drop,
        n=candidate.n,
        baseline=reference.accuracy,
        arm=arm,
    )


def content_flags(evaluation: Evaluation, arm: str, sla: SlaLimits, specs: Sequence[Mapping[str, Any]]) -> Check:
    """Every content checker flags the arm's outputs as often as its plain arm's, within the drift SLA."""
    from specgate.content import compare_flag_rates, flag_rates, load_checker

    plain = evaluation.plan.baseline_of(arm) or evaluation.plan.plain
    outputs = {
        name: [t.output_text for r in evaluation.measurement.runs[name] for t in r.traces if t.ok]
        for name in (plain, arm)
    }
    parts, passed, rates = [], True, {}
    for spec in specs:
        checker = load_checker(spec)
        rate = flag_rates(checker, outputs)
        ok, text = compare_flag_rates(
            rate[plain], rate[arm], sla.max_drift, n_reference=len(outputs[plain]), n_candidate=len(outputs[arm])
        )
        passed &= ok
        parts.append(f"{checker.name}: {text}")
        rates[checker.name] = {plain: rate[plain], arm: rate[arm]}
    return check(
        "content_flags",
        evaluation.where,
        DRIFT,
        passed,
        f"{arm} vs {plain}: " + "; ".join(parts),
        limit=sla.max_drift,
        details={"rates": rates},
        arm=arm,
    )


def sampled_distribution(where: tuple[str, str], arm: str, result: DistributionTest) -> Check:
    """Sampled decoding draws from the same distribution with and without speculation."""
    return check(
        "sampled_distribution",
        where,
        DRIFT,
        result.passed,
        result.message,
        observed=result.p_value,
        limit=result.alpha,
        details={"method": result.method, "tables": len(result.tables)},
        arm=arm,
    )
