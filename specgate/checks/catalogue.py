"""The catalogue: every check of the gate, what it applies to, and how it is computed.

A check is computed per pair × workload (`per="workload"`), per gated arm of the plan (`per="arm"`: each
speculative candidate arm, `spec` and any extra arm), or per regression metric (`per="metric"`). It applies only
where it means something: speed checks not on accuracy probes (`gate_speed: false`), task checks only on workloads
with reference answers, long-context checks only on `long: true` workloads, content and sampled-distribution checks
only on workloads that declare them, a ladder step against its stored self only on workloads that score task
accuracy or perplexity (`needs="scores"`), whether a step is scored somewhere in the run only on workloads that
just time it (`needs="unscored"`), output agreement only for steps meant to be lossless (`needs="lossless"`). A
check that does not apply is never run (deselected, not skipped: a skipped gate check blocks).

The suites in `suites/` declare one pytest test per catalogue entry (`@pytest.mark.specgate_check("p99_ttft")`),
and `GateRun.run_all` runs the same entries without pytest: one list, two ways to run it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from specgate.accuracy import SCORED_TASKS
from specgate.checks import (
    Check,
    RegressionKey,
    baseline_key,
    drift,
    ladder,
    long_context,
    reference_key,
    resources,
    sla,
    sweep,
)
from specgate.checks.environment import ENVIRONMENT
from specgate.checks.ladder_baseline import ladder_key
from specgate.checks.regression import latency_keys, stored_keys
from specgate.comparison import OUTPUT_DRIFT, TASK_ACCURACY
from specgate.ladder import meant_lossless

if TYPE_CHECKING:
    from specgate.config import GatePolicy, SlaLimits, WorkloadConfig
    from specgate.evaluation import Evaluation
    from specgate.plan import MeasurementPlan
    from specgate.stats.distribution import DistributionTest

ANSWERED_TASKS = frozenset(SCORED_TASKS)


class Context(Protocol):
    """What a check reads from the gate run (`specgate.run.GateRun`)."""

    @property
    def policy(self) -> GatePolicy: ...

    @property
    def workloads(self) -> Sequence[str]: ...

    def plan(self, pair: str, workload: str) -> MeasurementPlan: ...

    def workload(self, name: str) -> WorkloadConfig: ...

    def sla(self, pair: str) -> SlaLimits: ...

    def evaluation(self, pair: str, workload: str) -> Evaluation: ...

    def regression_check(self, pair: str, workload: str, key: RegressionKey) -> Check: ...

    def sampled(self, pair: str, workload: str, arm: str) -> DistributionTest: ...


@dataclass(frozen=True, slots=True)
class Target:
    """Where a check is computed: a pair × workload and, for per-arm or per-metric checks, the arm or metric."""

    pair: str
    workload: str
    param: str | None = None


Compute = Callable[[Context, Target], Check]


@dataclass(frozen=True, slots=True)
class CheckSpec:
    """One entry of the catalogue."""

    name: str
    concern: str
    per: Literal["workload", "arm", "metric", "step"]
    compute: Compute
    speed: bool = False
    tasks: frozenset[str] | None = None
    long_only: bool = False
    needs: Literal["content", "sampling", "perplexity", "scores", "unscored", "lossless", "sweep"] | None = None
    metric_keys: Callable[[MeasurementPlan], tuple[str, ...]] | None = None
    reference_only: bool = False

    def applies(self, context: Context, target: Target) -> bool:
        """Whether the check means something on this target (else it is not run at all)."""
        workload = context.workload(target.workload)
        if bool(workload.sweep) != (self.needs == "sweep") and self.name not in SWEEP_TOO:
            return False  # a sweep is judged on its knee (and its sample count), nothing else of it on one level
        if self.speed and not workload.gate_speed:
            return False
        if self.tasks is not None and workload.task not in self.tasks:
            return False
        if self.long_only and not workload.long:
            return False
        if self.needs == "content" and not workload.content:
            return False
        if self.needs == "sampling" and workload.sampling is None:
            return False
        if self.needs == "perplexity" and not workload.perplexity:
            return False
        if self.needs == "scores" and not scores(workload):
            return False
        if self.needs == "unscored" and scores(workload):
            return False
        plan = context.plan(target.pair, target.workload)
        if self.needs == "lossless" and (target.param is None or not meant_lossless(plan, target.param)):
            return False
        if self.reference_only and plan.reference is None:
            return False
        if self.per == "arm":
            return target.param in plan.gated
        if self.per == "step":
            return any(step.arm == target.param for step in plan.ladder)
        if self.per == "metric":
            return self.metric_keys is not None and target.param in self.metric_keys(plan)
        return True


# the checks that apply to a concurrency sweep besides its own
SWEEP_TOO = frozenset({"samples"})


def scores(workload: WorkloadConfig) -> bool:
    """Whether a workload scores what a ladder step costs: task accuracy on reference answers, or perplexity."""
    return workload.task in ANSWERED_TASKS or workload.perplexity


def _param(target: Target) -> str:
    assert target.param is not None
    return target.param


def _eval(run: Context, target: Target) -> Evaluation:
    return run.evaluation(target.pair, target.workload)


CATALOGUE: tuple[CheckSpec, ...] = (
    CheckSpec(
        "samples", "sla", "workload", lambda run, target: sla.samples(_eval(run, target), run.policy.min_samples)
    ),
    CheckSpec(
        "p99_ttft",
        "sla",
        "arm",
        lambda run, target: sla.p99_ttft(_eval(run, target), _param(target), run.sla(target.pair)),
        speed=True,
    ),
    CheckSpec(
        "decode_rate",
        "sla",
        "arm",
        lambda run, target: sla.decode_rate(_eval(run, target), _param(target), run.sla(target.pair)),
        speed=True,
    ),
    CheckSpec(
        "speedup",
        "sla",
        "arm",
        lambda run, target: sla.speedup(_eval(run, target), _param(target), run.sla(target.pair)),
        speed=True,
    ),
    CheckSpec(
        "acceptance_rate",
        "sla",
        "arm",
        lambda run, target: sla.acceptance_rate(_eval(run, target), _param(target), run.sla(target.pair)),
        speed=True,
    ),
    CheckSpec(
        "concurrency_knee",
        "sla",
        "arm",
        lambda run, target: sweep.concurrency_knee(_eval(run, target), _param(target), run.sla(target.pair)),
        needs="sweep",
    ),
    CheckSpec(
        "greedy_identity",
        "drift",
        "arm",
        lambda run, target: drift.greedy_identity(_eval(run, target), _param(target), run.sla(target.pair)),
    ),
    CheckSpec(
        "task_accuracy",
        "drift",
        "arm",
        lambda run, target: drift.task_accuracy(_eval(run, target), _param(target), run.sla(target.pair)),
        tasks=ANSWERED_TASKS,
    ),
    CheckSpec(
        "content_flags",
        "drift",
        "arm",
        lambda run, target: drift.content_flags(
            _eval(run, target), _param(target), run.sla(target.pair), run.workload(target.workload).content
        ),
        needs="content",
    ),
    CheckSpec(
        "sampled_distribution",
        "drift",
        "arm",
        lambda run, target: drift.sampled_distribution(
            (target.pair, target.workload), _param(target), run.sampled(target.pair, target.workload, _param(target))
        ),
        needs="sampling",
    ),
    CheckSpec(
        "ladder_accuracy",
        "ladder",
        "step",
        lambda run, target: ladder.ladder_accuracy(_eval(run, target), _param(target)),
        tasks=ANSWERED_TASKS,
    ),
    CheckSpec(
        "ladder_perplexity",
        "ladder",
        "step",
        lambda run, target: ladder.ladder_perplexity(_eval(run, target), _param(target)),
        needs="perplexity",
    ),
    CheckSpec(
        "ladder_agreement",
        "ladder",
        "step",
        lambda run, target: ladder.ladder_agreement(_eval(run, target), _param(target), run.sla(target.pair)),
        needs="lossless",
    ),
    CheckSpec(
        "ladder_scored",
        "ladder",
        "step",
        lambda run, target: ladder.ladder_scored(
            where_of(target), _param(target), [w for w in run.workloads if scores(run.workload(w))]
        ),
        needs="unscored",
    ),
    CheckSpec(
        "not_slower_than_reference",
        "regression",
        "metric",
        lambda run, target: run.regression_check(target.pair, target.workload, reference_key(_param(target))),
        speed=True,
        metric_keys=lambda plan: latency_keys(plan, beside=True) if plan.reference else (),
        reference_only=True,
    ),
    CheckSpec(
        "outputs_match_reference",
        "regression",
        "workload",
        lambda run, target: run.regression_check(target.pair, target.workload, reference_key(OUTPUT_DRIFT)),
        reference_only=True,
    ),
    CheckSpec(
        "task_accuracy_vs_reference",
        "regression",
        "workload",
        lambda run, target: run.regression_check(target.pair, target.workload, reference_key(TASK_ACCURACY)),
        tasks=ANSWERED_TASKS,
        reference_only=True,
    ),
    CheckSpec(
        "no_regression",
        "regression",
        "metric",
        lambda run, target: run.regression_check(target.pair, target.workload, baseline_key(_param(target))),
        speed=True,
        metric_keys=stored_keys,
    ),
    CheckSpec(
        "outputs_match_baseline",
        "regression",
        "workload",
        lambda run, target: run.regression_check(target.pair, target.workload, baseline_key(OUTPUT_DRIFT)),
    ),
    CheckSpec(
        "task_accuracy_not_lower",
        "regression",
        "workload",
        lambda run, target: run.regression_check(target.pair, target.workload, baseline_key(TASK_ACCURACY)),
        tasks=ANSWERED_TASKS,
    ),
    CheckSpec(
        "released_runtime",
        "regression",
        "workload",
        lambda run, target: run.regression_check(target.pair, target.workload, baseline_key(ENVIRONMENT)),
        speed=True,
        reference_only=True,
    ),
    CheckSpec(
        "ladder_step_vs_baseline",
        "regression",
        "step",
        lambda run, target: run.regression_check(target.pair, target.workload, ladder_key(_param(target))),
        needs="scores",
    ),
    CheckSpec(
        "context_coverage",
        "long_context",
        "workload",
        lambda run, target: long_context.context_coverage(where_of(target), _points(run, target)),
        long_only=True,
    ),
    CheckSpec(
        "ttft_growth",
        "long_context",
        "workload",
        lambda run, target: long_context.ttft_growth(where_of(target), _points(run, target)),
        long_only=True,
    ),
    CheckSpec(
        "cost_and_energy_reported",
        "resources",
        "workload",
        lambda run, target: resources.energy_reported(_eval(run, target)),
        long_only=True,
    ),
    CheckSpec(
        "roofline_reported",
        "resources",
        "workload",
        lambda run, target: resources.roofline_reported(_eval(run, target)),
        long_only=True,
    ),
)


def where_of(target: Target) -> tuple[str, str]:
    return (target.pair, target.workload)


def _points(run: Context, target: Target) -> list[long_context.ContextPoint]:
    from specgate.measure.longdoc import load_context_targets

    return long_context.context_points(_eval(run, target), load_context_targets(run.workload(target.workload).path))


def spec(name: str) -> CheckSpec:
    for entry in CATALOGUE:
        if entry.name == name:
            return entry
    known = ", ".join(e.name for e in CATALOGUE)
    raise KeyError(f"{name!r} is not a check of the catalogue; known: {known}")


def params(entry: CheckSpec, plans: Sequence[MeasurementPlan]) -> list[str | None]:
    """The values of the check's per-arm or per-metric parameter over the given plans, in first-seen order."""
    if entry.per == "workload":
        return [None]
    seen: dict[str, None] = {}
    for plan in plans:
        if entry.per == "metric":
            seen.update(dict.fromkeys(entry.metric_keys(plan) if entry.metric_keys is not None else ()))
        elif entry.per == "step":
            seen.update(dict.fromkeys(step.arm for step in plan.ladder))
        else:
            seen.update(dict.fromkeys(plan.gated))
    return list(seen)


def applicable(context: Context, pairs: Sequence[str], workloads: Sequence[str]) -> list[tuple[CheckSpec, Target]]:
    """Every applicable check of the catalogue on the pairs × workloads, in catalogue order."""
    found = []
    for entry in CATALOGUE:
        for pair_name in pairs:
            for workload_name in workloads:
                for param in params(entry, [context.plan(pair_name, workload_name)]):
                    target = Target(pair_name, workload_name, param)
                    if entry.applies(context, target):
                        found.append((entry, target))
    return found
