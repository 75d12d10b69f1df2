"""The machine fingerprint: what must be equal for two runs' latencies to be comparable.

A hardware profile (`cpu`, `h200`) names a class of machines; latency depends on the exact machine. Every run and
every stored baseline therefore carries a fingerprint, and latencies are compared only between runs of the same
fingerprint. What must match (`MATCHED`): the CPU model and its vector extensions, the logical CPUs and the
threads used, the memory size, the accelerator model, count and driver, the engine and its version, torch's
version, and the dtype; for a model spread over devices, also the parallel layout (TP/PP/DP and the executor: a
TP=8 and a TP=4 run are not latency-comparable) and the interconnect between the devices it used (NVLink, HCCS,
PCIe: `specgate.hardware.topology`). What is recorded but need not match: the host name (two identical VMs are the
same machine for the gate) and the kernel. A single-device run has no layout, and its fingerprint (and key) is what it
was before layouts were recorded.

Deterministic quantities (acceptance counts, greedy outputs, task accuracy) do not depend on the machine and are
compared with any baseline of the profile.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path

from specgate.config import HardwareProfile
from specgate.config.parallel import ParallelLayout
from specgate.hardware.backends import HardwareBackend, get_backend
from specgate.hardware.topology import probe_interconnect
from specgate.registry import engine_specs, registered, served

# vector extensions that change kernel choice (and so speed, sometimes numerics); others are noise across steppings
VECTOR_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "sve2",
    "sme",
)


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A machine and software stack, as far as latency depends on it."""

    cpu: str
    cpu_flags: tuple[str, ...]
    logical_cpus: int
    threads: int | None
    memory_gib: int
    accelerator: str
    accelerator_count: int
    driver: str
    engine: str
    engine_version: str
    torch: str
    dtype: str
    host: str = ""
    kernel: str = ""
    layout: str = ""
    interconnect: str = ""

    @property
    def key(self) -> str:
        """A short hash of the fields that must match (the layout's only for a multi-device run)."""
        matched = {name: getattr(self, name) for name in MATCHED}
        if self.layout:
            matched.update(layout=self.layout, interconnect=self.interconnect)
        return hashlib.sha256(json.dumps(matched, sort_keys=True).encode()).hexdigest()[:12]

    def describe(self) -> str:
        """One line people read: "AMD EPYC, 2 CPUs (avx512f avx512_bf16 …), 23 GiB; transformers 5.19.0, torch …"."""
        flags = " ".join(f for f in self.cpu_flags if f.startswith(("avx512", "amx", "sve"))) or " ".join(
            self.cpu_flags[-3:]
        )
        accelerator = "" if self.accelerator == "none" else f", {self.accelerator_count}× {self.accelerator}"
        threads = "" if self.threads is None else f", {self.threads} threads"
        layout = (
            "" if not self.layout else f"; {self.layout}" + (f" over {self.interconnect}" if self.interconnect else "")
        )
        return (
            f"{self.cpu}, {self.logical_cpus} CPUs{threads} ({flags}), {self.memory_gib} GiB{accelerator}; "
            f"{self.engine} {self.engine_version}, torch {self.torch}, {self.dtype}{layout}"
        )

    def differences(self, other: Fingerprint) -> list[str]:
        """The matched fields that differ, as "cpu: X ≠ Y"."""
        layout = ("layout", "interconnect") if self.layout or other.layout else ()
        return [
            f"{name}: {getattr(self, name) or 'single device'} ≠ {getattr(other, name) or 'single device'}"
            for name in (*MATCHED, *layout)
            if getattr(self, name) != getattr(other, name)
        ]

    def matches(self, other: Fingerprint) -> bool:
        return self.key == other.key


MATCHED: tuple[str, ...] = tuple(
    f.name for f in fields(Fingerprint) if f.name not in ("host", "kernel", "layout", "interconnect")
)


def _cpuinfo() -> dict[str, str]:
    """ "model name" and "flags" of the CPU (and "memory_bytes" on macOS): /proc/cpuinfo on Linux, sysctl on
    macOS."""
    if platform.system() == "Darwin":
        return _sysctl()
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "flags", "Features", "CPU part") and key not in found:
            found[key] = value.strip()
    return found


