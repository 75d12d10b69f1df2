"""Everything a gate run needs, checked before any engine starts: one usage error listing every problem.

`validate_run` is called by `GateRun.from_options` (so by the plugin too, at the first gate test): the options that
depend on each other (`--reference`, `--inject-slowdown`, `--update-baselines`), each selected pair's engine library
and model files, each reference (same engine; same tokenizer, since outputs are compared token by token), and each
selected workload's file (exists, UTF-8, one JSON object per line, the mapped fields present, enough prompts), the
stored baseline history of each selected pair × workload (schema, fields, fingerprints, the pair and workload it is
for; a missing one is the regression checks' business, not a usage error), and each served pair's endpoints (URL
syntax, the loopback/allow-list policy, an endpoint for every arm, the API key's variable). Only what the run selects
is read. Each problem names the file, the key or the line, what is wrong and how to fix it; several are reported
together.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from specgate.config import GatePolicy, HardwareProfile, PairConfig, ProjectConfig, WorkloadConfig
from specgate.errors import BaselineError, ConfigError, SpecgateError, did_you_mean
from specgate.plan import Arm
from specgate.registry import engine_spec, engine_specs, registered, require_engine, served
from specgate.store.baselines import BaselineStore


class RunToCheck(Protocol):
    """What the preflight reads of a `specgate.run.GateRun`."""

    project: ProjectConfig
    hardware: HardwareProfile
    pairs: list[str]
    workloads: list[str]
    engine_override: str | None
    reference_override: str | None
    inject_slowdown: float
    update_baselines: bool
    accept: tuple[str, ...]
    accept_reason: str
    record_missing: Path | None

    @property
    def policy(self) -> GatePolicy: ...

    @property
    def store(self) -> BaselineStore: ...

    def pair(self, name: str) -> PairConfig: ...

    def workload(self, name: str) -> WorkloadConfig: ...

    def engine_name(self, pair_name: str) -> str: ...

    def reference_of(self, pair_name: str) -> str | None: ...

    def arms(self, pair_name: str) -> Sequence[Arm]: ...


MAX_PROBLEMS = 20


def validate_run(run: RunToCheck) -> None:
    """Raise one `ConfigError` listing every problem of the run's configuration, or return."""
    problems: list[str] = []
    problems += _options(run)
    for pair in run.pairs:
        problems += _pair(run, pair)
    for workload in run.workloads:
        problems += _workload(run, workload)
        problems += _load_shape(run, workload)
    problems += _baselines(run)
    if problems:
        shown = problems[:MAX_PROBLEMS]
        more = len(problems) - len(shown)
        text = shown[0] if len(problems) == 1 else "\n".join(f"  - {p}" for p in shown)
        head = "" if len(problems) == 1 else f"{len(problems)} problems in the gate's configuration:\n"
        raise ConfigError(head + text + (f"\n  … and {more} more" if more else ""))


def _options(run: RunToCheck) -> list[str]:
    problems = []
    reference = run.reference_override
    known = list(run.project.pairs)
    if reference not in (None, "none") and reference not in run.project.pairs:
        problems.append(
            f"--reference={reference!r} is not a pair of {run.project.source.name}.{did_you_mean(reference, known)} "
            f"Known: {', '.join(known)}, or 'none' to switch reference mode off"
        )
    slowdown = run.inject_slowdown
    if not 0.0 <= slowdown <= 1.0:
        problems.append(f"--inject-slowdown={slowdown:g}: give a fraction of the step time between 0 and 1, e.g. 0.10")
    if slowdown and run.update_baselines:
        problems.append(
            "--inject-slowdown cannot be combined with --update-baselines: a deliberately slowed run must never become "
            "the baseline"
        )
    problems += _accept(run)
    if run.record_missing is not None and run.update_baselines:
        problems.append("--record-missing-baselines and --update-baselines: choose one (an update run records all)")
    if run.engine_override is not None:
        try:
            engine_spec(run.engine_override)
        except ConfigError as exc:
            problems.append(str(exc))
    return problems


