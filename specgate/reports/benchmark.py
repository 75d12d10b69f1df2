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
import json
import statistics
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from specgate.evaluation import Evaluation
from specgate.reports.plots import per_request
from specgate.reports.provenance import commit_info, machine_info
from specgate.reports.verdict import write_atomic
from specgate.run import GateRun

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


def _extra_info(evaluation: Evaluation, arm: str, hardware: str) -> dict[str, Any]:
    summary = evaluation.summaries[arm]
    reference = evaluation.measurement.reference
    info: dict[str, Any] = {
        "hardware": hardware,
        "speculative": "off" if arm == reference else "on",
        "reference_arm": reference,
        "engine": evaluation.measurement.engine,
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
    if arm == evaluation.candidate and arm != reference:
        info["speedup"] = None if evaluation.speedup is None else dataclasses.asdict(evaluation.speedup)
        info["drift"] = evaluation.losslessness.drift
    return info


def _benchmark(evaluation: Evaluation, arm: str, hardware: str) -> dict[str, Any] | None:
    samples = [m.e2el_ms / 1000.0 for m in per_request(evaluation, arm)]
    if not samples:
        return None
    pair, workload = evaluation.where
    param = f"{pair}-{workload}-{arm}"
    return {
        "group": f"{hardware} {pair} {workload}",
        "name": f"e2el[{param}]",
        "fullname": f"specgate/{hardware}::e2el[{param}]",
        "params": {"pair": pair, "workload": workload, "arm": arm},
        "param": param,
        "extra_info": _extra_info(evaluation, arm, hardware),
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


def benchmark_document(run: GateRun) -> dict[str, Any]:
    """The whole `--benchmark-json` document of the run."""
    benchmarks = [
        bench
        for evaluation in run.evaluations()
        for arm in evaluation.measurement.arms
        if (bench := _benchmark(evaluation, arm, run.hardware.name)) is not None
    ]
    return {
        "machine_info": {**machine_info(), "specgate_hardware": run.hardware.name},
        "commit_info": dataclasses.asdict(commit_info(run.project.source.parent)),
        "benchmarks": benchmarks,
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": _format_version(),
    }


def write_benchmark(run: GateRun) -> None:
    """Write `benchmark.json` into the run's output folder."""
    write_atomic(run.out_dir / "benchmark.json", json.dumps(benchmark_document(run), indent=2) + "\n")
