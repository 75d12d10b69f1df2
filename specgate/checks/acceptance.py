"""Acceptance checks: the candidate's acceptance rate against the reference's measured beside it, or against the
stored baseline's; two draft lengths compared on the positions both draft."""

from __future__ import annotations

from specgate.checks import REGRESSION, Check, check
from specgate.checks.regression import Levels
from specgate.comparison import acceptance_drop
from specgate.config import SlaLimits
from specgate.measure.samples import ArmSamples
from specgate.plan import MeasurementPlan
from specgate.stats.decision import decide, percent

Where = tuple[str, str]


def shared_positions(plan: MeasurementPlan, arm: str, other: str) -> tuple[int, int] | None:
    """(γ of `other`, γ of `arm`) when two speculative arms draft different lengths, else None (equal lengths
    compare their plain acceptance rates)."""
    a, b = plan.arm(other).speculation, plan.arm(arm).speculation
    if a is None or b is None or a.num_tokens == b.num_tokens:
        return None
    return (a.num_tokens, b.num_tokens)


def acceptance_check(
    name: str,
    where: Where,
    before: ArmSamples | None,
    after: ArmSamples | None,
    sla: SlaLimits,
    levels: Levels,
    against: str,
    *,
    arm: str,
    hint: str = "",
    lengths: tuple[int, int] | None = None,
) -> Check:
    """The acceptance rate must not drop more than `max_acceptance_drop` (relative): PASS when the upper bound of the
    drop is below it, BLOCK when the drop is significant and beyond it, UNKNOWN (blocks) when the prompts cannot tell
    — with the number of prompts that would (and `hint`: where more prompts come from). `lengths` (γ before, γ
    after), when they differ: the rate on the draft positions both draft (`shared_positions`)."""
    if before is None or after is None:
        missing = "the baseline has no such arm" if before is None else "this run has no such arm"
        return check(name, where, REGRESSION, False, f"BLOCK: no acceptance to compare: {missing} [{against}]", arm=arm)
    try:
        estimate = acceptance_drop(before, after, min(lengths) if lengths else None)
    except ValueError as exc:
        return check(name, where, REGRESSION, False, f"BLOCK: {exc} [{against}]", arm=arm)
    tolerance = sla.max_acceptance_drop
    decision = decide(
        estimate.estimate,
        estimate.se,
        estimate.df,
        threshold=tolerance,
        alpha_block=levels.alpha,
        alpha_pass=levels.alpha,
        n=estimate.n,
        spread=estimate.spread,
    )
    words = {"PASS": "PASS", "BLOCK": "REGRESSED", "UNKNOWN": "BLOCK: UNKNOWN"}[decision.outcome]
    needed = (
        f" — the prompts cannot tell a {tolerance:.0%} drop from none: ≈ {decision.units_needed} prompts would"
        if decision.outcome == "UNKNOWN" and decision.units_needed
        else ""
    )
    rate = (
        "acceptance rate"
        if not lengths
        else f"per-position acceptance on the {min(lengths)} draft position(s) both draft (γ {lengths[0]} → "
        f"{lengths[1]}: a longer draft lowers the plain rate by construction)"
    )
    message = (
        f"{words}: {rate} {estimate.before:.4f} → {estimate.after:.4f}, relative drop "
        f"{percent(estimate.estimate)} (upper bound {percent(decision.upper)}, {estimate.how}) vs allowed "
        f"{tolerance:.0%}; would catch a drop ≥ {decision.mde:.1%}{needed}{hint if needed else ''} [{against}]"
    )
    return check(
        name,
        where,
        REGRESSION,
        decision.outcome == "PASS",
        message,
        observed=estimate.after,
        limit=tolerance,
        baseline=estimate.before,
        n=estimate.n,
        details={
            "outcome": decision.outcome,
            "relative_drop": estimate.estimate,
            "upper_bound": decision.upper,
            "mde": decision.mde,
            "prompts_needed": decision.units_needed,
        },
        arm=arm,
    )
