"""The install smoke test's DAG, and its runner: one fenced write and one ledgered call, each retried.

``distributions/smoke.py`` copies this file into the dags folder of a fresh ``AIRFLOW_HOME`` whose
venv holds nothing of the checkout, only the built wheel and its locked dependencies, and runs it
with that venv's Python. As a script it starts what a user's deployment would have — a throwaway
PostgreSQL warehouse (``airflow_crashsafe.testing.postgres``) and a payment vendor that books every
request it gets (``airflow_crashsafe.testing.NaiveVendor``) — then ``dag.test()``s the DAG below.

Both tasks fail their first try *after* their work committed, as a worker lost between the commit
and reporting success does; Airflow retries them. The retry of the fenced write must skip the
committed partition (the warehouse counts the INSERT statements that reach the table: one), and the
retry of the call must return the recorded answer without a second request (the vendor: one
booking). The last line printed is JSON; exit 1 with ``smoke: <what>: <why>`` when a check fails.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_crashsafe.operators.http import IdempotentHttpOperator
from airflow_crashsafe.operators.sql import PartitionOverwriteOperator

RESULTS = Path(os.environ.get("AIRFLOW_HOME", ".")) / "smoke-results.jsonl"
DAY = "2024-01-02"


def _after_commit(task_id: str, context: Any, result: Any) -> Any:
    """Record what the try returned; fail try 1 as a worker lost right after the commit would."""
    try_number = context["ti"].try_number
    with RESULTS.open("a") as out:
        out.write(json.dumps({"task": task_id, "try": try_number, "result": result}, default=str) + "\n")
    if try_number == 1:
        raise RuntimeError("smoke: try 1 fails after its work committed; the retry must not redo it")
    return result


class LostAfterCommitOverwrite(PartitionOverwriteOperator):
    """PartitionOverwriteOperator whose first try fails after the fenced transaction committed."""

    def execute(self, context: Any) -> Any:
        return _after_commit(self.task_id, context, super().execute(context))


class LostAfterCallHttp(IdempotentHttpOperator):
    """IdempotentHttpOperator whose first try fails after the vendor answered and the ledger recorded it."""

    def execute(self, context: Any) -> Any:
        return _after_commit(self.task_id, context, super().execute(context))


with DAG(
    "crashsafe_smoke",
    schedule=None,
    start_date=datetime(2024, 1, 1, tzinfo=timezone.utc),
    default_args={"retries": 1, "retry_delay": timedelta(0)},
) as dag:
    LostAfterCommitOverwrite(
        task_id="overwrite",
        conn_id="warehouse",
        target_table="revenue",
        partition={"day": DAY},
        sql="SELECT %(day)s AS day, region, amount FROM (VALUES ('eu', 10), ('us', 20)) v(region, amount)",
        parameters={"day": DAY},
    )
    LostAfterCallHttp(
        task_id="pay",
        http_conn_id="vendor",
        endpoint="/payouts",
        json={"day": DAY, "amount_cents": 125_000},
        target="vendor-payout",
        target_honours_keys=False,  # NaiveVendor books every request: only the ledger keeps it to one
    )

WAREHOUSE = (
    "CREATE TABLE revenue (day text, region text, amount int)",
    f"INSERT INTO revenue VALUES ('2024-01-01', 'eu', 1), ('{DAY}', 'eu', 99), ('2024-01-03', 'eu', 3)",
    # Counts the INSERT statements that reach the table from now on, whoever sends them.
    "CREATE TABLE smoke_inserts (at timestamptz DEFAULT now())",
    "CREATE FUNCTION smoke_count() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN INSERT INTO smoke_inserts DEFAULT VALUES; RETURN NULL; END $$",
    "CREATE TRIGGER smoke_count AFTER INSERT ON revenue FOR EACH STATEMENT EXECUTE FUNCTION smoke_count()",
)
EXPECTED = [("2024-01-01", "eu", 1), (DAY, "eu", 10), (DAY, "us", 20), ("2024-01-03", "eu", 3)]


class SmokeFailed(Exception):
    """A check failed: ``what`` failed, and why."""


def _check(ok: bool, what: str, why: str) -> None:
    if not ok:
        raise SmokeFailed(f"{what}: {why}")


def _tries(task_id: str) -> list[dict[str, Any]]:
    lines = RESULTS.read_text().splitlines() if RESULTS.exists() else []
    return [entry for entry in map(json.loads, lines) if entry["task"] == task_id]


def _run() -> dict[str, Any]:
    import airflow
    import psycopg

    import airflow_crashsafe
    from airflow_crashsafe.testing import NaiveVendor, make_database, start_cluster

    installed = Path(airflow_crashsafe.__file__).resolve()
    _check(
        installed.is_relative_to(Path(sys.prefix).resolve()),
        "install",
        f"airflow_crashsafe is imported from {installed}, not from this venv ({sys.prefix})",
    )
    cluster = start_cluster()
    try:
        url = make_database(cluster.admin_url)
        with psycopg.connect(url, autocommit=True) as db:
            for statement in WAREHOUSE:
                db.execute(statement)
        with NaiveVendor() as vendor:
            os.environ["AIRFLOW_CONN_WAREHOUSE"] = url
            os.environ["AIRFLOW_CONN_VENDOR"] = vendor.url
            run = dag.test(logical_date=datetime(2024, 1, 2, tzinfo=timezone.utc))
            requests = [r for r in vendor.received if r.method == "POST"]
            bookings = vendor.bookings
        with psycopg.connect(url) as db:
            rows = db.execute("SELECT day, region, amount FROM revenue ORDER BY day, region").fetchall()
            (inserts,) = db.execute("SELECT count(*) FROM smoke_inserts").fetchone() or (None,)
    finally:
        cluster.stop()

    _check(str(run.state) == "success", "dag.test", f"the run ended {run.state}; its log is above")
    write = _tries("overwrite")
    _check([t["try"] for t in write] == [1, 2], "fenced write", f"expected tries 1 and 2, got {write}")
    first, retry = write[0]["result"], write[1]["result"]
    _check(not first["skipped"] and first["rows"] == 2, "fenced write", f"try 1 wrote {first}")
    _check(retry["skipped"] is True, "fenced write", f"the retry did not skip the committed write: {retry}")
    _check(rows == EXPECTED, "fenced write", f"the table holds {rows}, expected {EXPECTED}")
    _check(inserts == 1, "fenced write", f"{inserts} INSERT statements reached the table; expected 1")

    call = _tries("pay")
    _check([t["try"] for t in call] == [1, 2], "ledgered call", f"expected tries 1 and 2, got {call}")
    _check(call[1]["result"] == call[0]["result"], "ledgered call", f"the retry returned {call[1]}")
    _check(
        len(requests) == 1 and bookings == 1,
        "ledgered call",
        f"the vendor got {len(requests)} request(s) and booked {bookings}; expected one",
    )
    key = call[0]["result"]["key"]
    sent = requests[0].headers.get("Idempotency-Key")
    _check(sent == key, "ledgered call", f"the request carried Idempotency-Key {sent!r}, not {key!r}")
    return {
        "airflow": airflow.__version__,
        "crashsafe": airflow_crashsafe.__version__,
        "write": {"try1": first, "try2": retry, "insert_statements": inserts},
        "call": {"key": key, "requests": len(requests), "bookings": bookings, "result": call[0]["result"]},
    }


if __name__ == "__main__":
    try:
        summary = _run()
    except SmokeFailed as failed:
        print(f"smoke: {failed}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(summary, default=str))
