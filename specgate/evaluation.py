"""One measurement summarized for the checks: summaries, speedups, losslessness, accuracy, resources.

`evaluate` builds an `Evaluation` once from a finished measurement and what was observed around it (the monitor's
energy and memory, the target's logit margins where the engine exposes them); it is frozen, and every check is a
pure function of it and the limits. Arms are read from the measurement's plan: every speculative arm gets its
speedup over, and its outputs compared with, the plain-decoding arm it was timed against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from specgate.accuracy import TaskAccuracy, score_outputs
from specgate.config import HardwareProfile
from specgate.costs.energy import EnergyReport, summarize_energy
from specgate.costs.roofline import Roofline, summarize_roofline
from specgate.engines.base import ArmRun, ExplainsDivergences, Prompt, RequestTrace
from specgate.ladder import LadderInputs, LadderRow, kv_bytes_per_token, summarize_ladder
from specgate.measure.metrics import ArmSummary, Speedup, measure_speedup, summarize_arm
from specgate.measure.monitor import Observation
from specgate.measure.perplexity import Perplexity
from specgate.measure.protocol import Measurement
from specgate.measure.samples import ArmSamples, arm_samples, probe_samples
from specgate.measure.stepcosts import SpeedupExplanation, explain_speedup
from specgate.measure.sweep import Sweep
from specgate.plan import MeasurementPlan

NEAR_TIE_LOGITS = 0.5
EXPLAINED_DIVERGENCES = 5


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where an arm's output first left its plain-decoding arm's output for one request."""

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
    """Greedy losslessness: the share of requests whose output differs from the plain-decoding arm's."""

    arm: str
    against: str
    n: int
    differing: int
    divergences: tuple[Divergence, ...]

    @property
    def drift(self) -> float:
        return self.differing / self.n if self.n else 1.0


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Everything the checks read about one pair × workload, built once by `evaluate` and never changed."""

    measurement: Measurement
    task: str
    summaries: Mapping[str, ArmSummary]
    samples: Mapping[str, ArmSamples]
    speedups: Mapping[str, Speedup | None]
    losslessness: Mapping[str, Losslessness]
    accuracy: Mapping[str, TaskAccuracy]
    energy: EnergyReport | None = None
    roofline: Roofline | None = None
    probes: Mapping[str, ArmSamples] = field(default_factory=dict)
    pool: Mapping[str, ArmSamples] = field(default_factory=dict)
    explanations: Mapping[str, SpeedupExplanation] = field(default_factory=dict)
    ladder: tuple[LadderRow, ...] = ()
    perplexity: Mapping[str, Perplexity] = field(default_factory=dict)
    sweep: Sweep | None = None

    @property
    def plan(self) -> MeasurementPlan:
        return self.measurement.plan

    @property
    def where(self) -> tuple[str, str]:
        return (self.measurement.pair, self.measurement.workload)

    @property
    def released(self) -> ArmSummary:
        """The summary of the arm a PASS releases (`spec`)."""
        return self.summaries[self.plan.released]


def first_divergence(reference: tuple[int, ...], candidate: tuple[int, ...]) -> int | None:
    """Index of the first differing token, or None when the sequences are identical."""
    for index, (a, b) in enumerate(zip(reference, candidate, strict=False)):
        if a != b:
            return index
    return None if len(reference) == len(candidate) else min(len(reference), len(candidate))


def compare_outputs(measurement: Measurement, arm: str, against: str) -> Losslessness:
    """Compare each request of `arm` with the same request (prompt and round) of `against`, or, for a round
    `against` did not run (a plain arm measured in the first round only), with its request of the same prompt:
    greedy plain decoding repeats its outputs from one round to the next."""
    same_request = _same_request(measurement.runs[against])
    divergences = []
    n = 0
    for run in measurement.runs[arm]:
        for trace in run.traces:
            ref = same_request(trace.prompt_id, trace.repetition)
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
    return Losslessness(arm, against, n, len(divergences), tuple(divergences))


def _same_request(runs: Sequence[ArmRun]) -> Callable[[str, int], RequestTrace | None]:
    """The request of `runs` for a prompt and round (the last attempt), or the prompt's request of its latest round
    where the arm did not run that round."""
    by_request = {(t.prompt_id, t.repetition): t for run in runs for t in run.traces}
    by_prompt = {prompt: trace for (prompt, _), trace in sorted(by_request.items(), key=lambda kv: kv[0][1])}
    return lambda prompt, repetition: by_request.get((prompt, repetition)) or by_prompt.get(prompt)


def explain(
    lossless: Losslessness, measurement: Measurement, engine: ExplainsDivergences, limit: int = EXPLAINED_DIVERGENCES
) -> Losslessness:
    """The same result with the target's logit margin at each of the first `limit` divergences."""
    prompts = {p.id: p for p in measurement.prompts}
    same_request = _same_request(measurement.runs[lossless.against])
    explained = []
    for index, d in enumerate(lossless.divergences):
        ref = same_request(d.prompt_id, d.repetition)
        if index >= limit or ref is None or d.reference_token is None or d.candidate_token is None:
            explained.append(d)
            continue
        margin = engine.logit_margin(
            lossless.against, prompts[d.prompt_id], ref.output_ids[: d.position], d.reference_token, d.candidate_token
        )
        explained.append(replace(d, margin=margin))
    return replace(lossless, divergences=tuple(explained))


