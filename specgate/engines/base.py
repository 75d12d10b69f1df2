"""The engine protocol, its optional capabilities, and the records an engine returns.

An engine runs requests in one *arm* (a `specgate.plan.Arm`: an engine configuration) and returns one
`RequestTrace` per request: raw timestamps and token counts, never derived metrics. Metrics are computed from
traces in `specgate.measure.metrics`, so every engine is measured the same way.

Optional capabilities are small protocols an engine may also satisfy, checked with `isinstance`:
`ExplainsDivergences` (the target's logit margin at a divergence), `SamplesOutputs` (seeded sampled outputs for
the distribution test), `ScoresPerplexity` (perplexity on long documents, the ladder's), `ServedEngine` (what a
served endpoint reported about each run), `RenewsInstances` (an engine that keeps one instance per arm
configuration alive and can start new ones: the measurement treats the instance as a random effect),
`StartsInstances` (an engine whose instances start while it measures: the progress lines say so) and
`ServesFromElsewhere` (servers the gate did not start: their CPU cannot be told from other work's).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from specgate.config import HardwareProfile, WorkloadConfig
    from specgate.hardware.backends import HardwareBackend
    from specgate.models import ResolvedModel
    from specgate.plan import Arm


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request of a workload. `text` is the user message; `reference` the expected answer, if any."""

    id: str
    text: str
    max_new_tokens: int
    reference: str | None = None
    system: str | None = None


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """What happened to one request in one arm.

    Times are `time.perf_counter()` seconds; `done_s` is when the response was complete. `chunk_times_s[i]` is
    when the i-th streamed chunk arrived and `chunk_tokens[i]` how many tokens it carried (with speculation a chunk
    may carry several). `drafted[k]` and `accepted[k]` are the draft tokens proposed and accepted in verification
    step k, when the engine reports them per request; both are empty for plain decoding or when only run totals
    exist (see `SpecCounters`). `draft_s[k]` is how long step k's draft (or n-gram lookup) took, where the engine
    times it (the cost model in `specgate.measure.stepcosts`); empty otherwise.
    `error` is set, and the rest may be empty, when the request failed: a failed request is never dropped.

    Where the engine can tell (one request in flight at a time), `cpu_ttft_s` and `cpu_e2el_s` are the CPU seconds
    its compute threads spent between submit and the first and the last chunk (time that a busy machine does not
    stretch the way it stretches wall time), `wait_s` how long those threads waited in the run queue for a CPU
    between submit and done (how much other work on the machine delayed the request), and `instance` names the
    engine instance (a server process, a loaded engine) that served it, for comparisons that treat the instance as
    a random effect.
    """

    prompt_id: str
    arm: str
    repetition: int
    submit_s: float
    chunk_times_s: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    output_ids: tuple[int, ...]
    output_text: str
    prompt_tokens: int
    drafted: tuple[int, ...] = ()
    accepted: tuple[int, ...] = ()
    done_s: float = 0.0
    draft_s: tuple[float, ...] = ()
    finish_reason: str | None = None
    error: str | None = None
    cpu_ttft_s: float | None = None
    cpu_e2el_s: float | None = None
    wait_s: float | None = None
    instance: str = ""

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def ok(self) -> bool:
        return self.error is None and len(self.chunk_times_s) > 0


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """The latency metrics of one completed request, in milliseconds and tokens per second."""

    prompt_id: str
    repetition: int
    output_tokens: int
    ttft_ms: float
    e2el_ms: float
    tpot_ms: float | None
    itl_ms: tuple[float, ...]

    @property
    def decode_tokens_per_s(self) -> float | None:
        return None if not self.tpot_ms else 1000.0 / self.tpot_ms

    @property
    def effective_tokens_per_s(self) -> float:
        return 1000.0 * self.output_tokens / self.e2el_ms if self.e2el_ms > 0 else 0.0


