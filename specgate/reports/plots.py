"""Plots of one pair × workload as PNG bytes (matplotlib, headless), and the first drift as HTML side by side.

matplotlib is imported lazily and used through its object API (`Figure` rendered by the Agg canvas), so nothing
here touches pyplot's global state or needs a display. Every plot reads the raw per-request traces of the
measurement, so the figures show the same numbers the checks judged.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specgate.checks.long_context import context_points
from specgate.config import SlaLimits
from specgate.costs.energy import GIB
from specgate.engines.base import RequestMetrics, request_metrics
from specgate.evaluation import Evaluation

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")


@dataclass(frozen=True, slots=True)
class Plot:
    """One rendered figure: a name people read and the PNG bytes."""

    name: str
    png: bytes


def per_request(evaluation: Evaluation, arm: str) -> list[RequestMetrics]:
    """The metrics of every completed request of one arm, in execution order."""
    runs = evaluation.measurement.runs[arm]
    return [m for run in runs for t in run.traces if (m := request_metrics(t)) is not None]


def _figure(title: str) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title, fontsize=10)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _title(evaluation: Evaluation, what: str) -> str:
    pair, workload = evaluation.where
    return f"{what} — {pair} / {workload}"


def cdf_plot(evaluation: Evaluation, metric: str, limit_ms: float | None = None) -> Plot | None:
    """Empirical CDF of `metric` ("ttft_ms" or "tpot_ms") for every arm, P99 marked, with the SLA line if given."""
    label = metric.removesuffix("_ms").upper()
    figure, axes = _figure(_title(evaluation, f"{label} CDF"))
    drawn = False
    for color, arm in zip(COLORS, evaluation.measurement.arms, strict=False):
        values = sorted(v for m in per_request(evaluation, arm) if (v := getattr(m, metric)) is not None)
        if not values:
            continue
        drawn = True
        share = [(i + 1) / len(values) for i in range(len(values))]
        axes.step(values, share, where="post", color=color, label=f"{arm} (n={len(values)})")
        summary = evaluation.summaries[arm]
        dist = summary.ttft_ms if metric == "ttft_ms" else summary.tpot_ms
        if dist is not None:
            axes.axvline(dist.p99, color=color, linestyle=":", linewidth=1, label=f"{arm} P99 {dist.p99:.1f} ms")
    if not drawn:
        return None
    if limit_ms is not None:
        axes.axvline(limit_ms, color="black", linestyle="--", linewidth=1, label=f"SLA P99 {limit_ms:.0f} ms")
    axes.set_xlabel(f"{label} (ms)")
    axes.set_ylabel("share of requests")
    axes.set_ylim(0, 1.02)
    axes.legend(fontsize=8, loc="lower right")
    return Plot(f"{label} CDF", _png(figure))


def acceptance_plot(evaluation: Evaluation, sla: SlaLimits) -> Plot | None:
    """Share of drafts with at least i+1 tokens accepted, per draft position, with the overall α."""
    acceptance = evaluation.released.acceptance
    if acceptance is None or not acceptance.per_position:
        return None
    figure, axes = _figure(_title(evaluation, f"Acceptance per draft position ({evaluation.plan.released})"))
    positions = list(range(1, len(acceptance.per_position) + 1))
    axes.bar(positions, acceptance.per_position, color=COLORS[1])
    for x, y in zip(positions, acceptance.per_position, strict=True):
        axes.annotate(f"{y:.2f}", (x, y), ha="center", va="bottom", fontsize=8)
    if acceptance.rate is not None:
        axes.axhline(
            acceptance.rate,
            color="black",
            linestyle="--",
            linewidth=1,
            label=f"α = {acceptance.rate:.3f}, τ = {acceptance.mean_length or 0:.2f}",
        )
    floor = sla.min_acceptance_rate
    axes.axhline(floor, color="#c44e52", linestyle=":", linewidth=1, label=f"rollback floor α {floor:.2f}")
    axes.legend(fontsize=8)
    axes.set_xticks(positions)
    axes.set_xlabel("draft position")
    axes.set_ylabel("drafts accepted at least this far")
    axes.set_ylim(0, 1.1)
    return Plot("Acceptance per draft position", _png(figure))


def speedup_plot(evaluation: Evaluation, sla: SlaLimits) -> Plot | None:
    """Measured speedup with its 95 % CI next to the predicted one, against the must-pay limit."""
    speedup = evaluation.speedups.get(evaluation.plan.released)
    if speedup is None:
        return None
    figure, axes = _figure(_title(evaluation, f"Speedup {speedup.arm} vs {speedup.reference}"))
    names, values, colors = ["measured"], [speedup.value], [COLORS[0]]
    if speedup.predicted is not None:
        names.append("predicted (Leviathan)")
        values.append(speedup.predicted)
        colors.append(COLORS[2])
    bars = axes.bar(names, values, color=colors)
    low, high = speedup.ci
    if low == low and high == high:  # NaN when there was a single paired run
        axes.errorbar(
            [0],
            [speedup.value],
            yerr=[[speedup.value - low], [high - speedup.value]],
            fmt="none",
            ecolor="black",
            capsize=6,
            label="95% CI",
        )
    axes.bar_label(bars, labels=[f"{v:.2f}×" for v in values], fontsize=9, padding=8)
    axes.axhline(
        sla.min_speedup,
        color="#c44e52",
        linestyle="--",
        linewidth=1,
        label=f"must pay ≥ {sla.min_speedup:.2f}×",
    )
    axes.axhline(1.0, color="grey", linewidth=1, label="no gain (1×)")
    axes.set_ylabel("speedup S (wall time ratio)")
    axes.set_ylim(0, max([*values, high if high == high else 0.0, sla.min_speedup]) * 1.4)
    axes.legend(fontsize=8, loc="upper left", ncols=3)
    return Plot("Speedup measured vs predicted", _png(figure))


def waterfall_plot(evaluation: Evaluation) -> Plot | None:
    """The released arm's speedup waterfall: ideal (c = 0) → each measured cost → predicted → residuals → measured."""
    explanation = evaluation.explanations.get(evaluation.plan.released)
    if explanation is None:
        return None
    steps = explanation.waterfall
    figure, axes = _figure(_title(evaluation, f"Where the speedup goes ({explanation.arm}, γ={explanation.gamma})"))
    names = [s.name.replace("residual: ", "residual:\n").replace(" ", "\n", 1) for s in steps]
    bottoms, heights, colors = [], [], []
    for index, step in enumerate(steps):
        before = step.speedup if index == 0 else steps[index - 1].speedup
        low, high = (0.0, step.speedup) if index == 0 else sorted((before, step.speedup))
        bottoms.append(low)
        heights.append(max(high - low, 1e-3))
        colors.append(COLORS[0] if index == 0 else COLORS[2] if step.factor >= 1 else COLORS[3])
    axes.bar(names, heights, bottom=bottoms, color=colors)
    for index, step in enumerate(steps):
        label = f"{step.speedup:.2f}×" if index == 0 else f"×{step.factor:.2f}"
        axes.annotate(label, (index, bottoms[index] + heights[index]), ha="center", va="bottom", fontsize=8)
    axes.bar(["measured"], [explanation.measured_speedup], color=COLORS[1])
    axes.annotate(f"{explanation.measured_speedup:.2f}×", (len(steps), explanation.measured_speedup), ha="center")
    axes.axhline(1.0, color="grey", linewidth=1)
    axes.tick_params(axis="x", labelsize=7)
    axes.set_ylabel("speedup S after each factor")
    return Plot("Speedup waterfall (cost model)", _png(figure))


