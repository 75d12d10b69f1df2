"""`summary.md`: the verdict as a merge-request comment.

Verdict first, then what broke and why (each failed check with its evidence), errors, a table of the key metrics
per pair, workload and arm, and the recommendation. Every check, passed or not, sits in a collapsed block at the
end, so the comment stays short on a pass and complete on a block.
"""

from __future__ import annotations

from collections.abc import Sequence

from specgate import __version__
from specgate.gate import Check, Verdict
from specgate.reports.provenance import commit_info
from specgate.reports.tables import KEY_METRIC_HEADERS, key_metrics
from specgate.reports.verdict import write_atomic
from specgate.run import GateRun

ICONS = {"PASS": "✅", "BLOCK": "⛔"}


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no pipes or line breaks."""
    return " ".join(text.replace("|", "\\|").split())


def _table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)
    return lines


def _failed(checks: tuple[Check, ...]) -> list[str]:
    if not checks:
        return []
    rows = [(f"`{c.name}`", f"{c.pair} / {c.workload}", c.category, c.message) for c in checks]
    return ["", "### Failed checks", "", *_table(("check", "pair / workload", "category", "evidence"), rows)]


def _metrics(run: GateRun) -> list[str]:
    rows = []
    for evaluation in run.evaluations():
        pair, workload = evaluation.where
        for arm in evaluation.measurement.arms:
            rows.append((pair, workload, arm, *key_metrics(evaluation, evaluation.summaries[arm])))
    if not rows:
        return ["", "### Key metrics", "", "No measurement completed."]
    return ["", "### Key metrics", "", *_table(("pair", "workload", "arm", *KEY_METRIC_HEADERS), rows)]


def _advice(verdict: Verdict) -> list[str]:
    lines = ["", "### Recommendation", ""]
    if verdict.recommendations:
        lines.extend(f"- {r}" for r in verdict.recommendations)
    elif verdict.passed:
        lines.append("- every check passed: ship this configuration")
    else:
        lines.append("- fix the failed checks and errors above, then run the gate again")
    return lines


def _all_checks(checks: tuple[Check, ...]) -> list[str]:
    if not checks:
        return []
    rows = [("✅" if c.passed else "❌", f"`{c.name}`", f"{c.pair} / {c.workload}", c.message) for c in checks]
    return [
        "",
        f"<details><summary>All checks ({len(checks)})</summary>",
        "",
        *_table(("", "check", "pair / workload", "evidence"), rows),
        "",
        "</details>",
    ]


def summary_markdown(run: GateRun) -> str:
    """The whole comment as Markdown."""
    verdict = run.verdict()
    commit = commit_info(run.project.source.parent).id
    lines = [
        f"## {ICONS.get(verdict.verdict, '')} specgate: **{verdict.verdict}** on `{run.hardware.name}`",
        "",
        f"{len(verdict.failed)} of {len(verdict.checks)} checks failed, {len(verdict.errors)} errors · "
        f"pairs {', '.join(f'`{p}`' for p in run.pairs)} · workloads {', '.join(f'`{w}`' for w in run.workloads)} · "
        f"commit `{commit[:12]}` · specgate {__version__}",
        *_failed(verdict.failed),
    ]
    if verdict.errors:
        lines.extend(["", "### Errors", "", *(f"- {cell(e)}" for e in verdict.errors)])
    lines.extend([*_metrics(run), *_advice(verdict), *_all_checks(verdict.checks)])
    return "\n".join(lines) + "\n"


def write_summary(run: GateRun) -> None:
    """Write `summary.md` into the run's output folder."""
    write_atomic(run.out_dir / "summary.md", summary_markdown(run))
