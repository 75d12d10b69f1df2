"""The state of one gate run: configuration, plans, loaded engines, cached measurements, checks and the verdict.

`GateRun` has no pytest dependency. `GateRun.from_options(GateOptions(...))` validates everything a run needs before
any engine starts; `run_all()` runs every applicable check of the catalogue and returns the verdict; `finish()` writes
the baselines (when asked, only from a run that passed) and the reports. The pytest plugin drives the same object.

Engines are loaded once per pair (with every arm of the pair's plans) and measurements made once per pair ×
workload; a failure is cached too, so every check that needs it reports the same reason.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specgate.checks import Check
from specgate.checks.accept import accept_overrides, overrides_of
from specgate.checks.advice import advise
from specgate.checks.catalogue import CheckSpec, Target, applicable
from specgate.checks.judgement import Subject, judge
from specgate.checks.levels import family_size
from specgate.checks.sequential import acceptance_steps, pool_hint
from specgate.checks.sla import recommendations
from specgate.checks.verdict import Verdict, decide_verdict
from specgate.config import (
    GatePolicy,
    HardwareProfile,
    PairConfig,
    ProjectConfig,
    SlaLimits,
    WorkloadConfig,
    load_hardware_profile,
    load_project_config,
    parse_selection,
    with_sla,
)
from specgate.engines.base import Engine
from specgate.errors import BaselineError, ConfigError
from specgate.evaluation import Evaluation
from specgate.faults import FaultLog
from specgate.hardware.fingerprint import Fingerprint, run_fingerprint
from specgate.measure.protocol import Measurement, Progress
from specgate.measure.workloads import load_workload
from specgate.plan import Arm, MeasurementPlan, build_plan, engine_arms
from specgate.reports.document import VerdictDocument
from specgate.stats.distribution import DistributionTest
from specgate.store.baselines import Baseline, BaselineStore, append_run, baseline_path, write_run
from specgate.store.records import RunRecord, record_run

EngineFactory = Callable[[str, Path], Engine]
NO_REFERENCE = "none"


@dataclass(frozen=True, slots=True)
class GateOptions:
    """What a gate run is asked to do (the plugin fills it from the command line).

    `reference` names the pair measured beside every selected pair (reference mode), or `"none"` to switch a
    configured reference off; `inject_slowdown` is the self-test: that fraction of every decode step's time is added
    to the candidate's arms."""

    config: Path
    hardware: str = "cpu"
    pairs: Sequence[str] | None = None
    workloads: Sequence[str] | None = None
    engine: str | None = None
    hardware_dir: Path | None = None
    baselines_dir: Path | None = None
    out_dir: Path | None = None
    update_baselines: bool = False
    reference: str | None = None
    inject_slowdown: float = 0.0
    accept: tuple[str, ...] = ()
    accept_reason: str = ""
    record_missing: Path | None = None