# macOS reports its vector extensions as hw.optional.* = 1; the names Linux gives the same extensions
DARWIN_FLAGS = {
    "hw.optional.neon": "asimd",
    "hw.optional.AdvSIMD": "asimd",
    "hw.optional.arm.FEAT_SME": "sme",
    "hw.optional.sse4_2": "sse4_2",
    "hw.optional.avx1_0": "avx",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.fma": "fma",
    "hw.optional.f16c": "f16c",
    "hw.optional.avx512f": "avx512f",
    "hw.optional.avx512bw": "avx512bw",
    "hw.optional.avx512vl": "avx512vl",
    "hw.optional.avx512vnni": "avx512_vnni",
}


def _sysctl() -> dict[str, str]:
    try:
        done = subprocess.run(
            ["sysctl", "machdep.cpu.brand_string", "hw.memsize", "hw.optional"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    values = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(":")
        values[key.strip()] = value.strip()
    flags = sorted({flag for key, flag in DARWIN_FLAGS.items() if values.get(key) == "1"})
    found = {"flags": " ".join(flags)}
    if values.get("machdep.cpu.brand_string"):
        found["model name"] = values["machdep.cpu.brand_string"]
    if values.get("hw.memsize", "").isdigit():
        found["memory_bytes"] = values["hw.memsize"]
    return found


def _memory_gib(info: dict[str, str]) -> int:
    if info.get("memory_bytes", "").isdigit():
        return round(int(info["memory_bytes"]) / 1024**3)
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _logical_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


@dataclass(frozen=True, slots=True)
class _Machine:
    cpu: str
    cpu_flags: tuple[str, ...]
    logical_cpus: int
    memory_gib: int
    host: str
    kernel: str


def cpu_model() -> str:
    """This machine's CPU, as the fingerprint names it (e.g. "AMD EPYC 9B45", "Apple M2 Pro")."""
    return _machine().cpu


@lru_cache(maxsize=1)
def _machine() -> _Machine:
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    cpu = info.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    return _Machine(
        cpu=" ".join(cpu.split()),
        cpu_flags=tuple(f for f in VECTOR_FLAGS if f in flags),
        logical_cpus=_logical_cpus(),
        memory_gib=_memory_gib(info),
        host=platform.node(),
        kernel=platform.release(),
    )


def machine_fingerprint(
    backend: str,
    threads: int | None,
    versions: Mapping[str, str],
    dtype: str,
    accelerator_info: tuple[str, int, str],
    layout: ParallelLayout | None = None,
) -> Fingerprint:
    """The fingerprint of this machine for a run whose engine reported `versions` (`Engine.versions()`)."""
    machine = _machine()
    engine = versions.get("engine", "unknown")
    spec = registered(engine)
    library = versions.get(spec.library, "") if spec is not None else ""
    if not library:  # an engine not registered (the tests' fake): the first engine library it reports
        library = next((versions[s.library] for s in engine_specs() if s.library in versions), "unknown")
    model, count, driver = accelerator_info
    return Fingerprint(
        cpu=machine.cpu,
        cpu_flags=machine.cpu_flags,
        logical_cpus=machine.logical_cpus,
        threads=threads,
        memory_gib=machine.memory_gib,
        accelerator=model,
        accelerator_count=count,
        driver=driver,
        engine=engine,
        engine_version=library,
        torch=versions.get("torch", "none"),
        dtype=dtype,
        host=machine.host,
        kernel=machine.kernel,
        layout="" if layout is None or layout.single else f"{layout.describe()} on {layout.devices} devices",
        interconnect="" if layout is None or layout.single else probe_interconnect(backend, layout.devices),
    )


def as_dict(fingerprint: Fingerprint) -> dict[str, object]:
    return asdict(fingerprint)


def run_fingerprint(
    hardware: HardwareProfile,
    engine: str,
    versions: Mapping[str, str],
    dtype: str,
    layout: ParallelLayout | None = None,
    backend: HardwareBackend | None = None,
) -> Fingerprint:
    """The fingerprint of a run on this machine (with `layout`, the devices it spread the model over; `backend`, the
    profile's hardware backend, resolved here when None). For served
    endpoints the latency is the servers': they are named (with the versions they report) in place of a local
    accelerator, and their layout is theirs."""
    remote = served(engine)
    if remote:
        endpoints = ", ".join(v for k, v in sorted(versions.items()) if k.startswith(("endpoint.", "server.")))
        info = (f"served: {endpoints}", 0, "")
    else:
        info = (backend or get_backend(hardware.backend, hardware.device)).accelerator()
    local = None if remote else layout
    return machine_fingerprint(hardware.backend, hardware.threads, versions, dtype, info, local)
