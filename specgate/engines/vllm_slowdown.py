"""The `--inject-slowdown` self-test inside a vLLM server: a vLLM general plugin that makes every engine step longer.

vLLM loads the entry points of the group `vllm.general_plugins` in each of its processes (the API server, the
engine core, the workers). `register` does nothing unless `SPECGATE_VLLM_SLOWDOWN` is set (a fraction, e.g. 0.10);
then, in the process that runs the engine core, it wraps `EngineCore.step` (and `step_with_batch_queue`) so that
after every step that ran the model the engine core busy-spins for that fraction of the step's duration. It spins,
never sleeps: the server's CPU time grows with its wall time, as it would for a slower build.

specgate starts only the slowed server with the variable and with `plugin_path(folder)` on its `PYTHONPATH`: a
folder holding a `.dist-info` whose `entry_points.txt` declares the plugin. No installation is needed, and no
other vLLM process on the machine sees the plugin. The engine core prints `MARKER` when the wrapper is in place;
specgate reads it in the server's log and fails the run when it is missing (a self-test that injected nothing must
not pass as one that did).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "SPECGATE_VLLM_SLOWDOWN"
PLUGIN = "specgate_slowdown"
MARKER = "specgate: injected slowdown active"
DIST = "specgate_vllm_slowdown-0.dist-info"


def spin_for(seconds: float) -> None:
    """Busy-wait `seconds` of wall time on this thread."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def slowed(step: Callable[..., Any], fraction: float) -> Callable[..., Any]:
    """`step` followed by a spin of `fraction` of its duration, when it ran the model (its second result)."""

    @functools.wraps(step)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = step(self, *args, **kwargs)
        if isinstance(result, tuple) and len(result) == 2 and result[1]:
            spin_for((time.perf_counter() - started) * fraction)
        return result

    wrapper.__specgate_slowdown__ = fraction  # type: ignore[attr-defined]
    return wrapper


def register() -> None:
    """The plugin's entry point (see the module docstring); safe to call more than once."""
    raw = os.environ.get(ENV, "")
    if not raw:
        return
    fraction = float(raw)
    if fraction <= 0:
        return
    from vllm.v1.engine.core import EngineCore

    for name in ("step", "step_with_batch_queue"):
        step = getattr(EngineCore, name, None)
        if step is not None and not hasattr(step, "__specgate_slowdown__"):
            setattr(EngineCore, name, slowed(step, fraction))
    print(f"{MARKER}: +{fraction:g} of every engine step (pid {os.getpid()})", file=sys.stderr, flush=True)


def plugin_path(folder: Path) -> Path:
    """Write the plugin's entry-point declaration under `folder` (once) and return the folder, for `PYTHONPATH`."""
    dist = folder / DIST
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: specgate-vllm-slowdown\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{PLUGIN} = {__name__}:register\n")
    return folder
