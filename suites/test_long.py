"""Long-context checks: TTFT and peak memory against context length, cost and energy per 1k tokens, the roofline.

They run only on long workloads (a name starting with `long`, e.g. `long_contexts` in specgate.yaml):

    pytest suites/test_long.py --workload=long_contexts

On other workloads these checks are deselected, never skipped (a skipped gate check blocks). The engine runs once per
pair × workload (the `evaluation` fixture); each test reads it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgate.config import WorkloadConfig
from specgate.context_scaling import ContextPoint, check_context_coverage, check_ttft_growth, context_points
from specgate.energy import check_energy_reported
from specgate.evaluation import Evaluation
from specgate.gate import Check
from specgate.longdoc import load_context_targets
from specgate.roofline import check_roofline_reported

pytestmark = pytest.mark.long

Gate = Callable[[Check], None]


@pytest.fixture
def points(evaluation: Evaluation, workload: WorkloadConfig) -> list[ContextPoint]:
    """The measurement grouped by the context lengths the workload file declares (else by prompt length)."""
    return context_points(evaluation, load_context_targets(workload.path))


def test_context_lengths_covered(evaluation: Evaluation, points: list[ContextPoint], gate_check: Gate) -> None:
    gate_check(check_context_coverage(evaluation.where, points))


def test_ttft_grows_with_context(evaluation: Evaluation, points: list[ContextPoint], gate_check: Gate) -> None:
    gate_check(check_ttft_growth(evaluation.where, points))


def test_cost_and_energy_reported(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(check_energy_reported(evaluation.where, evaluation.energy))


def test_roofline_reported(evaluation: Evaluation, gate_check: Gate) -> None:
    gate_check(check_roofline_reported(evaluation.where, evaluation.roofline))
