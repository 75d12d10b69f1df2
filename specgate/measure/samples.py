"""Samples: one row per measured request, the form in which runs are compared and stored.

A `Sample` keeps what the regression comparisons read (TTFT, TPOT, E2EL, the request's wall time, the draft tokens
proposed and accepted, the output token ids) under the key `prompt#round`, the unit that pairs an arm's request with
the same request in another arm or another run. `ArmSamples` holds an arm's samples and the wall time of each of its
engine calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from specgate.engines.base import ArmRun, RequestTrace, request_metrics


@dataclass(frozen=True, slots=True)
class Sample:
    """One completed request of one arm. `wall_ms` is the request's own engine time: the whole engine call for
    engines that take one request at a time, submit to done for batching engines.

    Where the engine measures them: `cpu_ttft_ms`, `cpu_tpot_ms` and `cpu_e2el_ms` are the same latencies in the
    engine's CPU time (what a busy machine does not stretch), `wait_ms` how long the engine waited in the run queue
    for a CPU during the request (the interference it met), `steps` its decoding steps after the first token (target
    forward passes: the request's work, exact and repeatable under greedy decoding), `instance` the engine instance
    that served it and `attempt` how often the unit had been measured before (a unit re-measured after heavy
    interference keeps its earlier attempts in the record; comparisons read the last). `pressure_ms`, `steal_ms`
    and `others_ms` are the machine's CPU pressure, steal time and the CPU time other processes used (over the number
    of CPUs: `others_ms / wall_ms` is the share of the machine they took) during the request's engine call
    (one-request calls only).
    `drafted_at[i]` and `accepted_at[i]` count the request's verification steps that drafted, and that accepted, at
    least i + 1 tokens (per-position acceptance; empty where the engine reports only totals): they compare the
    acceptance of two draft lengths on the positions both draft."""

    key: str
    prompt_id: str
    repetition: int
    ttft_ms: float
    tpot_ms: float | None
    e2el_ms: float
    wall_ms: float
    output_tokens: int
    drafted: int
    accepted: int
    output_ids: tuple[int, ...]
    cpu_ttft_ms: float | None = None
    cpu_tpot_ms: float | None = None
    cpu_e2el_ms: float | None = None
    wait_ms: float | None = None
    steps: int | None = None
    instance: str = ""
    attempt: int = 0
    pressure_ms: float | None = None
    steal_ms: float | None = None
    others_ms: float | None = None
    drafted_at: tuple[int, ...] = ()
    accepted_at: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ArmSamples:
    """The samples of one arm and the wall time and key of each of its engine calls (units of the speedup)."""

    samples: tuple[Sample, ...]
    run_walls_s: tuple[float, ...]
    run_keys: tuple[str, ...]

    def values(self, metric: str) -> tuple[list[float], list[str]]:
        """Per-request values of a metric with their pairing keys (requests without the metric left out)."""
        pairs = [(getattr(s, metric), s.key) for s in self.samples if getattr(s, metric) is not None]
        return [float(v) for v, _ in pairs], [k for _, k in pairs]

    def latest(self) -> ArmSamples:
        """The samples of each unit's last attempt (a unit re-measured after heavy interference counts once)."""
        last = {s.key: s for s in self.samples}
        if len(last) == len(self.samples):
            return self
        return ArmSamples(tuple(last.values()), self.run_walls_s, self.run_keys)

    @property
    def remeasured(self) -> int:
        """How many samples were superseded by a later attempt of the same unit."""
        return len(self.samples) - len({s.key for s in self.samples})

    def by_key(self, metric: str) -> dict[str, float]:
        values, keys = self.values(metric)
        return dict(zip(keys, values, strict=True))

    @property
    def acceptance_rate(self) -> float | None:
        drafted = sum(s.drafted for s in self.samples)
        return sum(s.accepted for s in self.samples) / drafted if drafted else None

    @property
    def outputs(self) -> dict[str, tuple[int, ...]]:
        return {s.key: s.output_ids for s in self.samples}


def sample_key(prompt_id: str, repetition: int) -> str:
    return f"{prompt_id}#{repetition}"


