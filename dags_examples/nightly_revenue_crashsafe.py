"""The same nightly revenue load with airflow-crashsafe operators: exact after a scheduler crash.

The incident is the one ``nightly_revenue_plain.py`` suffers: the scheduler is SIGKILLed while the
loads run, comes back more than 30 s later, resets every running task and starts it again while
the old attempt is still working. Here that costs time, not correctness:

- ``merge_revenue_<region>`` (``NaturalKeyMergeOperator``) MERGEs the region's orders into
  ``drill_crashsafe.fact_revenue`` on the natural key ``(day, region, order_id)`` — backed by the
  primary key, no generated key column — so running it twice cannot add a row twice;
- ``overwrite_lines_<region>`` (``PartitionOverwriteOperator``) replaces exactly the
  ``(day, region)`` partition of ``drill_crashsafe.order_lines`` in one transaction, instead of
  appending to it;
- every write is fenced: it commits only if its attempt still holds the newest fencing token for
  the slot, so the stale attempt the scheduler abandoned gets ``FencedOut`` and rolls back, and a
  re-run of a slot already committed in this clear generation returns at once;
- ``revenue_total`` MERGEs the day's total on ``day``: one row, the exact figure;
- ``push_payment_<vendor>_<payment>`` (``IdempotentHttpOperator``) POSTs a payment instruction
  while the loads run, under an idempotency key derived from the slot and recorded in the ledger
  before it leaves. Each push declares whether its vendor honours keys (``target_honours_keys``).
  To the ``keyed`` vendor, which does, the reset attempt re-sends with the same key and the vendor
  books once. To the ``naive`` vendor, which books whatever it gets, the reset attempt does not
  send at all (``target_honours_keys=False``, ``max_sends=1``): the task stops with
  ``OutcomeUnknown`` for a person to check with the vendor and ``airflow-crashsafe ledger
  resolve`` — so the DAG run ends
  ``failed``, with the payment made once, rather than ``success`` with a double payment.

The long statement is simulated by ``long_work()`` in the source query, a server-side sleep of up
to ``work_seconds`` (param), which the crash drill lets run to its end, so that a re-run finds it
in flight and adopts it (a user function is fine for the MERGE's non-determinism check; ``now()``
would not be).
It names its backend ``crashsafe-work:<dag_id>/<task_id>`` (``application_name``, until the write's
transaction ends), so the drill counts in ``pg_stat_activity`` how often and how long each load
really ran in the warehouse. Connection: ``crashsafe_warehouse``: PostgreSQL, or MariaDB with
``CRASHSAFE_DRILL_WAREHOUSE=mariadb`` (the same tables and ``long_work()`` in MariaDB's spelling,
sleeping with ``DO SLEEP()``). On MariaDB the writes are fenced but a re-run cannot adopt its
predecessor's write: a transaction does not outlive its client there, so the re-run redoes it.
``CRASHSAFE_DRILL_REGIONS`` sets the number of regions (default 8), ``CRASHSAFE_DRILL_PAYMENTS``
the payments per vendor (default 2); HTTP connections ``crashsafe_vendor_naive`` and
``crashsafe_vendor_keyed``. Nothing else happens at import time.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG, Param

from airflow_crashsafe.operators.http import IdempotentHttpOperator
from airflow_crashsafe.operators.sql import NaturalKeyMergeOperator, PartitionOverwriteOperator

SCHEMA = "drill_crashsafe"
CONN_ID = "crashsafe_warehouse"
REGIONS = [f"r{i:02d}" for i in range(1, int(os.environ.get("CRASHSAFE_DRILL_REGIONS", "8")) + 1)]
ORDERS_PER_REGION = 40
PAYMENTS = [f"p{i:02d}" for i in range(1, int(os.environ.get("CRASHSAFE_DRILL_PAYMENTS", "2")) + 1)]
#: vendor -> (HTTP connection, whether the vendor honours idempotency keys)
VENDORS = {"naive": ("crashsafe_vendor_naive", False), "keyed": ("crashsafe_vendor_keyed", True)}

# Idempotent DDL and seed: a plain operator is safe here, running it twice changes nothing.
SETUP = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.orders (
        day date NOT NULL, region text NOT NULL, order_id integer NOT NULL,
        amount numeric(12, 2) NOT NULL, qty integer NOT NULL,
        PRIMARY KEY (day, region, order_id))""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.fact_revenue (
        day date NOT NULL, region text NOT NULL, order_id integer NOT NULL,
        amount numeric(12, 2) NOT NULL, PRIMARY KEY (day, region, order_id))""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.order_lines (
        day date NOT NULL, region text NOT NULL, order_id integer NOT NULL, qty integer NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.daily_revenue (
        day date PRIMARY KEY, revenue numeric(14, 2) NOT NULL)""",
    # The "long warehouse job": sleeps max_seconds, or less once someone releases the day (a row
    # in work_release ends it early; the crash drill does not, it measures whole runs). It labels its
    # backend 'crashsafe-work:<dag_id>/<task_id>' so the drill counts executions server-side.
    f"CREATE TABLE IF NOT EXISTS {SCHEMA}.work_release (day date PRIMARY KEY)",
    f"""CREATE OR REPLACE FUNCTION {SCHEMA}.long_work(
            max_seconds double precision, for_day date, label text)
        RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
        DECLARE deadline timestamptz := clock_timestamp() + make_interval(secs => max_seconds);
        BEGIN
            -- Name this backend after the task for the drill's work meter (pg_stat_activity); local
            -- to the transaction, so the connection gets its own name back when the unit ends.
            PERFORM set_config('application_name', 'crashsafe-work:' || label, true);
            WHILE clock_timestamp() < deadline LOOP
                IF EXISTS (SELECT 1 FROM {SCHEMA}.work_release WHERE day = for_day) THEN
                    RETURN true;
                END IF;
                PERFORM pg_sleep(0.5);
            END LOOP;
            RETURN false;
        END $$""",
    f"""INSERT INTO {SCHEMA}.orders (day, region, order_id, amount, qty)
        SELECT %(day)s::date, 'r' || lpad(r::text, 2, '0'), o,
               (mod(o * 37 + r * 11, 500) + 10)::numeric / 4, mod(o + r, 7) + 1
        FROM generate_series(1, %(regions)s) AS r, generate_series(1, {ORDERS_PER_REGION}) AS o
        ON CONFLICT DO NOTHING""",
]

