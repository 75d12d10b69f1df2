"""Values made once per key. A failure is kept as well: every caller that needs the value gets the same reason,
and nothing is tried twice (a measurement that failed is not measured again by the next check that reads it)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """A cache of values and of the exceptions that making them raised."""

    def __init__(self) -> None:
        self._made: dict[K, V | BaseException] = {}

    def get(self, key: K, make: Callable[[], V], failed: Callable[[Exception], BaseException] | None = None) -> V:
        """The value of `key`, made on the first call; the exception making it raised (passed through `failed`
        when given), raised again on every call."""
        if key not in self._made:
            try:
                self._made[key] = make()
            except Exception as exc:
                self._made[key] = exc if failed is None else failed(exc)
        made = self._made[key]
        if isinstance(made, BaseException):
            raise made
        return made

    def values(self) -> list[V]:
        """The values made so far, failures left out, in the order they were first asked for."""
        return [made for made in self._made.values() if not isinstance(made, BaseException)]

    def clear(self) -> None:
        self._made.clear()
