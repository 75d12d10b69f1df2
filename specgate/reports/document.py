"""The verdict document: a typed, versioned record of a gate run that every report renders from.

`build_document(run)` captures everything the reports show (the verdict, every check with its evidence, errors,
recommendations, and per pair × workload the arms with their summaries, speedups, drift, cost, energy and
roofline, the speedup's cost model and waterfall, and the per-request latencies pytest-benchmark's statistics
need); `verdict.json` is this document as JSON (`write_document`), and `load_document` reads it back into the same
types. `summary.md`, `metrics.prom`, `benchmark.json` and the terminal summary are functions of the document alone,
so `specgate report` rebuilds them from `reports/verdict.json` exactly as the run wrote them. Paths in it are
relative to the project folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specgate import __version__
from specgate.checks import Check
from specgate.checks.interference import Busy, busy
from specgate.costs.energy import EnergyReport
from specgate.costs.roofline import Roofline
from specgate.errors import SpecgateError
from specgate.evaluation import Divergence, Evaluation
from specgate.hardware.fingerprint import Fingerprint
from specgate.ladder import LadderRow
from specgate.measure.metrics import ArmSummary, Speedup
from specgate.measure.stepcosts import SpeedupExplanation
from specgate.measure.sweep import Sweep
from specgate.reports.provenance import CommitInfo, commit_info, machine_info, runner_label
from specgate.store.atomic import write_atomic
from specgate.store.codec import dumps, from_data

SCHEMA_VERSION = 3


@dataclass(frozen=True, slots=True)
class DriftRecord:
    """An arm's outputs against its plain-decoding arm's (greedy losslessness)."""

    against: str
    n: int
    differing: int
    share: float
    first_divergences: tuple[Divergence, ...] = ()


@dataclass(frozen=True, slots=True)
class ArmRecord:
    """One arm of a pair × workload: what it is, and what it measured."""

    name: str
    description: str
    reference: bool
    speculative: bool
    summary: ArmSummary
    e2el_ms: tuple[float, ...] = ()
    speedup: Speedup | None = None
    drift: DriftRecord | None = None
    explanation: SpeedupExplanation | None = None


@dataclass(frozen=True, slots=True)
class EvaluationRecord:
    """One pair × workload: its arms (the plain arm first) and the resources it used."""

    pair: str
    workload: str
    engine: str
    plain: str
    released: str
    arms: tuple[ArmRecord, ...]
    reference: str | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    models: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    energy: EnergyReport | None = None
    roofline: Roofline | None = None
    notes: tuple[str, ...] = ()
    rounds: int = 0
    fingerprint: Fingerprint | None = None
    ladder: tuple[LadderRow, ...] = ()
    interference: Busy | None = None
    looks: tuple[str, ...] = ()
    rounds_by_arm: Mapping[str, int] = field(default_factory=dict)
    sweep: Sweep | None = None

    def arm(self, name: str) -> ArmRecord:
        return next(a for a in self.arms if a.name == name)


@dataclass(frozen=True, slots=True)
class PartRecord:
    """One run of a merged verdict (`specgate merge`): its hardware and runner, its verdict (PASS, BLOCK, or MISSING
    and UNREADABLE when it never reported or its verdict cannot be read, with the reason), the folder it came from,
    and its own document."""

    label: str
    hardware: str
    runner: str
    verdict: str
    reason: str = ""
    source: str = ""
    document: VerdictDocument | None = None


@dataclass(frozen=True, slots=True)
class VerdictDocument:
    """The whole run. `failed_checks` are the keys of the checks that failed (for scripts reading the JSON).

    `runner` names the runner it measured on; a merged verdict (`specgate merge`) has `parts`, each with its own
    document, and its checks, errors and recommendations are theirs, labelled by part."""

    schema_version: int
    verdict: str
    hardware: str
    specgate_version: str
    generated_at: str
    commit: CommitInfo
    pairs: tuple[str, ...]
    workloads: tuple[str, ...]
    checks: tuple[Check, ...]
    failed_checks: tuple[str, ...]
    errors: tuple[str, ...]
    recommendations: tuple[str, ...]
    evaluations: tuple[EvaluationRecord, ...]
    out_dir: str = "reports"
    machine: Mapping[str, Any] = field(default_factory=dict)
    notices: tuple[str, ...] = ()
    report_warnings: tuple[str, ...] = ()
    not_run: tuple[str, ...] = ()
    runner: str = ""
    parts: tuple[PartRecord, ...] = ()

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)


def arm_records(evaluation: Evaluation, divergences: int = 10) -> tuple[ArmRecord, ...]:
    records = []
    plan = evaluation.plan
    for arm in plan.arms:
        lossless = evaluation.losslessness.get(arm.name)
        drift = None
        if lossless is not None:
            drift = DriftRecord(
                lossless.against,
                lossless.n,
                lossless.differing,
                lossless.drift,
                lossless.divergences[:divergences],
            )
        samples = evaluation.samples[arm.name].samples
        records.append(
            ArmRecord(
                name=arm.name,
                description=arm.describe(),
                reference=arm.reference,
                speculative=arm.speculative,
                summary=evaluation.summaries[arm.name],
                e2el_ms=tuple(round(s.e2el_ms, 3) for s in samples),
                speedup=evaluation.speedups.get(arm.name),
                drift=drift,
                explanation=evaluation.explanations.get(arm.name),
            )
        )
    return tuple(records)


def evaluation_record(evaluation: Evaluation, fingerprint: Fingerprint | None = None) -> EvaluationRecord:
    """The document's record of one evaluation (on the machine `fingerprint` names)."""
    m, plan = evaluation.measurement, evaluation.plan
    return EvaluationRecord(
        pair=m.pair,
        workload=m.workload,
        engine=m.engine,
        plain=plan.plain,
        released=plan.released,
        arms=arm_records(evaluation),
        reference=plan.reference,
        versions=dict(m.versions),
        models={arm: dict(models) for arm, models in m.models.items()},
        energy=evaluation.energy,
        roofline=evaluation.roofline,
        notes=(*plan.notes, *m.instances, *m.notes),
        rounds=m.rounds,
        fingerprint=fingerprint,
        ladder=evaluation.ladder,
        interference=busy([*evaluation.samples.values(), *evaluation.probes.values()]),
        looks=m.looks,
        rounds_by_arm=dict(m.rounds_by_arm),
        sweep=evaluation.sweep,
    )