def request_metrics(trace: RequestTrace) -> RequestMetrics | None:
    """Metrics of one request, or None when it failed or produced nothing."""
    if not trace.ok:
        return None
    times = trace.chunk_times_s
    ttft_ms = 1000.0 * (times[0] - trace.submit_s)
    e2el_ms = 1000.0 * (times[-1] - trace.submit_s)
    tokens = trace.output_tokens
    tpot_ms = (e2el_ms - ttft_ms) / (tokens - 1) if tokens > 1 else None
    itl_ms = tuple(1000.0 * (b - a) for a, b in itertools.pairwise(times))
    return RequestMetrics(trace.prompt_id, trace.repetition, tokens, ttft_ms, e2el_ms, tpot_ms, itl_ms)


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Run totals of speculation as the engine counts them (e.g. vLLM's spec-decode counters, as deltas)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ArmRun:
    """The traces of one call of `Engine.run` for one arm, with the wall time it took. `pressure_s` is how long, during
    the call, some task on the machine was waiting for a CPU (Linux pressure stall information, `some`), `steal_s` the
    CPU time the hypervisor gave to other guests, `others_s` the CPU time processes other than the gate and its
    servers used (divided by the number of CPUs); None where the machine does not tell. `spans` are the (start, end)
    `perf_counter` times the arm ran in when it shared its call's time with other arms (lockstep, `RunsInLockstep`;
    `wall_s` is then their sum); empty when the call was the arm's alone."""

    arm: str
    traces: tuple[RequestTrace, ...]
    wall_s: float
    counters: SpecCounters | None = None
    pressure_s: float | None = None
    steal_s: float | None = None
    others_s: float | None = None
    spans: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True, slots=True)
class LoadShape:
    """How the requests of one engine call are offered (a workload's `concurrency` and `request_rate`).

    `concurrency` is the most requests in flight: 1 is latency mode (each request alone, so TTFT is the request's
    own and never time spent queueing behind the others), N is load mode. `request_rate` sends requests at seeded
    Poisson arrivals (requests/s) instead of as soon as a slot frees. Engines that take one request at a time are
    always in latency mode."""

    concurrency: int = 1
    request_rate: float | None = None

    @classmethod
    def of(cls, workload: WorkloadConfig) -> LoadShape | None:
        """A workload's load shape, or None when it sets none (the engine's default)."""
        if workload.concurrency is None and workload.request_rate is None:
            return None
        return cls(workload.concurrency or 1, workload.request_rate)

    def describe(self) -> str:
        if self.concurrency == 1 and self.request_rate is None:
            return "latency mode (one request at a time)"
        rate = "" if self.request_rate is None else f", Poisson arrivals at {self.request_rate:g}/s"
        return f"load mode (up to {self.concurrency} in flight{rate})"


def arrival_offsets(count: int, rate: float | None, seed: int, repetition: int) -> tuple[float, ...]:
    """When each request is due, in seconds from the start of the run: all at 0 without a rate, else Poisson."""
    if rate is None or count == 0:
        return (0.0,) * count
    import numpy as np

    gaps = np.random.default_rng([seed, repetition + 1]).exponential(1.0 / rate, size=count - 1)
    return (0.0, *(float(t) for t in np.cumsum(gaps)))


@runtime_checkable
class Engine(Protocol):
    """An inference engine that specgate can measure.

    `load` prepares every arm on the profile's device: `backend` is the profile's backend, its runtime already
    checked (the gate run resolves it once), or None for the engine to resolve and check it; `run` executes the
    prompts in one arm and returns their traces; `close` releases models and processes. `per_request` says whether
    `run` may be called with one prompt at a time (engines that batch, like vLLM, run a whole arm at once and are
    interleaved per round instead); such engines offer the call's requests as `load` says (None: the engine's own
    default, latency mode unless the pair's options say otherwise).
    `models(arm)` are the model files an arm runs, by role (`target`, `draft`), hashed for provenance;
    `cost_ratio(arm)` is c, the draft step's cost over the target step's (0 for n-gram lookup, None unknown).
    """

    name: str
    per_request: bool

    def load(self, arms: Sequence[Arm], hardware: HardwareProfile, backend: HardwareBackend | None = None) -> None: ...

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int, load: LoadShape | None = None) -> ArmRun: ...

    def versions(self) -> Mapping[str, str]: ...

    def models(self, arm: str) -> Mapping[str, ResolvedModel]: ...

    def cost_ratio(self, arm: str) -> float | None: ...

    def close(self) -> None: ...


@runtime_checkable
class ExplainsDivergences(Protocol):
    """The target's logit margin between two tokens after a prefix: explains where two outputs diverged."""

    def logit_margin(self, arm: str, prompt: Prompt, prefix: tuple[int, ...], token_a: int, token_b: int) -> float: ...


