"""Task accuracy on prompts with reference answers: pure scoring functions, no pytest, no model.

Three tasks, one scorer each:

- ``numeric``: GSM8K/MGSM-style exact match of the final number (:func:`score_numeric`), English and Chinese.
- ``span``: CMRC2018-style span match of any gold span after normalisation (:func:`score_span`), with the
  character-level F1 of the official CMRC2018 script as a softer measure (:func:`span_f1`).
- ``summary``: ROUGE-L F-measure (:func:`score_rouge`) from Google's ``rouge-score``; character-level for Chinese.

:func:`score_outputs` scores a workload's outputs into a :class:`TaskAccuracy`; :func:`decide_accuracy` judges
a drop against the baseline: block when accuracy falls more than the limit (3 points absolute) and the exact McNemar
test tells the fall from chance (p ≤ 0.05); a fall beyond the limit it cannot tell is UNDECIDED and passes.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

from specgate.errors import ConfigError

Reference = str | Sequence[str]
Task = Literal["numeric", "span", "summary"]
SCORED_TASKS: tuple[Task, ...] = ("numeric", "span", "summary")
BINARY_TASKS = frozenset({"numeric", "span"})

# A number as models write it: -2, $5, 1,234, 3.50, 1/2 (a percent sign after it is simply ignored). The look-behind
# keeps "16-3" from reading as -3 and "step1" from reading as 1; Chinese characters before a digit are fine.
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9.])(?P<sign>[-−])?\$?(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.(?P<frac>\d+))?(?:/(?P<den>\d+))?"
)
# Where a model states its answer. The first statement wins: small models often go on to invent and answer new
# questions after answering the one they were asked.
_ANSWER_CUE = re.compile(r"####|答案\s*(?:是|为|:)|\bthe (?:final )?answer is\b|\banswer\s*:|\\boxed\{", re.IGNORECASE)
_CHINESE_NUMERAL = re.compile(r"[零〇一二两三四五六七八九十百千万亿]+")
_CHINESE_DIGITS = {**{c: i for i, c in enumerate("零一二三四五六七八九")}, "〇": 0, "两": 2}
_CHINESE_SMALL_UNITS = {"十": 10, "百": 100, "千": 1000}
_CHINESE_LARGE_UNITS = {"万": 10_000, "亿": 100_000_000}
# CJK ideographs, kana and hangul are scored one character per token; runs of ASCII letters and digits are words.
_ROUGE_TOKEN = re.compile(r"[a-z0-9]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


@dataclass(frozen=True, slots=True)
class TaskAccuracy:
    """The accuracy of one arm on one task: ``accuracy`` is the mean of the per-prompt scores.

    ``per_prompt`` maps each prompt id with a reference to its score: 1.0 or 0.0 for the binary tasks (``numeric``,
    ``span``), the ROUGE-L F-measure in [0, 1] for ``summary``. ``correct`` is the sum of the scores (the number
    of correct answers for binary tasks). A prompt with a reference but no output scores 0.
    """

    task: str
    n: int
    correct: float
    accuracy: float
    per_prompt: Mapping[str, float] = field(default_factory=dict)

    @property
    def binary(self) -> bool:
        return self.task in BINARY_TASKS


# --- numeric ------------------------------------------------------------------------------------------------------


def extract_number(text: str) -> Fraction | None:
    """The final answer in a model output: the first number after the first answer cue, else the last number.

    Cues: ``#### 42``, ``答案是 42``, ``The answer is 42``, ``Answer: 42``, ``\\boxed{42}``. Full-width digits and
    punctuation are folded to ASCII first; after a cue with no digits after it, a Chinese numeral (``答案是十二``)
    is read.
    """
    text = unicodedata.normalize("NFKC", text)
    cue = _ANSWER_CUE.search(text)
    if cue is not None:
        after = text[cue.end() :]
        match = _NUMBER.search(after)
        if match is not None:
            return _to_fraction(match)
        chinese = _CHINESE_NUMERAL.match(after, len(after) - len(after.lstrip(" :是为")))
        if chinese is not None:
            return Fraction(_chinese_int(chinese.group()))
    matches = list(_NUMBER.finditer(text))
    return _to_fraction(matches[-1]) if matches else None


def score_numeric(output: str, reference: Reference) -> bool:
    """GSM8K-style exact match: the output's final number equals the reference's final answer.

    The reference may be a GSM8K answer (reasoning, then ``#### 42``), a bare number (MGSM's ``answer_number``) or
    a list of such; the answer is the number after ``####``, else the last number in it. Numbers compare exactly as
    fractions, so ``3.50`` equals ``3.5`` and ``1,234`` equals ``1234``.

    Raises ValueError when a reference holds no number: that is a workload error, not a wrong answer.
    """
    got = extract_number(output)
    return got is not None and any(got == _reference_number(gold) for gold in reference_answers(reference))


def _reference_number(reference: str) -> Fraction:
    text = unicodedata.normalize("NFKC", reference)
    if "####" in text:
        text = text[text.rindex("####") + 4 :]
    matches = list(_NUMBER.finditer(text))
    if not matches:
        raise ValueError(f"reference {reference[:80]!r} holds no number; a numeric task needs answers like '#### 42'")
    return _to_fraction(matches[-1])


def _to_fraction(match: re.Match[str]) -> Fraction:
    value = Fraction(f"{match['int'].replace(',', '')}.{match['frac'] or '0'}")
    if match["den"] and int(match["den"]) != 0:
        value /= int(match["den"])
    return -value if match["sign"] else value


def _chinese_int(numeral: str) -> int:
    total = section = digit = 0
    for char in numeral:
        if char in _CHINESE_DIGITS:
            digit = _CHINESE_DIGITS[char]
        elif char in _CHINESE_SMALL_UNITS:
            section += (digit or 1) * _CHINESE_SMALL_UNITS[char]
            digit = 0
        else:
            total = (total + section + digit) * _CHINESE_LARGE_UNITS[char]
            section = digit = 0
    return total + section + digit


# --- spans --------------------------------------------------------------------------------------------------------


def normalize_span(text: str) -> str:
    """Fold full-width to half-width (NFKC) and case, and drop whitespace, punctuation and symbols."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if not c.isspace() and unicodedata.category(c)[0] not in "PS")


def score_span(output: str, reference: Reference, *, mode: Literal["contains", "exact"] = "contains") -> bool:
    """CMRC2018-style span match: some gold span, normalised, is contained in (or equals) the normalised output.

    Containment is the default because a generative model answers in a sentence, not with the bare span; an output
    that pastes the whole context would pass it, which :func:`span_f1` (penalising extra characters) exposes.
    """
    got = normalize_span(output)
    golds = _normalized_golds(reference)
    if mode == "exact":
        return got in golds
    return any(gold in got for gold in golds)


def span_f1(output: str, reference: Reference) -> float:
    """Character-level F1 of the official CMRC2018 script: longest common substring, best over the gold spans."""
    got = normalize_span(output)
    best = 0.0
    for gold in _normalized_golds(reference):
        matcher = difflib.SequenceMatcher(None, got, gold, autojunk=False)
        common = matcher.find_longest_match(0, len(got), 0, len(gold)).size
        if common:
            precision, recall = common / len(got), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def _normalized_golds(reference: Reference) -> tuple[str, ...]:
    golds = tuple(g for g in (normalize_span(r) for r in reference_answers(reference)) if g)
    if not golds:
        raise ValueError(f"reference {reference!r} holds no span once normalised; a span task needs gold spans")
    return golds


# --- ROUGE --------------------------------------------------------------------------------------------------------


class _CharacterTokenizer:
    """rouge-score's tokenizer keeps only ``[a-z0-9]`` and so drops Chinese: split CJK into characters instead."""

    def tokenize(self, text: str) -> list[str]:
        return _ROUGE_TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


@lru_cache(maxsize=2)
def _rouge_scorer(chinese: bool) -> Any:
    try:
        from rouge_score import rouge_scorer
    except ImportError as exc:
        raise ConfigError(
            "the summary task scores with ROUGE from the rouge-score package, which is not installed: "
            "pip install 'specgate[accuracy]' (or pip install rouge-score)"
        ) from exc

    if chinese:
        return rouge_scorer.RougeScorer(["rougeL"], tokenizer=_CharacterTokenizer())
    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def score_rouge(output: str, reference: Reference, *, chinese: bool | None = None) -> float:
    """ROUGE-L F-measure of the output against the reference (the best one when there are several).

    English uses rouge-score's own tokenizer with the Porter stemmer (the usual summarisation setting). Chinese is
    scored per character, ASCII words as words. ``chinese=None`` picks Chinese when the reference has CJK text.
    """
    golds = reference_answers(reference)
    if chinese is None:
        chinese = any(_CJK.search(gold) for gold in golds)
    scorer = _rouge_scorer(chinese)
    return max((float(scorer.score(gold, output)["rougeL"].fmeasure) for gold in golds), default=0.0)


# --- workloads ----------------------------------------------------------------------------------------------------


def reference_answers(reference: Reference) -> tuple[str, ...]:
    """The gold answers of a reference: a string, a list of strings, or a list stored as JSON or Python text.

    The JSONL loader keeps ``reference`` as a string, so a CMRC2018 ``answers`` list or a Spec-Bench per-turn
    ``reference`` list arrives as ``'["a", "b"]'`` (or ``"['a', 'b']"``); both are read back into their items.
    """
    if not isinstance(reference, str):
        return tuple(str(r) for r in reference)
    text = reference.strip()
    if text.startswith("[") and text.endswith("]"):
        for parse in (json.loads, ast.literal_eval):
            try:
                items = parse(text)
            except (ValueError, SyntaxError):
                continue
            if isinstance(items, list) and items and all(isinstance(i, str | int | float) for i in items):
                return tuple(str(i) for i in items)
    return (reference,)


def score_outputs(task: str, outputs: Mapping[str, str], references: Mapping[str, Reference]) -> TaskAccuracy:
    """Score an arm's outputs (prompt id → text) on every prompt that has a reference (prompt id → answer).

    A prompt with a reference but no output counts as wrong (fail closed); outputs without a reference are ignored.
    """
    if task not in SCORED_TASKS:
        raise ValueError(f"task={task!r} is not a known accuracy task. Known: {', '.join(SCORED_TASKS)}")
    scorers: dict[str, Callable[[str, Reference], float]] = {
        "numeric": lambda out, ref: float(score_numeric(out, ref)),
        "span": lambda out, ref: float(score_span(out, ref)),
        "summary": score_rouge,
    }
    scorer = scorers[task]
    per_prompt = {pid: (scorer(outputs[pid], ref) if pid in outputs else 0.0) for pid, ref in references.items()}
    n = len(per_prompt)
    correct = math.fsum(per_prompt.values())
    return TaskAccuracy(task, n, correct, correct / n if n else 0.0, per_prompt)


# --- comparison ---------------------------------------------------------------------------------------------------


def mcnemar_p(baseline: TaskAccuracy, current: TaskAccuracy) -> tuple[float, int, int, int] | None:
    """Exact McNemar test on the prompts both binary results scored: (two-sided p, common, fixed, broken).

    ``broken`` counts prompts right in the baseline and wrong now, ``fixed`` the reverse; under "no change" each
    discordant prompt is equally likely to go either way, so p is the binomial test of broken among both. None when
    a result is not binary or no prompt is shared.
    """
    if not (baseline.binary and current.binary):
        return None
    common = baseline.per_prompt.keys() & current.per_prompt.keys()
    if not common:
        return None
    broken = sum(1 for p in common if baseline.per_prompt[p] > current.per_prompt[p])
    fixed = sum(1 for p in common if baseline.per_prompt[p] < current.per_prompt[p])
    if broken + fixed == 0:
        return 1.0, len(common), fixed, broken
    from scipy import stats

    return float(stats.binomtest(broken, broken + fixed, 0.5).pvalue), len(common), fixed, broken


# A drop beyond the limit blocks only when the exact McNemar test tells it from chance at this level (two-sided). Under
# no change in accuracy each changed answer is as likely fixed as broken, so a drop is told from chance with
# probability ≤ α/2 = 2.5 % whatever share of the answers flip: that bounds the rule's false-block rate
# (scripts/accuracy_rule_rates.py tabulates it on the shipped probes). A drop beyond the limit that the test cannot
# tell from chance is UNDECIDED: it passes, saying how many problems would decide it.
ACCURACY_ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class AccuracyDecision:
    """The accuracy rule's outcome: PASS (drop within the limit), REGRESSED (beyond it and told from chance, or no
    paired test to tell: blocks), UNDECIDED (beyond it, not told from chance: passes, `problems_needed` would
    decide), BLOCK (nothing scored)."""

    outcome: Literal["PASS", "REGRESSED", "UNDECIDED", "BLOCK"]
    drop: float
    p_value: float | None = None
    problems_needed: int | None = None

    @property
    def passed(self) -> bool:
        return self.outcome in ("PASS", "UNDECIDED")


def problems_needed(broken: int, fixed: int, common: int, alpha: float = ACCURACY_ALPHA) -> int | None:
    """About how many problems would tell a drop of the size seen from chance at `alpha` (two-sided), if answers
    change as often as here: McNemar's statistic (b − f) / √(b + f) reaches z_{1−α/2} once n ≥ d·z² / δ², d the share
    of changed answers and δ the drop. None when nothing dropped."""
    if common <= 0 or broken <= fixed:
        return None
    discordance, drop = (broken + fixed) / common, (broken - fixed) / common
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return max(common + 1, math.ceil(discordance * z * z / (drop * drop)))


def decide_accuracy(
    baseline: TaskAccuracy, current: TaskAccuracy, max_drop: float = 0.03, alpha: float = ACCURACY_ALPHA
) -> AccuracyDecision:
    """The accuracy rule: PASS when accuracy fell at most `max_drop` (absolute) below the baseline's; beyond it,
    REGRESSED when the exact McNemar test on the problems both scored gives p ≤ `alpha`, else UNDECIDED. When the
    two scored different problems (a probe that grew), the drop is taken on the problems both scored. A task that
    is not binary (ROUGE) or results with no problem in common have no paired test: a drop beyond the limit is taken
    as real (fail closed)."""
    if baseline.task != current.task:
        raise ValueError(f"cannot compare task {current.task!r} with a baseline of task {baseline.task!r}")
    if not 0.0 <= max_drop < 1.0:
        raise ValueError(f"max_drop={max_drop!r} must lie in [0, 1), e.g. 0.03 for 3 points")
    drop = baseline.accuracy - current.accuracy
    if current.n == 0:
        return AccuracyDecision("BLOCK", drop)
    shared = baseline.per_prompt.keys() & current.per_prompt.keys()
    if shared and (len(shared) < baseline.n or len(shared) < current.n):  # a probe that grew: the problems both scored
        drop = math.fsum(baseline.per_prompt[p] - current.per_prompt[p] for p in shared) / len(shared)
    if drop <= max_drop + 1e-12:
        return AccuracyDecision("PASS", drop)
    test = mcnemar_p(baseline, current)
    if test is None:
        return AccuracyDecision("REGRESSED", drop)
    p, common, fixed, broken = test
    if p <= alpha:
        return AccuracyDecision("REGRESSED", drop, p)
    return AccuracyDecision("UNDECIDED", drop, p, problems_needed(broken, fixed, common, alpha))


def compare_accuracy(baseline: TaskAccuracy, current: TaskAccuracy, max_drop: float = 0.03) -> tuple[bool, str]:
    """`decide_accuracy` in words: (passed, message). The message carries both accuracies, n, the drop and, for
    binary tasks, the exact McNemar p-value on the per-prompt pairs; an UNDECIDED drop says how many problems would
    decide it. No scored prompt blocks."""
    decision = decide_accuracy(baseline, current, max_drop)
    if decision.outcome == "BLOCK":
        return False, f"BLOCK: no {current.task} prompt with a reference was scored, so accuracy is unknown"
    sign = "≤" if decision.outcome == "PASS" else ">"
    shared = len(baseline.per_prompt.keys() & current.per_prompt.keys())
    on = f" on the {shared} problems both scored" if shared and shared < max(baseline.n, current.n) else ""
    head = {"PASS": "", "REGRESSED": "REGRESSED: ", "UNDECIDED": "UNDECIDED (passes): "}[decision.outcome]
    message = (
        f"{head}{current.task} accuracy {current.accuracy:.1%} vs baseline {baseline.accuracy:.1%}: drop "
        f"{decision.drop * 100:.1f} pts{on} {sign} max {max_drop * 100:.1f} pts (n={current.n}, baseline n={baseline.n}"
        f"{_paired_evidence(baseline, current)})"
    )
    if decision.outcome == "REGRESSED":
        told = "no paired test" if decision.p_value is None else f"McNemar p ≤ {ACCURACY_ALPHA}"
        message += f"; told from chance ({told})"
    elif decision.outcome == "UNDECIDED":
        message += (
            f"; not told from chance (McNemar p > {ACCURACY_ALPHA}): ≈ {decision.problems_needed} problems would "
            "decide a drop of this size"
        )
    return decision.passed, message


def _paired_evidence(baseline: TaskAccuracy, current: TaskAccuracy) -> str:
    test = mcnemar_p(baseline, current)
    if test is not None:
        p, common, fixed, broken = test
        return f"; McNemar exact p={p:.2g} on {common} common prompts: {broken} broken, {fixed} fixed"
    shared = baseline.per_prompt.keys() & current.per_prompt.keys()
    if not shared:
        return "; no prompt in common with the baseline"
    change = math.fsum(current.per_prompt[p] - baseline.per_prompt[p] for p in shared) / len(shared)
    return f"; mean per-prompt change {change:+.3f} on {len(shared)} common prompts"
