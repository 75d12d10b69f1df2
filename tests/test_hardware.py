"""Hardware profiles, backends, telemetry parsers and sampler, and the cost/energy arithmetic.

The parser tests run on real tool output recorded in tests/data/telemetry/ (SOURCES.md there says where each file
comes from) and assert the numbers printed in it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
import yaml

from specgate.errors import ConfigError, EngineUnavailableError
from specgate.hardware import backends, economics, telemetry
from specgate.hardware.backends import get_backend
from specgate.hardware.telemetry import (
    SOURCES,
    TelemetrySampler,
    estimate_missing_energy,
    rapl_delta_uj,
    read_rapl_energy_uj,
    trapezoid_energy_j,
)
from specgate.hardware.telemetry_parsers import parse_npu_smi_info, parse_npu_smi_power, parse_nvidia_smi_csv

DATA = Path(__file__).parent / "data" / "telemetry"
PROFILES = Path(__file__).parent.parent / "hardware"
MIB = 1024 * 1024

PROFILE_KEYS = {
    "name",
    "description",
    "backend",
    "device",
    "threads",
    "dtype",
    "engine",
    "memory_bandwidth_gb_s",
    "peak_tflops_bf16",
    "power_w",
    "price_per_hour_usd",
    "telemetry",
    "sla",
}
PRODUCTION_SLA = {
    "p99_ttft_ms": 800,
    "min_decode_tokens_per_s": 200,
    "min_speedup": 1.15,
    "max_drift": 0.003,
    "max_acceptance_drop": 0.05,
    "min_acceptance_rate": 0.5,
}
CPU_SLA = {**PRODUCTION_SLA, "p99_ttft_ms": 2500, "min_decode_tokens_per_s": 8, "instance_spread": 0.02}


# --- nvidia-smi -----------------------------------------------------------------------------------------------


def test_nvidia_smi_csv_with_header_and_units() -> None:
    samples = parse_nvidia_smi_csv((DATA / "nvidia_smi_h100x8_idle.csv").read_text())

    assert len(samples) == 24
    assert samples[0].timestamp == "2025/07/26 23:32:09.703"
    assert (samples[0].power_w, samples[0].utilization_pct, samples[0].memory_used_mib) == (69.32, 0.0, 132.0)
    assert (samples[1].power_w, samples[1].memory_used_mib) == (72.45, 17.0)
    assert samples[-1].power_w == 71.54
    first_frame_w = sum(s.power_w or 0.0 for s in samples[:8])
    assert first_frame_w == pytest.approx(572.03)


def test_nvidia_smi_csv_without_header_takes_the_query_columns() -> None:
    text = (DATA / "nvidia_smi_h100x8_load_noheader.csv").read_text()
    columns = ("timestamp", "power.draw", "utilization.gpu", "memory.used")

    samples = parse_nvidia_smi_csv(text, columns=columns)

    assert len(samples) == 24
    assert (samples[0].power_w, samples[0].utilization_pct, samples[0].memory_used_mib) == (569.03, 88.0, 41399.0)
    assert max(s.power_w or 0.0 for s in samples) == 580.92
    assert min(s.utilization_pct or 0.0 for s in samples) == 88.0


def test_nvidia_smi_csv_rejects_lines_that_do_not_match_the_query() -> None:
    text = (DATA / "nvidia_smi_h100x8_load_noheader.csv").read_text()

    with pytest.raises(ValueError, match="4 fields, expected 3"):
        parse_nvidia_smi_csv(text)  # the default query has three columns, the recording has four


def test_nvidia_smi_csv_not_available_fields_are_none() -> None:
    # Synthetic: nvidia-smi prints "[N/A]" for a property the board cannot report (e.g. power on some GeForce).
    (sample,) = parse_nvidia_smi_csv("[N/A], 7, 745\n")

    assert (sample.power_w, sample.utilization_pct, sample.memory_used_mib) == (None, 7.0, 745.0)


# --- npu-smi --------------------------------------------------------------------------------------------------


def test_npu_smi_info_idle_910b3() -> None:
    chips = parse_npu_smi_info((DATA / "npu_smi_info_910b3x8_idle.txt").read_text())

    assert [c.npu_id for c in chips] == list(range(8))
    assert {c.chip_id for c in chips} == {0}
    first = chips[0]
    assert (first.name, first.health, first.bus_id) == ("910B3", "OK", "0000:C1:00.0")
    assert (first.power_w, first.temp_c, first.aicore_pct) == (98.2, 41.0, 0.0)
    assert (first.hbm_used_mb, first.hbm_total_mb) == (3445, 65536)
    assert (first.memory_used_mb, first.memory_total_mb) == (0, 0)
    assert chips[5].power_w == 102.4
    assert chips[7].temp_c == 47.0


def test_npu_smi_info_loaded_910b3_ignores_the_process_table() -> None:
    chips = parse_npu_smi_info((DATA / "npu_smi_info_910b3x8_loaded.txt").read_text())

    assert len(chips) == 8
    assert [c.hbm_used_mb for c in chips] == [37705, 39053, 39072, 39072, 39053, 39053, 39073, 39053]
    assert [c.power_w for c in chips] == [94.6, 91.7, 88.1, 92.8, 93.3, 89.8, 92.6, 90.9]
    assert chips[3].bus_id == "0000:82:00.0"


def test_npu_smi_info_a3_two_chips_and_missing_power() -> None:
    chips = parse_npu_smi_info((DATA / "npu_smi_info_a3_excerpt.txt").read_text())

    assert [(c.npu_id, c.chip_id) for c in chips] == [(0, 0), (0, 1)]
    assert chips[0].name == "Ascend910"
    assert (chips[0].power_w, chips[1].power_w) == (162.6, None)
    assert [c.hbm_used_mb for c in chips] == [3419, 2874]


def test_npu_smi_power_reading() -> None:
    # No recorded `npu-smi info -t power` output was found (see SOURCES.md); this line is built with the format
    # string of npu-smi's own source: printf("\t%-30s : %.1f\n", "NPU Real-time Power(W)", power).
    text = f"\tNPU ID                         : 0\n\t{'NPU Real-time Power(W)':<30} : {94.6:.1f}\n"

    assert parse_npu_smi_power(text) == 94.6
    assert parse_npu_smi_power("\tNPU ID                         : 0\n") is None


# --- RAPL and integration -------------------------------------------------------------------------------------


def test_read_rapl_energy_from_domain_folder_or_file(tmp_path: Path) -> None:
    (tmp_path / "energy_uj").write_text("123456789\n")

    assert read_rapl_energy_uj(tmp_path) == 123456789
    assert read_rapl_energy_uj(tmp_path / "energy_uj") == 123456789
    with pytest.raises(OSError):
        read_rapl_energy_uj(tmp_path / "missing")


def test_rapl_delta_handles_wraparound() -> None:
    max_range = 262143328850  # a typical intel-rapl:0 max_energy_range_uj

    assert rapl_delta_uj(1_000, 5_000, max_range) == 4_000
    assert rapl_delta_uj(max_range - 100, 50, max_range) == 150


def test_trapezoid_energy() -> None:
    assert trapezoid_energy_j([0.0, 1.0, 3.0], [100.0, 200.0, 100.0]) == 450.0
    with pytest.raises(ValueError):
        trapezoid_energy_j([0.0], [100.0])


# --- economics ------------------------------------------------------------------------------------------------


def test_cost_per_1k_tokens() -> None:
    assert economics.cost_per_1k_tokens_usd(3.5, 3600.0, 1000) == pytest.approx(3.5)
    assert economics.cost_per_1k_tokens_usd(2.0, 36.0, 500) == pytest.approx(0.04)
    with pytest.raises(ValueError, match="output_tokens must be > 0"):
        economics.cost_per_1k_tokens_usd(2.0, 36.0, 0)


def test_energy_per_1k_tokens_and_estimate() -> None:
    assert economics.energy_per_1k_tokens_j(5000.0, 2000) == pytest.approx(2500.0)
    assert economics.estimated_energy_j(700.0, 10.0) == pytest.approx(7000.0)


def test_kv_cache_bytes_per_token_known_models() -> None:
    # Llama-2-7B: 32 layers, 32 KV heads of 128 in fp16 → 0.5 MiB per token; Llama-3-8B (GQA, 8 KV heads) → 128 KiB.
    assert economics.kv_cache_bytes_per_token(32, 32, 128, 2) == 512 * 1024
    assert economics.kv_cache_bytes_per_token(32, 8, 128, 2) == 128 * 1024
    assert economics.kv_cache_bytes_per_token(32, 8, 128, 0.5) == 32 * 1024


def test_roofline_decode_and_fraction() -> None:
    weights = 14e9  # 7B parameters in bf16
    kv = economics.kv_cache_bytes_per_token(32, 32, 128, 2)

    empty_context = economics.roofline_decode_tokens_per_s(weights, kv, 0, 2039)
    long_context = economics.roofline_decode_tokens_per_s(weights, kv, 4096, 2039)

    assert empty_context == pytest.approx(2039e9 / 14e9)
    assert long_context == pytest.approx(2039e9 / (14e9 + 4096 * 524288))
    assert economics.roofline_fraction(100.0, 200.0) == 0.5


def test_saving_is_a_signed_relative_change() -> None:
    assert economics.saving(1.0, 0.7) == pytest.approx(-0.30)
    assert economics.saving(2.0, 3.0) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        economics.saving(0.0, 1.0)


# --- profiles -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cpu", "a800", "h200", "ascend910b", "a800x8", "h200x8", "ascend910bx8"])
def test_profile_has_exactly_the_schema(name: str) -> None:
    profile = yaml.safe_load((PROFILES / f"{name}.yaml").read_text())

    assert set(profile) == PROFILE_KEYS | ({"parallel"} if name.endswith("x8") else set())
    assert profile["name"] == name
    assert profile["telemetry"] in SOURCES
    assert profile["engine"] in ("transformers", "vllm", "openai")
    for key in ("memory_bandwidth_gb_s", "peak_tflops_bf16", "power_w", "price_per_hour_usd"):
        assert isinstance(profile[key], (int, float)) and profile[key] > 0, key
    assert profile["sla"] == (CPU_SLA if name == "cpu" else PRODUCTION_SLA)
    get_backend(profile["backend"], profile["device"])  # device string fits the backend


def test_cpu_and_ascend_profile_specifics() -> None:
    cpu = yaml.safe_load((PROFILES / "cpu.yaml").read_text())
    npu = yaml.safe_load((PROFILES / "ascend910b.yaml").read_text())

    assert (cpu["threads"], cpu["dtype"], cpu["engine"], cpu["telemetry"]) == (1, "float32", "transformers", "rapl")
    assert (npu["backend"], npu["device"], npu["engine"], npu["telemetry"]) == ("npu", "npu:0", "vllm", "npu-smi")


# --- backends -------------------------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu is installed here")
def test_npu_backend_without_torch_npu_says_what_to_install() -> None:
    backend = get_backend("npu", "npu:0", profile="ascend910b")

    with pytest.raises(EngineUnavailableError, match=r"--hardware=ascend910b needs torch_npu.*--hardware=cpu"):
        backend.check_available()


def test_cuda_backend_on_cpu_torch_says_it_is_a_cpu_build() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is available here")
    backend = get_backend("cuda", "cuda:0", profile="h200")

    with pytest.raises(EngineUnavailableError, match=r"--hardware=h200 needs .*(CPU-only build|sees none)"):
        backend.check_available()


def test_get_backend_rejects_unknown_backend_and_mismatched_device() -> None:
    with pytest.raises(ConfigError, match=r"'cdua' is not known\. Did you mean 'cuda'\? Known: cpu, cuda, npu"):
        get_backend("cdua", "cuda:0")
    with pytest.raises(ConfigError, match="does not fit backend 'npu'"):
        get_backend("npu", "cuda:0")


def test_every_backend_name_the_config_accepts_has_a_class_that_takes_its_own_devices() -> None:
    import importlib
    import re

    from specgate.registry import backend_names, backend_spec

    assert backend_names() == ("cpu", "cuda", "npu")
    for name in backend_names():
        spec = backend_spec(name)
        module, _, cls = spec.factory.partition(":")
        assert isinstance(getattr(importlib.import_module(module), cls), type), spec.factory
        assert re.fullmatch(spec.device, name if spec.host else f"{name}:0"), (name, spec.device)


def test_cpu_backend_reports_peak_memory() -> None:
    import torch

    backend = get_backend("cpu", "cpu")
    backend.check_available()
    backend.reset_peak_memory()
    block = torch.ones(64 * MIB // 4, dtype=torch.float32)  # 64 MiB, touched by the fill
    backend.synchronize()

    peak = backend.peak_memory_bytes()

    assert backend.torch_device() == "cpu"
    assert peak is not None and peak >= 64 * MIB
    assert float(block[-1]) == 1.0
    if sys.platform == "linux":
        assert isinstance(backend, backends.CpuBackend) and backend.peak_is_lifetime is False


# --- sampler --------------------------------------------------------------------------------------------------


def test_sampler_rapl_summarizes_a_window() -> None:
    with TelemetrySampler("rapl", interval_s=0.01) as sampler:
        sum(i * i for i in range(200_000))
    summary = sampler.summary

    assert summary is not None and summary.source == "rapl"
    assert summary.samples >= 2
    assert summary.mean_utilization is not None and 0.0 <= summary.mean_utilization <= 1.0
    assert summary.estimated is False
    if sys.platform == "linux":
        assert summary.peak_memory_bytes is not None and summary.peak_memory_bytes > 0
    if summary.energy_j is None:
        assert "RAPL not readable" in summary.note and summary.mean_power_w is None


def test_sampler_none_and_estimated_energy() -> None:
    sampler = TelemetrySampler("none")
    sampler.start()
    summary = sampler.stop()

    assert (summary.samples, summary.energy_j, summary.mean_power_w) == (0, None, None)
    assert "off" in summary.note
    estimated = estimate_missing_energy(summary, power_w=15.0, wall_s=2.0)
    assert (estimated.energy_j, estimated.mean_power_w, estimated.estimated) == (30.0, 15.0, True)
    assert estimate_missing_energy(estimated, power_w=99.0, wall_s=9.0) is estimated


def test_sampler_rejects_unknown_source() -> None:
    with pytest.raises(ConfigError, match=r"'nvidia_smi' is not a known source\. Did you mean 'nvidia-smi'\?"):
        TelemetrySampler("nvidia_smi")


@pytest.mark.skipif(shutil.which("npu-smi") is not None, reason="npu-smi is installed here")
def test_sampler_without_the_vendor_tool_fails_at_start() -> None:
    sampler = TelemetrySampler("npu-smi")

    with pytest.raises(EngineUnavailableError, match="needs `npu-smi` on PATH"):
        sampler.start()


def _fake_tool(folder: Path, name: str, output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = folder / name
    script.write_text(f"#!/bin/sh\ncat '{output}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stands in for the vendor tool")
def test_sampler_nvidia_smi_on_recorded_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path, "nvidia-smi", DATA / "nvidia_smi_h100x8_idle.csv", monkeypatch)

    with TelemetrySampler("nvidia-smi", interval_s=0.01) as sampler:
        pass
    summary = sampler.summary

    assert summary is not None and summary.samples >= 2
    assert summary.mean_power_w == pytest.approx(69.32)  # first row of the recording, every sample
    assert summary.peak_memory_bytes == 132 * MIB
    assert summary.mean_utilization == 0.0
    assert summary.energy_j == pytest.approx(69.32 * summary.duration_s)


@pytest.mark.skipif(sys.platform == "win32", reason="shell script stands in for the vendor tool")
def test_sampler_npu_smi_on_recorded_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path, "npu-smi", DATA / "npu_smi_info_910b3x8_loaded.txt", monkeypatch)

    with TelemetrySampler("npu-smi", interval_s=0.01, device_index=3) as sampler:
        pass
    summary = sampler.summary

    assert summary is not None and summary.samples >= 2
    assert summary.mean_power_w == pytest.approx(92.8)
    assert summary.peak_memory_bytes == 39072 * MIB
    assert summary.mean_utilization == 0.0


def test_telemetry_module_does_not_import_torch_at_import_time() -> None:
    assert "torch" not in telemetry.__dict__ and "torch" not in backends.__dict__