@runtime_checkable
class SamplesOutputs(Protocol):
    """Seeded sampled outputs of one prompt in one arm (the sampled-decoding distribution test)."""

    def sample(
        self,
        prompt: Prompt,
        arm: str,
        *,
        seeds: Sequence[int],
        max_new_tokens: int,
        temperature: float = 0.7,
        top_p: float = 0.95,
    ) -> list[tuple[int, ...]]: ...


@runtime_checkable
class ScoresPerplexity(Protocol):
    """Scores documents in one arm: per text, the summed negative log-likelihood of its tokens (after the first, up
    to `max_tokens`) and how many were scored, read through the arm's own weights and KV cache."""

    def perplexity(self, arm: str, texts: Sequence[str], *, max_tokens: int) -> list[tuple[float, int]]: ...


@runtime_checkable
class ServedEngine(Protocol):
    """A served endpoint's own account of each run (goodput, errors, its /metrics), and notes for the report."""

    served_runs: list[Any]
    notes: list[str]


@runtime_checkable
class ServesFromElsewhere(Protocol):
    """An engine that measures servers it did not start (`endpoints`: arm → URL), on this machine or another: their
    processes cannot be told from other work, so the CPU other processes took is not measured for its runs."""

    def endpoints(self) -> Mapping[str, str]: ...


@runtime_checkable
class RunsInLockstep(Protocol):
    """An engine that can run one prompt in several arms at once, the arms taking turns step by step, each timed
    on its own turns (`specgate.engines.lockstep`): a unit's arms are then milliseconds apart, not seconds, and what
    the machine does meanwhile falls on all of them alike. One `ArmRun` per arm, in the order asked. `lockstep`
    says whether it can on the loaded device: every arm's request is alive at once, so on an accelerator their
    memory would add up (and a per-arm peak would be the unit's)."""

    lockstep: bool

    def run_lockstep(self, prompt: Prompt, arms: Sequence[str], *, repetition: int) -> list[ArmRun]: ...


@runtime_checkable
class SwitchesOffSpeculation(Protocol):
    """An engine whose installed version can stop speculating past a batch size: the option's name, or None."""

    def speculation_switch_off(self) -> str | None: ...


@runtime_checkable
class RenewsInstances(Protocol):
    """An engine that serves each arm configuration from a long-lived instance (a server process).

    `renew(arms)` replaces the instances serving `arms` with new ones (one new instance per distinct instance: arms
    that share one keep sharing); the measurement calls it between rounds so that every arm is served by at least
    two instances and the instances' own differences enter the comparisons' intervals. `instance_notes()` says, in
    words, which arms shared an instance, how many instances each had, and what did not fit."""

    def renew(self, arms: Sequence[str]) -> None: ...

    def instance_notes(self) -> tuple[str, ...]: ...


@runtime_checkable
class StartsInstances(Protocol):
    """An engine that starts instances (server processes) while it measures, each start taking tens of seconds on a
    CPU and minutes for a large model on an accelerator. `announce`, when set, hears in words when one starts and
    when it is up; `setup_s` is the time spent so far starting instances and warming them up (not measuring: the
    progress estimate of the time left leaves it out). `ready(arm, prompts)` starts the arm's instance, warms it with
    the prompts and lets the machine settle after another instance's requests, so that a measured call of those
    prompts that follows only measures."""

    announce: Callable[[str], None] | None

    @property
    def setup_s(self) -> float: ...

    def ready(self, arm: str, prompts: Sequence[Prompt]) -> None: ...


@contextmanager
def announcing(engine: Engine, say: Callable[[str], None] | None) -> Iterator[float]:
    """While a measurement runs: an engine that starts instances tells `say` of each start; yields the engine's
    `setup_s` when it began (0 for other engines)."""
    if not isinstance(engine, StartsInstances):
        yield 0.0
        return
    engine.announce = say
    try:
        yield engine.setup_s
    finally:
        engine.announce = None


@runtime_checkable
class ArmsMayDiffer(Protocol):
    """An engine whose arms can answer differently beyond their configuration and model files (a test stand-in with
    behaviours of its own per arm): `answers_alike` says whether two arms give the same greedy outputs. For every
    other engine the same configuration with the same model files answers alike."""

    def answers_alike(self, arm: str, other: str) -> bool: ...
