"""FakeEngine: seeded synthetic traces for specgate's own tests of the gate logic.

It is never a default, never registered as an engine, and never used in `suites/`: it measures nothing real.
Latencies are drawn from seeded distributions around per-prompt means (`seed`: the run's timing noise); which draft
tokens are accepted is drawn per prompt and arm configuration from `content_seed` (like greedy decoding, the same
configuration accepts the same tokens in every run), so tests can inject exact slowdowns, acceptance drops or wrong
tokens and check that the gate sees them. Time is simulated: nothing sleeps.

Arms come from `load` (a plan's arms; speculative arms draft `speculation.num_tokens` tokens) or, without it, are
`ar` and `spec` with `behaviour.gamma`. `per_arm` gives an arm its own behaviour (a new draft, a slower build);
`slowdown` applies to the candidate's speculative arms, and an arm's own `slowdown` (`--inject-slowdown`) on top.
`batched=True` makes the engine run whole arms at once, as vLLM and served endpoints do; under a load of c requests
in flight the requests overlap (the call's wall time is the requests' sum over c) and every target step costs
`1 + batch_cost × (c − 1) × t` for the t tokens it verifies (plain decoding 1, speculation γ + 1): the spare compute
speculation lives on goes as the batch grows, so it stops paying past some concurrency.

Timing noise, as a shared machine makes it (all seeded): `noise_cv` per step; `request_cv` per request (every step
and the prefill of one request move together, as measured on real CPUs), Student-t with `noise_df` degrees of
freedom for heavy tails (None: lognormal); `drift` a slow sinusoidal change of the machine's speed (period
`drift_period_s` of simulated time) that every arm feels alike; `spike_share` of the requests meet interference,
which stretches a third of their steps and their prefill by `spike_factor` in wall time only (the engine waited for a
CPU: `wait_s`; its CPU time, `cpu_ttft_s` and `cpu_e2el_s`, does not grow); `instance_cv` an offset per engine
instance (each arm its own instance, as each arm its own server; without it, `shared_instances` or `renews`, all
arms name one instance; `restart(arm)` starts a new one), except arms
named together in `shared_instances`. With `renews=True` it is a `RenewsInstances` engine as the vLLM servers are:
the measurement renews the instances between rounds (`renew`), and `instance_notes` says how many each arm had.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgate.config import HardwareProfile
from specgate.engines.base import ArmRun, LoadShape, Prompt, RequestTrace
from specgate.hardware.backends import HardwareBackend
from specgate.plan import Arm


@dataclass(frozen=True, slots=True)
class FakeBehaviour:
    """What the fake engine simulates. `slowdown` multiplies every latency of the speculative candidate arms;
    `acceptance` is the probability that each draft token is accepted (a draft stops at its first rejection), and
    `draft` names the draft: another draft accepts other tokens, even at the same rate;
    `tail_share` of the requests (chosen per prompt and repetition, the same in every arm) take `tail_factor` times
    longer in the speculative candidate arms, and the others a little less, so that the mean is unchanged;
    `wrong_share` of the prompts (chosen per prompt, in any arm) get other tokens after the first (a quantized arm
    that answers worse); `perplexity` is what the arm scores on every document."""

    ttft_ms: float = 300.0
    tpot_ms: float = 20.0
    noise_cv: float = 0.05
    acceptance: float = 0.85
    gamma: int = 4
    draft_cost: float = 0.05
    slowdown: float = 1.0
    wrong_token_at: int | None = None
    fail_arm: str | None = None
    tail_share: float = 0.0
    tail_factor: float = 1.0
    draft: int = 0
    wrong_share: float = 0.0
    perplexity: float = 10.0
    request_cv: float = 0.0
    noise_df: float | None = None
    drift: float = 0.0
    drift_period_s: float = 600.0
    spike_share: float = 0.0
    spike_factor: float = 3.0
    instance_cv: float = 0.0
    batch_cost: float = 0.0


def _digest(text: str) -> int:
    """A stable number per prompt id (distinct ids give independent draws; a character sum would not)."""
    return zlib.crc32(text.encode())


class FakeEngine:
    """A seeded stand-in engine (tests only)."""

    name = "fake"

    def __init__(
        self,
        behaviour: FakeBehaviour | None = None,
        seed: int = 0,
        content_seed: int = 0,
        *,
        per_arm: Mapping[str, FakeBehaviour] | None = None,
        batched: bool = False,
        shared_instances: Sequence[Sequence[str]] = (),
        versions: Mapping[str, str] | None = None,
        renews: bool = False,
    ) -> None:
        self.behaviour = behaviour or FakeBehaviour()
        self.content_seed = content_seed
        self.per_arm = dict(per_arm or {})
        self.per_request = not batched
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._clock = 1000.0
        self._arms: dict[str, Arm] = {}
        self._shared = {arm: group[0] for group in shared_instances for arm in group}
        self._starts: dict[str, int] = {}
        self.starts: list[str] = []
        self._versions = dict(versions or {})
        self._renews = renews
        self._in_flight = 1

    def load(self, arms: Sequence[Arm], hardware: HardwareProfile, backend: HardwareBackend | None = None) -> None:
        self._arms = {arm.name: arm for arm in arms}

    def restart(self, arm: str) -> None:
        """A new instance for the arm (and the arms sharing its instance)."""
        owner = self._shared.get(arm, arm)
        self._starts[owner] = self._starts.get(owner, 0) + 1
        self.starts.append(owner)

    def renew(self, arms: Sequence[str]) -> None:
        """New instances for `arms`, one per distinct instance (with `renews=True`; otherwise instances live on)."""
        if self._renews:
            for owner in dict.fromkeys(self._shared.get(arm, arm) for arm in arms):
                self.restart(owner)

    def instance_notes(self) -> tuple[str, ...]:
        if not self._renews:
            return ()
        groups: dict[str, list[str]] = {}
        for arm in self._arms:
            groups.setdefault(self._shared.get(arm, arm), []).append(arm)
        return tuple(
            f"{'+'.join(arms)}: {self._starts.get(owner, 0) + 1} instance(s)"
            + (" (the same configuration: one instance serves them all)" if len(arms) > 1 else "")
            for owner, arms in groups.items()
        )

    def _instance(self, arm: str) -> tuple[str, float]:
        owner = self._shared.get(arm, arm)
        start = self._starts.get(owner, 0)
        cv = self._behaviour(arm).instance_cv
        if not cv and not self._renews and not self._shared:  # no instance effect simulated: one engine instance
            return "fake#0", 1.0
        offset = float(np.random.default_rng([self._seed, _digest(owner), start, 3]).lognormal(0.0, cv)) if cv else 1.0
        return f"{owner}#{start}", offset

    def _request_factor(self, b: FakeBehaviour) -> float:
        drift = 1.0 + b.drift * float(np.sin(2 * np.pi * self._clock / b.drift_period_s)) if b.drift else 1.0
        if not b.request_cv:
            return drift
        z = self._rng.standard_t(b.noise_df) if b.noise_df else self._rng.standard_normal()
        return drift * float(np.exp(b.request_cv * z))

    def _behaviour(self, arm: str) -> FakeBehaviour:
        return self.per_arm.get(arm, self.behaviour)

    def answers_alike(self, arm: str, other: str) -> bool:
        """Arms of one behaviour answer alike (`ArmsMayDiffer`): a behaviour of its own stands for another model."""
        return self._behaviour(arm) == self._behaviour(other)

    def _gamma(self, arm: str) -> int:
        known = self._arms.get(arm)
        if known is None:
            return self._behaviour(arm).gamma if arm != "ar" else 0
        return 0 if known.speculation is None else known.speculation.num_tokens

    def _factor(self, arm: str) -> float:
        known = self._arms.get(arm)
        candidate_speculative = arm == "spec" if known is None else (known.speculative and not known.reference)
        injected = 1.0 if known is None else 1.0 + known.slowdown
        return (self._behaviour(arm).slowdown if candidate_speculative else 1.0) * injected

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int, load: LoadShape | None = None) -> ArmRun:
        start = self._clock
        self._in_flight = 1 if load is None or self.per_request else load.concurrency
        traces = tuple(self._one(p, arm, repetition) for p in prompts)
        return ArmRun(arm, traces, (self._clock - start) / min(self._in_flight, max(1, len(prompts))))

    def _one(self, prompt: Prompt, arm: str, repetition: int) -> RequestTrace:
        b = self._behaviour(arm)
        submit = self._clock
        if arm == b.fail_arm:
            self._clock += 0.01
            error = "RuntimeError: injected failure"
            return RequestTrace(prompt.id, arm, repetition, submit, (), (), (), "", 10, done_s=self._clock, error=error)
        digest = _digest(prompt.id)
        base = 1.0 + (digest % 7) / 10  # per-prompt difficulty, fixed across runs
        instance, offset = self._instance(arm)
        factor = self._factor(arm) * offset * self._request_factor(b)
        factor *= 1 + b.batch_cost * (self._in_flight - 1) * (self._gamma(arm) + 1)
        if b.tail_share and self._tail_arm(arm):
            # the tail takes tail_factor times longer and the other requests a little less: the mean stays
            keep_mean = (1 - b.tail_share * b.tail_factor) / (1 - b.tail_share)
            factor *= b.tail_factor if self._in_tail(prompt, repetition, b) else keep_mean
        spiked = bool(b.spike_share) and self._rng.random() < b.spike_share
        # Which draft tokens are accepted depends on the content (prompt and configuration), not on the run: as with
        # greedy decoding, two runs of the same configuration accept exactly the same tokens.
        content = np.random.default_rng([self.content_seed, b.draft, digest])
        prefill = b.ttft_ms * base * factor * self._noise(b) / 1000
        stretch = (b.spike_factor - 1.0) if spiked else 0.0
        waited = prefill * stretch
        cpu = [prefill]
        times = [submit + prefill + waited]
        speculative = self._gamma(arm) > 0
        # one (drafted, accepted, draft time) per streamed chunk, as the transformers engine reports them
        sizes, drafted, accepted, draft_s = [1], [0] * speculative, [0] * speculative, [0.0] * speculative
        ids = [self._token(prompt, 0)]
        while len(ids) < prompt.max_new_tokens:
            gamma = min(self._gamma(arm), prompt.max_new_tokens - len(ids) - 1)
            if gamma > 0:
                hits = content.random(gamma) < b.acceptance
                n = gamma if hits.all() else int(np.argmin(hits))
                target_ms = b.tpot_ms * base * factor * self._noise(b)
                step, emitted = (1 + gamma * b.draft_cost) * target_ms, n + 1
                drafted.append(gamma)
                accepted.append(n)
                draft_s.append(gamma * b.draft_cost * target_ms / 1000)
            else:
                step, emitted = b.tpot_ms * base * factor * self._noise(b), 1
                if speculative:
                    drafted.append(0)
                    accepted.append(0)
                    draft_s.append(0.0)
            for _ in range(emitted):
                ids.append(self._token(prompt, len(ids), b, speculative=speculative))
            extra = step * stretch if spiked and self._rng.random() < 1 / 3 else 0.0
            waited += extra / 1000
            cpu.append(cpu[-1] + step / 1000)
            times.append(times[-1] + (step + extra) / 1000)
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
            draft_s=tuple(draft_s),
            cpu_ttft_s=cpu[0],
            cpu_e2el_s=cpu[-1],
            wait_s=waited,
            instance=instance,
        )

    def _tail_arm(self, arm: str) -> bool:
        known = self._arms.get(arm)
        return arm == "spec" if known is None else (known.speculative and not known.reference)

    @staticmethod
    def _in_tail(prompt: Prompt, repetition: int, b: FakeBehaviour) -> bool:
        draw = np.random.default_rng([_digest(prompt.id), repetition + 7]).random()
        return bool(draw < b.tail_share)

    def _noise(self, b: FakeBehaviour) -> float:
        return float(self._rng.lognormal(0.0, b.noise_cv))

    @staticmethod
    def _token(prompt: Prompt, position: int, b: FakeBehaviour | None = None, *, speculative: bool = False) -> int:
        if speculative and b is not None and b.wrong_token_at == position:
            return 0
        shift = 0
        if b is not None and b.wrong_share and np.random.default_rng([_digest(prompt.id), 11]).random() < b.wrong_share:
            shift = 1
        return (_digest(prompt.id) * 31 + position * 7 + shift) % 1000 + 1

    def perplexity(self, arm: str, texts: Sequence[str], *, max_tokens: int) -> list[tuple[float, int]]:
        """Every document scores the arm's `perplexity` (one token per word)."""
        value = self._behaviour(arm).perplexity
        return [(float(np.log(value)) * n, n) for n in (min(len(t.split()), max_tokens) for t in texts)]

    def versions(self) -> Mapping[str, str]:
        """The engine's name, and the runtime versions a test gives it (another torch, say)."""
        return {"engine": "fake (tests only)", **self._versions}

    def models(self, arm: str) -> Mapping[str, Any]:
        return {}

    def cost_ratio(self, arm: str) -> float | None:
        return self._behaviour(arm).draft_cost if self._gamma(arm) > 0 else None

    def close(self) -> None:
        pass
