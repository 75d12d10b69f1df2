"""The JSON Schemas specgate ships for the files it writes, generated from the dataclasses that write them.

`verdict.schema.json`: `reports/verdict.json` (`VerdictDocument`). `run-record.schema.json`: a stored baseline
(`baselines/<hardware>/<pair>/<workload>.json`) and a run's record (`reports/runs/...`, the same format with one run):
`RunRecord`s with the file's schema_version, hardware, pair and workload. Both carry their `schema_version` as a
constant, so a reader knows which schema a file was written under. The shipped files (in `specgate/schemas/`, read
with `shipped(name)`) are regenerated with `python -m specgate.reports.schemas`; a test fails when they are stale.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from specgate.reports.document import SCHEMA_VERSION, VerdictDocument
from specgate.store.baselines import SCHEMA_VERSION as RECORD_SCHEMA_VERSION
from specgate.store.records import RunRecord
from specgate.store.schema import DIALECT, dataclass_schema

BASE_ID = "https://specgate.dev/schemas"
VERDICT = "verdict.schema.json"
RUN_RECORD = "run-record.schema.json"


def verdict_schema() -> dict[str, Any]:
    return dataclass_schema(
        VerdictDocument,
        title=f"specgate verdict document (reports/verdict.json), schema_version {SCHEMA_VERSION}",
        schema_id=f"{BASE_ID}/{SCHEMA_VERSION}/{VERDICT}",
        overrides={"schema_version": {"const": SCHEMA_VERSION}},
    )


def run_record_schema() -> dict[str, Any]:
    record = dataclass_schema(RunRecord, title="RunRecord", schema_id="unused")
    defs = record.pop("$defs")
    for key in ("$schema", "$id", "title"):
        record.pop(key)
    return {
        "$schema": DIALECT,
        "$id": f"{BASE_ID}/{RECORD_SCHEMA_VERSION}/{RUN_RECORD}",
        "title": f"specgate baseline or run record, schema_version {RECORD_SCHEMA_VERSION}",
        "type": "object",
        "properties": {
            "schema_version": {"const": RECORD_SCHEMA_VERSION},
            "hardware": {"type": "string"},
            "pair": {"type": "string"},
            "workload": {"type": "string"},
            "runs": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/RunRecord"}},
        },
        "required": ["schema_version", "hardware", "pair", "workload", "runs"],
        "additionalProperties": False,
        "$defs": dict(sorted({**defs, "RunRecord": record}.items())),
    }


GENERATORS = {VERDICT: verdict_schema, RUN_RECORD: run_record_schema}


def schema_text(name: str) -> str:
    return json.dumps(GENERATORS[name](), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def shipped(name: str) -> dict[str, Any]:
    """A schema as shipped in the package."""
    loaded: dict[str, Any] = json.loads(resources.files("specgate").joinpath("schemas", name).read_text("utf-8"))
    return loaded


def main() -> int:
    folder = Path(__file__).resolve().parent.parent / "schemas"
    for name in GENERATORS:
        (folder / name).write_text(schema_text(name), encoding="utf-8")
        print(f"wrote {folder / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
