"""The speed-versus-accuracy ladder of one pair × workload, summarized: one row per rung, with its verdict.

A pair's `ladder:` climbs its arms in order from full precision (the plain `ar` arm): each rung is timed against
the rung below it (the paired speed gain, Σ wall below / Σ wall here, with a bootstrap CI over the paired engine
calls) and against full precision, and judged against full precision on accuracy (task accuracy on the reference
answers, the drop with a paired bootstrap CI and the exact McNemar test), perplexity on long documents (workloads
with `perplexity: true`; the engine scores each document through the arm's own KV cache) and output agreement
(the share of requests whose greedy output is token-identical to full precision's). Peak memory is the monitor's,
KV bytes per token the model's shape at the arm's KV-cache precision.

A rung's verdict: ROLL BACK when perplexity rose more than its `max_perplexity_rise`, or accuracy fell more than its
`max_accuracy_drop` and the exact McNemar test tells the fall from chance (p ≤ 0.05: the accuracy rule of
`specgate.accuracy.decide_accuracy`, which an equal-accuracy rung fails with probability ≤ 2.5 %); UNDECIDED when
accuracy fell more than the limit on too few changed answers to tell (one answer of 12 flipped is 8 points, p = 1):
it does not block, and says how many problems would decide it; NOT WORTH IT when it is not `min_speed_gain` faster
than the rung below (judged only where the workload gates speed); else PASS. Everything here is a pure function of
the measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specgate.accuracy import ACCURACY_ALPHA, TaskAccuracy, mcnemar_p, problems_needed
from specgate.config.optimisation import LadderLimits, Optimisation
from specgate.measure.metrics import ArmSummary, bootstrap_interval, measure_speedup
from specgate.measure.perplexity import Perplexity
from specgate.measure.protocol import Measurement
from specgate.plan import MeasurementPlan

FULL = "full precision"
PASS = "PASS"
ROLL_BACK = "ROLL BACK"
UNDECIDED = "UNDECIDED"
NOT_WORTH_IT = "NOT WORTH IT"
# Bytes per element of a quantized KV cache, scales and zero points included (optimum-quanto: one float scale and
# one zero point per group of 64 values; vLLM's fp8: one scale per layer).
KV_BYTES = {
    "int8": 1 + 8 / 64,
    "int4": 0.5 + 8 / 64,
    "int2": 0.25 + 8 / 64,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
}


@dataclass(frozen=True, slots=True)
class DocumentPerplexity:
    """A rung's perplexity on one long document (a 4k or 8k-token contract): quantization costs grow with context."""

    document: str
    tokens: int
    perplexity: float


@dataclass(frozen=True, slots=True)
class LadderRow:
    """One rung: what it gained, what it cost, and its verdict (`reasons` say why)."""

    step: int
    arm: str
    description: str
    previous: str | None
    verdict: str
    reasons: tuple[str, ...] = ()
    speed_gain: float | None = None
    speed_gain_ci: tuple[float, float] | None = None
    speed_gain_full: float | None = None
    system_tokens_per_s: float | None = None
    peak_memory_bytes: int | None = None
    kv_bytes_per_token: float | None = None
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None
    accuracy: float | None = None
    accuracy_n: int = 0
    accuracy_drop: float | None = None
    accuracy_drop_ci: tuple[float, float] | None = None
    mcnemar_p: float | None = None
    broken: int = 0
    fixed: int = 0
    perplexity: float | None = None
    perplexity_rise: float | None = None
    agreement: float | None = None
    limits: LadderLimits | None = None
    perplexity_by_document: tuple[DocumentPerplexity, ...] = ()


@dataclass(frozen=True, slots=True)
class LadderInputs:
    """What the ladder reads beside the measurement: per arm its perplexity, peak memory and KV bytes per token."""

    perplexity: Mapping[str, Perplexity]
    peak_memory_bytes: Mapping[str, int | None]
    kv_bytes_per_token: Mapping[str, float | None]
    gate_speed: bool = True


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str, optimisation: Optimisation) -> float:
    """KV bytes one token occupies in an arm: K and V of every layer at the arm's KV precision."""
    element = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}.get(dtype, 4.0)
    if optimisation.kv_cache is not None:
        element = KV_BYTES.get(optimisation.kv_cache.dtype, element)
    return 2 * layers * kv_heads * head_dim * element


