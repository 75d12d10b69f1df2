"""Stored baselines: `baselines/<hardware>/<pair>/<workload>.json`.

A baseline holds the raw per-request samples of every arm (so statistics can be recomputed), the outputs (token
ids, for drift), summaries for people, and provenance. It is written atomically (temp file in the same folder,
fsync, rename) and only when the run asks for it (`--update-baselines`). Each sample sits on one line, so a diff of
two baselines in a merge request reads metric by metric.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate import __version__
from specgate.accuracy import TaskAccuracy
from specgate.errors import BaselineError
from specgate.evaluation import Evaluation
from specgate.metrics import request_metrics

SCHEMA_VERSION = 1
REQUIRED = ("schema_version", "hardware", "pair", "workload", "arms", "provenance")


@dataclass(frozen=True, slots=True)
class Sample:
    """One request of one arm, as stored."""

    key: str
    prompt_id: str
    repetition: int
    ttft_ms: float
    tpot_ms: float | None
    e2el_ms: float
    output_tokens: int
    drafted: int
    accepted: int
    output_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ArmSamples:
    """The stored samples of one arm and the wall time of each of its runs (units of the speedup)."""

    samples: tuple[Sample, ...]
    run_walls_s: tuple[float, ...]
    run_keys: tuple[str, ...]

    def values(self, metric: str) -> tuple[list[float], list[str]]:
        """Per-request values of a metric with their pairing keys (requests without the metric left out)."""
        pairs = [(getattr(s, metric), s.key) for s in self.samples if getattr(s, metric) is not None]
        return [float(v) for v, _ in pairs], [k for _, k in pairs]

    @property
    def acceptance_rate(self) -> float | None:
        drafted = sum(s.drafted for s in self.samples)
        return sum(s.accepted for s in self.samples) / drafted if drafted else None


@dataclass(frozen=True, slots=True)
class Baseline:
    """A stored baseline, validated."""

    path: Path
    hardware: str
    pair: str
    workload: str
    arms: Mapping[str, ArmSamples]
    provenance: Mapping[str, Any]
    accuracy: Mapping[str, TaskAccuracy]


def baseline_path(root: Path, hardware: str, pair: str, workload: str) -> Path:
    return root / hardware / pair / f"{workload}.json"


def unit_keys(evaluation: Evaluation, arm: str) -> tuple[str, ...]:
    """Keys of an arm's runs: prompt#repetition for one-request runs, the repetition for whole-arm runs."""
    keys = []
    for run in evaluation.measurement.runs[arm]:
        first = run.traces[0] if run.traces else None
        if len(run.traces) == 1 and first is not None:
            keys.append(f"{first.prompt_id}#{first.repetition}")
        else:
            keys.append(f"rep{first.repetition if first else len(keys)}")
    return tuple(keys)


def arm_samples(evaluation: Evaluation, arm: str) -> ArmSamples:
    """The samples of one arm of a finished evaluation, in the stored form."""
    samples = []
    for run in evaluation.measurement.runs[arm]:
        for trace in run.traces:
            metrics = request_metrics(trace)
            if metrics is None:
                continue
            samples.append(
                Sample(
                    key=f"{trace.prompt_id}#{trace.repetition}",
                    prompt_id=trace.prompt_id,
                    repetition=trace.repetition,
                    ttft_ms=metrics.ttft_ms,
                    tpot_ms=metrics.tpot_ms,
                    e2el_ms=metrics.e2el_ms,
                    output_tokens=metrics.output_tokens,
                    drafted=sum(trace.drafted),
                    accepted=sum(trace.accepted),
                    output_ids=trace.output_ids,
                )
            )
    walls = tuple(run.wall_s for run in evaluation.measurement.runs[arm])
    return ArmSamples(tuple(samples), walls, unit_keys(evaluation, arm))


def _git_commit(cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def baseline_document(
    evaluation: Evaluation,
    hardware: str,
    gate_config: Mapping[str, Any],
    project_dir: Path,
) -> dict[str, Any]:
    """The JSON document of a baseline for one evaluation."""
    m = evaluation.measurement
    arms = {}
    for arm in m.arms:
        stored = arm_samples(evaluation, arm)
        summary = evaluation.summaries[arm]
        arms[arm] = {
            "summary": {
                "ttft_ms_p99": summary.ttft_ms and summary.ttft_ms.p99,
                "ttft_ms_mean": summary.ttft_ms and summary.ttft_ms.mean,
                "tpot_ms_mean": summary.tpot_ms and summary.tpot_ms.mean,
                "decode_tokens_per_s_mean": summary.decode_tokens_per_s and summary.decode_tokens_per_s.mean,
                "acceptance_rate": summary.acceptance and summary.acceptance.rate,
            },
            "run_walls_s": list(stored.run_walls_s),
            "run_keys": list(stored.run_keys),
            "samples": [_sample_dict(s) for s in stored.samples],
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "hardware": hardware,
        "pair": m.pair,
        "workload": m.workload,
        "speedup": evaluation.speedup and evaluation.speedup.value,
        "accuracy": {arm: dataclasses.asdict(score) for arm, score in evaluation.accuracy.items()},
        "arms": arms,
        "provenance": {
            "specgate": __version__,
            "engine": m.engine,
            "versions": dict(m.versions),
            "models": dict(m.models),
            "git_commit": _git_commit(project_dir),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "gate": dict(gate_config),
            "prompts": [p.id for p in m.prompts],
        },
    }


def _sample_dict(sample: Sample) -> dict[str, Any]:
    return {
        "key": sample.key,
        "prompt_id": sample.prompt_id,
        "repetition": sample.repetition,
        "ttft_ms": round(sample.ttft_ms, 3),
        "tpot_ms": None if sample.tpot_ms is None else round(sample.tpot_ms, 4),
        "e2el_ms": round(sample.e2el_ms, 3),
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


def write_baseline(path: Path, document: Mapping[str, Any]) -> None:
    """Replace the baseline atomically: readers see the old or the new file, never a partial one."""
    from specgate.reports.verdict import write_atomic

    write_atomic(path, dumps_readable(document))


def load_baseline(path: Path) -> Baseline:
    """Read and validate a baseline; every problem is a `BaselineError` naming the file."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{path}: corrupt baseline (not valid JSON: {exc.msg} at line {exc.lineno}). Restore it from git "
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
        arms = {name: _arm(data) for name, data in raw["arms"].items()}
        accuracy = {arm: TaskAccuracy(**score) for arm, score in (raw.get("accuracy") or {}).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise BaselineError(f"{path}: malformed samples ({type(exc).__name__}: {exc})") from exc
    return Baseline(path, raw["hardware"], raw["pair"], raw["workload"], arms, raw["provenance"], accuracy)


def _arm(data: Mapping[str, Any]) -> ArmSamples:
    samples = tuple(
        Sample(
            str(s["key"]),
            str(s["prompt_id"]),
            int(s["repetition"]),
            float(s["ttft_ms"]),
            None if s["tpot_ms"] is None else float(s["tpot_ms"]),
            float(s["e2el_ms"]),
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
