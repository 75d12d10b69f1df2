"""The regression judgement of one pair × workload: against the reference measured beside it, and against this
machine's stored baselines.

- **beside** (`reference:*`, reference mode): every latency metric, the speedup and acceptance of each candidate arm
  against the reference arm of the same name, paired by prompt and round; the outputs and task accuracy of the
  released arm against the reference's.
- **baseline** (`regression:*`): acceptance, outputs and accuracy against the newest stored run (any machine: they
  do not depend on it), acceptance only of arms with no speculative reference arm beside them (`stored_keys`);
  latency only when no reference is measured beside it, and then only against runs of this machine (same
  fingerprint) — with at least `min_history_runs` of them, using their between-run spread. Otherwise
  latency is "not comparable", with both machines named and how to fix it; `latency_baseline: required` (the
  default) makes that block, `optional` reports it and passes. Never "REGRESSED" on another machine's numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from specgate.checks import NO_BASELINE, REGRESSION, UNUSABLE_BASELINE, Against, Check, Outcome, baseline_key, check
from specgate.checks.acceptance import acceptance_check
from specgate.checks.beside import _resamples, beside, samples_for
from specgate.checks.environment import ENVIRONMENT, environment_check
from specgate.checks.ladder_baseline import ladder_vs_baseline
from specgate.checks.levels import acceptance_levels, looks_of
from specgate.checks.regression import (
    Levels,
    accuracy_check,
    latency_keys,
    metric_checks,
    output_drift_check,
    stored_keys,
)
from specgate.checks.subject import Judged, Results
from specgate.checks.subject import Subject as Subject  # re-exported: the gate run builds its subjects from here
from specgate.comparison import (
    ACCEPTANCE,
    OUTPUT_DRIFT,
    TASK_ACCURACY,
    Estimate,
    Metric,
    clock_of,
    history,
    paired,
    split_key,
    tail,
)
from specgate.config import GatePolicy
from specgate.measure.samples import ArmSamples
from specgate.plan import MeasurementPlan
from specgate.stats.decision import Decision, t_quantile
from specgate.store.baselines import Baseline
from specgate.store.records import RunRecord

MAX_HISTORY_RUNS = 20  # more runs than anyone keeps: beyond it, history is the wrong tool for this machine


def _machines_text(baseline: Baseline, record: RunRecord) -> str:
    theirs = baseline.machines()
    mine = record.fingerprint
    if mine is None:
        return "this run has no machine fingerprint"
    if not theirs:
        return "the baseline records no machine fingerprint"
    other = theirs[-1]
    differs = "; ".join(other.differences(mine))
    return f"baseline recorded on {other.describe()}; this machine is {mine.describe()} ({differs})"


def not_comparable(subject: Subject, key: str, reason: str, policy: GatePolicy, what: str = "latency") -> Check:
    """A check that cannot be made against the stored baseline (latency of another machine, outputs of another
    engine): never REGRESSED; blocks unless the policy's `latency_baseline` is `optional`."""
    plan = subject.plan
    optional = policy.latency_baseline == "optional"
    times = f", {policy.min_history_runs} times" if what == "latency" else ""
    engine = f" --engine={subject.record.engine}" if what != "latency" and subject.record.engine else ""
    fix = (
        f"record one here (pytest suites/ --hardware={subject.record.hardware} --pair={plan.pair}{engine} "
        f"--update-baselines{times})"
    )
    if plan.reference is None:
        fix += (
            f" or gate against a reference measured beside it (pairs.{plan.pair}.reference in specgate.yaml, or "
            "--reference=PAIR)"
        )
    head = "not gated (latency_baseline: optional)" if optional else "BLOCK"
    message = f"{head}: {what} not comparable — {reason} — {fix} [baseline {subject.source}]"
    arm, _ = split_key(key, plan.released)
    return check(
        baseline_key(key).name,
        (plan.pair, plan.workload),
        REGRESSION,
        optional,
        message,
        arm=arm,
        details={"outcome": "NOT COMPARABLE", "what": what},
    )


