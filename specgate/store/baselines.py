"""Stored baselines: `baselines/<hardware>/<pair>/<workload>.json`.

A baseline holds the raw per-request samples of every arm (so statistics can be recomputed), the outputs (token
ids, for drift), summaries for people, and provenance. It is written atomically (temp file in the same folder,
fsync, rename) and only when the run asks for it (`--update-baselines`). Each sample sits on one line, so a diff of
two baselines in a merge request reads metric by metric.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate.accuracy import TaskAccuracy
from specgate.errors import BaselineError
from specgate.measure.samples import ArmSamples, Sample
from specgate.store.atomic import write_atomic
from specgate.store.records import RunRecord

SCHEMA_VERSION = 1
REQUIRED = ("schema_version", "hardware", "pair", "workload", "arms", "provenance")


@dataclass(frozen=True, slots=True)
class Baseline:
    """A stored baseline, validated: the file it came from and the run it holds."""

    path: Path
    record: RunRecord

    @property
    def arms(self) -> Mapping[str, ArmSamples]:
        return self.record.arms

    @property
    def accuracy(self) -> Mapping[str, TaskAccuracy]:
        return self.record.accuracy


def baseline_path(root: Path, hardware: str, pair: str, workload: str) -> Path:
    return root / hardware / pair / f"{workload}.json"


def baseline_document(record: RunRecord) -> dict[str, Any]:
    """The JSON document of a baseline holding one run."""
    arms = {}
    for arm, stored in record.arms.items():
        arms[arm] = {
            "summary": _summary(stored),
            "run_walls_s": list(stored.run_walls_s),
            "run_keys": list(stored.run_keys),
            "samples": [_sample_dict(s) for s in stored.samples],
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "hardware": record.hardware,
        "pair": record.pair,
        "workload": record.workload,
        "speedup": record.speedup(),
        "accuracy": {arm: dataclasses.asdict(score) for arm, score in record.accuracy.items()},
        "arms": arms,
        "provenance": {
            "specgate": record.specgate,
            "engine": record.engine,
            "versions": dict(record.versions),
            "models": {arm: dict(models) for arm, models in record.models.items()},
            "git_commit": record.git_commit,
            "date": record.recorded_at,
            "gate": dict(record.gate),
            "sla": dict(record.limits),
            "prompts": list(record.prompts),
        },
    }


def _summary(arm: ArmSamples) -> dict[str, float | None]:
    def mean(field: str) -> float | None:
        values, _ = arm.values(field)
        return sum(values) / len(values) if values else None

    return {
        "ttft_ms_mean": mean("ttft_ms"),
        "tpot_ms_mean": mean("tpot_ms"),
        "e2el_ms_mean": mean("e2el_ms"),
        "acceptance_rate": arm.acceptance_rate,
    }


def _sample_dict(sample: Sample) -> dict[str, Any]:
    return {
        "key": sample.key,
        "prompt_id": sample.prompt_id,
        "repetition": sample.repetition,
        "ttft_ms": round(sample.ttft_ms, 3),
        "tpot_ms": None if sample.tpot_ms is None else round(sample.tpot_ms, 4),
        "e2el_ms": round(sample.e2el_ms, 3),
        "wall_ms": round(sample.wall_ms, 3),
        "output_tokens": sample.output_tokens,
        "drafted": sample.drafted,
        "accepted": sample.accepted,
        "output_ids": list(sample.output_ids),
    }


def dumps_readable(document: Mapping[str, Any]) -> str:
    """JSON with one sample per line: small, stable diffs in merge requests."""
    arms = document.get("arms", {})
    placeholders = {arm: f"__samples_of_{arm}__" for arm in arms}
    skeleton = dict(document)
    skeleton["arms"] = {arm: {**data, "samples": placeholders[arm]} for arm, data in arms.items()}
    text = json.dumps(skeleton, indent=2, sort_keys=True)
    for arm, data in arms.items():
        rows = ",\n".join("        " + json.dumps(sample, sort_keys=True) for sample in data["samples"])
        text = text.replace(json.dumps(placeholders[arm]), "[\n" + rows + "\n      ]" if rows else "[]", 1)
    return text + "\n"


def write_baseline(path: Path, record: RunRecord) -> None:
    """Replace the baseline atomically: readers see the old or the new file, never a partial one."""
    write_atomic(path, dumps_readable(baseline_document(record)))


def load_baseline(path: Path, expect: tuple[str, str, str] | None = None) -> Baseline:
    """Read and validate a baseline; every problem is a `BaselineError` naming the file. `expect` is the
    (hardware, pair, workload) the file must be for."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BaselineError(
            f"{path}: corrupt baseline (not valid JSON: {exc}). Restore it from git "
            "(git checkout -- FILE) or re-record it on the reference build with --update-baselines."
        ) from exc
    if not isinstance(raw, dict) or any(key not in raw for key in REQUIRED):
        missing = [k for k in REQUIRED if not isinstance(raw, dict) or k not in raw]
        raise BaselineError(f"{path}: not a specgate baseline (missing {', '.join(missing)})")
    if raw["schema_version"] != SCHEMA_VERSION:
        raise BaselineError(
            f"{path}: baseline schema_version {raw['schema_version']!r}, this specgate reads {SCHEMA_VERSION}. "
            "Re-record it with --update-baselines on the reference build."
        )
    try:
        record = _record(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BaselineError(f"{path}: malformed samples ({type(exc).__name__}: {exc})") from exc
    found = (record.hardware, record.pair, record.workload)
    if expect is not None and found != expect:
        raise BaselineError(
            f"{path}: holds the baseline of {'/'.join(found)}, not {'/'.join(expect)}; a file was copied or "
            "renamed by hand: restore it from git or re-record it with --update-baselines"
        )
    return Baseline(path, record)


def _record(raw: Mapping[str, Any]) -> RunRecord:
    provenance = raw["provenance"]
    arms = {str(name): _arm(data) for name, data in raw["arms"].items()}
    models = provenance.get("models") or {}
    if models and all(isinstance(v, str) for v in models.values()):  # recorded per pair, before arms were data
        models = {arm: dict(models) if arm != "ar" else {"target": models.get("target", "")} for arm in arms}
    return RunRecord(
        hardware=str(raw["hardware"]),
        pair=str(raw["pair"]),
        workload=str(raw["workload"]),
        arms=arms,
        accuracy={arm: TaskAccuracy(**score) for arm, score in (raw.get("accuracy") or {}).items()},
        models={str(arm): {str(k): str(v) for k, v in m.items()} for arm, m in models.items()},
        engine=str(provenance.get("engine", "")),
        versions={str(k): str(v) for k, v in (provenance.get("versions") or {}).items()},
        recorded_at=str(provenance.get("date", "")),
        git_commit=provenance.get("git_commit"),
        specgate=str(provenance.get("specgate", "")),
        gate=dict(provenance.get("gate") or {}),
        limits={str(k): float(v) for k, v in (provenance.get("sla") or {}).items()},
        prompts=tuple(str(p) for p in provenance.get("prompts") or ()),
    )


def _arm(data: Mapping[str, Any]) -> ArmSamples:
    samples = tuple(
        Sample(
            str(s["key"]),
            str(s["prompt_id"]),
            int(s["repetition"]),
            float(s["ttft_ms"]),
            None if s["tpot_ms"] is None else float(s["tpot_ms"]),
            float(s["e2el_ms"]),
            float(s.get("wall_ms", s["e2el_ms"])),
            int(s["output_tokens"]),
            int(s["drafted"]),
            int(s["accepted"]),
            tuple(int(i) for i in s["output_ids"]),
        )
        for s in data["samples"]
    )
    return ArmSamples(samples, tuple(float(w) for w in data["run_walls_s"]), tuple(str(k) for k in data["run_keys"]))


def list_baselines(root: Path) -> Sequence[Path]:
    return sorted(root.glob("*/*/*.json"))
