"""Harness overhead: the bare transformers `generate` loop against the same requests through specgate's measurement.

A benchmark, not a timed assertion: pytest-benchmark prints both rows (group "overhead") and the ratio is printed
and stored in `extra_info`. The tests assert only that the harness leaves the generated tokens untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specgate.config import HardwareProfile, PairConfig, Speculation, WorkloadConfig
from specgate.engines.transformers_engine import TransformersEngine
from specgate.workloads import load_workload

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parents[2]
MEANS: dict[str, float] = {}


@pytest.fixture(scope="module")
def pld_engine() -> Iterator[TransformersEngine]:
    engine = TransformersEngine(REPO)
    hardware = HardwareProfile(name="cpu", backend="cpu", device="cpu", threads=2)
    engine.load(PairConfig("bench", "embedded:smollm2-135m-instruct", Speculation("prompt_lookup", 3)), hardware)
    yield engine
    engine.close()
    if len(MEANS) == 2:
        print(f"\nharness overhead: specgate / bare = {MEANS['specgate'] / MEANS['bare']:.4f}")


@pytest.fixture(scope="module")
def prompts() -> Any:
    path = REPO / "suites" / "workloads" / "doc_edit.jsonl"
    return load_workload(WorkloadConfig("doc_edit", path, max_new_tokens=32, limit=2))


def bare(engine: TransformersEngine, prompts: Any) -> list[list[int]]:
    """transformers' own generate: no streamer, and the step counter taken off the model for the duration."""
    model = engine._model
    counter = model.__dict__.pop("_get_candidate_generator")
    try:
        outputs = []
        for prompt in prompts:
            ids = engine._encode(prompt)
            out = engine._generate(ids, prompt.max_new_tokens, "spec", clock=None)
            outputs.append(out[0, ids.shape[1] :].tolist())
        return outputs
    finally:
        model._get_candidate_generator = counter


def measured(engine: TransformersEngine, prompts: Any) -> list[list[int]]:
    return [list(t.output_ids) for t in engine.run(prompts, "spec", repetition=0).traces]


@pytest.mark.benchmark(group="overhead")
def test_bare_generate_loop(benchmark: Any, pld_engine: TransformersEngine, prompts: Any) -> None:
    outputs = benchmark.pedantic(bare, args=(pld_engine, prompts), rounds=3, iterations=1, warmup_rounds=1)
    MEANS["bare"] = benchmark.stats.stats.mean
    assert outputs == measured(pld_engine, prompts)


@pytest.mark.benchmark(group="overhead")
def test_same_loop_through_specgate(benchmark: Any, pld_engine: TransformersEngine, prompts: Any) -> None:
    outputs = benchmark.pedantic(measured, args=(pld_engine, prompts), rounds=3, iterations=1, warmup_rounds=1)
    MEANS["specgate"] = benchmark.stats.stats.mean
    if "bare" in MEANS:
        benchmark.extra_info["overhead_ratio"] = MEANS["specgate"] / MEANS["bare"]
    assert outputs == bare(pld_engine, prompts)