def against_baseline(subject: Subject, policy: GatePolicy, levels: Levels, *, update: bool = False) -> Results:
    """Every `regression:*` check of a pair × workload against its stored baseline (which exists)."""
    plan, record, baseline = subject.plan, subject.record, subject.baseline
    assert isinstance(baseline, Baseline)
    where = (plan.pair, plan.workload)
    keys = latency_keys(plan, beside=False)
    acceptance = [k for k in stored_keys(plan) if split_key(k, plan.released)[1] == ACCEPTANCE]
    latest = baseline.latest_comparable(record.fingerprint)
    if latest is None:  # outputs and acceptance depend on the engine's kernels and the dtype
        stacks = ", ".join(sorted({f"{f.engine} ({f.dtype})" for f in baseline.machines()}))
        mine = record.fingerprint
        reason = f"the baseline was recorded with {stacks}; this run uses {mine.engine} ({mine.dtype})" if mine else ""
        results: Results = {
            baseline_key(k): not_comparable(subject, k, reason, policy, "outputs and acceptance")
            for k in [*acceptance, OUTPUT_DRIFT]
        }
        if plan.reference is None:
            results.update(_baseline_latency(subject, policy, levels, keys, update))
        return results
    source = f"baseline {subject.source}"
    results = {}
    for key in acceptance:
        arm = split_key(key, plan.released)[0]
        results[baseline_key(key)] = acceptance_check(
            baseline_key(key).name,
            where,
            latest.acceptance_view(arm),
            record.acceptance_view(arm),
            subject.sla,
            acceptance_levels(policy, subject.acceptance_steps, record.acceptance_view(arm)),
            source,
            arm=arm,
            hint=_stored_hint(subject, arm),
        )
    if plan.reference is None:
        results.update(_baseline_latency(subject, policy, levels, keys, update))
    released = plan.released
    same = dict(latest.models.get(released, {})) == dict(record.models.get(released, {}))
    results[baseline_key(OUTPUT_DRIFT)] = output_drift_check(
        baseline_key(OUTPUT_DRIFT).name,
        where,
        latest.arms.get(released),
        record.arms.get(released),
        same,
        subject.sla,
        source,
        arm=released,
    )
    if latest.accuracy or record.accuracy:
        results[baseline_key(TASK_ACCURACY)] = accuracy_check(
            baseline_key(TASK_ACCURACY).name,
            where,
            latest.accuracy.get(released),
            record.accuracy.get(released),
            subject.sla,
            source,
            arm=released,
        )
    return results


def _stored_hint(subject: Subject, arm: str) -> str:
    """Where more prompts for an undecided acceptance comparison with the stored baseline come from: without a
    reference, the pool's hint (gate beside a reference); in reference mode (an arm with no speculative reference arm
    beside it) only the prompts both runs measured count, and the pool is never measured for it."""
    plan = subject.plan
    if plan.reference is None:
        return subject.pool_hint
    return (
        f"; against the stored baseline only the prompts both runs measured count, and the acceptance pool is "
        f"measured only for an arm compared beside a speculative reference arm: give {arm} one (a speculative arm "
        f"of the same name in the reference pair {plan.reference})"
    )


