"""`verdict.json`: the machine-readable verdict for CI (schema_version 1)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from specgate import __version__
from specgate.evaluation import Evaluation
from specgate.run import GateRun

SCHEMA_VERSION = 1


def write_atomic(path: Path, text: str) -> None:
    """Write a file so readers see the old or the new content, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def evaluation_metrics(evaluation: Evaluation) -> dict[str, Any]:
    """Per-arm summaries, speedup and losslessness of one pair × workload, as plain JSON data."""
    arms = {arm: dataclasses.asdict(summary) for arm, summary in evaluation.summaries.items()}
    speedup = None if evaluation.speedup is None else dataclasses.asdict(evaluation.speedup)
    lossless = evaluation.losslessness
    return {
        "arms": arms,
        "speedup": speedup,
        "drift": {
            "n": lossless.n,
            "differing": lossless.differing,
            "share": lossless.drift,
            "first_divergences": [dataclasses.asdict(d) for d in lossless.divergences[:10]],
        },
        "engine": evaluation.measurement.engine,
        "versions": dict(evaluation.measurement.versions),
        "models": dict(evaluation.measurement.models),
        **resource_metrics(evaluation),
    }


def resource_metrics(evaluation: Evaluation) -> dict[str, Any]:
    """Cost, energy and peak memory per arm ("energy") and the decode roofline ("roofline"); None when not measured."""
    energy, roofline = evaluation.energy, evaluation.roofline
    return {
        "energy": None
        if energy is None
        else {**dataclasses.asdict(energy), "estimated": energy.estimated, "saving": energy.saving_text()},
        "roofline": None if roofline is None else {**dataclasses.asdict(roofline), "fraction": roofline.fraction},
    }


def verdict_document(run: GateRun) -> dict[str, Any]:
    verdict = run.verdict()
    metrics: dict[str, dict[str, Any]] = {}
    for evaluation in run.evaluations():
        pair, workload = evaluation.where
        metrics.setdefault(pair, {})[workload] = evaluation_metrics(evaluation)
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict.verdict,
        "hardware": run.hardware.name,
        "specgate_version": __version__,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pairs": run.pairs,
        "workloads": run.workloads,
        "checks": [dataclasses.asdict(c) for c in verdict.checks],
        "failed_checks": [c.key for c in verdict.failed],
        "errors": list(verdict.errors),
        "recommendations": list(verdict.recommendations),
        "metrics": metrics,
    }


def write_verdict(run: GateRun) -> None:
    write_atomic(run.out_dir / "verdict.json", json.dumps(verdict_document(run), indent=2, default=str) + "\n")
