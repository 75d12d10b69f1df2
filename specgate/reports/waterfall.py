"""The speedup's waterfall and step costs as text: terminal lines and the summary's table (from the document)."""

from __future__ import annotations

from specgate.measure.stepcosts import FittedCost, SpeedupExplanation
from specgate.reports.document import VerdictDocument

WATERFALL_HEADERS = (
    "pair",
    "workload",
    "arm",
    "ideal (c = 0)",
    "acceptance",
    "verify",
    "draft",
    "overhead",
    "prefill",
    "predicted S",
    "residual",
    "measured S",
    "best γ",
)


def _ci(estimate: FittedCost, fmt: str, unit: str = "") -> str:
    low, high = estimate.ci
    return "" if low != low or high != high else f" (95% CI {low:{fmt}}–{high:{fmt}}{unit})"


def _residual(explanation: SpeedupExplanation) -> str:
    return ", ".join(f"{s.name.removeprefix('residual: ')} ×{s.factor:.2f}" for s in explanation.waterfall[6:])


def _agreement(explanation: SpeedupExplanation) -> str:
    error = explanation.error
    if abs(error) <= 0.10:
        return f"predicted within {abs(error):.0%}"
    worst = max(explanation.waterfall[6:], key=lambda s: abs(s.factor - 1))
    return f"predicted {error:+.0%} off; the residual is {worst.name.removeprefix('residual: ')}: {worst.detail}"


def waterfall_lines(explanation: SpeedupExplanation) -> list[str]:
    """Three indented lines: the waterfall, the step costs, the draft-length advice (one, when too noisy to fit)."""
    e, steps = explanation, explanation.waterfall
    if e.too_noisy:
        return [
            f"  step costs {e.arm}: too noisy to fit ({e.too_noisy}): no waterfall and no draft-length advice from "
            f"this run; measured S {e.measured_speedup:.2f}×"
        ]
    chain = [f"{steps[0].name} {steps[0].speedup:.2f}×"]
    chain.extend(f"{s.name} ×{s.factor:.2f} = {s.speedup:.2f}×" for s in steps[1:6])
    predicted = f"predicted {e.predicted_speedup.value:.2f}×{_ci(e.predicted_speedup, '.2f')}"
    lines = [
        f"  speedup waterfall {e.arm}: {' → '.join(chain)} = {predicted}; residual {_residual(e)} → measured "
        f"{e.measured_speedup:.2f}× ({_agreement(e)})",
        f"  step costs {e.arm}: {costs_text(e)}",
    ]
    advice = draft_length_text(e)
    if advice:
        lines.append(f"  draft length {e.arm}: {advice}")
    return lines


def costs_text(explanation: SpeedupExplanation) -> str:
    c = explanation.costs
    parts = [
        f"plain step {c.plain_step_ms.value:.1f} ms{_ci(c.plain_step_ms, '.1f')} at {c.context_tokens:.0f} tokens of "
        f"context ({c.plain_ms_per_1k_context.value:+.1f} ms per 1k)",
        f"speculative step {c.step_ms.value:.1f} ms ({c.step_ms_per_1k_context.value:+.1f} ms per 1k context)",
    ]
    if c.verify_ms_per_token is not None:
        parts.append(
            f"verify {c.verify_ms_per_token.value:+.2f} ms per drafted token{_ci(c.verify_ms_per_token, '.2f')}"
        )
    if c.draft_ms_per_token is not None:
        parts.append(f"draft {c.draft_ms_per_token.value:.2f} ms per drafted token{_ci(c.draft_ms_per_token, '.2f')}")
    elif c.draft_ms_per_step is not None:
        what = "lookup" if explanation.method == "prompt_lookup" else "draft"
        parts.append(f"{what} {c.draft_ms_per_step.value:.2f} ms per step{_ci(c.draft_ms_per_step, '.2f')}")
    rollback = "" if c.rollback_ms is None else f", rollback {c.rollback_ms.value:+.2f} ms after a rejection"
    parts.append(
        f"overhead {c.overhead_ms_per_step.value:.2f} ms per step{_ci(c.overhead_ms_per_step, '.2f')}{rollback}"
    )
    parts.append(f"{c.tokens_per_step:.2f} tokens per step over {c.steps} steps of {c.requests} requests")
    return "; ".join(parts)


def draft_length_text(explanation: SpeedupExplanation) -> str:
    e = explanation
    best = None if e.best_gamma is None else e.draft_length(e.best_gamma)
    if best is None:
        return e.extrapolation
    at = e.draft_length(e.gamma)
    configured = "" if at is None else f" vs {at.predicted_speedup:.2f}× at the configured γ={e.gamma}"
    ci = "" if best.ci[0] != best.ci[0] else f" (95% CI {best.ci[0]:.2f}–{best.ci[1]:.2f})"
    return f"best γ={best.gamma}, predicted {best.predicted_speedup:.2f}×{ci}{configured}; {e.extrapolation}"


def waterfall_markdown(document: VerdictDocument) -> list[str]:
    """The summary's section: one row per speculative arm with a cost model, then the step costs."""
    rows, costs = [], []
    for record in document.evaluations:
        for arm in record.arms:
            e = arm.explanation
            if e is None:
                continue
            if e.too_noisy:
                costs.append(f"- {record.pair} / {record.workload} / {arm.name}: too noisy to fit ({e.too_noisy})")
                continue
            s = e.waterfall
            rows.append(
                (
                    record.pair,
                    record.workload,
                    arm.name,
                    f"{s[0].speedup:.2f}×",
                    *(f"×{step.factor:.2f}" for step in s[1:6]),
                    f"{e.predicted_speedup.value:.2f}×{_ci(e.predicted_speedup, '.2f')}",
                    _residual(e),
                    f"{e.measured_speedup:.2f}×",
                    "–" if e.best_gamma is None else f"{e.best_gamma} (configured {e.gamma})",
                )
            )
            costs.append(f"- {record.pair} / {record.workload} / {arm.name}: {costs_text(e)}. {draft_length_text(e)}")
    if not rows and not costs:
        return []
    header = "| " + " | ".join(WATERFALL_HEADERS) + " |"
    table = [header, "|" + "---|" * len(WATERFALL_HEADERS)]
    table.extend("| " + " | ".join(v.replace("|", "\\|") for v in row) + " |" for row in rows)
    return ["", "### Where the speedup goes", "", *table, "", *costs]
