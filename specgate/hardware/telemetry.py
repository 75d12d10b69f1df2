"""Power, memory and utilization telemetry, sampled in a background thread while an arm runs.

Sources (a profile's `telemetry` field):

    none        nothing is sampled; energy can only be estimated from the profile's power_w
    nvml        NVIDIA NVML through nvidia-ml-py (`pynvml`): board power, memory used, GPU utilization, and the
                board's energy counter where the GPU has one (Volta and newer)
    nvidia-smi  `nvidia-smi --query-gpu=power.draw,utilization.gpu,memory.used --format=csv,noheader,nounits -i N`
    npu-smi     the `npu-smi info` table: NPU power, AI Core utilization, HBM used
    rapl        Intel/AMD RAPL package energy counter (/sys/class/powercap/intel-rapl:0/energy_uj) plus this
                process's CPU time and resident memory; without a readable counter power is unavailable

Device indices are the tools' own (NVML and nvidia-smi ignore CUDA_VISIBLE_DEVICES; npu-smi counts cards), not
torch's logical index. Power readings are whole-device (or whole-package for RAPL), not per process.

The text parsers (`specgate.hardware.telemetry_parsers`) are pure functions, tested on recorded real outputs in
tests/data/telemetry/.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from specgate.errors import ConfigError, EngineUnavailableError
from specgate.hardware.economics import estimated_energy_j
from specgate.hardware.telemetry_parsers import (
    NVIDIA_SMI_QUERY,
    parse_npu_smi_info,
    parse_nvidia_smi_csv,
)
from specgate.registry import TELEMETRY_SOURCES

SOURCES = TELEMETRY_SOURCES  # the names the configuration accepts (specgate.registry)
RAPL_DOMAIN = Path("/sys/class/powercap/intel-rapl:0")
_MIB = 1024 * 1024
_COMMAND_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class TelemetrySummary:
    """What a sampler saw over one window.

    `energy_j` comes from an energy counter when the source has one, else from the trapezoid integral of the
    power samples. `mean_utilization` is a fraction 0-1. `estimated` is True only when energy was filled in from
    the profile's board power (`estimate_missing_energy`). `note` says what was missing and why.
    """

    source: str
    samples: int
    mean_power_w: float | None
    energy_j: float | None
    peak_memory_bytes: int | None
    mean_utilization: float | None
    estimated: bool
    note: str
    duration_s: float = 0.0


def read_rapl_energy_uj(path: str | Path = RAPL_DOMAIN) -> int:
    """The RAPL energy counter in microjoules: `path` is a powercap domain folder or its `energy_uj` file.

    Raises `OSError` when it cannot be read (no RAPL, or root-only as on most kernels since 2020).
    """
    path = Path(path)
    file = path / "energy_uj" if path.is_dir() else path
    return int(file.read_text().strip())


def rapl_delta_uj(before_uj: int, after_uj: int, max_energy_range_uj: int) -> int:
    """Energy between two counter reads, allowing for one wraparound at `max_energy_range_uj`."""
    delta = after_uj - before_uj
    return delta if delta >= 0 else delta + max_energy_range_uj


def trapezoid_energy_j(times_s: Sequence[float], powers_w: Sequence[float]) -> float:
    """Integral of power over time by the trapezoid rule (J). Needs at least two samples."""
    if len(times_s) != len(powers_w) or len(times_s) < 2:
        raise ValueError(f"need two or more (time, power) pairs of equal length, got {len(times_s)}, {len(powers_w)}")
    return sum((powers_w[i] + powers_w[i + 1]) / 2 * (times_s[i + 1] - times_s[i]) for i in range(len(times_s) - 1))


def estimate_missing_energy(summary: TelemetrySummary, power_w: float, wall_s: float) -> TelemetrySummary:
    """Fill in energy from the profile's board power when telemetry measured none; marks it `estimated`."""
    if summary.energy_j is not None:
        return summary
    return replace(
        summary,
        mean_power_w=power_w,
        energy_j=estimated_energy_j(power_w, wall_s),
        estimated=True,
        note=f"{summary.note}; energy estimated as profile power_w {power_w:g} W * {wall_s:.3f} s".lstrip("; "),
    )


@dataclass(frozen=True, slots=True)
class PowerReading:
    """One raw sample for attributing energy to time windows: `t_s` is `time.perf_counter()`; `energy_j` is the
    source's cumulative counter since the sampler started (None without a counter)."""

    t_s: float
    power_w: float | None
    energy_j: float | None


@dataclass(frozen=True, slots=True)
class _Reading:
    t_s: float
    power_w: float | None = None
    energy_j: float | None = None  # cumulative since the reader opened, for counter sources
    memory_bytes: int | None = None
    utilization: float | None = None  # fraction 0-1
    cpu_s: float | None = None  # this process's CPU time, for CPU utilization over the window


