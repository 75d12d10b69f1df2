"""Accepting an intended change on purpose: `--update-baselines --accept=output_drift --accept-reason="…"`.

An engine or kernel update that flips one greedy output makes every run block on `regression:output_drift`, and the
update run that would record the new outputs blocks on the same comparison: a deadlock only deleting the file used
to break. An update run may instead accept the named failed comparisons (`ACCEPTABLE`: what does not depend on the
machine — outputs, task accuracy, acceptance — never latency): they pass in that run with "ACCEPTED" and the reason,
and the recorded run keeps each override (check, its message, the reason, who, when) in the baseline's history, so
the next run compares with the new outputs and a reviewer sees why they changed.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import time
from collections.abc import Sequence

from specgate.checks import Against, Check, RegressionKey
from specgate.checks.subject import Judged
from specgate.store.records import Override

ACCEPTABLE = ("output_drift", "task_accuracy", "acceptance_rate")


def _accepted(key: RegressionKey, result: Check | Exception, accept: Sequence[str], reason: str) -> Check | Exception:
    """`result`, passed as ACCEPTED when it is a failed comparison with the stored baseline named in `accept`."""
    named = key.against is Against.BASELINE and key.statistic.rpartition(".")[2].split(":")[-1] in accept
    if not named or not isinstance(result, Check) or result.passed:
        return result
    return dataclasses.replace(
        result,
        passed=True,
        message=f"ACCEPTED ({reason}): {result.message}",
        details={**result.details, "accepted": reason, "accepted_message": result.message},
    )


def accept_overrides(judged: Judged, accept: Sequence[str], reason: str) -> Judged:
    """The regression results with the failed comparisons named in `accept` passed as ACCEPTED (update runs)."""
    return {
        where: results
        if isinstance(results, Exception)
        else {key: _accepted(key, result, accept, reason) for key, result in results.items()}
        for where, results in judged.items()
    }


def _who() -> str:
    for variable in ("GITLAB_USER_LOGIN", "GITHUB_ACTOR", "USER"):
        if os.environ.get(variable):
            return os.environ[variable]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def overrides_of(checks: Sequence[Check], pair: str, workload: str) -> tuple[Override, ...]:
    """The overrides of one pair × workload's accepted checks, for its recorded run."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return tuple(
        Override(c.name, str(c.details.get("accepted_message", "")), str(c.details["accepted"]), _who(), now)
        for c in checks
        if (c.pair, c.workload) == (pair, workload) and c.details.get("accepted")
    )