def _accept(run: RunToCheck) -> list[str]:
    from specgate.checks.accept import ACCEPTABLE

    if not run.accept:
        return [] if not run.accept_reason else ["--accept-reason needs --accept=CHECK[,CHECK]"]
    problems = []
    unknown = [a for a in run.accept if a not in ACCEPTABLE]
    if unknown:
        problems.append(
            f"--accept={','.join(unknown)}: not a comparison an update run may accept. Acceptable: "
            f"{', '.join(ACCEPTABLE)} (latency is never accepted: record the slower build beside a reference instead)"
        )
    if not run.update_baselines:
        problems.append("--accept records an intended change in the baselines: it needs --update-baselines")
    if not run.accept_reason.strip():
        problems.append('--accept needs --accept-reason="why the change is intended" (it is kept in the history)')
    return problems


def _pair(run: RunToCheck, name: str) -> list[str]:
    problems: list[str] = []
    try:
        spec = require_engine(run.engine_name(name), name)
    except ConfigError as exc:
        return [str(exc)]
    problems += _optimisations(run, name, spec.name)
    problems += _parallel(run, name, spec.name)
    reference = run.reference_of(name)
    if reference is not None and reference not in run.project.pairs:
        return problems  # an unknown --reference is reported once, with the options
    if reference is not None and run.engine_name(reference) != run.engine_name(name):
        problems.append(
            f"pair {name!r} runs on {run.engine_name(name)!r} but its reference {reference!r} on "
            f"{run.engine_name(reference)!r}: a reference is measured beside the candidate by the same engine; "
            f"set pairs.{reference}.engine"
        )
    if spec.local_models:
        problems += _models(run, name)
        if reference is not None and not problems:
            problems += _same_tokenizer(run, name, reference)
    else:  # a served endpoint
        problems += _endpoints(run, name)
        if run.inject_slowdown:
            problems.append(
                f"--inject-slowdown={run.inject_slowdown:g}: pair {name!r} runs on the openai engine, whose servers "
                "specgate neither starts nor can slow, so the self-test would inject nothing; run it with "
                "--engine=vllm (specgate starts the servers and slows the candidate's) or --engine=transformers"
            )
    return problems


def _optimisations(run: RunToCheck, name: str, engine: str) -> list[str]:
    """Each arm's quantization and batching is something this engine runs, with its library installed."""
    from specgate.config.optimisation import check_support

    pair = run.pair(name)
    return [p for arm in pair.arms for p in check_support(arm.optimisation, engine, f"pairs.{name}.arms.{arm.name}")]


def _parallel(run: RunToCheck, name: str, engine: str) -> list[str]:
    """A multi-device layout is vLLM's (the served engine's layout is the server's own; the vllm engine passes it
    to the servers it starts, data parallelism included), and the Ray executor needs Ray."""
    import importlib.util

    from specgate.config.parallel import layout_of

    layout = layout_of(run.hardware.parallel, run.pair(name).parallel)
    where = f"pair {name!r} ({run.hardware.name} profile and pairs.{name}.parallel): {layout.describe()}"
    if layout.single or served(engine):
        return []
    spec = registered(engine)
    if spec is None or not spec.parallel:
        runs = ", ".join(s.name for s in engine_specs() if s.parallel)
        return [f"{where}: parallel layouts run on the {runs} engine; {engine!r} uses one device. Set engine: {runs}"]
    if layout.distributed_executor_backend == "ray" and importlib.util.find_spec("ray") is None:
        return [f"{where}: the ray executor needs Ray: pip install 'specgate[ray]' (and RAY_ADDRESS for a cluster)"]
    return []


