"""The state of one gate run: configuration, loaded engines, cached measurements, checks and the verdict.

`GateRun` has no pytest dependency: the plugin keeps one in `config.stash`, and a script can drive one directly.
Engines are loaded once per pair and measurements made once per pair × workload; a failure is cached too, so every
check that needs it reports the same reason instead of re-running a broken engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specgate.baselines import Baseline, baseline_document, baseline_path, load_baseline, write_baseline
from specgate.config import HardwareProfile, PairConfig, ProjectConfig, SlaLimits, WorkloadConfig, effective_sla
from specgate.energy import ArmMonitor, Observation, attach_resources
from specgate.engines.base import Engine
from specgate.errors import MeasurementError
from specgate.evaluation import Evaluation, explain_divergences
from specgate.gate import REGRESSION, Check, Verdict, decide
from specgate.hardware.backends import get_backend
from specgate.measure import Measurement, measure_pair
from specgate.regression import (
    ACCEPTANCE,
    METRIC_NAMES,
    METRICS,
    OUTPUT_DRIFT,
    TASK_ACCURACY,
    acceptance_check,
    accuracy_check,
    compare_metric,
    comparison_check,
    holm_family,
    output_drift_check,
)
from specgate.roofline import model_folder
from specgate.sequential import StopRule, sequential_stop
from specgate.stats import Comparison
from specgate.workloads import load_workload

EngineFactory = Callable[[str, Path], Engine]


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
    recommendations: list[str] = field(default_factory=list)
    gate_items: int = 0
    _engines: dict[str, Engine | BaseException] = field(default_factory=dict)
    _evaluations: dict[tuple[str, str], Evaluation | BaseException] = field(default_factory=dict)
    _regressions: dict[tuple[str, str, str], Check | BaseException] | None = None
    written_baselines: list[Path] = field(default_factory=list)
    _observations: dict[tuple[str, str], Observation] = field(default_factory=dict)

    def pair(self, name: str) -> PairConfig:
        return self.project.pairs[name]

    def workload(self, name: str) -> WorkloadConfig:
        return self.project.workloads[name]

    def engine_name(self, pair: PairConfig) -> str:
        return self.engine_override or pair.engine or self.hardware.engine

    def engine(self, pair_name: str) -> Engine:
        cached = self._engines.get(pair_name)
        if cached is None:
            try:
                cached = self._load_engine(self.pair(pair_name))
            except Exception as exc:
                cached = exc
            self._engines[pair_name] = cached
        if isinstance(cached, BaseException):
            raise cached
        return cached

    def _load_engine(self, pair: PairConfig) -> Engine:
        from specgate.engines import create_engine

        factory = self.engine_factory or create_engine
        engine = factory(self.engine_name(pair), self.project.source.parent)
        engine.load(pair, self.hardware)
        return engine

    def evaluation(self, pair_name: str, workload_name: str) -> Evaluation:
        key = (pair_name, workload_name)
        cached = self._evaluations.get(key)
        if cached is None:
            try:
                cached = Evaluation(
                    self.measure(pair_name, workload_name),
                    self.sla(pair_name),
                    self.project.gate,
                    task=self.workload(workload_name).task,
                )
                margin = getattr(self.engine(pair_name), "logit_margin", None)
                if margin is not None and cached.losslessness.divergences:
                    explain_divergences(cached, margin)
                self._attach_resources(cached, pair_name)
                if self.workload(workload_name).gate_speed:  # accuracy probes say nothing about whether it pays
                    self.recommendations.extend(cached.recommendations(self.hardware.name))
            except Exception as exc:
                cached = exc
            self._evaluations[key] = cached
        if isinstance(cached, BaseException):
            raise cached
        return cached

    def measure(self, pair_name: str, workload_name: str) -> Measurement:
        """Measure the pair on the workload with an `ArmMonitor` watching every engine call (energy, memory)."""
        backend = get_backend(self.hardware.backend, self.hardware.device, profile=self.hardware.name)
        monitor = ArmMonitor(self.hardware, backend)
        try:
            return self._measure(pair_name, workload_name, monitor)
        finally:
            self._observations[(pair_name, workload_name)] = monitor.finish()

    def _attach_resources(self, evaluation: Evaluation, pair_name: str) -> None:
        """Cost, energy and peak memory per arm (from the monitor) and the target model's decode roofline."""
        attach_resources(
            evaluation,
            self._observations.get(evaluation.where),
            self.hardware,
            dtype=self.pair(pair_name).dtype or self.hardware.dtype,
            model_folder=model_folder(self.engine(pair_name)),
        )

    def _measure(self, pair_name: str, workload_name: str, observer: ArmMonitor) -> Measurement:
        pair = self.pair(pair_name)
        engine = self.engine(pair_name)
        workload = self.workload(workload_name)
        prompts = load_workload(workload)
        policy = self.project.gate
        if workload.repetitions is not None:  # e.g. an accuracy probe: greedy outputs repeat exactly
            policy = dataclasses.replace(policy, repetitions=workload.repetitions)
        return measure_pair(
            engine,
            prompts,
            policy,
            pair=pair_name,
            workload=workload_name,
            hardware=self.hardware.name,
            gamma=pair.speculation.num_tokens,
            stop=self._stop_rule(pair_name, workload_name),
            observer=observer,
        )

    def _stop_rule(self, pair_name: str, workload_name: str) -> StopRule | None:
        """Sequential stopping against the baseline, when the policy asks for it and a baseline exists."""
        policy = self.project.gate
        if self.update_baselines or policy.max_repetitions <= policy.repetitions:
            return None
        baseline = self._baseline_or_none(pair_name, workload_name)
        if baseline is None:
            return None
        return sequential_stop(baseline, self.sla(pair_name), policy, self.workload(workload_name).task)

    def evaluations(self) -> list[Evaluation]:
        return [e for e in self._evaluations.values() if isinstance(e, Evaluation)]

    def sla(self, pair_name: str) -> SlaLimits:
        return effective_sla(self.hardware, self.pair(pair_name))

    def baseline_file(self, pair_name: str, workload_name: str) -> Path:
        return baseline_path(self.baselines_dir, self.hardware.name, pair_name, workload_name)

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
        pending: list[tuple[tuple[str, str, str], Comparison, Evaluation, Baseline]] = []
        for pair_name in self.pairs:
            for workload_name in self.workloads:
                where = (pair_name, workload_name)
                try:
                    evaluation = self.evaluation(*where)
                    baseline = self._baseline_or_none(*where)
                except Exception as exc:
                    outcomes.update({(*where, name): exc for name in (*METRIC_NAMES, TASK_ACCURACY)})
                    continue
                if baseline is None:
                    names = (*METRIC_NAMES, TASK_ACCURACY)
                    outcomes.update({(*where, name): self._no_baseline_check(*where, name) for name in names})
                    continue
                sla = self.sla(pair_name)
                outcomes[(*where, ACCEPTANCE)] = acceptance_check(baseline, evaluation, sla, self.project.gate)
                outcomes[(*where, OUTPUT_DRIFT)] = output_drift_check(baseline, evaluation, sla)
                outcomes[(*where, TASK_ACCURACY)] = accuracy_check(baseline, evaluation, sla)
                for metric in METRICS:
                    try:
                        comparison = compare_metric(metric, baseline, evaluation, self.project.gate, sla)
                    except (ValueError, KeyError) as exc:
                        outcomes[(*where, metric.name)] = MeasurementError(
                            f"cannot compare {metric.name} with {baseline.path}: {exc}"
                        )
                        continue
                    pending.append(((*where, metric.name), comparison, evaluation, baseline))
        adjusted = holm_family([p[1] for p in pending], self.project.gate.alpha)
        for (key, _, evaluation, baseline), comparison in zip(pending, adjusted, strict=True):
            outcomes[key] = comparison_check(comparison, evaluation, baseline)
        return outcomes

    def _baseline_or_none(self, pair_name: str, workload_name: str) -> Baseline | None:
        path = self.baseline_file(pair_name, workload_name)
        return load_baseline(path) if path.exists() else None

    def _no_baseline_check(self, pair_name: str, workload_name: str, metric: str) -> Check:
        path = self.baseline_file(pair_name, workload_name)
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
        gate = dataclasses.asdict(self.project.gate)
        for evaluation in self.evaluations():
            if any(s.n_failed for s in evaluation.summaries.values()):
                self.errors.append(f"{evaluation.where}: requests failed; its baseline was not updated")
                continue
            path = self.baseline_file(*evaluation.where)
            document = baseline_document(evaluation, self.hardware.name, gate, self.project.source.parent)
            write_baseline(path, document)
            self.written_baselines.append(path)
        return self.written_baselines

    def record(self, check: Check) -> None:
        self.checks.append(check)

    def verdict(self) -> Verdict:
        return decide(self.hardware.name, self.checks, self.errors, self.recommendations)

    def close(self) -> None:
        for engine in self._engines.values():
            if not isinstance(engine, BaseException):
                engine.close()
        self._engines.clear()
