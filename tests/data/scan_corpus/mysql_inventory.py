from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("mysql_inventory", schedule="@hourly", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "mysql_shop"}):
    SQLExecuteQueryOperator(
        task_id="sync_stock",
        sql="INSERT INTO stock (sku, qty) SELECT sku, qty FROM stock_feed ON DUPLICATE KEY UPDATE qty = VALUES(qty)",
    )
    SQLExecuteQueryOperator(
        task_id="count_views",
        sql="INSERT INTO page_views (page, views) SELECT page, n FROM hits_hourly "
        "ON DUPLICATE KEY UPDATE views = views + VALUES(views)",
    )
    SQLExecuteQueryOperator(task_id="replace_prices", sql="REPLACE INTO prices (sku, price) SELECT sku, price FROM price_feed")
    SQLExecuteQueryOperator(task_id="ignore_new_skus", sql="INSERT IGNORE INTO skus (sku) SELECT sku FROM stock_feed")
    SQLExecuteQueryOperator(
        task_id="log_sync",
        sql="INSERT INTO sync_log (ran_at, source) VALUES (NOW(), 'feed')",
    )