def accuracy_drop(
    full: TaskAccuracy, step: TaskAccuracy, seed: int = 0
) -> tuple[float, tuple[float, float] | None, float | None, int, int]:
    """(drop, 95 % CI of the drop, McNemar p, broken, fixed): the paired change from full precision to the step on
    the prompts both scored; the CI is a percentile bootstrap over those prompts."""
    common = sorted(full.per_prompt.keys() & step.per_prompt.keys())
    if not common:
        return full.accuracy - step.accuracy, None, None, 0, 0
    pairs = np.asarray([[full.per_prompt[p], step.per_prompt[p]] for p in common], dtype=float)
    drop = float(pairs[:, 0].mean() - pairs[:, 1].mean())

    def statistic(resamples: np.ndarray) -> np.ndarray:
        return np.asarray(resamples[:, :, 0].mean(axis=1) - resamples[:, :, 1].mean(axis=1))

    ci = bootstrap_interval(pairs, statistic, n_boot=2000, seed=seed) if len(common) > 1 else None
    test = mcnemar_p(full, step)
    if test is None:
        return drop, ci, None, 0, 0
    p, _, fixed, broken = test
    return drop, ci, p, broken, fixed


def agreement(measurement: Measurement, arm: str, full: str) -> float | None:
    """The share of requests (prompt × round) whose output equals full precision's, token for token."""
    reference = {(t.prompt_id, t.repetition): t.output_ids for r in measurement.runs[full] for t in r.traces if t.ok}
    same = total = 0
    for run in measurement.runs[arm]:
        for trace in run.traces:
            ids = reference.get((trace.prompt_id, trace.repetition))
            if ids is None or not trace.ok:
                continue
            total += 1
            same += ids == trace.output_ids
    return same / total if total else None


def summarize_ladder(
    measurement: Measurement,
    summaries: Mapping[str, ArmSummary],
    accuracy: Mapping[str, TaskAccuracy],
    inputs: LadderInputs,
    seed: int = 0,
) -> tuple[LadderRow, ...]:
    """The ladder's rows, full precision first (empty when the plan has no ladder)."""
    plan = measurement.plan
    if not plan.ladder:
        return ()
    full = plan.plain
    rows = [_row(measurement, summaries, accuracy, inputs, 0, full, None, None, seed)]
    for index, step in enumerate(plan.ladder, start=1):
        rows.append(_row(measurement, summaries, accuracy, inputs, index, step.arm, step.previous, step.limits, seed))
    return tuple(rows)


def _by_document(ppl: Perplexity) -> tuple[DocumentPerplexity, ...]:
    named = zip(ppl.document_ids, ppl.tokens_per_document, ppl.per_document, strict=False)
    return tuple(DocumentPerplexity(document, tokens, value) for document, tokens, value in named)


def _p99(summary: ArmSummary, metric: str) -> float | None:
    distribution = getattr(summary, metric)
    return None if distribution is None else float(distribution.p99)


def _row(
    measurement: Measurement,
    summaries: Mapping[str, ArmSummary],
    accuracy: Mapping[str, TaskAccuracy],
    inputs: LadderInputs,
    index: int,
    arm: str,
    previous: str | None,
    limits: LadderLimits | None,
    seed: int,
) -> LadderRow:
    plan, full = measurement.plan, measurement.plan.plain
    summary = summaries[arm]
    gain = gain_full = None
    if previous is not None:
        gain = measure_speedup(measurement.runs[previous], measurement.runs[arm], seed=seed)
        gain_full = measure_speedup(measurement.runs[full], measurement.runs[arm], seed=seed)
    drop = ci = p = None
    broken = fixed = 0
    if arm != full and full in accuracy and arm in accuracy:
        drop, ci, p, broken, fixed = accuracy_drop(accuracy[full], accuracy[arm], seed)
    ppl, ppl_full = inputs.perplexity.get(arm), inputs.perplexity.get(full)
    rise = None if ppl is None or ppl_full is None or arm == full else ppl.value - ppl_full.value
    row = LadderRow(
        step=index,
        arm=arm,
        description=plan.arm(arm).describe(),
        previous=previous,
        verdict=FULL,
        speed_gain=None if gain is None else gain.value,
        speed_gain_ci=None if gain is None else gain.ci,
        speed_gain_full=None if gain_full is None else gain_full.value,
        system_tokens_per_s=summary.system_tokens_per_s,
        peak_memory_bytes=inputs.peak_memory_bytes.get(arm),
        kv_bytes_per_token=inputs.kv_bytes_per_token.get(arm),
        p99_ttft_ms=_p99(summary, "ttft_ms"),
        p99_tpot_ms=_p99(summary, "tpot_ms"),
        accuracy=None if arm not in accuracy else accuracy[arm].accuracy,
        accuracy_n=0 if arm not in accuracy else accuracy[arm].n,
        accuracy_drop=drop,
        accuracy_drop_ci=ci,
        mcnemar_p=p,
        broken=broken,
        fixed=fixed,
        perplexity=None if ppl is None else ppl.value,
        perplexity_rise=rise,
        agreement=None if arm == full else agreement(measurement, arm, full),
        limits=limits,
        perplexity_by_document=() if ppl is None else _by_document(ppl),
    )
    if limits is None:
        return row
    verdict, reasons = judge_row(row, limits, gate_speed=inputs.gate_speed, failed=summary.n_failed)
    return replace(row, verdict=verdict, reasons=reasons)


