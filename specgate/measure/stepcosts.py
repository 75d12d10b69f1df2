"""Where the speedup goes: a cost model of speculative decoding, fitted from the measured loop's own step timings.

Each streamed chunk of a speculative request is one verification step (the transformers engine streams once per
step): its wall time is the gap since the previous chunk, and the engine reports per step the tokens drafted (k),
accepted (n) and how long the draft (or the n-gram lookup) took. Plain decoding streams one token per step. This
module only reads finished traces: it adds nothing to the measured loop. The first chunk (prefill) is not a decode
step; it enters as the measured TTFT.

Fits (least squares over decode steps; 95 % intervals from a bootstrap over paired requests):

- plain step   t = a + b·context                                → T1, one plain step at the spec arm's mean context
- spec step    t − draft = β0 + β_ctx·context + β_k·k + β_rej·[the previous step rejected a draft token]
  verify cost V = β_k·E[k] (the forward's extra time for k more tokens), draft cost D (timed per step),
  per-step overhead O = E[t] − T1 − V − D (sampling, cache update and crop, host work; β_rej is its rollback part)

Predicted S = (Σ TTFT_plain + decode tokens·T1) / (Σ TTFT_spec + decode tokens·E[t]/E[tokens per step]). The
waterfall runs from the ideal (Leviathan et al. with c = 0 at the measured α) through the measured acceptance shape,
the verify, draft and overhead costs and the prefill to the predicted S, then through the residuals (the plain
fit's error; time outside the requests) to the measured S — each step a factor. At the configured γ the spec fit
reproduces its own steps, so the prediction tests the plain-step fit and the accounting; the draft-length advice
is the forecast, to be checked by a run at the advised γ.

Draft length γ': E[tokens per step] = 1 + q·Σ_{i≤γ'} A_i (q: share of steps that drafted; A_i: share of drafts
with ≥ i accepted, measured for i ≤ γ, beyond γ extrapolated geometrically: A_i = A_γ·r^(i−γ) with r =
(A_γ/A_1)^(1/(γ−1)), the mean conditional acceptance per position); E[step] = T1 + β_k·E[k] + draft + O, with the
rollback part scaled by the share of steps that reject and a model draft's cost by the tokens it drafts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specgate.engines.base import ArmRun, RequestTrace
from specgate.measure.metrics import CONFIDENCE, predicted_speedup

BOOTSTRAP_RESAMPLES = 400
MAX_GAMMA = 16
MIN_GAIN = 0.02  # a draft length is advised only when it is predicted to pay at least 2 % more than the configured


@dataclass(frozen=True, slots=True)
class FittedCost:
    """A fitted value with its 95 % bootstrap interval (over requests)."""

    value: float
    ci: tuple[float, float]


@dataclass(frozen=True, slots=True)
class StepCosts:
    """What a decode step costs, in ms, at the speculative arm's mean context (`context_tokens`).

    `verify_ms_per_token` is None when every step drafted the same number of tokens (the verify cost cannot be
    told from the overhead then); `draft_ms_per_step` None when the engine does not time the draft."""

    plain_step_ms: FittedCost
    plain_ms_per_1k_context: FittedCost
    step_ms: FittedCost
    step_ms_per_1k_context: FittedCost
    verify_ms_per_token: FittedCost | None
    draft_ms_per_step: FittedCost | None
    draft_ms_per_token: FittedCost | None
    rollback_ms: FittedCost | None
    overhead_ms_per_step: FittedCost
    tokens_per_step: float
    drafted_per_step: float
    drafting_share: float
    context_tokens: float
    steps: int
    plain_steps: int
    requests: int


@dataclass(frozen=True, slots=True)
class WaterfallStep:
    """One factor between the ideal and the measured speedup: `speedup` is S after it."""

    name: str
    factor: float
    speedup: float
    detail: str


@dataclass(frozen=True, slots=True)
class DraftLength:
    """The predicted speedup at draft length `gamma` (`extrapolated`: acceptance beyond the measured γ)."""

    gamma: int
    predicted_speedup: float
    ci: tuple[float, float]
    tokens_per_step: float
    step_ms: float
    extrapolated: bool


@dataclass(frozen=True, slots=True)
class SpeedupExplanation:
    """The cost model of one speculative arm against its plain arm: costs, waterfall, draft-length advice."""

    arm: str
    reference: str
    method: str
    gamma: int
    costs: StepCosts
    waterfall: tuple[WaterfallStep, ...]
    predicted_speedup: FittedCost
    measured_speedup: float
    draft_lengths: tuple[DraftLength, ...] = ()
    best_gamma: int | None = None
    extrapolation: str = ""
    too_noisy: str = ""

    @property
    def error(self) -> float:
        """Predicted over measured S, minus 1."""
        return self.predicted_speedup.value / self.measured_speedup - 1

    def draft_length(self, gamma: int) -> DraftLength | None:
        return next((d for d in self.draft_lengths if d.gamma == gamma), None)


@dataclass(frozen=True, slots=True)
class _Request:
    """The decode steps of one request as arrays (times in ms)."""

    ms: np.ndarray
    context: np.ndarray
    tokens: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    draft_ms: np.ndarray | None
    rejected_before: np.ndarray
    ttft_ms: float
    inloop_ms: float


def _request(trace: RequestTrace, speculative: bool) -> _Request | None:
    times = np.asarray(trace.chunk_times_s, dtype=float)
    if not trace.ok or times.size < 2:
        return None
    sizes = np.asarray(trace.chunk_tokens, dtype=float)
    context = trace.prompt_tokens + np.cumsum(sizes)[:-1]
    zeros = np.zeros(times.size - 1)
    drafted, accepted, rejected, draft = zeros, zeros, zeros, None
    if speculative:
        if len(trace.drafted) != times.size:
            return None  # not one count per streamed chunk: the steps cannot be lined up
        all_drafted = np.asarray(trace.drafted, dtype=float)
        all_accepted = np.asarray(trace.accepted, dtype=float)
        drafted, accepted = all_drafted[1:], all_accepted[1:]
        rejected = (all_accepted < all_drafted)[:-1].astype(float)  # a step crops the previous step's rejections
        if len(trace.draft_s) == times.size:
            draft = 1000.0 * np.asarray(trace.draft_s, dtype=float)[1:]
    ttft = 1000.0 * (times[0] - trace.submit_s)
    inloop = 1000.0 * (times[-1] - trace.submit_s)
    return _Request(1000.0 * np.diff(times), context, sizes[1:], drafted, accepted, draft, rejected, ttft, inloop)


def _fit(y: np.ndarray, columns: dict[str, np.ndarray]) -> dict[str, float]:
    """Least squares of y on an intercept and the columns that vary (those that do not are left out)."""
    used = {name: c for name, c in columns.items() if c.size and float(np.ptp(c)) > 0}
    design = np.column_stack([np.ones_like(y), *used.values()])
    coefficients = np.linalg.lstsq(design, y, rcond=None)[0]
    return dict(zip(("intercept", *used), (float(c) for c in coefficients), strict=True))


@dataclass(frozen=True, slots=True)
class _Point:
    """Every number of the model on one set of requests."""

    values: dict[str, float]
    waterfall: tuple[tuple[str, float], ...]
    by_gamma: tuple[tuple[float, float, float], ...]  # (S, tokens per step, step ms) for γ' = 1 … MAX_GAMMA
    acceptance: tuple[float, ...]
    ratio: float


def _cat(requests: Sequence[_Request], name: str) -> np.ndarray:
    return np.concatenate([getattr(r, name) for r in requests])


def _point(pairs: Sequence[tuple[_Request, _Request]], gamma: int, method: str) -> _Point:
    plain, spec = [p for p, _ in pairs], [s for _, s in pairs]
    a = _fit(_cat(plain, "ms"), {"context": _cat(plain, "context")})
    ms, context, tokens = _cat(spec, "ms"), _cat(spec, "context"), _cat(spec, "tokens")
    drafted, accepted, rejected = _cat(spec, "drafted"), _cat(spec, "accepted"), _cat(spec, "rejected_before")
    timed = all(s.draft_ms is not None for s in spec)
    draft = np.concatenate([s.draft_ms for s in spec if s.draft_ms is not None]) if timed else np.zeros_like(ms)
    b = _fit(ms - draft, {"context": context, "k": drafted, "rejected": rejected})
    mean_context = float(context.mean())
    t1 = a["intercept"] + a.get("context", 0.0) * mean_context
    step, per_step, drafted_mean = float(ms.mean()), float(tokens.mean()), float(drafted.mean())
    verify = b.get("k", 0.0) * drafted_mean
    draft_ms = float(draft.mean())
    overhead = step - t1 - verify - draft_ms
    drafts = drafted > 0
    alpha = float(accepted.sum() / drafted.sum()) if drafted.sum() else 0.0
    ideal = predicted_speedup(alpha, gamma, 0.0)
    decode_tokens = sum(float(p.tokens.sum()) for p in plain), sum(float(s.tokens.sum()) for s in spec)
    ttft = sum(p.ttft_ms for p in plain), sum(s.ttft_ms for s in spec)
    plain_ms = ttft[0] + decode_tokens[0] * t1

    def wall(tokens_per_step: float, step_ms: float) -> float:
        return plain_ms / (ttft[1] + decode_tokens[1] * step_ms / tokens_per_step)

    predicted = float(wall(per_step, step))
    inloop = float(sum(p.inloop_ms for p in plain) / sum(s.inloop_ms for s in spec))
    speeds = (
        ("ideal", ideal),
        ("acceptance", per_step),
        ("verify", per_step * t1 / (t1 + verify)),
        ("draft", per_step * t1 / (t1 + verify + draft_ms)),
        ("overhead", per_step * t1 / step),
        ("prefill", predicted),
        ("fit", inloop),
    )
    q = float(drafts.mean())
    acc_d, k_d = accepted[drafts], drafted[drafts]
    measured = tuple(float((acc_d >= i).mean()) if acc_d.size else 0.0 for i in range(1, gamma + 1))
    ratio = _ratio(measured)
    rollback = b.get("rejected", 0.0)
    by_gamma = []
    for g in range(1, MAX_GAMMA + 1):
        shares = [*measured[:g], *(measured[-1] * ratio ** (i - gamma) for i in range(gamma + 1, g + 1))]
        tokens_g = 1 + q * float(np.sum(shares))
        if g <= gamma:
            drafted_g = q * float(np.minimum(k_d, g).mean()) if k_d.size else 0.0
            rejects_g = q * float((acc_d < np.minimum(k_d, g)).mean()) if k_d.size else 0.0
        else:
            drafted_g = q * g * (float(k_d.mean()) / gamma if k_d.size else 0.0)
            rejects_g = q * (1 - shares[-1])
        draft_g = draft_ms if method != "draft_model" or not drafted_mean else draft_ms / drafted_mean * drafted_g
        step_g = t1 + b.get("k", 0.0) * drafted_g + draft_g + overhead + rollback * (rejects_g - float(rejected.mean()))
        by_gamma.append((float(wall(tokens_g, step_g)), float(tokens_g), float(step_g)))
    values = {
        "plain_step_ms": t1,
        "plain_ms_per_1k_context": 1000 * a.get("context", 0.0),
        "step_ms": step,
        "step_ms_per_1k_context": 1000 * b.get("context", 0.0),
        "verify_ms_per_token": b.get("k", float("nan")),
        "draft_ms_per_step": draft_ms,
        "draft_ms_per_token": draft_ms / drafted_mean if drafted_mean else float("nan"),
        "rollback_ms": b.get("rejected", float("nan")),
        "overhead_ms_per_step": overhead,
        "predicted": predicted,
        "verify_ms": verify,
        "ttft_plain_ms": ttft[0] / len(plain),
        "ttft_spec_ms": ttft[1] / len(spec),
        "context": mean_context,
        "tokens_per_step": per_step,
        "drafted_per_step": drafted_mean,
        "drafting_share": q,
        "alpha": alpha,
    }
    return _Point({k: float(v) for k, v in values.items()}, speeds, tuple(by_gamma), measured, ratio)


def _ratio(shares: tuple[float, ...]) -> float:
    """r: the mean conditional acceptance per position, for extrapolating beyond the measured draft length."""
    if not shares or shares[0] <= 0:
        return 0.0
    if len(shares) == 1 or shares[-1] <= 0:
        return min(shares[0], 1.0) if len(shares) == 1 else 0.0
    return float(min((shares[-1] / shares[0]) ** (1 / (len(shares) - 1)), 1.0))


def _interval(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if finite.size < 2:
        return (float("nan"), float("nan"))
    tail = 100 * (1 - CONFIDENCE) / 2
    return (float(np.percentile(finite, tail)), float(np.percentile(finite, 100 - tail)))


def explain_speedup(
    plain_runs: Sequence[ArmRun],
    spec_runs: Sequence[ArmRun],
    *,
    gamma: int,
    method: str,
    measured_speedup: float,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> SpeedupExplanation | None:
    """The cost model of a speculative arm against its plain arm, or None without per-step data to fit it on.

    `gamma` and `method` are the arm's configured draft length and speculation method (`prompt_lookup`,
    `draft_model`, …); `measured_speedup` the gate's S. Requests pair by prompt and round, as the speedup does."""
    plain = {(t.prompt_id, t.repetition): r for run in plain_runs for t in run.traces if (r := _request(t, False))}
    pairs = [
        (plain[(t.prompt_id, t.repetition)], r)
        for run in spec_runs
        for t in run.traces
        if (t.prompt_id, t.repetition) in plain and (r := _request(t, True)) is not None
    ]
    if len(pairs) < 2 or gamma < 1 or measured_speedup <= 0 or not any(s.drafted.any() for _, s in pairs):
        return None
    point = _point(pairs, gamma, method)
    rng = np.random.default_rng(seed)
    draws = [
        _point([pairs[i] for i in rng.integers(0, len(pairs), len(pairs))], gamma, method) for _ in range(resamples)
    ]

    def estimate(name: str) -> FittedCost:
        return FittedCost(point.values[name], _interval(np.asarray([d.values[name] for d in draws])))

    def optional(name: str) -> FittedCost | None:
        return None if not np.isfinite(point.values[name]) else estimate(name)

    verify = optional("verify_ms_per_token")
    timed = all(s.draft_ms is not None for _, s in pairs)
    costs = StepCosts(
        plain_step_ms=estimate("plain_step_ms"),
        plain_ms_per_1k_context=estimate("plain_ms_per_1k_context"),
        step_ms=estimate("step_ms"),
        step_ms_per_1k_context=estimate("step_ms_per_1k_context"),
        verify_ms_per_token=verify,
        draft_ms_per_step=estimate("draft_ms_per_step") if timed else None,
        draft_ms_per_token=optional("draft_ms_per_token") if timed and method == "draft_model" else None,
        rollback_ms=optional("rollback_ms"),
        overhead_ms_per_step=estimate("overhead_ms_per_step"),
        tokens_per_step=point.values["tokens_per_step"],
        drafted_per_step=point.values["drafted_per_step"],
        drafting_share=point.values["drafting_share"],
        context_tokens=point.values["context"],
        steps=sum(s.ms.size for _, s in pairs),
        plain_steps=sum(p.ms.size for p, _ in pairs),
        requests=len(pairs),
    )
    lengths: tuple[DraftLength, ...] = ()
    best = None
    if verify is not None:
        lengths = tuple(
            DraftLength(
                g,
                s,
                _interval(np.asarray([d.by_gamma[g - 1][0] for d in draws])),
                tokens,
                step_ms,
                extrapolated=g > gamma,
            )
            for g, (s, tokens, step_ms) in enumerate(point.by_gamma, start=1)
        )
        best = max(lengths, key=lambda d: d.predicted_speedup).gamma
    extrapolation = (
        f"acceptance beyond γ={gamma} extrapolated geometrically: each further position keeps "
        f"r={point.ratio:.2f} of the drafts (the mean conditional acceptance of {_positions(gamma)})"
        if verify is not None
        else f"no draft-length advice: every step drafted {point.values['drafted_per_step']:.0f} tokens, so the "
        "verify cost per token cannot be told from the per-step overhead"
    )
    predicted = estimate("predicted")
    return SpeedupExplanation(
        too_noisy=_too_noisy(predicted, costs, lengths, best),
        arm=spec_runs[0].arm,
        reference=plain_runs[0].arm,
        method=method,
        gamma=gamma,
        costs=costs,
        waterfall=_waterfall(point, costs, measured_speedup, method),
        predicted_speedup=predicted,
        measured_speedup=measured_speedup,
        draft_lengths=lengths,
        best_gamma=best,
        extrapolation=extrapolation,
    )


