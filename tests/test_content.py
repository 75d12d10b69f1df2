"""Content checks: word lists and patterns, config loading, and the flag-rate drift rule."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from conftest import needs
from specgate.content import (
    ContentChecker,
    RegexChecker,
    WordListChecker,
    compare_flag_rates,
    count_flagged,
    flag_rates,
    load_checker,
)
from specgate.errors import ConfigError

WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"


def test_word_list_is_case_insensitive_width_insensitive_and_cjk_safe() -> None:
    checker = WordListChecker(("Password", "机密"))
    assert checker.flags("Your PASSWORD is hunter2") == ["Password"]
    assert checker.flags("ＰＡＳＳＷＯＲＤ：１２３") == ["Password"]  # full-width, as Chinese input methods type it
    assert checker.flags("这是一份机密文件，请输入password") == ["Password", "机密"]
    assert checker.flags("这是一份公开文件") == []
    assert isinstance(checker, ContentChecker)


def test_whole_words_keeps_ascii_words_from_matching_inside_others() -> None:
    loose, whole = WordListChecker(("ass", "密")), WordListChecker(("ass", "密"), whole_words=True)
    assert loose.flags("first class") == ["ass"]
    assert whole.flags("first class") == []
    assert whole.flags("what an ass.") == ["ass"]
    assert whole.flags("保密协议") == ["密"]  # CJK words still match inside text without spaces


def test_regex_checker_returns_what_matched() -> None:
    checker = RegexChecker((r"\b\d{3}-\d{4}-\d{4}\b", r"身份证号\s*\d{17}[\dx]"), name="pii")
    assert checker.flags("call 138-1234-5678 now") == ["138-1234-5678"]
    assert checker.flags("身份证号 11010519491231002X") == ["身份证号 11010519491231002X"]
    assert checker.flags("nothing here 12-34") == []
    assert checker.name == "pii"


def test_a_real_prompt_is_flagged() -> None:
    path = WORKLOADS / "short_specbench.jsonl"
    needs(path.is_file(), f"shared workload {path}", "this test reads a real prompt beside the checkout")
    with path.open(encoding="utf-8") as lines:
        first = json.loads(next(lines))["turns"][0]
    assert WordListChecker(("hawaii",)).flags(first) == ["hawaii"]
    assert WordListChecker(("iceland",)).flags(first) == []


def test_load_checker_from_config_mappings(tmp_path: Path) -> None:
    (tmp_path / "words.txt").write_text("# sensitive words\n\n机密\n  secret  \n", encoding="utf-8")
    from_file = load_checker({"type": "words", "file": "words.txt", "name": "sensitive"}, base_dir=tmp_path)
    assert isinstance(from_file, WordListChecker)
    assert from_file.words == ("机密", "secret")
    assert from_file.name == "sensitive"
    inline = load_checker({"type": "words", "words": ["Secret"], "whole_words": True})
    assert inline.flags("top SECRET") == ["Secret"]
    assert inline.flags("secretary") == []
    regex = load_checker({"type": "regex", "patterns": [r"\d{4}"]})
    assert isinstance(regex, RegexChecker)
    assert regex.name == "regex"
    assert regex.flags("pin 1234") == ["1234"]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"type": "blocklist"}, "type='blocklist' is not known. Known: words, regex"),
        ({"words": ["a"]}, "type=None is not known"),
        ({"type": "words"}, "give exactly one of 'words' (a list) or 'file' (a path)"),
        ({"type": "words", "words": ["a"], "file": "w.txt"}, "give exactly one of 'words'"),
        ({"type": "words", "words": "secret"}, "words='secret' must be a list of strings"),
        ({"type": "words", "words": ["a"], "patterns": ["b"]}, "unknown keys ['patterns']"),
        ({"type": "words", "words": ["a"], "whole_words": "yes"}, "whole_words='yes' must be true or false"),
        ({"type": "words", "words": [" ", ""]}, "the word list is empty"),
        ({"type": "words", "file": "missing.txt"}, "missing.txt: No such file or directory. Fix 'file'"),
        ({"type": "regex", "patterns": ["(unclosed"]}, "pattern '(unclosed' is not a valid regular expression"),
        ({"type": "regex", "patterns": []}, "no patterns"),
    ],
)
def test_bad_checker_config_says_what_is_wrong(spec: dict[str, object], error: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_checker(spec, base_dir=tmp_path)


class _LengthChecker:
    """A user's own checker: anything with a name and flags() plugs in."""

    name = "too_long"

    def flags(self, text: str) -> list[str]:
        return ["length"] if len(text) > 10 else []


def test_flag_rates_per_arm_with_any_checker() -> None:
    outputs = {"ar": ["short", "a much longer output", "tiny", "x"], "spec": ["also a long output"] * 2, "none": []}
    rates = flag_rates(_LengthChecker(), outputs)
    assert rates["ar"] == 0.25
    assert rates["spec"] == 1.0
    assert math.isnan(rates["none"])
    assert count_flagged(_LengthChecker(), outputs["ar"]) == (1, 4)


def test_flag_rate_drift_beyond_the_sla_blocks() -> None:
    checker = WordListChecker(("机密",))
    clean, flagged = "公开的回答", "这是机密"
    reference = [flagged] * 10 + [clean] * 990
    within = [flagged] * 13 + [clean] * 987  # 1.0 % vs 1.3 %: exactly the 0.3-point SLA
    beyond = [flagged] * 14 + [clean] * 986
    rates = flag_rates(checker, {"ar": reference, "ok": within, "bad": beyond})
    passed, message = compare_flag_rates(rates["ar"], rates["ok"], n_reference=1000, n_candidate=1000)
    assert passed, message
    passed, message = compare_flag_rates(rates["ar"], rates["bad"], n_reference=1000, n_candidate=1000)
    assert not passed
    assert message == (
        "flag rate 1.40% vs reference 1.00%: difference +0.40% beyond the drift SLA ±0.30% (n=1000 vs n=1000)"
    )
    assert not compare_flag_rates(rates["bad"], rates["ar"])[0]  # fewer flags is a change too


def test_an_arm_without_outputs_blocks() -> None:
    passed, message = compare_flag_rates(0.01, math.nan)
    assert not passed
    assert message.startswith("BLOCK: a flag rate could not be measured")
    with pytest.raises(ValueError, match=r"max_drift=1\.5 must lie in"):
        compare_flag_rates(0.0, 0.0, max_drift=1.5)
