"""What the regression checks judge: one pair × workload with this run's record and the stored baseline
(`specgate.checks.judgement` judges it against both; `specgate.checks.ladder_baseline` compares its ladder)."""

from __future__ import annotations

from dataclasses import dataclass

from specgate.checks import Check, RegressionKey
from specgate.config import SlaLimits
from specgate.plan import MeasurementPlan
from specgate.store.baselines import Baseline
from specgate.store.records import RunRecord

Results = dict[RegressionKey, Check | Exception]  # the regression checks of one pair × workload
Judged = dict[tuple[str, str], Results | Exception]  # by pair × workload; a failed measurement's exception


@dataclass(frozen=True, slots=True)
class Subject:
    """One pair × workload as the regression checks see it: its plan, this run's record (every arm), the stored
    baseline (None when there is none), and the limits it is judged with."""

    plan: MeasurementPlan
    record: RunRecord
    baseline: Baseline | Exception | None
    source: str
    sla: SlaLimits
    units_per_round: int
    rounds: int
    acceptance_steps: tuple[int, ...] = ()
    pool_hint: str = ""
