"""Optimisation arms and the ladder: what an arm changes besides speculation, and the order the gate climbs them.

An arm of a pair may quantize its KV cache (`kv_cache:`), quantize its weights (`weights:`) and batch requests
(`batching:`), alone or stacked with each other and with speculation. Each is mapped to what an engine really does
(`EngineSpec.optimisations` in `specgate.registry`): transformers on CPU runs optimum-quanto's quantized KV cache
and torchao/quanto weight-only kernels; vLLM takes `kv_cache_dtype`, `quantization=` and `max_num_seqs`; a served
endpoint batches its requests (the arm's `batching.concurrency`). What an engine cannot run is a usage error that
lists what it can; a library that is missing is one with its install command.

`ladder:` under a pair lists arms in the order they are climbed, each judged against the step below it (speed) and
against full precision, the plain `ar` arm (accuracy, perplexity, output agreement)::

    ladder:
      steps: [kv-int4, w-int8, w-int8-pld, batch-8]     # or {arm: w-int8, max_accuracy_drop: 0.05}
      max_accuracy_drop: 0.03        # points of task accuracy (absolute, 0.03 = 3 points); default per step
      max_perplexity_rise: 0.5       # absolute perplexity on the `perplexity: true` workloads
      min_speed_gain: 1.05           # below it, the step does not pay: reported as not worth it
      # lossless: true               # per step: must reproduce full precision's greedy outputs (default: a step
                                     # that differs from full precision only in speculation)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specgate.config.validation import check_keys, did_you_mean, fail, mapping, number, typed
from specgate.registry import engine_specs, optimisations


@dataclass(frozen=True, slots=True)
class KvCache:
    """A quantized KV cache: `dtype` (int4, int2, fp8, …) through `backend` (quanto on transformers, vllm)."""

    dtype: str
    backend: str


@dataclass(frozen=True, slots=True)
class Weights:
    """Weight-only quantization: `dtype` (int8, int4, int2, awq, gptq, fp8) through `library`."""

    dtype: str
    library: str


@dataclass(frozen=True, slots=True)
class Batching:
    """Continuous batching: up to `max_num_seqs` sequences in one engine step, offered `concurrency` at a time."""

    max_num_seqs: int
    concurrency: int


@dataclass(frozen=True, slots=True)
class Optimisation:
    """What an arm changes besides speculation (all None: full precision, one request at a time)."""

    kv_cache: KvCache | None = None
    weights: Weights | None = None
    batching: Batching | None = None

    @property
    def any(self) -> bool:
        return self.kv_cache is not None or self.weights is not None or self.batching is not None

    def describe(self) -> str:
        parts = []
        if self.weights is not None:
            parts.append(f"weights {self.weights.dtype} ({self.weights.library})")
        if self.kv_cache is not None:
            parts.append(f"KV cache {self.kv_cache.dtype} ({self.kv_cache.backend})")
        if self.batching is not None:
            parts.append(f"batching {self.batching.max_num_seqs} seqs × {self.batching.concurrency} in flight")
        return ", ".join(parts)

    def as_data(self) -> list[Any]:
        kv, w, b = self.kv_cache, self.weights, self.batching
        return [
            None if kv is None else [kv.dtype, kv.backend],
            None if w is None else [w.dtype, w.library],
            None if b is None else [b.max_num_seqs, b.concurrency],
        ]


OPTIMISATION_KEYS = ("kv_cache", "weights", "batching")


def _backend_default(kind: str, dtype: str) -> str:
    """The backend of `dtype` when the arm names none: the first one, in the engines' registration order, that runs
    it (int4 KV cache → quanto, int8 KV cache → hqq, int8 weights → torchao, int4/int2 weights → quanto, fp8 or awq →
    vllm); for a dtype no engine runs, the first backend of the last engine offering the kind (the arm's engine then
    refuses it, listing what it runs)."""
    offered = [spec.optimisations[kind] for spec in engine_specs() if kind in spec.optimisations]
    for capability in offered:
        for backend, dtypes in capability.choices.items():
            if dtype in dtypes:
                return backend
    return next(iter(offered[-1].choices)) if offered else ""


def parse_optimisation(values: Mapping[str, Any], source: str, where: str) -> Optimisation:
    """The `kv_cache:`, `weights:` and `batching:` keys of an arm (their engine support is checked later)."""
    kv = weights = batching = None
    if values.get("kv_cache") is not None:
        raw = mapping(values["kv_cache"], source, f"{where}.kv_cache")
        check_keys(raw, ["dtype", "backend"], source, f"{where}.kv_cache.")
        dtype = str(typed(raw.get("dtype", "int4"), str, source, f"{where}.kv_cache.dtype"))
        backend = raw.get("backend") or _backend_default("kv_cache", dtype)
        kv = KvCache(dtype, str(typed(backend, str, source, f"{where}.kv_cache.backend")))
    if values.get("weights") is not None:
        raw = mapping(values["weights"], source, f"{where}.weights")
        check_keys(raw, ["dtype", "library"], source, f"{where}.weights.")
        if "dtype" not in raw:
            raise fail(source, f"{where}.weights.dtype", "required: int8, int4, int2 (CPU) or awq, gptq, fp8 (vLLM)")
        dtype = str(typed(raw["dtype"], str, source, f"{where}.weights.dtype"))
        library = raw.get("library") or _backend_default("weights", dtype)
        weights = Weights(dtype, str(typed(library, str, source, f"{where}.weights.library")))
    if values.get("batching") is not None:
        raw = mapping(values["batching"], source, f"{where}.batching")
        check_keys(raw, ["max_num_seqs", "concurrency"], source, f"{where}.batching.")
        seqs = int(number(raw.get("max_num_seqs", raw.get("concurrency", 8)), source, f"{where}.batching", low=1))
        concurrency = int(number(raw.get("concurrency", seqs), source, f"{where}.batching.concurrency", low=1))
        batching = Batching(seqs, concurrency)
    return Optimisation(kv, weights, batching)


def check_support(optimisation: Optimisation, engine: str, where: str) -> list[str]:
    """Problems running `optimisation` on `engine`: each lists what the engine can run, or how to install what it
    needs. Empty when it can run."""
    table = optimisations(engine)
    kv, w = optimisation.kv_cache, optimisation.weights
    chosen = {
        "kv_cache": None if kv is None else (kv.backend, kv.dtype),
        "weights": None if w is None else (w.library, w.dtype),
        "batching": None if optimisation.batching is None else ("", ""),
    }
    problems = []
    for kind, value in chosen.items():
        if value is None:
            continue
        capability = table.get(kind)
        if capability is None:
            can = ", ".join(k for k in OPTIMISATION_KEYS if k in table) or "no optimisation arm"
            problems.append(f"{where}.{kind}: engine {engine!r} cannot run a {kind} arm; it runs: {can}")
            continue
        backend, dtype = value
        if kind == "batching":
            continue
        if dtype not in capability.choices.get(backend, ()):
            offered = "; ".join(f"{b}: {', '.join(d)}" for b, d in capability.choices.items())
            problems.append(
                f"{where}.{kind}: {dtype} through {backend!r} is not supported by engine {engine!r}; it runs {offered}"
            )
            continue
        need = capability.requires.get(backend)
        if need is not None and _missing(need[0]):
            problems.append(
                f"{where}.{kind}: {backend} needs {need[0]!r}, which is not installed; install it: {need[1]}"
            )
    return problems


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


@dataclass(frozen=True, slots=True)
class LadderLimits:
    """When a ladder step blocks (accuracy, perplexity, output agreement) or is not worth it (speed). `lossless`: the
    step must reproduce full precision's greedy outputs (`ladder_agreement`); None decides by the arm: a step that
    differs from full precision only in its speculation is lossless (greedy speculative decoding is)."""

    max_accuracy_drop: float = 0.03
    max_perplexity_rise: float = 0.5
    min_speed_gain: float = 1.05
    lossless: bool | None = None


@dataclass(frozen=True, slots=True)
class LadderStepSpec:
    """One rung of the ladder: an arm of the pair and its limits."""

    arm: str
    limits: LadderLimits


LIMIT_KEYS = ("max_accuracy_drop", "max_perplexity_rise", "min_speed_gain")


def _limits(raw: Mapping[str, Any], defaults: LadderLimits, source: str, where: str) -> LadderLimits:
    values: dict[str, Any] = {k: number(raw[k], source, f"{where}.{k}", low=0.0) for k in LIMIT_KEYS if k in raw}
    if values.get("max_accuracy_drop", 0.0) >= 1.0:
        raise fail(source, f"{where}.max_accuracy_drop", "a share of problems in [0, 1), e.g. 0.03 for 3 points")
    if "lossless" in raw:
        if not isinstance(raw["lossless"], bool):
            raise fail(source, f"{where}.lossless", "true or false: whether the step must reproduce full precision")
        values["lossless"] = raw["lossless"]
    return LadderLimits(**{**{k: getattr(defaults, k) for k in (*LIMIT_KEYS, "lossless")}, **values})


def parse_ladder(data: Any, arms: tuple[str, ...], source: str, where: str) -> tuple[LadderStepSpec, ...]:
    """The `ladder:` of a pair: its steps in climbing order, each an arm of the pair other than `ar`."""
    raw = mapping(data, source, where)
    check_keys(raw, ["steps", *LIMIT_KEYS, "lossless"], source, f"{where}.")
    defaults = _limits(raw, LadderLimits(), source, where)
    steps_raw = raw.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        raise fail(source, f"{where}.steps", "a list of the pair's arms in climbing order, e.g. [kv-int4, w-int8]")
    steps: list[LadderStepSpec] = []
    for index, item in enumerate(steps_raw):
        key = f"{where}.steps[{index}]"
        if isinstance(item, str):
            item = {"arm": item}
        values = mapping(item, source, key)
        check_keys(values, ["arm", *LIMIT_KEYS, "lossless"], source, f"{key}.")
        allowed = [a for a in arms if a != "ar"]
        arm = values.get("arm")
        if arm not in allowed:
            hint = did_you_mean(str(arm), allowed)
            raise fail(source, f"{key}.arm", f"{arm!r} is not an arm of the pair.{hint} Steps: {', '.join(allowed)}")
        if any(s.arm == arm for s in steps):
            raise fail(source, key, f"arm {arm!r} is already a step of the ladder")
        steps.append(LadderStepSpec(arm, _limits(values, defaults, source, key)))
    return tuple(steps)
