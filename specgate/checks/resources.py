"""Resource checks: cost and energy per 1k output tokens are known for every arm, and the decode rate is placed
against the memory-bandwidth roofline. Both report rather than limit: they block only when the number is missing."""

from __future__ import annotations

from specgate.checks import INFRASTRUCTURE, Check, check
from specgate.costs.energy import EnergyReport
from specgate.costs.roofline import Roofline
from specgate.evaluation import Evaluation


def energy_reported(evaluation: Evaluation) -> Check:
    """Cost and energy per 1k output tokens are known for every arm (estimates allowed, and said to be)."""
    return energy_check(evaluation.where, evaluation.energy)


def roofline_reported(evaluation: Evaluation) -> Check:
    """The plain arm's decode rate is placed against the memory-bandwidth roofline."""
    return roofline_check(evaluation.where, evaluation.roofline)


def energy_check(where: tuple[str, str], report: EnergyReport | None) -> Check:
    """Cost and energy per 1k output tokens are known for every arm of `report`."""
    if report is None:
        missing = ["no energy report: the measurement ran without the monitor"]
    else:
        missing = [
            f"arm {a.arm}: {a.note or 'no cost or energy'}"
            for a in report.arms.values()
            if a.cost_per_1k_tokens_usd is None or a.energy_per_1k_tokens_j is None
        ]
    if report is None or missing:
        message = "BLOCK: cost/energy per 1k tokens not reported: " + "; ".join(missing)
        return check("cost_energy_reported", where, INFRASTRUCTURE, False, message)
    ref, cand = report.arms[report.reference], report.arms[report.candidate]
    kind = "estimated from profile power" if report.estimated else f"measured ({report.telemetry})"
    message = (
        f"cost ${ref.cost_per_1k_tokens_usd:.4f} → ${cand.cost_per_1k_tokens_usd:.4f} per 1k tokens, energy "
        f"{ref.energy_per_1k_tokens_j:.0f} → {cand.energy_per_1k_tokens_j:.0f} J per 1k tokens ({kind}), "
        f"{report.reference} → {report.candidate}: {report.saving_text()}"
    )
    return check(
        "cost_energy_reported",
        where,
        INFRASTRUCTURE,
        True,
        message,
        observed=cand.energy_per_1k_tokens_j,
        unit="J/1k tokens",
        details={"estimated": report.estimated, "cost_saving": report.cost_saving},
    )


def roofline_check(where: tuple[str, str], roofline: Roofline | None) -> Check:
    """The decode rate of `roofline`'s plain arm is placed against its bound."""
    if roofline is None or roofline.fraction is None or roofline.bound_tokens_per_s is None:
        reason = "no roofline computed" if roofline is None else roofline.note or "no decode rate measured"
        return check("roofline_reported", where, INFRASTRUCTURE, False, f"BLOCK: roofline {reason}")
    others = ", ".join(f"{arm} {f:.1%}" for arm, f in roofline.fractions.items() if arm != roofline.reference)
    message = (
        f"decode {roofline.measured_tokens_per_s[roofline.reference]:.1f} tok/s = {roofline.fraction:.1%} of the "
        f"roofline {roofline.bound_tokens_per_s:.0f} tok/s ({roofline.bandwidth_gb_s:g} GB/s, weights "
        f"{(roofline.weight_bytes or 0) / 1e6:.0f} MB + KV {roofline.kv_bytes_per_token} B/token × "
        f"{roofline.mean_context_tokens:.0f} tokens; arm {roofline.reference}{'; ' + others if others else ''})"
    )
    return check(
        "roofline_reported",
        where,
        INFRASTRUCTURE,
        True,
        message,
        observed=roofline.fraction,
        unit="of roofline",
        details={"fractions": dict(roofline.fractions), "bound_tokens_per_s": roofline.bound_tokens_per_s},
    )
