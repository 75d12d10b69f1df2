"""Output drift: greedy speculative decoding is lossless, so every speculative arm's output must equal plain
decoding's; on workloads with reference answers its task accuracy must not be lower; workloads that declare
`content:` or `sampling:` also compare content flags and sampled-output distributions.

The `evaluation` argument measures the pair × workload once per session, before its first check (and carries its
metrics table and plots in the Allure report).
"""

from __future__ import annotations

import pytest

from specgate.evaluation import Evaluation
from specgate.plugin import GateCheck


@pytest.mark.specgate_check("greedy_identity")
def test_greedy_identity(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("task_accuracy")
def test_task_accuracy_same_in_both_arms(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("content_flags")
def test_content_flags(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("sampled_distribution")
def test_sampled_distribution(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()
