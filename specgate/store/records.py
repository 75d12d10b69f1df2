"""`RunRecord`: one measured run in the form it is compared and stored in (samples per arm, accuracy, provenance).

The gate turns each evaluation into a record; a stored baseline is a record read back from a file. The comparison
core (`specgate.comparison`) only ever compares records, so `specgate baseline diff` on two files and the gate on
its live run decide alike.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate import __version__
from specgate.accuracy import TaskAccuracy
from specgate.evaluation import Evaluation
from specgate.measure.samples import ArmSamples


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of a pair × workload: the samples of each arm and where they came from.

    `models` maps arm → role (`target`, `draft`) → the model file's SHA-256; `gate` is the gate policy it was
    measured under and `limits` the SLA limits it was judged with; `prompts` the workload's prompt ids in order."""

    hardware: str
    pair: str
    workload: str
    arms: Mapping[str, ArmSamples]
    accuracy: Mapping[str, TaskAccuracy] = field(default_factory=dict)
    models: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    engine: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)
    recorded_at: str = ""
    git_commit: str | None = None
    specgate: str = __version__
    gate: Mapping[str, Any] = field(default_factory=dict)
    limits: Mapping[str, float] = field(default_factory=dict)
    prompts: tuple[str, ...] = ()

    def speedup(self, arm: str = "spec", plain: str = "ar") -> float | None:
        """Σ wall of the plain arm / Σ wall of `arm`, or None when either is missing."""
        ref, cand = self.arms.get(plain), self.arms.get(arm)
        if ref is None or cand is None or not sum(cand.run_walls_s):
            return None
        return sum(ref.run_walls_s) / sum(cand.run_walls_s)


def git_commit(cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def record_run(
    evaluation: Evaluation,
    hardware: str,
    gate: Mapping[str, Any],
    project_dir: Path,
    arms: tuple[str, ...] | None = None,
    limits: Mapping[str, float] | None = None,
) -> RunRecord:
    """The record of an evaluation (of the given arms, by default all)."""
    m = evaluation.measurement
    names = arms or m.arms
    return RunRecord(
        hardware=hardware,
        pair=m.pair,
        workload=m.workload,
        arms={arm: evaluation.samples[arm] for arm in names},
        accuracy={arm: score for arm, score in evaluation.accuracy.items() if arm in names},
        models={arm: dict(m.models.get(arm, {})) for arm in names},
        engine=m.engine,
        versions=dict(m.versions),
        recorded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        git_commit=git_commit(project_dir),
        gate=dict(gate),
        limits=dict(limits or {}),
        prompts=tuple(p.id for p in m.prompts),
    )
