from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("increments", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_app"}):
    SQLExecuteQueryOperator(task_id="count_runs", sql="UPDATE ops.counters SET n = n + 1 WHERE name = 'nightly'")
    SQLExecuteQueryOperator(
        task_id="charge_fee", sql="UPDATE billing.accounts SET balance = balance - 10 WHERE plan = 'basic'"
    )
    SQLExecuteQueryOperator(
        task_id="mark_shipped",
        sql="UPDATE shop.orders SET status = 'shipped', shipped_on = '{{ ds }}' WHERE ship_day = '{{ ds }}'",
    )
    SQLExecuteQueryOperator(
        task_id="accumulate_totals",
        sql="""INSERT INTO mart.totals AS t (region, total)
               SELECT region, sum(amount) FROM staging.orders WHERE day = '{{ ds }}' GROUP BY region
               ON CONFLICT (region) DO UPDATE SET total = t.total + excluded.total""",
    )
