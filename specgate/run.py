"""The state of one gate run: configuration, plans, loaded engines, cached measurements, checks and the verdict.

`GateRun` has no pytest dependency. `GateRun.from_options(GateOptions(...))` validates everything a run needs
before any engine starts (config, profile, selection, engine libraries, model files); `run_all()` then runs every
applicable check of the catalogue and returns the verdict, and `finish()` writes the baselines (when asked) and the
reports. The pytest plugin drives the same object: it only adapts options, collection, items and the exit status.

Engines are loaded once per pair (with every arm of the pair's plans) and measurements made once per pair ×
workload; a failure is cached too, so every check that needs it reports the same reason instead of re-running a
broken engine.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specgate.checks import REGRESSION, Check
from specgate.checks.catalogue import CATALOGUE, CheckSpec, Target, params
from specgate.checks.regression import decide_comparisons, pending_comparisons
from specgate.checks.sla import recommendations
from specgate.checks.verdict import Verdict, decide
from specgate.comparison import METRIC_NAMES, TASK_ACCURACY, Arms
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
from specgate.engines.base import Engine, ExplainsDivergences, SamplesOutputs
from specgate.errors import ConfigError, MeasurementError
from specgate.evaluation import Evaluation, evaluate
from specgate.measure.monitor import ArmMonitor
from specgate.measure.protocol import Measurement, measure_plan
from specgate.measure.workloads import load_workload
from specgate.plan import MeasurementPlan, build_plan, engine_arms
from specgate.reports.document import VerdictDocument
from specgate.stats.distribution import DistributionTest
from specgate.stats.tests import Comparison
from specgate.store.baselines import Baseline, baseline_path, load_baseline, write_baseline
from specgate.store.records import RunRecord, record_run

EngineFactory = Callable[[str, Path], Engine]


@dataclass(frozen=True, slots=True)
class GateOptions:
    """What a gate run is asked to do (the plugin fills it from the command line)."""

    config: Path
    hardware: str = "cpu"
    pairs: Sequence[str] | None = None
    workloads: Sequence[str] | None = None
    engine: str | None = None
    hardware_dir: Path | None = None
    baselines_dir: Path | None = None
    out_dir: Path | None = None
    update_baselines: bool = False


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
    checks: list[Check] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    gate_items: int = 0
    written_baselines: list[Path] = field(default_factory=list)
    _engines: dict[str, Engine | BaseException] = field(default_factory=dict)
    _evaluations: dict[tuple[str, str], Evaluation | BaseException] = field(default_factory=dict)
    _regressions: dict[tuple[str, str, str], Check | BaseException] | None = None
    _sampled: dict[tuple[str, str, str], DistributionTest | BaseException] = field(default_factory=dict)
    document: VerdictDocument | None = None

    @classmethod
    def from_options(cls, options: GateOptions) -> GateRun:
        """Validate the options and everything they name; a `ConfigError` says what is wrong before anything runs."""
        from specgate.engines.registry import engine_spec, require_engine
        from specgate.hardware.backends import get_backend
        from specgate.models import locate

        project = load_project_config(options.config.resolve())
        base = project.source.parent
        hardware = load_hardware_profile(options.hardware, options.hardware_dir or base / "hardware")
        if options.engine is not None:
            engine_spec(options.engine)
        pairs = parse_selection("pair", options.pairs, list(project.pairs), project.default_pairs())
        workloads = parse_selection("workload", options.workloads, list(project.workloads), project.default_workloads())
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
        )
        for name in pairs:
            spec = require_engine(run.engine_name(name), name)
            if spec.local_models:
                for arm in run.arms(name):
                    locate(arm.target, base)
                    if arm.speculation is not None and arm.speculation.draft is not None:
                        locate(arm.speculation.draft, base)
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
        return self.pair(pair_name).reference

    def plan(self, pair_name: str, workload_name: str) -> MeasurementPlan:
        return build_plan(self.project, pair_name, workload_name, self.hardware, reference=self.reference_of(pair_name))

    def arms(self, pair_name: str) -> tuple:  # type: ignore[type-arg]
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
                cached = exc
            self._evaluations[key] = cached
        if isinstance(cached, BaseException):
            raise cached
        return cached

    def _evaluate(self, pair_name: str, workload_name: str) -> Evaluation:
        from specgate.hardware.backends import get_backend

        engine = self.engine(pair_name)
        plan = self.plan(pair_name, workload_name)
        workload = self.workload(workload_name)
        policy = self.policy
        if workload.repetitions is not None:  # e.g. an accuracy probe: greedy outputs repeat exactly
            policy = dataclasses.replace(policy, repetitions=workload.repetitions)
        monitor = ArmMonitor(self.hardware, get_backend(self.hardware.backend, self.hardware.device))
        try:
            measurement = measure_plan(
                engine, plan, load_workload(workload), policy, hardware=self.hardware.name, observer=monitor
            )
        finally:
            observation = monitor.finish()
        models = engine.models(plan.plain)
        return evaluate(
            measurement,
            task=workload.task,
            seed=policy.seed,
            hardware=self.hardware,
            observation=observation,
            model_folder=models["target"].folder if "target" in models else None,
            explainer=engine if isinstance(engine, ExplainsDivergences) else None,
        )

    def evaluations(self) -> list[Evaluation]:
        return [e for e in self._evaluations.values() if isinstance(e, Evaluation)]

    def measurements(self) -> list[Measurement]:
        return [e.measurement for e in self.evaluations()]

    def sampled(self, pair_name: str, workload_name: str, arm: str) -> DistributionTest:
        """The sampled-decoding distribution test of an arm against its plain arm (workloads with `sampling:`)."""
        key = (pair_name, workload_name, arm)
        cached = self._sampled.get(key)
        if cached is None:
            try:
                cached = self._sample(pair_name, workload_name, arm)
            except Exception as exc:
                cached = exc
            self._sampled[key] = cached
        if isinstance(cached, BaseException):
            raise cached
        return cached

    def _sample(self, pair_name: str, workload_name: str, arm: str) -> DistributionTest:
        from specgate.stats.distribution import compare_distributions

        engine = self.engine(pair_name)
        settings = self.workload(workload_name).sampling
        if settings is None:
            raise ConfigError(f"workload {workload_name!r} declares no `sampling:`")
        if not isinstance(engine, SamplesOutputs):
            raise MeasurementError(f"engine {engine.name!r} cannot sample outputs; run this workload on transformers")
        plain = self.plan(pair_name, workload_name).baseline_of(arm) or "ar"
        prompts = load_workload(self.workload(workload_name))[: settings.prompts]
        samples: dict[str, dict[str, list[tuple[int, ...]]]] = {}
        for index, prompt in enumerate(prompts):
            seeds = range(settings.seed + 10_000 * index, settings.seed + 10_000 * index + settings.samples)
            samples[prompt.id] = {
                name: engine.sample(
                    prompt,
                    name,
                    seeds=seeds,
                    max_new_tokens=settings.positions,
                    temperature=settings.temperature,
                    top_p=settings.top_p,
                )
                for name in (plain, arm)
            }
        return compare_distributions(
            samples, reference=plain, candidate=arm, positions=settings.positions, alpha=self.policy.alpha
        )

    # --- regression against baselines ------------------------------------------------------------------------------

    def baseline_file(self, pair_name: str, workload_name: str) -> Path:
        return baseline_path(self.baselines_dir, self.hardware.name, pair_name, workload_name)

    def _baseline_or_none(self, pair_name: str, workload_name: str) -> Baseline | None:
        path = self.baseline_file(pair_name, workload_name)
        expect = (self.hardware.name, pair_name, workload_name)
        return load_baseline(path, expect) if path.exists() else None

    def record(self, evaluation: Evaluation) -> RunRecord:
        """The stored form of an evaluation (what a baseline would hold)."""
        gate = dataclasses.asdict(self.policy)
        candidates = tuple(a.name for a in evaluation.plan.candidates)
        limits = dataclasses.asdict(self.sla(evaluation.where[0]))
        return record_run(evaluation, self.hardware.name, gate, self.project.source.parent, candidates, limits)

    def regression_check(self, pair_name: str, workload_name: str, metric: str) -> Check:
        """The check of one metric against the baseline; the first call compares the whole run (Holm)."""
        if self._regressions is None:
            self._regressions = self._compare_all()
        outcome = self._regressions[(pair_name, workload_name, metric)]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _compare_all(self) -> dict[tuple[str, str, str], Check | BaseException]:
        outcomes: dict[tuple[str, str, str], Check | BaseException] = {}
        pending: list[tuple[tuple[str, str], str, str, Comparison]] = []
        for pair_name in self.pairs:
            for workload_name in self.workloads:
                where = (pair_name, workload_name)
                names = (*METRIC_NAMES, TASK_ACCURACY)
                try:
                    evaluation = self.evaluation(*where)
                    baseline = self._baseline_or_none(*where)
                except Exception as exc:
                    outcomes.update({(*where, name): exc for name in names})
                    continue
                if baseline is None:
                    outcomes.update({(*where, name): self._no_baseline_check(*where, name) for name in names})
                    continue
                source = self._relative(baseline.path)
                plan = evaluation.plan
                done, comparisons = pending_comparisons(
                    where,
                    baseline.record,
                    self.record(evaluation),
                    source,
                    Arms(plan.released, plan.plain),
                    self.policy,
                    self.sla(pair_name),
                )
                outcomes.update({(*where, name): result for name, result in done.items()})
                pending.extend((where, name, source, comparison) for name, comparison in comparisons)
        decided = decide_comparisons([(w, s, c) for w, _, s, c in pending], self.policy.alpha)
        for (where, name, _, _), check in zip(pending, decided, strict=True):
            outcomes[(*where, name)] = check
        return outcomes

    def _relative(self, path: Path) -> str:
        """A path as the merge request shows it: relative to the project folder when it lies inside."""
        try:
            return str(path.resolve().relative_to(self.project.source.parent.resolve()))
        except ValueError:
            return str(path)

    def _no_baseline_check(self, pair_name: str, workload_name: str, metric: str) -> Check:
        path = self._relative(self.baseline_file(pair_name, workload_name))
        if self.update_baselines:
            message = f"update run: no comparison; the baseline is written to {path} at the end of the session"
            return Check(f"regression:{metric}", pair_name, workload_name, REGRESSION, True, message)
        message = (
            f"BLOCK: no baseline for {self.hardware.name}/{pair_name}/{workload_name} ({path}) — run the "
            "reference build with --update-baselines"
        )
        return Check(f"regression:{metric}", pair_name, workload_name, REGRESSION, False, message)

    def write_baselines(self) -> list[Path]:
        """Write the baseline of every evaluation measured without failures (only with --update-baselines)."""
        if not self.update_baselines:
            return []
        for evaluation in self.evaluations():
            if any(s.n_failed for s in evaluation.summaries.values()):
                self.errors.append(f"{'/'.join(evaluation.where)}: requests failed; its baseline was not updated")
                continue
            path = self.baseline_file(*evaluation.where)
            write_baseline(path, self.record(evaluation))
            self.written_baselines.append(path)
        return self.written_baselines

    # --- checks and the verdict ------------------------------------------------------------------------------------

    def targets(self) -> list[tuple[CheckSpec, Target]]:
        """Every applicable check of the catalogue on the selected pairs and workloads, in catalogue order."""
        found = []
        for entry in CATALOGUE:
            for pair_name in self.pairs:
                plans = [self.plan(pair_name, w) for w in self.workloads]
                for workload_name in self.workloads:
                    for param in params(entry, plans):
                        target = Target(pair_name, workload_name, param)
                        if entry.applies(self, target):
                            found.append((entry, target))
        return found

    def compute(self, entry: CheckSpec, target: Target) -> Check:
        """Compute one check and record it in the verdict."""
        result = entry.compute(self, target)
        self.record_check(result)
        return result

    def record_check(self, check: Check) -> None:
        self.checks.append(check)

    def run_all(self) -> Verdict:
        """Run every applicable check without pytest; an exception inside a check is recorded as an error."""
        targets = self.targets()
        self.gate_items = len(targets)
        for entry, target in targets:
            try:
                self.compute(entry, target)
            except Exception as exc:
                where = "/".join(p for p in (target.pair, target.workload, target.param) if p)
                self.errors.append(f"{entry.name} {where}: {type(exc).__name__}: {exc}")
        return self.verdict()

    def recommendations(self) -> list[str]:
        advice: list[str] = []
        for evaluation in self.evaluations():
            if self.workload(evaluation.where[1]).gate_speed:  # accuracy probes say nothing about whether it pays
                advice.extend(recommendations(evaluation, self.hardware.name, self.sla(evaluation.where[0])))
        return advice

    def verdict(self) -> Verdict:
        return decide(self.hardware.name, self.checks, self.errors, self.recommendations())

    def write_runs(self) -> list[Path]:
        """Each evaluation's record, in the baselines' format, under `<out>/runs/<hardware>/<pair>/<workload>.json`:
        `specgate baseline diff BASELINE RUN` then reproduces the gate's regression decisions offline."""
        written = []
        for evaluation in self.evaluations():
            path = baseline_path(self.out_dir / "runs", self.hardware.name, *evaluation.where)
            write_baseline(path, self.record(evaluation))
            written.append(path)
        return written

    def finish(self) -> Verdict:
        """Write the baselines (with --update-baselines), the run records and every report; release the engines."""
        try:
            self.write_baselines()
            self.write_runs()
            from specgate.reports import write_reports

            self.document = write_reports(self)
        finally:
            self.close()
        return self.verdict()

    def close(self) -> None:
        for engine in self._engines.values():
            if not isinstance(engine, BaseException):
                engine.close()
        self._engines.clear()
