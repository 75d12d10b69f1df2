"""The speed-versus-accuracy ladder: each rung of a pair's `ladder:` (KV-cache and weight quantization, batching,
speculation, stacked) against full precision — task accuracy on reference answers, perplexity on long documents, and
for a rung meant to be lossless (speculation alone) its greedy outputs. A rung the run only times, on no workload
that scores it, blocks: "not scored".
Speed, memory and latency per rung are in the ladder table; a rung that does not pay is reported as not worth it.
Each rung is also compared with the same rung of the stored baseline (accuracy and perplexity within its limits), so
a later model or engine update is judged step by step.
"""

from __future__ import annotations

import pytest

from specgate.evaluation import Evaluation
from specgate.plugin import GateCheck


@pytest.mark.specgate_check("ladder_accuracy")
def test_ladder_step_keeps_accuracy(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("ladder_perplexity")
def test_ladder_step_keeps_perplexity(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("ladder_agreement")
def test_lossless_ladder_step_keeps_outputs(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("ladder_scored")
def test_ladder_step_is_scored_in_the_run(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("ladder_step_vs_baseline")
def test_ladder_step_vs_baseline(gate_check: GateCheck) -> None:
    gate_check()
