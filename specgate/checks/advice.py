"""What to do about a blocked run: one specific recommendation per kind of failure of each pair × workload, with the
numbers and the command that helps (the rollback advice of the SLA checks comes from `specgate.checks.sla`).

Kinds: a latency regression (which arm and metric, how much beyond the tolerance, against what; how to reproduce
it offline), an undecided comparison (what would decide it), latency not comparable with a stored baseline (another
machine), outputs and acceptance not comparable with it (another engine or dtype), an acceptance drop, output drift
(first divergence; numerics or a bug), a task-accuracy drop, a ladder step worse than its stored self, an SLA breach
(which SLA, by how much, the profile's rollback rule), a missing or unusable baseline, a runtime change with too
little history of this machine to judge it, and errors of the infrastructure (the cause; nothing was measured, so
nothing passed).
"""

from __future__ import annotations

from collections.abc import Sequence

from specgate.checks import Against, Check, Failure


def _beside(check: Check) -> bool:
    """Whether the check compared the candidate with the reference measured beside it."""
    return check.compared is not None and check.compared.against is Against.REFERENCE


def _statistic(check: Check) -> str:
    return check.name if check.compared is None else check.compared.statistic


def _where(check: Check) -> str:
    return f"{check.pair}/{check.workload}"


def _latency(checks: list[Check], hardware: str) -> str:
    worst = max(checks, key=lambda c: float(c.details.get("relative_change", 0.0)))
    metrics = ", ".join(f"{_statistic(c)} {float(c.details.get('relative_change', 0.0)):+.1%}" for c in checks)
    tolerance = worst.limit or 0.0
    if _beside(worst):
        how = (
            f"measured beside {worst.details.get('against', 'the reference')} in the same run, so the change itself "
            "is slower: do not release it; find the cause (engine version, model files, speculation settings) and "
            "measure again"
        )
    else:
        how = (
            f"against this machine's baseline history: reproduce offline with `specgate baseline diff "
            f"baselines/{hardware}/{worst.pair}/{worst.workload}.json reports/runs/{hardware}/{worst.pair}/"
            f"{worst.workload}.json`, and confirm beside the released configuration (--reference=PAIR)"
        )
    return f"latency regression on {_where(worst)}: {metrics} (tolerance {tolerance:.0%}), {how}"


