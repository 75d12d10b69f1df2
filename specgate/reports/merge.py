"""Many runners, one verdict: the verdict documents of several gate runs combined into one (`specgate merge`).

A gate spread over CI runners (other hardware, other runners, other pairs) leaves one reports folder per job. Each
folder's `verdict.json` is a part, labelled by its hardware and the runner it measured on (`hardware @ runner`).
The merged verdict is PASS only when every part passed, every expected part reported, and all parts measured the
same commit; a part that blocked, a folder without a verdict, a verdict that cannot be read, a part expected
(`--expect hardware[:runner]`, or the CI matrix) that never reported, or parts of different commits make it BLOCK,
each by name. The merged document is a `VerdictDocument` with `parts` (each part's own document inside), so
`specgate verdict`, `specgate comment` and `specgate report` read it as they read one run's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specgate import __version__
from specgate.errors import ConfigError, SpecgateError
from specgate.reports.document import SCHEMA_VERSION, PartRecord, VerdictDocument, load_document
from specgate.reports.provenance import CommitInfo, machine_info

VERDICT_FILE = "verdict.json"
MISSING, UNREADABLE = "MISSING", "UNREADABLE"
NEVER_REPORTED = (
    "expected but never reported: no verdict from this runner (the runner was lost, the job was cancelled or "
    "failed before its verdict, or its reports were not passed to the merge)"
)


@dataclass(frozen=True, slots=True)
class Expected:
    """A part the merge must find: a hardware profile, and the runner when it matters."""

    hardware: str
    runner: str | None = None

    @property
    def label(self) -> str:
        return part_label(self.hardware, self.runner or "")

    def matches(self, part: PartRecord) -> bool:
        return part.hardware == self.hardware and (self.runner is None or part.runner == self.runner)


def part_label(hardware: str, runner: str) -> str:
    return f"{hardware} @ {runner}" if runner else hardware


def parse_expected(values: Iterable[str]) -> list[Expected]:
    """`hardware[:runner]` items, separated by spaces or commas (repeatable); a JSON or YAML list of them, or of
    matrix entries (mappings with `hardware`/`SPECGATE_HARDWARE` and `runner`/`SPECGATE_RUNNER_TAG`), also reads."""
    expected: list[Expected] = []
    for value in values:
        text = value.strip()
        if text.startswith("["):
            expected.extend(_matrix(text))
            continue
        for item in text.replace(",", " ").split():
            hardware, _, runner = item.partition(":")
            if not hardware:
                raise ConfigError(f"--expect {item!r}: expected HARDWARE or HARDWARE:RUNNER, e.g. cpu:specgate-cpu")
            expected.append(Expected(hardware, runner or None))
    return expected


MATRIX_KEYS = {"hardware": ("hardware", "SPECGATE_HARDWARE"), "runner": ("runner", "runs-on", "SPECGATE_RUNNER_TAG")}


def _matrix(text: str) -> list[Expected]:
    import yaml

    try:
        entries = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--expect: the matrix is not a JSON or YAML list ({exc})") from None
    found = []
    for entry in entries if isinstance(entries, list) else [None]:
        if isinstance(entry, str):
            found.extend(parse_expected([entry]))
            continue
        if not isinstance(entry, dict):
            raise ConfigError(f"--expect: a matrix entry must be a mapping or 'hardware:runner', got {entry!r}")
        hardware = next((str(entry[k]) for k in MATRIX_KEYS["hardware"] if entry.get(k)), None)
        runner = next((str(entry[k]) for k in MATRIX_KEYS["runner"] if entry.get(k)), None)
        if hardware is None:
            raise ConfigError(f"--expect: matrix entry {entry!r} names no hardware (hardware or SPECGATE_HARDWARE)")
        found.append(Expected(hardware, runner))
    return found


def _verdict_files(folder: Path, exclude: Path | None) -> list[Path]:
    if (folder / VERDICT_FILE).is_file():
        return [folder / VERDICT_FILE]
    files = sorted(folder.rglob(VERDICT_FILE))
    return [f for f in files if exclude is None or not f.resolve().is_relative_to(exclude.resolve())]


def load_parts(folders: Sequence[Path], exclude: Path | None = None) -> list[tuple[PartRecord, Path]]:
    """Every part under the folders (a reports folder, or a folder of them), with its folder; a folder without a
    verdict and a verdict that cannot be read are parts too (MISSING, UNREADABLE)."""
    parts: list[tuple[PartRecord, Path]] = []
    for folder in folders:
        if not folder.is_dir():
            parts.append((PartRecord(folder.name, "", "", MISSING, f"{folder} does not exist", str(folder)), folder))
            continue
        files = _verdict_files(folder, exclude)
        if not files:
            reason = f"no {VERDICT_FILE} under {folder}: the job wrote no verdict (it failed before the end)"
            parts.append((PartRecord(folder.name, "", "", MISSING, reason, str(folder)), folder))
        for path in files:
            parts.append((_part(path), path.parent))
    return _unique_labels(parts)


def _part(path: Path) -> PartRecord:
    try:
        document = load_document(path)
    except SpecgateError as exc:
        return PartRecord(path.parent.name, "", "", UNREADABLE, str(exc), str(path.parent))
    if document.parts:
        reason = f"{path} is itself a merged verdict; merge the parts' own folders"
        return PartRecord(path.parent.name, document.hardware, document.runner, UNREADABLE, reason, str(path.parent))
    label = part_label(document.hardware, document.runner)
    return PartRecord(label, document.hardware, document.runner, document.verdict, "", str(path.parent), document)


def _unique_labels(parts: list[tuple[PartRecord, Path]]) -> list[tuple[PartRecord, Path]]:
    """Parts of one runner that gated other pairs are told apart by their pairs, then by a number."""
    labels = [p.label for p, _ in parts]
    result: list[tuple[PartRecord, Path]] = []
    for index, (part, folder) in enumerate(parts):
        label = part.label
        if labels.count(label) > 1 and part.document is not None:
            label = f"{label} [{', '.join(part.document.pairs)}]"
        if any(p.label == label for p, _ in result):
            label = f"{label} #{index + 1}"
        result.append((replace(part, label=label), folder))
    return result


def with_expected(parts: list[PartRecord], expected: Sequence[Expected]) -> tuple[list[PartRecord], list[str]]:
    """The parts with a MISSING part for each expected one that none matches; warnings for unexpected parts."""
    missing = [
        PartRecord(e.label, e.hardware, e.runner or "", MISSING, NEVER_REPORTED)
        for e in expected
        if not any(e.matches(p) for p in parts)
    ]
    warnings = []
    if expected:
        for part in parts:
            if part.document is not None and not any(e.matches(part) for e in expected):
                warnings.append(f"part {part.label} ({part.source}) was not expected; it counts in the verdict")
    return [*parts, *missing], warnings


def _commit(parts: Sequence[PartRecord]) -> tuple[CommitInfo, list[str]]:
    documents = [p.document for p in parts if p.document is not None]
    commits = {d.commit.id for d in documents}
    errors = []
    if len(commits) > 1:
        listed = ", ".join(f"{p.label} {p.document.commit.id[:12]}" for p in parts if p.document is not None)
        errors.append(f"the parts measured different commits ({listed}): merge the parts of one pipeline")
    if documents:
        return documents[0].commit, errors
    return CommitInfo("unknown", None, None, False, "", "(unknown)"), errors


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def merge_documents(
    parts: Sequence[PartRecord], out_dir: str = "reports", warnings: Sequence[str] = ()
) -> VerdictDocument:
    """The merged verdict of the parts (see the module docstring)."""
    commit, errors = _commit(parts)
    documents = [(p, p.document) for p in parts if p.document is not None]
    if not parts:
        errors.append("no part to merge: give the reports folders of the gate's jobs")
    for part in parts:
        if part.document is None:
            errors.append(f"{part.label}: {part.verdict}: {part.reason}")
    errors.extend(f"{p.label}: {e}" for p, d in documents for e in d.errors)
    passed = not errors and all(d.passed for _, d in documents) and bool(documents)
    return VerdictDocument(
        schema_version=SCHEMA_VERSION,
        verdict="PASS" if passed else "BLOCK",
        hardware=", ".join(_unique(p.hardware for p in parts if p.hardware)),
        specgate_version=__version__,
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        commit=commit,
        pairs=_unique(name for _, d in documents for name in d.pairs),
        workloads=_unique(name for _, d in documents for name in d.workloads),
        checks=tuple(c for _, d in documents for c in d.checks),
        failed_checks=tuple(f"{p.label}: {c.key}" for p, d in documents for c in d.failed),
        errors=tuple(errors),
        recommendations=_unique(f"{p.label}: {r}" for p, d in documents for r in d.recommendations),
        evaluations=(),
        out_dir=out_dir,
        machine=machine_info(),
        notices=_unique(f"{p.label}: {n}" for p, d in documents for n in d.notices),
        report_warnings=tuple(warnings),
        parts=tuple(parts),
    )


def parts_json(document: VerdictDocument) -> str:
    """label → verdict of each part, for a CI log."""
    return json.dumps({p.label: p.verdict for p in document.parts}, ensure_ascii=False)