def score_arms(measurement: Measurement, task: str) -> dict[str, TaskAccuracy]:
    """Task accuracy of every arm on the prompts with a reference (first round: greedy repeats it)."""
    references = {p.id: p.reference for p in measurement.prompts if p.reference is not None}
    scores = {}
    for arm, runs in measurement.runs.items():
        outputs = {t.prompt_id: t.output_text for r in runs for t in r.traces if t.ok and t.repetition == 0}
        scores[arm] = score_outputs(task, outputs, references)
    return scores


def evaluate(
    measurement: Measurement,
    *,
    task: str = "generate",
    seed: int = 0,
    hardware: HardwareProfile | None = None,
    observation: Observation | None = None,
    model_folder: Path | None = None,
    explainer: ExplainsDivergences | None = None,
    perplexity: Mapping[str, Perplexity] | None = None,
    gate_speed: bool = True,
) -> Evaluation:
    """Summarize a measurement for the checks (see the module docstring). `hardware` and `observation` give the
    cost, energy and roofline; `model_folder` is the plain arm's target; `explainer` explains divergences;
    `perplexity` is each arm's on long documents (a ladder's); `gate_speed` whether the ladder judges speed here."""
    plan = measurement.plan
    summaries = {arm: summarize_arm(arm, runs, seed=seed) for arm, runs in measurement.runs.items()}
    failed = sum(s.n_failed for s in summaries.values())
    speedups: dict[str, Speedup | None] = {}
    losslessness: dict[str, Losslessness] = {}
    for arm, plain in plan.speedups:
        rate = None if summaries[arm].acceptance is None else summaries[arm].acceptance.rate  # type: ignore[union-attr]
        spec = plan.arm(arm).speculation
        # Failed requests end early: their wall times would fake a speedup, so none is measured (fail closed).
        speedups[arm] = (
            None
            if failed
            else measure_speedup(
                measurement.runs[plain],
                measurement.runs[arm],
                gamma=None if spec is None else spec.num_tokens,
                cost_ratio=measurement.cost_ratios.get(arm),
                acceptance_rate=rate,
                seed=seed,
            )
        )
        lossless = compare_outputs(measurement, arm, plain)
        if explainer is not None and lossless.divergences:
            lossless = explain(lossless, measurement, explainer)
        losslessness[arm] = lossless
    explanations = {}
    for arm, plain in plan.speedups:
        spec, measured = plan.arm(arm).speculation, speedups.get(arm)
        if spec is not None and measured is not None:
            explained = explain_speedup(
                measurement.runs[plain],
                measurement.runs[arm],
                gamma=spec.num_tokens,
                method=spec.method,
                measured_speedup=measured.value,
                seed=seed,
            )
            if explained is not None:
                explanations[arm] = explained
    energy = roofline = None
    if hardware is not None:
        if observation is not None:
            energy = summarize_energy(observation, summaries, hardware, plan.plain, plan.released)
        dtype = plan.arm(plan.plain).dtype
        roofline = summarize_roofline(
            model_folder, hardware, dtype, plan.plain, measurement.runs[plan.plain], summaries
        )
    accuracy = score_arms(measurement, task) if task != "generate" else {}
    inputs = LadderInputs(
        perplexity=dict(perplexity or {}),
        peak_memory_bytes={a: _peak(observation, a) for a in plan.names},
        kv_bytes_per_token=_kv_bytes(plan, model_folder),
        gate_speed=gate_speed,
    )
    return Evaluation(
        measurement=measurement,
        task=task,
        summaries=summaries,
        samples={arm: arm_samples(runs) for arm, runs in measurement.runs.items()},
        probes={arm: probe_samples(runs) for arm, runs in measurement.probes.items()},
        pool={arm: arm_samples(runs) for arm, runs in measurement.pool.items()},
        speedups=speedups,
        losslessness=losslessness,
        accuracy=accuracy,
        energy=energy,
        roofline=roofline,
        explanations=explanations,
        ladder=summarize_ladder(measurement, summaries, accuracy, inputs, seed) if plan.ladder else (),
        perplexity=dict(perplexity or {}),
    )


def _peak(observation: Observation | None, arm: str) -> int | None:
    seen = None if observation is None else observation.arms.get(arm)
    return None if seen is None else seen.peak_memory_bytes


def _kv_bytes(plan: MeasurementPlan, model_folder: Path | None) -> dict[str, float | None]:
    if model_folder is None or not plan.ladder:
        return {}
    from specgate.costs.roofline import load_model_facts

    try:
        facts = load_model_facts(model_folder)
    except ValueError:
        return {}
    return {
        a.name: kv_bytes_per_token(facts.num_layers, facts.num_kv_heads, facts.head_dim, a.dtype, a.optimisation)
        for a in plan.arms
    }


def _comparable(trace: RequestTrace) -> tuple[int, ...]:
    """Token ids, or the text's code points when the engine returned no ids (positions are characters then)."""
    return trace.output_ids or tuple(map(ord, trace.output_text))


def _at(ids: tuple[int, ...], position: int) -> int | None:
    return ids[position] if position < len(ids) else None


def _excerpt(ids: tuple[int, ...], position: int) -> str:
    return " ".join(str(i) for i in ids[max(0, position - 3) : position + 5])


__all__ = ["Divergence", "Evaluation", "Losslessness", "Prompt", "evaluate", "first_divergence"]
