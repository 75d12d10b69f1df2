"""Frozen dataclasses to plain JSON data and back, driven by their type hints.

`to_data` turns dataclasses, mappings, tuples and paths into JSON-ready dicts, lists and strings; `from_data`
rebuilds the dataclass from that data, checking every field against its annotation (`int`, `float`, `str`,
`bool`, `X | None`, `tuple[X, ...]`, `tuple[X, Y]`, `Mapping[str, X]`, nested dataclasses, `Any`). A mismatch is a
`ValueError` naming the field path, so a corrupt or foreign file is a clear error, never a half-built object.

JSON has no NaN or Infinity (strict parsers, `JSON.parse` among them, reject the bare tokens Python writes): a
non-finite float is written as null (where it matters, a field beside it says why, e.g. `no_interval`) and a float
read as null is NaN again. `dumps` is `json.dumps` that refuses anything else non-finite.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")


def to_data(value: Any) -> Any:
    """JSON-ready data: dataclasses become dicts (field order kept), tuples lists, paths strings, NaN and ±inf
    null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def dumps(data: Any, **kwargs: Any) -> str:
    """Strict JSON of plain data or dataclasses (`to_data` first): non-finite floats become null."""
    return json.dumps(to_data(data), allow_nan=False, **kwargs)


def from_data(cls: type[T], data: Any, where: str = "") -> T:
    """Rebuild `cls` (a dataclass) from `to_data` output; `ValueError` names the first field that does not fit."""
    result: T = _convert(cls, data, where or cls.__name__)
    return result


@typing.no_type_check
def _convert(hint: Any, data: Any, where: str) -> Any:
    if hint is Any:
        return data
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _convert(option, data, where)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if len(errors) == 1 else f"{where}: {data!r} fits none of {hint}")
    if origin is typing.Literal:
        if data not in get_args(hint):
            raise ValueError(f"{where}: {data!r} is not one of {get_args(hint)}")
        return data
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint, data, where)
    if origin is tuple:
        args = get_args(hint)
        if not isinstance(data, list):
            raise ValueError(f"{where}: expected a list, got {type(data).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], item, f"{where}[{i}]") for i, item in enumerate(data))
        if len(args) != len(data):
            raise ValueError(f"{where}: expected {len(args)} items, got {len(data)}")
        return tuple(_convert(a, item, f"{where}[{i}]") for i, (a, item) in enumerate(zip(args, data, strict=True)))
    if origin in (Mapping, dict, typing.Mapping) or hint in (dict, Mapping):
        args = get_args(hint) or (str, Any)
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        return {str(k): _convert(args[1], v, f"{where}.{k}") for k, v in data.items()}
    return _scalar(hint, data, where)


def _scalar(hint: Any, data: Any, where: str) -> Any:
    if hint is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            if data is None:
                return math.nan  # JSON has no NaN: a float written as null reads back as NaN
            raise ValueError(f"{where}: expected a number, got {data!r}")
        return float(data)
    if hint is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise ValueError(f"{where}: expected an integer, got {data!r}")
        return data
    if hint is bool:
        if not isinstance(data, bool):
            raise ValueError(f"{where}: expected true or false, got {data!r}")
        return data
    if hint is str:
        if not isinstance(data, str):
            raise ValueError(f"{where}: expected a string, got {data!r}")
        return data
    if hint is Path:
        if not isinstance(data, str):
            raise ValueError(f"{where}: expected a path, got {data!r}")
        return Path(data)
    if hint is type(None):
        if data is not None:
            raise ValueError(f"{where}: expected null, got {data!r}")
        return None
    raise ValueError(f"{where}: cannot read a value of type {hint!r}")


def _dataclass(cls: Any, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    hints = get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: '{f.name}' is missing")
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
    return cls(**values)
