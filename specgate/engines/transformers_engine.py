"""The transformers engine: `generate` with assisted generation, measured per token, for any number of arms.

An arm is plain greedy decoding (no speculation) or assisted generation: `prompt_lookup_num_tokens=γ` (n-gram
prompt lookup) or `assistant_model=` (a draft model drafting γ tokens per step, fixed schedule). Arms that share a
target (same folder and dtype) share one loaded model; a draft made of the target's own first layers shares the
target's embeddings and head.

Timing: a streamer records `time.perf_counter()` each time `generate` hands it tokens (one chunk per verification
step with speculation). Token copies to the host synchronize the device, so timestamps are real on CUDA/NPU too.
Each chunk's process CPU time is kept too (`time.process_time()`, ~0.2 µs): the CPU time to the first and the last
chunk is the request's latency in CPU time, and the run-queue wait of the process's threads between submit and done
(`specgate.engines.clocks`, read outside the request) is the interference it met. An arm with a `slowdown` (the
`--inject-slowdown` self-test) burns, inside that callback, that fraction of the CPU time of the step that just
ended before the next step starts (a busy loop, not a sleep: a sleeping process gives up its core, and what it
finds on waking costs more than it slept): every step of that arm takes (1 + slowdown) times its CPU time, and as
much longer in wall time on an otherwise idle core. `run_lockstep` runs one prompt in several arms at once, the arms
taking turns at every chunk (`specgate.engines.lockstep`), each timed on its own turns.
Acceptance is counted, not estimated: the candidate generator is wrapped and every call of
`update_candidate_strategy(input_ids, scores, n_matches)` is one verification step with `scores.shape[1] - 1`
tokens drafted and `n_matches` accepted (after transformers' own EOS/length cropping); the same wrapper stamps
`perf_counter` around `get_candidates`, the step's draft (or lookup), for the cost model (two clock reads per step,
~0.1 µs against steps of tens of ms).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from specgate.config import HardwareProfile
from specgate.engines.base import ArmRun, LoadShape, Prompt, RequestTrace
from specgate.engines.clocks import ChunkClock, RunQueueClock, waited
from specgate.engines.lockstep import TurnClock, current_cpu, together
from specgate.engines.transformers_quant import (
    inference_context,
    kv_cache_kwargs,
    new_cache,
    quantize_weights,
    score_document,
)
from specgate.errors import EngineUnavailableError, MeasurementError
from specgate.hardware.backends import HardwareBackend
from specgate.models import ResolvedModel, resolve
from specgate.plan import Arm
from specgate.registry import backend_spec


class _StepCounter(threading.local):
    """Collects (drafted, accepted, draft seconds) per verification step of the request being generated, per thread
    (arms in lockstep generate in threads of their own, `specgate.engines.lockstep`)."""

    def __init__(self) -> None:
        self.drafted: list[int] = []
        self.accepted: list[int] = []
        self.draft_s: list[float] = []

    def reset(self) -> None:
        self.drafted = []
        self.accepted = []
        self.draft_s = []

    def instrument(self, model: Any) -> None:
        original = model._get_candidate_generator
        counter = self

        def get_candidate_generator(*args: Any, **kwargs: Any) -> Any:
            generator = original(*args, **kwargs)
            update = generator.update_candidate_strategy
            get_candidates = generator.get_candidates

            def timed_get_candidates(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                candidates = get_candidates(*args, **kwargs)
                counter.draft_s.append(time.perf_counter() - start)
                return candidates

            def update_candidate_strategy(input_ids: Any, scores: Any, num_matches: Any) -> Any:
                counter.drafted.append(int(scores.shape[1]) - 1)
                counter.accepted.append(int(num_matches))
                return update(input_ids, scores, num_matches)

            generator.update_candidate_strategy = update_candidate_strategy
            generator.get_candidates = timed_get_candidates
            return generator

        model._get_candidate_generator = get_candidate_generator


@dataclass(slots=True)
class _Setup:
    """What one arm runs: its target model and tokenizer, the `generate` arguments of its speculation."""

    arm: Arm
    model: Any
    tokenizer: Any
    tokenizer_key: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    models: dict[str, ResolvedModel] = field(default_factory=dict)
    cost_ratio: float | None = None


class TransformersEngine:
    """Runs arms with Hugging Face transformers on the profile's device (batch size 1)."""

    name = "transformers"
    per_request = True

    def __init__(self, base_dir: Path | None = None) -> None:
        self._base_dir = base_dir
        self._device = "cpu"
        self._steps = _StepCounter()
        self._targets: dict[tuple[str, str, Any], Any] = {}
        self._tokenizers: dict[str, Any] = {}
        self._drafts: dict[tuple[str, int | None, str, str], tuple[Any, ResolvedModel, float]] = {}
        self._arms: dict[str, _Setup] = {}
        self._inputs: dict[tuple[str, str], tuple[Prompt, Any]] = {}
        self._queue = RunQueueClock()
        self._instance = f"pid {os.getpid()}"
        self.lockstep = False  # arms in lockstep on the loaded device (CPU only: on an accelerator memory adds up)
        self._single_thread = False  # computes in the calling thread alone: lockstep binds the arms to one CPU

    def load(self, arms: Sequence[Arm], hardware: HardwareProfile, backend: HardwareBackend | None = None) -> None:
        from specgate.hardware.backends import available_backend

        if backend is None:
            available_backend(hardware)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import torch
            import transformers  # noqa: F401 - a missing library is a clear error here, not deep in a load
        except ImportError as exc:
            raise EngineUnavailableError(
                f"the transformers engine needs torch and transformers ({exc}). "
                "Install them: pip install torch==2.13.0 'specgate[hf]'"
            ) from exc
        if hardware.threads:
            torch.set_num_threads(hardware.threads)
        self._device = hardware.device
        self.lockstep = backend_spec(hardware.backend).host
        self._single_thread = self.lockstep and torch.get_num_threads() == 1
        for arm in arms:
            self._arms[arm.name] = self._setup(arm)

    def _target(self, reference: str, dtype: str, weights: Any = None) -> tuple[Any, Any, ResolvedModel]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        resolved = resolve(reference, self._base_dir)
        folder = str(resolved.folder)
        if folder not in self._tokenizers:
            self._tokenizers[folder] = AutoTokenizer.from_pretrained(folder)
        key = (folder, dtype, weights)  # a weight-quantized arm holds its own quantized copy of the target
        if key not in self._targets:
            model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
            model = model.to(self._device).eval()
            if weights is not None:
                model = quantize_weights(model, weights)
            self._steps.instrument(model)
            self._targets[key] = model
        return self._targets[key], self._tokenizers[folder], resolved

    def _setup(self, arm: Arm) -> _Setup:
        model, tokenizer, target = self._target(arm.target, arm.dtype, arm.optimisation.weights)
        setup = _Setup(arm, model, tokenizer, str(target.folder), models={"target": target})
        if arm.optimisation.batching is not None:
            raise EngineUnavailableError(f"arm {arm.name!r}: the transformers engine runs one request at a time")
        kv = arm.optimisation.kv_cache
        setup.kwargs = {} if kv is None else kv_cache_kwargs(kv)
        spec = arm.speculation
        if spec is None:
            return setup
        if spec.method == "prompt_lookup":
            setup.kwargs |= {"prompt_lookup_num_tokens": spec.num_tokens, "max_matching_ngram_size": spec.max_ngram}
            setup.cost_ratio = 0.0
            return setup
        if spec.method != "draft_model" or spec.draft is None:
            raise EngineUnavailableError(
                f"arm {arm.name!r} of pair {arm.pair!r}: speculation method {spec.method!r} is not supported by the "
                "transformers engine (it supports prompt_lookup and draft_model). Use --engine=vllm for EAGLE/MTP."
            )
        draft, resolved, cost = self._draft(arm, model, target, tokenizer)
        setup.kwargs |= {"assistant_model": draft}
        setup.models["draft"] = resolved
        setup.cost_ratio = cost
        return setup

    def _draft(
        self, arm: Arm, target_model: Any, target: ResolvedModel, tokenizer: Any
    ) -> tuple[Any, ResolvedModel, float]:
        import torch
        from transformers import AutoModelForCausalLM

        spec = arm.speculation
        assert spec is not None and spec.draft is not None
        resolved = resolve(spec.draft, self._base_dir)
        key = (str(resolved.folder), spec.draft_layers, arm.dtype, str(target.folder))
        cached = self._drafts.get(key)
        if cached is None:
            extra = {} if spec.draft_layers is None else {"num_hidden_layers": spec.draft_layers}
            dtype = getattr(torch, arm.dtype)
            loaded: Any = AutoModelForCausalLM.from_pretrained(resolved.folder, dtype=dtype, **extra)
            draft = loaded.to(self._device).eval()
            if resolved.folder == target.folder:
                # A truncated copy of the target shares its embeddings and head instead of holding a second copy.
                draft.set_input_embeddings(target_model.get_input_embeddings())
                draft.lm_head = target_model.lm_head
            config = draft.generation_config
            config.num_assistant_tokens = spec.num_tokens
            config.num_assistant_tokens_schedule = "constant"
            config.assistant_confidence_threshold = 0.0
            cached = (draft, resolved, _measure_cost_ratio(draft, target_model, tokenizer, self._device))
            self._drafts[key] = cached
        return cached

    def _arm(self, name: str) -> _Setup:
        setup = self._arms.get(name)
        if setup is None:
            if not self._arms:
                raise MeasurementError("engine used before load()")
            raise MeasurementError(f"unknown arm {name!r}; the transformers engine has {', '.join(self._arms)}")
        return setup

    def _encode(self, setup: _Setup, prompt: Prompt) -> Any:
        key = (setup.tokenizer_key, prompt.id)
        cached = self._inputs.get(key)
        if cached is not None and cached[0] == prompt:
            return cached[1]
        tokenizer = setup.tokenizer
        messages = [] if prompt.system is None else [{"role": "system", "content": prompt.system}]
        messages.append({"role": "user", "content": prompt.text})
        if getattr(tokenizer, "chat_template", None):
            encoded = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            ids = encoded["input_ids"]
        else:
            ids = tokenizer(prompt.text, return_tensors="pt")["input_ids"]
        ids = ids.to(self._device)
        self._inputs[key] = (prompt, ids)
        return ids

    def _generate(self, setup: _Setup, ids: Any, max_new_tokens: int, clock: ChunkClock | TurnClock | None) -> Any:
        import torch

        tokenizer = setup.tokenizer
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": False,
            "temperature": None,
            "top_p": None,
            "top_k": None,
            "pad_token_id": tokenizer.pad_token_id or tokenizer.eos_token_id,
            "attention_mask": torch.ones_like(ids),
            **setup.kwargs,
        }
        with inference_context(setup.arm.optimisation.weights):
            return setup.model.generate(ids, streamer=clock, **kwargs)

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int, load: LoadShape | None = None) -> ArmRun:
        setup = self._arm(arm)
        started = time.perf_counter()
        traces = tuple(self._run_one(setup, prompt, repetition) for prompt in prompts)
        return ArmRun(arm=arm, traces=traces, wall_s=time.perf_counter() - started)

    def run_lockstep(self, prompt: Prompt, arms: Sequence[str], *, repetition: int) -> list[ArmRun]:
        """One prompt in every arm at once, the arms taking turns step by step (`specgate.engines.lockstep`); per
        arm its run, timed on its own turns (`ArmRun.spans`), with the unit's run-queue wait shared by those times."""
        setups = [self._arm(arm) for arm in arms]
        for setup in setups:  # tokenized before the arms start: nothing but their steps runs while they alternate
            self._encode(setup, prompt)
        before = self._queue.read()
        started = time.perf_counter()
        done = together(
            [partial(self._run_one, setup, prompt, repetition) for setup in setups],
            [setup.arm.slowdown for setup in setups],
            cpu=current_cpu() if self._single_thread else None,
        )
        unit_s = time.perf_counter() - started
        wait = waited(before, self._queue.read())
        return [
            ArmRun(
                arm=trace.arm,
                traces=(replace(trace, wait_s=None if wait is None else wait * clock.held_s / unit_s),),
                wall_s=clock.held_s,
                spans=tuple(clock.spans),
            )
            for trace, clock in done
        ]

    def _run_one(
        self, setup: _Setup, prompt: Prompt, repetition: int, clock: ChunkClock | TurnClock | None = None
    ) -> RequestTrace:
        arm = setup.arm.name
        ids = self._encode(setup, prompt)
        self._steps.reset()
        queue_before = None if clock is not None else self._queue.read()
        clock = clock or ChunkClock(setup.arm.slowdown)
        submit, submit_cpu = clock.start()
        try:
            output = self._generate(setup, ids, prompt.max_new_tokens, clock)
        except Exception as exc:
            done = clock.stop()
            return RequestTrace(
                prompt.id,
                arm,
                repetition,
                submit,
                (),
                (),
                (),
                "",
                int(ids.shape[1]),
                done_s=done,
                error=f"{type(exc).__name__}: {exc}",
            )
        done = clock.stop()
        queue_after = None if queue_before is None else self._queue.read()
        new_ids = tuple(int(t) for t in output[0, ids.shape[1] :].tolist())
        eos = setup.tokenizer.eos_token_id
        return RequestTrace(
            prompt_id=prompt.id,
            arm=arm,
            repetition=repetition,
            submit_s=submit,
            chunk_times_s=tuple(clock.times),
            chunk_tokens=tuple(clock.sizes),
            output_ids=new_ids,
            output_text=setup.tokenizer.decode(new_ids, skip_special_tokens=True),
            prompt_tokens=int(ids.shape[1]),
            drafted=tuple(self._steps.drafted),
            accepted=tuple(self._steps.accepted),
            done_s=done,
            draft_s=tuple(self._steps.draft_s),
            finish_reason="stop" if new_ids and new_ids[-1] == eos else "length",
            cpu_ttft_s=clock.cpu[0] - submit_cpu if clock.cpu else None,
            cpu_e2el_s=clock.cpu[-1] - submit_cpu if clock.cpu else None,
            wait_s=waited(queue_before, queue_after),
            instance=self._instance,
        )

    def sample(
        self,
        prompt: Prompt,
        arm: str,
        *,
        seeds: Sequence[int],
        max_new_tokens: int,
        temperature: float = 0.7,
        top_p: float = 0.95,
    ) -> list[tuple[int, ...]]:
        """Seeded sampled outputs of one prompt in one arm, for the distribution-level losslessness test.

        A plain arm samples all seeds in one batch; assisted generation takes batch size 1, so a speculative arm
        samples seed by seed. Each output is the generated token ids.
        """
        import torch

        setup = self._arm(arm)
        ids = self._encode(setup, prompt)
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": True,
            "temperature": temperature,
            "top_p": top_p,
            "top_k": 0,
            "pad_token_id": setup.tokenizer.pad_token_id or setup.tokenizer.eos_token_id,
        }
        outputs: list[tuple[int, ...]] = []
        with inference_context(setup.arm.optimisation.weights):
            if not setup.kwargs:
                torch.manual_seed(seeds[0])
                batch = ids.repeat(len(seeds), 1)
                out = setup.model.generate(batch, attention_mask=torch.ones_like(batch), **kwargs)
                return [tuple(int(t) for t in row[ids.shape[1] :].tolist()) for row in out]
            for seed in seeds:
                torch.manual_seed(seed)
                out = setup.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs, **setup.kwargs)
                outputs.append(tuple(int(t) for t in out[0, ids.shape[1] :].tolist()))
        return outputs

    def logit_margin(self, arm: str, prompt: Prompt, prefix: tuple[int, ...], token_a: int, token_b: int) -> float:
        """The arm's target logit of `token_a` minus that of `token_b` after the prompt and `prefix`."""
        import torch

        setup = self._arm(arm)
        tail = torch.tensor([prefix], dtype=torch.long, device=self._device)
        ids = torch.cat([self._encode(setup, prompt), tail], dim=1)
        with inference_context(setup.arm.optimisation.weights):
            logits = setup.model(ids).logits[0, -1].float()
        return float(logits[token_a] - logits[token_b])

    def perplexity(self, arm: str, texts: Sequence[str], *, max_tokens: int) -> list[tuple[float, int]]:
        """Per document, (summed NLL, tokens scored) through the arm's weights and KV cache (no chat template)."""
        setup = self._arm(arm)
        scores = []
        for text in texts:
            ids = setup.tokenizer(text, return_tensors="pt")["input_ids"][:, :max_tokens].to(self._device)
            optimisation = setup.arm.optimisation
            cache = new_cache(setup.model, optimisation.kv_cache)
            scores.append(score_document(setup.model, ids, cache, optimisation.weights))
        return scores

    def models(self, arm: str) -> Mapping[str, ResolvedModel]:
        return dict(self._arm(arm).models)

    def cost_ratio(self, arm: str) -> float | None:
        return self._arm(arm).cost_ratio

    def versions(self) -> Mapping[str, str]:
        import torch
        import transformers

        return {"engine": "transformers", "transformers": transformers.__version__, "torch": torch.__version__}

    def close(self) -> None:
        self._arms.clear()
        self._targets.clear()
        self._drafts.clear()
        self._inputs.clear()


def _measure_cost_ratio(draft: Any, target: Any, tokenizer: Any, device: str, tokens: int = 16) -> float:
    """c = draft step cost / target step cost, from plain greedy decoding of each model alone."""
    import torch

    ids = tokenizer("The quick brown fox jumps over the lazy dog.", return_tensors="pt")["input_ids"].to(device)
    costs = []
    for model in (draft, target):
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=tokenizer.eos_token_id)
            start = time.perf_counter()
            model.generate(
                ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id
            )
            costs.append(time.perf_counter() - start)
    return costs[0] / costs[1]
