"""The recommendation of each kind of failure names what would help, and only that (checks built by hand: the
advice reads the check's outcome, not how it was measured)."""

from __future__ import annotations

from specgate.checks import NO_BASELINE, REGRESSION, Check
from specgate.checks.advice import advise


def _blocked(name: str, outcome: str, message: str, **details: object) -> Check:
    return Check(name, "p", "w", REGRESSION, False, message, limit=0.05, details={"outcome": outcome, **details})


def test_outputs_not_comparable_with_another_engines_baseline_say_record_one_not_that_they_changed() -> None:
    what = "outputs and acceptance"
    message = "BLOCK: outputs and acceptance not comparable — the baseline was recorded with transformers (float32)"
    checks = [
        _blocked("regression:acceptance_rate", "NOT COMPARABLE", message, what=what),
        _blocked("regression:output_drift", "NOT COMPARABLE", message, what=what),
    ]
    (advice,) = advise(checks, [], "cpu")
    assert advice.startswith("no baseline of this engine and dtype for p/w (regression:acceptance_rate, ")
    assert "--update-baselines" in advice
    assert "acceptance dropped" not in advice and "outputs changed" not in advice


def test_outputs_not_comparable_beside_a_reference_do_not_suggest_the_reference_the_run_has() -> None:
    """A vLLM run in reference mode against a cpu baseline recorded with transformers: the reference comparisons ran
    (and passed); the advice is to record this engine's baseline, not to gate beside a reference."""
    message = "BLOCK: outputs and acceptance not comparable — the baseline was recorded with transformers (float32)"
    passed = Check("reference:output_drift", "p", "w", REGRESSION, True, "PASS", details={"outcome": "PASS"})
    stored = _blocked("regression:output_drift", "NOT COMPARABLE", message, what="outputs and acceptance")
    (advice,) = advise([passed, stored], [], "cpu")
    assert advice.startswith("no baseline of this engine and dtype for p/w (regression:output_drift)")
    assert "--reference" not in advice and "compared them already (reference:*)" in advice
    (alone,) = advise([stored], [], "cpu")
    assert "--reference=PAIR" in alone


def test_a_runtime_change_without_history_says_record_the_history_not_that_the_spread_hides_it() -> None:
    message = (
        "BLOCK: the runtime changed (vllm: none → 0.32.0) and this machine has 0 of the 3 stored runs needed to tell "
        "whether it slowed both arms alike — reference mode cannot see that. Record the released build's history "
        "[baseline baselines/cpu/p/w.json]"
    )
    (advice,) = advise([_blocked("regression:environment", "NOT RECORDED", message, history_runs=0)], [], "cpu")
    assert advice.startswith(
        "no history of the released build on this machine for p/w (regression:environment): the runtime changed "
        "(vllm: none → 0.32.0) and this machine has 0 of the 3 stored runs"
    )
    assert "spread" not in advice and advice.endswith("Record the released build's history")


def test_latency_not_comparable_with_another_machine_says_record_here_or_gate_beside_a_reference() -> None:
    checks = [_blocked("regression:tpot_ms", "NOT COMPARABLE", "BLOCK: latency not comparable", what="latency")]
    (advice,) = advise(checks, [], "cpu")
    assert advice.startswith("no latency baseline of this machine for p/w")


def test_undecided_beside_the_reference_does_not_suggest_the_reference_it_already_has() -> None:
    checks = [_blocked(f"reference:{m}", "UNKNOWN", "BLOCK: UNKNOWN: +2.4 %") for m in ("ttft_ms", "tpot_ms")]
    (advice,) = advise(checks, [], "cpu")
    assert advice.startswith("undecided on p/w (reference:ttft_ms, reference:tpot_ms)")
    assert "gate.max_repetitions" in advice and "--reference" not in advice


def test_undecided_against_the_history_suggests_a_reference() -> None:
    (advice,) = advise([_blocked("regression:tpot_ms", "UNKNOWN", "BLOCK: UNKNOWN")], [], "cpu")
    assert "--reference=PAIR" in advice


def test_an_undecided_acceptance_comparison_is_undecided_not_a_drop() -> None:
    checks = [_blocked("regression:acceptance_rate", "UNKNOWN", "BLOCK: UNKNOWN: acceptance rate 0.59 → 0.47")]
    (advice,) = advise(checks, [], "cpu")
    assert advice.startswith("undecided on p/w (regression:acceptance_rate)")


def test_a_missing_baseline_says_record_one_not_that_acceptance_dropped() -> None:
    message = (
        "BLOCK: no baseline for cpu/p/w (baselines/cpu/p/w.json) — run the reference build with --update-baselines"
    )
    checks = [_blocked(f"regression:{m}", NO_BASELINE, message) for m in ("acceptance_rate", "output_drift")]
    (advice,) = advise(checks, [], "cpu")
    assert advice.startswith("baseline problem on p/w: BLOCK: no baseline")
