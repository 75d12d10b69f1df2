"""`benchmark.json`: the run as pytest-benchmark records, so teams that use its tooling can compare gate runs.

The file follows pytest-benchmark's `--benchmark-json` layout (`machine_info`, `commit_info`, `benchmarks`,
`datetime`, `version`): one benchmark per pair × workload × arm, whose statistics are computed from the per-request
end-to-end latencies (E2EL, seconds; one request = one round of one iteration) with pytest-benchmark's own
definitions (quartiles by Tukey's hinges, 1.5 IQR fences, ops = rounds / total). The LLM metrics sit in
`extra_info`. Compare two gate runs with pytest-benchmark's command line:

    pytest-benchmark compare reports/benchmark.json other-run/benchmark.json --group-by=group
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from specgate.reports.document import ArmRecord, EvaluationRecord, VerdictDocument
from specgate.store.atomic import write_atomic
from specgate.store.codec import dumps

# The pytest-benchmark release whose format this file follows when pytest-benchmark is not installed.
FORMAT_VERSION = "5.1.0"


def _quartiles(data: Sequence[float]) -> tuple[float, float]:
    """Q1 and Q3 as pytest-benchmark computes them (Wikipedia's methods 2 and 3; `data` sorted)."""
    rounds = len(data)
    if rounds == 1:
        return data[0], data[0]
    if rounds % 2 == 0:
        return statistics.median(data[: rounds // 2]), statistics.median(data[rounds // 2 :])
    n, remainder = divmod(rounds, 4)
    if remainder == 1:
        return 0.25 * data[n - 1] + 0.75 * data[n], 0.75 * data[3 * n] + 0.25 * data[3 * n + 1]
    return 0.75 * data[n] + 0.25 * data[n + 1], 0.25 * data[3 * n + 1] + 0.75 * data[3 * n + 2]


def benchmark_stats(samples: Sequence[float]) -> dict[str, Any]:
    """pytest-benchmark's `stats` block for one series of timings in seconds (at least one)."""
    data = sorted(samples)
    mean = statistics.mean(data)
    stddev = statistics.stdev(data) if len(data) > 1 else 0.0
    q1, q3 = _quartiles(data)
    iqr = q3 - q1
    low_fence, high_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    stddev_outliers = sum(1 for v in data if v < mean - stddev or v > mean + stddev)
    iqr_outliers = sum(1 for v in data if v < low_fence or v > high_fence)
    total = sum(data)
    single = len(data) == 1
    return {
        "min": data[0],
        "max": data[-1],
        "mean": mean,
        "stddev": stddev,
        "rounds": len(data),
        "median": statistics.median(data),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_outliers,
        "stddev_outliers": stddev_outliers,
        "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": data[0] if single else data[bisect.bisect_left(data, low_fence)],
        "hd15iqr": data[0] if single else data[bisect.bisect_right(data, high_fence) - 1],
        "ops": len(data) / total if total else 0.0,
        "total": total,
        "data": list(samples),
        "iterations": 1,
    }


def _extra_info(record: EvaluationRecord, arm: ArmRecord, hardware: str) -> dict[str, Any]:
    summary = arm.summary
    info: dict[str, Any] = {
        "hardware": hardware,
        "speculative": "on" if arm.speculative else "off",
        "reference_arm": record.plain,
        "engine": record.engine,
        "output_tokens": summary.output_tokens,
        "n_failed": summary.n_failed,
        "system_tokens_per_s": summary.system_tokens_per_s,
    }
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "decode_tokens_per_s", "effective_tokens_per_s"):
        dist = getattr(summary, name)
        if dist is not None:
            info.update({f"{name}_mean": dist.mean, f"{name}_p50": dist.p50, f"{name}_p99": dist.p99})
    if summary.acceptance is not None:
        info["acceptance"] = dataclasses.asdict(summary.acceptance)
    if arm.speculative:
        info["speedup"] = None if arm.speedup is None else dataclasses.asdict(arm.speedup)
        info["drift"] = None if arm.drift is None else arm.drift.share
    return info


def _benchmark(record: EvaluationRecord, arm: ArmRecord, hardware: str) -> dict[str, Any] | None:
    samples = [ms / 1000.0 for ms in arm.e2el_ms]
    if not samples:
        return None
    param = f"{record.pair}-{record.workload}-{arm.name}"
    return {
        "group": f"{hardware} {record.pair} {record.workload}",
        "name": f"e2el[{param}]",
        "fullname": f"specgate/{hardware}::e2el[{param}]",
        "params": {"pair": record.pair, "workload": record.workload, "arm": arm.name},
        "param": param,
        "extra_info": _extra_info(record, arm, hardware),
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": len(samples),
            "max_time": None,
            "min_time": None,
            "warmup": False,
        },
        "stats": benchmark_stats(samples),
    }


def _format_version() -> str:
    try:
        return version("pytest-benchmark")
    except PackageNotFoundError:
        return FORMAT_VERSION


def benchmark_document(document: VerdictDocument) -> dict[str, Any]:
    """The whole `--benchmark-json` document of the run."""
    runs = [p.document for p in document.parts if p.document is not None] or [document]  # merged: its parts
    benchmarks = [
        bench
        for run in runs
        for record in run.evaluations
        for arm in record.arms
        if (bench := _benchmark(record, arm, run.hardware)) is not None
    ]
    return {
        "machine_info": {**document.machine, "specgate_hardware": document.hardware},
        "commit_info": dataclasses.asdict(document.commit),
        "benchmarks": benchmarks,
        "datetime": document.generated_at,
        "version": _format_version(),
    }


def write_benchmark(document: VerdictDocument, out_dir: Path) -> None:
    """Write `benchmark.json` into the output folder."""
    write_atomic(out_dir / "benchmark.json", dumps(benchmark_document(document), indent=2) + "\n")
