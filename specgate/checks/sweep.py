"""Where speculation stops paying: the concurrency knee of a sweep (`specgate.measure.sweep`) against the deployment.

`concurrency_knee` passes when speculation is shown to pay (the speedup's 95 % interval above `min_speedup`) at every
measured level up to the profile's `sla.deployment_concurrency` (an unmeasured deployment level is judged by the
next measured level above it). It blocks, as an SLA breach, when a level up to there is shown not to pay; as
undecided when an interval straddles the limit; and when the deployment lies beyond the sweep's highest level.
The advice says how far to speculate in the engine's own terms.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from specgate.checks import SLA, Check, check
from specgate.measure.sweep import DOES_NOT_PAY, PAYS, LevelSpeedup, Sweep, describe_knee, needed_levels

if TYPE_CHECKING:
    from specgate.config import SlaLimits
    from specgate.evaluation import Evaluation

NAME = "concurrency_knee"


def level_text(s: LevelSpeedup | None, level: int) -> str:
    """A level's speedup in words, e.g. at 4 in flight S 1.62× (95% CI 1.48–1.77, 3 rounds)."""
    if s is None or not math.isfinite(s.value):
        return f"at {level} in flight no paired rounds"
    interval = "no interval: one round" if not math.isfinite(s.ci[0]) else f"95% CI {s.ci[0]:.2f}–{s.ci[1]:.2f}"
    return f"at {level} in flight S {s.value:.2f}× ({interval}, {s.rounds} rounds)"


def concurrency_knee(evaluation: Evaluation, arm: str, sla: SlaLimits) -> Check:
    sweep = evaluation.sweep
    where = evaluation.where
    if sweep is None or sweep.knee(arm) is None:
        return check(NAME, where, SLA, False, f"BLOCK: no concurrency sweep of arm {arm} was measured", arm=arm)
    knee = sweep.knee(arm)
    assert knee is not None
    deployment = max(1, round(sla.deployment_concurrency))
    needed = needed_levels(sweep, deployment)
    limits = f"S ≥ {sweep.min_speedup:.2f}× with 95% confidence"
    details: dict[str, Any] = {
        "knee": knee.level,
        "deployment_concurrency": deployment,
        "levels": [lv.concurrency for lv in sweep.levels],
    }
    observed = None if knee.level is None else float(knee.level)

    def judged(passed: bool, message: str) -> Check:
        return check(
            NAME,
            where,
            SLA,
            passed,
            message,
            observed=observed,
            limit=float(deployment),
            unit="in flight",
            n=sweep.rounds,
            arm=arm,
            details=details,
        )

    failed = [
        f"{a.arm} {a.failed} of {a.requests} at {lv.concurrency}" for lv in sweep.levels for a in lv.arms if a.failed
    ]
    if failed:
        message = (
            f"BLOCK: requests failed in the sweep ({'; '.join(failed)} in flight): a round with a failed request "
            "times nothing, so the levels it touches cannot be judged; see the engine's errors in verdict.json"
        )
        return judged(False, message)
    if needed is None:
        top = sweep.levels[-1].concurrency
        message = (
            f"BLOCK: the deployment has {deployment} requests in flight (sla.deployment_concurrency) but the sweep "
            f"stops at {top}: add {deployment} to workloads.{where[1]}.sweep. {describe_knee(sweep, knee)} ({limits})"
        )
        return judged(False, message)
    decisions = [(lv.concurrency, lv.speedup(arm)) for lv in needed]
    failing = [(c, s) for c, s in decisions if s is not None and s.decision == DOES_NOT_PAY]
    unclear = [(c, s) for c, s in decisions if s is None or s.decision not in (PAYS, DOES_NOT_PAY)]
    reach = needed[-1].concurrency
    if not failing and not unclear:
        message = (
            f"{describe_knee(sweep, knee)} ({limits}), the deployment's {deployment} included: "
            f"{level_text(decisions[-1][1], reach)}" + _beyond(sweep, arm, reach)
        )
        return judged(True, message)
    if failing:
        level, shown = failing[0]
        message = (
            f"BLOCK: speculation does not pay at {level} in flight, within the deployment's {deployment}: "
            f"{level_text(shown, level)} < {sweep.min_speedup:.2f}×. {describe_knee(sweep, knee)}. "
            f"{switch_off_advice(evaluation, arm)}"
        )
        return judged(False, message)
    level, unsure = unclear[0]
    message = (
        f"BLOCK: undecided whether speculation pays at {level} in flight (deployment {deployment}): "
        f"{level_text(unsure, level)} straddles {sweep.min_speedup:.2f}×; more rounds decide it "
        f"(workloads.{where[1]}.repetitions), or a quieter runner"
    )
    details["outcome"] = "UNKNOWN"
    return judged(False, message)


def _beyond(sweep: Sweep, arm: str, reach: int) -> str:
    later = [(lv.concurrency, lv.speedup(arm)) for lv in sweep.levels if lv.concurrency > reach]
    return "".join(f"; {level_text(s, c)}, {'—' if s is None else s.decision}" for c, s in later)


def switch_off_advice(evaluation: Evaluation, arm: str) -> str:
    """How far to speculate, in the engine's terms: the installed vLLM's batch-size schedule or switch-off, or, where
    the engine has neither, capping speculative replicas at the knee."""
    sweep = evaluation.sweep
    knee = None if sweep is None else sweep.knee(arm)
    if sweep is None or knee is None:
        return ""
    if knee.level is None:
        return (
            f"Speculation ({arm}) does not pay even at {sweep.levels[0].concurrency} in flight on this hardware: serve "
            "plain decoding, or try a shorter draft (speculation.num_tokens)"
        )
    k = knee.level
    if k == sweep.levels[-1].concurrency:
        return (
            f"Speculation ({arm}) pays at every level measured, up to {k} in flight: no switch-off is needed up to "
            f"there; add higher levels to the sweep to find where it stops paying"
        )
    speculation = evaluation.plan.arm(arm).speculation
    gamma = 0 if speculation is None else speculation.num_tokens
    if sweep.switch_off == "num_speculative_tokens_per_batch_size":
        how = (
            f"set `num_speculative_tokens_per_batch_size: [[1, {k}, {gamma}], [{k + 1}, N, 0]]` in the speculative "
            "config (N: your --max-num-seqs), which the installed vLLM has"
        )
    elif sweep.switch_off == "disable_by_batch_size":
        how = f"set `disable_by_batch_size: {k + 1}` in the speculative config (off from {k + 1} queued requests on)"
    else:
        how = (
            f"the {sweep.engine or 'serving'} engine has no batch-size switch-off: cap each speculative replica at {k} "
            f"requests in flight (--max-num-seqs {k}) and route load beyond it to plain-decoding replicas"
        )
    return f"Speculate ({arm}) up to {k} concurrent requests: {how}"


def sweep_advice(evaluation: Evaluation) -> list[str]:
    """One line per gated arm of a sweep: its knee and how to apply it."""
    sweep = evaluation.sweep
    if sweep is None:
        return []
    pair, workload = evaluation.where
    found = []
    for knee in sweep.knees:
        found.append(f"{pair}/{workload}: {describe_knee(sweep, knee)}. {switch_off_advice(evaluation, knee.arm)}")
    return found
