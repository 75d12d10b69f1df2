"""Arms, measurement plans and the comparisons between arms: what one pair × workload measures, as data.

An *arm* is a named engine configuration: a target model, speculation (or none), dtype and engine options. A
pair contributes its arms (`ar`, `spec` and any declared under `arms:`); in reference mode (the pair names a
`reference:` pair, or `--reference` is given) the reference pair's arms join as `ref-<name>`, so that the
configuration released today is measured beside the candidate, on the same prompts, in the same run.

A *plan* is the arms of one pair × workload, the order in which they are interleaved, and the comparisons to
make: each speculative arm against its plain-decoding arm (the speedup), and in reference mode each candidate arm
against the reference arm of the same name (the regression). `ar`/`spec` is the default plan, not a special case:
a third arm declared in `specgate.yaml` is measured, summarized, compared and reported with no code change.

Arms whose configuration is the same are measured once: when the reference's plain-decoding arm equals the
candidate's (same target, dtype and options), `ar` serves both. The arms compared with each other are measured
separately (an A/A comparison of one arm's timings with themselves would prove nothing), except on an accuracy probe
(a workload that gates no speed), where a reference arm of the same configuration and model files would repeat the
candidate's greedy outputs token for token (`twins`; `specgate.measuring.same_answers`): it is measured once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specgate.config import REFERENCE_PREFIX, ArmSpec, HardwareProfile, PairConfig, ProjectConfig, Speculation
from specgate.config.optimisation import LadderLimits, Optimisation
from specgate.config.parallel import ParallelLayout, layout_of
from specgate.errors import ConfigError

PLAIN = "ar"
RELEASED = "spec"


@dataclass(frozen=True, slots=True)
class Arm:
    """One engine configuration to measure. `name` is unique within a plan; `variant` is the arm's name in its
    own pair (`ref-spec` is the variant `spec` of the reference pair). `slowdown` (the `--inject-slowdown`
    self-test) adds that fraction of every decode step's time, on this arm only."""

    name: str
    variant: str
    pair: str
    reference: bool
    target: str
    speculation: Speculation | None
    dtype: str
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    slowdown: float = 0.0
    optimisation: Optimisation = field(default_factory=Optimisation)
    parallel: ParallelLayout = field(default_factory=ParallelLayout)

    @property
    def speculative(self) -> bool:
        return self.speculation is not None

    def configuration(self) -> str:
        """What the arm measures, as a stable string: equal strings are the same measurement."""
        spec = None
        if self.speculation is not None:
            s = self.speculation
            spec = [s.method, s.num_tokens, s.draft, s.draft_layers, s.max_ngram, dict(s.options)]
        options = dict(self.engine_options)
        parts: list[Any] = [self.target, spec, self.dtype, options, self.slowdown]
        if self.optimisation.any:
            parts.append(self.optimisation.as_data())
        if not self.parallel.single:
            parts.append(self.parallel.describe())
        return json.dumps(parts, sort_keys=True, default=str)

    def describe(self) -> str:
        """e.g. "prompt_lookup γ=3, float32" or "plain decoding, bfloat16"."""
        if self.speculation is None:
            how = "plain decoding"
        else:
            s = self.speculation
            draft = (
                ""
                if s.method == "prompt_lookup"
                else f" draft {s.draft}" + (f" (first {s.draft_layers} layers)" if s.draft_layers else "")
            )
            how = f"{s.method} γ={s.num_tokens}{draft}"
        slow = f", INJECTED SLOWDOWN +{self.slowdown:.0%}" if self.slowdown else ""
        optimised = f", {self.optimisation.describe()}" if self.optimisation.any else ""
        parallel = "" if self.parallel.single else f", {self.parallel.describe()}"
        return f"{how}, {self.dtype}{optimised}{parallel}{slow}"


@dataclass(frozen=True, slots=True)
class LadderStep:
    """One rung of a ladder: `arm`, timed against the rung below it (`previous`; the first rung against full
    precision, the plan's plain arm) and judged on accuracy against full precision, within `limits`."""

    arm: str
    previous: str
    limits: LadderLimits


