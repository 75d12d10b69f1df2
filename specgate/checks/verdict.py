"""The verdict of a gate run: PASS only when checks ran, every one passed, nothing errored, and no applicable check
was left out.

A failed check, an engine error, too few samples, no checks at all — is BLOCK, with the reason. A run whose checks
all passed but that left applicable checks of the catalogue out (`-k`, `--lf`, one suite file) is PARTIAL: a subset
is not a release verdict, and it fails like a BLOCK.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specgate.checks import Check, Failure


@dataclass(frozen=True, slots=True)
class Verdict:
    """PASS or BLOCK for a whole gate run, with the failed checks, errors and recommendations."""

    verdict: str
    hardware: str
    checks: tuple[Check, ...]
    errors: tuple[str, ...]
    recommendations: tuple[str, ...]
    notices: tuple[str, ...] = ()
    not_run: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)


def decide_verdict(
    hardware: str,
    checks: Sequence[Check],
    errors: Sequence[str],
    recommendations: Sequence[str],
    notices: Sequence[str] = (),
    not_run: Sequence[str] = (),
) -> Verdict:
    """PASS only when checks ran, all passed, nothing errored and no applicable check (`not_run`: their keys) was
    left out. `notices` are printed loudly with the verdict (e.g. a self-test's injected slowdown) without deciding
    it."""
    reasons = list(errors)
    if not checks and not errors:
        reasons.append("no gate check ran: select at least one pair and workload (see --pair, --workload)")
    blocked = bool(reasons) or any(not c.passed for c in checks)
    advice = list(recommendations)
    if not_run:
        advice.append(
            f"{len(not_run)} applicable check(s) did not run (deselected: -k, -m, --lf, or a subset of the suites): a "
            "subset is not a release verdict; run every applicable check (pytest suites/ without -k, -m or --lf)"
        )
    verdict = "BLOCK" if blocked else ("PARTIAL" if not_run else "PASS")
    return Verdict(
        verdict, hardware, tuple(checks), tuple(reasons), tuple(dict.fromkeys(advice)), tuple(notices), tuple(not_run)
    )


def rolled_back_rungs(verdict: Verdict) -> tuple[str, ...]:
    """The ladder rungs ("pair/arm") a blocked verdict rolled back, when they are all that blocked it: no error, no
    check left out, every failed check a rung's rollback. Empty otherwise."""
    failed = [c for c in verdict.checks if not c.passed]
    if verdict.verdict != "BLOCK" or verdict.errors or verdict.not_run or not failed:
        return ()
    # a rollback is judged on a measured change (`observed`); a rung with nothing to compare blocks as unmeasured
    if any(c.failure is not Failure.LADDER or c.observed is None for c in failed):
        return ()
    return tuple(dict.fromkeys(f"{c.pair}/{c.arm}" for c in failed))
