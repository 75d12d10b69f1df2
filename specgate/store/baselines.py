"""Stored baselines: `baselines/<hardware>/<pair>/<workload>.json`, a short history of runs per machine.

A baseline file holds the runs recorded with `--update-baselines` (`RunRecord`s: the raw per-request samples of
every arm, so statistics can be recomputed, the outputs for drift, the task scores, provenance and the machine
fingerprint). Each machine (fingerprint) keeps its last `keep` runs (the gate policy's `history_runs`): latency is
compared only with the runs of the machine the gate runs on, using their between-run spread; acceptance, outputs and
accuracy are compared with the newest run of any machine.

Files are written atomically (temp file in the same folder, fsync, rename), only on purpose, and each sample sits on
one line so a diff of two baselines in a merge request reads sample by sample. A file of another schema, a corrupt
file or one holding another pair's baseline is a `BaselineError` naming the file; nothing is ever replaced silently.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate.errors import BaselineError
from specgate.hardware.fingerprint import Fingerprint
from specgate.store.atomic import write_atomic
from specgate.store.codec import dumps, from_data, to_data
from specgate.store.records import RunRecord

SCHEMA_VERSION = 3
# 3 adds what 2 lacked without changing what it had (CPU times, waits, steps, instances and attempts of samples;
# accepted overrides of a run): a version-2 file reads as it is
READABLE_SCHEMAS = (2, 3)
RERECORD = "delete it (git rm FILE) and record a new one on the reference build: pytest suites/ --update-baselines"


@dataclass(frozen=True, slots=True)
class Baseline:
    """A stored baseline file: its runs, oldest first."""

    path: Path
    hardware: str
    pair: str
    workload: str
    runs: tuple[RunRecord, ...]

    def for_machine(self, fingerprint: Fingerprint) -> tuple[RunRecord, ...]:
        """The runs recorded on this machine (same fingerprint), oldest first."""
        return tuple(r for r in self.runs if r.fingerprint is not None and r.fingerprint.matches(fingerprint))

    def latest_comparable(self, fingerprint: Fingerprint | None) -> RunRecord | None:
        """The run deterministic quantities (outputs, acceptance, accuracy) are compared with: the newest of this
        machine, else the newest of any machine with the same engine and dtype (kernels decide near-ties), else None.
        Without a fingerprint (old files, tests), the newest run."""
        if fingerprint is None:
            return self.runs[-1]
        same = self.for_machine(fingerprint)
        if same:
            return same[-1]
        stack = [
            r
            for r in self.runs
            if r.fingerprint is None
            or (r.fingerprint.engine, r.fingerprint.dtype) == (fingerprint.engine, fingerprint.dtype)
        ]
        return stack[-1] if stack else None

    def machines(self) -> list[Fingerprint]:
        """The machines that recorded runs, newest last, each once."""
        found: dict[str, Fingerprint] = {}
        for run in self.runs:
            if run.fingerprint is not None:
                found.pop(run.fingerprint.key, None)
                found[run.fingerprint.key] = run.fingerprint
        return list(found.values())

    @property
    def record(self) -> RunRecord:
        """The newest run (what `specgate baseline show` and `diff` read)."""
        return self.runs[-1]


def baseline_path(root: Path, hardware: str, pair: str, workload: str) -> Path:
    return root / hardware / pair / f"{workload}.json"


def document(baseline: Baseline) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "hardware": baseline.hardware,
        "pair": baseline.pair,
        "workload": baseline.workload,
        "runs": [to_data(run) for run in baseline.runs],
    }


def dumps_readable(data: Any) -> str:
    """JSON with every sample on one line: small, stable diffs in merge requests."""
    rows: dict[str, list[Any]] = {}

    def mark(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: (_placeholder(rows, v) if k == "samples" and isinstance(v, list) else mark(v))
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = dumps(mark(data), indent=2, sort_keys=True, ensure_ascii=False)
    for key, samples in rows.items():
        lines = ",\n".join("  " + dumps(s, sort_keys=True, ensure_ascii=False) for s in samples)
        text = text.replace(json.dumps(key), "[\n" + lines + "\n]" if lines else "[]", 1)
    return text + "\n"


def _placeholder(rows: dict[str, list[Any]], samples: list[Any]) -> str:
    key = f"__samples_{len(rows)}__"
    rows[key] = samples
    return key


def write_baseline(path: Path, baseline: Baseline) -> None:
    """Replace the file atomically: readers see the old or the new file, never a partial one."""
    write_atomic(path, dumps_readable(document(baseline)))


def append_run(path: Path, record: RunRecord, keep: int) -> Baseline:
    """Add a run to the file's history (created when missing), keeping the last `keep` runs of its machine.

    An existing file that cannot be read is never overwritten: the `BaselineError` says what is wrong with it."""
    expect = (record.hardware, record.pair, record.workload)
    old = load_baseline(path, expect) if path.exists() else Baseline(path, *expect, ())
    runs = [*old.runs, record]
    if record.fingerprint is not None:
        mine = [r for r in runs if r.fingerprint is not None and r.fingerprint.matches(record.fingerprint)]
        dropped = {id(r) for r in mine[: max(0, len(mine) - keep)]}
        runs = [r for r in runs if id(r) not in dropped]
    baseline = Baseline(path, *expect, tuple(runs))
    write_baseline(path, baseline)
    return baseline


def load_baseline(path: Path, expect: tuple[str, str, str] | None = None) -> Baseline:
    """Read and validate a baseline file; every problem is a `BaselineError` naming the file. `expect` is the
    (hardware, pair, workload) the file must be for."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BaselineError(
            f"{path}: corrupt baseline (not valid JSON: {exc}). Restore it from git (git checkout -- FILE) or "
            f"{RERECORD}."
        ) from exc
    if not isinstance(raw, dict) or "schema_version" not in raw:
        raise BaselineError(f"{path}: not a specgate baseline (no schema_version). Restore it from git or {RERECORD}.")
    if raw["schema_version"] not in READABLE_SCHEMAS:
        raise BaselineError(
            f"{path}: baseline schema_version {raw['schema_version']!r}, this specgate reads "
            f"{', '.join(map(str, READABLE_SCHEMAS))} (runs with machine fingerprints); {RERECORD}. The file is left "
            "as it is."
        )
    missing = [k for k in ("hardware", "pair", "workload", "runs") if k not in raw]
    if missing or not isinstance(raw["runs"], list) or not raw["runs"]:
        raise BaselineError(f"{path}: not a specgate baseline (missing {', '.join(missing) or 'runs'}); {RERECORD}.")
    try:
        runs = tuple(from_data(RunRecord, run, f"runs[{i}]") for i, run in enumerate(raw["runs"]))
    except ValueError as exc:
        raise BaselineError(f"{path}: malformed baseline: {exc}; restore it from git or {RERECORD}.") from exc
    found = (str(raw["hardware"]), str(raw["pair"]), str(raw["workload"]))
    inner = {(r.hardware, r.pair, r.workload) for r in runs}
    if expect is not None and (found != expect or inner != {expect}):
        raise BaselineError(
            f"{path}: holds the baseline of {'/'.join(found)}, not {'/'.join(expect)}; a file was copied or renamed "
            f"by hand: restore it from git or {RERECORD}"
        )
    return Baseline(path, *found, runs)


def list_baselines(root: Path) -> Sequence[Path]:
    return sorted(root.glob("*/*/*.json"))


@dataclass(frozen=True, slots=True)
class BaselineStore:
    """The baselines folder of one hardware profile, as a run reads and writes it. Paths in messages are shown
    relative to the project folder (what a merge request shows)."""

    root: Path
    hardware: str
    project_dir: Path

    def path(self, pair: str, workload: str) -> Path:
        return baseline_path(self.root, self.hardware, pair, workload)

    def load(self, pair: str, workload: str) -> Baseline | None:
        """The stored baseline, or None when there is none; a broken file is a `BaselineError`."""
        path = self.path(pair, workload)
        return load_baseline(path, (self.hardware, pair, workload)) if path.exists() else None

    def relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.project_dir.resolve()))
        except ValueError:
            return str(path)


def write_run(folder: Path, record: RunRecord) -> Path:
    """One run in the baselines' format under `folder/<hardware>/<pair>/<workload>.json` (a report artifact)."""
    path = baseline_path(folder, record.hardware, record.pair, record.workload)
    write_baseline(path, Baseline(path, record.hardware, record.pair, record.workload, (record,)))
    return path
