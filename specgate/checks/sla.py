"""SLA checks: every gated arm must meet the hardware profile's limits, and speculation must pay.

`samples` (fail closed on failed or too few requests), `p99_ttft`, `decode_rate`, `speedup` (measured S against
the minimum, with the predicted S beside it), `acceptance_rate` (the rollback floor), and `recommendations`: the
rollback advice of the gate policy for the arms that miss it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from specgate.checks import INFRASTRUCTURE, SLA, Check, check
from specgate.checks.draft_length import draft_length_advice
from specgate.checks.tail import Tail, ttft_tail
from specgate.config import SlaLimits
from specgate.evaluation import Evaluation
from specgate.measure.metrics import ArmSummary, Speedup

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from specgate.checks import Evidence


def _ci(ci: tuple[float, float] | None, fmt: str = ".0f", unit: str = "", missing: str | None = None) -> str:
    if ci is None:
        return ""
    if not all(math.isfinite(x) for x in ci):
        return f", no CI: {missing or 'no spread to resample'}"
    return f", 95% CI {ci[0]:{fmt}}–{ci[1]:{fmt}}{unit}"


def _check(
    name: str, where: tuple[str, str], category: str = SLA, *, passed: bool, message: str, **evidence: Unpack[Evidence]
) -> Check:
    return check(name, where, category, passed, message, **evidence)


def _samples(where: tuple[str, str], summaries: Sequence[ArmSummary], min_samples: int) -> Check:
    """Fail closed: every arm needs at least `min_samples` completed requests and no failed ones."""
    problems = []
    for s in summaries:
        completed = s.n_requests - s.n_failed
        if s.n_failed:
            causes = "; ".join(f"{count}× {reason}" for reason, count in sorted(s.errors.items()))
            problems.append(f"arm {s.arm}: {s.n_failed} of {s.n_requests} requests failed ({causes})")
        if completed < min_samples:
            problems.append(f"arm {s.arm}: {completed} completed requests < {min_samples} required")
    fewest = min((s.n_requests - s.n_failed for s in summaries), default=0)
    if problems:
        message = "BLOCK: cannot measure reliably: " + "; ".join(problems)
    else:
        message = f"every arm has ≥ {min_samples} completed requests and none failed"
    return _check(
        "samples",
        where,
        INFRASTRUCTURE,
        passed=not problems,
        message=message,
        observed=float(fewest),
        limit=float(min_samples),
        unit="requests",
        n=fewest,
    )


def _p99_ttft(where: tuple[str, str], summary: ArmSummary, tail: Tail, sla: SlaLimits) -> Check:
    """P99 TTFT of the arm to be released must stay within the SLA, on the units measured without interference
    (`specgate.checks.tail`)."""
    ttft = summary.ttft_ms
    if ttft is None or tail.p99 is None:
        return _check("p99_ttft", where, passed=False, message=f"BLOCK: no TTFT measured in arm {summary.arm}")
    limit = sla.p99_ttft_ms
    p99 = tail.p99
    ok = p99 <= limit
    units = f"n={tail.n_clean} clean of {tail.n_all}" if tail.measured else f"n={tail.n_all}"
    others = ""
    if tail.measured and tail.n_clean < tail.n_all and tail.p99_all is not None:
        others = f"; with the {tail.n_all - tail.n_clean} measured under interference P99 {tail.p99_all:.0f} ms"
    sign = "≤" if ok else ">"
    head = f"P99 TTFT {p99:.0f} ms {sign} SLA {limit:.0f} ms"
    if not tail.enough_clean and not ok:
        head = (
            f"BLOCK: UNKNOWN: P99 TTFT {p99:.0f} ms > SLA {limit:.0f} ms over all units, but only {tail.n_clean} of "
            f"{tail.n_all} were measured without interference — {tail.busy_text or 'the machine was busy'}: not "
            "the configuration's to answer for; rerun on a quieter runner"
        )
    message = f"{head} (arm {summary.arm}, {units}; mean {ttft.mean:.0f} ms{others})"
    return _check(
        "p99_ttft",
        where,
        passed=ok,
        message=message,
        observed=p99,
        limit=limit,
        unit="ms",
        n=tail.n_clean if tail.enough_clean else tail.n_all,
        details={
            "p99_all_ms": tail.p99_all,
            "p99_clean_ms": tail.p99_clean,
            "clean_units": tail.n_clean,
            "units": tail.n_all,
            "outcome": "PASS" if ok else ("UNKNOWN" if not tail.enough_clean else "BLOCK"),
        },
    )


def _decode_rate(where: tuple[str, str], summary: ArmSummary, sla: SlaLimits) -> Check:
    """Mean decode rate (1 / TPOT) of the arm to be released must reach the SLA."""
    rate = summary.decode_tokens_per_s
    if rate is None:
        return _check(
            "decode_rate", where, passed=False, message=f"BLOCK: no decode rate measured in arm {summary.arm}"
        )
    ok = rate.mean >= sla.min_decode_tokens_per_s
    sign = "≥" if ok else "<"
    message = (
        f"decode rate {rate.mean:.1f} tok/s {sign} SLA {sla.min_decode_tokens_per_s:.1f} tok/s "
        f"(arm {summary.arm}, n={rate.n}{_ci(rate.mean_ci, '.1f', ' tok/s')}; P50 {rate.p50:.1f})"
    )
    return _check(
        "decode_rate",
        where,
        passed=ok,
        message=message,
        observed=rate.mean,
        limit=sla.min_decode_tokens_per_s,
        unit="tok/s",
        n=rate.n,
        ci=rate.mean_ci,
    )


def _speedup(where: tuple[str, str], speedup: Speedup | None, sla: SlaLimits) -> Check:
    """Speculation must pay: measured S ≥ the limit."""
    if speedup is None:
        return _check("speedup", where, passed=False, message="BLOCK: speedup could not be measured (no paired runs)")
    ok = speedup.value >= sla.min_speedup
    sign = "≥" if ok else "<"
    predicted = "" if speedup.predicted is None else f"; predicted {speedup.predicted:.2f}×"
    cost = "" if speedup.cost_ratio is None else f", c={speedup.cost_ratio:.2f}"
    gamma = "" if speedup.gamma is None else f", γ={speedup.gamma}"
    message = (
        f"speedup S {speedup.value:.2f}× {sign} {sla.min_speedup:.2f}× ({speedup.arm} vs {speedup.reference}, "
        f"n={speedup.n_units} paired runs{_ci(speedup.ci, '.2f', '×', speedup.no_interval)}{predicted}{gamma}{cost})"
    )
    return _check(
        "speedup",
        where,
        passed=ok,
        message=message,
        observed=speedup.value,
        limit=sla.min_speedup,
        unit="×",
        n=speedup.n_units,
        ci=speedup.ci,
        details={"predicted": speedup.predicted, "gamma": speedup.gamma, "cost_ratio": speedup.cost_ratio},
    )


def _acceptance_rate(where: tuple[str, str], summary: ArmSummary, sla: SlaLimits) -> Check:
    """The acceptance rate α must reach the floor below which speculation is rolled back."""
    acceptance = summary.acceptance
    if acceptance is None or acceptance.rate is None:
        return _check(
            "acceptance_rate",
            where,
            passed=False,
            message=f"BLOCK: arm {summary.arm} reported no drafted tokens, so α cannot be measured",
        )
    ok = acceptance.rate >= sla.min_acceptance_rate
    sign = "≥" if ok else "<"
    per_pos = ", ".join(f"{p:.2f}" for p in acceptance.per_position[:8])
    message = (
        f"acceptance rate α {acceptance.rate:.3f} {sign} floor {sla.min_acceptance_rate:.2f} "
        f"({acceptance.accepted_tokens}/{acceptance.drafted_tokens} draft tokens in {acceptance.drafts} drafts, "
        f"τ={acceptance.mean_length or 0:.2f}, per position [{per_pos}], from {acceptance.source})"
    )
    return _check(
        "acceptance_rate",
        where,
        passed=ok,
        message=message,
        observed=acceptance.rate,
        limit=sla.min_acceptance_rate,
        unit="",
        n=acceptance.drafts,
    )


def _recommend(
    pair: str,
    hardware: str,
    speedup: Speedup | None,
    summary: ArmSummary | None,
    sla: SlaLimits,
    tails: tuple[Tail, Tail, Tail] | None = None,
) -> list[str]:
    """Rollback advice for one pair × workload (docs/configuration.md, "Gate policy"); `tails` are (the arm's, its
    plain arm's) TTFT tails: the P99 rule reads the clean units, and never sends a pair back to a plain decoding that
    was slower."""
    advice: list[str] = []
    reasons = []
    if speedup is not None and speedup.value < sla.min_speedup:
        reasons.append(f"S {speedup.value:.2f}× < {sla.min_speedup:.2f}×")
    rate = None if summary is None or summary.acceptance is None else summary.acceptance.rate
    if rate is not None and rate < sla.min_acceptance_rate:
        reasons.append(f"α {rate:.2f} < {sla.min_acceptance_rate:.2f}")
    if reasons and speedup is not None and speedup.value >= sla.min_speedup:
        # only the α floor: the rollback rule holds, and the speedup says what is at stake
        advice.append(
            f"turn speculation off for pair {pair!r} on hardware {hardware!r} ({reasons[0]}, the rollback floor), "
            f"although it still pays here (S {speedup.value:.2f}× ≥ {sla.min_speedup:.2f}×): the draft proposes "
            "more tokens than the target accepts — a shorter draft (num_tokens) may keep α above the floor"
        )
    elif reasons:
        advice.append(
            f"turn speculation off for pair {pair!r} on hardware {hardware!r} ({', '.join(reasons)}): "
            "speculation does not pay here; serve with plain decoding"
        )
    advice.extend(_tail_rollback(pair, hardware, summary, sla, tails))
    return advice


def _tail_rollback(
    pair: str, hardware: str, summary: ArmSummary | None, sla: SlaLimits, tails: tuple[Tail, Tail, Tail] | None
) -> list[str]:
    """`tails`: the arm's, its plain arm's, and the arm's on the kinds of request the plain arm had (full requests
    only when the plain arm had no TTFT probes), which is what the plain arm's tail is set beside."""
    limit = sla.rollback_latency_factor * sla.p99_ttft_ms
    mine = summary.ttft_ms.p99 if summary is not None and summary.ttft_ms is not None else None
    plain = alike = None
    if tails is not None:
        if not tails[0].enough_clean:
            return []  # a breach only interference shows: the p99_ttft check says so, no rollback
        mine, plain, alike = tails[0].p99, tails[1].p99, tails[2].p99
    if mine is None or mine <= limit:
        return []
    head = f"P99 TTFT {mine:.0f} ms > {sla.rollback_latency_factor:.1f} × SLA {sla.p99_ttft_ms:.0f} ms"
    if plain is not None and plain >= (mine if alike is None else alike):
        beside = "" if alike is None or alike == mine else f" against {alike:.0f} ms on its full requests alone"
        return [
            f"pair {pair!r} misses its latency SLA on {hardware!r} with and without speculation ({head}; plain "
            f"decoding {plain:.0f} ms{beside}): falling back to plain decoding would not help — meet the SLA first "
            "(a smaller model, shorter prompts, a faster profile) or relax it for this hardware"
        ]
    return [f"roll back pair {pair!r} on {hardware!r}: {head}; fall back to plain decoding"]


