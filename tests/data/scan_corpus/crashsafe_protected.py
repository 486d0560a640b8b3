from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG, task

from airflow_crashsafe import fenced_transaction
from airflow_crashsafe.audit import replay_safe
from airflow_crashsafe.effects import effect
from airflow_crashsafe.operators.http import IdempotentHttpOperator
from airflow_crashsafe.operators.sql import FencedSQLOperator, NaturalKeyMergeOperator, PartitionOverwriteOperator

with DAG("crashsafe_protected", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    PartitionOverwriteOperator(
        task_id="overwrite_orders",
        conn_id="postgres_dwh",
        target_table="mart.orders_daily",
        partition={"day": "{{ ds }}"},
        sql="SELECT day, id FROM staging.orders WHERE day = %(day)s",
        parameters={"day": "{{ ds }}"},
    )
    NaturalKeyMergeOperator(
        task_id="merge_customers",
        conn_id="postgres_dwh",
        target_table="mart.customers",
        sql="SELECT id, email FROM staging.customers",
        natural_key=["id"],
    )
    FencedSQLOperator(task_id="fenced_log", conn_id="postgres_dwh", target="ops.log", sql="INSERT INTO ops.log VALUES (1)")
    IdempotentHttpOperator(
        task_id="pay", http_conn_id="payouts_api", endpoint="/payouts", json={"a": 1}, target_honours_keys=True
    )
    replay_safe(
        SQLExecuteQueryOperator(
            task_id="stage_scratch", conn_id="postgres_dwh", sql="INSERT INTO scratch.tmp SELECT * FROM staging.orders"
        ),
        reason="scratch.tmp is truncated by the next run's first task",
    )

    @task
    def fenced_rates(ds=None):
        with fenced_transaction("postgres_dwh", "mart.fx") as tx:
            tx.cursor.execute("INSERT INTO mart.fx SELECT * FROM staging.fx WHERE day = %s", (ds,))

    @task
    def email_once():
        import smtplib

        with effect("finance-email", payload={"to": "finance@example.com"}) as fx:
            if fx.pending:
                with smtplib.SMTP("mail") as smtp:
                    smtp.sendmail("a@example.com", ["finance@example.com"], "done")
                fx.done({"sent": True})

    fenced_rates()
    email_once()
