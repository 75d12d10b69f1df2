"""Hardware backends: one protocol for CPU, CUDA and Ascend NPU.

A backend answers the few device questions a measurement needs: is the runtime there (`check_available`), which
torch device string to use, how to wait for queued work (`synchronize`), how much memory the run peaked at (and
what that figure counts), and which accelerator the machine fingerprint names. What other code asks of a backend by
name (is it the host's CPU, which variable lists its devices) is its `specgate.registry.BackendSpec`.
Selecting a backend whose runtime is missing is an error with instructions, never a silent CPU run.

torch (and torch_npu) are imported inside the methods that need them, so importing this module stays cheap.
"""

from __future__ import annotations

import importlib
import os
import re
import resource
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from specgate.errors import ConfigError, EngineUnavailableError
from specgate.registry import backend_spec

if TYPE_CHECKING:
    from specgate.config import HardwareProfile

__all__ = ["CpuBackend", "CudaBackend", "HardwareBackend", "NpuBackend", "get_backend"]


_PROC_STATUS = Path("/proc/self/status")
_PROC_CLEAR_REFS = Path("/proc/self/clear_refs")


@runtime_checkable
class HardwareBackend(Protocol):
    """The device side of a hardware profile. `peak_memory` says what `peak_memory_bytes` counts;
    `peak_is_lifetime` is True while it covers the whole process life, not just the window since the last reset."""

    name: str
    peak_memory: str
    peak_is_lifetime: bool

    def check_available(self) -> None:
        """Raise `EngineUnavailableError` saying what is missing and how to install it; never fall back."""
        ...

    def torch_device(self) -> str:
        """The torch device string, e.g. ``"cuda:0"``."""
        ...

    def synchronize(self) -> None:
        """Block until work queued on the device is done (so timestamps mean completion)."""
        ...

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory window."""
        ...

    def peak_memory_bytes(self) -> int | None:
        """Peak memory since the last `reset_peak_memory`, or None when it cannot be known."""
        ...

    def accelerator(self) -> tuple[str, int, str]:
        """(model, count, driver) of the accelerator, for the machine fingerprint: ("none", 0, "") on the host's
        CPU, "unknown" where the runtime cannot tell."""
        ...


def _prefix(profile: str | None, backend: str, device: str) -> str:
    if profile is not None:
        return f"--hardware={profile}"
    return f"backend {backend!r} (device {device!r})"


def _import_torch(who: str) -> ModuleType:
    try:
        import torch
    except ImportError as exc:
        raise EngineUnavailableError(
            f"{who} needs PyTorch: `import torch` failed ({exc}). Install it: pip install torch"
        ) from exc
    return torch


def device_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index else 0


def _read_status_kib(field: str) -> int | None:
    """A `kB` field of /proc/self/status (Linux only), e.g. VmHWM."""
    try:
        text = _PROC_STATUS.read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def _nvidia_driver() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "unknown"


class CpuBackend:
    """Plain CPU through torch.

    Peak memory is the peak resident set size (RSS) of this process: `VmHWM` from /proc/self/status. On Linux,
    `reset_peak_memory` writes ``5`` to /proc/self/clear_refs, which resets VmHWM to the current RSS; where that
    is not allowed (or /proc is missing), the value falls back to `resource.getrusage().ru_maxrss`, which is the
    peak over the whole life of the process and so includes everything loaded before the measured window.
    """

    name = "cpu"
    peak_memory = (
        "this process's peak RSS per engine call (model weights included, and memory the allocator kept from "
        "earlier calls)"
    )

    def __init__(self, device: str = "cpu", *, profile: str | None = None) -> None:
        self._device = device
        self._profile = profile
        # True while peak_memory_bytes covers the whole process life, not just the window since the last reset.
        self.peak_is_lifetime = True

    def check_available(self) -> None:
        _import_torch(_prefix(self._profile, self.name, self._device))

    def torch_device(self) -> str:
        return "cpu"

    def accelerator(self) -> tuple[str, int, str]:
        return "none", 0, ""

    def synchronize(self) -> None:
        """Nothing to wait for: CPU ops in torch return when done."""

    def reset_peak_memory(self) -> None:
        try:
            _PROC_CLEAR_REFS.write_text("5")
        except OSError:
            self.peak_is_lifetime = True
        else:
            self.peak_is_lifetime = False

    def peak_memory_bytes(self) -> int | None:
        hwm_kib = _read_status_kib("VmHWM")
        if hwm_kib is not None:
            return hwm_kib * 1024
        max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.peak_is_lifetime = True
        # ru_maxrss is in kilobytes on Linux but in bytes on macOS.
        return max_rss if sys.platform == "darwin" else max_rss * 1024


class CudaBackend:
    """NVIDIA GPUs through torch.cuda."""

    name = "cuda"
    peak_memory = "torch's peak allocated device memory per engine call"
    peak_is_lifetime = False

    def __init__(self, device: str = "cuda:0", *, profile: str | None = None) -> None:
        self._device = device
        self._index = device_index(device)
        self._profile = profile

    def check_available(self) -> None:
        who = _prefix(self._profile, self.name, self._device)
        torch = _import_torch(who)
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            raise EngineUnavailableError(
                f"{who} needs a CUDA build of PyTorch, but torch {torch.__version__} is a CPU-only build "
                "(torch.version.cuda is None). Install a CUDA wheel, e.g. "
                "pip install torch --index-url https://download.pytorch.org/whl/cu124, "
                "or choose another profile: --hardware=cpu"
            )
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
            raise EngineUnavailableError(
                f"{who} needs an NVIDIA GPU, but torch {torch.__version__} (CUDA {torch.version.cuda}) sees none "
                f"(CUDA_VISIBLE_DEVICES={visible}). Check `nvidia-smi` and the driver, or choose --hardware=cpu"
            )
        if self._index >= count:
            raise EngineUnavailableError(
                f"{who}: device {self._device!r} is out of range, {count} CUDA device(s) visible "
                f"(cuda:0..cuda:{count - 1}). Set the profile's device to one of them"
            )

    def torch_device(self) -> str:
        return f"cuda:{self._index}"

    def accelerator(self) -> tuple[str, int, str]:
        try:
            import torch
        except ImportError:
            return "unknown", 0, "unknown"
        if not torch.cuda.is_available():
            return "unknown", 0, "unknown"
        return torch.cuda.get_device_name(0), torch.cuda.device_count(), _nvidia_driver()

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self._index)

    def reset_peak_memory(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(self._index)

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated by torch's caching allocator (not other processes, not the CUDA context)."""
        import torch

        return int(torch.cuda.max_memory_allocated(self._index))


