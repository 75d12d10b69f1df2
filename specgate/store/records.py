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
from specgate.config import Speculation
from specgate.evaluation import Evaluation
from specgate.hardware.fingerprint import Fingerprint
from specgate.ladder import LadderRow
from specgate.measure.perplexity import Perplexity
from specgate.measure.samples import ArmSamples
from specgate.plan import Arm, LadderStep, MeasurementPlan


@dataclass(frozen=True, slots=True)
class Override:
    """A failed comparison accepted on purpose by an update run: the check, what it said, why it was accepted, by
    whom and when."""

    check: str
    message: str
    reason: str
    by: str
    at: str


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of a pair × workload: the samples of each arm and where they came from.

    `models` maps arm → role (`target`, `draft`) → the model file's SHA-256; `gate` is the gate policy it was
    measured under and `limits` the SLA limits it was judged with; `prompts` the workload's prompt ids in order;
    `released` the arm a PASS releases and `plain_of` each speculative arm's plain-decoding arm (the plan's shape);
    `probes` the one-token TTFT probes of each arm (reference mode), which feed TTFT comparisons only; `pool` the
    acceptance pool's requests of each arm (prompts after the timed ones), which feed acceptance only; `ladder` the
    pair's ladder on this workload (each step's speed gain, memory, accuracy, perplexity and verdict) and
    `perplexity` each arm's on long documents, so that a later run is compared with it step by step; `overrides`
    the failed comparisons an update run accepted on purpose (`--accept`), with the reason, so the history says why
    it changed."""

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
    fingerprint: Fingerprint | None = None
    released: str = "spec"
    plain_of: Mapping[str, str] = field(default_factory=dict)
    probes: Mapping[str, ArmSamples] = field(default_factory=dict)
    pool: Mapping[str, ArmSamples] = field(default_factory=dict)
    ladder: tuple[LadderRow, ...] = ()
    perplexity: Mapping[str, Perplexity] = field(default_factory=dict)
    overrides: tuple[Override, ...] = ()

    def ttft_view(self, arm: str) -> ArmSamples:
        """An arm's samples with its TTFT probes: what TTFT comparisons read."""
        main, extra = self.arms[arm], self.probes.get(arm)
        if extra is None:
            return main
        return ArmSamples(main.samples + extra.samples, main.run_walls_s, main.run_keys)

    def acceptance_view(self, arm: str) -> ArmSamples | None:
        """An arm's samples with its acceptance pool: what acceptance comparisons read (None without the arm)."""
        main, extra = self.arms.get(arm), self.pool.get(arm)
        if main is None or extra is None:
            return main
        return ArmSamples(main.samples + extra.samples, main.run_walls_s, main.run_keys)

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
    fingerprint: Fingerprint | None = None,
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
        fingerprint=fingerprint,
        released=m.plan.released,
        plain_of={arm: plain for arm, plain in m.plan.speedups if arm in names and plain in names},
        probes={arm: samples for arm, samples in evaluation.probes.items() if arm in names},
        pool={arm: samples for arm, samples in evaluation.pool.items() if arm in names},
        ladder=tuple(row for row in evaluation.ladder if row.arm in names),
        perplexity={arm: value for arm, value in evaluation.perplexity.items() if arm in names},
    )


def plan_of(record: RunRecord) -> MeasurementPlan:
    """The shape of the plan a record was measured with (its arms, which are speculative, the released arm, its
    ladder's steps with their limits), for comparing two stored records without the project config."""
    marker = Speculation("recorded", 1)
    arms = tuple(
        Arm(name, name, record.pair, False, "", marker if name in record.plain_of else None, "")
        for name in sorted(record.arms, key=lambda n: (n in record.plain_of, n != record.released, n))
    )
    ladder = tuple(
        LadderStep(r.arm, r.previous, r.limits)
        for r in record.ladder
        if r.previous is not None and r.limits is not None
    )
    speedups = tuple(record.plain_of.items())
    return MeasurementPlan(record.pair, record.workload, arms, speedups, released=record.released, ladder=ladder)