def _one(kind: Failure, checks: list[Check], hardware: str, beside: bool = False) -> str:
    """The recommendation for one kind of failure of a pair × workload; `beside`: the run measured a reference beside
    the candidate there (then that is not what to advise)."""
    first = checks[0]
    names = ", ".join(c.name for c in checks)
    if kind is Failure.LATENCY:
        return _latency(checks, hardware)
    if kind is Failure.UNDECIDED:
        beside = all(_beside(c) for c in checks)
        more = (
            "raise gate.max_repetitions or run on a quieter machine"
            if beside
            else "raise gate.max_repetitions, run on a quieter machine, or gate beside the released configuration "
            "(--reference=PAIR)"
        )
        return (
            f"undecided on {_where(first)} ({names}): the spread of these measurements hides a "
            f"{(first.limit or 0):.0%} change — each check says what would decide it; {more}"
        )
    if kind is Failure.OTHER_ENGINE:
        return (
            f"no baseline of this engine and dtype for {_where(first)} ({names}): outputs and acceptance are compared "
            "only with runs of the same engine; record one with it (pytest suites/ --hardware="
            f"{hardware} --pair={first.pair} --engine=… --update-baselines)"
            + (
                "; the reference measured beside it in this run compared them already (reference:*)"
                if beside
                else " or gate beside a reference measured in the same run (pairs.<pair>.reference or --reference=PAIR)"
            )
        )
    if kind is Failure.NOT_COMPARABLE:
        return (
            f"no latency baseline of this machine for {_where(first)}: record one here "
            f"(pytest suites/ --hardware={hardware} --pair={first.pair} --update-baselines, three runs) or gate "
            "beside the released configuration (pairs.<pair>.reference or --reference=PAIR)"
        )
    if kind is Failure.ACCEPTANCE:
        return (
            f"acceptance dropped on {_where(first)} ({first.message.split(' [', 1)[0]}): the draft agrees less with "
            "the target; keep the released draft, or retrain/realign the new one to this target"
        )
    if kind is Failure.OUTPUTS:
        return (
            f"outputs changed on {_where(first)} ({headline(first.message)}): with the same model files greedy "
            "outputs must not change — a divergence late in a sequence at a near-tie is numerics (compare dtype and "
            "kernels), an early or systematic one is a bug in the speculative path: do not release"
        )
    if kind is Failure.ACCURACY:
        return (
            f"task accuracy fell on {_where(first)} ({headline(first.message)}): the new models answer worse; "
            "check the quantization or model files before release"
        )
    if kind is Failure.SLA:
        parts = []
        for c in checks:
            if c.observed is not None and c.limit is not None and c.limit:
                parts.append(f"{c.name} {c.observed:,.4g} vs {c.limit:,.4g} {c.unit}".rstrip())
            else:
                parts.append(c.name)
        return (
            f"SLA breached on {_where(first)}: {'; '.join(parts)} — see the rollback rule of hardware/{hardware}.yaml "
            "(sla.rollback_latency_factor, min_speedup, min_acceptance_rate): serve the released configuration or "
            "plain decoding until it holds"
        )
    if kind is Failure.INFRASTRUCTURE:
        return (
            f"the measurement of {_where(first)} is not usable ({headline(first.message)}): fix the engine or server "
            "(the errors are in verdict.json and the pytest output) and run again; the other checks of "
            f"{_where(first)} failed because of it"
        )
    if kind is Failure.NO_HISTORY:
        return (
            f"no history of the released build on this machine for {_where(first)} ({names}): "
            f"{first.message.removeprefix('BLOCK: ').split(' [', 1)[0]}"
        )
    if kind is Failure.BASELINE:
        return f"baseline problem on {_where(first)}: {headline(first.message)}"
    if kind in LADDER_ADVICE:
        steps = ", ".join(dict.fromkeys(str(c.details.get("step")) for c in checks))
        evidence = "; ".join(headline(c.message) for c in checks)
        return LADDER_ADVICE[kind].format(steps=steps, where=_where(first), evidence=evidence)
    return f"{_where(first)}: {names} failed: {headline(first.message)}"


# What to do about ladder steps, by kind: not scored in the run, worse than their stored selves, rolled back.
LADDER_ADVICE = {
    Failure.LADDER_UNSCORED: (
        "score ladder step(s) {steps} of {where} in the same run: select a workload with reference answers "
        "(task:) or perplexity (perplexity: true) beside the speed workload, e.g. "
        "--workload=ladder_docs,ref_fields,ladder_ppl; a rung judged on speed alone is not a release decision"
    ),
    Failure.LADDER_REGRESSED: (
        "ladder step(s) {steps} of {where} got worse than in the baseline ({evidence}): the update costs that rung "
        "accuracy or perplexity — find the cause (model files, quantization library, engine version) or release "
        "without the step"
    ),
    Failure.LADDER: (
        "roll back ladder step(s) {steps} of {where} ({evidence}): release the rung below it, or a milder setting of "
        "that optimisation"
    ),
}


def headline(message: str, limit: int = 140) -> str:
    """The first sentence of a check's evidence (cut at `limit` characters)."""
    first = message.split(". ", 1)[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"


def advise(checks: Sequence[Check], errors: Sequence[str], hardware: str) -> list[str]:
    """One recommendation per (pair × workload, kind of failure), then one for infrastructure errors."""
    groups: dict[tuple[str, str, Failure], list[Check]] = {}
    for check in checks:
        if not check.passed:
            groups.setdefault((check.pair, check.workload, check.failure or Failure.OTHER), []).append(check)
    broken = {(pair, workload) for pair, workload, kind in groups if kind is Failure.INFRASTRUCTURE}
    beside = {(c.pair, c.workload) for c in checks if _beside(c)}
    # the rest of a broken measurement's failures follow from it
    advice = [
        _one(kind, group, hardware, (pair, workload) in beside)
        for (pair, workload, kind), group in groups.items()
        if kind is Failure.INFRASTRUCTURE or (pair, workload) not in broken
    ]
    if errors:
        advice.append(
            f"the run could not measure everything ({headline(errors[0])}{' …' if len(errors) > 1 else ''}): "
            "fix the cause (see ERROR above and the pytest output), then run the gate again; an unmeasured check "
            "never passes"
        )
    return advice
