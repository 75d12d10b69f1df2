"""SLA checks: every gated arm of every pair × workload must meet the hardware profile's limits, and speculation
must pay. Each test is one promise, computed by specgate's check catalogue; the engine runs once per pair ×
workload. Speed checks do not run on accuracy probes (workloads with `gate_speed: false`).

The `evaluation` argument measures the pair × workload once per session, before its first check (and carries its
metrics table and plots in the Allure report).
"""

from __future__ import annotations

import pytest

from specgate.evaluation import Evaluation
from specgate.plugin import GateCheck


@pytest.mark.specgate_check("samples")
def test_enough_samples(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("p99_ttft")
def test_p99_ttft(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("decode_rate")
def test_decode_rate(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("speedup")
def test_speedup(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("acceptance_rate")
def test_acceptance_rate(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("concurrency_knee")
def test_concurrency_knee(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()