@dataclass(frozen=True, slots=True)
class MeasurementPlan:
    """The arms of one pair × workload and the comparisons between them.

    `speedups` pairs each speculative arm with the plain-decoding arm it is timed against; `beside` pairs each
    candidate arm with the reference arm it is judged against (reference mode only); `gated` lists the candidate
    arms whose SLA the gate checks (the speculative ones); `released` is the arm a PASS releases.
    """

    pair: str
    workload: str
    arms: tuple[Arm, ...]
    speedups: tuple[tuple[str, str], ...]
    beside: tuple[tuple[str, str], ...] = ()
    reference: str | None = None
    released: str = RELEASED
    notes: tuple[str, ...] = ()
    ladder: tuple[LadderStep, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arms)

    @property
    def plain(self) -> str:
        """The candidate's plain-decoding arm (the first arm)."""
        return self.arms[0].name

    @property
    def gated(self) -> tuple[str, ...]:
        timed = dict(self.speedups)
        return tuple(a.name for a in self.arms if a.speculative and not a.reference and a.name in timed)

    @property
    def compared(self) -> frozenset[str]:
        """The arms judged beside another arm (both sides of `beside`): those whose TTFT a comparison reads."""
        return frozenset(a for pair in self.beside for a in pair)

    @property
    def speedup_only(self) -> tuple[str, ...]:
        """In reference mode, the plain-decoding arms that only a speedup reads: no comparison beside the reference
        and no ladder rung (the plain arm the reference shares with the candidate). Their first round gives the
        speedup SLA and the outputs to reproduce; the rounds after it are for the comparisons beside the reference,
        whose speedup ratio needs no plain-decoding request (`specgate.checks.beside.beside_estimate`)."""
        if not self.beside:
            return ()
        plains = {plain for _, plain in self.speedups}
        rungs = {name for step in self.ladder for name in (step.arm, step.previous)}
        return tuple(a for a in self.names if a in plains and a not in self.compared and a not in rungs)

    def twins(self) -> dict[str, str]:
        """The reference arms that are the same configuration as the candidate arm beside them: {reference:
        candidate} (an A/A of the released configuration with itself)."""
        arm = self.arm
        return {ref: cand for cand, ref in self.beside if arm(cand).configuration() == arm(ref).configuration()}

    def without(self, names: Sequence[str]) -> MeasurementPlan:
        """The plan with the `names` arms and the comparisons that involve them left out."""
        from dataclasses import replace

        return replace(
            self,
            arms=tuple(a for a in self.arms if a.name not in names),
            speedups=tuple(p for p in self.speedups if not set(p) & set(names)),
            beside=tuple(p for p in self.beside if not set(p) & set(names)),
        )

    @property
    def candidates(self) -> tuple[Arm, ...]:
        return tuple(a for a in self.arms if not a.reference)

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(f"arm {name!r} is not in the plan of {self.pair}/{self.workload}: {', '.join(self.names)}")

    def baseline_of(self, name: str) -> str | None:
        """The plain-decoding arm a speculative arm is timed against, or None."""
        return dict(self.speedups).get(name)

    def order(self, round_index: int, prompt_index: int = 0, arms: Sequence[str] | None = None) -> tuple[str, ...]:
        """The arms (all, or the active `arms`) in the order they run for this prompt of this round: the rows of a
        Williams design taken in turn from one prompt and one round to the next, so that over a cycle of rows every
        arm runs in every position and right after every other arm equally often: slow drift of the machine and the
        cost of switching from one arm to another fall on every arm alike (two arms: ABBA)."""
        names = self.names if arms is None else tuple(a for a in self.names if a in arms)
        rows = williams(len(names))
        row = rows[(round_index + prompt_index) % len(rows)]
        return tuple(names[i] for i in row)


def williams(k: int) -> tuple[tuple[int, ...], ...]:
    """The rows of a Williams design for `k` treatments: a Latin square whose rows run 0, 1, k−1, 2, k−2, … shifted
    by one each, and for odd `k` its mirror too (every treatment follows every other one equally often)."""
    if k <= 1:
        return ((0,) * k,)
    first = [0]
    low, high = 1, k - 1
    while len(first) < k:
        first.append(low)
        low += 1
        if len(first) < k:
            first.append(high)
            high -= 1
    rows = [tuple((x + shift) % k for x in first) for shift in range(k)]
    if k % 2:
        rows += [tuple(reversed(r)) for r in rows]
    return tuple(rows)


def _arm(spec: ArmSpec, pair: PairConfig, hardware: HardwareProfile, *, reference: bool, slowdown: float) -> Arm:
    options = dict(pair.speculation.options)
    options.update(spec.options)
    return Arm(
        name=(REFERENCE_PREFIX + spec.name) if reference else spec.name,
        variant=spec.name,
        pair=pair.name,
        reference=reference,
        target=spec.target,
        speculation=spec.speculation,
        dtype=spec.dtype or hardware.dtype,
        engine_options=options,
        slowdown=slowdown,
        optimisation=spec.optimisation,
        parallel=layout_of(hardware.parallel, pair.parallel),
    )


