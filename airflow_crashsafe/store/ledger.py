"""The idempotency ledger's SQL (docs/design.md, "Ledger"): intent before send, outcome after.

A row per idempotency key. ``state`` moves ``intent`` → ``succeeded`` | ``failed`` | ``conflict`` |
``unknown``. A row left in ``intent`` or ``unknown`` by another attempt means that attempt may have
sent the call: its outcome is unknown. The decision about a key is taken under the row's lock, in
the same transaction that checks the attempt's fencing token, so two overlapping attempts can
never both be told to send for the first time.

``intent_at`` is the holder's last sign of life: set when an attempt records (or takes over) the
intent and again before each re-send, so a new attempt can tell a call still in flight from one
whose caller died (:func:`calls.begin_call <airflow_crashsafe.effects.calls.begin_call>` awaits the
former).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import fences
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.fences import FENCE_TABLE
from airflow_crashsafe.store.prepared import fetch_text
from airflow_crashsafe.store.values import in_list

__all__ = [
    "LEDGER_STATES",
    "LedgerEntry",
    "claim",
    "claim_new",
    "get_entry",
    "in_flight",
    "latest_version",
    "list_entries",
    "page_entries",
    "prune",
    "prune_fences",
    "record_outcome",
    "record_outcome_and_commit",
    "token_is_newest",
]

LEDGER_STATES = ("intent", "succeeded", "failed", "conflict", "unknown")

_FIELDS = (
    "idem_key",
    "dag_id",
    "task_id",
    "map_index",
    "slot_partition",
    "target",
    "version",
    "fingerprint",
    "request",
    "state",
    "send_count",
    "replay_count",
    "run_id",
    "try_number",
    "ti_id",
    "hostname",
    "pid",
    "token",
    "response_status",
    "result",
    "error",
    "intent_at",
    "outcome_at",
)
_COLUMNS = ", ".join(_FIELDS)
_SELECT = f"SELECT {_COLUMNS} FROM crashsafe_ledger"


@dataclass(frozen=True)
class LedgerEntry:
    """One idempotency key's record, as read from the store."""

    idem_key: str
    dag_id: str
    task_id: str
    map_index: int
    slot_partition: str
    target: str
    version: int
    fingerprint: str
    request: dict[str, Any]
    state: str
    send_count: int
    replay_count: int
    run_id: str | None
    try_number: int | None
    ti_id: str | None
    hostname: str | None
    pid: int | None
    token: int | None
    response_status: int | None
    result: Any
    error: str | None
    intent_at: str
    outcome_at: str | None

    def describe_attempt(self) -> str:
        return f"try {self.try_number} (ti {self.ti_id}, {self.hostname} pid {self.pid})"


def _entry(row: tuple[Any, ...]) -> LedgerEntry:
    values = dict(zip(_FIELDS, row, strict=True))
    values["request"] = json.loads(values["request"] or "{}")
    values["result"] = None if values["result"] is None else json.loads(values["result"])
    for stamp in ("intent_at", "outcome_at"):
        if values[stamp] is not None:
            values[stamp] = str(values[stamp])
    return LedgerEntry(**values)


def token_is_newest(db: Db, slot: Slot, target: str, token: int) -> bool:
    """Lock the slot's fence row and say whether ``token`` is still the newest issued."""
    lock = " FOR UPDATE" if db.dialect.is_postgres else ""
    row = db.execute(
        f"SELECT issued_token FROM {FENCE_TABLE} WHERE {fences.SLOT_MATCH}{lock}",
        fences.slot_params(slot, target),
    ).fetchone()
    return row is not None and int(row[0]) == token


def get_entry(db: Db, key: str, *, lock: bool = False) -> LedgerEntry | None:
    suffix = " FOR UPDATE" if lock and db.dialect.is_postgres else ""
    row = db.execute(f"{_SELECT} WHERE idem_key = %(key)s{suffix}", {"key": key}).fetchone()
    return None if row is None else _entry(row)


def _attempt_params(attempt: Attempt, token: int | None) -> dict[str, Any]:
    return {
        "run_id": attempt.run_id,
        "try_number": attempt.try_number,
        "ti_id": attempt.ti_id,
        "hostname": attempt.hostname,
        "pid": attempt.pid,
        "token": token,
    }


