"""The nightly revenue load written with plain Airflow operators — the crash drill's control.

The incident it models: the scheduler is SIGKILLed (OOM, node loss, a bad deploy) while the night's
loads run. Their LocalExecutor workers keep going; the api-server keeps recording heartbeats. The
scheduler comes back more than ``scheduler_health_check_threshold`` (30 s) later and, at start-up,
resets every task of the dead scheduler that is still running and starts it again at once — a
new try, no retry needed. The old attempt is only told to stop at its next heartbeat, and the
statement it already sent keeps running inside PostgreSQL and commits (an autocommit statement
completes server-side even after its client is killed). So every interrupted load runs twice:

- ``load_revenue_<region>`` INSERTs the region's orders into ``drill_plain.fact_revenue``, whose
  surrogate key is generated (``bigserial``): the second run adds a second copy of every row
  and the night's revenue doubles;
- ``append_lines_<region>`` appends the region's order lines: the partition ends up twice as big;
- ``revenue_total`` then reports the doubled figure, and the DAG run ends ``success``;
- ``push_payment_<vendor>_<payment>`` (``HttpOperator``) POSTs a payment instruction to a vendor
  while the loads run: ``naive`` books every request it gets, ``keyed`` honours an
  ``Idempotency-Key`` — here one made per attempt (``ti.id``), as hand-rolled keys often are. The
  reset attempt sends the instruction again, and both vendors book the payment twice.

The long statement is simulated by ``long_work()`` inside the INSERT … SELECT: a server-side sleep
of ``work_seconds`` (param), which the crash drill lets run to its end so that the re-runs' redone
work is measured whole. It names its backend ``crashsafe-work:<dag_id>/<task_id>`` (``application_name``,
for that statement only), so the drill counts in ``pg_stat_activity`` how often and how long each
load really ran in the warehouse, the abandoned attempt's statement included.
``nightly_revenue_crashsafe.py`` is the same night written with airflow-crashsafe operators.
Connection: ``crashsafe_warehouse``: PostgreSQL, or MariaDB with ``CRASHSAFE_DRILL_WAREHOUSE=mariadb``
(the same tables and ``long_work()`` in MariaDB's spelling, sleeping with ``DO SLEEP()``; there the label
names nothing the drill can see, so it does not meter the work). The number of regions comes from
``CRASHSAFE_DRILL_REGIONS`` (default 8, i.e. 16 parallel loads), so the drill can run a shorter
night, ``CRASHSAFE_DRILL_PAYMENTS`` the payments per vendor (default 2); HTTP connections
``crashsafe_vendor_naive`` and ``crashsafe_vendor_keyed``. Nothing else happens at import time.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.providers.http.operators.http import HttpOperator
from airflow.sdk import DAG, Param

SCHEMA = "drill_plain"
CONN_ID = "crashsafe_warehouse"
REGIONS = [f"r{i:02d}" for i in range(1, int(os.environ.get("CRASHSAFE_DRILL_REGIONS", "8")) + 1)]
ORDERS_PER_REGION = 40
PAYMENTS = [f"p{i:02d}" for i in range(1, int(os.environ.get("CRASHSAFE_DRILL_PAYMENTS", "2")) + 1)]
VENDORS = {"naive": "crashsafe_vendor_naive", "keyed": "crashsafe_vendor_keyed"}
#: The naive vendor gets no key; the keyed one a key made per attempt, as hand-rolled keys often are.
KEY_HEADERS = {"naive": {}, "keyed": {"Idempotency-Key": "{{ ti.id }}"}}

SETUP = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.orders (
        day date NOT NULL, region text NOT NULL, order_id integer NOT NULL,
        amount numeric(12, 2) NOT NULL, qty integer NOT NULL,
        PRIMARY KEY (day, region, order_id))""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.fact_revenue (
        id bigserial PRIMARY KEY, day date NOT NULL, region text NOT NULL,
        order_id integer NOT NULL, amount numeric(12, 2) NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.order_lines (
        day date NOT NULL, region text NOT NULL, order_id integer NOT NULL, qty integer NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.daily_revenue (
        day date NOT NULL, revenue numeric(14, 2) NOT NULL)""",
    # The night's source orders: deterministic, so a re-run of the seed changes nothing.
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
        id bigint AUTO_INCREMENT PRIMARY KEY, day date NOT NULL, region varchar(16) NOT NULL,
        order_id integer NOT NULL, amount decimal(12, 2) NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.order_lines (
        day date NOT NULL, region varchar(16) NOT NULL, order_id integer NOT NULL, qty integer NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.daily_revenue (
        day date NOT NULL, revenue decimal(14, 2) NOT NULL)""",
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

# The MATERIALIZED CTE runs long_work() exactly once per statement: the "long warehouse job".
LOAD_REVENUE = f"""
WITH work AS MATERIALIZED (SELECT {SCHEMA}.long_work(
    {{{{ params.work_seconds }}}}, %(day)s::date, '{{{{ ti.dag_id }}}}/{{{{ ti.task_id }}}}'
))
INSERT INTO {SCHEMA}.fact_revenue (day, region, order_id, amount)
SELECT o.day, o.region, o.order_id, o.amount
FROM {SCHEMA}.orders AS o CROSS JOIN work
WHERE o.day = %(day)s::date AND o.region = %(region)s
"""

APPEND_LINES = f"""
WITH work AS MATERIALIZED (SELECT {SCHEMA}.long_work(
    {{{{ params.work_seconds }}}}, %(day)s::date, '{{{{ ti.dag_id }}}}/{{{{ ti.task_id }}}}'
))
INSERT INTO {SCHEMA}.order_lines (day, region, order_id, qty)
SELECT o.day, o.region, o.order_id, o.qty
FROM {SCHEMA}.orders AS o CROSS JOIN work
WHERE o.day = %(day)s::date AND o.region = %(region)s
"""

# MariaDB: a derived table with LIMIT is materialized, so long_work() runs once per statement.
MARIADB_WORK = f"""CROSS JOIN (SELECT {SCHEMA}.long_work({{{{ params.work_seconds }}}}, %(day)s,
    '{{{{ ti.dag_id }}}}/{{{{ ti.task_id }}}}') AS done LIMIT 1) AS work"""
MARIADB_LOAD_REVENUE = f"""
INSERT INTO {SCHEMA}.fact_revenue (day, region, order_id, amount)
SELECT o.day, o.region, o.order_id, o.amount
FROM {SCHEMA}.orders AS o {MARIADB_WORK}
WHERE o.day = %(day)s AND o.region = %(region)s
"""
MARIADB_APPEND_LINES = f"""
INSERT INTO {SCHEMA}.order_lines (day, region, order_id, qty)
SELECT o.day, o.region, o.order_id, o.qty
FROM {SCHEMA}.orders AS o {MARIADB_WORK}
WHERE o.day = %(day)s AND o.region = %(region)s
"""

REVENUE_TOTAL = f"""
INSERT INTO {SCHEMA}.daily_revenue (day, revenue)
SELECT %(day)s::date, coalesce(sum(amount), 0) FROM {SCHEMA}.fact_revenue WHERE day = %(day)s::date
"""

if os.environ.get("CRASHSAFE_DRILL_WAREHOUSE", "postgres") == "mariadb":
    SETUP, LOAD_REVENUE, APPEND_LINES = MARIADB_SETUP, MARIADB_LOAD_REVENUE, MARIADB_APPEND_LINES
    REVENUE_TOTAL = REVENUE_TOTAL.replace("::date", "")

with DAG(
    dag_id="nightly_revenue_plain",
    description="Nightly revenue with plain operators: double-counts when the scheduler crashes",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_tasks=64,
    max_active_runs=1,
    params={"work_seconds": Param(75, type="integer", minimum=0)},
    default_args={"retries": 0, "conn_id": CONN_ID},
    tags=["crashsafe-drill", "control"],
    doc_md=__doc__,
) as dag:
    setup = SQLExecuteQueryOperator(
        task_id="setup",
        sql=SETUP,
        parameters={"day": "{{ ds }}", "regions": len(REGIONS)},
        autocommit=True,
    )
    total = SQLExecuteQueryOperator(
        task_id="revenue_total", sql=REVENUE_TOTAL, parameters={"day": "{{ ds }}"}, autocommit=True
    )
    for region in REGIONS:
        params = {"day": "{{ ds }}", "region": region}
        loads = [
            SQLExecuteQueryOperator(
                task_id=f"load_revenue_{region}", sql=LOAD_REVENUE, parameters=params, autocommit=True
            ),
            SQLExecuteQueryOperator(
                task_id=f"append_lines_{region}", sql=APPEND_LINES, parameters=params, autocommit=True
            ),
        ]
        setup >> loads >> total
    for vendor, http_conn_id in VENDORS.items():
        for payment in PAYMENTS:
            HttpOperator(
                task_id=f"push_payment_{vendor}_{payment}",
                http_conn_id=http_conn_id,
                endpoint="/payments",
                method="POST",
                data=json.dumps(
                    {
                        "dag_id": "nightly_revenue_plain",
                        "payment": payment,
                        "day": "{{ ds }}",
                        "amount": 125.5,
                    }
                ),
                headers={"Content-Type": "application/json", **KEY_HEADERS[vendor]},
                # The vendor may take long: a timeout would only add a third send.
                extra_options={"timeout": 900},
            )
