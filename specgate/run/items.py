"""How far a run's gate checks got. The pytest plugin counts them (the items a session gates and each one that
ran to the end); `GateRun.run_all` counts the catalogue's checks the same way. A run that stopped early, or whose
selection left applicable checks out, is not a verdict: `shortfall()` says why."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GateItems:
    """`expected` gate checks, `finished` of them ran to the end; `asked` when the session collected catalogue
    checks (a session that asked and selected none still blocks); `not_run` names the applicable checks no
    selected item runs (the verdict is PARTIAL then)."""

    expected: int = 0
    finished: int = 0
    asked: bool = False
    interrupted: bool = False
    not_run: list[str] = field(default_factory=list)

    @property
    def gated(self) -> bool:
        """Whether the session gates anything, so that it owes a verdict."""
        return bool(self.expected or self.asked)

    def shortfall(self) -> str | None:
        """Why the run is not a verdict, or None when every gate check it started ran to the end."""
        if self.interrupted:
            return "the session was interrupted before every gate check ran: a partial run is not a verdict"
        if self.finished < self.expected:
            missing = self.expected - self.finished
            return f"{missing} of {self.expected} gate checks did not run to the end: a partial run is not a pass"
        return None
