# ruff: noqa: E501  (sentence templates read best as whole lines)
"""Write the acceptance pools of the shipped document workloads (suites/workloads/doc_edit.jsonl, doc_proofread.jsonl).

The first 8 prompts of each file are hand-written documents (kept as they are); this script appends generated
business documents after them: notices, contract clauses, tender notices, policies, minutes, procedures, leases,
service terms and reports, assembled from sentence templates with varied names, dates, places and amounts (seeded,
so the files are reproducible). The gate times the first `limit` prompts of a workload; the acceptance comparison may
extend over the rest (`acceptance_prompts` in specgate.yaml) when a new draft's acceptance cannot be told from the
old one's on the first few.

    python scripts/make_doc_workloads.py          # rewrites the generated part of both files
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "suites" / "workloads"
HAND_WRITTEN = 8
GENERATED = 292
SEED = 20261201

TOWNS = [
    "Riverside",
    "Northgate",
    "Elm Park",
    "Harbourview",
    "Millbrook",
    "Stonefield",
    "Westmere",
    "Ashford",
    "Brookhaven",
    "Cedar Hill",
    "Lakeside",
    "Oakridge",
    "Redcliff",
    "Southport",
    "Thornbury",
    "Wheaton",
]
STREETS = [
    "Mill Street",
    "Harbour Road",
    "Station Avenue",
    "Church Lane",
    "Market Square",
    "Park Road",
    "King Street",
    "Queen's Walk",
    "Bridge Road",
    "Victoria Street",
    "Orchard Lane",
    "High Street",
    "Canal Road",
    "Forest Way",
]
COMPANIES = [
    "Northwind Logistics",
    "Bluestone Engineering",
    "Meridian Foods",
    "Atlas Facilities",
    "Greenline Energy",
    "Harper & Cole",
    "Silverline Transport",
    "Crestview Construction",
    "Pinewood Supplies",
    "Orion Systems",
    "Kestrel Cleaning",
    "Summit Office Services",
    "Brightwater Utilities",
    "Falcon Security",
]
PEOPLE = [
    "Anna Fischer",
    "David Okafor",
    "Maria Lopez",
    "James Whitfield",
    "Priya Raman",
    "Thomas Becker",
    "Chen Wei",
    "Sara Lindqvist",
    "Michael O'Brien",
    "Fatima Haddad",
    "Lukas Novak",
    "Emily Carter",
    "Hiroshi Tanaka",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "September", "October", "November"]
GOODS = [
    "office furniture",
    "road salt",
    "printer paper",
    "laboratory gloves",
    "school textbooks",
    "LED street lamps",
    "cleaning supplies",
    "diesel fuel",
    "laptop computers",
    "water meters",
    "safety helmets",
    "traffic cones",
]

TEMPLATES = [
    (
        "notice",
        "Notice of {work}. The {owner} will carry out {work_lower} on {street} in {town} on {day}, {date} {month}, from "
        "{start}:00 to {end}:00. During this period access to the street will be restricted and parking will not be "
        "allowed between {start}:00 and {end}:00. Residents are advised to plan their journeys in advance and to follow "
        "the signs placed by the crews. Deliveries to shops on {street} will be possible before {start}:00. Questions may "
        "be directed to the service line at 555-{phone} on working days between 8:00 and 18:00. We apologise for the "
        "inconvenience and thank residents for their patience.",
    ),
    (
        "contract",
        "Clause {clause}. Delivery. {clause}.1 The Supplier, {company}, shall deliver the {goods} to the Buyer's "
        "warehouse in {town} within {days} days of each purchase order. {clause}.2 Each delivery shall be accompanied by "
        "a delivery note stating the order number, the quantities and the date of dispatch. {clause}.3 If the Supplier "
        "fails to deliver on time, the Buyer may charge a penalty of {penalty} percent of the order value for each week of "
        "delay, up to a maximum of {cap} percent. {clause}.4 Risk in the goods passes to the Buyer on delivery, and title "
        "passes on payment in full. {clause}.5 The Buyer shall inspect the goods within five working days of delivery.",
    ),
    (
        "tender",
        "Invitation to Tender. The Municipality of {town} invites tenders for the supply of {goods} for the period from "
        "1 {month} to 31 December. The estimated contract value is {amount} euros excluding value added tax. Tenders "
        "must be submitted through the procurement portal no later than {day}, {date} {month}, at 12:00. Late tenders "
        "will not be considered. Bidders must provide proof of registration, two references from comparable contracts "
        "and a signed declaration of compliance. The contract will be awarded to the most economically advantageous "
        "tender. Questions about this invitation may be sent to {person} at the procurement office until {date} {month}.",
    ),
    (
        "policy",
        "Policy on {leave}. Employees of {company} are entitled to {weeks} weeks of {leave_lower} in each calendar year. "
        "Requests must be submitted to the line manager at least {notice} days before the first day of leave, using the "
        "staff portal. The line manager shall reply within five working days. Leave that is not taken by 31 December may "
        "be carried over to the following year up to a maximum of {carry} days. Employees who need to cancel approved "
        "leave should inform their line manager as early as possible. Questions about this policy may be addressed to "
        "{person} in the human resources department.",
    ),
    (
        "minutes",
        "Minutes of the Board Meeting held on {day}, {date} {month}, at the offices of {company} in {town}. Present: "
        "{person} (chair), {person2}, {person3} and {person4}. The chair opened the meeting at {start}:00 and the minutes "
        "of the previous meeting were approved without changes. The finance director presented the quarterly accounts, "
        "which show revenue of {amount} euros and costs within budget. The board approved the purchase of {goods} for the "
        "new depot in {town2}. The next meeting will be held on {day2}, {date2} {month}. The chair closed the meeting at "
        "{end}:00.",
    ),
    (
        "procedure",
        "Safety Procedure {clause}: Working at Height. Before any work at height begins at the {town} site, the "
        "supervisor shall inspect the ladders, scaffolds and harnesses and record the inspection in the site log. Workers "
        "shall wear a safety helmet and a harness attached to an approved anchor point at all times above {height} "
        "metres. No one may work at height alone or in winds stronger than {wind} kilometres per hour. Tools must be "
        "secured with lanyards to prevent falls. Any incident or near miss must be reported to {person} before the end of "
        "the shift. This procedure is reviewed every {review} months.",
    ),
    (
        "lease",
        "Lease Terms. The Landlord, {company}, lets to the Tenant the premises at {number} {street}, {town}, for a term of "
        "{years} years starting on 1 {month}. The rent is {rent} euros per month, payable in advance on the first day of "
        "each month. The Tenant shall pay a deposit equal to {deposit} months' rent before moving in. The rent will be "
        "reviewed every {review} months in line with the consumer price index. The Tenant shall keep the premises in good "
        "repair and may not sublet without the Landlord's written consent. Notice of termination must be given at least "
        "{notice} days in advance.",
    ),
    (
        "service",
        "Service Agreement. {company} shall provide {service} at the offices of the Client in {town} on working days "
        "between {start}:00 and {end}:00. The monthly fee is {amount} euros, invoiced at the end of each month and payable "
        "within {days} days. The Supplier shall respond to a reported fault within {hours} hours and resolve it within "
        "two working days. Service levels will be reviewed by {person} and the Supplier's account manager every quarter. "
        "Either party may terminate this agreement with {notice} days' written notice. The agreement is governed by the "
        "laws of the country in which the Client is registered.",
    ),
    (
        "report",
        "Quarterly Report Summary. In the quarter ending 30 {month}, the {town} branch of {company} handled {orders} "
        "orders, an increase of {growth} percent on the same quarter last year. Revenue reached {amount} euros, while "
        "operating costs rose by {cost} percent because of higher energy prices. Customer complaints fell to {complaints}, "
        "and the average delivery time improved to {days} days. The branch hired {hires} new staff and opened a second "
        "loading bay on {street}. For the next quarter, the branch plans to reduce waste and to introduce electric "
        "delivery vans on the routes to {town2}.",
    ),
    (
        "incident",
        "Incident Report. On {day}, {date} {month}, at about {start}:30, a delivery vehicle of {company} struck a "
        "bollard while reversing into the loading area on {street} in {town}. No one was injured. The vehicle's rear "
        "bumper and the bollard were damaged, and the area was closed for {hours} hours while the damage was assessed. "
        "The driver reported the incident to {person} immediately and completed the incident form. The investigation "
        "found that the reversing camera was not working. All vehicles will be checked by {date2} {month}, and drivers "
        "will receive refresher training on reversing procedures.",
    ),
    (
        "training",
        "Training Announcement. {company} will hold a {course} course for all team leaders on {day}, {date} {month}, in "
        "the training room at {number} {street}, {town}. The course starts at {start}:00 and ends at {end}:00, with a "
        "lunch break at 12:30. Participants will learn how to plan tasks, assess risks and give clear instructions to "
        "their teams. There are {places} places available, allocated in the order in which registrations arrive. To "
        "register, send an email to {person} by {date2} {month}. Participants who complete the course will receive a "
        "certificate.",
    ),
    (
        "procurement",
        "Contract Award Notice. Following an open procedure, the City of {town} has awarded the contract for the supply "
        "of {goods} to {company}. The contract runs for {years} years from 1 {month} and has a total value of {amount} "
        "euros excluding value added tax. {tenders} tenders were received, of which {valid} met the requirements. The "
        "award was based on price (60 percent) and quality of service (40 percent). Unsuccessful bidders may request a "
        "debriefing within {notice} days of this notice. Any review proceedings must be brought before the procurement "
        "review board. Contact: {person}, procurement office.",
    ),
]
WORKS = [
    "Scheduled Maintenance",
    "Road Resurfacing",
    "Water Main Repairs",
    "Street Lighting Upgrade",
    "Gas Pipe Replacement",
    "Pavement Renewal",
    "Drainage Works",
    "Tree Pruning",
]
LEAVES = ["Annual Leave", "Study Leave", "Parental Leave", "Volunteering Leave"]
SERVICES = ["office cleaning", "IT support", "security guarding", "building maintenance", "catering"]
COURSES = ["leadership", "first aid", "fire safety", "project planning", "customer service"]


def _fill(template: str, rng: random.Random) -> dict[str, str]:
    people = rng.sample(PEOPLE, 4)
    towns = rng.sample(TOWNS, 2)
    days = rng.sample(DAYS, 2)
    start = rng.randint(7, 10)
    work = rng.choice(WORKS)
    leave = rng.choice(LEAVES)
    values = {
        "work": work,
        "work_lower": work.lower(),
        "owner": rng.choice(
            ["municipal water utility", "city council", "county roads department", "regional gas network"]
        ),
        "street": rng.choice(STREETS),
        "town": towns[0],
        "town2": towns[1],
        "day": days[0],
        "day2": days[1],
        "date": str(rng.randint(2, 27)),
        "date2": str(rng.randint(2, 27)),
        "month": rng.choice(MONTHS),
        "start": str(start),
        "end": str(start + rng.randint(4, 8)),
        "phone": f"{rng.randint(100, 999):04d}",
        "clause": str(rng.randint(4, 19)),
        "company": rng.choice(COMPANIES),
        "goods": rng.choice(GOODS),
        "days": str(rng.choice([10, 14, 21, 30, 45])),
        "penalty": str(rng.choice([0.5, 1, 2])),
        "cap": str(rng.choice([10, 15, 20])),
        "amount": f"{rng.randint(12, 980) * 1000:,}",
        "person": people[0],
        "person2": people[1],
        "person3": people[2],
        "person4": people[3],
        "leave": leave,
        "leave_lower": leave.lower(),
        "weeks": str(rng.randint(2, 6)),
        "notice": str(rng.choice([14, 30, 60, 90])),
        "carry": str(rng.choice([5, 10, 15])),
        "height": str(rng.choice([2, 3])),
        "wind": str(rng.choice([40, 50, 60])),
        "review": str(rng.choice([6, 12, 24])),
        "number": str(rng.randint(2, 180)),
        "years": str(rng.randint(2, 10)),
        "rent": f"{rng.randint(8, 90) * 100:,}",
        "deposit": str(rng.choice([2, 3, 6])),
        "service": rng.choice(SERVICES),
        "hours": str(rng.choice([2, 4, 8])),
        "orders": f"{rng.randint(2, 90) * 100:,}",
        "growth": str(rng.randint(2, 25)),
        "cost": str(rng.randint(2, 15)),
        "complaints": str(rng.randint(3, 60)),
        "hires": str(rng.randint(2, 20)),
        "course": rng.choice(COURSES),
        "places": str(rng.choice([12, 16, 20, 24])),
        "tenders": str(rng.randint(4, 12)),
        "valid": str(rng.randint(2, 4)),
    }
    return values


def _edit(document: str, values: dict[str, str], rng: random.Random) -> str:
    """An instruction to change one value that occurs once in the document."""
    candidates = [k for k, v in values.items() if len(v) > 2 and document.count(v) == 1 and not v.isdigit()]
    key = rng.choice(candidates)
    old = values[key]
    pool = {
        "town": TOWNS,
        "town2": TOWNS,
        "street": STREETS,
        "company": COMPANIES,
        "goods": GOODS,
        "person": PEOPLE,
        "month": MONTHS,
        "day": DAYS,
    }.get(key)
    new = rng.choice([p for p in pool if p != old]) if pool else f"{old} (revised)"
    return f'Rewrite the document below, changing "{old}" to "{new}". Keep every other word exactly as it is.'


def _typos(document: str, rng: random.Random, count: int = 4) -> str:
    words = document.split(" ")
    long = [i for i, w in enumerate(words) if w.isalpha() and len(w) > 5]
    for i in rng.sample(long, min(count, len(long))):
        w = words[i]
        j = rng.randint(1, len(w) - 3)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    return " ".join(words)


def main() -> None:
    rng = random.Random(SEED)
    generated: list[tuple[str, str, dict[str, str]]] = []
    seen = set()
    while len(generated) < GENERATED:
        kind, template = TEMPLATES[len(generated) % len(TEMPLATES)]
        values = _fill(template, rng)
        document = template.format(**values)
        if document in seen:
            continue
        seen.add(document)
        generated.append((f"{kind}-{len(generated):03d}", document, values))
    for name, build in (
        ("doc_edit", lambda d, v: f"{_edit(d, v, rng)}\n\n{d}"),
        (
            "doc_proofread",
            lambda d, v: (
                "Correct the spelling mistakes in the text below. Return the whole corrected "
                f"text and nothing else.\n\n{_typos(d, rng)}"
            ),
        ),
    ):
        path = ROOT / f"{name}.jsonl"
        kept = path.read_text(encoding="utf-8").splitlines()[:HAND_WRITTEN]
        rows = [
            json.dumps({"id": key, "prompt": build(doc, values)}, ensure_ascii=False) for key, doc, values in generated
        ]
        path.write_text("\n".join([*kept, *rows]) + "\n", encoding="utf-8")
        print(f"{path}: {len(kept)} hand-written + {len(rows)} generated prompts")


if __name__ == "__main__":
    main()