def judge_row(
    row: LadderRow, limits: LadderLimits, *, gate_speed: bool, failed: int = 0
) -> tuple[str, tuple[str, ...]]:
    """A rung's verdict and why: ROLL BACK (perplexity beyond its limit, accuracy beyond it with McNemar p ≤
    `ACCURACY_ALPHA`, or failed requests), UNDECIDED (accuracy beyond its limit on too few changed answers to tell:
    not a block), NOT WORTH IT (slower than `min_speed_gain` over the rung below, where speed is gated), else PASS."""
    blocks, undecided, slow = [], [], []
    if failed:
        blocks.append(f"{failed} requests failed")
    if row.accuracy_drop is not None and row.accuracy_drop > limits.max_accuracy_drop + 1e-12:
        fell = f"accuracy drop {row.accuracy_drop * 100:.1f} pts > {limits.max_accuracy_drop * 100:.1f} pts"
        if accuracy_drop_is_real(row):
            blocks.append(fell + ("" if row.mcnemar_p is None else f" (McNemar p={row.mcnemar_p:.2g})"))
        else:
            undecided.append(f"{fell}, not told from chance: {too_few_answers(row)}")
    if row.perplexity_rise is not None and row.perplexity_rise > limits.max_perplexity_rise:
        blocks.append(f"perplexity rise {row.perplexity_rise:+.2f} > {limits.max_perplexity_rise:.2f}")
    if gate_speed and row.speed_gain is not None and row.speed_gain < limits.min_speed_gain:
        slow.append(f"speed gain {row.speed_gain:.2f}× < {limits.min_speed_gain:.2f}× over {row.previous}")
    if blocks:
        return ROLL_BACK, tuple(blocks + undecided + slow)
    if undecided:
        return UNDECIDED, tuple(undecided + slow)
    if slow:
        return NOT_WORTH_IT, tuple(slow)
    return PASS, ()


def accuracy_drop_is_real(row: LadderRow) -> bool:
    """The paired test tells the accuracy change from chance (no test, e.g. unpaired prompts: taken as real)."""
    return row.mcnemar_p is None or row.mcnemar_p <= ACCURACY_ALPHA


def too_few_answers(row: LadderRow) -> str:
    """Why an accuracy drop beyond the limit is undecided, and about how many problems would decide it."""
    common = row.accuracy_n
    needed = problems_needed(row.broken, row.fixed, common)
    more = "" if needed is None else f"; ≈ {needed} problems would tell a drop of this size from chance"
    return (
        f"{row.broken} broken, {row.fixed} fixed of {common} problems, McNemar p={row.mcnemar_p:.2g} > "
        f"{ACCURACY_ALPHA}{more} (score the step on a larger probe)"
    )


def meant_lossless(plan: MeasurementPlan, arm: str) -> bool:
    """Whether ladder step `arm` must reproduce full precision's greedy outputs: its `lossless:` when set, else
    whether it differs from full precision (the plain arm) only in its speculation."""
    step = next((s for s in plan.ladder if s.arm == arm), None)
    if step is None:
        return False
    if step.limits.lossless is not None:
        return step.limits.lossless
    mine, full = plan.arm(arm), plan.arm(plan.plain)
    plain = replace(mine, speculation=None, slowdown=full.slowdown)  # --inject-slowdown is not a change of outputs
    return plain.configuration() == full.configuration()


def worst(verdicts: Sequence[str]) -> str:
    """The ladder decision of a rung across workloads: ROLL BACK over UNDECIDED over NOT WORTH IT over PASS."""
    for verdict in (ROLL_BACK, UNDECIDED, NOT_WORTH_IT, PASS):
        if verdict in verdicts:
            return verdict
    return FULL
