from datetime import datetime

from airflow.providers.http.operators.http import HttpOperator
from airflow.sdk import DAG

with DAG("mapped_http", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    HttpOperator.partial(task_id="post_batches", http_conn_id="ingest_api", endpoint="/batches", method="POST").expand(
        data=['{"batch": 1}', '{"batch": 2}']
    )
    HttpOperator.partial(task_id="get_pages", http_conn_id="ingest_api", method="GET").expand(
        endpoint=["/pages/1", "/pages/2"]
    )