def build_document(run: Any) -> VerdictDocument:
    """The document of a finished (or interrupted) `GateRun`."""
    verdict = run.verdict()
    root = run.project.source.parent
    return VerdictDocument(
        schema_version=SCHEMA_VERSION,
        verdict=verdict.verdict,
        hardware=verdict.hardware,
        specgate_version=__version__,
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        commit=commit_info(root),
        pairs=tuple(run.pairs),
        workloads=tuple(run.workloads),
        checks=verdict.checks,
        failed_checks=tuple(c.key for c in verdict.failed),
        errors=verdict.errors,
        recommendations=verdict.recommendations,
        evaluations=tuple(evaluation_record(e, run.fingerprint(e)) for e in run.evaluations()),
        out_dir=_relative(run.out_dir, root),
        machine=machine_info(),
        notices=verdict.notices,
        not_run=verdict.not_run,
        runner=runner_label(),
    )


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def document_json(document: VerdictDocument) -> str:
    return dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_document(document: VerdictDocument, path: Path) -> None:
    write_atomic(path, document_json(document))


def load_document(path: Path) -> VerdictDocument:
    """Read `verdict.json` back; a file of another schema or a corrupt one is a clear `SpecgateError`."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecgateError(f"{path}: cannot read the verdict: {exc.strerror}. Run the gate first.") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecgateError(f"{path}: not a verdict document (invalid JSON: {exc})") from exc
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if version != SCHEMA_VERSION:
        raise SpecgateError(
            f"{path}: verdict schema_version {version!r}, this specgate reads {SCHEMA_VERSION}; run the gate again "
            "with this version to rebuild it"
        )
    try:
        return from_data(VerdictDocument, raw, "verdict")
    except ValueError as exc:
        raise SpecgateError(f"{path}: malformed verdict document: {exc}") from exc


def with_warnings(document: VerdictDocument, warnings: list[str]) -> VerdictDocument:
    return replace(document, report_warnings=(*document.report_warnings, *warnings))
