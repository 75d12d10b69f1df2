"""The files of a merged verdict besides the document: one JUnit file, one Allure results folder, the run records.

JUnit: every part's testsuites in one `<testsuites>`, each suite named by its part, each gate testcase named
`hardware @ runner / pair / workload / check` (the part label in place of the hardware the part's own file starts
with). A part without a JUnit file (it never reported, or its job wrote none) is one testcase `<part> / verdict`,
failed unless the part passed, so the merge request's test view shows every part.

Allure: every part's results in one folder. Results keep their UUIDs (a part whose files would overwrite another's
gets new ones); their suite labels become the part label, and
their `historyId` and `testCaseId` are made per part (Allure would otherwise take the same check on two runners for
retries of one test). `environment.properties` keys are prefixed by the part, `categories.json` is the union.

Run records: `<out>/runs/<part>/…`, as each part wrote them.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specgate.reports.document import PartRecord
from specgate.store.atomic import write_atomic
from specgate.store.codec import dumps

SUITE_LABELS = ("parentSuite", "epic")
COUNTS = ("tests", "failures", "errors", "skipped")


def slug(label: str) -> str:
    """A part label as a file or key name: `cpu @ runner-a` → `cpu@runner-a`."""
    return re.sub(r"[^A-Za-z0-9_.@+-]+", "-", label.replace(" @ ", "@")).strip("-") or "part"


def _relabel_case(case: ET.Element, part: PartRecord) -> None:
    name = case.get("name", "")
    prefix = f"{part.hardware} / "
    rest = name[len(prefix) :] if part.hardware and name.startswith(prefix) else name
    case.set("name", f"{part.label} / {rest}")


def _verdict_case(part: PartRecord) -> ET.Element:
    suite = ET.Element("testsuite", name=part.label)
    case = ET.SubElement(suite, "testcase", classname="specgate.merge", name=f"{part.label} / verdict", time="0")
    if part.verdict != "PASS":
        reason = part.reason or "; ".join(part.document.errors if part.document else ()) or "the part blocked"
        failure = ET.SubElement(case, "failure", message=f"{part.verdict}: {reason}")
        failure.text = reason
    _count(suite)
    return suite


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))


def _suites(path: Path, part: PartRecord) -> list[ET.Element]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for suite in suites:
        original = suite.get("name", "")
        suite.set("name", part.label if original in ("", "pytest") else f"{part.label} / {original}")
        for case in suite.iter("testcase"):
            _relabel_case(case, part)
    return suites


def merge_junit(parts: Sequence[tuple[PartRecord, Path]], out: Path, name: str = "junit.xml") -> list[str]:
    """Write the merged JUnit file to `out`; return warnings (a part's file that could not be read)."""
    warnings = []
    root = ET.Element("testsuites", name="specgate merge")
    for part, folder in parts:
        path = folder / name
        suites: list[ET.Element] = []
        if part.document is not None and path.is_file():
            try:
                suites = _suites(path, part)
            except (ET.ParseError, OSError) as exc:
                warnings.append(f"{part.label}: {path} is not readable JUnit XML ({exc}); its verdict stands in")
        elif part.document is not None:
            warnings.append(f"{part.label}: no {name} in {folder}; its verdict stands in for its testcases")
        root.extend(suites or [_verdict_case(part)])
    for key in COUNTS:
        root.set(key, str(sum(int(s.get(key, "0")) for s in root.findall("testsuite"))))
    root.set("time", f"{sum(float(s.get('time', '0') or 0) for s in root.findall('testsuite')):.3f}")
    ET.indent(root)
    write_atomic(out, '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")
    return warnings


def _per_part(value: str, part: PartRecord) -> str:
    return hashlib.md5(f"{part.label}\0{value}".encode()).hexdigest()


def _result(data: dict[str, Any], part: PartRecord) -> dict[str, Any]:
    labels = [label for label in data.get("labels", []) if label.get("name") not in SUITE_LABELS]
    labels += [{"name": name, "value": part.label} for name in SUITE_LABELS]
    data["labels"] = labels
    for key in ("historyId", "testCaseId"):
        if isinstance(data.get(key), str):
            data[key] = _per_part(data[key], part)
    return data


SHARED = ("environment.properties", "categories.json")
UUID = re.compile(r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


def _renames(files: Sequence[Path], out: Path) -> dict[str, str]:
    """New UUIDs for a part whose result files would overwrite another part's (the same run uploaded twice, or a
    copied folder): every UUID of the part is replaced, in file names and in the results that refer to them."""
    if not any((out / f.name).exists() for f in files if f.name not in SHARED):
        return {}
    return {m.group(1): str(uuid.uuid4()) for f in files if (m := UUID.match(f.name))}


def _renamed(text: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        text = text.replace(old, new)
    return text


def merge_allure(parts: Sequence[tuple[PartRecord, Path]], out: Path, name: str = "allure-results") -> list[str]:
    """Copy every part's Allure results into `out` (see the module docstring); return warnings."""
    out.mkdir(parents=True, exist_ok=True)
    environment: list[str] = []
    categories: list[Any] = []
    for part, folder in parts:
        results = folder / name
        if part.document is None or not results.is_dir():
            continue
        files = sorted(p for p in results.iterdir() if p.is_file())
        renames = _renames(files, out)
        for path in files:
            target = out / _renamed(path.name, renames)
            if path.name == "environment.properties":
                key = slug(part.label).replace(":", "\\:").replace("=", "\\=")
                environment += [f"{key}.{line}" for line in path.read_text(encoding="latin-1").splitlines() if line]
            elif path.name == "categories.json":
                categories += [c for c in json.loads(path.read_text(encoding="utf-8")) if c not in categories]
            elif path.name.endswith("-result.json"):
                data = _result(json.loads(_renamed(path.read_text(encoding="utf-8"), renames)), part)
                target.write_text(dumps(data, ensure_ascii=False), encoding="utf-8")
            elif path.name.endswith("-container.json"):
                target.write_text(_renamed(path.read_text(encoding="utf-8"), renames), encoding="utf-8")
            else:
                shutil.copyfile(path, target)
    if environment:
        write_atomic(out / "environment.properties", "\n".join(environment) + "\n")
    if categories:
        write_atomic(out / "categories.json", json.dumps(categories, indent=2, ensure_ascii=False) + "\n")
    return []


def copy_runs(parts: Sequence[tuple[PartRecord, Path]], out: Path) -> None:
    """Each part's run records under `out/<part>/`."""
    for part, folder in parts:
        if part.document is not None and (folder / "runs").is_dir():
            shutil.copytree(folder / "runs", out / slug(part.label), dirs_exist_ok=True)
