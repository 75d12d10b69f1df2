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

from specgate.comparison import ACCEPTANCE, OUTPUT_DRIFT, TASK_ACCURACY, split_key

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


class Failure(str, Enum):
    """Why a check failed (`Check.failure`): the kind that the advice, Allure's categories and the JUnit failure
    type name. `heading` is the name a person reads."""

    INFRASTRUCTURE = "infrastructure"  # nothing usable was measured
    LATENCY = "latency"  # significantly slower, beyond the tolerance
    UNDECIDED = "undecided"  # the spread hides a change of the tolerance's size
    NOT_COMPARABLE = "not comparable"  # latency stored on another machine
    OTHER_ENGINE = "other engine"  # outputs and acceptance stored by another engine or dtype
    ACCEPTANCE = "acceptance"
    OUTPUTS = "outputs"
    ACCURACY = "accuracy"
    SLA = "sla"
    BASELINE = "baseline"  # missing or unusable
    NO_HISTORY = "no history"  # the runtime changed and this machine has too few stored runs to judge it
    LADDER = "ladder"  # a rung rolled back
    LADDER_UNSCORED = "ladder unscored"
    LADDER_REGRESSED = "ladder regressed"  # a rung worse than its stored self
    OTHER = "other"

    @property
    def heading(self) -> str:
        return FAILURE_HEADINGS[self]


FAILURE_HEADINGS = {
    Failure.INFRASTRUCTURE: "Infrastructure error",
    Failure.LATENCY: "Latency regression",
    Failure.UNDECIDED: "Undecided: the spread hides the tolerance",
    Failure.NOT_COMPARABLE: "No latency baseline of this machine",
    Failure.OTHER_ENGINE: "No baseline of this engine and dtype",
    Failure.ACCEPTANCE: "Acceptance dropped",
    Failure.OUTPUTS: "Drift: output differs from the reference",
    Failure.ACCURACY: "Task accuracy dropped",
    Failure.SLA: "SLA breach",
    Failure.BASELINE: "Baseline missing or unusable",
    Failure.NO_HISTORY: "Runtime changed, no history of this machine",
    Failure.LADDER: "Ladder step rolled back",
    Failure.LADDER_UNSCORED: "Ladder step not scored in the run",
    Failure.LADDER_REGRESSED: "Ladder step worse than its baseline",
    Failure.OTHER: "Other gate failure",
}


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
    def failure(self) -> Failure | None:
        """Why the check failed; None when it passed."""
        return None if self.passed else _failure(self)

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


def _failure(check: Check) -> Failure:
    outcome, compared, details = check.outcome, check.compared, check.details
    metric = split_key(check.name if compared is None else compared.statistic)[1]
    if check.category == INFRASTRUCTURE:
        return Failure.INFRASTRUCTURE
    if details.get("ladder") and outcome is not None:  # a step against its stored self
        return {Outcome.BLOCK: Failure.LADDER_REGRESSED, Outcome.NOT_COMPARABLE: Failure.OTHER_ENGINE}.get(
            outcome, Failure.BASELINE
        )
    if details.get("ladder"):
        return Failure.LADDER_UNSCORED if details.get("unscored") else Failure.LADDER
    if check.category == SLA:
        return Failure.SLA
    if outcome is Outcome.NOT_COMPARABLE:
        return Failure.NOT_COMPARABLE if details.get("what", "latency") == "latency" else Failure.OTHER_ENGINE
    if outcome is Outcome.UNKNOWN:
        return Failure.UNDECIDED
    if outcome is Outcome.NOT_RECORDED:
        return Failure.NO_HISTORY
    if outcome in (Outcome.NO_BASELINE, Outcome.UNUSABLE_BASELINE):
        return Failure.BASELINE
    if check.category == DRIFT or metric == OUTPUT_DRIFT:
        return Failure.OUTPUTS
    if metric == TASK_ACCURACY:
        return Failure.ACCURACY
    if metric == ACCEPTANCE:
        return Failure.ACCEPTANCE
    if outcome is Outcome.BLOCK:
        return Failure.LATENCY
    return Failure.BASELINE if check.category == REGRESSION else Failure.OTHER


def check(
    name: str, where: tuple[str, str], category: str, passed: bool, message: str, **evidence: Unpack[Evidence]
) -> Check:
    """A `Check` of the pair × workload `where`: the one way the package builds one (a verdict file read back is
    the other). A category outside `CATEGORIES` or an outcome outside `Outcome` is a bug, refused here rather than
    misread by the advice, the stop rule or the reports."""
    if category not in CATEGORIES:
        raise ValueError(f"check {name!r}: category {category!r} is not one of {CATEGORIES}")
    stated = evidence.get("details", {}).get("outcome")
    if stated is not None and stated not in {o.value for o in Outcome}:
        raise ValueError(f"check {name!r}: outcome {stated!r} is not one of {[o.value for o in Outcome]}")
    return Check(name, where[0], where[1], category, passed, message, **evidence)