# MariaDB's spelling of SETUP (CRASHSAFE_DRILL_WAREHOUSE=mariadb): a schema is a database, SLEEP()
# is the server-side sleep, the sequence engine's seq_1_to_N tables are generate_series.
MARIADB_SETUP = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.orders (
        day date NOT NULL, region varchar(16) NOT NULL, order_id integer NOT NULL,
        amount decimal(12, 2) NOT NULL, qty integer NOT NULL,
        PRIMARY KEY (day, region, order_id))""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.fact_revenue (
        day date NOT NULL, region varchar(16) NOT NULL, order_id integer NOT NULL,
        amount decimal(12, 2) NOT NULL, PRIMARY KEY (day, region, order_id))""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.order_lines (
        day date NOT NULL, region varchar(16) NOT NULL, order_id integer NOT NULL, qty integer NOT NULL,
        KEY (day, region))""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.daily_revenue (
        day date PRIMARY KEY, revenue decimal(14, 2) NOT NULL)""",
    f"CREATE TABLE IF NOT EXISTS {SCHEMA}.work_release (day date PRIMARY KEY)",
    f"""CREATE OR REPLACE FUNCTION {SCHEMA}.long_work(max_seconds double, for_day date, label varchar(255))
        RETURNS boolean NOT DETERMINISTIC READS SQL DATA
        BEGIN
            DECLARE deadline datetime(6) DEFAULT SYSDATE(6) + INTERVAL max_seconds * 1000000 MICROSECOND;
            WHILE SYSDATE(6) < deadline DO
                IF EXISTS (SELECT 1 FROM {SCHEMA}.work_release WHERE day = for_day) THEN
                    RETURN true;
                END IF;
                DO SLEEP(0.5);
            END WHILE;
            RETURN false;
        END""",
    f"""INSERT IGNORE INTO {SCHEMA}.orders (day, region, order_id, amount, qty)
        SELECT %(day)s, CONCAT('r', LPAD(r.seq, 2, '0')), o.seq,
               (MOD(o.seq * 37 + r.seq * 11, 500) + 10) / 4, MOD(o.seq + r.seq, 7) + 1
        FROM seq_1_to_99 AS r JOIN seq_1_to_{ORDERS_PER_REGION} AS o
        WHERE r.seq <= %(regions)s""",
]

# Source queries: the MATERIALIZED CTE runs long_work() once per statement (the long warehouse job).
REVENUE_SOURCE = f"""
WITH work AS MATERIALIZED (SELECT {SCHEMA}.long_work(
    {{{{ params.work_seconds }}}}, %(day)s::date, '{{{{ ti.dag_id }}}}/{{{{ ti.task_id }}}}'
))
SELECT o.day, o.region, o.order_id, o.amount
FROM {SCHEMA}.orders AS o CROSS JOIN work
WHERE o.day = %(day)s::date AND o.region = %(region)s
"""

LINES_SOURCE = f"""
WITH work AS MATERIALIZED (SELECT {SCHEMA}.long_work(
    {{{{ params.work_seconds }}}}, %(day)s::date, '{{{{ ti.dag_id }}}}/{{{{ ti.task_id }}}}'
))
SELECT o.day, o.region, o.order_id, o.qty
FROM {SCHEMA}.orders AS o CROSS JOIN work
WHERE o.day = %(day)s::date AND o.region = %(region)s
"""

TOTAL_SOURCE = f"""
SELECT %(day)s::date AS day, coalesce(sum(amount), 0) AS revenue
FROM {SCHEMA}.fact_revenue WHERE day = %(day)s::date
"""

# MariaDB: a derived table with LIMIT is materialized, so long_work() runs once per statement.
MARIADB_WORK = f"""CROSS JOIN (SELECT {SCHEMA}.long_work({{{{ params.work_seconds }}}}, %(day)s,
    '{{{{ ti.dag_id }}}}/{{{{ ti.task_id }}}}') AS done LIMIT 1) AS work"""

if os.environ.get("CRASHSAFE_DRILL_WAREHOUSE", "postgres") == "mariadb":
    SETUP = MARIADB_SETUP
    REVENUE_SOURCE, LINES_SOURCE = (
        f"""
