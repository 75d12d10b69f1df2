"""The state of one gate run: what it judges (`RunScope`), the engines it loaded and the measurements it made
(made once, `Memo`), its records and baselines (`RunRecords`), how far its gate checks got (`GateItems`), the
checks and the verdict.

`GateRun` has no pytest dependency. `GateRun.from_options(GateOptions(...))` validates everything a run needs before
any engine starts; `run_all()` runs every applicable check of the catalogue and returns the verdict; `finish()` writes
the baselines (when asked, only from a run that passed) and the reports. The pytest plugin drives the same object.

Engines are loaded once per pair (with every arm of the pair's plans) and measurements made once per pair ×
workload; a failure is kept too, so every check that needs it reports the same reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specgate.checks import Check, RegressionKey
from specgate.checks.accept import accept_overrides, overrides_of
from specgate.checks.advice import advise
from specgate.checks.catalogue import CheckSpec, Target, applicable
from specgate.checks.judgement import Subject, judge
from specgate.checks.sequential import acceptance_steps, pool_hint
from specgate.checks.sla import recommendations
from specgate.checks.subject import Judged
from specgate.checks.verdict import Verdict, decide_verdict, rolled_back_rungs
from specgate.config import load_hardware_profile, load_project_config, parse_selection
from specgate.engines.base import Engine
from specgate.errors import BaselineError, ConfigError
from specgate.evaluation import Evaluation
from specgate.faults import FaultLog
from specgate.hardware.fingerprint import Fingerprint
from specgate.measure.protocol import Measurement, Progress
from specgate.measure.workloads import load_workload
from specgate.reports.document import VerdictDocument
from specgate.run.items import GateItems
from specgate.run.memo import Memo
from specgate.run.records import RunRecords
from specgate.run.scope import RunScope
from specgate.stats.distribution import DistributionTest
from specgate.store.baselines import Baseline, BaselineStore

EngineFactory = Callable[[str, Path], Engine]


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


@dataclass(kw_only=True)
class GateRun(RunScope):
    """Everything one gate run knows: its scope (the lookups it inherits), what it measured, the checks it made.
    Mutable: it accumulates as checks run."""

    out_dir: Path
    baselines_dir: Path
    update_baselines: bool = False
    engine_factory: EngineFactory | None = None
    accept: tuple[str, ...] = ()
    accept_reason: str = ""
    record_missing: Path | None = None
    checks: list[Check] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # what the verdict must say besides `notices`
    items: GateItems = field(default_factory=GateItems)
    document: VerdictDocument | None = None
    faults: FaultLog = field(default_factory=FaultLog)
    progress: Progress | None = None
    records: RunRecords = field(init=False, repr=False, compare=False)
    _engines: Memo[str, Engine] = field(default_factory=Memo, init=False, repr=False)
    _evaluations: Memo[tuple[str, str], Evaluation] = field(default_factory=Memo, init=False, repr=False)
    _sampled: Memo[tuple[str, str, str], DistributionTest] = field(default_factory=Memo, init=False, repr=False)
    _regressions: Judged | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.records = RunRecords(self, self.out_dir, self.baselines_dir)

    @classmethod
    def from_options(cls, options: GateOptions) -> GateRun:
        """Validate the options and everything they name; a `ConfigError` says what is wrong before anything runs."""
        from specgate.preflight import validate_run
        from specgate.registry import runs_local_models

        project = load_project_config(options.config.resolve())
        base = project.source.parent
        hardware = load_hardware_profile(options.hardware, options.hardware_dir or base / "hardware")
        pairs = parse_selection("pair", options.pairs, list(project.pairs), project.default_pairs())
        workloads = parse_selection("workload", options.workloads, list(project.workloads), project.default_workloads())
        chosen = [options.reference or project.pairs[p].reference for p in pairs]
        gated = set(pairs) | {r for r in chosen if r is not None and r in project.pairs}
        run = cls(
            hardware=hardware,
            project=project,
            pairs=pairs,
            workloads=workloads,
            engine_override=options.engine,
            reference_override=options.reference,
            inject_slowdown=options.inject_slowdown,
            out_dir=options.out_dir or base / "reports",
            baselines_dir=options.baselines_dir or base / "baselines",
            update_baselines=options.update_baselines,
            accept=tuple(options.accept),
            accept_reason=options.accept_reason,
            record_missing=options.record_missing,
        )
        if runs_local_models({run.engine_name(p) for p in gated}):
            run.backend().check_available()
        validate_run(run)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        return run

    # --- measuring -------------------------------------------------------------------------------------------------

    def engine(self, pair_name: str) -> Engine:
        """The pair's engine, loaded on the first call with every arm of the pair's plans."""
        return self._engines.get(pair_name, lambda: self._load_engine(pair_name))

    def _load_engine(self, pair_name: str) -> Engine:
        from specgate.engines import create_engine

        factory = self.engine_factory or create_engine
        engine = factory(self.engine_name(pair_name), self.project.source.parent)
        engine.load(self.arms(pair_name), self.hardware, self.backend())
        return engine

    def evaluation(self, pair_name: str, workload_name: str) -> Evaluation:
        """The pair × workload measured and summarised, on the first call; a failure is recorded as a fault."""
        return self._evaluations.get(
            (pair_name, workload_name),
            lambda: self._evaluate(pair_name, workload_name),
            lambda exc: self.faults.measurement_failed(pair_name, workload_name, exc),
        )

    def _evaluate(self, pair_name: str, workload_name: str) -> Evaluation:
        from specgate.measuring import measure_workload

        return measure_workload(
            self.engine(pair_name),
            self.plan(pair_name, workload_name),
            self.workload(workload_name),
            self.policy,
            self.hardware,
            self.sla(pair_name),
            self.family(),
            lambda monitor: self.faults.recorder(pair_name, workload_name, monitor),
            self.progress,
            self.backend(),
        )

    def evaluations(self) -> list[Evaluation]:
        return self._evaluations.values()

    def measurements(self) -> list[Measurement]:
        return [e.measurement for e in self.evaluations()]

    def sampled(self, pair_name: str, workload_name: str, arm: str) -> DistributionTest:
        """The sampled-decoding distribution test of an arm against its plain arm (workloads with `sampling:`)."""
        return self._sampled.get((pair_name, workload_name, arm), lambda: self._sample(pair_name, workload_name, arm))

    def _sample(self, pair_name: str, workload_name: str, arm: str) -> DistributionTest:
        from specgate.measure.sampled_decoding import measure_sampled

        workload = self.workload(workload_name)
        if workload.sampling is None:
            raise ConfigError(f"workload {workload_name!r} declares no `sampling:`")
        plain = self.plan(pair_name, workload_name).baseline_of(arm) or "ar"
        engine = self.engine(pair_name)
        return measure_sampled(engine, load_workload(workload), plain, arm, workload.sampling, self.policy.alpha)

    # --- records and baselines (`RunRecords`) ----------------------------------------------------------------------

    @property
    def store(self) -> BaselineStore:
        return self.records.store

    def fingerprint(self, evaluation: Evaluation) -> Fingerprint:
        return self.records.fingerprint(evaluation)

    def write_runs(self) -> list[Path]:
        return self.records.write_runs(self.evaluations())

    def write_baselines(self) -> list[Path]:
        """Append this run to the baseline history of every pair × workload (only with --update-baselines, and only
        from a run that passed: a blocked run's numbers are never recorded as the reference, unless all that blocked
        it is ladder rungs rolled back, which are results to keep: their rows are stored marked ROLL BACK and the
        verdict still blocks on them). With --record-missing-baselines=DIR, from a run that passed, the pair ×
        workloads without a baseline go under DIR."""
        if not self.update_baselines:
            if self.record_missing is None or not self.verdict().passed:
                return []
            return self.records.write_missing(self.evaluations(), self.record_missing)
        verdict = self.verdict()
        rolled_back = rolled_back_rungs(verdict)
        if rolled_back:
            self.said.append(
                f"--update-baselines: recorded although the run blocked, because all that blocked it is ladder "
                f"rung(s) rolled back ({', '.join(rolled_back)}): they are stored marked ROLL BACK, so the next run "
                "compares them with their stored selves; the release still blocks on them until the ladder drops them"
            )
        elif not verdict.passed:
            why = "it ran a subset of the applicable checks" if verdict.verdict == "PARTIAL" else "the run blocked"
            self.errors.append(
                f"--update-baselines: no baseline was written, because {why} (see above); fix it and record again"
            )
            return []
        overrides = lambda pair, workload: overrides_of(self.checks, pair, workload)  # noqa: E731
        return self.records.append_baselines(self.evaluations(), overrides, self.errors)

    # --- regression checks -----------------------------------------------------------------------------------------

    def regression_check(self, pair_name: str, workload_name: str, key: RegressionKey) -> Check:
        """One regression check (`reference:*` or `regression:*`); the first call judges the whole run. The
        exception of a measurement that failed is raised for each of its checks."""
        if self._regressions is None:
            self._regressions = self._judge()
        results = self._regressions.get((pair_name, workload_name))
        if isinstance(results, BaseException):
            raise results
        outcome = None if results is None else results.get(key)
        if outcome is None:
            raise KeyError(f"{pair_name}/{workload_name}: no regression check {key.name!r} was judged")
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _judge(self) -> Judged:
        subjects: dict[tuple[str, str], Subject | Exception] = {}
        for pair_name in self.pairs:
            for workload_name in self.workloads:
                try:
                    evaluation = self.evaluation(pair_name, workload_name)
                except Exception as exc:
                    subjects[pair_name, workload_name] = exc
                    continue
                subjects[pair_name, workload_name] = self._subject(evaluation)
        store = self.store
        missing = None if self.record_missing is None else store.relative(self.record_missing)
        judged = judge(
            subjects,
            self.policy,
            self.family(),
            update=self.update_baselines,
            hardware=self.hardware.name,
            record_missing=missing,
        )
        return accept_overrides(judged, self.accept, self.accept_reason) if self.update_baselines else judged

    def _subject(self, evaluation: Evaluation) -> Subject:
        """What the regression checks of one pair × workload judge: its measurement and its stored baseline (an
        exception when it cannot be read)."""
        (pair_name, workload_name), store = evaluation.where, self.store
        try:
            baseline: Baseline | Exception | None = store.load(pair_name, workload_name)
        except BaselineError as exc:
            baseline = exc
        plan, prompts, workload = evaluation.plan, len(evaluation.measurement.prompts), self.workload(workload_name)
        return Subject(
            plan,
            self.records.record(evaluation, every_arm=True),
            baseline,
            store.relative(store.path(pair_name, workload_name)),
            self.sla(pair_name),
            prompts,
            evaluation.measurement.rounds,
            acceptance_steps(plan, workload, prompts),
            pool_hint(plan, workload),
        )

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
        self.items.expected = len(targets)
        for entry, target in targets:
            try:
                self.compute(entry, target)
            except Exception as exc:
                check = "/".join(p for p in (target.pair, target.workload, entry.name, target.param) if p)
                self.faults.record(exc, f"{target.pair}/{target.workload}", check)
            self.items.finished += 1
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
        if not slowdown:
            return list(self.said)
        return [
            *self.said,
            f"SELF-TEST: --inject-slowdown={slowdown:g} added {slowdown:.0%} to every decode step of the candidate's "
            "arms on purpose: this verdict measures the gate's power, not the release",
        ]

    def verdict(self) -> Verdict:
        shortfall = self.items.shortfall()
        errors = [*self.errors, *self.faults.messages(), *([shortfall] if shortfall else [])]
        return decide_verdict(
            self.hardware.name, self.checks, errors, self.recommendations(errors), self.notices(), self.items.not_run
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
            engine.close()
        self._engines.clear()