def ttft_vs_prompt_plot(evaluation: Evaluation) -> Plot | None:
    """TTFT against prompt length per arm, drawn only when the workload has several prompt lengths."""
    points: dict[str, list[tuple[int, float]]] = {}
    for arm, runs in evaluation.measurement.runs.items():
        points[arm] = [
            (t.prompt_tokens, m.ttft_ms) for run in runs for t in run.traces if (m := request_metrics(t)) is not None
        ]
    if len({length for pts in points.values() for length, _ in pts}) < 2:
        return None
    figure, axes = _figure(_title(evaluation, "TTFT vs prompt length"))
    for color, (arm, pts) in zip(COLORS, points.items(), strict=False):
        axes.scatter([p[0] for p in pts], [p[1] for p in pts], s=12, color=color, alpha=0.7, label=arm)
    axes.set_xlabel("prompt tokens")
    axes.set_ylabel("TTFT (ms)")
    axes.legend(fontsize=8)
    return Plot("TTFT vs prompt length", _png(figure))


def context_length_plot(evaluation: Evaluation) -> Plot | None:
    """Median TTFT per arm and peak memory against context length (prompt tokens); None under two lengths."""
    points = context_points(evaluation)
    if len(points) < 2:
        return None
    figure, axes = _figure(_title(evaluation, "TTFT and peak memory vs context length"))
    for color, arm in zip(COLORS, evaluation.measurement.arms, strict=False):
        measured = [(p.context_tokens, p.ttft_ms[arm] / 1000) for p in points if arm in p.ttft_ms]
        axes.plot([x for x, _ in measured], [y for _, y in measured], marker="o", color=color, label=f"TTFT {arm}")
    axes.set_xlabel("context (prompt tokens)")
    axes.set_ylabel("median TTFT (s)")
    axes.set_ylim(bottom=0)
    axes.set_xticks([p.context_tokens for p in points])
    handles, labels = axes.get_legend_handles_labels()
    memory = [(p.context_tokens, p.peak_memory_bytes / GIB) for p in points if p.peak_memory_bytes is not None]
    if memory:
        twin = axes.twinx()
        twin.plot([x for x, _ in memory], [y for _, y in memory], marker="s", linestyle="--", color="black")
        twin.set_ylabel("peak memory (GiB)")
        twin.set_ylim(bottom=0)
        handles += twin.get_lines()
        labels.append("peak memory")
    axes.legend(handles, labels, fontsize=8, loc="upper left")
    return Plot("TTFT and peak memory vs context length", _png(figure))