def claim(
    db: Db,
    *,
    before: LedgerEntry | None,
    key: str,
    slot: Slot,
    target: str,
    version: int,
    fingerprint: str,
    request: dict[str, Any],
    attempt: Attempt,
    token: int | None,
) -> LedgerEntry:
    """Inside the caller's transaction, after ``get_entry(lock=True)`` gave ``before``: take the key.

    Returns the row as it is now. A row whose fingerprint differs, or whose call succeeded, is
    returned untouched for the caller to refuse or replay; any other row is taken over by this
    attempt as ``intent`` (a new key is inserted).
    """
    params = _attempt_params(attempt, token) | {"key": key, "request": json.dumps(request, default=str)}
    if before is None:
        db.execute(
            "INSERT INTO crashsafe_ledger (idem_key, dag_id, task_id, map_index, slot_partition, target,"
            " version, fingerprint, request, state, run_id, try_number, ti_id, hostname, pid, token)"
            " VALUES (%(key)s, %(dag_id)s, %(task_id)s, %(map_index)s, %(slot_partition)s, %(target)s,"
            " %(version)s, %(fingerprint)s, %(request)s, 'intent', %(run_id)s, %(try_number)s,"
            " %(ti_id)s, %(hostname)s, %(pid)s, %(token)s)",
            params | fences.slot_params(slot, target) | {"version": version, "fingerprint": fingerprint},
        )
    elif before.fingerprint == fingerprint and before.state != "succeeded":
        db.execute(
            "UPDATE crashsafe_ledger SET state = 'intent', run_id = %(run_id)s,"
            " try_number = %(try_number)s, ti_id = %(ti_id)s, hostname = %(hostname)s, pid = %(pid)s,"
            f" token = %(token)s, error = NULL, intent_at = {_now(db)} WHERE idem_key = %(key)s",
            params,
        )
    else:
        return before
    after = get_entry(db, key)
    assert after is not None
    return after


_INSERT_INTENT = """
INSERT INTO crashsafe_ledger (idem_key, dag_id, task_id, map_index, slot_partition, target, version,
    fingerprint, request, state, send_count, run_id, try_number, ti_id, hostname, pid, token)
SELECT %(key)s, %(dag_id)s, %(task_id)s, %(map_index)s, %(slot_partition)s, %(call_target)s,
    %(version)s, %(fingerprint)s, %(request)s, 'intent', 1, %(run_id)s, %(try_number)s, %(ti_id)s,
    %(hostname)s, %(pid)s, {token}
{source}
ON CONFLICT (idem_key) DO NOTHING
RETURNING intent_at"""

# PostgreSQL: the fence token is issued (fences.py's rule, verbatim) and a never-seen key claimed
# with it in one statement. No row back: no token was issued; (token, NULL): the key exists.
# Only the claim's time comes back (the caller knows everything else it inserted), as text for
# store/prepared.py.
_ISSUE_AND_CLAIM = f"""
WITH issued AS ({fences.ISSUE_STATEMENT}),
claimed AS ({_INSERT_INTENT.format(token="issued.issued_token", source="FROM issued")})
SELECT issued.issued_token::text, claimed.intent_at::text FROM issued LEFT JOIN claimed ON TRUE"""

# SQLite (no data-modifying CTEs): the token was issued just before; insert only while it is newest.
_CLAIM_WITH_TOKEN = _INSERT_INTENT.format(
    token="%(token)s",
    source=f"WHERE EXISTS (SELECT 1 FROM {FENCE_TABLE} WHERE dag_id = %(dag_id)s"
    " AND task_id = %(task_id)s AND map_index = %(map_index)s AND slot_partition = %(slot_partition)s"
    " AND target = %(target)s AND issued_token = %(token)s)",
)


def claim_new(
    db: Db,
    *,
    key: str,
    slot: Slot,
    target: str,
    fence_target: str,
    version: int,
    fingerprint: str,
    request: dict[str, Any],
    attempt: Attempt,
) -> tuple[fences.Issue, LedgerEntry | None]:
    """The common case in one round trip: issue the attempt's token and claim a never-seen key.

    Autocommitted. Records intent with its first send already counted (the caller sends right
    after) and returns it; the entry is None when no token was issued (the :class:`Issue` says
    why) or the key already exists: the caller then takes the locked path (:func:`claim`).
    Claiming without the fence row's lock is safe: the ledger row is the unit of mutual exclusion,
    and a newer attempt that issues its token a moment later finds this intent in flight, exactly
    as if it had started after this claim.
    """
    params = (
        fences.slot_params(slot, fence_target)
        | _attempt_params(attempt, None)
        | {
            "key": key,
            "call_target": target,
            "version": version,
            "fingerprint": fingerprint,
            "request": json.dumps(request, default=str),
            "clear_number": attempt.clear_number,
        }
    )
    if db.dialect.is_postgres:
        rows = _issue_and_claim(db, params)
        if not rows:
            return _why_not_issued(db, slot, fence_target, attempt), None
        issued, intent_at = rows[0]
        assert issued is not None  # the issued CTE's token is never NULL
        token = int(issued)
    else:
        issue = fences.issue_token(db, slot, fence_target, attempt)
        if issue.token is None:
            return issue, None
        token = issue.token
        claimed = db.fetch_alone(_CLAIM_WITH_TOKEN, params | {"token": token})
        intent_at = claimed[0][0] if claimed else None
    if intent_at is None:
        return fences.Issue(token=token), None
    entry = LedgerEntry(
        idem_key=key,
        **fences.slot_params(slot, target),
        version=version,
        fingerprint=fingerprint,
        request=request,
        state="intent",
        send_count=1,
        replay_count=0,
        **_attempt_params(attempt, token),
        response_status=None,
        result=None,
        error=None,
        intent_at=str(intent_at),
        outcome_at=None,
    )
    return fences.Issue(token=token), entry


