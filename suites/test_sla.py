"""SLA checks: every pair × workload must meet the hardware profile's limits, and speculation must pay.

Each test is one promise. The engine runs once per pair × workload (the `evaluation` fixture); the tests read it.
"""

from __future__ import annotations

from collections.abc import Callable

from specgate.evaluation import Evaluation
from specgate.gate import Check

Gate = Callable[[Check], None]


def test_enough_samples(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.samples())


def test_p99_ttft(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.p99_ttft())


def test_decode_rate(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.decode_rate())


def test_speedup(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.speedup_check())


def test_acceptance_rate(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(evaluation.acceptance_rate())
