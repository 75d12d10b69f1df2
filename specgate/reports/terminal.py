"""The verdict as the terminal shows it at the end of the session, rendered from the verdict document."""

from __future__ import annotations

from specgate.checks.advice import headline
from specgate.costs.energy import GIB, whole_percent
from specgate.reports.document import ArmRecord, EvaluationRecord, VerdictDocument
from specgate.reports.ladder_table import decision_lines, terminal_lines
from specgate.reports.sweep_table import terminal_lines as sweep_lines
from specgate.reports.tables import speedup_interval
from specgate.reports.waterfall import waterfall_lines


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _arm_numbers(arm: ArmRecord) -> list[str]:
    parts = []
    s = arm.speedup
    if s is not None:
        predicted = "" if s.predicted is None else f", predicted {s.predicted:.2f}×"
        parts.append(f"S {s.value:.2f}× ({speedup_interval(s)}{predicted})")
    acc = arm.summary.acceptance
    if acc is not None and acc.rate is not None:
        parts.append(f"α {acc.rate:.2f}, τ {acc.mean_length or 0:.2f}")
    return parts


def evaluation_lines(record: EvaluationRecord) -> list[str]:
    """Key numbers of a pair × workload: one line, plus one per further speculative arm."""
    plain, released = record.arm(record.plain), record.arm(record.released)
    parts = _arm_numbers(released)
    p99 = [None if a.summary.ttft_ms is None else a.summary.ttft_ms.p99 for a in (plain, released)]
    parts.append(f"P99 TTFT {plain.name} {_ms(p99[0])} / {released.name} {_ms(p99[1])} ms")
    rates = [a.summary.decode_tokens_per_s.mean if a.summary.decode_tokens_per_s else None for a in (plain, released)]
    parts.append(f"decode {plain.name} {_ms(rates[0])} / {released.name} {_ms(rates[1])} tok/s")
    if released.drift is not None:
        parts.append(f"outputs differ {released.drift.differing}/{released.drift.n}")
    reference = "" if record.reference is None else f" (beside reference {record.reference}, {record.rounds} rounds)"
    lines = [f"{record.pair} / {record.workload}{reference}: " + "; ".join(parts)]
    for arm in record.arms:
        if arm.name in (record.plain, record.released) or not arm.speculative or arm.reference:
            continue
        extra = _arm_numbers(arm)
        if arm.summary.decode_tokens_per_s is not None:
            extra.append(f"decode {arm.summary.decode_tokens_per_s.mean:.0f} tok/s")
        if arm.drift is not None:
            extra.append(f"outputs differ {arm.drift.differing}/{arm.drift.n}")
        lines.append(f"  arm {arm.name} ({arm.description}): " + "; ".join(extra))
    return lines


