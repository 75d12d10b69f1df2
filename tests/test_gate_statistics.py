"""The whole regression decision on the FakeEngine (seeded, simulated): false blocks of A/A runs and power.

A "gate decision" is what a run with one pair × workload decides from its baseline: six statistical comparisons
(Holm-corrected together) plus the acceptance check. Simulated requests: 16 prompts × 2 repetitions, per-prompt
difficulty fixed across runs, request noise CV 5 %, 48 new tokens.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from conftest import evaluate_fake
from specgate.checks.regression import acceptance_check
from specgate.comparison import METRICS, Arms, compare_metric, holm_family
from specgate.config import GatePolicy, SlaLimits
from specgate.engines.base import Prompt
from specgate.engines.fake import FakeBehaviour, FakeEngine
from specgate.evaluation import Evaluation
from specgate.store.baselines import load_baseline, write_baseline
from specgate.store.records import RunRecord, record_run

POLICY = GatePolicy(repetitions=2, warmup=0, bootstrap_resamples=1000)
SLA = SlaLimits()
PROMPTS = tuple(Prompt(f"prompt-{i}", "text", max_new_tokens=48) for i in range(16))


def evaluate(
    behaviour: FakeBehaviour, seed: int, content_seed: int = 0, prompts: tuple[Prompt, ...] = PROMPTS
) -> Evaluation:
    engine = FakeEngine(behaviour, seed=seed, content_seed=content_seed)
    return evaluate_fake(engine, prompts, POLICY)


def as_record(evaluation: Evaluation, tmp_path: Path) -> RunRecord:
    return record_run(evaluation, "cpu", {}, tmp_path)


def gate_blocks(baseline_path: Path, current: Evaluation) -> set[str]:
    """The names of the checks that block in one gate decision."""
    before = load_baseline(baseline_path).record
    after = as_record(current, baseline_path.parent)
    comparisons = [compare_metric(m, before, after, Arms(), POLICY, SLA) for m in METRICS]
    blocked = {c.metric for c in holm_family(comparisons, POLICY.alpha) if c.regressed}
    if not acceptance_check(("fake", "w"), before, after, "spec", "baseline", SLA, POLICY).passed:
        blocked.add("acceptance_rate")
    return blocked


def record(
    tmp_path: Path, behaviour: FakeBehaviour, seed: int, content_seed: int, prompts: tuple[Prompt, ...] = PROMPTS
) -> Path:
    path = tmp_path / f"baseline-{seed}.json"
    write_baseline(path, as_record(evaluate(behaviour, seed, content_seed, prompts), tmp_path))
    return path


def block_rate(
    tmp_path: Path,
    before: FakeBehaviour,
    after: FakeBehaviour,
    trials: int,
    metric: str | None,
    prompts: tuple[Prompt, ...] = PROMPTS,
    new_draft: bool = False,
) -> float:
    """Share of trials that block. Baseline and current differ in timing noise; they accept the same draft tokens
    (same content seed) unless `new_draft`: a different draft model accepts different tokens."""
    hits = 0
    for trial in range(trials):
        baseline = record(tmp_path, before, 2 * trial, content_seed=trial, prompts=prompts)
        content = trial + 100_000 if new_draft else trial
        blocked = gate_blocks(baseline, evaluate(after, 2 * trial + 1, content_seed=content, prompts=prompts))
        hits += bool(blocked) if metric is None else metric in blocked
    return hits / trials


def test_aa_runs_block_at_most_one_percent(tmp_path: Path) -> None:
    rate = block_rate(tmp_path, FakeBehaviour(), FakeBehaviour(), trials=1000, metric=None)
    print(f"A/A false-block rate over 1000 gate decisions: {rate:.3%}")
    assert rate <= 0.01


def test_ten_percent_slowdown_is_detected(tmp_path: Path) -> None:
    rate = block_rate(tmp_path, FakeBehaviour(), FakeBehaviour(slowdown=1.10), trials=200, metric="tpot_ms")
    print(f"10 % slowdown detected in {rate:.1%} of 200 trials")
    assert rate >= 0.95


def test_five_percent_acceptance_drop_is_detected(tmp_path: Path) -> None:
    before = FakeBehaviour(acceptance=0.85)
    # A new draft whose per-token acceptance is 0.8311 instead of 0.85 lowers the pooled acceptance rate α by 5.0 %
    # (relative), from 0.677 to 0.643. A new draft accepts different tokens: new content, not the baseline's.
    after = dataclasses.replace(before, acceptance=0.8311)
    rate = block_rate(tmp_path, before, after, trials=200, metric="acceptance_rate", new_draft=True)
    print(f"5 % acceptance drop detected in {rate:.1%} of 200 trials")
    assert rate >= 0.95


PREMISE = FakeBehaviour(gamma=4)


@pytest.mark.parametrize("p", [0.85, 0.8311])
def test_fake_acceptance_rates_are_as_stated(p: float) -> None:
    # Guards the premise of the acceptance test: α(p) = Σ_{i=1..γ} p^i / γ for a draft that stops at a rejection.
    expected = sum(p**i for i in range(1, 5)) / 4
    summary = evaluate(dataclasses.replace(PREMISE, acceptance=p), seed=7).released.acceptance
    assert summary is not None and summary.rate is not None
    assert summary.rate == pytest.approx(expected, rel=0.03)
