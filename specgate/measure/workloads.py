"""Workloads: JSONL files of prompts, read into `Prompt` records.

Each line is a JSON object. Field names are mapped by the workload's `fields` config (defaults: `id`, `prompt`,
`reference`, `system`), or the prompt is built from a `template` over the record's fields (e.g.
`"{context}\n\nQuestion: {question}"`), so users can point specgate at their own sets without rewriting them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from specgate.config import WorkloadConfig
from specgate.engines.base import Prompt
from specgate.errors import WorkloadError

DEFAULT_FIELDS = {"id": "id", "prompt": "prompt", "reference": "reference", "system": "system"}


def load_workload(workload: WorkloadConfig, *, limit: int | None = None) -> tuple[Prompt, ...]:
    """Read a workload's prompts, at most `limit` of them (default: the workload's), in file order."""
    limit = workload.limit if limit is None else limit
    mapping = {**DEFAULT_FIELDS, **workload.fields}
    path = workload.path
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(
            f"workload {workload.name!r}: cannot read {path}: {exc.strerror}. Fix 'path' in the project config."
        ) from exc
    prompts: list[Prompt] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if limit is not None and len(prompts) >= limit:
            break
        prompts.append(_prompt(line, number, workload, mapping))
    if not prompts:
        raise WorkloadError(f"workload {workload.name!r}: {path} holds no prompts")
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise WorkloadError(f"workload {workload.name!r}: {path} has duplicate ids; ids pair samples across runs")
    return tuple(prompts)


def _render(template: str, record: dict[str, object], where: str) -> str:
    """The prompt from a template over the record's fields, e.g. "{context}\n\nQuestion: {question}"."""
    try:
        return template.format(**record)
    except (KeyError, IndexError, ValueError) as exc:
        raise WorkloadError(
            f"{where}: template cannot be filled ({type(exc).__name__}: {exc}). Fields present: {', '.join(record)}"
        ) from exc


def _prompt(line: str, number: int, workload: WorkloadConfig, mapping: Mapping[str, str]) -> Prompt:
    where = f"workload {workload.name!r}: {workload.path}:{number}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where}: not valid JSON ({exc.msg})") from exc
    if not isinstance(record, dict):
        raise WorkloadError(f"{where}: expected a JSON object")
    text = _render(workload.template, record, where) if workload.template else record.get(mapping["prompt"])
    if not isinstance(text, str) or not text:
        raise WorkloadError(
            f"{where}: no prompt text in field {mapping['prompt']!r}. Fields present: {', '.join(record)}. "
            "Map the field with workloads.<name>.fields.prompt in the project config."
        )
    reference = record.get(mapping["reference"])
    system = record.get(mapping["system"])
    return Prompt(
        id=str(record.get(mapping["id"], f"line-{number}")),
        text=text,
        max_new_tokens=workload.max_new_tokens,
        reference=None if reference is None else reference if isinstance(reference, str) else json.dumps(reference),
        system=None if system is None else str(system),
    )


def workload_problems(
    workload: WorkloadConfig, min_samples: int, repetitions: int = 1, shown: str | None = None
) -> list[str]:
    """Every problem of a workload's file, checked without any model: the file exists and is UTF-8, each line is a
    JSON object with the mapped fields, ids are unique, prompts × `repetitions` reach `min_samples` requests per
    arm, and a workload with a task has a reference answer for every prompt. `shown` is the path as the messages
    give it."""
    where = f"workload {workload.name!r} ({shown or workload.path})"
    try:
        text = workload.path.read_text(encoding="utf-8")
    except FileNotFoundError:
        unset = sorted(set(re.findall(r"\$\{?(\w+)", str(workload.path))))
        if unset:  # os.path.expandvars leaves a variable that is not set as it was written
            return [
                f"{where}: the environment variable(s) {', '.join(unset)} in workloads.{workload.name}.path are not set"
            ]
        return [f"{where}: the file does not exist; fix workloads.{workload.name}.path in the project config"]
    except OSError as exc:
        return [f"{where}: cannot read it ({exc.strerror}); fix workloads.{workload.name}.path"]
    except UnicodeDecodeError as exc:
        return [f"{where}: not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8 JSONL"]
    mapping = {**DEFAULT_FIELDS, **workload.fields}
    problems: list[str] = []
    prompts: list[Prompt] = []
    read = workload.acceptance_prompts or workload.limit
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if read is not None and len(prompts) >= read:
            break
        try:
            prompts.append(_prompt(line, number, workload, mapping))
        except WorkloadError as exc:
            problems.append(str(exc).replace(f"workload {workload.name!r}: {workload.path}", where))
        if len(problems) >= 5:
            problems.append(f"{where}: stopped after 5 broken lines")
            return problems
    if problems:
        return problems
    if not prompts:
        return [f'{where}: holds no prompts; one JSON object per line, e.g. {{"id": "a", "prompt": "…"}}']
    ids = [p.id for p in prompts]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        problems.append(f"{where}: duplicate ids {', '.join(duplicates[:5])}; ids pair requests across arms and runs")
    if workload.acceptance_prompts and len(prompts) < workload.acceptance_prompts:
        problems.append(
            f"{where}: holds {len(prompts)} prompts, acceptance_prompts asks for {workload.acceptance_prompts}; add "
            f"prompts or lower workloads.{workload.name}.acceptance_prompts"
        )
    timed = len(prompts) if workload.limit is None else min(len(prompts), workload.limit)
    rounds = workload.repetitions or repetitions
    if timed * rounds < min_samples:
        problems.append(
            f"{where}: {timed} prompt(s) × {rounds} round(s) = {timed * rounds} requests per arm, the "
            f"gate needs gate.min_samples={min_samples}; add prompts, raise the workload's limit or its repetitions"
        )
    if workload.task != "generate":
        missing = [p.id for p in prompts if p.reference is None]
        if missing:
            problems.append(
                f"{where}: task {workload.task!r} scores against reference answers, but {len(missing)} prompt(s) have "
                f"none (first: {missing[0]!r}); map the field with workloads.{workload.name}.fields.reference"
            )
    return problems
