"""Content checks: flag outputs (sensitive words, patterns) and compare the flag rate between arms.

A speed-versus-accuracy step (speculation, a quantised KV cache, a new draft) must not change what the deployment
says. A :class:`ContentChecker` names what it found in one output; :func:`flag_rates` gives each arm's share of
flagged outputs, and :func:`compare_flag_rates` holds their difference to the drift SLA (default 0.3 points).

Checkers are built from config mappings by :func:`load_checker`::

    {"type": "words", "words": ["密码", "password"]}
    {"type": "words", "file": "sensitive_words.txt", "whole_words": true}
    {"type": "regex", "patterns": ["\\\\b\\\\d{3}-\\\\d{2}-\\\\d{4}\\\\b"], "name": "ssn"}

Text is folded with NFKC (full-width to half-width) before matching, so ``ＰＡＳＳＷＯＲＤ`` matches ``password``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from specgate.errors import ConfigError

CHECKER_TYPES = ("words", "regex")
_SPEC_KEYS = {"words": {"type", "name", "words", "file", "whole_words"}, "regex": {"type", "name", "patterns", "file"}}


@runtime_checkable
class ContentChecker(Protocol):
    """Something that flags an output: ``flags`` returns what it found (empty when the text is clean)."""

    @property
    def name(self) -> str: ...

    def flags(self, text: str) -> list[str]: ...


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


@dataclass(frozen=True, slots=True)
class WordListChecker:
    """Flags the listed words, case-insensitively, as substrings (so Chinese, which has no spaces, works).

    With ``whole_words`` an ASCII word only matches between non-alphanumeric characters ("ass" no longer flags
    "class"); words with CJK characters always match as substrings. ``flags`` returns the words as listed.
    """

    words: tuple[str, ...]
    name: str = "words"
    whole_words: bool = False
    _patterns: tuple[tuple[str, re.Pattern[str]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        words = tuple(w for w in (w.strip() for w in self.words) if w)
        if not words:
            raise ConfigError(f"content checker {self.name!r}: the word list is empty; list at least one word")
        object.__setattr__(self, "words", words)
        object.__setattr__(self, "_patterns", tuple((w, self._compile(_fold(w))) for w in words))

    def _compile(self, folded: str) -> re.Pattern[str]:
        escaped = re.escape(folded)
        if self.whole_words and folded.isascii():
            escaped = rf"(?<![a-z0-9]){escaped}(?![a-z0-9])"
        return re.compile(escaped)

    def flags(self, text: str) -> list[str]:
        folded = _fold(text)
        return [word for word, pattern in self._patterns if pattern.search(folded)]


@dataclass(frozen=True, slots=True)
class RegexChecker:
    """Flags matches of any of the regular expressions (case-insensitive); ``flags`` returns the matched texts."""

    patterns: tuple[str, ...]
    name: str = "regex"
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.patterns:
            raise ConfigError(f"content checker {self.name!r}: no patterns; list at least one regular expression")
        compiled = []
        for pattern in self.patterns:
            try:
                compiled.append(re.compile(pattern, re.IGNORECASE))
            except re.error as exc:
                raise ConfigError(
                    f"content checker {self.name!r}: pattern {pattern!r} is not a valid regular expression "
                    f"({exc}). Fix it, or use type 'words' for plain words"
                ) from exc
        object.__setattr__(self, "patterns", tuple(self.patterns))
        object.__setattr__(self, "_compiled", tuple(compiled))

    def flags(self, text: str) -> list[str]:
        folded = unicodedata.normalize("NFKC", text)
        return [m.group() for pattern in self._compiled if (m := pattern.search(folded)) is not None]


def load_checker(spec: Mapping[str, object], *, base_dir: Path | None = None) -> ContentChecker:
    """Build a checker from a config mapping (see the module docstring); ``file`` is relative to ``base_dir``.

    A list file holds one word or pattern per line; blank lines and lines starting with ``#`` are skipped.
    """
    kind = spec.get("type")
    if not isinstance(kind, str) or kind not in CHECKER_TYPES:
        raise ConfigError(f"content checker type={kind!r} is not known. Known: {', '.join(CHECKER_TYPES)}")
    unknown = set(spec) - _SPEC_KEYS[kind]
    if unknown:
        raise ConfigError(
            f"content checker of type {kind!r}: unknown keys {sorted(unknown)}. Allowed: {sorted(_SPEC_KEYS[kind])}"
        )
    name = spec.get("name", kind)
    if not isinstance(name, str):
        raise ConfigError(f"content checker name={name!r} must be a string")
    entries = _entries(spec, "words" if kind == "words" else "patterns", name, base_dir)
    if kind == "regex":
        return RegexChecker(entries, name=name)
    whole_words = spec.get("whole_words", False)
    if not isinstance(whole_words, bool):
        raise ConfigError(f"content checker {name!r}: whole_words={whole_words!r} must be true or false")
    return WordListChecker(entries, name=name, whole_words=whole_words)


def _entries(spec: Mapping[str, object], key: str, name: str, base_dir: Path | None) -> tuple[str, ...]:
    inline, file = spec.get(key), spec.get("file")
    if (inline is None) == (file is None):
        raise ConfigError(f"content checker {name!r}: give exactly one of {key!r} (a list) or 'file' (a path)")
    if inline is not None:
        if not isinstance(inline, list | tuple) or not all(isinstance(e, str) for e in inline):
            raise ConfigError(f"content checker {name!r}: {key}={inline!r} must be a list of strings")
        return tuple(inline)
    if not isinstance(file, str | Path):
        raise ConfigError(f"content checker {name!r}: file={file!r} must be a path")
    path = Path(file) if base_dir is None else base_dir / file
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"content checker {name!r}: cannot read {path}: {exc.strerror}. Fix 'file'") from exc
    return tuple(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))


def count_flagged(checker: ContentChecker, outputs: Iterable[str]) -> tuple[int, int]:
    """(flagged, total) outputs."""
    flagged = total = 0
    for text in outputs:
        total += 1
        flagged += bool(checker.flags(text))
    return flagged, total


def flag_rates(checker: ContentChecker, outputs_by_arm: Mapping[str, Sequence[str]]) -> Mapping[str, float]:
    """Each arm's share of flagged outputs, 0–1; NaN for an arm without outputs (which then blocks the comparison)."""
    rates = {}
    for arm, outputs in outputs_by_arm.items():
        flagged, total = count_flagged(checker, outputs)
        rates[arm] = flagged / total if total else math.nan
    return rates


