"""`metrics.prom`: the run in Prometheus text format (prometheus-client), for node_exporter's textfile collector.

Series carry the labels `hardware`, `pair`, `workload`, `arm` and `speculative` ("off" for plain-decoding arms,
"on" for speculative ones). Latencies are in seconds, as Prometheus names them; a `stat` label says which summary
statistic (mean, p50, p90, p99). Checks and the verdict are 1 (passed) or 0 (failed).

Push: when the environment variable `SPECGATE_PUSHGATEWAY` holds a Pushgateway address (`host:port` or a URL),
the same registry is also pushed there, job `SPECGATE_PUSHGATEWAY_JOB` (default "specgate"), grouped by hardware.
A failed push is reported like any failed report; it never changes the verdict.
"""

from __future__ import annotations

import calendar
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from specgate.measure.metrics import ArmSummary, Distribution
from specgate.reports.document import EvaluationRecord, VerdictDocument

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Gauge

PUSHGATEWAY_VARIABLE = "SPECGATE_PUSHGATEWAY"
JOB_VARIABLE = "SPECGATE_PUSHGATEWAY_JOB"
ARM_LABELS = ("hardware", "pair", "workload", "arm", "speculative")
STATS = ("mean", "p50", "p90", "p99")
# metric name, help, attribute of ArmSummary, factor from the stored unit to the exported one
DISTRIBUTIONS = (
    ("specgate_ttft_seconds", "Time to first token per request", "ttft_ms", 1e-3),
    ("specgate_tpot_seconds", "Time per output token after the first, per request", "tpot_ms", 1e-3),
    ("specgate_itl_seconds", "Gap between streamed chunks", "itl_ms", 1e-3),
    ("specgate_e2el_seconds", "End-to-end latency per request", "e2el_ms", 1e-3),
    ("specgate_decode_rate_tokens_per_second", "Decode rate 1/TPOT per request", "decode_tokens_per_s", 1.0),
)


class _Gauges:
    """The gauges of one export, registered on their own registry (never the global one)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Gauge

        def gauge(name: str, doc: str, *extra: str, base: tuple[str, ...] = ARM_LABELS) -> Gauge:
            return Gauge(name, doc, [*base, *extra], registry=registry)

        self.distributions = {attr: (gauge(name, doc, "stat"), factor) for name, doc, attr, factor in DISTRIBUTIONS}
        self.system = gauge("specgate_system_throughput_tokens_per_second", "All output tokens / wall time")
        self.wall = gauge("specgate_wall_seconds", "Wall time of the measured runs of the arm")
        self.requests = gauge("specgate_requests", "Measured requests by outcome", "outcome")
        self.acceptance = gauge("specgate_acceptance_rate", "Accepted / drafted tokens (0-1)")
        self.length = gauge("specgate_acceptance_length_mean", "Mean acceptance length tau (tokens per step)")
        self.position = gauge("specgate_acceptance_per_position", "Share of drafts accepted past position", "position")
        self.speedup = gauge("specgate_speedup_ratio", "Wall time of the reference arm / this arm", "estimate")
        self.drift = gauge("specgate_drift_ratio", "Share of requests whose output differs from the reference")
        check_labels = ("hardware", "pair", "workload", "check", "category")
        self.check = gauge("specgate_check_passed", "1 when the gate check passed", base=check_labels)
        self.verdict = gauge("specgate_verdict_passed", "1 when the gate verdict is PASS", base=("hardware",))
        self.timestamp = gauge("specgate_last_run_timestamp_seconds", "When the report was written", base=("hardware",))


def _export_distribution(gauges: _Gauges, labels: dict[str, str], summary: ArmSummary) -> None:
    for attr, (gauge, factor) in gauges.distributions.items():
        dist: Distribution | None = getattr(summary, attr)
        if dist is not None:
            for stat in STATS:
                gauge.labels(**labels, stat=stat).set(float(getattr(dist, stat)) * factor)


def _export_arm(gauges: _Gauges, labels: dict[str, str], summary: ArmSummary) -> None:
    _export_distribution(gauges, labels, summary)
    gauges.system.labels(**labels).set(summary.system_tokens_per_s)
    gauges.wall.labels(**labels).set(summary.wall_s)
    gauges.requests.labels(**labels, outcome="completed").set(summary.n_requests - summary.n_failed)
    gauges.requests.labels(**labels, outcome="failed").set(summary.n_failed)
    acceptance = summary.acceptance
    if acceptance is not None and acceptance.rate is not None:
        gauges.acceptance.labels(**labels).set(acceptance.rate)
        gauges.length.labels(**labels).set(acceptance.mean_length or 0.0)
        for index, share in enumerate(acceptance.per_position, start=1):
            gauges.position.labels(**labels, position=str(index)).set(share)


def _export_evaluation(gauges: _Gauges, hardware: str, record: EvaluationRecord) -> None:
    for arm in record.arms:
        labels = {
            "hardware": hardware,
            "pair": record.pair,
            "workload": record.workload,
            "arm": arm.name,
            "speculative": "on" if arm.speculative else "off",
        }
        _export_arm(gauges, labels, arm.summary)
        if arm.drift is not None:
            gauges.drift.labels(**labels).set(arm.drift.share)
        speedup = arm.speedup
        if speedup is not None:
            estimates = {
                "measured": speedup.value,
                "ci_low": speedup.ci[0],
                "ci_high": speedup.ci[1],
                "predicted": speedup.predicted,
            }
            for name, value in estimates.items():
                if value is not None:
                    gauges.speedup.labels(**labels, estimate=name).set(value)


def build_registry(document: VerdictDocument) -> CollectorRegistry:
    """A registry holding every series of the run."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    gauges = _Gauges(registry)
    hardware = document.hardware
    for run in [p.document for p in document.parts if p.document is not None] or [document]:  # merged: its parts
        for record in run.evaluations:
            _export_evaluation(gauges, run.hardware, record)
        for check in run.checks:
            gauges.check.labels(
                hardware=run.hardware,
                pair=check.pair,
                workload=check.workload,
                check=check.name,
                category=check.category,
            ).set(1.0 if check.passed else 0.0)
    gauges.verdict.labels(hardware=hardware).set(1.0 if document.passed else 0.0)
    written = calendar.timegm(time.strptime(document.generated_at, "%Y-%m-%dT%H:%M:%SZ"))
    gauges.timestamp.labels(hardware=hardware).set(float(written))
    return registry


def write_prometheus(document: VerdictDocument, out_dir: Path) -> None:
    """Write `metrics.prom`, and push to the Pushgateway named by `SPECGATE_PUSHGATEWAY` if it is set."""
    from prometheus_client import push_to_gateway, write_to_textfile

    registry = build_registry(document)
    write_to_textfile(str(out_dir / "metrics.prom"), registry)
    gateway = os.environ.get(PUSHGATEWAY_VARIABLE, "").strip()
    if gateway:
        job = os.environ.get(JOB_VARIABLE, "specgate")
        push_to_gateway(gateway, job=job, registry=registry, grouping_key={"hardware": document.hardware}, timeout=10)
