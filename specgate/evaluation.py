"""Turn one measurement into summaries, speedup, drift and the SLA checks of a pair × workload."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from specgate.accuracy import TaskAccuracy, compare_accuracy, score_outputs
from specgate.config import GatePolicy, SlaLimits
from specgate.engines.base import Prompt, RequestTrace
from specgate.gate import (
    DRIFT,
    Check,
    check_acceptance_rate,
    check_decode_rate,
    check_p99_ttft,
    check_samples,
    check_speedup,
    recommend,
)
from specgate.measure import Measurement
from specgate.metrics import ArmSummary, Speedup, measure_speedup, summarize_arm

if TYPE_CHECKING:
    from specgate.energy import EnergyReport
    from specgate.roofline import Roofline

NEAR_TIE_LOGITS = 0.5


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where the candidate arm's output first left the reference arm's output for one request."""

    prompt_id: str
    repetition: int
    position: int
    reference_excerpt: str
    candidate_excerpt: str
    reference_token: int | None = None
    candidate_token: int | None = None
    margin: float | None = None

    def explanation(self) -> str:
        """What the target's logit margin between the two tokens says about this divergence."""
        if self.margin is None:
            return "no logits exposed by this engine"
        if abs(self.margin) < NEAR_TIE_LOGITS:
            return f"target logit margin {self.margin:.3f}: a near-tie, numerics explain it"
        return f"target logit margin {self.margin:.2f}: not a tie, a speculative-path bug"


@dataclass(frozen=True, slots=True)
class Losslessness:
    """Greedy losslessness: the share of requests whose candidate output differs from the reference output."""

    n: int
    differing: int
    divergences: tuple[Divergence, ...]

    @property
    def drift(self) -> float:
        return self.differing / self.n if self.n else 1.0


def first_divergence(reference: tuple[int, ...], candidate: tuple[int, ...]) -> int | None:
    """Index of the first differing token, or None when the sequences are identical."""
    for index, (a, b) in enumerate(zip(reference, candidate, strict=False)):
        if a != b:
            return index
    return None if len(reference) == len(candidate) else min(len(reference), len(candidate))


def compare_outputs(measurement: Measurement, arm: str) -> Losslessness:
    """Compare each request of `arm` with the same request in the reference arm."""
    reference = {(t.prompt_id, t.repetition): t for run in measurement.runs[measurement.reference] for t in run.traces}
    divergences = []
    n = 0
    for run in measurement.runs[arm]:
        for trace in run.traces:
            ref = reference.get((trace.prompt_id, trace.repetition))
            if ref is None or not ref.ok or not trace.ok:
                continue
            a, b = _comparable(ref), _comparable(trace)
            if not a and not b:
                continue  # nothing to compare: not counted, so an all-empty run cannot pass as identical
            n += 1
            position = first_divergence(a, b)
            if position is not None:
                divergences.append(
                    Divergence(
                        trace.prompt_id,
                        trace.repetition,
                        position,
                        _excerpt(a, position),
                        _excerpt(b, position),
                        _at(a, position),
                        _at(b, position),
                    )
                )
    return Losslessness(n, len(divergences), tuple(divergences))


def score_arms(measurement: Measurement, task: str) -> dict[str, TaskAccuracy]:
    """Task accuracy of every arm on the prompts with a reference (first repetition: greedy repeats it)."""
    references = {p.id: p.reference for p in measurement.prompts if p.reference is not None}
    scores = {}
    for arm, runs in measurement.runs.items():
        outputs = {t.prompt_id: t.output_text for r in runs for t in r.traces if t.ok and t.repetition == 0}
        scores[arm] = score_outputs(task, outputs, references)
    return scores


def _comparable(trace: RequestTrace) -> tuple[int, ...]:
    """Token ids, or the text's code points when the engine returned no ids (positions are characters then)."""
    return trace.output_ids or tuple(map(ord, trace.output_text))


def _at(ids: tuple[int, ...], position: int) -> int | None:
    return ids[position] if position < len(ids) else None


def _excerpt(ids: tuple[int, ...], position: int) -> str:
    return " ".join(str(i) for i in ids[max(0, position - 3) : position + 5])


