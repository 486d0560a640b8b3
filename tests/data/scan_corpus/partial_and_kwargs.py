"""One generic SQL runner reused by many tasks: functools.partial, op_kwargs and direct calls."""

from datetime import datetime
from functools import partial

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, task
from team_lib.warehouse import run_statement

with DAG("partial_and_kwargs", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    PythonOperator(
        task_id="copy_audit_events",
        python_callable=partial(run_statement, sql="INSERT INTO audit.events_copy SELECT * FROM audit.events"),
    )
    PythonOperator(
        task_id="count_audit_events",
        python_callable=partial(run_statement, "SELECT count(*) FROM audit.events"),
    )
    PythonOperator(
        task_id="replace_daily_sales",
        python_callable=run_statement,
        op_kwargs={
            "sql": "DELETE FROM mart.sales_daily WHERE day = '{{ ds }}'; "
            "INSERT INTO mart.sales_daily SELECT day, sum(amount) FROM mart.sales WHERE day = '{{ ds }}' GROUP BY day",
        },
    )

    @task
    def bump_counter():
        run_statement("UPDATE ops.counters SET n = n + 1 WHERE name = 'sales'")

    bump_counter()