def _endpoints(run: RunToCheck, name: str) -> list[str]:
    """Each arm of a served pair (the reference's too) has a well-formed, allowed endpoint and its API key."""
    from specgate.engines.openai.load import arm_endpoint, parse_settings, read_api_key

    problems: list[str] = []
    try:
        arms = run.arms(name)
    except SpecgateError as exc:
        return [str(exc)]
    for arm in arms:
        try:
            settings = parse_settings(arm.pair, arm.engine_options, arm.target, run.hardware.sla)
            arm_endpoint(arm.pair, arm.variant, arm.engine_options, settings)
            read_api_key(arm.pair, settings)
        except ConfigError as exc:
            if str(exc) not in problems:
                problems.append(str(exc))
    return problems


def _baselines(run: RunToCheck) -> list[str]:
    """The stored history of every selected pair × workload reads and is for that pair and workload: a broken one
    is found now, not after the measurement (and `--update-baselines` never replaces it)."""
    problems = []
    store = run.store
    for pair in run.pairs:
        for workload in run.workloads:
            path = store.path(pair, workload)
            try:
                store.load(pair, workload)
            except BaselineError as exc:
                problems.append(str(exc).replace(str(path), store.relative(path), 1))
    return problems


def _models(run: RunToCheck, name: str) -> list[str]:
    from specgate.models import locate

    problems: list[str] = []
    base = run.project.source.parent
    try:
        arms = run.arms(name)
    except SpecgateError as exc:
        return [str(exc)]
    for arm in arms:
        for reference in (arm.target, None if arm.speculation is None else arm.speculation.draft):
            if reference is None:
                continue
            try:
                locate(reference, base)
            except SpecgateError as exc:
                message = f"pair {arm.pair!r}, arm {arm.variant!r}: {exc}"
                if message not in problems:
                    problems.append(message)
    return problems


def _same_tokenizer(run: RunToCheck, name: str, reference: str) -> list[str]:
    """Outputs are compared token by token: a reference whose tokenizer differs cannot be compared."""
    candidate, released = run.pair(name).target, run.pair(reference).target
    base = run.project.source.parent
    if candidate == released:
        return []
    from specgate.models import tokenizer_identity

    try:
        mine, theirs = tokenizer_identity(candidate, base), tokenizer_identity(released, base)
    except SpecgateError as exc:
        return [f"pair {name!r} against its reference {reference!r}: {exc}"]
    if mine == theirs:
        return []
    return [
        f"pair {name!r} ({candidate}) and its reference {reference!r} ({released}) have different tokenizers "
        f"({mine.describe()} vs {theirs.describe()}): their outputs cannot be compared token by token. Choose a "
        "reference with the same tokenizer, or gate the new model against stored baselines (--reference=none)"
    ]


def _workload(run: RunToCheck, name: str) -> list[str]:
    from specgate.measure.workloads import workload_problems

    workload = run.workload(name)
    shown = _relative(workload.path, run.project.source.parent)
    return workload_problems(workload, run.policy.min_samples, run.policy.repetitions, shown)


def _load_shape(run: RunToCheck, name: str) -> list[str]:
    """A workload in load mode needs engines that can have several requests in flight."""
    workload = run.workload(name)
    if (workload.concurrency or 1) == 1 and workload.request_rate is None and not workload.sweep:
        return []
    shape = (
        f"a concurrency sweep ({', '.join(map(str, workload.sweep))} in flight)"
        if workload.sweep
        else f"in load mode (concurrency {workload.concurrency or 1}, request_rate {workload.request_rate})"
    )
    drop = "sweep" if workload.sweep else "concurrency/request_rate"
    problems = []
    for engine in sorted({run.engine_name(pair) for pair in run.pairs}):
        try:
            spec = engine_spec(engine)
        except ConfigError:
            continue  # reported with the pair
        if not spec.load_mode:
            problems.append(
                f"workload {name!r} is {shape} but the {engine!r} engine runs one request at a time: use "
                f"--engine=vllm or a served endpoint (openai), or drop workloads.{name}.{drop}"
            )
    return problems


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
