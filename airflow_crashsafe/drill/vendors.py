"""The drill's payment vendors: real local HTTP servers that hold each booking until released.

Both vendors of :mod:`airflow_crashsafe.testing.vendor` run in the drill's own process on free
127.0.0.1 ports; tasks reach them through ``AIRFLOW_CONN_CRASHSAFE_VENDOR_*`` connections. Each
booking is held until the drill releases it, once the restarted scheduler has reset the pushes, so
every push is in flight when the scheduler dies and still in flight when the restarted scheduler
resets it — whatever the machine's speed. A held request whose caller was killed is still booked on
release: the worst case of a real vendor, which acts on what reached it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.drill.facts import PaymentFact
from airflow_crashsafe.testing.vendor import KeyHonouringVendor, NaiveVendor, Received

__all__ = ["VENDOR_CONN_IDS", "DrillVendors", "payment_facts"]

#: Vendor name -> Airflow connection id (the example DAGs use the same ids).
VENDOR_CONN_IDS = {"naive": "crashsafe_vendor_naive", "keyed": "crashsafe_vendor_keyed"}
MAX_HOLD_SECONDS = 900.0  # a drill that never releases must not leave threads behind forever


class _HeldNaive(NaiveVendor):
    """Books every request, once the drill releases bookings."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def _book(self, request: Received) -> dict[str, Any]:
        self.release.wait(MAX_HOLD_SECONDS)
        return super()._book(request)


class _HeldKeyed(KeyHonouringVendor):
    """Honours idempotency keys; the first request of a key is held (repeats get 409 meanwhile)."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def _book(self, request: Received) -> dict[str, Any]:
        self.release.wait(MAX_HOLD_SECONDS)
        return super()._book(request)


@dataclass
class DrillVendors:
    """The two vendors and their shared release; ``env()`` gives the tasks their connections."""

    release: threading.Event
    naive: _HeldNaive
    keyed: _HeldKeyed

    @classmethod
    def start(cls) -> DrillVendors:
        release = threading.Event()
        vendors = cls(release, _HeldNaive(release), _HeldKeyed(release))
        vendors.naive.start()
        vendors.keyed.start()
        return vendors

    def by_name(self) -> dict[str, NaiveVendor | KeyHonouringVendor]:
        return {"naive": self.naive, "keyed": self.keyed}

    def env(self) -> dict[str, str]:
        """``AIRFLOW_CONN_*`` variables: connections reach task processes without the metadata DB."""
        return {
            f"AIRFLOW_CONN_{conn.upper()}": self.by_name()[name].url for name, conn in VENDOR_CONN_IDS.items()
        }

    def received_from(self, dag_id: str) -> int:
        return sum(_dag_of(r) == dag_id for v in self.by_name().values() for r in list(v.received))

    def stop(self) -> None:
        """Release held bookings (so handler threads end) and shut both servers down."""
        self.release.set()
        for vendor in self.by_name().values():
            vendor.stop()


def _body(request: Received) -> dict[str, Any]:
    try:
        body = request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _dag_of(request: Received) -> str | None:
    return _body(request).get("dag_id")


def payment_facts(
    vendors: DrillVendors, dag_id: str, intended: list[tuple[str, str, str]]
) -> list[PaymentFact]:
    """One fact per intended payment ``(vendor, payment, task_id)`` of ``dag_id``, as its vendor saw it."""
    facts = []
    by_name = vendors.by_name()
    for vendor_name, payment, task_id in intended:
        vendor = by_name[vendor_name]

        def mine(r: Received, payment: str = payment) -> bool:
            body = _body(r)
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
