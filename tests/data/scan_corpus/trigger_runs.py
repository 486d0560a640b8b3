from datetime import datetime

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG


def is_weekday(ds=None, **_):
    return datetime.fromisoformat(ds).weekday() < 5


with DAG("trigger_runs", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    start = EmptyOperator(task_id="start")
    gate = ShortCircuitOperator(task_id="weekday_only", python_callable=is_weekday)
    TriggerDagRunOperator(task_id="kick_downstream", trigger_dag_id="downstream")
    TriggerDagRunOperator(task_id="kick_keyed", trigger_dag_id="downstream", trigger_run_id="{{ run_id }}_downstream")
    TriggerDagRunOperator(
        task_id="kick_keyed_skip",
        trigger_dag_id="downstream",
        trigger_run_id="{{ run_id }}_downstream",
        skip_when_already_exists=True,
    )
    start >> gate
