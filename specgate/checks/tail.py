"""P99 TTFT against the SLA on a shared machine: judged on the units measured without interference.

A P99 of a few dozen requests is nearly their maximum, and on a busy runner the maximum is whichever request another
process stretched. So the tail reads every TTFT the arm measured (its requests' latest attempts and its one-token
TTFT probes: four per prompt and round in reference mode, in the arms compared beside each other) and splits them
by the interference each met (`specgate.checks.interference.interfered`): the SLA is the configuration's to breach
only on the clean ones. With too few clean units to tell (fewer than `MIN_CLEAN`, or under half), a breach that only
the interfered units show is UNKNOWN: it blocks, and says the machine was busy — never that the configuration is too
slow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specgate.checks.interference import busy, interfered, measured
from specgate.evaluation import Evaluation

MIN_CLEAN = 20


@dataclass(frozen=True, slots=True)
class Tail:
    """The P99 TTFT of an arm over all its measured TTFTs and over the clean ones (None: none)."""

    p99_all: float | None
    p99_clean: float | None
    n_all: int
    n_clean: int
    measured: bool  # whether interference was measured at all (else every unit counts as clean)
    busy_text: str

    @property
    def enough_clean(self) -> bool:
        return self.n_clean >= min(MIN_CLEAN, self.n_all) and 2 * self.n_clean >= self.n_all

    @property
    def p99(self) -> float | None:
        """The P99 the configuration answers for: the clean units' when there are enough, else all units'."""
        return self.p99_clean if self.enough_clean else self.p99_all


def _p99(values: list[float]) -> float | None:
    return float(np.percentile(values, 99.0)) if values else None


def ttft_tail(evaluation: Evaluation, arm: str, *, probes_too: bool = True) -> Tail:
    """The arm's TTFT tail, all units and clean units (see the module docstring); without `probes_too`, of its full
    requests only (to set beside an arm that had no probes: a P99 of more samples lies further out)."""
    samples = list(evaluation.samples[arm].latest().samples)
    probes = evaluation.probes.get(arm) if probes_too else None
    if probes is not None:
        samples += probes.latest().samples
    known = any(measured(s) for s in samples)
    clean = [s.ttft_ms for s in samples if not interfered(s)]
    found = busy([evaluation.samples[arm], probes])
    return Tail(
        _p99([s.ttft_ms for s in samples]),
        _p99(clean),
        len(samples),
        len(clean),
        known,
        found.describe() if found.busy else "",
    )
