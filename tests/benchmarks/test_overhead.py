"""Harness overhead: the time specgate's own code takes inside the measured loop, per generated token, against the
time of a decoding step, on the real embedded pair.

specgate's code on the hot path is the streamer callback (`ChunkClock.put`: a timestamp and a count per chunk), the
step counter (`update_candidate_strategy`: two appends per verification step) and the cost model's stamps around the
draft or lookup (`get_candidates`: two clock reads and an append per step; its time is the wrapper's total less the
draft time it recorded). The benchmark wraps all three with a nanosecond clock and reports, per request, (time inside
them) / (the request's decoding time), then the ratio over all requests with a bootstrap 95 % interval. The wrappers'
own clock reads are counted too, so the figure is an upper bound. A benchmark, not a timed assertion: it prints the
figures (`pytest -s`); the test asserts only that the instrumented loop produced the same tokens as the plain one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgate.config import HardwareProfile, PairConfig, Speculation, WorkloadConfig
from specgate.engines.clocks import ChunkClock
from specgate.engines.transformers_engine import TransformersEngine
from specgate.measure.workloads import load_workload
from specgate.plan import pair_arms
from specgate.stats.bootstrap import bootstrap_ci

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[2]
HARDWARE = HardwareProfile(name="cpu", backend="cpu", device="cpu", threads=2)


@pytest.fixture(scope="module")
def pld_engine() -> Iterator[TransformersEngine]:
    engine = TransformersEngine(REPO)
    pair = PairConfig("bench", "embedded:smollm2-135m-instruct", Speculation("prompt_lookup", 3), dtype="float32")
    engine.load(pair_arms(pair, HARDWARE), HARDWARE)
    yield engine
    engine.close()


class _Spent:
    """Nanoseconds spent inside specgate's per-step code during one request."""

    def __init__(self) -> None:
        self.ns = 0
        self.stamps_ns = 0  # of which the cost model's stamps around the draft


def _timed(function: Any, spent: _Spent) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return function(*args, **kwargs)
        finally:
            spent.ns += time.perf_counter_ns() - start

    return wrapper


def _stamps(timed_get_candidates: Any, draft_s: list[float], spent: _Spent) -> Any:
    """The cost model's wrapper of `get_candidates`: its time less the draft time it recorded is its own cost."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return timed_get_candidates(*args, **kwargs)
        finally:
            own = time.perf_counter_ns() - start - round(draft_s[-1] * 1e9)
            spent.ns += own
            spent.stamps_ns += own

    return wrapper


def _instrumented(engine: TransformersEngine, spent: _Spent, monkeypatch: pytest.MonkeyPatch) -> None:
    """Time every call of the streamer callback, the step counter's wrapper and the cost model's stamps."""
    put = ChunkClock.put
    monkeypatch.setattr(ChunkClock, "put", lambda self, value: _timed(put, spent)(self, value))
    models = {id(setup.model): setup.model for setup in engine._arms.values()}
    for model in models.values():
        get = model._get_candidate_generator

        def get_generator(*args: Any, _get: Any = get, **kwargs: Any) -> Any:
            generator = _get(*args, **kwargs)
            generator.update_candidate_strategy = _timed(generator.update_candidate_strategy, spent)
            generator.get_candidates = _stamps(generator.get_candidates, engine._steps.draft_s, spent)
            return generator

        monkeypatch.setattr(model, "_get_candidate_generator", get_generator)


def test_harness_time_per_token_against_the_step_time(
    pld_engine: TransformersEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = REPO / "suites" / "workloads" / "doc_edit.jsonl"
    prompts = load_workload(WorkloadConfig("doc_edit", path, max_new_tokens=64, limit=8))
    plain = {p.id: pld_engine.run([p], "spec", repetition=0).traces[0].output_ids for p in prompts}
    spent = _Spent()
    _instrumented(pld_engine, spent, monkeypatch)
    ratios, stamp_ratios, per_token_us, outputs = [], [], [], {}
    for arm in ("ar", "spec"):
        for prompt in prompts:
            spent.ns = spent.stamps_ns = 0
            trace = pld_engine.run([prompt], arm, repetition=0).traces[0]
            decode_s = trace.chunk_times_s[-1] - trace.submit_s
            ratios.append(spent.ns / 1e9 / decode_s)
            stamp_ratios.append(spent.stamps_ns / 1e9 / decode_s)
            per_token_us.append(spent.ns / 1e3 / trace.output_tokens)
            if arm == "spec":
                outputs[prompt.id] = trace.output_ids
    ratio = float(np.mean(ratios))
    interval = bootstrap_ci(ratios, lambda x: float(np.mean(x)), n_boot=2000, seed=0)
    low, high = interval.low, interval.high
    print(
        f"\nharness overhead (specgate's per-step code / decoding time), {len(ratios)} requests of up to 64 tokens: "
        f"{ratio:.2e} (95% CI {low:.2e}–{high:.2e}); {float(np.mean(per_token_us)):.2f} µs per generated token; "
        f"of which the cost model's stamps {float(np.mean(stamp_ratios)):.2e}"
    )
    assert outputs == plain  # the instrumented harness leaves the generated tokens untouched
