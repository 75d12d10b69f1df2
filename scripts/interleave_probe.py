"""How much of the candidate/reference spread is the host's: an A/A probe on the embedded pair.

The two arms of `smollm2-pld` that are the same configuration (`spec`, `ref-spec`) generate the same document
prompts, alternating in two ways, interleaved prompt by prompt so both ways see the same machine:
- per request (as the gate does today: one arm's request, then the other's, the order flipped every prompt);
- per decoding step: both requests run at once in two threads that pass a baton at every step (each streamer call),
  so only one computes at a time and each arm's time is the sum of the steps it held the baton.
It prints each paired log ratio and, per way, their mean and standard deviation: the spread the gate's interval has
to carry. A probe for the design of the measurement, not a test; uses the transformers engine's internals.

    python scripts/interleave_probe.py [prompts=8] [rounds=2]
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from specgate.measure.workloads import load_workload
from specgate.run import GateOptions, GateRun

MAX_NEW_TOKENS = 80


class Baton:
    """Whose turn it is to compute; a side that finished hands the turn over for good."""

    def __init__(self, first: int) -> None:
        self.cv = threading.Condition()
        self.turn = first
        self.done = [False, False]

    def wait(self, me: int) -> None:
        with self.cv:
            while self.turn != me and not self.done[1 - me]:
                self.cv.wait()

    def hand(self, me: int) -> None:
        with self.cv:
            if not self.done[1 - me]:
                self.turn = 1 - me
            self.cv.notify_all()

    def finish(self, me: int) -> None:
        with self.cv:
            self.done[me] = True
            self.turn = 1 - me
            self.cv.notify_all()


class HeldTime:
    """A streamer that hands the baton over at every step and sums the time its side held it."""

    def __init__(self, baton: Baton, me: int) -> None:
        self.baton, self.me, self.held, self.since = baton, me, 0.0, 0.0

    def start(self) -> None:
        self.baton.wait(self.me)
        self.since = time.perf_counter()

    def put(self, value: Any) -> None:
        self.held += time.perf_counter() - self.since
        self.baton.hand(self.me)
        self.baton.wait(self.me)
        self.since = time.perf_counter()

    def end(self) -> None:
        self.held += time.perf_counter() - self.since
        self.baton.finish(self.me)


def main(prompt_count: int, rounds: int) -> None:
    run = GateRun.from_options(
        GateOptions(config=Path("specgate.yaml"), hardware="cpu", pairs=("smollm2-pld",), workloads=("doc_edit",))
    )
    engine: Any = run.engine("smollm2-pld")
    arms = (engine._arm("spec"), engine._arm("ref-spec"))
    prompts = load_workload(run.workload("doc_edit"))[:prompt_count]

    def per_request(prompt: Any, first: int) -> list[float]:
        held = [0.0, 0.0]
        for side in (first, 1 - first):
            ids = engine._encode(arms[side], prompt)
            start = time.perf_counter()
            engine._generate(arms[side], ids, MAX_NEW_TOKENS, None)
            held[side] = time.perf_counter() - start
        return held

    def per_step(prompt: Any, first: int) -> list[float]:
        baton = Baton(first)
        clocks = [HeldTime(baton, 0), HeldTime(baton, 1)]

        def generate(side: int) -> None:
            ids = engine._encode(arms[side], prompt)
            clocks[side].start()
            engine._generate(arms[side], ids, MAX_NEW_TOKENS, clocks[side])

        threads = [threading.Thread(target=generate, args=(side,)) for side in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [clock.held for clock in clocks]

    ways = {"request": per_request, "step": per_step}
    per_request(prompts[0], 0)  # warm-up
    per_step(prompts[0], 0)
    ratios: dict[str, list[float]] = {way: [] for way in ways}
    for round_ in range(rounds):
        for k, prompt in enumerate(prompts):
            first = (k + round_) % 2
            for way in sorted(ways, reverse=k % 2 == 1):
                held = ways[way](prompt, first)
                ratios[way].append(math.log(held[0] / held[1]))
            line = "  ".join(f"{way} {ratios[way][-1] * 100:+.1f}%" for way in ways)
            print(f"round {round_ + 1}, prompt {k + 1}: {line}", flush=True)
    for way, values in ratios.items():
        mean, sd = statistics.mean(values) * 100, statistics.stdev(values) * 100
        print(f"alternating per {way}: n={len(values)}, mean log ratio {mean:+.2f}%, sd {sd:.2f}%")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8, int(sys.argv[2]) if len(sys.argv) > 2 else 2)
