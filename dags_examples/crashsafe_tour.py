"""A tour of airflow-crashsafe: every operator and helper once, on one PostgreSQL warehouse.

Connections: ``warehouse`` (PostgreSQL) and ``payments_api`` (HTTP). Nothing happens at import.
The README's usage section is cut from this file; ``nightly_revenue_crashsafe.py`` is the same
ideas at the scale of a real night, and the crash drill runs it.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task

from airflow_crashsafe import fenced_transaction
from airflow_crashsafe.audit import replay_safe
from airflow_crashsafe.effects import effect
from airflow_crashsafe.operators.http import IdempotentHttpOperator
from airflow_crashsafe.operators.sql import (
    FencedSQLOperator,
    NaturalKeyMergeOperator,
    PartitionOverwriteOperator,
)
from airflow_crashsafe.sensors.heartbeat import SchedulerHeartbeatSensor

with DAG(
    dag_id="crashsafe_tour",
    schedule="@daily",
    start_date=datetime(2026, 11, 1),
    catchup=False,
    tags=["crashsafe", "example"],
    doc_md=__doc__,
):
    # Gate heavy work on a live scheduler: a dead one cannot schedule what comes after.
    scheduler_alive = SchedulerHeartbeatSensor(task_id="scheduler_alive", threshold_seconds=30)

    # Replace exactly one day's partition, fenced: a stale attempt can never overwrite it.
    daily_orders = PartitionOverwriteOperator(
        task_id="daily_orders",
        conn_id="warehouse",
        target_table="mart.daily_orders",
        partition={"day": "{{ ds }}"},
        sql="SELECT day, order_id, amount FROM staging.orders WHERE day = %(day)s",
        parameters={"day": "{{ ds }}"},
    )

    # MERGE on the business key; refuses generated keys, duplicate keys and now()/random().
    revenue = NaturalKeyMergeOperator(
        task_id="revenue",
        conn_id="warehouse",
        target_table="mart.revenue",
        sql="SELECT day, region, sum(amount) AS revenue FROM mart.daily_orders "
        "WHERE day = %(day)s GROUP BY day, region",
        natural_key=["day", "region"],
        parameters={"day": "{{ ds }}"},
    )

    # Your own statements in one fenced transaction; the token is a query parameter.
    mark_loaded = FencedSQLOperator(
        task_id="mark_loaded",
        conn_id="warehouse",
        target="mart.load_log",
        sql="INSERT INTO mart.load_log (day, token) VALUES (%(day)s, %(crashsafe_token)s) "
        "ON CONFLICT (day) DO UPDATE SET token = excluded.token",
        parameters={"day": "{{ ds }}"},
    )

    # One payment instruction per day, never two: idempotency key + ledger.
    pay_vendor = IdempotentHttpOperator(
        task_id="pay_vendor",
        http_conn_id="payments_api",
        endpoint="/v1/payouts",
        json={"day": "{{ ds }}", "amount_cents": 125_000},
        target="vendor-payout",
        target_honours_keys=True,  # this vendor honours Idempotency-Key: a retry may re-send
    )

    @task
    def fx_rates(ds: str | None = None) -> int:
        """TaskFlow code writes inside fenced_transaction: committed means done on a retry."""
        with fenced_transaction("warehouse", "mart.fx_rates") as tx:
            if tx.already_committed:
                return 0
            tx.cursor.execute("DELETE FROM mart.fx_rates WHERE day = %s", (ds,))
            tx.cursor.execute(
                "INSERT INTO mart.fx_rates (day, currency, rate) "
                "SELECT %s, currency, rate FROM staging.fx WHERE day = %s",
                (ds, ds),
            )
            return int(tx.cursor.rowcount)

    @task
    def notify_finance() -> str:
        """Any other side effect: effect() runs the block once per slot and replays its result."""
        with effect("finance-email", payload={"to": "finance@example.com"}) as fx:
            if fx.pending:
                message_id = f"sent-with-key-{fx.key}"  # your mailer call, passing fx.key along
                fx.done({"message_id": message_id})
        return str(fx.result["message_id"])

    # A derived rebuild that is safe to replay: say so, and the audit will not flag its re-runs.
    rebuild_summary = replay_safe(
        PartitionOverwriteOperator(
            task_id="rebuild_summary",
            conn_id="warehouse",
            target_table="mart.summary",
            partition={"day": "{{ ds }}"},
            sql="SELECT day, sum(revenue) AS revenue FROM mart.revenue WHERE day = %(day)s GROUP BY day",
            parameters={"day": "{{ ds }}"},
        ),
        reason="derived from mart.revenue; overwriting the partition again changes nothing",
    )

    scheduler_alive >> daily_orders >> revenue >> [mark_loaded, rebuild_summary]
    scheduler_alive >> fx_rates() >> pay_vendor >> notify_finance()