NOISY_WIDTH = 0.5  # a 95 % interval wider than half its value (or than a plain step) is no fit to explain with


def _too_noisy(predicted: FittedCost, costs: StepCosts, lengths: Sequence[DraftLength], best: int | None) -> str:
    """Why the fit is too noisy to explain the speedup or advise a draft length (its intervals are as wide as what
    they bound: a busy machine's timings), or ""."""
    low, high = predicted.ci
    if not high - low <= NOISY_WIDTH * predicted.value:
        return f"predicted S {predicted.value:.2f}× with a 95% CI of {low:.2f}–{high:.2f}×"
    verify, plain = costs.verify_ms_per_token, costs.plain_step_ms.value
    if verify is not None and not verify.ci[1] - verify.ci[0] <= plain:
        return (
            f"verify cost per drafted token {verify.value:+.2f} ms with a 95% CI of {verify.ci[0]:.2f}–"
            f"{verify.ci[1]:.2f} ms, wider than a whole plain step ({plain:.1f} ms)"
        )
    chosen = next((d for d in lengths if d.gamma == best), None)
    if chosen is not None and not chosen.ci[1] - chosen.ci[0] <= NOISY_WIDTH * chosen.predicted_speedup:
        return (
            f"best γ={chosen.gamma} predicted {chosen.predicted_speedup:.2f}× with a 95% CI of "
            f"{chosen.ci[0]:.2f}–{chosen.ci[1]:.2f}×"
        )
    return ""


