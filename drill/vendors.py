"""The drill's payment vendors: real local HTTP servers that hold each booking until released.

Both vendors of :mod:`airflow_crashsafe.testing.vendor` run in the drill's own process on free
127.0.0.1 ports; tasks reach them through ``AIRFLOW_CONN_CRASHSAFE_VENDOR_*`` connections. Each
booking is held until the drill releases it, once the restarted scheduler has reset the pushes, so
every push is in flight when the scheduler dies and still in flight when the restarted scheduler
resets it — whatever the machine's speed. A held request whose caller was killed is still booked on
release: the worst case of a real vendor, which acts on what reached it. The key-honouring vendor
registers a key before it books, so a repeat under a held key is answered 409 meanwhile.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.testing.vendor import KeyHonouringVendor, NaiveVendor, Received

__all__ = ["VENDOR_CONN_IDS", "VENDOR_NAMES", "DrillVendors", "body_of"]

#: Vendor name -> Airflow connection id (the example DAGs use the same ids).
VENDOR_CONN_IDS = {"naive": "crashsafe_vendor_naive", "keyed": "crashsafe_vendor_keyed"}
VENDOR_NAMES = tuple(VENDOR_CONN_IDS)
MAX_HOLD_SECONDS = 900.0  # a drill that never releases must not leave threads behind forever


@dataclass
class DrillVendors:
    """The two vendors and their shared release; ``env()`` gives the tasks their connections."""

    release: threading.Event
    naive: NaiveVendor
    keyed: KeyHonouringVendor

    @classmethod
    def start(cls) -> DrillVendors:
        vendors = cls(threading.Event(), NaiveVendor(), KeyHonouringVendor())
        for vendor in vendors.by_name().values():
            vendor.on_book = vendors.hold
            vendor.start()
        return vendors

    def reset(self) -> None:
        """Forget every request and hold the next bookings again (a fleet drill runs several days)."""
        self.release = threading.Event()
        for vendor in self.by_name().values():
            vendor.received.clear()
            vendor.booked.clear()

    def hold(self, request: Received) -> None:
        """Keep a booking waiting until :attr:`release` is set."""
        self.release.wait(MAX_HOLD_SECONDS)

    def by_name(self) -> dict[str, NaiveVendor | KeyHonouringVendor]:
        return {"naive": self.naive, "keyed": self.keyed}

    def env(self) -> dict[str, str]:
        """``AIRFLOW_CONN_*`` variables: connections reach task processes without the metadata DB."""
        return {
            f"AIRFLOW_CONN_{conn.upper()}": self.by_name()[name].url for name, conn in VENDOR_CONN_IDS.items()
        }

    def received_from(self, dag_id: str) -> int:
        return sum(
            body_of(r).get("dag_id") == dag_id for v in self.by_name().values() for r in list(v.received)
        )

    def stop(self) -> None:
        """Release held bookings (so handler threads end) and shut both servers down."""
        self.release.set()
        for vendor in self.by_name().values():
            vendor.stop()


def body_of(request: Received) -> dict[str, Any]:
    """The JSON object a push sent (``{}`` if it sent none)."""
    try:
        body = request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
