"""Regression against the stored baseline of this hardware: one item per metric, with its statistics.

Without a baseline every item blocks ("run the reference build with --update-baselines"); in an update run they
pass and the baselines are written at the end of the session.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.config import PairConfig, WorkloadConfig
from specgate.gate import Check
from specgate.regression import ACCEPTANCE, METRICS, OUTPUT_DRIFT, TASK_ACCURACY
from specgate.run import GateRun

Gate = Callable[[Check], None]


@pytest.mark.gate_speed
@pytest.mark.parametrize("metric", [*(m.name for m in METRICS), ACCEPTANCE])
def test_no_regression(
    gate_run: GateRun, pair: PairConfig, workload: WorkloadConfig, metric: str, gate_check: Gate
) -> None:
    gate_check(gate_run.regression_check(pair.name, workload.name, metric))


def test_outputs_match_baseline(
    gate_run: GateRun, pair: PairConfig, workload: WorkloadConfig, gate_check: Gate
) -> None:
    gate_check(gate_run.regression_check(pair.name, workload.name, OUTPUT_DRIFT))


@pytest.mark.gate_tasks("numeric", "span", "summary")
def test_task_accuracy_not_lower(
    gate_run: GateRun, pair: PairConfig, workload: WorkloadConfig, gate_check: Gate
) -> None:
    gate_check(gate_run.regression_check(pair.name, workload.name, TASK_ACCURACY))