def _baseline_latency(
    subject: Subject, policy: GatePolicy, levels: Levels, keys: tuple[str, ...], update: bool
) -> Results:
    plan, record, baseline = subject.plan, subject.record, subject.baseline
    assert isinstance(baseline, Baseline)
    latency = [k for k in keys if split_key(k, plan.released)[1] != ACCEPTANCE]
    fingerprint = record.fingerprint
    runs = () if fingerprint is None else baseline.for_machine(fingerprint)
    if len(runs) < policy.min_history_runs:
        if update:
            return {baseline_key(key): _history_grows(subject, key, len(runs), policy) for key in latency}
        reason = (
            _machines_text(baseline, record)
            if not runs
            else (
                f"only {len(runs)} run(s) of this machine are stored; {policy.min_history_runs} are needed to know its "
                "between-run spread (runs minutes apart differ by several percent on a shared machine)"
            )
        )
        return {baseline_key(key): not_comparable(subject, key, reason, policy) for key in latency}

    def estimate(metric: Metric, arm: str) -> object:
        plain = plan.baseline_of(arm)

        def pick(stored: RunRecord) -> tuple[ArmSamples, ArmSamples | None]:
            return samples_for(stored, arm, metric), None if plain is None else stored.arms[plain]

        clock = clock_of(policy.clock, record.arms.get(arm), *(r.arms.get(arm) for r in runs))
        if len(runs) >= 2:
            return history(metric, [pick(r) for r in runs], pick(record), clock)
        before, plain_before = pick(runs[-1])
        after, plain_after = pick(record)
        how = "paired with the one stored run of this machine (between-run drift not measured)"
        if metric.kind == "tail":
            return tail(
                metric,
                before,
                after,
                resamples=_resamples(policy, levels.alpha_block),
                seed=policy.seed,
                how=how,
                clock=clock,
            )
        return paired(metric, before, after, plain_before=plain_before, plain_after=plain_after, how=how, clock=clock)

    results = metric_checks(
        Against.BASELINE,
        (plan.pair, plan.workload),
        tuple(latency),
        plan.released,
        estimate,  # type: ignore[arg-type]
        subject.sla,
        levels,
        lambda arm: f"baseline {subject.source}",
        undecided=lambda decision, value: _more_runs(subject, decision, value, levels, policy.history_runs),
    )
    return {name: _recordable(r) for name, r in results.items()} if update else results


def _recordable(result: Check | Exception) -> Check | Exception:
    """In an update run, an UNKNOWN against the history is recorded only when its estimate lies within the
    tolerance of the history (more runs are what decide a spread); one that looks slower than the tolerance is not
    recorded, however undecided: a history must never drift towards a slower build, a few percent per update. A
    significant regression is never recorded either."""
    if not isinstance(result, Check) or result.outcome is not Outcome.UNKNOWN:
        return result
    change, tolerance = result.details.get("relative_change"), result.limit
    if change is None or tolerance is None or change > tolerance:
        message = (
            f"{result.message} — not recorded: an update run records only a build that does not look slower than the "
            f"history by more than the tolerance ({'unknown' if change is None else f'{change:+.1%}'})"
        )
        return dataclasses.replace(result, message=message)
    message = "update run, recorded to grow the history (within the tolerance): " + result.message.removeprefix(
        "BLOCK: "
    )
    return dataclasses.replace(result, passed=True, message=message)


def _more_runs(subject: Subject, decision: Decision, value: Estimate, levels: Levels, keep: int) -> str:
    """What would decide an UNKNOWN against this machine's history: the stored runs its between-run spread needs
    (a run of the candidate differs from the history's mean by that spread however many runs are stored), or,
    beyond `MAX_HISTORY_RUNS`, a reference measured beside it."""
    plan = subject.plan
    beside = (
        f"gate against a reference measured beside it (pairs.{plan.pair}.reference in specgate.yaml, or "
        "--reference=PAIR), which cancels the drift between runs"
    )
    k = value.n
    spread = value.se / math.sqrt(1 + 1 / k) if k > 0 else 0.0
    if value.how.startswith("against") and spread > 0:
        for runs in range(k + 1, MAX_HISTORY_RUNS + 1):
            upper = value.estimate + t_quantile(1 - levels.alpha_pass, runs - 1) * spread * math.sqrt(1 + 1 / runs)
            if upper < decision.threshold:
                kept = "" if runs <= keep else f", more than gate.history_runs keeps ({keep})"
                return (
                    f" — this machine's between-run spread needs ≈ {runs} stored runs to decide (--update-baselines"
                    f"{kept}); or {beside}"
                )
    return f" — this machine's runs differ too much for its history to decide; {beside}"


