"""The metrics of one pair × workload as a table, one column per arm: rendered as HTML (an Allure attachment) and
as compact Markdown rows (the merge-request summary). One place decides what a reviewer sees and how it is rounded.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from specgate.measure.metrics import ArmSummary, Distribution, Speedup
from specgate.reports.document import ArmRecord, EvaluationRecord

DASH = "–"
STATS = ("mean", "p50", "p90", "p99")


def fmt(value: float | None, digits: int = 0, suffix: str = "") -> str:
    """A number rounded for people, or a dash when it was not measured."""
    return DASH if value is None else f"{value:.{digits}f}{suffix}"


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One metric across the arms of an evaluation, already formatted."""

    label: str
    unit: str
    values: tuple[str, ...]


def _stat(distribution: Distribution | None, stat: str) -> float | None:
    return None if distribution is None else float(getattr(distribution, stat))


def _distribution_rows(
    summaries: list[ArmSummary], label: str, unit: str, digits: int, pick: Callable[[ArmSummary], Distribution | None]
) -> list[MetricRow]:
    return [
        MetricRow(f"{label} {stat}", unit, tuple(fmt(_stat(pick(s), stat), digits) for s in summaries))
        for stat in STATS
    ]


def _acceptance_rows(summaries: list[ArmSummary]) -> list[MetricRow]:
    rates = tuple(fmt(s.acceptance.rate if s.acceptance else None, 3) for s in summaries)
    lengths = tuple(fmt(s.acceptance.mean_length if s.acceptance else None, 2) for s in summaries)
    positions = tuple(
        DASH
        if not s.acceptance or not s.acceptance.per_position
        else " ".join(f"{p:.2f}" for p in s.acceptance.per_position)
        for s in summaries
    )
    return [
        MetricRow("acceptance rate α", "", rates),
        MetricRow("mean acceptance length τ", "tokens", lengths),
        MetricRow("acceptance per draft position", "", positions),
    ]


def arm_rows(record: EvaluationRecord) -> tuple[tuple[str, ...], list[MetricRow]]:
    """The arms (plain arm first) and every summarized metric of each."""
    arms = tuple(a.name for a in record.arms)
    summaries = [a.summary for a in record.arms]
    rows = [
        MetricRow(
            "requests completed / failed", "", tuple(f"{s.n_requests - s.n_failed} / {s.n_failed}" for s in summaries)
        ),
        *_distribution_rows(summaries, "TTFT", "ms", 0, lambda s: s.ttft_ms),
        *_distribution_rows(summaries, "TPOT", "ms", 1, lambda s: s.tpot_ms),
        *_distribution_rows(summaries, "ITL", "ms", 1, lambda s: s.itl_ms),
        *_distribution_rows(summaries, "E2EL", "ms", 0, lambda s: s.e2el_ms),
        *_distribution_rows(summaries, "decode rate", "tok/s", 1, lambda s: s.decode_tokens_per_s),
        MetricRow(
            "effective throughput mean",
            "tok/s",
            tuple(fmt(_stat(s.effective_tokens_per_s, "mean"), 1) for s in summaries),
        ),
        MetricRow("system throughput", "tok/s", tuple(fmt(s.system_tokens_per_s, 1) for s in summaries)),
        MetricRow("output tokens", "", tuple(str(s.output_tokens) for s in summaries)),
        MetricRow("wall time", "s", tuple(fmt(s.wall_s, 2) for s in summaries)),
        *_acceptance_rows(summaries),
    ]
    return arms, rows


def speedup_text(arm: ArmRecord) -> str:
    """Measured speedup with its CI and the predicted one, e.g. `1.42× (95% CI 1.38–1.47; predicted 1.61×)`."""
    s = arm.speedup
    if s is None:
        return DASH
    predicted = "" if s.predicted is None else f"; predicted {s.predicted:.2f}×"
    return f"{s.value:.2f}× ({speedup_interval(s)}{predicted})"


def speedup_interval(s: Speedup) -> str:
    """`95% CI low–high`, or why there is none: one paired engine call (one round of a batched engine) has no
    spread to resample."""
    low, high = s.ci
    if low != low or high != high:
        return f"no CI: {s.n_units} paired engine call{'s' if s.n_units != 1 else ''}"
    return f"95% CI {low:.2f}–{high:.2f}"


def drift_text(arm: ArmRecord) -> str:
    """Share of requests whose output differs from the plain arm's."""
    drift = arm.drift
    return DASH if drift is None else f"{drift.share:.1%} ({drift.differing}/{drift.n})"


def key_metrics(arm: ArmRecord) -> tuple[str, ...]:
    """The few numbers per arm a merge-request reviewer needs (see `KEY_METRIC_HEADERS`)."""
    summary, acceptance = arm.summary, arm.summary.acceptance
    return (
        fmt(_stat(summary.ttft_ms, "p99")),
        fmt(_stat(summary.tpot_ms, "mean"), 1),
        fmt(_stat(summary.decode_tokens_per_s, "mean"), 1),
        fmt(summary.system_tokens_per_s, 1),
        fmt(acceptance.rate if acceptance else None, 2),
        fmt(acceptance.mean_length if acceptance else None, 2),
        speedup_text(arm) if arm.speculative else "plain decoding",
        drift_text(arm),
    )


KEY_METRIC_HEADERS = (
    "P99 TTFT (ms)",
    "mean TPOT (ms)",
    "decode (tok/s)",
    "throughput (tok/s)",
    "α",
    "τ",
    "speedup S",
    "drift",
)

_STYLE = """<style>
body{font-family:sans-serif;font-size:13px} table{border-collapse:collapse;margin-bottom:12px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right} th:first-child,td:first-child{text-align:left}
thead th{background:#f0f0f0} caption{font-weight:bold;text-align:left;padding:4px 0}
</style>"""


def metrics_html(record: EvaluationRecord, hardware: str) -> str:
    """A standalone HTML page: every metric per arm, then speedup and drift of each speculative arm."""
    arms, rows = arm_rows(record)
    head = "".join(f"<th>{html.escape(arm)}</th>" for arm in arms)
    body = "".join(
        f"<tr><td>{html.escape(row.label)}{f' ({row.unit})' if row.unit else ''}</td>"
        + "".join(f"<td>{html.escape(v)}</td>" for v in row.values)
        + "</tr>"
        for row in rows
    )
    extra = "".join(
        f"<tr><td>speedup S ({html.escape(a.name)} vs {html.escape(a.drift.against if a.drift else record.plain)})"
        f"</td><td>{html.escape(speedup_text(a))}</td></tr>"
        f"<tr><td>drift of {html.escape(a.name)} (outputs differing)</td><td>{html.escape(drift_text(a))}</td></tr>"
        for a in record.arms
        if a.speculative
    )
    title = f"{html.escape(record.pair)} / {html.escape(record.workload)}"
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>{_STYLE}</head><body><table>"
        f"<caption>{title} on {html.escape(hardware)}: metrics per arm (plain decoding: "
        f"{html.escape(record.plain)})</caption><thead><tr><th>metric</th>{head}</tr></thead><tbody>{body}</tbody>"
        f"</table><table><tbody>{extra}</tbody></table></body></html>"
    )
