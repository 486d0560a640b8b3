"""Capability: payments. Each intended payment pushed to a vendor, and how often the vendor booked it.

Per DAG, every push task sends one payment to each vendor of :mod:`drill.vendors` while the
loads run; the crash resets the pushes in flight. The invariant is "never two payments for one
intended", not "every push succeeded": a push to a vendor that ignores idempotency keys stops with
``OutcomeUnknown`` when an earlier attempt may have paid, and a person decides (see
docs/design.md, "Ledger").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.testing.vendor import Received
from drill.attempts import STOPPED_FOR_PERSON, TaskFact, stopped_for_person
from drill.dags import DAGS, PUSH_PREFIX
from drill.vendors import VENDOR_NAMES, DrillVendors, body_of

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession
    from drill.writes import DagFacts

__all__ = [
    "PaymentFact",
    "collect",
    "held",
    "invariants",
    "payment_facts",
    "payment_invariants",
    "payment_rows",
    "payments_from_json",
    "rows",
    "section",
]


@dataclass
class PaymentFact:
    """One intended payment (one push task) and what its vendor saw of it."""

    vendor: str
    payment: str
    task_id: str
    #: Requests that reached the vendor for this payment (repeats under one key included).
    received: int
    #: Payments the vendor booked for it: more than one is a double payment.
    booked: int
    #: Distinct idempotency keys those requests carried (0: none).
    keys: int
    intended: int = 1


def payments_from_json(raw: dict[str, Any]) -> dict[str, list[PaymentFact]]:
    return {side: [PaymentFact(**p) for p in facts] for side, facts in raw.items()}


def payment_facts(
    vendors: DrillVendors, dag_id: str, intended: list[tuple[str, str, str]]
) -> list[PaymentFact]:
    """One fact per intended payment ``(vendor, payment, task_id)`` of ``dag_id``, as its vendor saw it."""
    facts = []
    by_name = vendors.by_name()
    for vendor_name, payment, task_id in intended:
        vendor = by_name[vendor_name]

        def mine(r: Received, payment: str = payment) -> bool:
            body = body_of(r)
            return body.get("dag_id") == dag_id and body.get("payment") == payment

        received = [r for r in list(vendor.received) if mine(r)]
        keys = {r.headers.get(vendor.key_header) for r in received} - {None}
        facts.append(
            PaymentFact(
                vendor=vendor_name,
                payment=payment,
                task_id=task_id,
                received=len(received),
                booked=sum(mine(r) for r in list(vendor.booked)),
                keys=len(keys),
            )
        )
    return facts


def collect(session: DrillSession, facts: DrillFacts) -> None:
    """Per side, every intended payment as its vendor saw it (nothing when no payment was pushed)."""
    count = session.args.payments
    if session.vendors is None or not count:
        return
    intended = [
        (v, f"p{i:02d}", f"{PUSH_PREFIX}{v}_p{i:02d}") for v in VENDOR_NAMES for i in range(1, count + 1)
    ]
    for side in session.keys:
        facts.payments[side] = payment_facts(session.vendors, DAGS[side][0], intended)


def _booked(facts: list[PaymentFact]) -> str:
    booked = sum(p.booked for p in facts)
    twice = sum(p.booked > p.intended for p in facts)
    missing = sum(p.booked < p.intended for p in facts)
    text = str(booked)
    if twice:
        text += (
            f" ({twice} paid twice)"
            if all(p.booked <= 2 for p in facts)
            else f" ({twice} paid more than once)"
        )
    if missing:
        text += f" ({missing} not booked)"
    return text


def _ended(task: TaskFact | None) -> str:
    if task is None:
        return "?"
    return STOPPED_FOR_PERSON if stopped_for_person(task) else str(task.final_state)


def payment_rows(payments: list[PaymentFact], dag: DagFacts | None) -> dict[str, str]:
    """Rows per vendor: intended, requests received (and keys), booked, and how the pushes ended."""
    found: dict[str, str] = {}
    by_task = {t.task_id: t for t in dag.tasks} if dag is not None else {}
    for vendor in dict.fromkeys(p.vendor for p in payments):
        mine = [p for p in payments if p.vendor == vendor]
        keys = sum(p.keys for p in mine)
        received = str(sum(p.received for p in mine))
        received += f" under {keys} keys" if keys else " (no key)"
        found[f"{vendor} vendor: payments intended"] = str(sum(p.intended for p in mine))
        found[f"{vendor} vendor: requests received"] = received
        found[f"{vendor} vendor: payments booked"] = _booked(mine)
        ends: dict[str, int] = {}
        for p in mine:
            state = _ended(by_task.get(p.task_id))
            ends[state] = ends.get(state, 0) + 1
        found[f"{vendor} vendor: pushes ended"] = ", ".join(f"{n} {s}" for s, n in ends.items())
    return found


def payment_invariants(payments: list[PaymentFact]) -> list[str]:
    """Crashsafe's payment promise: booked <= intended for every payment."""
    return [
        f"{p.vendor} vendor booked payment {p.payment} {p.booked} times "
        f"for {p.intended} intended ({p.task_id})"
        for p in payments
        if p.booked > p.intended
    ]


def rows(facts: DrillFacts, side: str) -> dict[str, str]:
    return payment_rows(facts.payments.get(side, []), facts.dag(side))


def section(facts: DrillFacts) -> list[str]:
    return []


def invariants(facts: DrillFacts) -> list[str]:
    return payment_invariants(facts.payments.get("crashsafe", []))


def held(facts: DrillFacts) -> list[str]:
    return ["no payment booked twice,"] if facts.payments.get("crashsafe") else []
