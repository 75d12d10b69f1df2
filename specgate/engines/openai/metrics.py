"""What a served endpoint tells about itself, and goodput: Prometheus `/metrics` readings and their differences.

A server's `/metrics` counters are cumulative since it started, so the openai engine reads them before and after
each arm run and keeps the difference (`server_delta`). Read with prometheus_client's text parser; label sets
(per engine, per model) are summed. Speculation counters are vLLM's (`vllm:spec_decode_num_drafts_total`,
`…num_draft_tokens_total`, `…num_accepted_tokens_total`, `…num_accepted_tokens_per_pos_total{position=…}`); the
latency histograms (`vllm:time_to_first_token_seconds`, `vllm:request_time_per_output_token_seconds`,
`vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`) give the server's own means (sum / count),
to set next to what the client measured. A server that exposes none of them gives `None`, never zeros.

Goodput (as `vllm bench serve` defines it): completed requests that meet every SLO, per second of the run's wall
time. A failed request never meets an SLO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specgate.engines.base import ArmRun, SpecCounters, request_metrics
from specgate.engines.counters import counters_delta

SPEC_PREFIX = "vllm:spec_decode_"
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2el": "vllm:e2e_request_latency_seconds",
}
NOT_EXPOSED = "speculative-decoding counters not exposed by this server"

Samples = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]


@dataclass(frozen=True, slots=True)
class MetricsReading:
    """One reading of a server's `/metrics`: the speculation counters and (sum, count) of each latency histogram."""

    counters: SpecCounters | None
    histograms: Mapping[str, tuple[float, float]]


@dataclass(frozen=True, slots=True)
class ServerView:
    """What the server counted during one arm run (differences of two readings); means in milliseconds."""

    counters: SpecCounters | None
    ttft_mean_ms: float | None
    tpot_mean_ms: float | None
    itl_mean_ms: float | None
    e2el_mean_ms: float | None
    requests: int | None


@dataclass(frozen=True, slots=True)
class GoodputSlo:
    """Per-request SLOs a request must all meet to count as good; `None` leaves a metric unconstrained."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Goodput:
    """Requests meeting every SLO per second of wall time, next to the plain request throughput."""

    slo: GoodputSlo
    n_requests: int
    n_good: int
    wall_s: float

    @property
    def requests_per_s(self) -> float:
        """All requests sent (failed ones included) per second of wall time."""
        return self.n_requests / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def goodput_per_s(self) -> float:
        """Requests that completed within every SLO per second of wall time."""
        return self.n_good / self.wall_s if self.wall_s > 0 else 0.0


def parse_samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, by sample name (e.g. `…_total`, `…_sum`). Raises ValueError."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, float(sample.value)))
    return samples


def _total(samples: Samples, name: str) -> float | None:
    found = samples.get(f"{name}_total", samples.get(name))
    return None if found is None else sum(value for _, value in found)


def read_counters(samples: Samples) -> SpecCounters | None:
    """vLLM's speculation counters summed over label sets, or None when the server does not expose them."""
    drafts, drafted, accepted = (_total(samples, name) for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED_TOKENS))
    if drafts is None or drafted is None or accepted is None:
        return None
    by_position: dict[int, float] = {}
    for labels, value in samples.get(f"{ACCEPTED_PER_POS}_total", samples.get(ACCEPTED_PER_POS, ())):
        position = labels.get("position", "")
        if position.isdigit():
            by_position[int(position)] = by_position.get(int(position), 0.0) + value
    width = max(by_position, default=-1) + 1
    per_position = tuple(round(by_position.get(i, 0.0)) for i in range(width))
    return SpecCounters(round(drafts), round(drafted), round(accepted), per_position)


def read_histograms(samples: Samples) -> dict[str, tuple[float, float]]:
    """(sum, count) of each known latency histogram present, summed over label sets."""
    found = {}
    for key, name in HISTOGRAMS.items():
        total, count = _total(samples, f"{name}_sum"), _total(samples, f"{name}_count")
        if total is not None and count is not None:
            found[key] = (total, count)
    return found


def read_metrics(text: str) -> MetricsReading:
    """One reading of `/metrics` text. Raises ValueError when the text is not the Prometheus format."""
    samples = parse_samples(text)
    return MetricsReading(read_counters(samples), read_histograms(samples))


def _mean_ms(before: MetricsReading, after: MetricsReading, key: str) -> float | None:
    if key not in before.histograms or key not in after.histograms:
        return None
    total = after.histograms[key][0] - before.histograms[key][0]
    count = after.histograms[key][1] - before.histograms[key][1]
    return 1000.0 * total / count if count > 0 else None


def server_delta(before: MetricsReading, after: MetricsReading) -> ServerView:
    """What happened between two readings. Counters that went backwards (a restart) raise MeasurementError."""
    counters = counters_delta(before.counters, after.counters)  # a label set first seen after `before` was 0
    requests = None
    if "ttft" in before.histograms and "ttft" in after.histograms:
        requests = round(after.histograms["ttft"][1] - before.histograms["ttft"][1])
    return ServerView(
        counters=counters,
        ttft_mean_ms=_mean_ms(before, after, "ttft"),
        tpot_mean_ms=_mean_ms(before, after, "tpot"),
        itl_mean_ms=_mean_ms(before, after, "itl"),
        e2el_mean_ms=_mean_ms(before, after, "e2el"),
        requests=requests,
    )


def measure_goodput(run: ArmRun, slo: GoodputSlo) -> Goodput:
    """Goodput of one arm run: completed requests within every SLO, per second of `run.wall_s`."""
    good = 0
    for trace in run.traces:
        metrics = request_metrics(trace)
        if metrics is None:
            continue
        checks = (
            (slo.ttft_ms, metrics.ttft_ms),
            (slo.tpot_ms, metrics.tpot_ms or 0.0),  # one-token requests have no TPOT: nothing to miss
            (slo.e2el_ms, metrics.e2el_ms),
        )
        if all(limit is None or value <= limit for limit, value in checks):
            good += 1
    return Goodput(slo, len(run.traces), good, run.wall_s)
