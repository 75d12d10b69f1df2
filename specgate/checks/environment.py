"""What reference mode cannot see: a change of the runtime that slows the candidate and the reference alike.

Beside the reference, both arms run in one process, with one engine, torch and driver, on the model files behind the
same paths: a merge request that bumps the engine or torch pins, or swaps the weights behind an unchanged path, slows
both arms alike and passes every `reference:*` comparison. The released configuration includes its runtime, so
`regression:environment` compares the runtime of this run's reference arm (the engine's and torch's versions, the
driver, the model files' hashes) with what the newest stored baseline recorded for the released arm:

- the same runtime: PASS (a slowdown of both arms cannot come from it);
- another runtime: the reference arm's TTFT and TPOT are compared with this machine's history of the released arm
  (same hardware, any software: `same_hardware`), with its between-run spread, like `--reference=none`; with fewer
  than `gate.min_history_runs` stored runs of this machine, it blocks and says how to record them. A history decides
  only on a quiet, dedicated runner (a shared VM's runs minutes apart differ by several percent).
"""

from __future__ import annotations

from specgate.checks import REGRESSION, Check, baseline_key, check
from specgate.checks.regression import Levels, latency_check
from specgate.checks.subject import Subject
from specgate.comparison import TPOT, TTFT, clock_of, history
from specgate.config import GatePolicy
from specgate.hardware.fingerprint import MATCHED, Fingerprint
from specgate.store.baselines import Baseline
from specgate.store.records import RunRecord

ENVIRONMENT = "environment"
SOFTWARE = ("engine_version", "torch", "driver")


def same_hardware(a: Fingerprint, b: Fingerprint) -> bool:
    """The same machine and engine, whatever its software versions."""
    return all(getattr(a, name) == getattr(b, name) for name in MATCHED if name not in SOFTWARE)


def runtime_changes(record: RunRecord, arm: str, stored: RunRecord) -> list[str]:
    """How this run's runtime for `arm` differs from the stored run's for its released arm, as "torch: X → Y"."""
    changes = []
    now, then = dict(record.versions), dict(stored.versions)
    for name in sorted(set(now) | set(then)):
        if name != "engine" and now.get(name) != then.get(name):
            changes.append(f"{name}: {then.get(name, 'none')} → {now.get(name, 'none')}")
    mine, theirs = dict(record.models.get(arm, {})), dict(stored.models.get(stored.released, {}))
    for role in sorted(set(mine) | set(theirs)):
        if mine.get(role) != theirs.get(role):
            changes.append(
                f"{role} model files: {str(theirs.get(role, 'none'))[:12]} → {str(mine.get(role, 'none'))[:12]}"
            )
    return changes


def environment_check(subject: Subject, policy: GatePolicy, levels: Levels) -> Check:
    """`regression:environment` of a pair × workload in reference mode (see the module docstring)."""
    plan, record, baseline = subject.plan, subject.record, subject.baseline
    assert isinstance(baseline, Baseline)
    name, where = baseline_key(ENVIRONMENT).name, (plan.pair, plan.workload)
    reference = dict(plan.beside).get(plan.released)
    stored = baseline.runs[-1]
    if reference is None or reference not in record.arms:
        return check(name, where, REGRESSION, True, "no reference arm of the released arm: nothing to compare")
    changes = runtime_changes(record, reference, stored)
    source = f"baseline {subject.source}"
    if not changes:
        return check(
            name,
            where,
            REGRESSION,
            True,
            f"PASS: the released configuration ({reference}) runs in the runtime the baseline recorded "
            f"({_versions(record)}; the same model files): a slowdown of both arms alike cannot come from it "
            f"[{source}]",
            arm=plan.released,
            details={"outcome": "PASS", "changes": []},
        )
    mine = record.fingerprint
    runs = [
        r
        for r in baseline.runs
        if mine is not None and r.fingerprint is not None and same_hardware(r.fingerprint, mine)
    ]
    changed = "; ".join(changes)
    engine = f" --engine={record.engine}" if record.engine else ""
    if len(runs) < policy.min_history_runs:
        message = (
            f"BLOCK: the runtime changed ({changed}) and this machine has {len(runs)} of the "
            f"{policy.min_history_runs} stored runs needed to tell whether it slowed both arms alike — reference mode "
            "cannot see that. Record the released build's history on this machine first (on a quiet, dedicated "
            f"runner: pytest suites/ --hardware={record.hardware} --pair={plan.pair}{engine} --update-baselines, "
            f"{policy.min_history_runs} times, before the change), or gate against a reference served in the "
            f"released runtime (an openai pair whose endpoint runs the released build) [{source}]"
        )
        return check(
            name,
            where,
            REGRESSION,
            False,
            message,
            arm=plan.released,
            details={"outcome": "NOT RECORDED", "changes": changes, "history_runs": len(runs)},
        )
    return _against_history(subject, policy, levels, reference, runs, changes)


def _versions(record: RunRecord) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(record.versions.items()) if k != "engine") or "no versions recorded"


def _against_history(
    subject: Subject, policy: GatePolicy, levels: Levels, reference: str, runs: list[RunRecord], changes: list[str]
) -> Check:
    plan, record = subject.plan, subject.record
    parts, outcomes = [], []
    for metric in (TTFT, TPOT):
        stored = [(r.arms[r.released], None) for r in runs if r.released in r.arms]
        clock = clock_of(policy.clock, record.arms[reference], *(arm for arm, _ in stored))
        try:
            estimate = history(metric, stored, (record.arms[reference], None), clock)
        except ValueError as exc:
            parts.append(f"{metric.name}: cannot be compared ({exc})")
            outcomes.append("UNKNOWN")
            continue
        judged = latency_check(
            baseline_key(ENVIRONMENT).name,
            (plan.pair, plan.workload),
            metric,
            estimate,
            subject.sla.regression_tolerance,
            levels,
            f"this machine's history of {plan.released}",
            arm=plan.released,
        )
        outcomes.append(str(judged.details["outcome"]))
        parts.append(f"{metric.name} of {reference} against {len(runs)} stored runs: {judged.message}")
    worst = "BLOCK" if "BLOCK" in outcomes else "UNKNOWN" if "UNKNOWN" in outcomes else "PASS"
    head = {"PASS": "PASS", "BLOCK": "REGRESSED", "UNKNOWN": "BLOCK: UNKNOWN"}[worst]
    message = f"{head}: the runtime changed ({'; '.join(changes)}); " + " | ".join(parts)
    return check(
        baseline_key(ENVIRONMENT).name,
        (plan.pair, plan.workload),
        REGRESSION,
        worst == "PASS",
        message,
        arm=plan.released,
        details={"outcome": worst, "changes": changes, "history_runs": len(runs)},
        limit=subject.sla.regression_tolerance,
        n=len(runs),
    )
