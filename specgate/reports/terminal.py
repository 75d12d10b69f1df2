"""The verdict as the terminal shows it at the end of the session."""

from __future__ import annotations

from specgate.energy import GIB, percent
from specgate.evaluation import Evaluation
from specgate.run import GateRun


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def evaluation_line(evaluation: Evaluation) -> str:
    """One line of key numbers for a pair × workload."""
    pair, workload = evaluation.where
    ref, cand = evaluation.summaries[evaluation.measurement.reference], evaluation.released
    parts = [f"{pair} / {workload}:"]
    if evaluation.speedup is not None:
        s = evaluation.speedup
        predicted = "" if s.predicted is None else f", predicted {s.predicted:.2f}×"
        parts.append(f"S {s.value:.2f}× (95% CI {s.ci[0]:.2f}–{s.ci[1]:.2f}{predicted})")
    acc = cand.acceptance
    if acc is not None and acc.rate is not None:
        parts.append(f"α {acc.rate:.2f}, τ {acc.mean_length or 0:.2f}")
    p99 = [None if s.ttft_ms is None else s.ttft_ms.p99 for s in (ref, cand)]
    parts.append(f"P99 TTFT {ref.arm} {_ms(p99[0])} / {cand.arm} {_ms(p99[1])} ms")
    rates = [s.decode_tokens_per_s.mean if s.decode_tokens_per_s else None for s in (ref, cand)]
    parts.append(f"decode {ref.arm} {_ms(rates[0])} / {cand.arm} {_ms(rates[1])} tok/s")
    lossless = evaluation.losslessness
    parts.append(f"outputs differ {lossless.differing}/{lossless.n}")
    return " ".join(parts[:1]) + " " + "; ".join(parts[1:])


def _per_1k(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _change(value: float | None) -> str:
    return "" if value is None else f", {percent(value)}"


def resource_line(evaluation: Evaluation) -> str | None:
    """Cost, energy, peak memory and roofline of a pair × workload, indented under its key numbers."""
    energy, roofline = evaluation.energy, evaluation.roofline
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


def verdict_lines(run: GateRun) -> list[str]:
    verdict = run.verdict()
    lines = [
        f"VERDICT: {verdict.verdict} (hardware {run.hardware.name}; {len(verdict.checks)} checks, "
        f"{len(verdict.failed)} failed, {len(verdict.errors)} errors)"
    ]
    for evaluation in run.evaluations():
        lines.append(evaluation_line(evaluation))
        lines.extend(line for line in [resource_line(evaluation)] if line)
    lines.extend(f"FAILED {c.key}: {c.message}" for c in verdict.failed)
    lines.extend(f"ERROR {e}" for e in verdict.errors)
    lines.extend(f"RECOMMENDATION: {r}" for r in verdict.recommendations)
    lines.append(f"verdict file: {run.out_dir / 'verdict.json'}")
    return lines