def _with_arm(check: Check, arm: str) -> Check:
    from dataclasses import replace

    return replace(check, arm=arm)


def samples(evaluation: Evaluation, min_samples: int) -> Check:
    """Fail closed: every arm needs at least `min_samples` completed requests and no failed ones."""
    return _samples(evaluation.where, list(evaluation.summaries.values()), min_samples)


def p99_ttft(evaluation: Evaluation, arm: str, sla: SlaLimits) -> Check:
    """P99 TTFT of the arm must stay within the SLA (on the units measured without interference)."""
    return _with_arm(_p99_ttft(evaluation.where, evaluation.summaries[arm], ttft_tail(evaluation, arm), sla), arm)


def decode_rate(evaluation: Evaluation, arm: str, sla: SlaLimits) -> Check:
    """Mean decode rate (1 / TPOT) of the arm must reach the SLA."""
    return _with_arm(_decode_rate(evaluation.where, evaluation.summaries[arm], sla), arm)


def speedup(evaluation: Evaluation, arm: str, sla: SlaLimits) -> Check:
    """Speculation must pay: the arm's measured S over its plain-decoding arm ≥ the limit."""
    return _with_arm(_speedup(evaluation.where, evaluation.speedups.get(arm), sla), arm)


def acceptance_rate(evaluation: Evaluation, arm: str, sla: SlaLimits) -> Check:
    """The arm's acceptance rate α must reach the floor below which speculation is rolled back."""
    return _with_arm(_acceptance_rate(evaluation.where, evaluation.summaries[arm], sla), arm)


def recommendations(evaluation: Evaluation, hardware: str, sla: SlaLimits) -> list[str]:
    """Rollback advice for the gated arms of one pair × workload (docs/configuration.md, "Gate policy"), then the
    draft-length advice of the measured cost model (`specgate.checks.draft_length`)."""
    if evaluation.sweep is not None:
        from specgate.checks.sweep import sweep_advice

        return sweep_advice(evaluation)
    advice: list[str] = []
    for arm in evaluation.plan.gated:
        label = evaluation.plan.pair if arm == evaluation.plan.released else f"{evaluation.plan.pair}/{arm}"
        plain = evaluation.plan.baseline_of(arm)
        tails = None
        if plain is not None:
            alike = plain in evaluation.probes or arm not in evaluation.probes
            mine, theirs = ttft_tail(evaluation, arm), ttft_tail(evaluation, plain)
            tails = mine, theirs, ttft_tail(evaluation, arm, probes_too=alike)
        summary = evaluation.summaries[arm]
        advice.extend(_recommend(label, hardware, evaluation.speedups.get(arm), summary, sla, tails))
    from specgate.checks.ladder import ladder_advice

    return [*advice, *draft_length_advice(evaluation, hardware), *ladder_advice(evaluation)]
