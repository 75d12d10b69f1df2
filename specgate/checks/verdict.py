"""The verdict of a gate run: PASS only when checks ran, every one passed, and nothing errored.

Anything else — a failed check, an engine error, too few samples, no checks at all — is BLOCK, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specgate.checks import Check


@dataclass(frozen=True, slots=True)
class Verdict:
    """PASS or BLOCK for a whole gate run, with the failed checks, errors and recommendations."""

    verdict: str
    hardware: str
    checks: tuple[Check, ...]
    errors: tuple[str, ...]
    recommendations: tuple[str, ...]
    notices: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)


def decide(
    hardware: str,
    checks: Sequence[Check],
    errors: Sequence[str],
    recommendations: Sequence[str],
    notices: Sequence[str] = (),
) -> Verdict:
    """PASS only when checks ran, all passed, and nothing errored. `notices` are printed loudly with the verdict
    (e.g. a self-test's injected slowdown) without deciding it."""
    reasons = list(errors)
    if not checks and not errors:
        reasons.append("no gate check ran: select at least one pair and workload (see --pair, --workload)")
    blocked = bool(reasons) or any(not c.passed for c in checks)
    unique_advice = tuple(dict.fromkeys(recommendations))
    verdict = "BLOCK" if blocked else "PASS"
    return Verdict(verdict, hardware, tuple(checks), tuple(reasons), unique_advice, tuple(notices))
