"""Write suites/workloads/ref_fields.jsonl: field extraction from short business records, an accuracy probe.

Each problem is a short record (invoice, tender notice, meeting notice, delivery note, lease summary) and a question
about one of its fields; the reference answer is that field's value, scored by span containment (`task: span`).
Every record holds a distractor of the same kind as the answer (two dates, two amounts, two names), so an answer
that copies the wrong field is wrong. The questions are ones the embedded 135M-parameter model answers often but not
always: an accuracy probe on which a quantization step that damages the model shows, and one that does not, passes.
Names, places, dates and amounts are drawn from fixed lists (seeded, so the file is reproducible).

    python scripts/make_ref_fields.py          # rewrites suites/workloads/ref_fields.jsonl
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "suites" / "workloads" / "ref_fields.jsonl"
PROBLEMS = 240
SEED = 20261202
INSTRUCTION = "Read the record below and answer the question with the exact value from the record, nothing else."

COMPANIES = [
    "Northwind Traders",
    "Harbour Logistics",
    "Cedar Hill Builders",
    "Bluewater Engineering",
    "Ashford Paper Mills",
    "Redcliff Foods",
    "Lakeside Medical Supplies",
    "Stonefield Quarries",
    "Westmere Printing",
    "Oakridge Timber",
    "Millbrook Dairy",
    "Thornbury Electrical",
    "Southport Shipping",
    "Elm Park Catering",
    "Brookhaven Textiles",
]
PEOPLE = [
    "Maria Lopez",
    "James Okafor",
    "Anna Novak",
    "David Chen",
    "Sarah Kowalski",
    "Peter Lindqvist",
    "Fatima Rahman",
    "Thomas Becker",
    "Elena Rossi",
    "Samuel Adeyemi",
    "Laura Martin",
    "Henrik Olsen",
    "Grace Mensah",
    "Paul Dubois",
]
TOWNS = [
    "Riverside",
    "Northgate",
    "Harbourview",
    "Millbrook",
    "Stonefield",
    "Westmere",
    "Ashford",
    "Oakridge",
    "Redcliff",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
ROOMS = ["Room 4B", "the Council Chamber", "Room 12", "the Harbour Room", "Meeting Room 3", "the Library Hall"]
GOODS = [
    "office chairs",
    "printer paper",
    "steel pipes",
    "hand sanitiser",
    "laptop computers",
    "road salt",
    "LED lamps",
]


def _date(rng: random.Random) -> str:
    return f"{rng.randint(2, 28)} {rng.choice(MONTHS)} 2027"


def _amount(rng: random.Random) -> str:
    return f"{rng.randint(11, 98)},{rng.randint(100, 999)} euros"


def _two(rng: random.Random, draw: Callable[[random.Random], str]) -> tuple[str, str]:
    """Two different values of a kind, in order (an earlier date first, a smaller amount first)."""
    first = draw(rng)
    second = draw(rng)
    while second == first:
        second = draw(rng)
    return (first, second) if _order(first) < _order(second) else (second, first)


def _order(value: str) -> tuple[int, ...]:
    day, month, *_ = [*value.replace(",", "").split(), ""]
    if month in MONTHS:
        return (MONTHS.index(month), int(day))
    return (int(day),)


def _invoice(rng: random.Random) -> list[tuple[str, str, str]]:
    supplier, buyer = rng.sample(COMPANIES, 2)
    issued, due = _two(rng, _date)
    net, total = _two(rng, _amount)
    number = f"INV-{rng.randint(1000, 9999)}"
    record = (
        f"Invoice {number}. Supplier: {supplier}. Buyer: {buyer}. Issued on {issued}. Net amount: {net}. "
        f"Total amount due: {total}. Payment due by {due}."
    )
    return [
        (record, "Who is the buyer?", buyer),
        (record, "By what date must the invoice be paid?", due),
        (record, "What is the total amount due?", total),
        (record, "What is the invoice number?", number),
    ]


def _tender(rng: random.Random) -> list[tuple[str, str, str]]:
    authority = f"the Municipality of {rng.choice(TOWNS)}"
    published, deadline = _two(rng, _date)
    value = _amount(rng)
    goods = rng.choice(GOODS)
    contact = rng.choice(PEOPLE)
    reference = f"T-2027-{rng.randint(100, 999)}"
    record = (
        f"Tender notice {reference}, published on {published} by {authority}. Contract: supply of {goods}. "
        f"Estimated value: {value}. Tenders must be received by {deadline}. Contact person: {contact}."
    )
    return [
        (record, "By what date must tenders be received?", deadline),
        (record, "Who is the contact person?", contact),
        (record, "What is the tender reference?", reference),
        (record, "What goods does the contract supply?", goods),
    ]


def _meeting(rng: random.Random) -> list[tuple[str, str, str]]:
    chair, secretary = rng.sample(PEOPLE, 2)
    day = _date(rng)
    hour = f"{rng.randint(9, 16)}:{rng.choice(['00', '15', '30', '45'])}"
    room = rng.choice(ROOMS)
    committee = rng.choice(["Finance Committee", "Planning Board", "Safety Committee", "Audit Committee"])
    record = (
        f"Notice of meeting. The {committee} meets on {day} at {hour} in {room}. The meeting is chaired by {chair}; "
        f"papers are circulated by the secretary, {secretary}."
    )
    return [
        (record, "Who chairs the meeting?", chair),
        (record, "Where does the committee meet?", room),
        (record, "At what time does the meeting start?", hour),
        (record, "Who is the secretary?", secretary),
    ]


def _delivery(rng: random.Random) -> list[tuple[str, str, str]]:
    carrier, customer = rng.sample(COMPANIES, 2)
    shipped, delivered = _two(rng, _date)
    order = f"PO-{rng.randint(10000, 99999)}"
    pallets = str(rng.randint(3, 40))
    town = rng.choice(TOWNS)
    record = (
        f"Delivery note for order {order}. Carrier: {carrier}. Customer: {customer}, warehouse in {town}. "
        f"Shipped on {shipped}; delivered on {delivered}. Pallets delivered: {pallets}."
    )
    return [
        (record, "Which company carried the goods?", carrier),
        (record, "On what date were the goods delivered?", delivered),
        (record, "What is the order number?", order),
        (record, "In which town is the warehouse?", town),
    ]


def _lease(rng: random.Random) -> list[tuple[str, str, str]]:
    landlord, tenant = rng.sample(PEOPLE, 2)
    rent, deposit = _two(rng, _amount)
    start = _date(rng)
    term = rng.choice(["two", "three", "five", "seven", "ten"]) + " years"
    town = rng.choice(TOWNS)
    record = (
        f"Lease summary. Landlord: {landlord}. Tenant: {tenant}. Premises: a shop unit in {town}. Term: {term} from "
        f"{start}. Annual rent: {rent}. Security deposit: {deposit}."
    )
    return [
        (record, "Who is the tenant?", tenant),
        (record, "What is the security deposit?", deposit),
        (record, "How long does the lease run?", term),
        (record, "Who is the landlord?", landlord),
    ]


KINDS = {"invoice": _invoice, "tender": _tender, "meeting": _meeting, "delivery": _delivery, "lease": _lease}


def problems(count: int = PROBLEMS, seed: int = SEED) -> list[dict[str, str]]:
    """`count` problems, one question per record, the kinds and questions taken in turn."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        kind = list(KINDS)[index % len(KINDS)]
        while True:  # an answer found twice in its record (a town that is also in a company's name): draw again
            questions = KINDS[kind](rng)
            record, question, answer = questions[(index // len(KINDS)) % len(questions)]
            if record.count(answer) == 1:
                break
        prompt = f"{INSTRUCTION}\n\n{record}\n\nQuestion: {question}"
        rows.append({"id": f"{kind}-{index:02d}", "prompt": prompt, "reference": answer})
    return rows


def main() -> None:
    rows = problems()
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(f"wrote {len(rows)} problems to {OUT}")


if __name__ == "__main__":
    main()
