"""The gate's own error rates, by simulation: seeded FakeEngine trials of the reference-mode gate (the same planner,
protocol and checks the real gate runs), under the noise a busy shared runner makes.

    python scripts/gate_error_rates.py [--trials 1000] [--scenario aa-cpu …] [--request-cv 0.06] [--max-rounds 6]

Noise (every scenario): 10 % per-request timing noise (Student t with 5 degrees of freedom: heavy tails), a tenth
of the requests stretched 3× in wall time by interference (the engine waited for a CPU), a slow ±5 % drift of the
machine's speed; 8 prompts, 2 rounds first, then rounds sized by the planner up to 40 (80 in wall time).
Scenarios:

- aa-cpu, aa-wall: candidate = reference configuration, judged in CPU time / wall time;
- slow5, slow10: the candidate 5 % / 10 % slower (`--inject-slowdown`);
- instance-aa: arms served by engine instances that differ by 3 % (vLLM servers), candidate = reference served by
  one instance (as the gate serves identical configurations);
- instance-slow10: the same instances, a 10 % slower candidate on its own instance, the profile's declared instance
  spread (3 %) folded into the interval.

Prints, per scenario, the share of trials that blocked for any reason, that ended REGRESSED, and the rounds used.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specgate.checks import reference_key
from specgate.checks.beside import beside
from specgate.checks.levels import family_size, looks_of
from specgate.checks.regression import Levels
from specgate.checks.sequential import stop_rule
from specgate.checks.subject import Subject
from specgate.config import GatePolicy, SlaLimits, Speculation
from specgate.engines.base import Prompt
from specgate.engines.fake import FakeBehaviour, FakeEngine
from specgate.measure.protocol import measure_plan
from specgate.measure.samples import arm_samples, probe_samples
from specgate.plan import Arm, MeasurementPlan
from specgate.store.records import RunRecord

LATENCY = ("ttft_ms", "tpot_ms", "e2el_ms", "p99_ttft_ms", "speedup")
BUSY = FakeBehaviour(noise_cv=0.02, request_cv=0.10, noise_df=5, spike_share=0.1, spike_factor=3.0, drift=0.05)
POLICY = GatePolicy(repetitions=2, max_repetitions=40, warmup=0, ttft_probes=3, looks=3)
PROMPTS = tuple(Prompt(f"doc-{i}", "text", max_new_tokens=48) for i in range(8))


@dataclasses.dataclass(frozen=True)
class Scenario:
    behaviour: FakeBehaviour
    slowdown: float = 0.0
    clock: str = "auto"
    shared: bool = False
    instance_spread: float = 0.0
    max_rounds: int = 40


SCENARIOS = {
    "aa-cpu": Scenario(BUSY),
    "aa-wall": Scenario(BUSY, clock="wall", max_rounds=80),
    "slow5": Scenario(BUSY, slowdown=0.05),
    "slow10": Scenario(BUSY, slowdown=0.10),
    "instance-aa": Scenario(dataclasses.replace(BUSY, instance_cv=0.03), shared=True, instance_spread=0.03),
    "instance-slow10": Scenario(dataclasses.replace(BUSY, instance_cv=0.03), slowdown=0.10, instance_spread=0.03),
}


def plan(slowdown: float) -> MeasurementPlan:
    pld = Speculation("prompt_lookup", 4)
    arms = (
        Arm("ar", "ar", "fake", False, "model", None, "float32"),
        Arm("spec", "spec", "fake", False, "model", pld, "float32", slowdown=slowdown),
        Arm("ref-spec", "spec", "released", True, "model", pld, "float32"),
    )
    return MeasurementPlan(
        "fake", "w", arms, (("spec", "ar"), ("ref-spec", "ar")), beside=(("spec", "ref-spec"),), reference="released"
    )


def trial(scenario: Scenario, seed: int) -> tuple[list[str], int]:
    """The outcomes of the latency comparisons beside the reference, and the rounds the planner measured."""
    shape = plan(scenario.slowdown)
    shared = [("spec", "ref-spec")] if scenario.shared else []
    engine = FakeEngine(scenario.behaviour, seed=seed, shared_instances=shared)
    engine.load(shape.arms, None)  # type: ignore[arg-type]
    policy = dataclasses.replace(POLICY, clock=scenario.clock, max_repetitions=scenario.max_rounds)
    sla = SlaLimits(instance_spread=scenario.instance_spread)
    family = family_size([(shape, True)])
    stop = stop_rule(shape, "cpu", sla, policy, family, len(PROMPTS), policy.ttft_probes)
    measurement = measure_plan(engine, shape, PROMPTS, policy, hardware="cpu", stop=stop, probes=policy.ttft_probes)
    arms = {arm: arm_samples(runs) for arm, runs in measurement.runs.items()}
    probes = {arm: probe_samples(runs) for arm, runs in measurement.probes.items()}
    record = RunRecord("cpu", "fake", "w", arms, probes=probes)
    subject = Subject(shape, record, None, "", sla, len(PROMPTS), measurement.rounds)
    results = beside(subject, policy, Levels(policy.alpha, looks_of(policy, True), family), "")
    outcomes = [getattr(results.get(reference_key(m)), "details", {}).get("outcome", "ERROR") for m in LATENCY]
    return outcomes, measurement.rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--request-cv", type=float, help="per-request timing noise instead of 0.10")
    parser.add_argument("--max-rounds", type=int, help="the round budget (gate.max_repetitions) instead of 40 (80)")
    args = parser.parse_args()
    for name in args.scenario or list(SCENARIOS):
        started = time.perf_counter()
        blocked = regressed = rounds = 0
        scenario = SCENARIOS[name]
        if args.request_cv is not None:
            behaviour = dataclasses.replace(scenario.behaviour, request_cv=args.request_cv)
            scenario = dataclasses.replace(scenario, behaviour=behaviour)
        if args.max_rounds is not None:
            scenario = dataclasses.replace(scenario, max_rounds=args.max_rounds)
        for seed in range(args.trials):
            outcomes, used = trial(scenario, seed)
            blocked += any(o != "PASS" for o in outcomes)
            regressed += "BLOCK" in outcomes
            rounds += used
        n = args.trials
        print(
            f"{name:16s} {n} trials: any BLOCK {blocked / n:6.1%}  REGRESSED {regressed / n:6.1%}  "
            f"rounds {rounds / n:5.1f} on average  ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