def _history_grows(subject: Subject, key: str, stored: int, policy: GatePolicy) -> Check:
    plan = subject.plan
    message = (
        f"update run: this machine's history grows to {stored + 1} of the {policy.min_history_runs} runs latency is "
        f"compared with; nothing to compare yet [baseline {subject.source}]"
    )
    arm, _ = split_key(key, plan.released)
    return check(baseline_key(key).name, (plan.pair, plan.workload), REGRESSION, True, message, arm=arm)


def _environment(plan: MeasurementPlan) -> list[str]:
    return [ENVIRONMENT] if plan.reference is not None else []


def broken_baseline(subject: Subject, error: Exception) -> Results:
    """The `regression:*` checks of a pair × workload whose baseline file cannot be used: each blocks with the file's
    problem (the checks beside the reference are unaffected)."""
    plan = subject.plan
    results: Results = {}
    for key in [*latency_keys(plan, beside=False), OUTPUT_DRIFT, TASK_ACCURACY, *_environment(plan)]:
        arm, _ = split_key(key, plan.released)
        results[baseline_key(key)] = check(
            baseline_key(key).name,
            (plan.pair, plan.workload),
            REGRESSION,
            False,
            f"BLOCK: {error}",
            arm=arm,
            details={"outcome": UNUSABLE_BASELINE},
        )
    return results


def no_baseline(subject: Subject, update: bool, hardware: str, record_missing: str | None = None) -> Results:
    """The `regression:*` checks of a pair × workload without a stored baseline: they block, unless this run records
    one (`--update-baselines`, or `--record-missing-baselines` for a merge request that adds the pair or workload)."""
    plan = subject.plan
    keys = [*latency_keys(plan, beside=False), OUTPUT_DRIFT, TASK_ACCURACY, *_environment(plan)]
    results: Results = {}
    for key in keys:
        arm, _ = split_key(key, plan.released)
        if update or record_missing:
            where = f"{record_missing}/{hardware}/{plan.pair}/{plan.workload}.json" if record_missing else None
            message = (
                f"update run: no comparison; the baseline is written to {subject.source} at the end of the session"
                if update
                else f"no baseline yet (a new pair or workload): this run, if it passes, is recorded to {where}; "
                f"commit it as {subject.source} to gate later runs against it"
            )
            results[baseline_key(key)] = check(
                baseline_key(key).name, (plan.pair, plan.workload), REGRESSION, True, message, arm=arm
            )
        else:
            message = (
                f"BLOCK: no baseline for {hardware}/{plan.pair}/{plan.workload} ({subject.source}) — run the reference "
                "build with --update-baselines"
            )
            results[baseline_key(key)] = check(
                baseline_key(key).name,
                (plan.pair, plan.workload),
                REGRESSION,
                False,
                message,
                arm=arm,
                details={"outcome": NO_BASELINE},
            )
    return results


def judge(
    subjects: Mapping[tuple[str, str], Subject | Exception],
    policy: GatePolicy,
    family: int,
    *,
    update: bool,
    hardware: str,
    record_missing: str | None = None,
) -> Judged:
    """Every regression check of the run, by pair × workload (the exception of a measurement that failed in place
    of its checks)."""
    outcomes: Judged = {}
    for where, subject in subjects.items():
        if isinstance(subject, Exception):
            outcomes[where] = subject
            continue
        reference = subject.plan.reference is not None
        levels = Levels(policy.alpha, looks_of(policy, reference), family)
        results: Results = {}
        if reference:
            budget = f"; {subject.rounds} of at most {policy.max_repetitions} rounds run (gate.max_repetitions)"
            results.update(beside(subject, policy, levels, budget))
        if subject.baseline is None:
            results.update(no_baseline(subject, update, hardware, record_missing))
        elif isinstance(subject.baseline, Exception):
            results.update(broken_baseline(subject, subject.baseline))
        else:
            results.update(against_baseline(subject, policy, levels, update=update))
            if reference:
                once = Levels(policy.alpha, 1, family)
                results[baseline_key(ENVIRONMENT)] = environment_check(subject, policy, once)
        results.update(ladder_vs_baseline(subject, update=update, hardware=hardware))
        outcomes[where] = results
    return outcomes
