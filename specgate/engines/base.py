"""The engine protocol and the records an engine returns.

An engine runs requests for one *arm* (an engine configuration: speculation off, on, or any other variant) and
returns one `RequestTrace` per request: raw timestamps and token counts, never derived metrics. Metrics are
computed from traces in `specgate.metrics`, so every engine is measured the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from specgate.config import HardwareProfile, PairConfig


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
    exist (see `SpecCounters`).
    `error` is set, and the rest may be empty, when the request failed: a failed request is never dropped.
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
    finish_reason: str | None = None
    error: str | None = None

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def ok(self) -> bool:
        return self.error is None and len(self.chunk_times_s) > 0


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Run totals of speculation as the engine counts them (e.g. vLLM's spec-decode counters, as deltas)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ArmRun:
    """The traces of one call of `Engine.run` for one arm, with the wall time it took."""

    arm: str
    traces: tuple[RequestTrace, ...]
    wall_s: float
    counters: SpecCounters | None = None


@runtime_checkable
class Engine(Protocol):
    """An inference engine that specgate can measure.

    `load` prepares every arm of the pair on the profile's device; `run` executes the prompts in the given arm and
    returns their traces; `close` releases models and processes. `arms` lists the arm names the pair defines, the
    reference arm first. `per_request` says whether `run` may be called with one prompt at a time (engines that
    batch, like vLLM, run a whole arm at once and are interleaved per repetition instead).
    """

    name: str
    per_request: bool

    def load(self, pair: PairConfig, hardware: HardwareProfile) -> None: ...

    @property
    def arms(self) -> Sequence[str]: ...

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int) -> ArmRun: ...

    def versions(self) -> Mapping[str, str]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """Static facts about a loaded engine, recorded in reports and baselines."""

    engine: str
    versions: Mapping[str, str] = field(default_factory=dict)
    model_files: Mapping[str, str] = field(default_factory=dict)
