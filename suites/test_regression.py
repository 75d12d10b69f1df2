"""Regression against the stored baseline of this hardware: one item per metric, with its statistics.

Without a baseline every item blocks ("run the reference build with --update-baselines"); in an update run they
pass and the baselines are written at the end of the session.
"""

from __future__ import annotations

import pytest

from specgate.plugin import GateCheck


@pytest.mark.specgate_check("no_regression")
def test_no_regression(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("outputs_match_baseline")
def test_outputs_match_baseline(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("task_accuracy_not_lower")
def test_task_accuracy_not_lower(gate_check: GateCheck) -> None:
    gate_check()
