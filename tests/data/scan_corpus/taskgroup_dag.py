from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLCheckOperator, SQLExecuteQueryOperator
from airflow.sdk import DAG, TaskGroup

with DAG("taskgroup_dag", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh"}):
    with TaskGroup("finance"):
        load = SQLExecuteQueryOperator(task_id="load_ledger", sql="INSERT INTO fin.ledger SELECT * FROM staging.ledger")
        check = SQLCheckOperator(task_id="check_ledger", sql="SELECT count(*) > 0 FROM fin.ledger")
        load >> check
    with TaskGroup("marketing"):
        SQLExecuteQueryOperator(
            task_id="upsert_campaigns",
            sql="INSERT INTO mkt.campaigns SELECT * FROM staging.campaigns ON CONFLICT (campaign_id) DO NOTHING",
        )
