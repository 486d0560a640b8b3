from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("surrogate_keys", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh"}):
    SQLExecuteQueryOperator(
        task_id="merge_fact_sk",
        sql="""MERGE INTO mart.fact_sales t USING staging.sales s ON t.sale_sk = s.sale_sk
               WHEN NOT MATCHED THEN INSERT (sale_sk, order_id, amount) VALUES (nextval('mart.sale_seq'), s.order_id, s.amount)""",
    )
    SQLExecuteQueryOperator(
        task_id="upsert_random_id",
        sql="INSERT INTO mart.events (id, payload) SELECT gen_random_uuid(), payload FROM staging.events ON CONFLICT DO NOTHING",
    )
    SQLExecuteQueryOperator(
        task_id="merge_natural",
        sql="""MERGE INTO mart.products t USING staging.products s ON t.sku = s.sku
               WHEN MATCHED THEN UPDATE SET name = s.name
               WHEN NOT MATCHED THEN INSERT (sku, name) VALUES (s.sku, s.name)""",
    )
