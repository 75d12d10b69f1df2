"""`summary.md`: the verdict as a merge-request comment.

Verdict first, then what broke and why (each failed check with its evidence), errors, a table of the key metrics
per pair, workload and arm, where the speedup goes (the cost model's waterfall), and the recommendation. Every
check, passed or not, sits in a collapsed block at the end, so the comment stays short on a pass and complete on
a block.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from specgate.checks import Check
from specgate.reports.document import VerdictDocument
from specgate.reports.ladder_table import HEADERS as LADDER_HEADERS
from specgate.reports.ladder_table import cells, decision_lines, document_lines
from specgate.reports.sweep_table import summary_section
from specgate.reports.tables import KEY_METRIC_HEADERS, key_metrics
from specgate.reports.waterfall import waterfall_markdown
from specgate.store.atomic import write_atomic

ICONS = {"PASS": "✅", "BLOCK": "⛔", "PARTIAL": "⚠️"}


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


def _metrics(document: VerdictDocument) -> list[str]:
    rows = []
    for record in document.evaluations:
        for arm in record.arms:
            rows.append((record.pair, record.workload, arm.name, *key_metrics(arm)))
    if not rows:
        return ["", "### Key metrics", "", "No measurement completed."]
    return ["", "### Key metrics", "", *_table(("pair", "workload", "arm", *KEY_METRIC_HEADERS), rows)]


def _ladder(document: VerdictDocument) -> list[str]:
    records = [r for r in document.evaluations if r.ladder]
    if not records:
        return []
    lines = ["", "### Speed-versus-accuracy ladder", ""]
    for record in records:
        lines += [f"**{record.pair} / {record.workload}**", ""]
        lines += [*_table(LADDER_HEADERS, [cells(row) for row in record.ladder]), ""]
        per_document = [f"- {line}" for line in document_lines(record)]
        lines += [*per_document, ""] if per_document else []
    return lines + [f"- {line}" for line in decision_lines(document)]


def _sweeps(document: VerdictDocument) -> list[str]:
    records = [r for r in document.evaluations if r.sweep is not None]
    if not records:
        return []
    lines = ["", "### Where speculation stops paying (concurrency sweep)", ""]
    for record in records:
        lines += [*summary_section(record), ""]
    return lines


def _advice(verdict: VerdictDocument) -> list[str]:
    lines = ["", "### Recommendation", ""]
    if verdict.passed:  # a pass may still carry advice (the draft length that would pay best)
        lines.append("- every check passed: ship this configuration")
    elif verdict.verdict == "PARTIAL":
        lines.append(
            f"- every check that ran passed, but {len(verdict.not_run)} applicable check(s) did not run: a subset is "
            "not a release verdict"
        )
    if verdict.recommendations:
        lines.extend(f"- {r}" for r in verdict.recommendations)
    elif not verdict.passed:
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


PART_ICONS = {**ICONS, "MISSING": "❓", "UNREADABLE": "❓"}


def _parts(document: VerdictDocument, links: Sequence[tuple[str, str]], all_checks: bool) -> str:
    """A merged verdict (`specgate merge`): the parts in a table, then each part's own summary, folded unless it
    blocked."""
    parts = document.parts
    blocked = [p for p in parts if p.verdict != "PASS"]
    rows = []
    for p in parts:
        d = p.document
        counts = ("–", "–") if d is None else (f"{len(d.failed)} of {len(d.checks)}", str(len(d.errors)))
        note = p.reason or ("" if d is None else f"commit `{d.commit.id[:12]}`")
        rows.append(
            (p.label, p.hardware or "?", p.runner or "?", f"{PART_ICONS.get(p.verdict, '')} {p.verdict}", *counts, note)
        )
    lines = [
        f"## {ICONS.get(document.verdict, '')} specgate: **{document.verdict}** on {len(parts)} runs "
        f"({len(parts) - len(blocked)} passed, {len(blocked)} not)",
        "",
        f"hardware {', '.join(f'`{h}`' for h in document.hardware.split(', ') if h)} · commit "
        f"`{document.commit.id[:12]}` · specgate {document.specgate_version}",
        *(["", " · ".join(f"[{title}]({url})" for title, url in links)] if links else []),
        "",
        "### Parts",
        "",
        *_table(("part", "hardware", "runner", "verdict", "checks failed", "errors", ""), rows),
    ]
    if document.errors:
        lines.extend(["", "### Errors", "", *(f"- {cell(e)}" for e in document.errors)])
    for p in parts:
        if p.document is None:
            continue
        body = summary_markdown(p.document, all_checks=all_checks)
        body = re.sub(r"^### ", "#### ", re.sub(r"^## ", "", body, flags=re.M), flags=re.M)  # under the part's title
        opened = " open" if p.verdict != "PASS" else ""
        lines.extend(["", f"<details{opened}><summary><b>{p.label}</b>: {p.verdict}</summary>", "", body, "</details>"])
    return "\n".join(lines) + "\n"


def summary_markdown(document: VerdictDocument, links: Sequence[tuple[str, str]] = (), all_checks: bool = True) -> str:
    """The whole comment as Markdown; `links` (title, URL) go under the headline (the reports of a CI job), and
    `all_checks=False` leaves out the collapsed list of every check (for size-limited comments)."""
    if document.parts:
        return _parts(document, links, all_checks)
    verdict = document
    lines = [
        f"## {ICONS.get(verdict.verdict, '')} specgate: **{verdict.verdict}** on `{document.hardware}`",
        "",
        f"{len(verdict.failed)} of {len(verdict.checks)} checks failed, {len(verdict.errors)} errors · "
        f"pairs {', '.join(f'`{p}`' for p in document.pairs)} · workloads "
        f"{', '.join(f'`{w}`' for w in document.workloads)} · commit `{document.commit.id[:12]}` · "
        f"specgate {document.specgate_version}",
        *(["", " · ".join(f"[{title}]({url})" for title, url in links)] if links else []),
        *(f"> **{notice}**" for notice in document.notices),
        *_failed(verdict.failed),
    ]
    if verdict.errors:
        lines.extend(["", "### Errors", "", *(f"- {cell(e)}" for e in verdict.errors)])
    if verdict.not_run:
        lines.extend(["", "### Not run (deselected)", "", *(f"- `{key}`" for key in verdict.not_run)])
    lines.extend([*_metrics(document), *_ladder(document), *_sweeps(document), *waterfall_markdown(document)])
    lines.extend(_advice(verdict))
    lines.extend(_all_checks(verdict.checks) if all_checks else [])
    return "\n".join(lines) + "\n"


def write_summary(document: VerdictDocument, out_dir: Path) -> None:
    """Write `summary.md` into the output folder."""
    write_atomic(out_dir / "summary.md", summary_markdown(document))
