"""Checks: one promise (an SLA, a regression comparison, losslessness, a resource report) judged on one pair ×
workload (and arm), with its evidence. Grouped by concern, one module each:

    sla           enough samples, P99 TTFT, decode rate, speedup, acceptance floor; rollback advice
    drift         greedy losslessness, task accuracy between arms, content flags, sampled distributions
    regression    the candidate against the reference measured beside it, or against stored baselines
    resources     cost and energy per 1k tokens, the decode roofline
    long_context  TTFT and memory against context length
    catalogue     the list of every check, what it applies to, and how it is computed (the suites and the
                  pytest-free runner both read it)

Every check is a pure function from an `Evaluation` (or comparisons) and limits to a `Check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack

SLA = "sla"
REGRESSION = "regression"
DRIFT = "drift"
INFRASTRUCTURE = "infrastructure"
CATEGORIES = (SLA, REGRESSION, DRIFT, INFRASTRUCTURE)
# `details["outcome"]` of a regression check that has nothing to compare with: the stored baseline is missing, or
# its file cannot be used (corrupt, another schema or pair)
NO_BASELINE = "NO BASELINE"
UNUSABLE_BASELINE = "UNUSABLE BASELINE"


class Outcome(str, Enum):
    """What a comparison decided (`Check.outcome`): PASS, BLOCK ("REGRESSED": significant and beyond the
    tolerance), UNKNOWN (the data cannot tell), or why there was nothing to decide on."""

    PASS = "PASS"
    BLOCK = "BLOCK"
    UNKNOWN = "UNKNOWN"
    NOT_COMPARABLE = "NOT COMPARABLE"
    NO_BASELINE = NO_BASELINE
    UNUSABLE_BASELINE = UNUSABLE_BASELINE
    NOT_RECORDED = "NOT RECORDED"
    NOT_MEASURED = "NOT MEASURED"
    UPDATE = "UPDATE"


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one check, with the numbers that decided it. `arm` is the arm it judged, if one."""

    name: str
    pair: str
    workload: str
    category: str
    passed: bool
    message: str
    observed: float | None = None
    limit: float | None = None
    unit: str = ""
    n: int | None = None
    ci: tuple[float, float] | None = None
    baseline: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    arm: str | None = None

    @property
    def outcome(self) -> Outcome | None:
        """The comparison's decision, typed; None for a check that states none (an SLA, a report)."""
        stated = self.details.get("outcome")
        return None if stated is None else Outcome(stated)

    @property
    def compared(self) -> RegressionKey | None:
        """What a regression check compared (`reference:<statistic>` or `regression:<statistic>`); None for the
        other checks."""
        prefix, _, statistic = self.name.partition(":")
        against = next((a for a in Against if a.value == prefix), None)
        return None if against is None or not statistic else RegressionKey(against, statistic)

    @property
    def key(self) -> str:
        """pair/workload/name, with the arm when the name does not say it (checks of the released arm `spec` do not;
        `regression:ladder:<arm>` does)."""
        implied = self.arm in (None, "spec") or f":{self.arm}." in self.name or self.name.endswith(f":{self.arm}")
        return f"{self.pair}/{self.workload}/{self.name if implied else f'{self.name}[{self.arm}]'}"


class Against(str, Enum):
    """What a regression check compares this run with: the released configuration measured beside it, or this
    machine's stored baseline history. The value is the prefix of the check's name."""

    REFERENCE = "reference"
    BASELINE = "regression"


@dataclass(frozen=True, slots=True)
class RegressionKey:
    """One regression check of a pair × workload: what it compares against, and the statistic it compares (a metric
    key such as `tpot_ms` or `acceptance_rate@spec`, `output_drift`, `task_accuracy`, `environment`,
    `ladder:<arm>`)."""

    against: Against
    statistic: str

    @property
    def name(self) -> str:
        """The check's name in the verdict: `reference:<statistic>` or `regression:<statistic>`."""
        return f"{self.against.value}:{self.statistic}"


def reference_key(statistic: str) -> RegressionKey:
    """The key of a comparison with the reference measured beside the candidate."""
    return RegressionKey(Against.REFERENCE, statistic)


def baseline_key(statistic: str) -> RegressionKey:
    """The key of a comparison with this machine's stored baseline."""
    return RegressionKey(Against.BASELINE, statistic)


class Evidence(TypedDict, total=False):
    """The numbers a `Check` may carry beside its decision (see `Check`)."""

    observed: float | None
    limit: float | None
    unit: str
    n: int | None
    ci: tuple[float, float] | None
    baseline: float | None
    details: Mapping[str, Any]
    arm: str | None


def check(
    name: str, where: tuple[str, str], category: str, passed: bool, message: str, **evidence: Unpack[Evidence]
) -> Check:
    """A `Check` of the pair × workload `where`."""
    return Check(name, where[0], where[1], category, passed, message, **evidence)
