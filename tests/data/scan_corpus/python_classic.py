from datetime import datetime

import psycopg2
import requests
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

GENERATED_SRC = "def generated_loader(**context):\n    return None\n"
_namespace: dict = {}
exec(compile(GENERATED_SRC, "<generated>", "exec"), _namespace)
generated_loader = _namespace["generated_loader"]


def load_orders(ds=None, **_):
    conn = psycopg2.connect("dbname=ops")
    cur = conn.cursor()
    cur.execute("INSERT INTO ops.orders_copy SELECT * FROM ops.orders WHERE day = %s", (ds,))
    conn.commit()


def summarise(**_):
    values = [1, 2, 3]
    return {"mean": sum(values) / len(values)}


def _notify_partner(payload):
    return requests.post("https://partner.example.com/notify", json=payload, timeout=10)


def sync_partner(ds=None, **_):
    payload = {"day": ds}
    _notify_partner(payload)


with DAG("python_classic", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    PythonOperator(task_id="load_orders", python_callable=load_orders)
    PythonOperator(task_id="summarise", python_callable=summarise)
    PythonOperator(task_id="sync_partner", python_callable=sync_partner)
    PythonOperator(task_id="generated", python_callable=generated_loader)
