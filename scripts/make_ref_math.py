"""Write suites/workloads/ref_math.jsonl: short arithmetic word problems in English and Chinese with exact numeric
answers, an accuracy probe (`task: numeric`).

The first 12 problems are the hand-written originals; the rest are generated from templates (adding, taking away,
multiplying, sharing, change from a payment, a daily amount over several days; English and Chinese in turn), with
names, objects and numbers drawn from fixed lists by a seeded generator, so the file is reproducible and every answer
is exact. 240 problems: the accuracy rule (block when accuracy falls more than the limit and the exact McNemar test
tells the fall from chance) needs about 200 to tell a drop of a few points from the answers a harmless change flips
(scripts/accuracy_rule_rates.py).

    python scripts/make_ref_math.py          # rewrites suites/workloads/ref_math.jsonl
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "suites" / "workloads" / "ref_math.jsonl"
PROBLEMS = 240
SEED = 20261203
EN_ASK = "Give the final answer as a number."
ZH_ASK = "请给出最终的数字答案。"

ORIGINALS = [
    ("en-apples", "Tom has 3 apples and buys 4 more. How many apples does Tom have now?", 7),
    ("en-pencils", "A box holds 6 pencils. How many pencils are in 5 boxes?", 30),
    ("en-cookies", "Mia baked 20 cookies and gave 8 of them to her friends. How many cookies does she have left?", 12),
    (
        "en-bus",
        "A bus has 15 people on it. At the first stop 6 people get off and 4 people get on. How many people are on "
        "the bus now?",
        13,
    ),
    ("en-notebooks", "A notebook costs $3. How many dollars do 4 notebooks cost?", 12),
    ("en-stickers", "Sam shares 18 stickers equally among 3 friends. How many stickers does each friend get?", 6),
    ("en-pages", "Lily reads 5 pages every day. How many pages does she read in one week?", 35),
    ("zh-goldfish", "小明有 5 条金鱼，又买了 3 条。他现在一共有多少条金鱼？", 8),
    ("zh-books", "书架上有 24 本书，借走了 9 本。书架上还剩多少本书？", 15),
    ("zh-eggs", "每盒有 6 个鸡蛋，妈妈买了 4 盒。她一共买了多少个鸡蛋？", 24),
    ("zh-candy", "老师有 40 颗糖，平均分给 8 个学生。每个学生分到多少颗糖？", 5),
    ("zh-pens", "一支笔 2 元，一个本子 5 元。买一支笔和两个本子一共要多少元？", 12),
]

EN_NAMES = ["Tom", "Mia", "Sam", "Lily", "Ben", "Ana", "Omar", "Grace", "Leo", "Nina", "Ravi", "Emma"]
EN_THINGS = ["apples", "marbles", "stamps", "cards", "shells", "stickers", "pencils", "books", "cookies", "coins"]
EN_BOXES = [("box", "boxes"), ("bag", "bags"), ("jar", "jars"), ("basket", "baskets"), ("crate", "crates")]
EN_DAILY = [("reads", "pages"), ("walks", "kilometres"), ("writes", "letters"), ("saves", "dollars")]
ZH_NAMES = ["小明", "小红", "小华", "小丽", "小刚", "小芳", "小军", "小玲"]
ZH_THINGS = [
    ("个", "苹果"),
    ("颗", "弹珠"),
    ("张", "邮票"),
    ("张", "卡片"),
    ("本", "书"),
    ("支", "铅笔"),
    ("块", "饼干"),
]
ZH_BOXES = ["盒", "袋", "箱", "篮"]
ZH_DAILY = [("读", "页书"), ("走", "公里"), ("写", "封信"), ("存", "元钱")]

Template = Callable[[random.Random], tuple[str, int]]


def _en_add(rng: random.Random) -> tuple[str, int]:
    name, thing, a, b = rng.choice(EN_NAMES), rng.choice(EN_THINGS), rng.randint(3, 60), rng.randint(2, 40)
    return f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?", a + b


def _en_take(rng: random.Random) -> tuple[str, int]:
    name, thing, b = rng.choice(EN_NAMES), rng.choice(EN_THINGS), rng.randint(2, 30)
    a = b + rng.randint(1, 50)
    return f"{name} had {a} {thing} and gave {b} of them away. How many {thing} does {name} have left?", a - b


def _en_times(rng: random.Random) -> tuple[str, int]:
    (box, boxes), thing, a, b = rng.choice(EN_BOXES), rng.choice(EN_THINGS), rng.randint(2, 12), rng.randint(2, 9)
    return f"A {box} holds {a} {thing}. How many {thing} are in {b} {boxes}?", a * b


def _en_share(rng: random.Random) -> tuple[str, int]:
    name, thing, each, friends = rng.choice(EN_NAMES), rng.choice(EN_THINGS), rng.randint(2, 12), rng.randint(2, 9)
    return (
        f"{name} shares {each * friends} {thing} equally among {friends} friends. How many {thing} does each friend "
        "get?",
        each,
    )


def _en_change(rng: random.Random) -> tuple[str, int]:
    name, count, price = rng.choice(EN_NAMES), rng.randint(2, 6), rng.randint(2, 9)
    paid = rng.choice([n for n in (20, 50, 100) if n > count * price])
    return (
        f"{name} buys {count} notebooks at ${price} each and pays with ${paid}. How many dollars of change does "
        f"{name} get?",
        paid - count * price,
    )


def _en_daily(rng: random.Random) -> tuple[str, int]:
    name, (verb, unit), a, days = rng.choice(EN_NAMES), rng.choice(EN_DAILY), rng.randint(2, 15), rng.randint(2, 10)
    return f"{name} {verb} {a} {unit} every day. How many {unit} is that in {days} days?", a * days


def _zh_add(rng: random.Random) -> tuple[str, int]:
    name, (unit, thing), a, b = rng.choice(ZH_NAMES), rng.choice(ZH_THINGS), rng.randint(3, 60), rng.randint(2, 40)
    return f"{name}有 {a} {unit}{thing}，又得到了 {b} {unit}。{name}现在一共有多少{unit}{thing}？", a + b


def _zh_take(rng: random.Random) -> tuple[str, int]:
    name, (unit, thing), b = rng.choice(ZH_NAMES), rng.choice(ZH_THINGS), rng.randint(2, 30)
    a = b + rng.randint(1, 50)
    return f"{name}有 {a} {unit}{thing}，送给别人 {b} {unit}。{name}还剩多少{unit}{thing}？", a - b


def _zh_times(rng: random.Random) -> tuple[str, int]:
    box, (unit, thing), a, b = rng.choice(ZH_BOXES), rng.choice(ZH_THINGS), rng.randint(2, 12), rng.randint(2, 9)
    return f"每{box}有 {a} {unit}{thing}，一共有 {b} {box}。一共有多少{unit}{thing}？", a * b


def _zh_share(rng: random.Random) -> tuple[str, int]:
    (unit, thing), each, people = rng.choice(ZH_THINGS), rng.randint(2, 12), rng.randint(2, 9)
    return f"把 {each * people} {unit}{thing}平均分给 {people} 个同学。每个同学分到多少{unit}？", each


def _zh_change(rng: random.Random) -> tuple[str, int]:
    name, count, price = rng.choice(ZH_NAMES), rng.randint(2, 6), rng.randint(2, 9)
    paid = rng.choice([n for n in (20, 50, 100) if n > count * price])
    return (
        f"{name}买了 {count} 个本子，每个 {price} 元，付了 {paid} 元。应该找回多少元？",
        paid - count * price,
    )


def _zh_daily(rng: random.Random) -> tuple[str, int]:
    name, (verb, unit), a, days = rng.choice(ZH_NAMES), rng.choice(ZH_DAILY), rng.randint(2, 15), rng.randint(2, 10)
    return f"{name}每天{verb} {a} {unit}。{days} 天一共{verb}多少{unit}？", a * days


TEMPLATES: list[tuple[str, str, Template]] = [
    ("en", "add", _en_add),
    ("zh", "add", _zh_add),
    ("en", "take", _en_take),
    ("zh", "take", _zh_take),
    ("en", "times", _en_times),
    ("zh", "times", _zh_times),
    ("en", "share", _en_share),
    ("zh", "share", _zh_share),
    ("en", "change", _en_change),
    ("zh", "change", _zh_change),
    ("en", "daily", _en_daily),
    ("zh", "daily", _zh_daily),
]


def _ask(text: str, english: bool) -> str:
    return f"{text} {EN_ASK}" if english else f"{text}{ZH_ASK}"


def problems(count: int = PROBLEMS, seed: int = SEED) -> list[dict[str, str]]:
    """The 12 originals, then generated problems, the templates taken in turn, to `count` in all."""
    rows = [
        {"id": pid, "prompt": _ask(text, pid.startswith("en-")), "reference": str(answer)}
        for pid, text, answer in ORIGINALS
    ]
    rng = random.Random(seed)
    index = 0
    while len(rows) < count:
        language, kind, template = TEMPLATES[index % len(TEMPLATES)]
        text, answer = template(rng)
        prompt = _ask(text, language == "en")
        rows.append({"id": f"{language}-{kind}-{index:03d}", "prompt": prompt, "reference": str(answer)})
        index += 1
    return rows[:count]


def main() -> None:
    rows = problems()
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} problems to {OUT}")


if __name__ == "__main__":
    main()