@dataclass
class GateRun:
    """Everything one gate run knows. Mutable: it accumulates as checks run."""

    hardware: HardwareProfile
    project: ProjectConfig
    pairs: list[str]
    workloads: list[str]
    engine_override: str | None
    out_dir: Path
    baselines_dir: Path
    update_baselines: bool = False
    engine_factory: EngineFactory | None = None
    reference_override: str | None = None
    inject_slowdown: float = 0.0
    accept: tuple[str, ...] = ()
    accept_reason: str = ""
    record_missing: Path | None = None
    checks: list[Check] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    gate_items: int = 0
    finished_items: int = 0
    asked: bool = False
    interrupted: bool = False
    written_baselines: list[Path] = field(default_factory=list)
    document: VerdictDocument | None = None
    faults: FaultLog = field(default_factory=FaultLog)
    _engines: dict[str, Engine | BaseException] = field(default_factory=dict)
    _evaluations: dict[tuple[str, str], Evaluation | BaseException] = field(default_factory=dict)
    _regressions: dict[tuple[str, str, str], Check | Exception] | None = None
    _sampled: dict[tuple[str, str, str], DistributionTest | BaseException] = field(default_factory=dict)
    _fingerprints: dict[tuple[object, ...], Fingerprint] = field(default_factory=dict)
    progress: Progress | None = None
    not_run: list[str] = field(default_factory=list)

    @classmethod
    def from_options(cls, options: GateOptions) -> GateRun:
        """Validate the options and everything they name; a `ConfigError` says what is wrong before anything runs."""
        from specgate.hardware.backends import get_backend
        from specgate.preflight import validate_run
        from specgate.registry import runs_local_models

        project = load_project_config(options.config.resolve())
        base = project.source.parent
        hardware = load_hardware_profile(options.hardware, options.hardware_dir or base / "hardware")
        pairs = parse_selection("pair", options.pairs, list(project.pairs), project.default_pairs())
        workloads = parse_selection("workload", options.workloads, list(project.workloads), project.default_workloads())
        chosen = [options.reference or project.pairs[p].reference for p in pairs]
        gated = set(pairs) | {r for r in chosen if r is not None and r in project.pairs}
        if runs_local_models({options.engine or project.pairs[p].engine or hardware.engine for p in gated}):
            get_backend(hardware.backend, hardware.device, profile=hardware.name).check_available()
        run = cls(
            hardware=hardware,
            project=project,
            pairs=pairs,
            workloads=workloads,
            engine_override=options.engine,
            out_dir=options.out_dir or base / "reports",
            baselines_dir=options.baselines_dir or base / "baselines",
            update_baselines=options.update_baselines,
            reference_override=options.reference,
            inject_slowdown=options.inject_slowdown,
            accept=tuple(options.accept),
            accept_reason=options.accept_reason,
            record_missing=options.record_missing,
        )
        validate_run(run)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        return run

    # --- configuration ---------------------------------------------------------------------------------------------

    @property
    def policy(self) -> GatePolicy:
        return self.project.gate

    def pair(self, name: str) -> PairConfig:
        return self.project.pairs[name]

    def workload(self, name: str) -> WorkloadConfig:
        return self.project.workloads[name]

    def engine_name(self, pair_name: str) -> str:
        return self.engine_override or self.pair(pair_name).engine or self.hardware.engine

    def sla(self, pair_name: str) -> SlaLimits:
        return with_sla(self.hardware, self.pair(pair_name).sla)

    def reference_of(self, pair_name: str) -> str | None:
        """The pair measured beside `pair_name` (reference mode), or None."""
        override = self.reference_override
        if override == NO_REFERENCE:
            return None
        chosen = override or self.pair(pair_name).reference
        return None if chosen == pair_name else chosen

    def plan(self, pair_name: str, workload_name: str) -> MeasurementPlan:
        return build_plan(
            self.project,
            pair_name,
            workload_name,
            self.hardware,
            reference=self.reference_of(pair_name),
            slowdown=self.inject_slowdown,
        )

    def arms(self, pair_name: str) -> tuple[Arm, ...]:
        return engine_arms([self.plan(pair_name, w) for w in self.workloads])

    # --- measuring -------------------------------------------------------------------------------------------------

    def engine(self, pair_name: str) -> Engine:
        cached = self._engines.get(pair_name)
        if cached is None:
            try:
                cached = self._load_engine(pair_name)
            except Exception as exc:
                cached = exc
            self._engines[pair_name] = cached
        if isinstance(cached, BaseException):
            raise cached
        return cached

    def _load_engine(self, pair_name: str) -> Engine:
        from specgate.engines import create_engine

        factory = self.engine_factory or create_engine
        engine = factory(self.engine_name(pair_name), self.project.source.parent)
        engine.load(self.arms(pair_name), self.hardware)
        return engine

    def evaluation(self, pair_name: str, workload_name: str) -> Evaluation:
        key = (pair_name, workload_name)
        cached = self._evaluations.get(key)
        if cached is None:
            try:
                cached = self._evaluate(pair_name, workload_name)
            except Exception as exc:
                cached = self.faults.measurement_failed(pair_name, workload_name, exc)
            self._evaluations[key] = cached
        if isinstance(cached, BaseException):
            raise cached
        return cached

    def _evaluate(self, pair_name: str, workload_name: str) -> Evaluation:
        from specgate.measuring import measure_workload

        return measure_workload(
            self.engine(pair_name), self.plan(pair_name, workload_name), self.workload(workload_name), self.policy,
            self.hardware, self.sla(pair_name), self.family(),
            lambda monitor: self.faults.recorder(pair_name, workload_name, monitor), self.progress,
        )  # fmt: skip

    def family(self) -> int:
        """The number of latency comparisons the run gates (the multiple-comparison family)."""
        return family_size([(self.plan(p, w), self.workload(w).gate_speed) for p in self.pairs for w in self.workloads])

    def evaluations(self) -> list[Evaluation]:
        return [e for e in self._evaluations.values() if isinstance(e, Evaluation)]

    def measurements(self) -> list[Measurement]:
        return [e.measurement for e in self.evaluations()]

    def sampled(self, pair_name: str, workload_name: str, arm: str) -> DistributionTest:
        """The sampled-decoding distribution test of an arm against its plain arm (workloads with `sampling:`)."""
        from specgate.measure.sampled_decoding import measure_sampled

        key = (pair_name, workload_name, arm)
        cached = self._sampled.get(key)
        if cached is None:
            workload = self.workload(workload_name)
            try:
                if workload.sampling is None:
                    raise ConfigError(f"workload {workload_name!r} declares no `sampling:`")
                plain = self.plan(pair_name, workload_name).baseline_of(arm) or "ar"
                engine = self.engine(pair_name)
                prompts = load_workload(workload)
                cached = measure_sampled(engine, prompts, plain, arm, workload.sampling, self.policy.alpha)
            except Exception as exc:
                cached = exc
            self._sampled[key] = cached
        if isinstance(cached, BaseException):
            raise cached
        return cached

    # --- records, fingerprints and baselines -----------------------------------------------------------------------

    def fingerprint(self, evaluation: Evaluation) -> Fingerprint:
        """This machine's fingerprint for the evaluation's engine, dtype and parallel layout."""
        m, arm = evaluation.measurement, evaluation.plan.arm(evaluation.plan.released)
        key = (m.engine, arm.dtype, arm.parallel)
        if key not in self._fingerprints:
            self._fingerprints[key] = run_fingerprint(self.hardware, m.engine, m.versions, arm.dtype, arm.parallel)
        return self._fingerprints[key]

    def record(self, evaluation: Evaluation, *, every_arm: bool = False) -> RunRecord:
        """The stored form of an evaluation: the candidate's arms (what a baseline holds), or every arm."""
        names = evaluation.plan.names if every_arm else tuple(a.name for a in evaluation.plan.candidates)
        return record_run(
            evaluation,
            self.hardware.name,
            dataclasses.asdict(self.policy),
            self.project.source.parent,
            names,
            dataclasses.asdict(self.sla(evaluation.where[0])),
            self.fingerprint(evaluation),
        )

    @property
    def store(self) -> BaselineStore:
        return BaselineStore(self.baselines_dir, self.hardware.name, self.project.source.parent)

    def regression_check(self, pair_name: str, workload_name: str, name: str) -> Check:
        """One regression check (`reference:*` or `regression:*`); the first call judges the whole run."""
        if self._regressions is None:
            self._regressions = self._judge()
        outcome = self._regressions.get((pair_name, workload_name, name))
        if outcome is None:
            outcome = self._regressions.get((pair_name, workload_name, "*"))
        if outcome is None:
            raise KeyError(f"{pair_name}/{workload_name}: no regression check {name!r} was judged")
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _judge(self) -> dict[tuple[str, str, str], Check | Exception]:
        subjects: dict[tuple[str, str], Subject | Exception] = {}
        for pair_name in self.pairs:
            for workload_name in self.workloads:
                where = (pair_name, workload_name)
                try:
                    evaluation = self.evaluation(*where)
                except Exception as exc:
                    subjects[where] = exc
                    continue
                try:
                    baseline: Baseline | Exception | None = self.store.load(*where)
                except BaselineError as exc:
                    baseline = exc
                plan, measurement, workload = evaluation.plan, evaluation.measurement, self.workload(workload_name)
                subjects[where] = Subject(
                    plan,
                    self.record(evaluation, every_arm=True),
                    baseline,
                    self.store.relative(self.store.path(*where)),
                    self.sla(pair_name),
                    len(measurement.prompts),
                    measurement.rounds,
                    acceptance_steps(plan, workload, len(measurement.prompts)),
                    pool_hint(plan, workload),
                )
        missing = None if self.record_missing is None else self.store.relative(self.record_missing)
        judged = judge(
            subjects, self.policy, self.family(), update=self.update_baselines, hardware=self.hardware.name,
            record_missing=missing,
        )  # fmt: skip
        return accept_overrides(judged, self.accept, self.accept_reason) if self.update_baselines else judged

    def write_baselines(self) -> list[Path]:
        """Append this run to the baseline history of every pair × workload (only with --update-baselines, and only
        from a run that passed: a blocked run's numbers are never recorded as the reference)."""
        if not self.update_baselines:
            return self._record_missing()
        verdict = self.verdict()
        if not verdict.passed:
            why = "it ran a subset of the applicable checks" if verdict.verdict == "PARTIAL" else "the run blocked"
            self.errors.append(
                f"--update-baselines: no baseline was written, because {why} (see above); fix it and record again"
            )
            return []
        for evaluation in self.evaluations():
            path = self.store.path(*evaluation.where)
            record = dataclasses.replace(
                self.record(evaluation), overrides=overrides_of(self.checks, *evaluation.where)
            )
            try:
                append_run(path, record, self.policy.history_runs)
            except (BaselineError, OSError) as exc:
                self.errors.append(f"{self.store.relative(path)}: baseline not updated: {exc}")
                continue
            self.written_baselines.append(path)
        return self.written_baselines

    def _record_missing(self) -> list[Path]:
        """With --record-missing-baselines=DIR, from a run that passed: the pair × workloads without a baseline are
        written under DIR (never over a file that exists), for the merge request's artifacts."""
        if self.record_missing is None or not self.verdict().passed:
            return []
        for evaluation in self.evaluations():
            if self.store.load(*evaluation.where) is not None:
                continue
            path = baseline_path(self.record_missing, self.hardware.name, *evaluation.where)
            if not path.exists():
                append_run(path, self.record(evaluation), self.policy.history_runs)
                self.written_baselines.append(path)
        return self.written_baselines

    def write_runs(self) -> list[Path]:
        """Each evaluation's record, in the baselines' format, under `<out>/runs/<hardware>/<pair>/<workload>.json`:
        `specgate baseline diff BASELINE RUN` then reproduces the gate's regression decisions offline."""
        return [write_run(self.out_dir / "runs", self.record(e, every_arm=True)) for e in self.evaluations()]

    # --- checks and the verdict ------------------------------------------------------------------------------------

    def compute(self, entry: CheckSpec, target: Target) -> Check:
        """Compute one check and record it in the verdict."""
        result = entry.compute(self, target)
        self.record_check(result)
        return result

    def record_check(self, check: Check) -> None:
        self.checks.append(check)

    def run_all(self) -> Verdict:
        """Run every applicable check without pytest; an exception inside a check is recorded as an error."""
        targets = applicable(self, self.pairs, self.workloads)
        self.gate_items = len(targets)
        for entry, target in targets:
            try:
                self.compute(entry, target)
            except Exception as exc:
                check = "/".join(p for p in (target.pair, target.workload, entry.name, target.param) if p)
                self.faults.record(exc, f"{target.pair}/{target.workload}", check)
            self.finished_items += 1
        return self.verdict()

    def recommendations(self, errors: Sequence[str] = ()) -> list[str]:
        """What to do about each kind of failure (`specgate.checks.advice`), then the SLA rollback advice."""
        advice = advise(self.checks, errors, self.hardware.name)
        for evaluation in self.evaluations():
            if self.workload(evaluation.where[1]).gate_speed:  # accuracy probes say nothing about whether it pays
                advice.extend(recommendations(evaluation, self.hardware.name, self.sla(evaluation.where[0])))
        return advice

    def notices(self) -> list[str]:
        """What the verdict must say loudly whatever it is."""
        slowdown = self.inject_slowdown
        return [] if not slowdown else [
            f"SELF-TEST: --inject-slowdown={slowdown:g} added {slowdown:.0%} to every decode step of the candidate's "
            "arms on purpose: this verdict measures the gate's power, not the release"
        ]  # fmt: skip

    def verdict(self) -> Verdict:
        errors = [*self.errors, *self.faults.messages()]
        if self.interrupted:
            errors.append("the session was interrupted before every gate check ran: a partial run is not a verdict")
        elif self.finished_items < self.gate_items:
            missing = self.gate_items - self.finished_items
            errors.append(
                f"{missing} of {self.gate_items} gate checks did not run to the end: a partial run is not a pass"
            )
        return decide_verdict(
            self.hardware.name, self.checks, errors, self.recommendations(errors), self.notices(), self.not_run
        )

    def finish(self) -> Verdict:
        """Write the records, faults, baselines and reports (`specgate.outputs`); release the engines."""
        from specgate.outputs import write_outputs

        try:
            self.document = write_outputs(self, self.hardware.name)
        finally:
            self.close()
        return self.verdict()

    def close(self) -> None:
        for engine in self._engines.values():
            if not isinstance(engine, BaseException):
                engine.close()
        self._engines.clear()