def evaluation_plots(evaluation: Evaluation, sla: SlaLimits, *, long: bool = False) -> list[Plot]:
    """Every plot that applies to the evaluation, in the order a reviewer reads them."""
    plots = [
        cdf_plot(evaluation, "ttft_ms", sla.p99_ttft_ms),
        cdf_plot(evaluation, "tpot_ms"),
        acceptance_plot(evaluation, sla),
        speedup_plot(evaluation, sla),
        waterfall_plot(evaluation),
        ttft_vs_prompt_plot(evaluation),
        context_length_plot(evaluation) if long else None,
    ]
    return [p for p in plots if p is not None]


def drift_html(evaluation: Evaluation, limit: int = 5, chars: int = 600) -> str | None:
    """The first diverging requests, reference and candidate output side by side; None when nothing differs."""
    lossless = evaluation.losslessness.get(evaluation.plan.released)
    if lossless is None or not lossless.divergences:
        return None
    reference, candidate = lossless.against, lossless.arm
    texts = {
        (t.arm, t.prompt_id, t.repetition): t.output_text
        for arm in (reference, candidate)
        for run in evaluation.measurement.runs[arm]
        for t in run.traces
    }
    rows = []
    for d in lossless.divergences[:limit]:
        cells = [
            (d.reference_excerpt, texts.get((reference, d.prompt_id, d.repetition), "")),
            (d.candidate_excerpt, texts.get((candidate, d.prompt_id, d.repetition), "")),
        ]
        tds = "".join(
            f"<td><code>…{html.escape(ids)}…</code><pre>{html.escape(text[:chars])}</pre></td>" for ids, text in cells
        )
        rows.append(f"<tr><td>{html.escape(d.prompt_id)} rep {d.repetition}<br>token {d.position}</td>{tds}</tr>")
    pair, workload = evaluation.where
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><style>body{font-family:sans-serif;font-size:13px}"
        "td{border:1px solid #ccc;vertical-align:top;padding:4px;max-width:40em}pre{white-space:pre-wrap}</style>"
        f"</head><body><p>{html.escape(pair)} / {html.escape(workload)}: {lossless.differing} of {lossless.n} "
        f"requests differ (drift {lossless.drift:.1%}). First divergences, token ids around the first differing "
        "token, then the start of each output:</p><table><tr><th>request</th>"
        f"<th>{html.escape(reference)} (reference)</th><th>{html.escape(candidate)}</th></tr>{''.join(rows)}"
        "</table></body></html>"
    )