def _speedups(arms: Sequence[Arm], shared_plain: dict[bool, str]) -> tuple[tuple[str, str], ...]:
    """Each speculative arm with the plain arm it is timed against and must reproduce: the plain arm of the same
    optimisation (a quantized arm with speculation against the quantized arm without), `ar` when it has none. A
    speculative arm with an optimisation and no such plain arm is judged by the ladder alone."""
    pairs = []
    for a in arms:
        if not a.speculative:
            continue
        if not a.optimisation.any:
            pairs.append((a.name, shared_plain[a.reference]))
            continue
        same = [p for p in arms if not p.speculative and p.reference == a.reference and _plain_of(p, a)]
        if same:
            pairs.append((a.name, same[0].name))
    return tuple(pairs)


def _plain_of(plain: Arm, arm: Arm) -> bool:
    return (plain.target, plain.dtype, plain.optimisation) == (arm.target, arm.dtype, arm.optimisation)


def build_plan(
    project: ProjectConfig,
    pair_name: str,
    workload_name: str,
    hardware: HardwareProfile,
    *,
    reference: str | None = None,
    slowdown: float = 0.0,
) -> MeasurementPlan:
    """The plan of a pair on a workload. `reference` is the reference pair (reference mode), or None."""
    pair = project.pairs[pair_name]
    candidates = [_arm(s, pair, hardware, reference=False, slowdown=0.0) for s in pair.arms]
    ladder = _ladder(pair)
    if reference is None:
        arms = [_with_slowdown(a, slowdown) for a in candidates]
        return MeasurementPlan(pair_name, workload_name, tuple(arms), _speedups(arms, {False: PLAIN}), ladder=ladder)
    if reference == pair_name:
        raise ConfigError(f"pair {pair_name!r} cannot be its own reference; name the released configuration's pair")
    released = project.pairs[reference]
    variants = {s.name: s for s in released.arms}
    shared = variants[PLAIN] is not None and _same(
        _arm(variants[PLAIN], released, hardware, reference=True, slowdown=0.0), candidates[0]
    )
    references = [
        _arm(variants[a.variant], released, hardware, reference=True, slowdown=0.0)
        for a in candidates
        if a.variant in variants and not (shared and a.variant == PLAIN)
    ]
    beside = tuple(
        (a.name, REFERENCE_PREFIX + a.variant) for a in candidates if any(r.variant == a.variant for r in references)
    )
    injected = {name for name, _ in beside}
    arms = [_with_slowdown(a, slowdown) if a.name in injected else a for a in candidates] + references
    plain = {False: PLAIN, True: PLAIN if shared else REFERENCE_PREFIX + PLAIN}
    notes = (f"{PLAIN}: the reference's plain decoding is the same configuration, measured once",) if shared else ()
    return MeasurementPlan(
        pair_name,
        workload_name,
        tuple(arms),
        _speedups(arms, plain),
        beside=beside,
        reference=reference,
        notes=notes,
        ladder=ladder,
    )


def _ladder(pair: PairConfig) -> tuple[LadderStep, ...]:
    previous, steps = PLAIN, []
    for step in pair.ladder:
        steps.append(LadderStep(step.arm, previous, step.limits))
        previous = step.arm
    return tuple(steps)


def _same(a: Arm, b: Arm) -> bool:
    return a.configuration() == b.configuration()


def _with_slowdown(arm: Arm, slowdown: float) -> Arm:
    if not slowdown:
        return arm
    from dataclasses import replace

    return replace(arm, slowdown=slowdown)


def engine_arms(plans: Sequence[MeasurementPlan]) -> tuple[Arm, ...]:
    """Every distinct arm of a pair's plans (what its engine must be able to run), in plan order."""
    seen: dict[str, Arm] = {}
    for plan in plans:
        for arm in plan.arms:
            known = seen.get(arm.name)
            if known is not None and known != arm:
                raise ConfigError(f"arm {arm.name!r} of pair {plan.pair!r} is configured twice differently")
            seen[arm.name] = arm
    return tuple(seen.values())


def two_arm_plan(
    pair: str,
    workload: str,
    speculation: Speculation,
    *,
    target: str = "model",
    dtype: str = "float32",
) -> MeasurementPlan:
    """The default plan, `ar` and `spec`, without a project config (for scripts and tests)."""
    arms = (
        Arm(PLAIN, PLAIN, pair, False, target, None, dtype),
        Arm(RELEASED, RELEASED, pair, False, target, speculation, dtype),
    )
    return MeasurementPlan(pair, workload, arms, ((RELEASED, PLAIN),))


def pair_arms(pair: PairConfig, hardware: HardwareProfile) -> tuple[Arm, ...]:
    """A pair's own arms (`ar`, `spec`, its extra arms), resolved against the profile (for scripts and tests)."""
    return tuple(_arm(s, pair, hardware, reference=False, slowdown=0.0) for s in pair.arms)
