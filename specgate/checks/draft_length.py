"""Draft-length advice: the γ the measured cost model predicts to pay best, when it is not the configured one."""

from __future__ import annotations

from specgate.evaluation import Evaluation
from specgate.measure.stepcosts import MIN_GAIN


def draft_length_advice(evaluation: Evaluation, hardware: str) -> list[str]:
    """One recommendation per gated speculative arm whose predicted best γ beats the configured γ by ≥ 2 % and
    whose 95 % interval lies above the configured γ's predicted S: advice from a noisy cost fit would send a user to
    measure a change that does not pay."""
    advice = []
    pair, workload = evaluation.where
    for arm in evaluation.plan.gated:
        explanation = evaluation.explanations.get(arm)
        if explanation is None or explanation.too_noisy or explanation.best_gamma in (None, explanation.gamma):
            continue
        best, configured = explanation.draft_length(explanation.best_gamma), explanation.draft_length(explanation.gamma)
        if best is None or configured is None or best.predicted_speedup < configured.predicted_speedup * (1 + MIN_GAIN):
            continue
        if best.ci[0] <= configured.predicted_speedup:
            continue
        label = pair if arm == evaluation.plan.released else f"{pair}/{arm}"
        advice.append(
            f"draft length for {label!r} on {workload!r} ({hardware}): num_tokens={best.gamma} is predicted to pay "
            f"best here, S {best.predicted_speedup:.2f}× (95% CI {best.ci[0]:.2f}–{best.ci[1]:.2f}) against "
            f"{configured.predicted_speedup:.2f}× at the configured γ={explanation.gamma} (from this run's step costs; "
            f"{explanation.extrapolation}); measure it beside the current one: an arm under the pair's `arms:` in "
            f"specgate.yaml with the same speculation and num_tokens: {best.gamma}"
        )
    return advice