def run_key(run: ArmRun, index: int) -> str:
    """prompt#round for a one-request engine call, `rep<round>` for a whole-arm call."""
    first = run.traces[0] if run.traces else None
    if len(run.traces) == 1 and first is not None:
        return sample_key(first.prompt_id, first.repetition)
    return f"rep{first.repetition if first else index}"


def arm_samples(runs: tuple[ArmRun, ...]) -> ArmSamples:
    """The samples of one arm's runs (failed requests are left out: they are counted by the samples check)."""
    samples = []
    attempts: dict[str, int] = {}
    for run in runs:
        single = len(run.traces) == 1
        for trace in run.traces:
            key = sample_key(trace.prompt_id, trace.repetition)
            attempt = attempts.get(key, -1) + 1
            attempts[key] = attempt
            metrics = request_metrics(trace)
            if metrics is None:
                continue
            wall_s = run.wall_s if single else trace.done_s - trace.submit_s
            # a run of one request whose engine counts only run totals (a server's /metrics): those totals are the
            # request's own drafted and accepted tokens
            counted = run.counters if single and not trace.drafted else None
            samples.append(
                Sample(
                    key=key,
                    prompt_id=trace.prompt_id,
                    repetition=trace.repetition,
                    ttft_ms=metrics.ttft_ms,
                    tpot_ms=metrics.tpot_ms,
                    e2el_ms=metrics.e2el_ms,
                    wall_ms=1000.0 * wall_s,
                    output_tokens=metrics.output_tokens,
                    drafted=sum(trace.drafted) if counted is None else counted.num_draft_tokens,
                    accepted=sum(trace.accepted) if counted is None else counted.num_accepted_tokens,
                    output_ids=trace.output_ids,
                    **_cpu_fields(trace, metrics.output_tokens),
                    wait_ms=_ms(trace.wait_s),
                    steps=len(trace.chunk_times_s) - 1,
                    instance=trace.instance,
                    attempt=attempt,
                    pressure_ms=_ms(run.pressure_s) if single else None,
                    steal_ms=_ms(run.steal_s) if single else None,
                    others_ms=_ms(run.others_s) if single else None,
                    drafted_at=at_least(trace.drafted),
                    accepted_at=at_least(trace.accepted),
                )
            )
    walls = tuple(run.wall_s for run in runs)
    return ArmSamples(tuple(samples), walls, tuple(run_key(run, i) for i, run in enumerate(runs)))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000.0 * seconds


def _cpu_fields(trace: RequestTrace, tokens: int) -> dict[str, float | None]:
    """The request's latencies in the engine's CPU time, where the engine measured them."""
    first, last = trace.cpu_ttft_s, trace.cpu_e2el_s
    if first is None or last is None:
        return {"cpu_ttft_ms": None, "cpu_tpot_ms": None, "cpu_e2el_ms": None}
    tpot = 1000.0 * (last - first) / (tokens - 1) if tokens > 1 else None
    return {"cpu_ttft_ms": 1000.0 * first, "cpu_tpot_ms": tpot, "cpu_e2el_ms": 1000.0 * last}


def probe_samples(runs: tuple[ArmRun, ...]) -> ArmSamples:
    """The samples of an arm's one-token TTFT probes, keyed prompt#round.turn (unique beside the full requests)."""
    turns: dict[tuple[str, int], int] = {}
    keyed = []
    for run in runs:
        samples = arm_samples((run,)).samples
        for sample in samples:
            turn = turns.get((sample.prompt_id, sample.repetition), 0)
            turns[(sample.prompt_id, sample.repetition)] = turn + 1
            keyed.append(replace(sample, key=f"{sample.key}.{turn}"))
    return ArmSamples(tuple(keyed), tuple(r.wall_s for r in runs), tuple(s.key for s in keyed))


def at_least(counts: Sequence[int]) -> tuple[int, ...]:
    """How many of the steps' counts are ≥ 1, ≥ 2, …, up to the largest: (3, 0, 2) → (2, 2, 1)."""
    return tuple(sum(1 for c in counts if c > i) for i in range(max(counts, default=0)))
