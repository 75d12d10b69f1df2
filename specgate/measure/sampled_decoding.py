"""Sampled decoding: seeded samples of the first tokens of a few prompts in two arms, and their distribution test
(`specgate.stats.distribution`). A workload opts in with `sampling:`; the engine must sample (`SamplesOutputs`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from specgate.config import SamplingConfig
from specgate.engines.base import Engine, Prompt, RequestTrace, SamplesOutputs
from specgate.errors import MeasurementError
from specgate.stats.distribution import DistributionTest, compare_distributions


def measure_sampled(
    engine: Engine, prompts: Sequence[Prompt], plain: str, arm: str, settings: SamplingConfig, alpha: float
) -> DistributionTest:
    """Sample `settings.samples` continuations of the first `settings.prompts` prompts in the plain arm and in `arm`
    (different seeds per prompt, the same seeds in both arms) and test that they share a distribution."""
    if not isinstance(engine, SamplesOutputs):
        raise MeasurementError(
            f"engine {engine.name!r} cannot sample outputs for the distribution test; run this workload on transformers"
        )
    samples: dict[str, dict[str, list[tuple[int, ...]]]] = {}
    for index, prompt in enumerate(prompts[: settings.prompts]):
        first = settings.seed + 10_000 * index
        seeds = range(first, first + settings.samples)
        samples[prompt.id] = {
            name: engine.sample(
                prompt,
                name,
                seeds=seeds,
                max_new_tokens=settings.positions,
                temperature=settings.temperature,
                top_p=settings.top_p,
            )
            for name in (plain, arm)
        }
    return compare_distributions(samples, reference=plain, candidate=arm, positions=settings.positions, alpha=alpha)


def collect_samples(traces: Iterable[RequestTrace], *, positions: int) -> dict[str, dict[str, list[tuple[int, ...]]]]:
    """Group the completed traces' first ``positions`` output tokens by prompt and arm, one sample per trace."""
    samples: dict[str, dict[str, list[tuple[int, ...]]]] = {}
    for trace in traces:
        if trace.ok:
            samples.setdefault(trace.prompt_id, {}).setdefault(trace.arm, []).append(trace.output_ids[:positions])
    return samples