SELECT o.day, o.region, o.order_id, o.{column}
FROM {SCHEMA}.orders AS o {MARIADB_WORK}
WHERE o.day = %(day)s AND o.region = %(region)s
"""
        for column in ("amount", "qty")
    )
    TOTAL_SOURCE = TOTAL_SOURCE.replace("::date", "")

with DAG(
    dag_id="nightly_revenue_crashsafe",
    description="Nightly revenue with crashsafe operators: exact when the scheduler crashes",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_tasks=64,
    max_active_runs=1,
    params={"work_seconds": Param(75, type="integer", minimum=0)},
    default_args={"retries": 0},
    tags=["crashsafe-drill", "crashsafe"],
    doc_md=__doc__,
) as dag:
    setup = SQLExecuteQueryOperator(
        task_id="setup",
        conn_id=CONN_ID,
        sql=SETUP,
        parameters={"day": "{{ ds }}", "regions": len(REGIONS)},
        autocommit=True,
    )
    total = NaturalKeyMergeOperator(
        task_id="revenue_total",
        conn_id=CONN_ID,
        target_table=f"{SCHEMA}.daily_revenue",
        sql=TOTAL_SOURCE,
        natural_key=["day"],
        update_columns=["revenue"],
        parameters={"day": "{{ ds }}"},
    )
    for region in REGIONS:
        params = {"day": "{{ ds }}", "region": region}
        loads = [
            NaturalKeyMergeOperator(
                task_id=f"merge_revenue_{region}",
                conn_id=CONN_ID,
                target_table=f"{SCHEMA}.fact_revenue",
                sql=REVENUE_SOURCE,
                natural_key=["day", "region", "order_id"],
                update_columns=["amount"],
                parameters=params,
            ),
            PartitionOverwriteOperator(
                task_id=f"overwrite_lines_{region}",
                conn_id=CONN_ID,
                target_table=f"{SCHEMA}.order_lines",
                partition={"day": "{{ ds }}", "region": region},
                sql=LINES_SOURCE,
                parameters=params,
            ),
        ]
        setup >> loads >> total
    for vendor, (http_conn_id, honours_keys) in VENDORS.items():
        for payment in PAYMENTS:
            IdempotentHttpOperator(
                task_id=f"push_payment_{vendor}_{payment}",
                http_conn_id=http_conn_id,
                endpoint="/payments",
                json={
                    "dag_id": "nightly_revenue_crashsafe",
                    "payment": payment,
                    "day": "{{ ds }}",
                    "amount": 125.5,
                },
                # After an unknown outcome: re-send with the same key, or stop for a person.
                target_honours_keys=honours_keys,
                # A target that does not honour keys must never get a second request, not even a
                # retry after a timeout inside one attempt.
                max_sends=5 if honours_keys else 1,
                timeout=900,
                in_progress_wait=900,
                backoff_base=0.1,
            )
