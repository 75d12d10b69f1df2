"""Helpers that turn YAML values into typed values, with errors that name the file, the key and the fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specgate.errors import ConfigError, did_you_mean

__all__ = [
    "check_choice",
    "check_keys",
    "did_you_mean",
    "fail",
    "mapping",
    "number",
    "parse_selection",
    "read_yaml",
    "typed",
]


def fail(source: str, key: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: '{key}': {message}")


def check_keys(data: Mapping[str, Any], allowed: Sequence[str], source: str, where: str) -> None:
    for key in data:
        if key not in allowed:
            raise fail(
                source,
                f"{where}{key}",
                f"unknown key.{did_you_mean(str(key), allowed)} Allowed: {', '.join(sorted(allowed))}",
            )


def check_choice(value: Any, allowed: Sequence[str], source: str, key: str) -> str:
    if value not in allowed:
        raise fail(
            source, key, f"{value!r} is not allowed.{did_you_mean(str(value), allowed)} Allowed: {', '.join(allowed)}"
        )
    return str(value)


def typed(value: Any, kind: type | tuple[type, ...], source: str, key: str) -> Any:
    """`value` when it is of `kind` (a bool is never a number), else a `ConfigError` naming the key."""
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise fail(source, key, f"expected a number, got {value!r}")
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise fail(source, key, f"expected {name}, got {value!r}")
    return value


def number(value: Any, source: str, key: str, *, low: float | None = None, high: float | None = None) -> float:
    """A finite number within [low, high]."""
    result = float(typed(value, (int, float), source, key))
    if result != result or result in (float("inf"), float("-inf")):
        raise fail(source, key, f"expected a finite number, got {value!r}")
    if (low is not None and result < low) or (high is not None and result > high):
        bounds = f"{'-inf' if low is None else format(low, 'g')} to {'inf' if high is None else format(high, 'g')}"
        raise fail(source, key, f"{result:g} is out of range ({bounds})")
    return result


def mapping(data: Any, source: str, key: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise fail(source, key, f"expected a mapping, got {type(data).__name__}")
    return data


def read_yaml(path: Path) -> Any:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}. Fix the syntax at the line shown.") from exc


def parse_selection(option: str, values: Sequence[str] | None, known: Sequence[str], default: list[str]) -> list[str]:
    """Validate a `--pair`/`--workload` selection (repeatable, comma-separated) against the config."""
    if not values:
        return default
    chosen: list[str] = []
    for value in values:
        for name in (v.strip() for v in value.split(",")):
            if not name:
                continue
            if name == "all":
                chosen.extend(n for n in known if n not in chosen)
                continue
            if name not in known:
                raise ConfigError(
                    f"--{option}={name!r} is not in the project config.{did_you_mean(name, known)} "
                    f"Known: {', '.join(known)}, or 'all'."
                )
            if name not in chosen:
                chosen.append(name)
    return chosen
