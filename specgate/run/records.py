"""Where a run's numbers go: each evaluation's run record, the machine's fingerprint it is tied to, the baseline
store, and the baseline history a passing run appends to (only on purpose: with --update-baselines, or with
--record-missing-baselines for the pair × workloads without one)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specgate.errors import BaselineError
from specgate.evaluation import Evaluation
from specgate.hardware.fingerprint import Fingerprint, run_fingerprint
from specgate.run.memo import Memo
from specgate.run.scope import RunScope
from specgate.store.baselines import BaselineStore, append_run, baseline_path, write_run
from specgate.store.records import Override, RunRecord, record_run

Overrides = Callable[[str, str], tuple[Override, ...]]


@dataclass
class RunRecords:
    """The records and baselines of one run on `scope.hardware`; `written` lists the baseline files it wrote."""

    scope: RunScope
    out_dir: Path
    baselines_dir: Path
    written: list[Path] = field(default_factory=list)
    _fingerprints: Memo[tuple[object, ...], Fingerprint] = field(default_factory=Memo, init=False, repr=False)

    @property
    def store(self) -> BaselineStore:
        return BaselineStore(self.baselines_dir, self.scope.hardware.name, self.scope.project.source.parent)

    def fingerprint(self, evaluation: Evaluation) -> Fingerprint:
        """This machine's fingerprint for the evaluation's engine, dtype and parallel layout."""
        m, arm = evaluation.measurement, evaluation.plan.arm(evaluation.plan.released)
        return self._fingerprints.get(
            (m.engine, arm.dtype, arm.parallel),
            lambda: run_fingerprint(
                self.scope.hardware, m.engine, m.versions, arm.dtype, arm.parallel, self.scope.backend()
            ),
        )

    def record(self, evaluation: Evaluation, *, every_arm: bool = False) -> RunRecord:
        """The stored form of an evaluation: the candidate's arms (what a baseline holds), or every arm."""
        scope = self.scope
        names = evaluation.plan.names if every_arm else tuple(a.name for a in evaluation.plan.candidates)
        return record_run(
            evaluation,
            scope.hardware.name,
            dataclasses.asdict(scope.policy),
            scope.project.source.parent,
            names,
            dataclasses.asdict(scope.sla(evaluation.where[0])),
            self.fingerprint(evaluation),
        )

    def write_runs(self, evaluations: Sequence[Evaluation]) -> list[Path]:
        """Each evaluation's record, in the baselines' format, under `<out>/runs/<hardware>/<pair>/<workload>.json`:
        `specgate baseline diff BASELINE RUN` then reproduces the gate's regression decisions offline."""
        return [write_run(self.out_dir / "runs", self.record(e, every_arm=True)) for e in evaluations]

    def append_baselines(
        self, evaluations: Sequence[Evaluation], overrides: Overrides, errors: list[str]
    ) -> list[Path]:
        """Append each evaluation to its pair × workload's baseline history, with the overrides accepted for it; a
        file that cannot be written is an error in `errors`, and the others are still written."""
        for evaluation in evaluations:
            path = self.store.path(*evaluation.where)
            record = dataclasses.replace(self.record(evaluation), overrides=overrides(*evaluation.where))
            try:
                append_run(path, record, self.scope.policy.history_runs)
            except (BaselineError, OSError) as exc:
                errors.append(f"{self.store.relative(path)}: baseline not updated: {exc}")
                continue
            self.written.append(path)
        return self.written

    def write_missing(self, evaluations: Sequence[Evaluation], folder: Path) -> list[Path]:
        """The pair × workloads without a baseline, written under `folder` (never over a file that exists), for the
        merge request's artifacts."""
        for evaluation in evaluations:
            if self.store.load(*evaluation.where) is not None:
                continue
            path = baseline_path(folder, self.scope.hardware.name, *evaluation.where)
            if not path.exists():
                append_run(path, self.record(evaluation), self.scope.policy.history_runs)
                self.written.append(path)
        return self.written