class NpuBackend:
    """Huawei Ascend NPUs through torch_npu (which adds `torch.npu`)."""

    name = "npu"
    peak_memory = "torch's peak allocated device memory per engine call"
    peak_is_lifetime = False

    def __init__(self, device: str = "npu:0", *, profile: str | None = None) -> None:
        self._device = device
        self._index = device_index(device)
        self._profile = profile

    def _torch_npu(self) -> ModuleType:
        import torch

        npu: ModuleType = getattr(torch, "npu")  # noqa: B009 - attribute added by torch_npu, unknown to type stubs
        return npu

    def check_available(self) -> None:
        who = _prefix(self._profile, self.name, self._device)
        torch = _import_torch(who)
        try:
            import torch_npu  # noqa: F401 - registers the "npu" device with torch
        except ImportError as exc:
            base = torch.__version__.split("+")[0]
            raise EngineUnavailableError(
                f"{who} needs torch_npu and an Ascend NPU: `import torch_npu` failed ({exc}). Install the CANN "
                f"toolkit and torch_npu matching torch {base} (pip install torch-npu=={base}, or the .postN release "
                "for that torch from https://gitee.com/ascend/pytorch), or choose another profile: --hardware=cpu"
            ) from exc
        npu = self._torch_npu()
        count = int(npu.device_count()) if npu.is_available() else 0
        if count == 0:
            visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "<unset>")
            raise EngineUnavailableError(
                f"{who}: torch_npu is installed but no NPU is visible (ASCEND_RT_VISIBLE_DEVICES={visible}). "
                "Check `npu-smi info`, the driver and the container's /dev/davinci* devices"
            )
        if self._index >= count:
            raise EngineUnavailableError(
                f"{who}: device {self._device!r} is out of range, {count} NPU(s) visible "
                f"(npu:0..npu:{count - 1}). Set the profile's device to one of them"
            )

    def torch_device(self) -> str:
        return f"npu:{self._index}"

    def accelerator(self) -> tuple[str, int, str]:
        try:
            import torch
        except ImportError:
            return "unknown", 0, "unknown"
        npu = getattr(torch, "npu", None)
        if npu is None or not npu.is_available():
            return "unknown", 0, "unknown"
        name = npu.get_device_name(0) if hasattr(npu, "get_device_name") else "Ascend NPU"
        return str(name), int(npu.device_count()), str(getattr(torch.version, "cann", "unknown"))

    def synchronize(self) -> None:
        self._torch_npu().synchronize()

    def reset_peak_memory(self) -> None:
        self._torch_npu().reset_peak_memory_stats(self._index)

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated by torch_npu's caching allocator."""
        return int(self._torch_npu().max_memory_allocated(self._index))


def get_backend(backend: str, device: str, *, profile: str | None = None) -> HardwareBackend:
    """The backend for a profile's `backend` and `device` fields (its class and device strings are its
    `specgate.registry.BackendSpec`); `profile` names it in error messages.

    Raises `ConfigError` for an unknown backend or a device string that does not belong to it. Does not check
    that the runtime is installed: call `check_available()` for that.
    """
    spec = backend_spec(backend)  # a ConfigError naming the known backends
    if not re.fullmatch(spec.device, device):
        indexed = re.fullmatch(spec.device, f"{backend}:0") is not None
        example = f"{backend}:0" if indexed else backend
        raise ConfigError(
            f"device {device!r} does not fit backend {backend!r}: expected {example!r}"
            + (f" or {backend!r} followed by ':<index>'" if indexed else "")
        )
    module, _, name = spec.factory.partition(":")
    made: HardwareBackend = getattr(importlib.import_module(module), name)(device, profile=profile)
    return made


def available_backend(hardware: HardwareProfile) -> HardwareBackend:
    """The profile's backend, its runtime checked (`check_available`): what an engine loads its models on."""
    backend = get_backend(hardware.backend, hardware.device, profile=hardware.name)
    backend.check_available()
    return backend
