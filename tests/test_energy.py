"""Energy attribution, cost and energy per 1k tokens, savings and the roofline: known answers on synthetic data,
then a whole gate run on the FakeEngine that shows them in verdict.json and the terminal."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import evaluation_of
from specgate.checks.resources import energy_check as check_energy_reported
from specgate.checks.resources import roofline_check as check_roofline_reported
from specgate.config import HardwareProfile, Speculation
from specgate.costs.energy import summarize_energy
from specgate.costs.roofline import (
    count_safetensors_parameters,
    estimate_parameters,
    load_model_facts,
    summarize_roofline,
)
from specgate.engines.base import ArmRun, Prompt, RequestTrace
from specgate.evaluation import evaluate
from specgate.hardware.telemetry import PowerReading, TelemetrySampler, TelemetrySummary
from specgate.measure.metrics import ArmSummary, summarize_arm
from specgate.measure.monitor import ArmMonitor, ArmObservation, Observation, window_energy_j
from specgate.measure.protocol import Measurement
from specgate.plan import two_arm_plan

CPU = HardwareProfile(name="cpu", backend="cpu", device="cpu", power_w=15.0, price_per_hour_usd=0.10)
SMOLLM2 = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
}


def _ramp(watts_per_s: float, until: int = 10) -> list[PowerReading]:
    """Power P(t) = watts_per_s × t sampled every second: its energy over [a, b] is watts_per_s × (b² − a²) / 2."""
    return [PowerReading(float(t), watts_per_s * t, None) for t in range(until + 1)]


# --- attribution of energy to time windows ---------------------------------------------------------------------


def test_power_is_integrated_over_each_window_only() -> None:
    readings = _ramp(10.0)
    assert window_energy_j(readings, [(1.0, 3.0)]) == pytest.approx(40.0)
    assert window_energy_j(readings, [(1.5, 2.5)]) == pytest.approx(5 * (2.5**2 - 1.5**2))
    assert window_energy_j(readings, [(1.0, 3.0), (6.0, 7.0)]) == pytest.approx(40.0 + 65.0)


def test_power_is_held_at_the_nearest_sample_outside_the_sampled_span() -> None:
    readings = [PowerReading(2.0, 50.0, None), PowerReading(4.0, 50.0, None)]
    assert window_energy_j(readings, [(0.0, 6.0)]) == pytest.approx(300.0)
    assert window_energy_j([PowerReading(1.0, 20.0, None)], [(5.0, 8.0)]) == pytest.approx(60.0)


def test_an_energy_counter_wins_over_power_samples() -> None:
    # counter 100 J/s, power readings deliberately wrong: the counter decides
    readings = [PowerReading(float(t), 1.0, 100.0 * t) for t in range(6)]
    assert window_energy_j(readings, [(0.5, 2.5), (4.0, 4.25)]) == pytest.approx(200.0 + 25.0)


def test_no_power_and_no_counter_gives_no_energy() -> None:
    assert window_energy_j([PowerReading(0.0, None, None), PowerReading(1.0, None, None)], [(0.0, 1.0)]) is None
    assert window_energy_j([], [(0.0, 1.0)]) is None


# --- the monitor around engine calls -------------------------------------------------------------------------------


class _Clock:
    def __init__(self, times: list[float]) -> None:
        self._times = iter(times)

    def perf_counter(self) -> float:
        return next(self._times)


class _Backend:
    name = "cpu"
    peak_memory = "this fake's peak per call"
    peak_is_lifetime = False

    def __init__(self, peaks: list[int]) -> None:
        self._peaks = iter(peaks)
        self.resets = 0

    def check_available(self) -> None:
        """Always there."""

    def torch_device(self) -> str:
        return "cpu"

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def reset_peak_memory(self) -> None:
        self.resets += 1

    def peak_memory_bytes(self) -> int | None:
        return next(self._peaks)


class _Sampler(TelemetrySampler):
    """A sampler whose readings are given: a power ramp of 10 W/s."""

    def __init__(self) -> None:
        super().__init__("nvidia-smi")

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> TelemetrySummary:
        return TelemetrySummary("nvidia-smi", 11, 50.0, 500.0, None, None, False, "")

    def power_readings(self) -> tuple[PowerReading, ...]:
        return tuple(_ramp(10.0))


def _run(arm: str, prompt: str) -> ArmRun:
    return ArmRun(arm, (RequestTrace(prompt, arm, 0, 0.0, (0.1,), (1,), (5,), "x", 10),), 1.0)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[list[float]], None]]:
    def install(times: list[float]) -> None:
        monkeypatch.setattr("specgate.measure.monitor.time", _Clock(times))

    yield install


def test_monitor_attributes_energy_and_peak_memory_to_each_arm(clock: Callable[[list[float]], None]) -> None:
    clock([1.0, 3.0, 4.0, 5.0, 6.0, 7.0])  # ar [1, 3], spec [4, 5], ar [6, 7]
    backend = _Backend([100, 300, 200])
    monitor = ArmMonitor(CPU, backend, sampler=_Sampler())
    for arm, prompt in (("ar", "p1"), ("spec", "p1"), ("ar", "p2")):
        monitor.before_run(arm)
        monitor.after_run(arm, _run(arm, prompt))
    observation = monitor.finish()
    ar, spec = observation.arms["ar"], observation.arms["spec"]
    assert (ar.calls, ar.observed_s, spec.calls, spec.observed_s) == (2, 3.0, 1, 1.0)
    assert ar.measured_energy_j == pytest.approx(40.0 + 65.0)
    assert spec.measured_energy_j == pytest.approx(45.0)
    assert (ar.peak_memory_bytes, spec.peak_memory_bytes, backend.resets) == (200, 300, 3)
    assert observation.peak_memory_by_prompt == {"p1": 300, "p2": 200}
    assert observation.telemetry == "nvidia-smi"
    assert monitor.finish() is observation


def test_missing_telemetry_tool_falls_back_to_none_and_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    hardware = HardwareProfile(name="gpu", backend="cpu", device="cpu", power_w=300.0, telemetry="nvidia-smi")
    monitor = ArmMonitor(hardware, _Backend([1, 1]))
    monitor.before_run("ar")
    monitor.after_run("ar", _run("ar", "p"))
    observation = monitor.finish()
    assert observation.telemetry == "none"
    assert "telemetry 'nvidia-smi' unavailable here" in observation.note
    assert "fell back to 'none'" in observation.note
    assert observation.arms["ar"].measured_energy_j is None


# --- cost and energy per 1k tokens, savings ----------------------------------------------------------------------


def _summaries(walls: dict[str, float], tokens: int = 500) -> dict[str, ArmSummary]:
    def run(arm: str, wall: float) -> ArmRun:
        trace = RequestTrace("p", arm, 0, 0.0, (0.1, 0.2), (1, tokens - 1), tuple(range(tokens)), "", 10)
        return ArmRun(arm, (trace,), wall)

    return {arm: summarize_arm(arm, [run(arm, wall)]) for arm, wall in walls.items()}


def _observation(energy: dict[str, float | None]) -> Observation:
    arms = {arm: ArmObservation(arm, 1, 10.0, joules, 2**30) for arm, joules in energy.items()}
    return Observation("rapl", arms, {}, None, "")


def test_energy_is_estimated_from_profile_power_when_nothing_was_measured() -> None:
    report = summarize_energy(
        _observation({"ar": None, "spec": None}), _summaries({"ar": 10.0, "spec": 7.0}), CPU, "ar", "spec"
    )
    ar = report.arms["ar"]
    assert ar.energy_estimated and report.estimated
    assert ar.energy_j == pytest.approx(15.0 * 10.0)
    assert ar.energy_per_1k_tokens_j == pytest.approx(150.0 / 500 * 1000)
    assert ar.cost_per_1k_tokens_usd == pytest.approx(0.10 * (10.0 / 3600) / 500 * 1000)
    assert ar.mean_power_w == 15.0
    assert "power_w 15 W" in ar.note
    assert ar.peak_memory_bytes == 2**30


def test_spec_arm_saving_is_negative_and_reads_like_the_field() -> None:
    report = summarize_energy(
        _observation({"ar": None, "spec": None}), _summaries({"ar": 10.0, "spec": 7.0}), CPU, "ar", "spec"
    )
    assert report.cost_saving == pytest.approx(-0.30)
    assert report.energy_saving == pytest.approx(-0.30)
    assert report.saving_text() == "cost -30 %, energy -30 % (estimated)"
    slower = summarize_energy(
        _observation({"ar": None, "spec": None}), _summaries({"ar": 10.0, "spec": 12.5}), CPU, "ar", "spec"
    )
    assert slower.cost_saving == pytest.approx(0.25)
    assert slower.saving_text().startswith("cost +25 %")


def test_measured_energy_is_used_and_not_marked_estimated() -> None:
    report = summarize_energy(
        _observation({"ar": 400.0, "spec": 300.0}), _summaries({"ar": 10.0, "spec": 7.0}), CPU, "ar", "spec"
    )
    assert not report.estimated
    assert report.arms["spec"].energy_per_1k_tokens_j == pytest.approx(600.0)
    assert report.arms["spec"].mean_power_w == pytest.approx(30.0)
    assert report.energy_saving == pytest.approx(-0.25)
    mixed = summarize_energy(
        _observation({"ar": 400.0, "spec": None}), _summaries({"ar": 10.0, "spec": 7.0}), CPU, "ar", "spec"
    )
    assert mixed.energy_saving is None  # a measured value against an estimate is no saving


def test_a_profile_without_price_or_power_reports_nothing_and_the_check_blocks() -> None:
    bare = HardwareProfile(name="bare", backend="cpu", device="cpu")
    report = summarize_energy(
        _observation({"ar": None, "spec": None}), _summaries({"ar": 10.0, "spec": 7.0}), bare, "ar", "spec"
    )
    assert report.arms["ar"].cost_per_1k_tokens_usd is None
    assert report.arms["ar"].energy_j is None
    assert report.saving_text() == "n/a"
    check = check_energy_reported(("pair", "long"), report)
    assert not check.passed
    assert "no price_per_hour_usd" in check.message
    assert not check_energy_reported(("pair", "long"), None).passed
    fine = summarize_energy(
        _observation({"ar": None, "spec": None}), _summaries({"ar": 10.0, "spec": 7.0}), CPU, "ar", "spec"
    )
    assert check_energy_reported(("pair", "long"), fine).passed


# --- roofline ------------------------------------------------------------------------------------------------------


def _safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    header = {name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]} for name, shape in shapes.items()}
    text = json.dumps({"__metadata__": {"format": "pt"}, **header}).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text)


def test_parameters_are_counted_in_safetensors_headers_or_estimated_from_config(tmp_path: Path) -> None:
    assert estimate_parameters(SMOLLM2) == 134_515_008  # SmolLM2-135M's published parameter count
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    facts = load_model_facts(tmp_path)
    assert (facts.parameters, facts.parameters_source) == (134_515_008, "estimated from config.json")
    assert (facts.num_layers, facts.num_kv_heads, facts.head_dim, facts.max_context_tokens) == (30, 3, 64, 8192)
    _safetensors(tmp_path / "model.safetensors", {"a": [10, 20], "b": [5]})
    assert count_safetensors_parameters(tmp_path) == 205
    assert load_model_facts(tmp_path).parameters_source == "counted in the safetensors headers"


def _measurement(prompt_tokens: int, tpot_s: float, tokens: int = 11) -> tuple[Measurement, dict[str, ArmSummary]]:
    times = tuple(0.5 + i * tpot_s for i in range(tokens))
    runs = {
        arm: (
            ArmRun(arm, (RequestTrace("p", arm, 0, 0.0, times, (1,) * tokens, (1,) * tokens, "", prompt_tokens),), 2),
        )
        for arm in ("ar", "spec")
    }
    plan = two_arm_plan("pair", "long", Speculation("prompt_lookup", 3))
    measurement = Measurement(plan, "cpu", "transformers", (Prompt("p", "x", tokens),), runs)
    return measurement, {arm: summarize_arm(arm, r) for arm, r in runs.items()}


def test_roofline_on_a_known_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    measurement, summaries = _measurement(prompt_tokens=1000, tpot_s=0.1)
    hardware = HardwareProfile(name="cpu", backend="cpu", device="cpu", memory_bandwidth_gb_s=30.0)
    roofline = summarize_roofline(tmp_path, hardware, "float32", "ar", measurement.runs["ar"], summaries)
    weights = 134_515_008 * 4
    kv = 2 * 30 * 3 * 64 * 4
    assert (roofline.weight_bytes, roofline.kv_bytes_per_token, roofline.mean_context_tokens) == (weights, kv, 1005)
    bound = 30e9 / (weights + kv * 1005)
    assert roofline.bound_tokens_per_s == pytest.approx(bound)
    assert roofline.fraction == pytest.approx(10.0 / bound)
    check = check_roofline_reported(("pair", "long"), roofline)
    assert check.passed
    assert f"{10.0 / bound:.1%} of the roofline {bound:.0f} tok/s" in check.message
    half = summarize_roofline(tmp_path, hardware, "bfloat16", "ar", measurement.runs["ar"], summaries)
    assert half.weight_bytes == weights / 2


def test_roofline_is_na_without_a_model_folder_and_then_blocks(tmp_path: Path) -> None:
    measurement, summaries = _measurement(prompt_tokens=100, tpot_s=0.1)
    hardware = HardwareProfile(name="cpu", backend="cpu", device="cpu", memory_bandwidth_gb_s=30.0)
    roofline = summarize_roofline(None, hardware, "float32", "ar", measurement.runs["ar"], summaries)
    assert roofline.bound_tokens_per_s is None and roofline.fraction is None
    assert roofline.note.startswith("n/a: the engine has no local model folder")
    check = check_roofline_reported(("pair", "long"), roofline)
    assert not check.passed and "n/a" in check.message
    no_bandwidth = HardwareProfile(name="x", backend="cpu", device="cpu")
    assert (
        "no memory_bandwidth_gb_s"
        in summarize_roofline(tmp_path, no_bandwidth, "float32", "ar", measurement.runs["ar"], summaries).note
    )
    assert (
        "cannot read" in summarize_roofline(tmp_path, hardware, "float32", "ar", measurement.runs["ar"], summaries).note
    )


# --- a whole gate run on the FakeEngine ----------------------------------------------------------------------------


def test_verdict_json_and_terminal_show_cost_energy_and_roofline(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    result = pytester.runpytest("suites/test_sla.py")
    result.stdout.fnmatch_lines(
        ["  cost $* → $* per 1k tok (ar → spec, -* %); energy * → * J per 1k tok (estimated, -* %); *roofline n/a"]
    )
    metrics = evaluation_of(json.loads((root / "reports" / "verdict.json").read_text()), "fake-pair", "docs")
    energy = metrics["energy"]
    assert set(energy["arms"]) == {"ar", "spec"}
    for arm in energy["arms"].values():
        assert arm["energy_estimated"] is True
        assert arm["cost_per_1k_tokens_usd"] > 0
        assert arm["energy_per_1k_tokens_j"] == pytest.approx(15.0 * arm["wall_s"] / arm["output_tokens"] * 1000)
        assert arm["peak_memory_bytes"] > 0
    assert energy["cost_saving"] < 0  # the healthy fake pair is faster with speculation
    assert metrics["roofline"]["fractions"] == {}
    assert metrics["roofline"]["note"].startswith("n/a")
    assert not math.isnan(energy["arms"]["ar"]["wall_s"])


def test_evaluation_without_a_monitor_has_no_energy() -> None:
    measurement, _ = _measurement(prompt_tokens=100, tpot_s=0.1)
    evaluation = evaluate(measurement)
    assert evaluation.energy is None and evaluation.roofline is None
