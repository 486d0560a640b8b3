from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG("bash_tasks", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    BashOperator(task_id="say_hello", bash_command="echo 'starting {{ ds }}'")
    BashOperator(task_id="wait_a_bit", bash_command="sleep 5 && date")
    BashOperator(task_id="run_etl_script", bash_command="python /opt/etl/nightly.py --day {{ ds }}")
    BashOperator(task_id="dbt_run", bash_command="cd /opt/dbt && dbt run --select marts")
    BashOperator(
        task_id="curl_post",
        bash_command="curl -sf -X POST https://api.example.com/refresh -d '{\"day\": \"{{ ds }}\"}'",
    )
    BashOperator(task_id="curl_health", bash_command="curl -sf https://api.example.com/health")
    BashOperator(
        task_id="psql_insert",
        bash_command="psql \"$DWH_URL\" -c \"INSERT INTO ops.heartbeat (at) VALUES (now())\"",
    )
    BashOperator(task_id="psql_select", bash_command="psql \"$DWH_URL\" -c \"SELECT count(*) FROM mart.orders\"")