def _issue_and_claim(db: Db, params: dict[str, Any]) -> list[tuple[str | None, ...]]:
    try:
        return fetch_text(db, _ISSUE_AND_CLAIM, params)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != "42P01":  # undefined table: the fence table is lazy
            raise
        fences.ensure_fence_table(db)
        return fetch_text(db, _ISSUE_AND_CLAIM, params)


def _why_not_issued(db: Db, slot: Slot, fence_target: str, attempt: Attempt) -> fences.Issue:
    """No token: the slot is committed in this clear generation, or a newer try holds it."""
    with db.autocommit():
        state = fences.read_fence(db, slot, fence_target)
    assert state is not None  # no token issued means the fence row exists
    if state.committed is not None and state.issued_try <= attempt.try_number:
        return fences.Issue(token=None, already_committed=state.committed)
    return fences.Issue(token=None, newer=state)


def record_outcome_and_commit(
    db: Db,
    key: str,
    *,
    fence: tuple[str, dict[str, Any]] | None,
    **outcome: Any,
) -> None:
    """Record the outcome and, for a success, the fence commit.

    ``fence`` is :func:`airflow_crashsafe.store.fences.commit_statement`'s pair, or None.
    PostgreSQL: one autocommitted statement (the caller holds no transaction open). SQLite: two,
    inside the caller's transaction.
    """
    update, params = _outcome_statement(key, **outcome)
    if not db.dialect.is_postgres:
        db.execute(update, params)
        if fence is not None:
            db.execute(*fence)
        return
    if fence is None:
        fetch_text(db, update, params)
        return
    fence_sql, fence_params = fence
    fetch_text(
        db,
        f"WITH outcome AS ({update} RETURNING 1) {fence_sql} AND EXISTS (SELECT 1 FROM outcome)",
        params | fence_params,
    )


def mark_sending(db: Db, key: str) -> None:
    """Count one more send of the key just before the request leaves; also a sign of life."""
    db.execute(
        f"UPDATE crashsafe_ledger SET send_count = send_count + 1, intent_at = {_now(db)}"
        " WHERE idem_key = %(key)s",
        {"key": key},
    )


def _now(db: Db) -> str:
    """The current time in the format of the dialect's ``intent_at`` default (SQLite stores text)."""
    return "CURRENT_TIMESTAMP" if db.dialect.is_postgres else _SQLITE_NOW


_SQLITE_NOW = "strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now')"


#: The holder's liveness beacon: the audit's ``last_seen_at`` of the very execution (try, host,
#: pid) that holds the key, refreshed every few seconds while its process runs, on any host.
_BEACON = """(SELECT max(a.last_seen_at) FROM crashsafe_attempts a
    WHERE a.dag_id = crashsafe_ledger.dag_id AND a.task_id = crashsafe_ledger.task_id
    AND a.map_index = crashsafe_ledger.map_index AND a.run_id = crashsafe_ledger.run_id
    AND a.try_number = crashsafe_ledger.try_number AND a.hostname = crashsafe_ledger.hostname
    AND a.pid = crashsafe_ledger.pid)"""


def in_flight(db: Db, key: str, *, lock: bool = False) -> tuple[LedgerEntry, float] | None:
    """The key's row and the seconds since its holder's last sign of life, by the store's clock.

    The last sign of life is the later of the intent (refreshed at every send) and the holder's
    liveness beacon: a holder on another host is judged by these alone, never by its pid, and a
    call that takes longer than the lease does not make a live holder look dead.
    """
    age = (
        f"EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP - GREATEST(intent_at, {_BEACON})))"
        if db.dialect.is_postgres
        else f"(julianday('now') - max(julianday(intent_at), coalesce(julianday({_BEACON}), 0))) * 86400.0"
    )
    suffix = " FOR UPDATE" if lock and db.dialect.is_postgres else ""
    row = db.execute(
        f"SELECT {_COLUMNS}, {age} FROM crashsafe_ledger WHERE idem_key = %(key)s{suffix}",
        {"key": key},
    ).fetchone()
    return None if row is None else (_entry(row[:-1]), float(row[-1]))