def compare_flag_rates(
    reference_rate: float,
    candidate_rate: float,
    max_drift: float = 0.003,
    *,
    n_reference: int | None = None,
    n_candidate: int | None = None,
) -> tuple[bool, str]:
    """The candidate arm's flag rate must not differ from the reference arm's by more than ``max_drift`` (absolute).

    Either direction counts: a step that flags fewer outputs has changed what the deployment says as well. Pass the
    output counts to have them in the evidence. A NaN rate (no outputs) blocks.
    """
    if not 0.0 <= max_drift < 1.0:
        raise ValueError(f"max_drift={max_drift!r} must lie in [0, 1), e.g. 0.003 for 0.3 %")
    counts = "" if n_reference is None or n_candidate is None else f" (n={n_candidate} vs n={n_reference})"
    if math.isnan(reference_rate) or math.isnan(candidate_rate):
        return False, f"BLOCK: a flag rate could not be measured (an arm has no outputs){counts}"
    difference = candidate_rate - reference_rate
    passed = abs(difference) <= max_drift + 1e-12
    within = "within" if passed else "beyond"
    message = (
        f"flag rate {candidate_rate:.2%} vs reference {reference_rate:.2%}: difference {difference:+.2%} "
        f"{within} the drift SLA ±{max_drift:.2%}{counts}"
    )
    return passed, message
