"""The verdict as the terminal shows it at the end of the session."""

from __future__ import annotations

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


def verdict_lines(run: GateRun) -> list[str]:
    verdict = run.verdict()
    lines = [
        f"VERDICT: {verdict.verdict} (hardware {run.hardware.name}; {len(verdict.checks)} checks, "
        f"{len(verdict.failed)} failed, {len(verdict.errors)} errors)"
    ]
    lines.extend(evaluation_line(e) for e in run.evaluations())
    lines.extend(f"FAILED {c.key}: {c.message}" for c in verdict.failed)
    lines.extend(f"ERROR {e}" for e in verdict.errors)
    lines.extend(f"RECOMMENDATION: {r}" for r in verdict.recommendations)
    lines.append(f"verdict file: {run.out_dir / 'verdict.json'}")
    return lines
