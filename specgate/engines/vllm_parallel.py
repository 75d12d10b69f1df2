"""A pair's parallel layout (`specgate.config.parallel`) as vLLM takes it: keyword arguments of the offline
`vllm.LLM`, and command-line flags of vLLM's OpenAI-compatible server (`vllm serve`, `python -m
vllm.entrypoints.openai.api_server`). One function each, so the offline engine and the servers specgate starts pass
the same layout the same way.

A single-device layout adds nothing (vLLM's defaults). The executor is passed only when set: vLLM picks `mp` on one
node by default. With `ray`, vLLM joins the Ray cluster `RAY_ADDRESS` names (Ray's own `ray.init()` reads it), else
starts a local one. Data parallelism is a server feature: one offline `LLM` refuses `data_parallel_size > 1`
(vLLM says to start one process per replica), so the offline arguments refuse it here, with that remedy.
"""

from __future__ import annotations

from typing import Any

from specgate.config.parallel import ParallelLayout
from specgate.errors import ConfigError

SERVER_FLAGS = (
    ("tensor_parallel_size", "--tensor-parallel-size"),
    ("pipeline_parallel_size", "--pipeline-parallel-size"),
    ("data_parallel_size", "--data-parallel-size"),
)


def llm_parallel_arguments(layout: ParallelLayout) -> dict[str, Any]:
    """`vllm.LLM` keyword arguments of the layout; a data-parallel layout is a `ConfigError`."""
    if layout.data_parallel_size > 1:
        raise ConfigError(
            f"data_parallel_size: {layout.data_parallel_size} needs a vLLM server (--data-parallel-size), not the "
            "offline engine; gate the served deployment with the openai engine, or set data_parallel_size: 1"
        )
    args: dict[str, Any] = {}
    if layout.tensor_parallel_size > 1:
        args["tensor_parallel_size"] = layout.tensor_parallel_size
    if layout.pipeline_parallel_size > 1:
        args["pipeline_parallel_size"] = layout.pipeline_parallel_size
    if layout.distributed_executor_backend is not None:
        args["distributed_executor_backend"] = layout.distributed_executor_backend
    return args


def server_parallel_flags(layout: ParallelLayout) -> list[str]:
    """The server's command-line flags of the layout (data parallelism included)."""
    flags: list[str] = []
    for key, flag in SERVER_FLAGS:
        size = int(getattr(layout, key))
        if size > 1:
            flags += [flag, str(size)]
    if layout.distributed_executor_backend is not None:
        flags += ["--distributed-executor-backend", layout.distributed_executor_backend]
    return flags
