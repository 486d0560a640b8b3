from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

STAGED_UPSERT = """
CREATE TEMP TABLE tmp_prices AS SELECT * FROM staging.prices WHERE 1 = 0;
INSERT INTO tmp_prices SELECT * FROM staging.prices WHERE day = '{{ ds }}';
INSERT INTO mart.prices (sku, price) SELECT sku, price FROM tmp_prices
ON CONFLICT (sku) DO UPDATE SET price = excluded.price;
"""

READ_THEN_APPEND = """
SELECT count(*) FROM staging.refunds;
INSERT INTO mart.refunds SELECT * FROM staging.refunds;
"""

REBUILD = """
DROP TABLE IF EXISTS mart.top_products;
CREATE TABLE mart.top_products AS SELECT sku, sum(qty) AS qty FROM mart.sales GROUP BY sku ORDER BY 2 DESC LIMIT 100;
"""

with DAG("multi_statement", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh"}):
    SQLExecuteQueryOperator(task_id="staged_upsert", sql=STAGED_UPSERT)
    SQLExecuteQueryOperator(task_id="read_then_append", sql=READ_THEN_APPEND)
    SQLExecuteQueryOperator(task_id="rebuild_top", sql=REBUILD)
