"""The project config (`specgate.yaml`): pairs and their arms, workloads, and the gate policy, validated.

Every problem is a `ConfigError` that names the file, the key, what is allowed and the closest match, so that the
plugin turns it into a `pytest.UsageError` before anything runs.

A pair is a target model with its speculation: arms `ar` (speculation off), `spec`, and any under `arms:` (the pair
with a few keys changed: speculation, quantization, batching; `ladder:` climbs them, `specgate.config.optimisation`).
`reference:` names the pair released today, measured beside this one in the same run.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from specgate.accuracy import SCORED_TASKS
from specgate.config.hardware import DTYPES, SLA_KEYS
from specgate.config.optimisation import (
    OPTIMISATION_KEYS,
    LadderStepSpec,
    Optimisation,
    parse_ladder,
    parse_optimisation,
)
from specgate.config.parallel import parse_overrides
from specgate.config.policy import GatePolicy, read_gate
from specgate.config.validation import (
    check_choice,
    check_keys,
    did_you_mean,
    fail,
    mapping,
    number,
    read_yaml,
    typed,
)
from specgate.content import load_checker
from specgate.errors import ConfigError
from specgate.registry import engine_names

SPECULATION_METHODS = ("prompt_lookup", "draft_model", "eagle", "eagle3", "mtp")
TASKS = ("generate", *SCORED_TASKS)  # generate: no reference answers, nothing to score
DEFAULT_ARMS = ("ar", "spec")
REFERENCE_PREFIX = "ref-"
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


@dataclass(frozen=True, slots=True)
class Speculation:
    """How an arm speculates. `num_tokens` is the draft length γ."""

    method: str
    num_tokens: int
    draft: str | None = None
    draft_layers: int | None = None
    max_ngram: int = 3
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ArmSpec:
    """An arm of a pair: a name and the configuration it measures (`speculation` None: plain decoding;
    `optimisation`: KV-cache and weight quantization, batching)."""

    name: str
    target: str
    speculation: Speculation | None
    dtype: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    optimisation: Optimisation = field(default_factory=Optimisation)


@dataclass(frozen=True, slots=True)
class PairConfig:
    """A target model with its speculation: the unit the gate judges."""

    name: str
    target: str
    speculation: Speculation
    dtype: str | None = None
    engine: str | None = None
    default: bool = False
    description: str = ""
    sla: Mapping[str, float] = field(default_factory=dict)
    reference: str | None = None
    extra_arms: tuple[ArmSpec, ...] = ()
    ladder: tuple[LadderStepSpec, ...] = ()
    parallel: Mapping[str, Any] = field(default_factory=dict)  # over the profile's (`specgate.config.parallel`)

    @property
    def arms(self) -> tuple[ArmSpec, ...]:
        """`ar`, `spec`, then the extra arms in their declared order."""
        return (
            ArmSpec("ar", self.target, None, self.dtype),
            ArmSpec("spec", self.target, self.speculation, self.dtype),
            *self.extra_arms,
        )


@dataclass(frozen=True, slots=True)
class SamplingConfig:
    """The sampled-decoding distribution test a workload opts into (`sampling:`)."""

    prompts: int = 4
    positions: int = 8
    samples: int = 200
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """A JSONL file of prompts and how to read it.

    The gate times the first `limit` prompts; `acceptance_prompts` (≥ limit) is how many prompts of the file the
    acceptance comparison may extend over, when the timed ones cannot tell a new draft's acceptance from the
    reference's (`specgate.measure.pool`). `concurrency` and `request_rate` are the load shape of engines that run a
    whole arm at once (vLLM, served endpoints): unset or 1 is latency mode, one request at a time
    (`specgate.engines.base.LoadShape`). `sweep` (ascending concurrency levels, e.g. [1, 2, 4, 8]) makes it a
    concurrency sweep instead: plain and speculative decoding measured at each level, to find where speculation
    stops paying (`specgate.measure.sweep`)."""

    name: str
    path: Path
    max_new_tokens: int = 64
    limit: int | None = None
    acceptance_prompts: int | None = None
    concurrency: int | None = None
    request_rate: float | None = None
    task: str = "generate"
    gate_speed: bool = True
    long: bool = False
    perplexity: bool = False
    repetitions: int | None = None
    template: str | None = None
    default: bool = False
    description: str = ""
    fields: Mapping[str, str] = field(default_factory=dict)
    content: tuple[Mapping[str, Any], ...] = ()
    sampling: SamplingConfig | None = None
    sweep: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ProjectConfig:
    """`specgate.yaml`: the pairs, workloads and gate policy of a project."""

    pairs: Mapping[str, PairConfig]
    workloads: Mapping[str, WorkloadConfig]
    gate: GatePolicy
    source: Path

    def default_pairs(self) -> list[str]:
        marked = [name for name, pair in self.pairs.items() if pair.default]
        return marked or list(self.pairs)

    def default_workloads(self) -> list[str]:
        marked = [name for name, workload in self.workloads.items() if workload.default]
        return marked or list(self.workloads)


def _speculation(data: Any, source: str, where: str) -> Speculation:
    raw = mapping(data, source, where)
    check_keys(raw, [f.name for f in fields(Speculation)], source, f"{where}.")
    if "method" not in raw:
        raise fail(source, f"{where}.method", f"required; one of {', '.join(SPECULATION_METHODS)}")
    method = check_choice(raw["method"], SPECULATION_METHODS, source, f"{where}.method")
    num_tokens = int(typed(raw.get("num_tokens", 3), int, source, f"{where}.num_tokens"))
    if not 1 <= num_tokens <= 64:
        raise fail(source, f"{where}.num_tokens", f"draft length must be 1..64, got {num_tokens}")
    draft = raw.get("draft")
    if method != "prompt_lookup" and not draft:
        raise fail(source, f"{where}.draft", f"method {method!r} needs a draft model (a path or embedded:<name>)")
    layers = raw.get("draft_layers")
    max_ngram = int(typed(raw.get("max_ngram", 3), int, source, f"{where}.max_ngram"))
    if max_ngram < 1:
        raise fail(source, f"{where}.max_ngram", f"must be ≥ 1, got {max_ngram}")
    return Speculation(
        method=method,
        num_tokens=num_tokens,
        draft=None if draft is None else str(typed(draft, str, source, f"{where}.draft")),
        draft_layers=None if layers is None else int(typed(layers, int, source, f"{where}.draft_layers")),
        max_ngram=max_ngram,
        options=dict(mapping(raw.get("options", {}), source, f"{where}.options")),
    )


def _dtype(value: Any, source: str, key: str) -> str | None:
    return None if value is None else check_choice(value, DTYPES, source, key)


ARM_KEYS = ("speculation", "target", "dtype", "options", "description", *OPTIMISATION_KEYS)


def _extra_arms(data: Any, pair: PairConfig, source: str) -> tuple[ArmSpec, ...]:
    where = f"pairs.{pair.name}.arms"
    raw = mapping(data, source, where)
    arms = []
    for name, spec in raw.items():
        key = f"{where}.{name}"
        if not isinstance(name, str) or not _ARM_NAME.match(name):
            raise fail(source, key, "an arm name is 1-40 letters, digits, '_', '.' or '-', starting with a letter")
        if name in DEFAULT_ARMS or name.startswith(REFERENCE_PREFIX):
            raise fail(
                source, key, f"the names {', '.join(DEFAULT_ARMS)} and '{REFERENCE_PREFIX}…' are taken; choose another"
            )
        values = mapping(spec if spec is not None else {}, source, key)
        check_keys(values, ARM_KEYS, source, f"{key}.")
        if "speculation" not in values:
            speculation: Speculation | None = pair.speculation
        elif values["speculation"] is None:
            speculation = None
        else:
            speculation = _speculation(values["speculation"], source, f"{key}.speculation")
        arms.append(
            ArmSpec(
                name=name,
                target=str(typed(values.get("target", pair.target), str, source, f"{key}.target")),
                speculation=speculation,
                dtype=_dtype(values.get("dtype", pair.dtype), source, f"{key}.dtype"),
                options=dict(mapping(values.get("options", {}), source, f"{key}.options")),
                optimisation=parse_optimisation(values, source, key),
            )
        )
    return tuple(arms)


PAIR_KEYS = (
    *("target", "speculation", "dtype", "engine", "default", "description", "sla", "reference", "arms", "ladder"),
    "parallel",
)


def _pair(name: str, data: Any, source: str) -> PairConfig:
    where = f"pairs.{name}"
    raw = mapping(data, source, where)
    check_keys(raw, PAIR_KEYS, source, f"{where}.")
    if "target" not in raw:
        raise fail(source, f"{where}.target", "required: a model folder, a .gguf file or embedded:<name>")
    if "speculation" not in raw:
        raise fail(source, f"{where}.speculation", "required: e.g. {method: prompt_lookup, num_tokens: 3}")
    sla_raw = mapping(raw.get("sla", {}), source, f"{where}.sla")
    check_keys(sla_raw, SLA_KEYS, source, f"{where}.sla.")
    engine = raw.get("engine")
    reference = raw.get("reference")
    pair = PairConfig(
        name=name,
        target=str(typed(raw["target"], str, source, f"{where}.target")),
        speculation=_speculation(raw["speculation"], source, f"{where}.speculation"),
        dtype=_dtype(raw.get("dtype"), source, f"{where}.dtype"),
        engine=None if engine is None else check_choice(engine, engine_names(), source, f"{where}.engine"),
        default=bool(typed(raw.get("default", False), bool, source, f"{where}.default")),
        description=str(raw.get("description", "")),
        sla={k: float(typed(v, (int, float), source, f"{where}.sla.{k}")) for k, v in sla_raw.items()},
        reference=None if reference is None else str(typed(reference, str, source, f"{where}.reference")),
        parallel=parse_overrides(raw.get("parallel"), source, f"{where}.parallel"),
    )
    from dataclasses import replace

    if "arms" in raw:
        pair = replace(pair, extra_arms=_extra_arms(raw["arms"], pair, source))
    if "ladder" in raw:
        names = tuple(a.name for a in pair.arms)
        pair = replace(pair, ladder=parse_ladder(raw["ladder"], names, source, f"{where}.ladder"))
    return pair


WORKLOAD_KEYS = tuple(f.name for f in fields(WorkloadConfig) if f.name != "name")


def _positive_int(raw: Mapping[str, Any], key: str, default: int | None, source: str, where: str) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    result = int(typed(value, int, source, f"{where}.{key}"))
    if result < 1:
        raise fail(source, f"{where}.{key}", f"must be ≥ 1, got {result}")
    return result


def _sampling(data: Any, source: str, where: str) -> SamplingConfig:
    raw = mapping(data if data is not None else {}, source, where)
    check_keys(raw, [f.name for f in fields(SamplingConfig)], source, f"{where}.")
    defaults = SamplingConfig()
    return SamplingConfig(
        prompts=_positive_int(raw, "prompts", defaults.prompts, source, where) or defaults.prompts,
        positions=_positive_int(raw, "positions", defaults.positions, source, where) or defaults.positions,
        samples=_positive_int(raw, "samples", defaults.samples, source, where) or defaults.samples,
        temperature=number(raw.get("temperature", defaults.temperature), source, f"{where}.temperature", low=0.01),
        top_p=number(raw.get("top_p", defaults.top_p), source, f"{where}.top_p", low=0.01, high=1.0),
        seed=int(typed(raw.get("seed", defaults.seed), int, source, f"{where}.seed")),
    )


def _content(data: Any, source: str, where: str, base_dir: Path) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(data, list) or not data:
        raise fail(source, where, "expected a list of checkers, e.g. [{type: words, name: banned, words: [...]}]")
    specs = []
    for index, spec in enumerate(data):
        checker = mapping(spec, source, f"{where}[{index}]")
        try:
            load_checker(checker, base_dir=base_dir)
        except ConfigError as exc:
            raise fail(source, f"{where}[{index}]", str(exc)) from None
        specs.append(dict(checker))
    return tuple(specs)


def _acceptance_prompts(raw: Mapping[str, Any], source: str, where: str) -> int | None:
    pool = _positive_int(raw, "acceptance_prompts", None, source, where)
    limit = _positive_int(raw, "limit", None, source, where)
    if pool is not None and (limit is None or pool < limit):
        problem = (
            "needs a `limit` (the timed prompts) to extend beyond" if limit is None else f"is below limit ({limit})"
        )
        raise fail(
            source, f"{where}.acceptance_prompts", f"{pool} {problem}: acceptance extends over prompts after them"
        )
    return pool


def _workload(name: str, data: Any, source: str, base_dir: Path) -> WorkloadConfig:
    where = f"workloads.{name}"
    raw = mapping(data, source, where)
    check_keys(raw, WORKLOAD_KEYS, source, f"{where}.")
    if "path" not in raw:
        raise fail(source, f"{where}.path", "required: a JSONL file, relative to the config file")
    text = str(typed(raw["path"], str, source, f"{where}.path"))
    path = (base_dir / os.path.expandvars(text)).resolve()  # ${VAR}: a data folder each machine names
    fields_map = mapping(raw.get("fields", {}), source, f"{where}.fields")
    check_keys(fields_map, ["id", "prompt", "reference", "system"], source, f"{where}.fields.")
    template = raw.get("template")
    return WorkloadConfig(
        name=name,
        path=path,
        max_new_tokens=_positive_int(raw, "max_new_tokens", 64, source, where) or 64,
        limit=_positive_int(raw, "limit", None, source, where),
        acceptance_prompts=_acceptance_prompts(raw, source, where),
        concurrency=_positive_int(raw, "concurrency", None, source, where),
        request_rate=None
        if raw.get("request_rate") is None
        else number(raw["request_rate"], source, f"{where}.request_rate", low=1e-6),
        task=check_choice(raw.get("task", "generate"), TASKS, source, f"{where}.task"),
        gate_speed=bool(typed(raw.get("gate_speed", True), bool, source, f"{where}.gate_speed")),
        long=bool(typed(raw.get("long", False), bool, source, f"{where}.long")),
        perplexity=bool(typed(raw.get("perplexity", False), bool, source, f"{where}.perplexity")),
        template=None if template is None else str(typed(template, str, source, f"{where}.template")),
        repetitions=_positive_int(raw, "repetitions", None, source, where),
        default=bool(typed(raw.get("default", False), bool, source, f"{where}.default")),
        description=str(raw.get("description", "")),
        fields={str(k): str(v) for k, v in fields_map.items()},
        content=_content(raw["content"], source, f"{where}.content", base_dir) if "content" in raw else (),
        sampling=_sampling(raw["sampling"], source, f"{where}.sampling") if "sampling" in raw else None,
        sweep=_sweep(raw, source, where),
    )


def _sweep(raw: Mapping[str, Any], source: str, where: str) -> tuple[int, ...]:
    """A concurrency sweep's levels: at least two, ascending, on a workload without a load shape of its own."""
    if raw.get("sweep") is None:
        return ()
    levels = raw["sweep"]
    if not isinstance(levels, list) or len(levels) < 2:
        raise fail(source, f"{where}.sweep", f"list at least two concurrency levels, e.g. [1, 2, 4, 8]; got {levels!r}")
    found = tuple(int(typed(v, int, source, f"{where}.sweep")) for v in levels)
    if found[0] < 1 or any(b <= a for a, b in itertools.pairwise(found)):
        raise fail(source, f"{where}.sweep", f"levels must be ≥ 1 and ascending, e.g. [1, 2, 4, 8]; got {list(found)}")
    for key in ("concurrency", "request_rate"):
        if raw.get(key) is not None:
            raise fail(source, f"{where}.{key}", "a sweep sets the concurrency per level: drop it, or drop `sweep`")
    if raw.get("gate_speed") is False:
        raise fail(source, f"{where}.gate_speed", "a sweep measures speed: drop `gate_speed: false`, or `sweep`")
    return found


