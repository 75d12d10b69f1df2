"""The ladder table and its speed-versus-accuracy (Pareto) plot, rendered from the verdict document alone.

One row per rung of a pair × workload (full precision first): speed gain over the rung below (paired, 95 % CI) and
over full precision, peak memory, KV bytes per token, P99 TTFT and TPOT, accuracy and its drop against full
precision (95 % CI, McNemar), perplexity and its rise (below the table also per long document), output agreement
with full precision, and the verdict. The terminal, `summary.md` and the Allure attachment show the same `cells`;
`ladder_decisions` is each rung's decision across the workloads (ROLL BACK over NOT WORTH IT over PASS).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from specgate.ladder import LadderRow, worst
from specgate.reports.document import EvaluationRecord, VerdictDocument

HEADERS = (
    "step",
    "arm",
    "speed gain (95% CI)",
    "vs full",
    "peak MiB",
    "KV B/tok",
    "P99 TTFT ms",
    "P99 TPOT ms",
    "accuracy",
    "Δ acc pts (95% CI)",
    "McNemar p",
    "ppl",
    "Δ ppl",
    "same as full",
    "verdict",
)


def _f(value: float | None, pattern: str) -> str:
    return "–" if value is None else format(value, pattern)


def cells(row: LadderRow) -> tuple[str, ...]:
    """The table cells of one rung."""
    gain = "–" if row.speed_gain is None else f"{row.speed_gain:.2f}×"
    if row.speed_gain_ci is not None and row.speed_gain is not None and row.speed_gain_ci[0] == row.speed_gain_ci[0]:
        gain += f" ({row.speed_gain_ci[0]:.2f}–{row.speed_gain_ci[1]:.2f})"
    drop = "–" if row.accuracy_drop is None else f"{-row.accuracy_drop * 100:+.1f}"
    if row.accuracy_drop_ci is not None:
        drop += f" ({-row.accuracy_drop_ci[1] * 100:+.1f}…{-row.accuracy_drop_ci[0] * 100:+.1f})"
    accuracy = "–" if row.accuracy is None else f"{row.accuracy:.1%} (n={row.accuracy_n})"
    memory = None if row.peak_memory_bytes is None else row.peak_memory_bytes / 2**20
    return (
        str(row.step),
        row.arm,
        gain,
        "–" if row.speed_gain_full is None else f"{row.speed_gain_full:.2f}×",
        _f(memory, ".0f"),
        _f(row.kv_bytes_per_token, ",.0f"),
        _f(row.p99_ttft_ms, ".0f"),
        _f(row.p99_tpot_ms, ".1f"),
        accuracy,
        drop,
        _f(row.mcnemar_p, ".2g"),
        _f(row.perplexity, ".2f"),
        _f(row.perplexity_rise, "+.2f"),
        _f(None if row.agreement is None else row.agreement * 100, ".0f") + ("%" if row.agreement is not None else ""),
        row.verdict,
    )


def terminal_lines(record: EvaluationRecord) -> list[str]:
    """The ladder of a pair × workload as an aligned text table (empty without a ladder)."""
    if not record.ladder:
        return []
    table = [HEADERS, *(cells(r) for r in record.ladder)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADERS))]
    lines = [f"  ladder {record.pair} / {record.workload}:"]
    lines += ["    " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in table]
    lines += [f"    step {r.step} {r.arm}: {r.description}" for r in record.ladder]
    return lines + [f"    {line}" for line in document_lines(record)]


def document_lines(record: EvaluationRecord) -> list[str]:
    """Each long document's perplexity per rung, its rise over full precision beside it (empty without any)."""
    if not record.ladder:
        return []
    lines = []
    for full in record.ladder[0].perplexity_by_document:
        per_rung = [f"{record.ladder[0].arm} {full.perplexity:.2f}"]
        for row in record.ladder[1:]:
            scored = next((d for d in row.perplexity_by_document if d.document == full.document), None)
            if scored is not None:
                per_rung.append(f"{row.arm} {scored.perplexity:.2f} ({scored.perplexity - full.perplexity:+.2f})")
        lines.append(f"perplexity on {full.document} ({full.tokens:,} tokens): " + " · ".join(per_rung))
    return lines


def ladder_decisions(document: VerdictDocument) -> dict[tuple[str, str], tuple[str, tuple[str, ...]]]:
    """(pair, arm) → the rung's decision across workloads and the workloads' reasons."""
    verdicts: dict[tuple[str, str], list[str]] = {}
    reasons: dict[tuple[str, str], list[str]] = {}
    for record in document.evaluations:
        for row in record.ladder[1:]:
            verdicts.setdefault((record.pair, row.arm), []).append(row.verdict)
            reasons.setdefault((record.pair, row.arm), []).extend(f"{record.workload}: {r}" for r in row.reasons)
    return {key: (worst(v), tuple(reasons[key])) for key, v in verdicts.items()}


def decision_lines(document: VerdictDocument) -> list[str]:
    return [
        f"ladder decision {pair} / {arm}: {verdict}" + (f" ({'; '.join(why)})" if why else "")
        for (pair, arm), (verdict, why) in ladder_decisions(document).items()
    ]


def ladder_html(record: EvaluationRecord) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in cells(row)) + "</tr>" for row in record.ladder
    )
    notes = "".join(f"<li>{html.escape(f'step {r.step} {r.arm}: {r.description}')}</li>" for r in record.ladder)
    notes += "".join(f"<li>{html.escape(line)}</li>" for line in document_lines(record))
    title = f"{html.escape(record.pair)} / {html.escape(record.workload)}"
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>ladder {title}</title></head><body>"
        f"<table border='1'><caption>ladder {title}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
        f"</table><ul>{notes}</ul></body></html>"
    )


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """The names of the points no other point beats on both speed (higher) and accuracy (higher)."""
    front = []
    for name, speed, quality in points:
        dominated = any(s >= speed and q >= quality and (s > speed or q > quality) for n, s, q in points if n != name)
        if not dominated:
            front.append(name)
    return front


def pareto_png(record: EvaluationRecord) -> bytes | None:
    """Speed gain over full precision against accuracy (or, without reference answers, output agreement), the
    Pareto front drawn through the rungs nothing beats on both."""
    points = []
    for row in record.ladder:
        speed = 1.0 if row.step == 0 else row.speed_gain_full
        quality = row.accuracy if row.accuracy is not None else (1.0 if row.step == 0 else row.agreement)
        if speed is not None and quality is not None:
            points.append((row.arm, speed, quality))
    if len(points) < 2:
        return None
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = set(pareto_front(points))
    figure, axes = plt.subplots(figsize=(6, 4))
    for name, speed, quality in points:
        axes.scatter(speed, quality, color="tab:green" if name in front else "tab:grey")
        axes.annotate(name, (speed, quality), textcoords="offset points", xytext=(4, 4), fontsize=8)
    line = sorted((s, q) for n, s, q in points if n in front)
    axes.plot([s for s, _ in line], [q for _, q in line], color="tab:green", linestyle="--", label="Pareto front")
    has_accuracy = any(r.accuracy is not None for r in record.ladder)
    axes.set_xlabel("speed gain over full precision (×)")
    axes.set_ylabel("task accuracy" if has_accuracy else "outputs identical to full precision (share)")
    axes.set_title(f"{record.pair} / {record.workload}: speed vs accuracy")
    axes.legend(loc="best", fontsize=8)
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()
