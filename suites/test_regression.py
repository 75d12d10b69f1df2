"""Regression: the candidate against the released configuration measured beside it (reference mode), and against
the stored baselines of this hardware — one item per metric, each PASS, BLOCK or UNKNOWN with its statistics and
the smallest slowdown it would have caught.

Latency is judged beside the reference when the pair has one (`reference:` in specgate.yaml, or `--reference`), and
otherwise against this machine's stored runs only; acceptance, outputs and task accuracy are also compared with the
stored baseline of any machine. Without a baseline those items block ("run the reference build with
--update-baselines"); in an update run they pass and the run is added to the baseline's history at the end.
"""

from __future__ import annotations

import pytest

from specgate.plugin import GateCheck


@pytest.mark.specgate_check("not_slower_than_reference")
def test_not_slower_than_reference(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("outputs_match_reference")
def test_outputs_match_reference(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("task_accuracy_vs_reference")
def test_task_accuracy_vs_reference(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("no_regression")
def test_no_regression(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("outputs_match_baseline")
def test_outputs_match_baseline(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("task_accuracy_not_lower")
def test_task_accuracy_not_lower(gate_check: GateCheck) -> None:
    gate_check()


@pytest.mark.specgate_check("released_runtime")
def test_released_runtime_unchanged_or_not_slower(gate_check: GateCheck) -> None:
    """Reference mode cannot see a runtime change that slows both arms alike: the released arm's runtime (engine,
    torch, driver, model files) against the baseline's, and against this machine's history when it changed."""
    gate_check()
