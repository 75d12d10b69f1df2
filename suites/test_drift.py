"""Output drift: greedy speculative decoding is lossless, so its output must equal plain decoding's."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.evaluation import Evaluation
from specgate.gate import Check


def test_greedy_identity(evaluation: Evaluation, gate_check: Callable[[Check], None]) -> None:
    gate_check(evaluation.greedy_identity())


@pytest.mark.gate_tasks("numeric", "span", "summary")
def test_task_accuracy_same_in_both_arms(evaluation: Evaluation, gate_check: Callable[[Check], None]) -> None:
    gate_check(evaluation.task_accuracy())
