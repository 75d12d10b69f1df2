"""The concurrency sweep's table and plot, rendered from the verdict document alone (`specgate.measure.sweep`).

One row per level and arm: the speedup over plain decoding with its 95 % interval and whether speculation pays
there, output tokens per second, goodput (requests within the SLA's TTFT and per-token limits, per second), P99
TTFT and TPOT, and acceptance; below it each arm's knee. The terminal, `summary.md` (with a text bar per level) and
the Allure attachment (HTML, and a PNG of S against concurrency) show the same `cells`.
"""

from __future__ import annotations

import html
import io
import math

from specgate.measure.sweep import LevelSpeedup, Sweep, describe_knee
from specgate.reports.document import EvaluationRecord

HEADERS = (
    "in flight",
    "arm",
    "S (95% CI)",
    "speculation",
    "tok/s",
    "goodput req/s",
    "P99 TTFT ms",
    "P99 TPOT ms",
    "α",
)
BAR_CELLS = 20


def _f(value: float | None, pattern: str) -> str:
    return "–" if value is None or not math.isfinite(value) else format(value, pattern)


def _speedup(s: LevelSpeedup | None) -> str:
    if s is None or not math.isfinite(s.value):
        return "–"
    if not math.isfinite(s.ci[0]):
        return f"{s.value:.2f}× (one round)"
    return f"{s.value:.2f}× ({s.ci[0]:.2f}–{s.ci[1]:.2f})"


def cells(sweep: Sweep) -> list[tuple[str, ...]]:
    """The table's rows: per level, plain decoding first, then each speculative arm."""
    rows: list[tuple[str, ...]] = []
    for level in sweep.levels:
        for arm in level.arms:
            s = level.speedup(arm.arm)
            rows.append(
                (
                    str(level.concurrency),
                    arm.arm,
                    "1 (plain)" if arm.arm == sweep.plain else _speedup(s),
                    "" if s is None else s.decision,
                    _f(arm.output_tokens_per_s, ".1f"),
                    _f(arm.goodput_per_s, ".2f"),
                    _f(arm.p99_ttft_ms, ".0f"),
                    _f(arm.p99_tpot_ms, ".1f"),
                    _f(arm.acceptance_rate, ".3f"),
                )
            )
    return rows


def knee_lines(record: EvaluationRecord) -> list[str]:
    """Each speculative arm's knee, in words."""
    sweep = record.sweep
    if sweep is None:
        return []
    found = []
    for knee in sweep.knees:
        found.append(
            f"knee of {knee.arm}: {describe_knee(sweep, knee)} (S ≥ {sweep.min_speedup:.2f}× with 95% confidence; "
            f"{sweep.rounds} rounds, {sweep.wall_s / 60:.1f} min; goodput: TTFT ≤ {sweep.goodput_slo[0]:.0f} ms and "
            f"TPOT ≤ {sweep.goodput_slo[1]:.1f} ms)"
        )
    return found


def terminal_lines(record: EvaluationRecord) -> list[str]:
    """The sweep as an aligned text table (empty without one)."""
    if record.sweep is None:
        return []
    table = [HEADERS, *cells(record.sweep)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADERS))]
    lines = [f"  concurrency sweep {record.pair} / {record.workload}:"]
    lines += ["    " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in table]
    return lines + [f"    {line}" for line in knee_lines(record)]


def bars(sweep: Sweep) -> list[str]:
    """S per level and arm as text bars, the limit marked (`|`): the summary's plot."""
    tops = [s.ci[1] if math.isfinite(s.ci[1]) else s.value for lv in sweep.levels for s in lv.speedups]
    top = max([v for v in tops if math.isfinite(v)] + [sweep.min_speedup * 1.2])
    mark = round(sweep.min_speedup / top * BAR_CELLS)
    lines = []
    for level in sweep.levels:
        for s in level.speedups:
            filled = 0 if not math.isfinite(s.value) else round(s.value / top * BAR_CELLS)
            bar = "".join("|" if i == mark else ("█" if i < filled else "·") for i in range(BAR_CELLS + 1))
            lines.append(f"{level.concurrency:>4} {s.arm:<8} {bar} {_speedup(s)}")
    return lines


def summary_section(record: EvaluationRecord) -> list[str]:
    """The summary's section for one sweep: the table, the bars (limit at `|`) and the knees."""
    sweep = record.sweep
    if sweep is None:
        return []
    head = "| " + " | ".join(HEADERS) + " |"
    table = [head, "|" + "---|" * len(HEADERS)]
    table += ["| " + " | ".join(v.replace("|", "\\|") for v in row) + " |" for row in cells(sweep)]
    plot = ["```", f"S per level (| = {sweep.min_speedup:.2f}×)", *bars(sweep), "```"]
    knees = [f"- {line}" for line in knee_lines(record)]
    return [f"**{record.pair} / {record.workload}**", "", *table, "", *plot, "", *knees]


def sweep_html(record: EvaluationRecord) -> str:
    assert record.sweep is not None
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in cells(record.sweep))
    notes = "".join(f"<li>{html.escape(line)}</li>" for line in knee_lines(record))
    title = f"{html.escape(record.pair)} / {html.escape(record.workload)}"
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>sweep {title}</title></head><body>"
        f"<table border='1'><caption>concurrency sweep {title}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table><ul>{notes}</ul></body></html>"
    )


def sweep_png(record: EvaluationRecord) -> bytes | None:
    """S with its 95 % interval against concurrency per speculative arm, the limit and each knee marked; output
    tokens per second of every arm on a second axis."""
    sweep = record.sweep
    if sweep is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    levels = [lv.concurrency for lv in sweep.levels]
    for knee in sweep.knees:
        points = [(lv.concurrency, lv.speedup(knee.arm)) for lv in sweep.levels]
        xs = [c for c, s in points if s is not None and math.isfinite(s.value)]
        ss = [s for _, s in points if s is not None and math.isfinite(s.value)]
        low = [s.value - s.ci[0] if math.isfinite(s.ci[0]) else 0.0 for s in ss]
        high = [s.ci[1] - s.value if math.isfinite(s.ci[1]) else 0.0 for s in ss]
        axes.errorbar(xs, [s.value for s in ss], yerr=[low, high], marker="o", capsize=4, label=f"S {knee.arm}")
        if knee.level is not None:
            axes.axvline(knee.level, color="tab:green", linestyle=":", label=f"knee {knee.arm}: {knee.level}")
    axes.axhline(sweep.min_speedup, color="#c44e52", linestyle="--", label=f"must pay ≥ {sweep.min_speedup:.2f}×")
    axes.axhline(1.0, color="grey", linewidth=1)
    axes.set_xscale("log", base=2)
    axes.set_xticks(levels, [str(c) for c in levels])
    axes.set_xlabel("requests in flight")
    axes.set_ylabel("speedup S over plain decoding")
    other = axes.twinx()
    for index, name in enumerate(a.arm for a in sweep.levels[0].arms):
        rates = [next((a.output_tokens_per_s for a in lv.arms if a.arm == name), float("nan")) for lv in sweep.levels]
        other.plot(levels, rates, color=f"C{index + 2}", linestyle="--", alpha=0.6, label=f"{name} tok/s")
    other.set_ylabel("output tokens per second")
    handles, labels = axes.get_legend_handles_labels()
    more, more_labels = other.get_legend_handles_labels()
    axes.legend(handles + more, labels + more_labels, fontsize=7, loc="upper right")
    axes.set_title(f"{record.pair} / {record.workload}: where speculation stops paying")
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()
