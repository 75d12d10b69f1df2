"""Long-context checks: TTFT and peak memory against context length, cost and energy per 1k tokens, the roofline.

They run only on long workloads (`long: true` in specgate.yaml, e.g. `long_contexts`):

    pytest suites/test_long.py --workload=long_contexts

The `evaluation` argument measures the pair × workload once per session, before its first check (and carries its
metrics table and plots in the Allure report).
"""

from __future__ import annotations

import pytest

from specgate.evaluation import Evaluation
from specgate.plugin import GateCheck


@pytest.mark.specgate_check("context_coverage")
def test_context_lengths_covered(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("ttft_growth")
def test_ttft_grows_with_context(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("cost_and_energy_reported")
def test_cost_and_energy_reported(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("roofline_reported")
def test_roofline_reported(evaluation: Evaluation, gate_check: GateCheck) -> None:
    gate_check()
