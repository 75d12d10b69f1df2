"""Acceptance of a served deployment behind a router: every replica's `/metrics`, read apart and summed.

A router or load balancer (vLLM's production stack, llm-d, a KServe InferenceService) answers the requests, but each
replica behind it counts its own speculation: the router's own `/metrics`, where it has one, holds no spec-decode
counters. `speculation.options.metrics_urls` lists, per arm, the `/metrics` URL of each replica (pod, port-forward,
or headless-service address):

    endpoints:    {ar: "http://router-ar:8000", spec: "http://router-spec:8000"}
    metrics_urls: {spec: ["http://10.0.0.11:8000/metrics", "http://10.0.0.12:8000/metrics"]}
    allowed_hosts: [router-ar, router-spec, 10.0.0.11, 10.0.0.12]

Each URL is read before and after every run of the arm; the run's counters are the sum of the replicas'
differences, and `ServedRun.replicas` lists each replica's own (the requests it served, its acceptance), so an
uneven spread or a replica that speculates worse shows. When one replica cannot be read, the run has no counters
(a partial sum would understate the drafts), with a note naming the replica; a replica whose counters went backwards
(restarted mid-run) fails the measurement. An arm without `metrics_urls` reads `<endpoint><metrics_path>`, as before.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specgate.engines.base import SpecCounters
from specgate.engines.openai.load import ServedSettings
from specgate.engines.openai.metrics import NOT_EXPOSED, MetricsReading, ServerView, read_metrics, server_delta

Readings = dict[str, MetricsReading]


def metrics_urls(settings: ServedSettings, variant: str, root: str) -> tuple[str, ...]:
    """The `/metrics` URLs of an arm: its replicas' (`metrics_urls`), else its endpoint's, else none."""
    listed = settings.metrics_urls.get(variant)
    if listed:
        return tuple(listed)
    return () if settings.metrics_path is None else (f"{root}{settings.metrics_path}",)


async def scrape(client: Any, url: str, redact: Callable[[str], str]) -> tuple[MetricsReading | None, str | None]:
    """One reading of one `/metrics`, or None with the reason."""
    import httpx

    try:
        response = await client.get(url)
    except httpx.HTTPError as exc:
        return None, redact(f"{url}: {NOT_EXPOSED} ({type(exc).__name__}: {exc})")
    if response.status_code != 200:
        return None, f"{url}: {NOT_EXPOSED} (HTTP {response.status_code})"
    try:
        return read_metrics(response.text), None
    except (ValueError, ImportError) as exc:
        return None, f"{url}: {NOT_EXPOSED} (unreadable: {type(exc).__name__}: {exc})"


async def scrape_all(
    client: Any, urls: Sequence[str], redact: Callable[[str], str]
) -> tuple[Readings | None, str | None]:
    """A reading of every URL, or None with the first reason when any of them cannot be read."""
    if not urls:
        return None, "metrics_path is null: acceptance counters not read"
    readings: Readings = {}
    for url in urls:
        reading, note = await scrape(client, url, redact)
        if reading is None:
            return None, note if len(urls) == 1 else f"one of {len(urls)} replicas unread, so no sum: {note}"
        readings[url] = reading
    return readings, None


def _add(a: SpecCounters | None, b: SpecCounters | None) -> SpecCounters | None:
    if a is None or b is None:
        return a or b
    positions = itertools.zip_longest(a.accepted_per_position, b.accepted_per_position, fillvalue=0)
    return SpecCounters(
        a.num_drafts + b.num_drafts,
        a.num_draft_tokens + b.num_draft_tokens,
        a.num_accepted_tokens + b.num_accepted_tokens,
        tuple(x + y for x, y in positions),
    )


def sum_readings(readings: Sequence[MetricsReading]) -> MetricsReading:
    """The readings of several replicas as one server's: counters and histogram sums and counts added."""
    counters: SpecCounters | None = None
    histograms: dict[str, tuple[float, float]] = {}
    for reading in readings:
        counters = _add(counters, reading.counters)
        for key, (total, count) in reading.histograms.items():
            previous = histograms.get(key, (0.0, 0.0))
            histograms[key] = (previous[0] + total, previous[1] + count)
    return MetricsReading(counters, histograms)


def replica_deltas(before: Readings, after: Readings) -> tuple[ServerView, Mapping[str, ServerView]]:
    """The sum of what the replicas counted during a run, and each replica's own; a replica that restarted raises
    `MeasurementError` (from `server_delta`)."""
    views = {url: server_delta(before[url], after[url]) for url in before}
    total = server_delta(sum_readings(list(before.values())), sum_readings(list(after.values())))
    if len(views) > 1 and any(v.counters is None for v in views.values()):
        total = dataclasses.replace(total, counters=None)  # some replicas do not speculate-count: no partial sum
    return total, views
