from datetime import datetime

from airflow.sdk import Variable, dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def variables_state():
    @task
    def remember_last_run(ds=None):
        Variable.set("orders_last_day", ds)

    @task
    def read_conf(dag_run=None) -> dict:
        return dict(dag_run.conf or {})

    remember_last_run()
    read_conf()


variables_state()
