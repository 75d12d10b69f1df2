"""Task accuracy: numeric, span and ROUGE scoring on real reference lines, and the accuracy-drop rule."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from conftest import needs, needs_module
from specgate.accuracy import (
    TaskAccuracy,
    compare_accuracy,
    decide_accuracy,
    extract_number,
    mcnemar_p,
    problems_needed,
    reference_answers,
    score_numeric,
    score_outputs,
    score_rouge,
    score_span,
    span_f1,
)

WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"


def shared_lines(name: str, count: int) -> list[dict[str, Any]]:
    """The first `count` records of a shared workload file."""
    path = WORKLOADS / name
    needs(path.is_file(), f"shared workload {path}", "these tests read real reference data beside the checkout")
    with path.open(encoding="utf-8") as lines:
        return [json.loads(next(lines)) for _ in range(count)]


def specbench(category: str) -> dict[str, Any]:
    path = WORKLOADS / "short_specbench.jsonl"
    needs(path.is_file(), f"shared workload {path}", "these tests read real reference data beside the checkout")
    with path.open(encoding="utf-8") as lines:
        return next(r for r in map(json.loads, lines) if r["category"] == category and "reference" in r)


# --- numeric ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("The answer is $1,234.50.", Fraction("1234.5")),
        ("16 - 3 - 4 = 9 eggs, and 9 * 2 = $18", Fraction(18)),
        ("16-3 is not negative three: 13", Fraction(13)),
        ("She ends with -2 apples.", Fraction(-2)),
        ("Each gets 1/2 of a pie.", Fraction(1, 2)),
        ("It costs 3.50", Fraction(7, 2)),
        ("答案是：１２", Fraction(12)),
        ("答案是一百零五个", Fraction(105)),
        ("答案是十二", Fraction(12)),
        ("#### 70,000", Fraction(70000)),
        ("The answer is 18.\n\nQuestion: Tom has 5 apples and eats 2. The answer is 3.", Fraction(18)),
        ("\\boxed{42} because 6 * 7", Fraction(42)),
        ("I do not know.", None),
    ],
)
def test_extract_number_reads_the_final_answer(output: str, expected: Fraction | None) -> None:
    assert extract_number(output) == expected


def test_numeric_match_on_real_gsm8k_references() -> None:
    janet, robe, josh = shared_lines("ref_gsm8k_test.jsonl", 3)
    assert "#### 18" in str(janet["answer"])
    assert score_numeric("She sells 9 eggs and makes 9 * 2 = $18 every day.", str(janet["answer"]))
    assert score_numeric("The answer is 18 dollars.", str(janet["answer"]))
    assert not score_numeric("She makes $20 every day.", str(janet["answer"]))
    assert not score_numeric("She sells the eggs at the market.", str(janet["answer"]))
    assert score_numeric("It takes 2 + 1 = 3 bolts.", str(robe["answer"]))
    assert not score_numeric("The answer is 3.5 bolts.", str(robe["answer"]))
    assert score_numeric("He made a profit of $70,000.", str(josh["answer"]))
    assert not score_numeric("The answer is 7000.", str(josh["answer"]))


def test_numeric_match_on_real_mgsm_chinese_references() -> None:
    janet, robe, josh = shared_lines("ref_mgsm_zh.jsonl", 3)
    assert janet["answer_number"] == "18"
    assert score_numeric("她每天在农贸市场赚 １８ 美元。", str(janet["answer_number"]))
    assert score_numeric("答案是：18美元", str(janet["answer_number"]))
    assert score_numeric("答案是十八", str(janet["answer_number"]))
    assert not score_numeric("答案是 16 美元", str(janet["answer_number"]))
    assert score_numeric("一共需要 3 匹布料。", str(robe["answer_number"]))
    assert score_numeric("他赚了 70,000 美元的利润。", str(josh["answer_number"]))
    assert not score_numeric("他赚了 130,000 美元。", str(josh["answer_number"]))


def test_numeric_match_on_a_specbench_reference_list() -> None:
    record = specbench("math_reasoning")
    reference = json.dumps(record["reference"])  # how the JSONL loader hands a list over: as text
    answer = str(record["reference"][0]).rsplit("####", 1)[1].strip()
    assert score_numeric(f"So the answer is {answer}.", reference)
    assert not score_numeric(f"So the answer is {int(answer) + 1}.", reference)


def test_a_reference_without_a_number_is_a_workload_error() -> None:
    with pytest.raises(ValueError, match="holds no number"):
        score_numeric("42", "no answer here")


# --- spans --------------------------------------------------------------------------------------------------------


def test_span_match_on_real_cmrc2018_answers() -> None:
    first, second, third = shared_lines("ref_cmrc2018_dev_sample.jsonl", 3)
    assert first["answers"] == ["光荣和ω-force"]
    stored = str(first["answers"])  # the JSONL loader's str() of the list: "['光荣和ω-force']"
    assert score_span("《战国无双3》是由光荣和ω－Ｆｏｒｃｅ合作开发的。", stored)
    assert not score_span("是由光荣开发的。", stored)
    assert not score_span("《战国无双3》是由光荣和ω－Ｆｏｒｃｅ合作开发的。", stored, mode="exact")
    assert score_span("光荣和 ω-Force", stored, mode="exact")
    assert score_span("鼓、锣、钹和板", second["answers"])
    assert not score_span("锣和鼓", second["answers"])
    # two gold spans: the shorter one, without the leading 是, matches an answer that omits it
    answer = "它横贯山东省北部的铁路干线德龙烟铁路的重要组成部分，构成山东省北部沿海通道，并成为环渤海铁路网的南部干线"
    assert score_span(answer, third["answers"])
    assert not score_span(answer, third["answers"][0], mode="exact")


def test_span_f1_is_the_cmrc2018_longest_common_substring_f1() -> None:
    assert span_f1("光荣和ω-force", ["光荣和ω-force"]) == 1.0
    # 是光荣 vs 光荣和ωforce: common 光荣 (2 chars); precision 2/3, recall 2/9
    assert span_f1("是光荣", "光荣和ω-force") == pytest.approx(2 * (2 / 3) * (2 / 9) / (2 / 3 + 2 / 9))
    assert span_f1("无关", "光荣和ω-force") == 0.0


def test_reference_answers_reads_lists_stored_as_text() -> None:
    assert reference_answers('["a", "b"]') == ("a", "b")
    assert reference_answers("['光荣', '和']") == ("光荣", "和")
    assert reference_answers(["x", "y"]) == ("x", "y")
    assert reference_answers("[citation needed]") == ("[citation needed]",)
    assert reference_answers("#### 18") == ("#### 18",)


# --- ROUGE --------------------------------------------------------------------------------------------------------


def test_rouge_l_known_answers() -> None:
    needs_module("rouge_score", "pip install 'specgate[accuracy]'")
    # LCS "cat sat on mat": 4 of 6 tokens on both sides
    assert score_rouge("the cat sat on the mat", "a cat sat on a mat") == pytest.approx(4 / 6)
    # character level: LCS 6 chars, precision 6/6, recall 6/8
    assert score_rouge("猫坐在垫子上", "一只猫坐在垫子上") == pytest.approx(2 * 0.75 / 1.75)
    # rouge-score's own tokenizer drops Chinese altogether, which is why Chinese is scored per character
    assert score_rouge("猫坐在垫子上", "一只猫坐在垫子上", chinese=False) == 0.0
    assert score_rouge("cats sitting", "cat sits") == 1.0  # Porter stemmer for English


def test_rouge_on_a_real_specbench_summary() -> None:
    needs_module("rouge_score", "pip install 'specgate[accuracy]'")
    record = specbench("summarization")
    reference = json.dumps(record["reference"])
    gold = str(record["reference"][0])
    first_sentence = gold.split(". ")[0]
    assert score_rouge(gold, reference) == pytest.approx(1.0)
    partial = score_rouge(first_sentence, reference)
    unrelated = score_rouge("Quarterly revenue grew by four percent on strong demand for cloud storage.", reference)
    assert 0.1 < partial < 0.6
    assert unrelated < 0.1


# --- scoring a workload and the drop rule -------------------------------------------------------------------------


def test_score_outputs_counts_missing_outputs_as_wrong() -> None:
    records = shared_lines("ref_gsm8k_test.jsonl", 3)
    references = {f"gsm-{i}": str(r["answer"]) for i, r in enumerate(records)}
    outputs = {"gsm-0": "The answer is 18.", "gsm-1": "The answer is 4.", "extra": "no reference: ignored"}
    result = score_outputs("numeric", outputs, references)
    assert (result.n, result.correct, result.accuracy) == (3, 1.0, pytest.approx(1 / 3))
    assert result.per_prompt == {"gsm-0": 1.0, "gsm-1": 0.0, "gsm-2": 0.0}
    assert result.binary


def test_score_outputs_rejects_an_unknown_task() -> None:
    with pytest.raises(ValueError, match=r"task='bleu' is not a known accuracy task\. Known: numeric, span, summary"):
        score_outputs("bleu", {}, {})


def _result(correct: list[int], task: str = "numeric") -> TaskAccuracy:
    per_prompt = {f"p{i}": float(c) for i, c in enumerate(correct)}
    return TaskAccuracy(task, len(correct), float(sum(correct)), sum(correct) / len(correct), per_prompt)


def test_a_drop_beyond_three_points_blocks_when_mcnemar_tells_it_from_chance() -> None:
    from scipy import stats

    baseline = _result([1] * 40 + [0] * 10)
    current = _result([0] * 8 + [1] * 32 + [0] * 10)  # 8 broken, none fixed: 80 % → 64 %
    passed, message = compare_accuracy(baseline, current)
    assert not passed
    p = stats.binomtest(8, 8, 0.5).pvalue
    assert mcnemar_p(baseline, current) == (pytest.approx(p), 50, 0, 8)
    assert message.startswith("REGRESSED: numeric accuracy 64.0% vs baseline 80.0%: drop 16.0 pts > max 3.0 pts")
    assert "n=50, baseline n=50" in message
    assert f"McNemar exact p={p:.2g} on 50 common prompts: 8 broken, 0 fixed" in message


def test_a_drop_beyond_the_limit_that_mcnemar_cannot_tell_from_chance_is_undecided_and_says_how_many_problems() -> None:
    """6 broken, 1 fixed of 50: a 10-point drop with p = 0.125. Before, blocked on the point estimate; now it passes
    as UNDECIDED, with about how many problems would tell a drop of that size from chance at this discordance."""
    baseline = _result([1] * 40 + [0] * 10)
    current = _result([0] * 6 + [1] * 34 + [1] * 1 + [0] * 9)
    decision = decide_accuracy(baseline, current)
    assert decision.outcome == "UNDECIDED" and decision.passed and decision.p_value == pytest.approx(0.125)
    # d = 7/50 changed, δ = 5/50 dropped: n ≥ d·1.96² / δ² = 0.14 × 3.84 / 0.01 ≈ 54
    assert decision.problems_needed == 54 == problems_needed(6, 1, 50)
    passed, message = compare_accuracy(baseline, current)
    assert passed and message.startswith("UNDECIDED (passes): numeric accuracy 70.0% vs baseline 80.0%")
    assert "not told from chance (McNemar p > 0.05): ≈ 54 problems would decide a drop of this size" in message
    assert problems_needed(0, 3, 50) is None  # nothing dropped


def test_a_probe_that_grew_is_compared_on_the_problems_both_scored() -> None:
    """A baseline of the 12 first problems, a run of 240 whose new ones are harder: the same answers on the 12 are no
    drop (the accuracies of different problem sets are not compared)."""
    baseline = _result([1] * 12)
    current = _result([1] * 12 + [1, 0] * 114)
    decision = decide_accuracy(baseline, current)
    assert decision.outcome == "PASS" and decision.drop == 0.0
    passed, message = compare_accuracy(baseline, current)
    assert passed and "drop 0.0 pts on the 12 problems both scored ≤ max 3.0 pts" in message


def test_the_drop_limit_is_inclusive_and_identical_results_pass() -> None:
    baseline = _result([1] * 80 + [0] * 20)
    assert compare_accuracy(baseline, _result([0] * 3 + [1] * 77 + [0] * 20))[0]  # exactly 3 points
    assert decide_accuracy(baseline, _result([0] * 3 + [1] * 77 + [0] * 20)).outcome == "PASS"
    assert decide_accuracy(baseline, _result([0] * 4 + [1] * 76 + [0] * 20)).outcome == "UNDECIDED"  # p = 0.125
    assert decide_accuracy(baseline, _result([0] * 6 + [1] * 74 + [0] * 20)).outcome == "REGRESSED"  # p = 0.031
    passed, message = compare_accuracy(baseline, baseline)
    assert passed
    assert "McNemar exact p=1 on 100 common prompts: 0 broken, 0 fixed" in message
    assert compare_accuracy(_result([0] * 10), _result([1] * 10))[0]  # improving never blocks


def test_summary_comparison_reports_the_mean_change_and_nothing_scored_blocks() -> None:
    baseline = TaskAccuracy("summary", 2, 1.2, 0.6, {"a": 0.7, "b": 0.5})
    current = TaskAccuracy("summary", 2, 1.0, 0.5, {"a": 0.6, "b": 0.4})
    passed, message = compare_accuracy(baseline, current, max_drop=0.05)
    assert not passed
    assert "mean per-prompt change -0.100 on 2 common prompts" in message
    assert mcnemar_p(baseline, current) is None
    passed, message = compare_accuracy(baseline, TaskAccuracy("summary", 0, 0.0, 0.0, {}))
    assert not passed
    assert message.startswith("BLOCK: no summary prompt with a reference was scored")
    with pytest.raises(ValueError, match="cannot compare task 'numeric' with a baseline of task 'summary'"):
        compare_accuracy(baseline, _result([1]))


# --- the shipped reference workloads ------------------------------------------------------------------------------

SUITE_WORKLOADS = Path(__file__).resolve().parents[1] / "suites" / "workloads"


def test_shipped_math_workload_loads_and_its_references_are_numbers() -> None:
    import importlib.util

    from specgate.config import WorkloadConfig
    from specgate.measure.workloads import load_workload

    script = Path(__file__).resolve().parents[1] / "scripts" / "make_ref_math.py"
    spec = importlib.util.spec_from_file_location("make_ref_math", script)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    shipped = [json.loads(line) for line in (SUITE_WORKLOADS / "ref_math.jsonl").read_text().splitlines()]
    assert shipped == generator.problems()  # what scripts/make_ref_math.py writes (seeded)
    prompts = load_workload(WorkloadConfig("ref_math", SUITE_WORKLOADS / "ref_math.jsonl", task="numeric"))
    assert len(prompts) == 240 and len({p.id for p in prompts}) == 240
    assert {p.id[:3] for p in prompts} == {"en-", "zh-"}
    for prompt in prompts:
        assert prompt.reference is not None
        assert score_numeric(f"The answer is {prompt.reference}.", prompt.reference), prompt.id
        assert not score_numeric(f"The answer is {int(prompt.reference) + 1}.", prompt.reference), prompt.id


def test_shipped_summary_workload_loads_with_one_sentence_references() -> None:
    needs_module("rouge_score", "pip install 'specgate[accuracy]'")
    from specgate.config import WorkloadConfig
    from specgate.measure.workloads import load_workload

    prompts = load_workload(WorkloadConfig("ref_summary", SUITE_WORKLOADS / "ref_summary.jsonl", task="summary"))
    assert len(prompts) == 6
    outputs = {p.id: p.text.split("\n\n", 1)[1] for p in prompts}  # "summarising" by echoing the paragraph
    references = {p.id: str(p.reference) for p in prompts}
    echo = score_outputs("summary", outputs, references)
    perfect = score_outputs("summary", references, references)
    assert perfect.accuracy == pytest.approx(1.0)
    assert 0.2 < echo.accuracy < 0.6
    for reference in references.values():
        assert reference.count(". ") == 0 and reference.endswith(".")


def test_shipped_field_workload_is_the_generators_output_and_each_answer_is_one_field_of_its_record() -> None:
    """`ref_fields.jsonl` is what `scripts/make_ref_fields.py` writes (seeded); every answer is found once in its own
    record, so span containment scores it, and the copy of another field of the record scores wrong."""
    import importlib.util
    import json

    from specgate.config import WorkloadConfig
    from specgate.measure.workloads import load_workload

    script = Path(__file__).resolve().parents[1] / "scripts" / "make_ref_fields.py"
    spec = importlib.util.spec_from_file_location("make_ref_fields", script)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    shipped = [json.loads(line) for line in (SUITE_WORKLOADS / "ref_fields.jsonl").read_text().splitlines()]
    assert shipped == generator.problems()
    prompts = load_workload(WorkloadConfig("ref_fields", SUITE_WORKLOADS / "ref_fields.jsonl", task="span"))
    assert len(prompts) == 240 and len({p.id.split("-")[0] for p in prompts}) == 5
    for prompt in prompts:
        record = prompt.text.split("\n\n")[1]
        answer = str(prompt.reference)
        assert record.count(answer) == 1, prompt.id
        assert score_span(f"{answer}.", answer) and not score_span(record.replace(answer, "?"), answer), prompt.id