def _per_1k(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _change(value: float | None) -> str:
    return "" if value is None else f", {whole_percent(value)}"


def resource_line(record: EvaluationRecord) -> str | None:
    """Cost, energy, peak memory and roofline of a pair × workload, indented under its key numbers."""
    energy, roofline = record.energy, record.roofline
    parts = []
    if energy is not None:
        ref, cand = energy.arms[energy.reference], energy.arms[energy.candidate]
        costs = [_per_1k(a.cost_per_1k_tokens_usd, ".4f") for a in (ref, cand)]
        joules = [_per_1k(a.energy_per_1k_tokens_j, ".0f") for a in (ref, cand)]
        kind = "estimated" if energy.estimated else f"measured, {energy.telemetry}"
        memory = ["–" if a.peak_memory_bytes is None else f"{a.peak_memory_bytes / GIB:.2f}" for a in (ref, cand)]
        parts += [
            f"cost ${costs[0]} → ${costs[1]} per 1k tok ({ref.arm} → {cand.arm}{_change(energy.cost_saving)})",
            f"energy {joules[0]} → {joules[1]} J per 1k tok ({kind}{_change(energy.energy_saving)})",
            f"peak memory {ref.arm} {memory[0]} / {cand.arm} {memory[1]} GiB",
        ]
    if roofline is not None:
        bound, fraction = roofline.bound_tokens_per_s, roofline.fraction
        known = bound is not None and fraction is not None
        parts.append(f"roofline {roofline.reference} {fraction:.0%} of {bound:.0f} tok/s" if known else "roofline n/a")
    return "  " + "; ".join(parts) if parts else None


def interference_line(record: EvaluationRecord) -> str | None:
    """How busy the machine was while the pair × workload was measured, and the rounds each arm needed."""
    busy = record.interference
    if busy is None:
        return None
    rounds = record.rounds_by_arm
    measured = ""
    if rounds and len(set(rounds.values())) > 1:
        measured = "; rounds per arm " + ", ".join(f"{arm} {n}" for arm, n in rounds.items())
    return f"  {busy.describe()}{measured}"


HEADLINE_CHARS = 220  # the first sentence of a failed check's evidence; the whole of it is in pytest's report


def part_lines(document: VerdictDocument) -> list[str]:
    """A merged verdict: one line per part, then the failures, errors and recommendations labelled by part."""
    lines = [
        f"VERDICT: {document.verdict} ({len(document.parts)} runs merged; {len(document.checks)} checks, "
        f"{len(document.failed_checks)} failed, {len(document.errors)} errors)"
    ]
    for part in document.parts:
        d = part.document
        counts = part.reason if d is None else f"{len(d.checks)} checks, {len(d.failed)} failed, {len(d.errors)} errors"
        lines.append(f"PART {part.label}: {part.verdict} ({counts})")
    for part in document.parts:
        if part.document is not None:
            lines.extend(
                f"FAILED {part.label}: {c.key}: {headline(c.message, HEADLINE_CHARS)}" for c in part.document.failed
            )
    lines.extend(f"ERROR {e}" for e in document.errors)
    lines.extend(f"RECOMMENDATION: {r}" for r in document.recommendations)
    lines.append(f"verdict file: {document.out_dir}/verdict.json")
    return lines


def verdict_lines(document: VerdictDocument) -> list[str]:
    """The terminal summary: verdict, key numbers per pair × workload, failures, errors, recommendations."""
    if document.parts:
        return part_lines(document)
    not_run = f"; {len(document.not_run)} applicable checks not run" if document.not_run else ""
    lines = [
        f"VERDICT: {document.verdict} (hardware {document.hardware}; {len(document.checks)} checks, "
        f"{len(document.failed)} failed, {len(document.errors)} errors{not_run})",
        *(f"!!! {notice}" for notice in document.notices),
    ]
    if document.not_run:
        shown = ", ".join(document.not_run[:5]) + (
            f" and {len(document.not_run) - 5} more" * (len(document.not_run) > 5)
        )
        lines.append(f"NOT RUN (a subset is not a release verdict): {shown}")
    machines = {r.fingerprint.describe() for r in document.evaluations if r.fingerprint is not None}
    lines.extend(f"machine: {machine}" for machine in sorted(machines))
    for record in document.evaluations:
        lines.extend(evaluation_lines(record))
        lines.extend(line for line in [resource_line(record), interference_line(record)] if line)
        lines.extend(f"  {note}" for note in record.notes)  # arms measured once, engine instances shared or renewed
        for arm in record.arms:
            if arm.explanation is not None and not arm.reference:
                lines.extend(waterfall_lines(arm.explanation))
        lines.extend(terminal_lines(record))
        lines.extend(sweep_lines(record))
    lines.extend(decision_lines(document))
    lines.extend(f"FAILED {c.key}: {headline(c.message, HEADLINE_CHARS)}" for c in document.failed)
    lines.extend(f"ERROR {e}" for e in document.errors)
    lines.extend(f"RECOMMENDATION: {r}" for r in document.recommendations)
    lines.append(f"verdict file: {document.out_dir}/verdict.json")
    return lines