class Evaluation:
    """Summaries and checks of one pair × workload. The reference arm is the measurement's first arm."""

    def __init__(self, measurement: Measurement, sla: SlaLimits, policy: GatePolicy, task: str = "generate") -> None:
        self.measurement = measurement
        self.task = task
        self.sla = sla
        self.policy = policy
        self.where = (measurement.pair, measurement.workload)
        self.summaries: dict[str, ArmSummary] = {
            arm: summarize_arm(arm, runs, seed=policy.seed) for arm, runs in measurement.runs.items()
        }
        self.candidate = next((a for a in measurement.arms if a != measurement.reference), measurement.reference)
        candidate = self.summaries[self.candidate]
        rate = None if candidate.acceptance is None else candidate.acceptance.rate
        failed = sum(s.n_failed for s in self.summaries.values())
        # Failed requests end early: their wall times would fake a speedup, so none is measured (fail closed).
        self.speedup: Speedup | None = (
            None
            if failed
            else measure_speedup(
                measurement.runs[measurement.reference],
                measurement.runs[self.candidate],
                gamma=measurement.gamma,
                cost_ratio=measurement.cost_ratio,
                acceptance_rate=rate,
                seed=policy.seed,
            )
        )
        self.losslessness = compare_outputs(measurement, self.candidate)
        self.accuracy: dict[str, TaskAccuracy] = score_arms(measurement, task) if task != "generate" else {}
        # Cost, energy, peak memory and roofline: set by `specgate.energy.attach_resources` when a monitor ran.
        self.energy: EnergyReport | None = None
        self.roofline: Roofline | None = None

    @property
    def released(self) -> ArmSummary:
        """The arm whose SLA matters: the candidate (speculation on)."""
        return self.summaries[self.candidate]

    def samples(self) -> Check:
        return check_samples(self.where, list(self.summaries.values()), self.policy.min_samples)

    def p99_ttft(self) -> Check:
        return check_p99_ttft(self.where, self.released, self.sla)

    def decode_rate(self) -> Check:
        return check_decode_rate(self.where, self.released, self.sla)

    def speedup_check(self) -> Check:
        return check_speedup(self.where, self.speedup, self.sla)

    def acceptance_rate(self) -> Check:
        return check_acceptance_rate(self.where, self.released, self.sla)

    def greedy_identity(self) -> Check:
        """Greedy speculative decoding is lossless: drift must stay within the SLA (default 0.3 %)."""
        result = self.losslessness
        ok = result.n > 0 and result.drift <= self.sla.max_drift
        if result.n == 0:
            message = "BLOCK: no request completed in both arms, so outputs cannot be compared"
        elif result.differing == 0:
            message = (
                f"greedy output identical in {result.n}/{result.n} requests (drift 0 % ≤ {self.sla.max_drift:.1%})"
            )
        else:
            first = result.divergences[0]
            message = (
                f"greedy drift {result.drift:.1%} > {self.sla.max_drift:.1%}: {result.differing}/{result.n} "
                f"requests differ; first: prompt {first.prompt_id!r} rep {first.repetition} at token "
                f"{first.position} ({self.measurement.reference}: …{first.reference_excerpt}… vs "
                f"{self.candidate}: …{first.candidate_excerpt}…; {first.explanation()})"
            )
        return Check(
            "greedy_identity",
            self.where[0],
            self.where[1],
            DRIFT,
            ok,
            message,
            observed=result.drift,
            limit=self.sla.max_drift,
            unit="",
            n=result.n,
            details={"divergences": [d.position for d in result.divergences]},
        )

    def task_accuracy(self) -> Check:
        """Speculation must not cost task accuracy: the candidate arm against the reference arm."""
        reference = self.accuracy.get(self.measurement.reference)
        candidate = self.accuracy.get(self.candidate)
        if reference is None or candidate is None:
            return Check(
                "task_accuracy",
                *self.where,
                DRIFT,
                False,
                f"BLOCK: workload task {self.task!r} gave no accuracy to compare",
            )
        passed, message = compare_accuracy(reference, candidate, self.sla.max_accuracy_drop)
        return Check(
            "task_accuracy",
            *self.where,
            DRIFT,
            passed,
            f"{self.candidate} vs {self.measurement.reference}: {message}",
            observed=candidate.accuracy,
            limit=self.sla.max_accuracy_drop,
            n=candidate.n,
            baseline=reference.accuracy,
        )

    def recommendations(self, hardware: str) -> list[str]:
        return recommend(self.where[0], hardware, self.speedup, self.released, self.sla)


def explain_divergences(
    evaluation: Evaluation, margin: Callable[[Prompt, tuple[int, ...], int, int], float | None], limit: int = 5
) -> None:
    """Attach the target's logit margin at each of the first `limit` divergences (engines that expose logits)."""
    measurement = evaluation.measurement
    prompts = {p.id: p for p in measurement.prompts}
    reference = {(t.prompt_id, t.repetition): t for r in measurement.runs[measurement.reference] for t in r.traces}
    explained = []
    for index, d in enumerate(evaluation.losslessness.divergences):
        ref = reference.get((d.prompt_id, d.repetition))
        if index >= limit or ref is None or d.reference_token is None or d.candidate_token is None:
            explained.append(d)
            continue
        value = margin(prompts[d.prompt_id], ref.output_ids[: d.position], d.reference_token, d.candidate_token)
        explained.append(replace(d, margin=value))
    evaluation.losslessness = replace(evaluation.losslessness, divergences=tuple(explained))
