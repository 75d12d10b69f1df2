"""The transformers engine: `generate` with assisted generation, measured per token.

Arms: `ar` is plain greedy decoding; `spec` is assisted generation, with `prompt_lookup_num_tokens=γ` (n-gram
prompt lookup) or `assistant_model=` (a draft model drafting γ tokens per step, fixed schedule).

Timing: a streamer records `time.perf_counter()` each time `generate` hands it tokens (one chunk per verification
step with speculation). Token copies to the host synchronize the device, so timestamps are real on CUDA/NPU too.
Acceptance is counted, not estimated: the candidate generator is wrapped and every call of
`update_candidate_strategy(input_ids, scores, n_matches)` is one verification step with `scores.shape[1] - 1`
tokens drafted and `n_matches` accepted (after transformers' own EOS/length cropping).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.config import HardwareProfile, PairConfig
from specgate.engines.base import ArmRun, Prompt, RequestTrace
from specgate.errors import EngineUnavailableError, MeasurementError
from specgate.models import ResolvedModel, resolve

ARMS = ("ar", "spec")


class _ChunkClock:
    """A minimal streamer: the arrival time and size of each chunk. Nothing else runs on the hot path."""

    __slots__ = ("_prompt_seen", "sizes", "times")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.sizes: list[int] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        now = time.perf_counter()
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(now)
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        pass


class _StepCounter:
    """Collects (drafted, accepted) per verification step of the request being generated."""

    __slots__ = ("accepted", "drafted")

    def __init__(self) -> None:
        self.drafted: list[int] = []
        self.accepted: list[int] = []

    def reset(self) -> None:
        self.drafted = []
        self.accepted = []

    def instrument(self, model: Any) -> None:
        original = model._get_candidate_generator
        counter = self

        def get_candidate_generator(*args: Any, **kwargs: Any) -> Any:
            generator = original(*args, **kwargs)
            update = generator.update_candidate_strategy

            def update_candidate_strategy(input_ids: Any, scores: Any, num_matches: Any) -> Any:
                counter.drafted.append(int(scores.shape[1]) - 1)
                counter.accepted.append(int(num_matches))
                return update(input_ids, scores, num_matches)

            generator.update_candidate_strategy = update_candidate_strategy
            return generator

        model._get_candidate_generator = get_candidate_generator


class TransformersEngine:
    """Runs a pair with Hugging Face transformers on the profile's device (batch size 1)."""

    name = "transformers"
    per_request = True

    def __init__(self, base_dir: Path | None = None) -> None:
        self._base_dir = base_dir
        self._model: Any = None
        self._draft: Any = None
        self._tokenizer: Any = None
        self._device = "cpu"
        self._spec_kwargs: dict[str, Any] = {}
        self._steps = _StepCounter()
        self._inputs: dict[str, Any] = {}
        self.resolved: dict[str, ResolvedModel] = {}
        self.cost_ratio: float | None = None
        self.pair: PairConfig | None = None

    @property
    def arms(self) -> Sequence[str]:
        return ARMS

    def load(self, pair: PairConfig, hardware: HardwareProfile) -> None:
        from specgate.hardware.backends import get_backend

        get_backend(hardware.backend, hardware.device, profile=hardware.name).check_available()
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise EngineUnavailableError(
                f"the transformers engine needs torch and transformers ({exc}). "
                "Install them: pip install torch==2.13.0 'specgate[hf]'"
            ) from exc
        if hardware.threads:
            torch.set_num_threads(hardware.threads)
        self.pair = pair
        self._device = hardware.device
        dtype = getattr(torch, pair.dtype or hardware.dtype)
        target = resolve(pair.target, self._base_dir)
        self.resolved["target"] = target
        self._tokenizer = AutoTokenizer.from_pretrained(target.folder)
        model: Any = AutoModelForCausalLM.from_pretrained(target.folder, dtype=dtype)
        self._model = model.to(self._device).eval()
        self._configure_speculation(pair, dtype, AutoModelForCausalLM)
        self._steps.instrument(self._model)

    def _configure_speculation(self, pair: PairConfig, dtype: Any, auto_model: Any) -> None:
        spec = pair.speculation
        if spec.method == "prompt_lookup":
            self._spec_kwargs = {"prompt_lookup_num_tokens": spec.num_tokens, "max_matching_ngram_size": spec.max_ngram}
            self.cost_ratio = 0.0
            return
        if spec.method != "draft_model" or spec.draft is None:
            raise EngineUnavailableError(
                f"pair {pair.name!r}: speculation method {spec.method!r} is not supported by the transformers engine "
                "(it supports prompt_lookup and draft_model). Use --engine=vllm for EAGLE/MTP."
            )
        draft_ref = resolve(spec.draft, self._base_dir)
        self.resolved["draft"] = draft_ref
        extra = {} if spec.draft_layers is None else {"num_hidden_layers": spec.draft_layers}
        draft = auto_model.from_pretrained(draft_ref.folder, dtype=dtype, **extra).to(self._device).eval()
        if draft_ref.folder == self.resolved["target"].folder:
            # A truncated copy of the target shares its embeddings and head instead of holding a second copy.
            draft.set_input_embeddings(self._model.get_input_embeddings())
            draft.lm_head = self._model.lm_head
        config = draft.generation_config
        config.num_assistant_tokens = spec.num_tokens
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0
        self._draft = draft
        self._spec_kwargs = {"assistant_model": draft}
        self.cost_ratio = self._measure_cost_ratio()

    def _encode(self, prompt: Prompt) -> Any:
        cached = self._inputs.get(prompt.id)
        if cached is not None and cached[0] == prompt:
            return cached[1]
        messages = [] if prompt.system is None else [{"role": "system", "content": prompt.system}]
        messages.append({"role": "user", "content": prompt.text})
        if getattr(self._tokenizer, "chat_template", None):
            encoded = self._tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            ids = encoded["input_ids"]
        else:
            ids = self._tokenizer(prompt.text, return_tensors="pt")["input_ids"]
        ids = ids.to(self._device)
        self._inputs[prompt.id] = (prompt, ids)
        return ids

    def _generate(self, ids: Any, max_new_tokens: int, arm: str, clock: _ChunkClock | None) -> Any:
        import torch

        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": False,
            "temperature": None,
            "top_p": None,
            "top_k": None,
            "pad_token_id": self._tokenizer.pad_token_id or self._tokenizer.eos_token_id,
            "attention_mask": torch.ones_like(ids),
        }
        if arm == "spec":
            kwargs.update(self._spec_kwargs)
        with torch.inference_mode():
            return self._model.generate(ids, streamer=clock, **kwargs)

    def run(self, prompts: Sequence[Prompt], arm: str, *, repetition: int) -> ArmRun:
        if arm not in ARMS:
            raise MeasurementError(f"unknown arm {arm!r}; the transformers engine has {', '.join(ARMS)}")
        if self._model is None:
            raise MeasurementError("engine used before load()")
        started = time.perf_counter()
        traces = tuple(self._run_one(prompt, arm, repetition) for prompt in prompts)
        return ArmRun(arm=arm, traces=traces, wall_s=time.perf_counter() - started)

    def _run_one(self, prompt: Prompt, arm: str, repetition: int) -> RequestTrace:
        ids = self._encode(prompt)
        clock = _ChunkClock()
        self._steps.reset()
        submit = time.perf_counter()
        try:
            output = self._generate(ids, prompt.max_new_tokens, arm, clock)
        except Exception as exc:
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
                done_s=time.perf_counter(),
                error=f"{type(exc).__name__}: {exc}",
            )
        done = time.perf_counter()
        new_ids = tuple(int(t) for t in output[0, ids.shape[1] :].tolist())
        eos = self._tokenizer.eos_token_id
        return RequestTrace(
            prompt_id=prompt.id,
            arm=arm,
            repetition=repetition,
            submit_s=submit,
            chunk_times_s=tuple(clock.times),
            chunk_tokens=tuple(clock.sizes),
            output_ids=new_ids,
            output_text=self._tokenizer.decode(new_ids, skip_special_tokens=True),
            prompt_tokens=int(ids.shape[1]),
            drafted=tuple(self._steps.drafted),
            accepted=tuple(self._steps.accepted),
            done_s=done,
            finish_reason="stop" if new_ids and new_ids[-1] == eos else "length",
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

        The reference arm samples all seeds in one batch; assisted generation takes batch size 1, so the speculative
        arm samples seed by seed. Each output is the generated token ids.
        """
        import torch

        ids = self._encode(prompt)
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": True,
            "temperature": temperature,
            "top_p": top_p,
            "top_k": 0,
            "pad_token_id": self._tokenizer.pad_token_id or self._tokenizer.eos_token_id,
        }
        outputs: list[tuple[int, ...]] = []
        with torch.inference_mode():
            if arm != "spec":
                torch.manual_seed(seeds[0])
                batch = ids.repeat(len(seeds), 1)
                out = self._model.generate(batch, attention_mask=torch.ones_like(batch), **kwargs)
                return [tuple(int(t) for t in row[ids.shape[1] :].tolist()) for row in out]
            for seed in seeds:
                torch.manual_seed(seed)
                out = self._model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs, **self._spec_kwargs)
                outputs.append(tuple(int(t) for t in out[0, ids.shape[1] :].tolist()))
        return outputs

    def logit_margin(self, prompt: Prompt, prefix: tuple[int, ...], token_a: int, token_b: int) -> float:
        """Target logit of `token_a` minus that of `token_b` after the prompt and `prefix` (explains divergences)."""
        import torch

        ids = torch.cat([self._encode(prompt), torch.tensor([prefix], dtype=torch.long, device=self._device)], dim=1)
        with torch.inference_mode():
            logits = self._model(ids).logits[0, -1].float()
        return float(logits[token_a] - logits[token_b])

    def _measure_cost_ratio(self, tokens: int = 16) -> float:
        """c = draft step cost / target step cost, from plain greedy decoding of each model alone."""
        import torch

        ids = self._tokenizer("The quick brown fox jumps over the lazy dog.", return_tensors="pt")["input_ids"]
        ids = ids.to(self._device)
        costs = []
        for model in (self._draft, self._model):
            with torch.inference_mode():
                model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=self._tokenizer.eos_token_id)
                start = time.perf_counter()
                model.generate(
                    ids,
                    max_new_tokens=tokens,
                    min_new_tokens=tokens,
                    do_sample=False,
                    pad_token_id=self._tokenizer.eos_token_id,
                )
                costs.append(time.perf_counter() - start)
        return costs[0] / costs[1]

    def versions(self) -> Mapping[str, str]:
        import torch
        import transformers

        return {"engine": "transformers", "transformers": transformers.__version__, "torch": torch.__version__}

    def close(self) -> None:
        self._model = None
        self._draft = None
        self._inputs.clear()