class _Reader(Protocol):
    note: str

    def read(self) -> _Reading: ...

    def close(self) -> None: ...


def _run_tool(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited {result.returncode}: {result.stderr.strip()[:200]}")
    return result.stdout


def _rss_bytes() -> int | None:
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


class _NvmlReader:
    def __init__(self, index: int) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise EngineUnavailableError(
                f"telemetry 'nvml' needs nvidia-ml-py: `import pynvml` failed ({exc}). "
                "pip install nvidia-ml-py, or set the profile's telemetry to 'nvidia-smi' or 'none'"
            ) from exc
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            raise EngineUnavailableError(f"telemetry 'nvml' cannot open GPU {index}: {exc}") from exc
        self._energy0_mj = self._energy_mj()
        self.note = "" if self._energy0_mj is not None else "no NVML energy counter; energy integrated from power"

    def _energy_mj(self) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except self._nvml.NVMLError:
            return None

    def read(self) -> _Reading:
        nvml, handle = self._nvml, self._handle
        energy_mj = self._energy_mj() if self._energy0_mj is not None else None
        return _Reading(
            t_s=time.perf_counter(),
            power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            energy_j=None if energy_mj is None or self._energy0_mj is None else (energy_mj - self._energy0_mj) / 1e3,
            memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            utilization=nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0,
        )

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def _gpu_reading(stdout: str, index: int) -> _Reading:
    sample = parse_nvidia_smi_csv(stdout)[0]
    used_mib, util_pct = sample.memory_used_mib, sample.utilization_pct
    return _Reading(
        t_s=time.perf_counter(),
        power_w=sample.power_w,
        memory_bytes=None if used_mib is None else int(used_mib * _MIB),
        utilization=None if util_pct is None else util_pct / 100.0,
    )


def _npu_reading(stdout: str, index: int) -> _Reading:
    chips = [chip for chip in parse_npu_smi_info(stdout) if chip.npu_id == index]
    if not chips:
        raise RuntimeError(f"`npu-smi info` lists no NPU {index}")
    chip = chips[0]
    used_mb = chip.hbm_used_mb if chip.hbm_used_mb is not None else chip.memory_used_mb
    return _Reading(
        t_s=time.perf_counter(),
        power_w=chip.power_w,
        memory_bytes=None if used_mb is None else used_mb * _MIB,
        utilization=None if chip.aicore_pct is None else chip.aicore_pct / 100.0,
    )


class _ToolReader:
    """Runs a vendor CLI once per sample and converts its output."""

    def __init__(self, argv: list[str], convert: Callable[[str, int], _Reading], index: int, note: str) -> None:
        if shutil.which(argv[0]) is None:
            raise EngineUnavailableError(
                f"telemetry {argv[0]!r} needs `{argv[0]}` on PATH, and it is not there. Install the vendor driver "
                "tools, or set the profile's telemetry to 'none' (energy is then estimated from power_w)"
            )
        self._argv, self._convert, self._index, self.note = argv, convert, index, note

    def read(self) -> _Reading:
        return self._convert(_run_tool(self._argv), self._index)

    def close(self) -> None:
        """No handle to release."""


class _RaplReader:
    def __init__(self, domain: Path = RAPL_DOMAIN) -> None:
        self._domain = domain
        try:
            self._last_uj: int | None = read_rapl_energy_uj(domain)
            self._max_uj = int((domain / "max_energy_range_uj").read_text().strip())
        except (OSError, ValueError) as exc:
            self._last_uj = None
            self._max_uj = 0
            self.note = (
                f"RAPL not readable at {domain / 'energy_uj'} ({exc}): power and energy unavailable; "
                "utilization from this process's CPU time"
            )
        else:
            self.note = "RAPL package energy covers the whole CPU package, not only this process"
        self._total_uj = 0

    def read(self) -> _Reading:
        energy_j = None
        if self._last_uj is not None:
            now_uj = read_rapl_energy_uj(self._domain)
            self._total_uj += rapl_delta_uj(self._last_uj, now_uj, self._max_uj)
            self._last_uj = now_uj
            energy_j = self._total_uj / 1e6
        return _Reading(
            t_s=time.perf_counter(), energy_j=energy_j, memory_bytes=_rss_bytes(), cpu_s=time.process_time()
        )

    def close(self) -> None:
        """No handle to release."""


def _open_reader(source: str, device_index: int) -> _Reader:
    if source == "nvml":
        return _NvmlReader(device_index)
    if source == "nvidia-smi":
        query = ["nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_QUERY)}", "--format=csv,noheader,nounits"]
        return _ToolReader([*query, "-i", str(device_index)], _gpu_reading, device_index, "")
    if source == "npu-smi":
        note = "npu-smi updates power about once a second"
        return _ToolReader(["npu-smi", "info"], _npu_reading, device_index, note)
    return _RaplReader()


def _summarize(source: str, readings: Sequence[_Reading], note: str) -> TelemetrySummary:
    first, last = (readings[0], readings[-1]) if readings else (None, None)
    duration = last.t_s - first.t_s if first and last else 0.0
    energy = mean_power = None
    if first and last and first.energy_j is not None and last.energy_j is not None:
        energy = last.energy_j - first.energy_j
        mean_power = energy / duration if duration > 0 else None
    else:
        points = [(r.t_s, r.power_w) for r in readings if r.power_w is not None]
        if len(points) >= 2 and points[-1][0] > points[0][0]:
            energy = trapezoid_energy_j([t for t, _ in points], [p for _, p in points])
            mean_power = energy / (points[-1][0] - points[0][0])
        elif points:
            mean_power = points[0][1]
    if first and last and first.cpu_s is not None and last.cpu_s is not None and duration > 0:
        busy = (last.cpu_s - first.cpu_s) / (duration * (os.cpu_count() or 1))
        utilization: float | None = min(max(busy, 0.0), 1.0)
    else:
        values = [r.utilization for r in readings if r.utilization is not None]
        utilization = sum(values) / len(values) if values else None
    memories = [r.memory_bytes for r in readings if r.memory_bytes is not None]
    return TelemetrySummary(
        source=source,
        samples=len(readings),
        mean_power_w=mean_power,
        energy_j=energy,
        peak_memory_bytes=max(memories) if memories else None,
        mean_utilization=utilization,
        estimated=False,
        note=note,
        duration_s=duration,
    )


class TelemetrySampler:
    """Samples a telemetry source every `interval_s` in a daemon thread between `start()` and `stop()`.

        with TelemetrySampler("nvidia-smi", interval_s=0.1) as sampler:
            run_arm()
        summary = sampler.summary

    One sample is taken at `start()` and one at `stop()`, so a window always has its end points. A failed read
    is counted and reported in the summary's note; it never stops the run. A missing tool or library raises
    `EngineUnavailableError` from `start()`.
    """

    def __init__(self, source: str, interval_s: float = 0.1, device_index: int = 0) -> None:
        if source not in SOURCES:
            close = difflib.get_close_matches(source, SOURCES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"telemetry {source!r} is not a known source.{hint} Known: {', '.join(SOURCES)}")
        if not interval_s > 0:
            raise ConfigError(f"telemetry interval_s must be > 0, got {interval_s!r}")
        self.source = source
        self.interval_s = interval_s
        self.device_index = device_index
        self.summary: TelemetrySummary | None = None
        self._reader: _Reader | None = None
        self._started = False
        self._readings: list[_Reading] = []
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._started:
            raise RuntimeError("TelemetrySampler.start() called twice; use a new sampler per window")
        self._started = True
        if self.source == "none":
            return
        self._reader = _open_reader(self.source, self.device_index)
        self._sample()
        self._thread = threading.Thread(target=self._loop, name=f"specgate-telemetry-{self.source}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        assert self._reader is not None
        try:
            reading = self._reader.read()
        except Exception as exc:  # a telemetry hiccup must not abort the measurement; it is reported
            with self._lock:
                self._failures.append(f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            self._readings.append(reading)

    def stop(self) -> TelemetrySummary:
        """Stop sampling and summarize the window; calling it again returns the same summary."""
        if self.summary is not None:
            return self.summary
        if not self._started:
            raise RuntimeError("TelemetrySampler.stop() called before start()")
        if self._reader is None:
            self.summary = _summarize(self.source, [], "telemetry off (source 'none')")
            return self.summary
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + _COMMAND_TIMEOUT_S)
        self._sample()
        self._reader.close()
        with self._lock:
            readings, failures = list(self._readings), list(self._failures)
        notes = [self._reader.note] if self._reader.note else []
        if failures:
            notes.append(f"{len(failures)} failed read(s), last: {failures[-1]}")
        self.summary = _summarize(self.source, readings, "; ".join(notes))
        return self.summary

    def power_readings(self) -> tuple[PowerReading, ...]:
        """The power and energy-counter samples taken so far, in time order (empty for source 'none')."""
        with self._lock:
            readings = list(self._readings)
        return tuple(PowerReading(r.t_s, r.power_w, r.energy_j) for r in readings)

    def __enter__(self) -> TelemetrySampler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
