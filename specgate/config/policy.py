"""The gate policy (`gate:` in specgate.yaml): how the gate measures and decides."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from specgate.config.validation import check_choice, check_keys, fail, mapping, typed

LATENCY_BASELINE = ("required", "optional")


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """How the gate measures and decides (docs/configuration.md, "Gate policy").

    `repetitions` rounds are always run; in reference mode, while a latency comparison is UNKNOWN, the run is sized
    from the spread measured so far (enough units for an unchanged configuration to pass with probability
    `pass_probability`) and continues, in the arms of undecided comparisons only, up to `max_repetitions` rounds and
    `looks` decisions. Baselines keep the last `history_runs` runs of each machine; latency is compared with a
    machine's history once it has `min_history_runs` runs, and `latency_baseline` says what happens before that (or
    on another machine): `required` blocks, `optional` reports it and passes. In reference mode each prompt is also
    sent `ttft_probes` times per round, to each arm a comparison reads, with a one-token budget: TTFT is the noisiest
    latency on a shared machine, and a prefill costs a fraction of a full request. `clock` is the time latency
    regressions are judged in:
    `cpu` (the engine's CPU time, which other work on the machine does not stretch), `wall`, or `auto` (CPU time
    where the engine measures it on a CPU backend, wall time elsewhere); SLA checks and reports always show wall
    time. A unit measured under heavy interference is measured again, up to `remeasure` of a round's units.
    `interleave` is how a unit's arms share the machine on engines that take one request at a time: `step` (they run
    at once, taking turns at every decoding step, each timed on its own turns, where the engine can) or `request`
    (one arm's request after the other's)."""

    alpha: float = 0.01
    repetitions: int = 2
    max_repetitions: int = 6
    warmup: int = 1
    min_samples: int = 4
    bootstrap_resamples: int = 2000
    seed: int = 0
    history_runs: int = 5
    min_history_runs: int = 3
    latency_baseline: str = "required"
    ttft_probes: int = 4
    looks: int = 3
    pass_probability: float = 0.95
    clock: str = "auto"
    remeasure: float = 0.25
    interleave: str = "step"


CLOCKS = ("auto", "cpu", "wall")
INTERLEAVE = ("step", "request")
FRACTIONS = ("alpha", "pass_probability", "remeasure")


def read_gate(data: Any, source: str) -> GatePolicy:
    """The `gate:` section of specgate.yaml, validated."""
    raw = mapping(data, source, "gate")
    check_keys(raw, [f.name for f in fields(GatePolicy)], source, "gate.")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "latency_baseline":
            values[key] = check_choice(value, LATENCY_BASELINE, source, f"gate.{key}")
            continue
        if key in ("clock", "interleave"):
            values[key] = check_choice(value, CLOCKS if key == "clock" else INTERLEAVE, source, f"gate.{key}")
            continue
        kind: type | tuple[type, ...] = (int, float) if key in FRACTIONS else int
        values[key] = typed(value, kind, source, f"gate.{key}")
    policy = GatePolicy(**values)
    if not 0 < policy.alpha < 0.5:
        raise fail(source, "gate.alpha", f"must be in (0, 0.5), got {policy.alpha}")
    if policy.repetitions < 1 or policy.warmup < 0:
        raise fail(source, "gate.repetitions", "repetitions must be ≥ 1 and warmup ≥ 0")
    if policy.history_runs < 1 or not 1 <= policy.min_history_runs <= policy.history_runs:
        raise fail(
            source,
            "gate.min_history_runs",
            f"need 1 ≤ min_history_runs ({policy.min_history_runs}) ≤ history_runs ({policy.history_runs})",
        )
    if policy.bootstrap_resamples < 100:
        raise fail(source, "gate.bootstrap_resamples", f"must be ≥ 100, got {policy.bootstrap_resamples}")
    if policy.looks < 1 or policy.max_repetitions < policy.repetitions:
        raise fail(source, "gate.looks", "need looks ≥ 1 and max_repetitions ≥ repetitions")
    if not 0.5 <= policy.pass_probability < 1 or not 0 <= policy.remeasure <= 1:
        raise fail(source, "gate.pass_probability", "need 0.5 ≤ pass_probability < 1 and 0 ≤ remeasure ≤ 1")
    return policy
