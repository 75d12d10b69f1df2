"""The gate's statistical decisions on the FakeEngine (seeded, simulated): error rates in both directions.

Reference mode: the candidate and the reference arm measured beside it (ABBA, with TTFT probes, rounds added while a
comparison is UNKNOWN). Acceptance: a new draft against the old one on the shipped acceptance pool. Whole-arm
engines: the speedup from per-request units. Tails: a P99-only regression under a `--pair=all`-sized family.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from specgate.checks import Check, reference_key
from specgate.checks.acceptance import acceptance_check
from specgate.checks.judgement import beside
from specgate.checks.levels import family_size, looks_of
from specgate.checks.regression import Levels
from specgate.checks.sequential import undecided_acceptance
from specgate.checks.subject import Subject
from specgate.config import GatePolicy, SlaLimits, Speculation
from specgate.engines.base import Prompt
from specgate.engines.fake import FakeBehaviour, FakeEngine
from specgate.evaluation import compare_outputs
from specgate.measure.metrics import measure_speedup
from specgate.measure.pool import extend_over_pool, pool_steps
from specgate.measure.protocol import measure_plan
from specgate.measure.samples import arm_samples, probe_samples
from specgate.plan import Arm, MeasurementPlan
from specgate.store.records import RunRecord

POLICY = GatePolicy(repetitions=2, max_repetitions=6, warmup=0, ttft_probes=3)
SLA = SlaLimits()
PLD = Speculation("prompt_lookup", 4)
PROMPTS = tuple(Prompt(f"doc-{i}", "text", max_new_tokens=48) for i in range(8))
SHIPPED_POOL = 300  # prompts in suites/workloads/doc_edit.jsonl and doc_proofread.jsonl (acceptance_prompts)
SHIPPED_TOKENS = 80


def reference_plan(slowdown: float = 0.0, family: str = "w") -> MeasurementPlan:
    """ar (shared), spec (candidate), ref-spec (the released configuration), as `build_plan` makes them."""
    arms = (
        Arm("ar", "ar", "fake", False, "model", None, "float32"),
        Arm("spec", "spec", "fake", False, "model", PLD, "float32", slowdown=slowdown),
        Arm("ref-spec", "spec", "released", True, "model", PLD, "float32"),
    )
    return MeasurementPlan(
        "fake", family, arms, (("spec", "ar"), ("ref-spec", "ar")), beside=(("spec", "ref-spec"),), reference="released"
    )


def judge_reference(
    behaviour: FakeBehaviour,
    seed: int,
    *,
    slowdown: float = 0.0,
    family: int | None = None,
    per_arm: dict[str, FakeBehaviour] | None = None,
    batched: bool = False,
    policy: GatePolicy = POLICY,
    prompts: tuple[Prompt, ...] = PROMPTS,
) -> dict[str, object]:
    """One reference-mode gate decision: the `reference:*` checks by name (and the rounds run)."""
    from specgate.checks.sequential import stop_rule

    plan = reference_plan(slowdown)
    engine = FakeEngine(behaviour, seed=seed, per_arm=per_arm, batched=batched)
    engine.load(plan.arms, None)  # type: ignore[arg-type]
    size = family or family_size([(plan, True)])
    stop = stop_rule(plan, "cpu", SLA, policy, size, len(prompts))
    probes = policy.ttft_probes if not batched else 0
    measurement = measure_plan(engine, plan, prompts, policy, hardware="cpu", stop=stop, probes=probes)
    arms = {arm: arm_samples(runs) for arm, runs in measurement.runs.items()}
    record = RunRecord("cpu", "fake", "w", arms, probes={a: probe_samples(r) for a, r in measurement.probes.items()})
    subject = Subject(plan, record, None, "", SLA, len(prompts), measurement.rounds)
    levels = Levels(policy.alpha, looks_of(policy, True), size)
    results: dict[str, object] = {key.name: check for key, check in beside(subject, policy, levels, "").items()}
    results["rounds"] = measurement.rounds
    return results


def blocked(results: dict[str, object], *names: str) -> set[str]:
    latency = [n for n in results if n.startswith("reference:") and (not names or n.split(":", 1)[1] in names)]
    return {n for n in latency if not getattr(results[n], "passed", False)}


# A shared 2-vCPU runner, as measured on real runs: 10 % per-request noise (heavy-tailed), a tenth of the requests
# stretched 3× by another process (wall time only: the engine waited for a CPU), and a slow ±5 % drift of the
# machine's speed. The gate sizes its run for it, up to 40 rounds.
BUSY = FakeBehaviour(noise_cv=0.02, request_cv=0.10, noise_df=5, spike_share=0.1, spike_factor=3.0, drift=0.05)
SIZED = dataclasses.replace(POLICY, max_repetitions=40, looks=3)


def outcomes(results: dict[str, object]) -> list[str]:
    """The outcomes of the latency comparisons beside the reference."""
    latency = ("ttft_ms", "tpot_ms", "e2el_ms", "p99_ttft_ms", "speedup")
    return [results[f"reference:{m}"].details["outcome"] for m in latency]  # type: ignore[attr-defined]


def rates(trials: list[dict[str, object]]) -> tuple[float, float]:
    """(share of trials that blocked for any reason, share that ended REGRESSED)."""
    regressed = sum("BLOCK" in outcomes(t) for t in trials) / len(trials)
    return sum(bool(blocked(t)) for t in trials) / len(trials), regressed


@pytest.mark.parametrize("clock", ["cpu", "wall"])
def test_an_unchanged_configuration_on_a_busy_machine_passes(clock: str) -> None:
    """A/A at the busy machine's noise: any BLOCK (UNKNOWN included) ≤ 5 %, REGRESSED ≤ 1 % (the README's rates; the
    rates over 1,000 trials are printed by scripts/gate_error_rates.py). In wall time the spikes stay in the data
    (the trimmed mean keeps them from deciding) and the run needs about twice the rounds of CPU time's. Its tail
    comparison ends REGRESSED in about 0.7 % of trials: 300 of them, as at 100 such a rate reads 2 % one time in six."""
    policy = dataclasses.replace(SIZED, clock=clock, max_repetitions=40 if clock == "cpu" else 80)
    trials = [judge_reference(BUSY, seed, policy=policy) for seed in range(200 if clock == "cpu" else 300)]
    any_block, regressed = rates(trials)
    rounds = sum(int(t["rounds"]) for t in trials) / len(trials)  # type: ignore[call-overload]
    print(f"A/A ({clock}): blocked {any_block:.1%}, REGRESSED {regressed:.1%}, {rounds:.1f} rounds on average")
    assert any_block <= 0.05 and regressed <= 0.01


@pytest.mark.parametrize(("slowdown", "power"), [(0.05, 0.90), (0.10, 0.95)])
def test_a_slowdown_of_the_tolerance_or_more_ends_regressed(slowdown: float, power: float) -> None:
    """An injected 5 % (the tolerance) and 10 % slowdown at the same noise end REGRESSED (not merely UNKNOWN)."""
    trials = [judge_reference(BUSY, seed, policy=SIZED, slowdown=slowdown) for seed in range(60)]
    regressed = sum("BLOCK" in outcomes(t) for t in trials) / len(trials)
    print(f"--inject-slowdown={slowdown}: REGRESSED in {regressed:.0%} of {len(trials)} trials")
    assert regressed >= power
    # the run stops at its first REGRESSED comparison, so read one that did (the others may still be UNKNOWN)
    checks = [c for t in trials for n, c in t.items() if n.startswith("reference:")]
    check = next(c for c in checks if "REGRESSED" in c.message)  # type: ignore[attr-defined]
    assert "would catch ≥" in check.message  # type: ignore[attr-defined]


def test_every_latency_comparison_states_its_minimum_detectable_effect_per_look() -> None:
    results = judge_reference(BUSY, 3, policy=SIZED)
    for name in ("reference:ttft_ms", "reference:tpot_ms", "reference:e2el_ms", "reference:speedup"):
        check = results[name]
        mde = check.details["mde"]  # type: ignore[attr-defined]
        assert 0.0 < mde <= 0.05, (name, mde)  # the sized run catches a slowdown of the tolerance
        assert f"would catch ≥ {mde:.1%} at this look" in check.message  # type: ignore[attr-defined]


def test_whole_arm_speedup_regression_blocks_and_an_unchanged_one_passes() -> None:
    """vLLM-style runs (whole arms at once): speedup 1.6 → 0.8 blocks, 1.6 → 1.6 passes, from per-request units."""
    fast = FakeBehaviour(noise_cv=0.05, acceptance=0.6, draft_cost=0.0)
    halved = dataclasses.replace(fast, slowdown=2.0)
    regressed = [judge_reference(fast, s, per_arm={"spec": halved}, batched=True) for s in range(20)]
    unchanged = [judge_reference(fast, s, batched=True) for s in range(20)]
    speedups = [(t["reference:speedup"].baseline, t["reference:speedup"].observed) for t in regressed[:1]]  # type: ignore[attr-defined]
    print(f"whole-arm speedup reference → candidate: {speedups[0][0]:.2f}× → {speedups[0][1]:.2f}×")
    assert all("reference:speedup" in blocked(t) for t in regressed)
    assert not any(blocked(t, "speedup") for t in unchanged)


def test_a_tail_only_regression_blocks_with_a_pair_all_sized_family() -> None:
    """×1.5 on a tenth of the requests (the others slightly faster, so the means stay), a `--pair=all`-sized family
    (36 groups)."""
    tail = {"spec": FakeBehaviour(noise_cv=0.03, tail_share=0.1, tail_factor=1.5)}
    policy = dataclasses.replace(POLICY, repetitions=4, max_repetitions=4)
    prompts = tuple(Prompt(f"doc-{i}", "text", max_new_tokens=24) for i in range(16))
    trials = [
        judge_reference(FakeBehaviour(noise_cv=0.03), s, per_arm=tail, family=36, policy=policy, prompts=prompts)
        for s in range(10)
    ]
    means = [t["reference:ttft_ms"].details["relative_change"] for t in trials]  # type: ignore[attr-defined]
    print(
        f"tail ×1.5: mean TTFT change {sum(means) / len(means):+.1%}; P99 blocked in "
        f"{sum('reference:p99_ttft_ms' in blocked(t) for t in trials)}/10"
    )
    assert all(m < 0.05 for m in means)  # the trimmed means see no slowdown (the tail is trimmed away): P99 must
    assert all("reference:p99_ttft_ms" in blocked(t) for t in trials)


def _acceptance_arm(acceptance: float, content_seed: int, prompts: int, seed: int) -> object:
    engine = FakeEngine(FakeBehaviour(acceptance=acceptance), seed=seed, content_seed=content_seed)
    batch = [Prompt(f"doc-{i}", "text", max_new_tokens=SHIPPED_TOKENS) for i in range(prompts)]
    return arm_samples((engine.run(batch, "spec", repetition=0),))


DOCUMENTS = tuple(Prompt(f"doc-{i}", "text", max_new_tokens=SHIPPED_TOKENS) for i in range(SHIPPED_POOL))


def new_draft(after_acceptance: float, trial: int, pool: int = SHIPPED_POOL) -> tuple[Check, int]:
    """A new draft (it accepts other tokens) beside the old one, as the gate runs it: 8 timed prompts, then the
    acceptance pool step by step while the comparison is UNKNOWN. The final acceptance check and the prompts used."""
    plan = reference_plan()
    old, new = FakeBehaviour(acceptance=0.85), FakeBehaviour(acceptance=after_acceptance, draft=1)
    engine = FakeEngine(old, seed=trial, content_seed=trial, per_arm={"spec": new})
    engine.load(plan.arms, None)  # type: ignore[arg-type]
    policy = dataclasses.replace(POLICY, max_repetitions=POLICY.repetitions, ttft_probes=0)
    timed = DOCUMENTS[:8]
    measurement = measure_plan(engine, plan, timed, policy, hardware="cpu")
    steps = pool_steps(len(timed), pool)
    undecided = undecided_acceptance(plan, "cpu", SLA, policy, steps)
    measurement = extend_over_pool(engine, measurement, DOCUMENTS[len(timed) : pool], undecided)
    arms = {arm: arm_samples(runs) for arm, runs in measurement.runs.items()}
    record = RunRecord("cpu", "fake", "w", arms, pool={a: arm_samples(r) for a, r in measurement.pool.items()})
    subject = Subject(plan, record, None, "", SLA, len(timed), measurement.rounds, steps, " (pool hint)")
    check = beside(subject, policy, Levels(policy.alpha), "")[reference_key("acceptance_rate")]
    assert isinstance(check, Check)
    return check, len(timed) + len(measurement.pool_prompts)


def test_a_new_draft_with_equal_acceptance_passes_on_the_shipped_pool() -> None:
    trials = [new_draft(0.85, t) for t in range(200)]
    rate = sum(not check.passed for check, _ in trials) / len(trials)
    used = sum(n for _, n in trials) / len(trials)
    print(f"new draft, equal acceptance: blocked in {rate:.1%} of 200 trials, {used:.0f} prompts used on average")
    assert rate <= 0.05
    assert all(n > 8 for _, n in trials), "8 prompts cannot tell a new draft's acceptance from the old one's"


def test_a_five_percent_acceptance_drop_blocks_on_the_shipped_pool() -> None:
    # per-token acceptance 0.8311 instead of 0.85 lowers the pooled rate α by 5 % (relative): 0.677 → 0.643
    trials = [new_draft(0.8311, t) for t in range(200)]
    rate = sum(not check.passed for check, _ in trials) / len(trials)
    used = sum(n for _, n in trials) / len(trials)
    print(f"new draft, 5 % lower acceptance: blocked in {rate:.1%} of 200 trials, {used:.0f} prompts used on average")
    assert rate >= 0.95


def test_a_much_worse_draft_blocks_without_the_whole_pool() -> None:
    check, used = new_draft(0.6, 0)
    assert check.details["outcome"] == "BLOCK" and used < SHIPPED_POOL, (used, check.message)


def test_without_a_pool_an_undecided_acceptance_says_how_many_prompts_would_do() -> None:
    check, used = new_draft(0.85, 1, pool=8)
    assert used == 8 and not check.passed and check.details["outcome"] == "UNKNOWN"
    needed = check.details["prompts_needed"]
    assert SHIPPED_POOL >= needed > 8
    assert f"≈ {needed} prompts would (pool hint)" in check.message


def test_a_stored_acceptance_of_zero_blocks_instead_of_passing() -> None:
    """A baseline whose draft accepted nothing makes a relative drop undefined: block, never "0 % drop"."""
    nothing = _acceptance_arm(0.0, 1, 8, 1)
    now = _acceptance_arm(0.85, 1, 8, 1)
    check = acceptance_check(
        "regression:acceptance_rate", ("p", "w"), nothing, now, SLA, Levels(0.01), "base", arm="spec"
    )  # type: ignore[arg-type]
    assert not check.passed and "accepted no draft tokens" in check.message


def test_an_unchanged_draft_repeats_its_counts_and_passes_at_once() -> None:
    same = _acceptance_arm(0.85, 1, 8, 1)
    check = acceptance_check(
        "regression:acceptance_rate", ("p", "w"), same, same, SLA, Levels(0.01), "base", arm="spec"
    )  # type: ignore[arg-type]
    assert check.passed and check.details["relative_drop"] == 0.0


PREMISE = FakeBehaviour(gamma=4)


@pytest.mark.parametrize("p", [0.85, 0.8311])
def test_fake_acceptance_rates_are_as_stated(p: float) -> None:
    # Guards the premise of the acceptance tests: α(p) = Σ_{i=1..γ} p^i / γ for a draft that stops at a rejection.
    expected = sum(p**i for i in range(1, 5)) / 4
    samples = _acceptance_arm(p, 7, 64, 7)
    assert samples.acceptance_rate == pytest.approx(expected, rel=0.03)  # type: ignore[attr-defined]


def test_levels_split_alpha_over_looks_and_the_family() -> None:
    levels = Levels(0.01, looks_of(POLICY, True), 36)
    assert levels.looks == 3
    assert math.isclose(levels.alpha_pass, 0.01 / 3) and math.isclose(levels.alpha_block, 0.01 / 108)


@pytest.mark.parametrize(("beside", "prompts", "ar_rounds"), [(True, 8, 1), (True, 3, 2), (False, 8, 2)])
def test_the_shared_plain_arm_runs_in_the_first_round_only_beside_a_reference(
    beside: bool, prompts: int, ar_rounds: int
) -> None:
    """Beside a reference, the plain arm both speculative arms share is read by their speedups only: one round gives
    the speedup and the outputs, the rounds after it measure the compared arms alone. It runs every round where that
    round alone would leave it under `min_samples` units, and without a reference (every arm's own history). The
    speculative arm's outputs of every round are still set beside plain decoding's (greedy repeats them)."""
    plan = reference_plan()
    if not beside:
        plan = dataclasses.replace(plan, beside=(), reference=None)
    engine = FakeEngine(FakeBehaviour(noise_cv=0.02, acceptance=0.6, draft_cost=0.0), seed=1)
    engine.load(plan.arms, None)  # type: ignore[arg-type]
    policy = dataclasses.replace(POLICY, max_repetitions=POLICY.repetitions)
    measurement = measure_plan(engine, plan, PROMPTS[:prompts], policy, hardware="cpu", probes=1)
    assert measurement.rounds_by_arm == {"ar": ar_rounds, "spec": 2, "ref-spec": 2}
    assert len(measurement.runs["ar"]) == ar_rounds * prompts and len(measurement.runs["spec"]) == 2 * prompts
    assert any(note.startswith("ar: read by the speedups alone") for note in measurement.notes) == (ar_rounds == 1)
    speedup = measure_speedup(measurement.runs["ar"], measurement.runs["spec"])
    assert speedup is not None and speedup.n_units == ar_rounds * prompts and speedup.value > 1.15
    lossless = compare_outputs(measurement, "spec", "ar")  # every round's outputs, beside the plain arm's
    assert (lossless.n, lossless.differing) == (2 * prompts, 0)