def _check_references(pairs: Mapping[str, PairConfig], source: str) -> None:
    for pair in pairs.values():
        if pair.reference is None:
            continue
        key = f"pairs.{pair.name}.reference"
        if pair.reference not in pairs:
            raise fail(
                source,
                key,
                f"{pair.reference!r} is not a pair of this config.{did_you_mean(pair.reference, list(pairs))} "
                f"Known: {', '.join(pairs)}",
            )
        if pair.reference == pair.name:
            raise fail(source, key, "a pair cannot be its own reference; name the released configuration's pair")


def load_project_config(path: Path) -> ProjectConfig:
    """Read and validate `specgate.yaml`."""
    source = str(path)
    if not path.is_file():
        raise ConfigError(f"{path}: project config not found. Create specgate.yaml or pass --specgate-config=PATH.")
    raw = mapping(read_yaml(path) or {}, source, "(top level)")
    check_keys(raw, ["pairs", "workloads", "gate"], source, "")
    pairs_raw = mapping(raw.get("pairs", {}), source, "pairs")
    workloads_raw = mapping(raw.get("workloads", {}), source, "workloads")
    if not pairs_raw:
        raise fail(source, "pairs", "at least one pair is required")
    if not workloads_raw:
        raise fail(source, "workloads", "at least one workload is required")
    pairs = {str(n): _pair(str(n), d, source) for n, d in pairs_raw.items()}
    _check_references(pairs, source)
    return ProjectConfig(
        pairs=pairs,
        workloads={str(n): _workload(str(n), d, source, path.parent) for n, d in workloads_raw.items()},
        gate=read_gate(raw.get("gate", {}), source),
        source=path,
    )
