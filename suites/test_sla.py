"""SLA checks: every pair × workload must meet the hardware profile's limits, and speculation must pay.

Each test is one promise. The engine runs once per pair × workload (the `evaluation` fixture); the tests read it.
Speed checks (`gate_speed`) do not run on accuracy probes (workloads with `gate_speed: false`).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.evaluation import Evaluation
from specgate.gate import Check

Gate = Callable[[Check], None]


def test_enough_samples(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.samples())


@pytest.mark.gate_speed
def test_p99_ttft(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.p99_ttft())


@pytest.mark.gate_speed
def test_decode_rate(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.decode_rate())


@pytest.mark.gate_speed
def test_speedup(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.speedup_check())


@pytest.mark.gate_speed
def test_acceptance_rate(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.acceptance_rate())
