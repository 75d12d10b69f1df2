"""The speedup's cost model: fitted on synthetic step timings of known costs, it finds those costs, reproduces the
speedup through its waterfall, and advises the draft length the known costs make best; the gate prints it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from specgate.engines.base import ArmRun, RequestTrace
from specgate.measure.stepcosts import MAX_GAMMA, explain_speedup


@dataclass(frozen=True)
class Costs:
    """The true costs the synthetic traces are made of (ms)."""

    plain_ms: float = 30.0
    per_1k_context_ms: float = 8.0
    verify_ms_per_token: float = 4.0
    draft_ms: float = 0.6
    draft_ms_per_token: float = 0.0
    overhead_ms: float = 3.0
    rollback_ms: float = 1.5
    ttft_ms: float = 200.0
    acceptance: float = 0.7
    drafting_share: float = 0.9
    noise_ms: float = 0.3


PROMPT_TOKENS = 300


def _traces(costs: Costs, gamma: int, *, requests: int = 24, tokens: int = 96, seed: int = 1) -> tuple[ArmRun, ...]:
    """Plain (gamma 0) or speculative traces whose steps cost exactly what `costs` says, plus seeded noise."""
    rng = np.random.default_rng([seed, gamma])
    runs = []
    clock = 0.0
    for index in range(requests):
        submit = clock
        times, sizes, drafted, accepted, draft_s = [submit + costs.ttft_ms / 1000], [1], [0], [0], [0.0]
        rejected = False
        while sum(sizes) < tokens:
            context = PROMPT_TOKENS + sum(sizes)
            k = gamma if gamma and rng.random() < costs.drafting_share else 0
            hits = rng.random(k) < costs.acceptance
            n = k if hits.all() else int(np.argmin(hits))
            n = min(n, tokens - sum(sizes) - 1)
            draft = (costs.draft_ms + costs.draft_ms_per_token * k) if gamma else 0.0
            extra = costs.overhead_ms + costs.rollback_ms * rejected if gamma else 0.0
            step = costs.plain_ms + costs.per_1k_context_ms * (context - PROMPT_TOKENS) / 1000
            step += costs.verify_ms_per_token * k + draft + extra + rng.normal(0, costs.noise_ms)
            times.append(times[-1] + step / 1000)
            sizes.append(n + 1)
            drafted.append(k)
            accepted.append(n)
            draft_s.append(draft / 1000)
            rejected = n < k
        clock = times[-1] + 0.01
        arm = "spec" if gamma else "ar"
        trace = RequestTrace(
            f"p{index}",
            arm,
            0,
            submit,
            tuple(times),
            tuple(sizes),
            tuple(range(sum(sizes))),
            "",
            PROMPT_TOKENS,
            tuple(drafted) if gamma else (),
            tuple(accepted) if gamma else (),
            done_s=clock,
            draft_s=tuple(draft_s) if gamma else (),
        )
        runs.append(ArmRun(arm, (trace,), clock - submit))
    return tuple(runs)


def _true_speedup(costs: Costs, gamma: int, context: float, decode_tokens: float) -> float:
    """The speedup the known costs give at draft length `gamma` (independent of the fitted model's code)."""
    plain_step = costs.plain_ms + costs.per_1k_context_ms * (context - PROMPT_TOKENS) / 1000
    q, a = costs.drafting_share, costs.acceptance
    tokens = 1 + q * sum(a**i for i in range(1, gamma + 1))
    rejects = q * (1 - a**gamma)
    draft = costs.draft_ms + costs.draft_ms_per_token * q * gamma
    step = plain_step + costs.verify_ms_per_token * q * gamma + draft + costs.overhead_ms + costs.rollback_ms * rejects
    return (costs.ttft_ms + decode_tokens * plain_step) / (costs.ttft_ms + decode_tokens * step / tokens)


def _measured(plain: tuple[ArmRun, ...], spec: tuple[ArmRun, ...]) -> float:
    return sum(r.wall_s for r in plain) / sum(r.wall_s for r in spec)


def test_the_fit_finds_the_known_costs_and_the_waterfall_multiplies_out_to_the_measured_speedup() -> None:
    costs = Costs()
    plain, spec = _traces(costs, 0), _traces(costs, 3)
    measured = _measured(plain, spec)
    explained = explain_speedup(plain, spec, gamma=3, method="prompt_lookup", measured_speedup=measured, seed=0)
    assert explained is not None
    c = explained.costs
    assert c.plain_ms_per_1k_context.value == pytest.approx(costs.per_1k_context_ms, abs=1.0)
    assert c.verify_ms_per_token is not None and c.rollback_ms is not None and c.draft_ms_per_step is not None
    assert c.verify_ms_per_token.value == pytest.approx(costs.verify_ms_per_token, abs=0.15)
    assert c.verify_ms_per_token.ci[0] <= costs.verify_ms_per_token <= c.verify_ms_per_token.ci[1]
    assert c.rollback_ms.value == pytest.approx(costs.rollback_ms, abs=0.25)
    assert c.draft_ms_per_step.value == pytest.approx(costs.draft_ms, abs=0.01)  # a lookup runs every step
    true_overhead = costs.overhead_ms + costs.rollback_ms * costs.drafting_share * (1 - costs.acceptance**3)
    assert c.overhead_ms_per_step.value == pytest.approx(true_overhead, abs=0.3)
    assert c.steps > 24 * 30 and c.requests == 24
    names = [s.name for s in explained.waterfall]
    assert names == [
        "ideal (c = 0)",
        "acceptance as measured",
        "verify cost",
        "draft cost",
        "per-step overhead",
        "prefill",
        "residual: fit",
        "residual: outside the requests",
    ]
    product = explained.waterfall[0].speedup * float(np.prod([s.factor for s in explained.waterfall[1:]]))
    assert product == pytest.approx(measured, rel=1e-9)
    assert explained.waterfall[-1].speedup == pytest.approx(measured)
    assert all(s.factor < 1 for s in explained.waterfall[2:6])  # each cost takes something away
    assert explained.predicted_speedup.value == pytest.approx(measured, rel=0.02)
    low, high = explained.predicted_speedup.ci
    assert low < explained.predicted_speedup.value < high


def test_it_advises_the_draft_length_the_known_costs_make_best_with_extrapolated_acceptance() -> None:
    costs = Costs(verify_ms_per_token=1.0, acceptance=0.8, overhead_ms=1.0)
    plain, spec = _traces(costs, 0, seed=3), _traces(costs, 3, seed=3)
    explained = explain_speedup(plain, spec, gamma=3, method="prompt_lookup", measured_speedup=_measured(plain, spec))
    assert explained is not None
    context, decode = explained.costs.context_tokens, 95.0
    truth = {g: _true_speedup(costs, g, context, decode) for g in range(1, MAX_GAMMA + 1)}
    best = max(truth, key=lambda g: truth[g])
    assert best > 3  # the known costs make a longer draft pay: the advice must extrapolate beyond the measured γ
    assert explained.best_gamma == pytest.approx(best, abs=1)
    for length in explained.draft_lengths:
        assert length.predicted_speedup == pytest.approx(truth[length.gamma], rel=0.04), length
        assert length.extrapolated == (length.gamma > 3)
    ratio = float(explained.extrapolation.split("r=", 1)[1].split(" ", 1)[0])
    assert ratio == pytest.approx(costs.acceptance, abs=0.03)


def test_a_costly_verify_makes_a_shorter_draft_best() -> None:
    costs = Costs(verify_ms_per_token=12.0, acceptance=0.45)
    plain, spec = _traces(costs, 0, seed=5), _traces(costs, 4, seed=5)
    explained = explain_speedup(plain, spec, gamma=4, method="prompt_lookup", measured_speedup=_measured(plain, spec))
    assert explained is not None
    truth = {g: _true_speedup(costs, g, explained.costs.context_tokens, 95.0) for g in range(1, MAX_GAMMA + 1)}
    assert explained.best_gamma == max(truth, key=lambda g: truth[g]) < 4


def test_a_draft_model_drafting_gamma_every_step_gets_its_draft_cost_but_no_length_advice() -> None:
    costs = Costs(draft_ms=0.5, draft_ms_per_token=6.0, drafting_share=1.0)
    plain, spec = _traces(costs, 0), _traces(costs, 4)
    explained = explain_speedup(plain, spec, gamma=4, method="draft_model", measured_speedup=_measured(plain, spec))
    assert explained is not None
    assert explained.costs.draft_ms_per_token is not None
    assert explained.costs.draft_ms_per_token.value == pytest.approx(0.5 / 4 + 6.0, abs=0.3)
    assert explained.costs.verify_ms_per_token is None  # every step drafted 4 (but the last): not separable
    assert explained.best_gamma is None and explained.draft_lengths == ()
    assert "cannot be told from the per-step overhead" in explained.extrapolation


def test_no_explanation_without_per_step_counts() -> None:
    costs = Costs()
    plain, spec = _traces(costs, 0), _traces(costs, 3)
    counted_in_totals = tuple(ArmRun(r.arm, tuple(_without_steps(t) for t in r.traces), r.wall_s) for r in spec)
    assert explain_speedup(plain, counted_in_totals, gamma=3, method="prompt_lookup", measured_speedup=1.2) is None
    assert explain_speedup(plain, plain, gamma=3, method="prompt_lookup", measured_speedup=1.0) is None


def _without_steps(trace: RequestTrace) -> RequestTrace:
    from dataclasses import replace

    return replace(trace, drafted=(sum(trace.drafted),), accepted=(sum(trace.accepted),))


def test_the_gate_prints_the_waterfall_in_the_terminal_summary_and_verdict(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project("acceptance=0.6, draft_cost=0.02")
    result = pytester.runpytest("suites/test_sla.py")
    result.stdout.fnmatch_lines(
        [
            "*speedup waterfall spec: ideal (c = 0) *× → acceptance as measured ×* → verify cost ×* → draft cost ×*"
            " → per-step overhead ×* → prefill ×* = predicted *× (95% CI *); residual fit ×*, outside the requests"
            " ×* → measured *× (predicted *",
            "*step costs spec: plain step * ms * at * tokens of context *; lookup * ms per step*",
        ]
    )
    summary = (root / "reports" / "summary.md").read_text(encoding="utf-8")
    section = summary.split("### Where the speedup goes", 1)[1].split("###", 1)[0]
    assert "| pair | workload | arm | ideal (c = 0) | acceptance | verify | draft | overhead |" in section
    assert "| fake-pair | docs | spec |" in section
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    spec = next(a for e in verdict["evaluations"] for a in e["arms"] if a["name"] == "spec")
    explanation = spec["explanation"]
    assert explanation["gamma"] == 4 and len(explanation["waterfall"]) == 8
    assert explanation["waterfall"][-1]["speedup"] == pytest.approx(spec["speedup"]["value"])
    assert "draft_s" not in json.dumps(verdict)  # per-step records stay out of the documents


def test_draft_length_advice_only_when_the_better_gamma_clears_the_configured_one() -> None:
    from types import SimpleNamespace

    from specgate.checks.draft_length import draft_length_advice
    from specgate.measure.stepcosts import DraftLength, SpeedupExplanation

    def evaluation(best_ci: tuple[float, float]) -> SimpleNamespace:
        lengths = (
            DraftLength(3, 1.40, (1.30, 1.50), 2.0, 50.0, False),
            DraftLength(6, 1.60, best_ci, 2.6, 60.0, True),
        )
        explanation = SpeedupExplanation(
            arm="spec",
            reference="ar",
            method="prompt_lookup",
            gamma=3,
            costs=None,
            waterfall=(),  # type: ignore[arg-type]
            predicted_speedup=None,
            measured_speedup=1.4,
            draft_lengths=lengths,
            best_gamma=6,  # type: ignore[arg-type]
            extrapolation="geometric",
        )
        plan = SimpleNamespace(gated=("spec",), released="spec")
        return SimpleNamespace(where=("pair", "docs"), plan=plan, explanations={"spec": explanation})

    (advice,) = draft_length_advice(evaluation((1.45, 1.75)), "cpu")  # type: ignore[arg-type]
    assert "num_tokens=6" in advice and "1.60×" in advice and "γ=3" in advice
    assert draft_length_advice(evaluation((1.20, 2.00)), "cpu") == []  # type: ignore[arg-type] # interval overlaps


def test_the_extrapolation_names_one_position_when_one_token_is_drafted() -> None:
    costs = Costs(verify_ms_per_token=1.0, acceptance=0.8)
    plain, spec = _traces(costs, 0, seed=7), _traces(costs, 1, seed=7)
    explained = explain_speedup(plain, spec, gamma=1, method="prompt_lookup", measured_speedup=_measured(plain, spec))
    assert explained is not None
    assert "(the mean conditional acceptance of position 1)" in explained.extrapolation, explained.extrapolation
