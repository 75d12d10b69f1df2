"""Workloads: JSONL files of prompts, read into `Prompt` records.

Each line is a JSON object. Field names are mapped by the workload's `fields` config (defaults: `id`, `prompt`,
`reference`, `system`), or the prompt is built from a `template` over the record's fields (e.g.
`"{context}\n\nQuestion: {question}"`), so users can point specgate at their own sets without rewriting them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from specgate.config import WorkloadConfig
from specgate.engines.base import Prompt
from specgate.errors import WorkloadError

DEFAULT_FIELDS = {"id": "id", "prompt": "prompt", "reference": "reference", "system": "system"}


def load_workload(workload: WorkloadConfig) -> tuple[Prompt, ...]:
    """Read a workload's prompts, at most `limit` of them, in file order."""
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
        if workload.limit is not None and len(prompts) >= workload.limit:
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