def _waterfall(point: _Point, costs: StepCosts, measured: float, method: str) -> tuple[WaterfallStep, ...]:
    v = point.values
    positions = ", ".join(f"{a:.2f}" for a in point.acceptance)
    draft = "lookup" if method == "prompt_lookup" else "draft"
    rollback = "" if costs.rollback_ms is None else f"; rollback {costs.rollback_ms.value:+.2f} ms after a rejection"
    verify = (
        f"verifying k+1 tokens at once: {v['verify_ms_per_token']:+.2f} ms per drafted token over a "
        f"{v['plain_step_ms']:.1f} ms plain step ({v['drafted_per_step']:.2f} drafted per step)"
        if costs.verify_ms_per_token is not None
        else "every step drafted the same number of tokens: the verify cost is in the overhead"
    )
    drafted = (
        f"{draft} {v['draft_ms_per_step']:.2f} ms per step"
        if costs.draft_ms_per_step is not None
        else "not timed by this engine: in the overhead"
    )
    details = {
        "ideal": f"Leviathan et al. with c = 0 at α {v['alpha']:.2f}: every step as cheap as one plain token",
        "acceptance": f"{v['tokens_per_step']:.2f} tokens per step as measured ({v['drafting_share']:.0%} of steps "
        f"drafted; per position [{positions}])",
        "verify": verify,
        "draft": drafted,
        "overhead": f"{v['overhead_ms_per_step']:.2f} ms per step besides forward and draft (sampling, cache update "
        f"and crop, host work){rollback}",
        "prefill": f"TTFT, not sped up: {v['ttft_plain_ms']:.0f} ms plain / {v['ttft_spec_ms']:.0f} ms speculative "
        "per request",
        "fit": "the plain-step fit's error (plain decode time the linear fit in context does not reproduce)",
        "outside": "time outside the requests' streams (request setup, detokenization, between requests)",
    }
    names = {
        "ideal": "ideal (c = 0)",
        "acceptance": "acceptance as measured",
        "verify": "verify cost",
        "draft": "draft cost",
        "overhead": "per-step overhead",
        "prefill": "prefill",
        "fit": "residual: fit",
        "outside": "residual: outside the requests",
    }
    speeds = [*point.waterfall, ("outside", measured)]
    steps, previous = [], None
    for key, speed in speeds:
        factor = 1.0 if previous is None else float(speed / previous)
        steps.append(WaterfallStep(names[key], factor, float(speed), details[key]))
        previous = speed
    return tuple(steps)


__all__ = ["DraftLength", "FittedCost", "SpeedupExplanation", "StepCosts", "WaterfallStep", "explain_speedup"]


def _positions(gamma: int) -> str:
    """The words for the first γ positions: 'position 1' or 'positions 1–γ'."""
    return "position 1" if gamma == 1 else f"positions 1–{gamma}"
