"""The ledger re-checks an attempt's fencing token under the row lock, just before it decides to send.

A key already in the ledger (an earlier try's call that failed) is decided in a transaction of its
own, after the token was issued. Attempt A takes its token and is held there; attempt B, a newer
try, takes a newer token; then A resumes. Only the re-check stands between A and a second request
to the vendor: A must be fenced out having sent nothing, and B's call is the one the vendor gets.
"""

from __future__ import annotations

import pytest

from airflow_crashsafe.errors import ExternalCallFailed, FencedOut
from airflow_crashsafe.store import ledger
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import NaiveVendor
from tests.integration.effects.test_http_operator import ctx, push
from tests.support.stepping import Held

pytestmark = pytest.mark.integration


def _senders(vendor: NaiveVendor) -> list[str]:
    return [request.headers["X-Attempt"] for request in vendor.received]


def test_an_attempt_outranked_after_taking_its_token_is_fenced_out_and_sends_nothing(
    store: Store, naive_vendor: NaiveVendor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holds a token, B takes a newer one, A resumes: A gets FencedOut, only B's request is sent."""
    naive_vendor.scripted_statuses = [400]  # try 1's call fails for good: its key stays in the ledger
    with pytest.raises(ExternalCallFailed):
        push(headers={"X-Attempt": "try1"}).execute(ctx(1))
    held = Held()
    monkeypatch.setattr(ledger, "claim_new", held.after(ledger.claim_new))

    held.start("A", lambda: push(headers={"X-Attempt": "A"}).execute(ctx(2)))
    a_issue, a_fresh = held.reached("A")
    held.start("B", lambda: push(headers={"X-Attempt": "B"}).execute(ctx(3)))
    b_issue, b_fresh = held.reached("B")
    assert (a_fresh, b_fresh) == (None, None)  # the key exists: both go on to the locked decision
    assert b_issue.token > a_issue.token

    fenced = held.finish("A")
    assert isinstance(fenced, FencedOut), fenced
    assert "Nothing was sent" in str(fenced)
    assert _senders(naive_vendor) == ["try1"]

    result = held.finish("B")
    assert not isinstance(result, Exception), result
    assert _senders(naive_vendor) == ["try1", "B"]
    assert naive_vendor.bookings == 1
    with store.transaction() as db:
        (entry,) = ledger.list_entries(db)
    assert (entry.state, entry.try_number, entry.token) == ("succeeded", 3, b_issue.token)
