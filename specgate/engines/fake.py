"""FakeEngine: seeded synthetic traces for specgate's own tests of the gate logic.

It is never a default and never used in `suites/`: it measures nothing real. Latencies are drawn from seeded
distributions around per-prompt means (`seed`: the run's timing noise); which draft tokens are accepted is drawn
per prompt from `content_seed` (like greedy decoding, the same configuration accepts the same tokens in every
run), so tests can inject exact slowdowns, acceptance drops or wrong tokens and check that the gate sees them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specgate.config import HardwareProfile, PairConfig
from specgate.engines.base import ArmRun, Prompt, RequestTrace


@dataclass(frozen=True, slots=True)
class FakeBehaviour:
    """What the fake engine simulates. `slowdown` multiplies every latency of the spec arm; `acceptance` is the
    probability that each draft token is accepted (a draft stops at its first rejection)."""

    ttft_ms: float = 300.0
    tpot_ms: float = 20.0
    noise_cv: float = 0.05
    acceptance: float = 0.85
    gamma: int = 4
    draft_cost: float = 0.05
    slowdown: float = 1.0
    wrong_token_at: int | None = None
    fail_arm: str | None = None


class FakeEngine:
    """A seeded stand-in engine (tests only). Time is simulated: no sleeping."""

    name = "fake"
    per_request = True

    def __init__(self, behaviour: FakeBehaviour | None = None, seed: int = 0, content_seed: int = 0) -> None:
        self.behaviour = behaviour or FakeBehaviour()
        self.content_seed = content_seed
        self._rng = np.random.default_rng(seed)
        self._clock = 1000.0
        self.cost_ratio: float | None = self.behaviour.draft_cost

    @property
    def arms(self) -> Sequence[str]:
        return ("ar", "spec")

    def load(self, pair: PairConfig, hardware: HardwareProfile) -> None:
        self.cost_ratio = self.behaviour.draft_cost

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int) -> ArmRun:
        start = self._clock
        traces = tuple(self._one(p, arm, repetition) for p in prompts)
        return ArmRun(arm, traces, self._clock - start)

    def _one(self, prompt: Prompt, arm: str, repetition: int) -> RequestTrace:
        b = self.behaviour
        submit = self._clock
        if arm == b.fail_arm:
            self._clock += 0.01
            return RequestTrace(
                prompt.id,
                arm,
                repetition,
                submit,
                (),
                (),
                (),
                "",
                10,
                done_s=self._clock,
                error="RuntimeError: injected failure",
            )
        digest = sum(map(ord, prompt.id))
        base = 1.0 + (digest % 7) / 10  # per-prompt difficulty, fixed across runs
        factor = b.slowdown if arm == "spec" else 1.0
        # Which draft tokens are accepted depends on the content (prompt and model), not on the run: as with greedy
        # decoding, two runs of the same configuration accept exactly the same tokens.
        content = np.random.default_rng([self.content_seed, digest])
        times = [submit + b.ttft_ms * base * factor * self._noise() / 1000]
        sizes, drafted, accepted = [1], [], []
        ids = [self._token(prompt, 0)]
        while len(ids) < prompt.max_new_tokens:
            gamma = min(b.gamma, prompt.max_new_tokens - len(ids) - 1) if arm == "spec" else 0
            if gamma > 0:
                hits = content.random(gamma) < b.acceptance
                n = gamma if hits.all() else int(np.argmin(hits))
                drafted.append(gamma)
                accepted.append(n)
                step, emitted = (1 + gamma * b.draft_cost) * b.tpot_ms * base * factor * self._noise(), n + 1
            else:
                step, emitted = b.tpot_ms * base * factor * self._noise(), 1
            for _ in range(emitted):
                ids.append(self._token(prompt, len(ids), arm))
            times.append(times[-1] + step / 1000)
            sizes.append(emitted)
        self._clock = times[-1] + 0.001
        return RequestTrace(
            prompt.id,
            arm,
            repetition,
            submit,
            tuple(times),
            tuple(sizes),
            tuple(ids),
            " ".join(map(str, ids)),
            10,
            tuple(drafted),
            tuple(accepted),
            done_s=self._clock,
            finish_reason="length",
        )

    def _noise(self) -> float:
        return float(self._rng.lognormal(0.0, self.behaviour.noise_cv))

    def _token(self, prompt: Prompt, position: int, arm: str = "ar") -> int:
        if arm == "spec" and self.behaviour.wrong_token_at == position:
            return 0
        return (sum(map(ord, prompt.id)) * 31 + position * 7) % 1000 + 1

    def versions(self) -> Mapping[str, str]:
        return {"engine": "fake (tests only)"}

    def close(self) -> None:
        pass
