"""JSON Schema (draft 2020-12) of a frozen dataclass, from the same type hints `specgate.store.codec` reads.

What `to_data` writes and `from_data` accepts is what the schema allows: a dataclass is an object with its fields
(those without a default required, no others), `tuple[X, ...]` an array, `tuple[X, Y]` an array of those items,
`Mapping[str, X]` an object, `X | None` either, `Literal[...]` an enum. A float may be null: JSON has no NaN, and
`to_data` writes a non-finite float as null. Nested dataclasses go to `$defs` under their class names (a recursive
one, such as a merged verdict's parts, refers to itself).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def dataclass_schema(
    cls: type, *, title: str, schema_id: str, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The schema of documents of `cls`; `overrides` replaces the schemas of top-level fields (e.g. a `const`
    schema_version)."""
    defs: dict[str, Any] = {}
    root = _object(cls, defs)
    for name, schema in (overrides or {}).items():
        root["properties"][name] = schema
    return {"$schema": DIALECT, "$id": schema_id, "title": title, **root, "$defs": dict(sorted(defs.items()))}


def _object(cls: Any, defs: dict[str, Any]) -> dict[str, Any]:
    hints = get_type_hints(cls)
    fields = dataclasses.fields(cls)
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    schema: dict[str, Any] = {"type": "object"}
    doc = inspect.getdoc(cls)
    if doc and not doc.startswith(f"{cls.__name__}("):
        schema["description"] = doc.split("\n\n")[0].replace("\n", " ")
    schema["properties"] = {f.name: _schema(hints[f.name], defs) for f in fields}
    schema["required"] = required
    schema["additionalProperties"] = False
    return schema


@typing.no_type_check
def _schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    if hint is Any:
        return {}
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [o for o in get_args(hint) if o is not type(None)]
        schemas = [_schema(o, defs) for o in options]
        if type(None) in get_args(hint):
            schemas.append({"type": "null"})
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if origin is typing.Literal:
        return {"enum": list(get_args(hint))}
    if dataclasses.is_dataclass(hint):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}  # a placeholder first: a recursive dataclass refers to itself
            defs[name] = _object(hint, defs)
        return {"$ref": f"#/$defs/{name}"}
    if origin is tuple:
        args = get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema(args[0], defs)}
        items = [_schema(a, defs) for a in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if origin in (Mapping, dict, typing.Mapping) or hint in (dict, Mapping):
        args = get_args(hint) or (str, Any)
        return {"type": "object", "additionalProperties": _schema(args[1], defs)}
    return dict(SCALARS[hint])


SCALARS: Mapping[Any, Mapping[str, Any]] = {
    float: {"type": ["number", "null"]},  # null: not a finite number (JSON has no NaN)
    int: {"type": "integer"},
    bool: {"type": "boolean"},
    str: {"type": "string"},
    Path: {"type": "string"},
    type(None): {"type": "null"},
}