def latest_version(db: Db, slot: Slot, target: str) -> int | None:
    """The highest ``version`` under which ``target`` was called in ``slot``, None if never."""
    row = db.execute(
        f"SELECT max(version) FROM crashsafe_ledger WHERE {fences.SLOT_MATCH}",
        fences.slot_params(slot, target),
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def mark_replayed(db: Db, key: str) -> None:
    db.execute(
        "UPDATE crashsafe_ledger SET replay_count = replay_count + 1 WHERE idem_key = %(key)s", {"key": key}
    )


def record_outcome(
    db: Db,
    key: str,
    *,
    state: str,
    response_status: int | None,
    result: Any,
    error: str | None,
) -> None:
    """Inside the caller's transaction: what the call came to."""
    db.execute(
        *_outcome_statement(key, state=state, response_status=response_status, result=result, error=error)
    )


def _outcome_statement(
    key: str, *, state: str, response_status: int | None, result: Any, error: str | None
) -> tuple[str, dict[str, Any]]:
    if state not in LEDGER_STATES:
        raise ValueError(f"unknown ledger state {state!r}")
    return (
        "UPDATE crashsafe_ledger SET state = %(state)s, response_status = %(status)s,"
        " result = %(result)s, error = %(error)s, outcome_at = CURRENT_TIMESTAMP"
        " WHERE idem_key = %(key)s",
        {
            "key": key,
            "state": state,
            "status": response_status,
            "result": None if result is None else json.dumps(result, default=str),
            "error": error,
        },
    )


def list_entries(
    db: Db, *, dag_id: str | None = None, key: str | None = None, limit: int = 200
) -> list[LedgerEntry]:
    where: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    if dag_id is not None:
        where.append("dag_id = %(dag_id)s")
        params["dag_id"] = dag_id
    if key is not None:
        where.append("idem_key = %(key)s")
        params["key"] = key
    sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "")
    rows = db.execute(sql + " ORDER BY intent_at DESC LIMIT %(limit)s", params).fetchall()
    return [_entry(row) for row in rows]


def page_entries(
    db: Db, *, dag_ids: Sequence[str], state: str | None = None, limit: int = 500
) -> tuple[int, list[LedgerEntry]]:
    """``(total, newest intent first up to limit)`` entries of the DAGs ``dag_ids``, of one state.

    Filter, count, order and limit in one indexed query each (``crashsafe_ledger_state`` and
    ``crashsafe_ledger_dag_intent``): an ``unknown`` key behind any number of newer successes is
    found and counted.
    """
    if not dag_ids:
        return 0, []
    names, params = in_list("d", dag_ids)
    params["limit"] = limit
    where = f"dag_id IN ({names})"
    if state is not None:
        where += " AND state = %(state)s"
        params["state"] = state
    total = int(db.execute(f"SELECT count(*) FROM crashsafe_ledger WHERE {where}", params).fetchone()[0])
    rows = db.execute(f"{_SELECT} WHERE {where} ORDER BY intent_at DESC LIMIT %(limit)s", params).fetchall()
    return total, [_entry(row) for row in rows]


def prune(db: Db, *, older_than: datetime) -> int:
    """Delete entries whose intent is older than ``older_than``; returns how many."""
    stamp: Any = older_than
    if not db.dialect.is_postgres:
        stamp = older_than.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    cursor = db.execute("DELETE FROM crashsafe_ledger WHERE intent_at < %(stamp)s", {"stamp": stamp})
    return int(cursor.rowcount)


_PRUNE_FENCES = f"""
DELETE FROM {FENCE_TABLE}
WHERE target LIKE 'ledger:%%' AND issued_at < %(stamp)s
  AND NOT EXISTS (
    SELECT 1 FROM crashsafe_ledger l
    WHERE l.dag_id = {FENCE_TABLE}.dag_id AND l.task_id = {FENCE_TABLE}.task_id
      AND l.map_index = {FENCE_TABLE}.map_index AND l.slot_partition = {FENCE_TABLE}.slot_partition
      AND 'ledger:' || l.target = {FENCE_TABLE}.target)"""


def prune_fences(db: Db, *, older_than: datetime) -> int:
    """Delete the fence rows of calls no longer in the ledger, last issued before ``older_than``.

    Each call's slot has a fence row in the store (target ``ledger:<target>``); without this they
    would outlive the entries :func:`prune` deletes. A row is kept while any entry of its slot and
    target remains. Returns how many were deleted (0 when no call ever took a token).
    """
    # SQLite's CURRENT_TIMESTAMP text, which the fence row's issued_at holds there.
    stamp: Any = older_than if db.dialect.is_postgres else older_than.strftime("%Y-%m-%d %H:%M:%S")
    if not fences.fence_table_exists(db):
        return 0
    return int(db.execute(_PRUNE_FENCES, {"stamp": stamp}).rowcount)
