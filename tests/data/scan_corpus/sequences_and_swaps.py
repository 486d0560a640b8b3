"""Dimension loads with sequences, counters and table swaps (Snowflake and PostgreSQL)."""

from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("sequences_and_swaps", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    SQLExecuteQueryOperator(
        task_id="swap_orders_live",
        conn_id="snowflake_dw",
        sql="ALTER TABLE analytics.orders SWAP WITH analytics.orders_staging",
    )
    SQLExecuteQueryOperator(
        task_id="rebuild_and_swap_orders",
        conn_id="snowflake_dw",
        sql=[
            "CREATE OR REPLACE TABLE analytics.orders_next AS SELECT * FROM raw.orders WHERE is_valid",
            "ALTER TABLE analytics.orders SWAP WITH analytics.orders_next",
        ],
    )
    SQLExecuteQueryOperator(
        task_id="merge_customer_dim_seq_key",
        conn_id="snowflake_dw",
        sql="""
            MERGE INTO analytics.dim_customer t
            USING (
                SELECT analytics.dim_customer_seq.NEXTVAL AS customer_sk, c.email, c.name
                FROM raw.customers c WHERE c.load_date = '{{ ds }}'
            ) s
            ON t.customer_sk = s.customer_sk
            WHEN MATCHED THEN UPDATE SET t.name = s.name
            WHEN NOT MATCHED THEN INSERT (customer_sk, email, name) VALUES (s.customer_sk, s.email, s.name)
        """,
    )
    SQLExecuteQueryOperator(
        task_id="merge_customer_dim_natural",
        conn_id="snowflake_dw",
        sql="""
            MERGE INTO analytics.dim_customer t
            USING (SELECT email, name FROM raw.customers WHERE load_date = '{{ ds }}') s
            ON t.email = s.email
            WHEN MATCHED THEN UPDATE SET t.name = s.name
            WHEN NOT MATCHED THEN INSERT (customer_sk, email, name)
                VALUES (analytics.dim_customer_seq.NEXTVAL, s.email, s.name)
        """,
    )
    SQLExecuteQueryOperator(
        task_id="merge_events_uuid_key",
        conn_id="postgres_dwh",
        sql="""
            MERGE INTO mart.events e
            USING (SELECT gen_random_uuid() AS event_id, payload FROM staging.events) s
            ON e.event_id = s.event_id
            WHEN NOT MATCHED THEN INSERT (event_id, payload) VALUES (s.event_id, s.payload)
        """,
    )
    SQLExecuteQueryOperator(
        task_id="bump_job_stats",
        conn_id="postgres_ops",
        sql="UPDATE ops.job_stats AS s SET runs = s.runs + 1, last_run = '{{ ds }}' WHERE s.job = 'nightly'",
    )
    SQLExecuteQueryOperator(
        task_id="advance_watermark",
        conn_id="postgres_ops",
        sql="UPDATE ops.watermarks SET loaded_until = GREATEST(loaded_until, '{{ ds }}'::date) WHERE source = 'orders'",
    )
    SQLExecuteQueryOperator(
        task_id="swap_parcels_guarded",
        conn_id="postgres_gis",
        sql=[
            "ALTER TABLE IF EXISTS parcels RENAME TO parcels_old",
            "ALTER TABLE IF EXISTS parcels_new RENAME TO parcels",
            "DROP TABLE IF EXISTS parcels_old CASCADE",
        ],
    )
    SQLExecuteQueryOperator(
        task_id="swap_zones_in_one_transaction",
        conn_id="postgres_gis",
        sql=[
            "ALTER TABLE zones RENAME TO zones_old",
            "ALTER TABLE zones_new RENAME TO zones",
            "DROP TABLE zones_old",
        ],
    )
    SQLExecuteQueryOperator(
        task_id="swap_stores_mysql",
        conn_id="mysql_shop",
        sql=["DROP TABLE IF EXISTS stores_old", "RENAME TABLE stores TO stores_old, stores_new TO stores"],
    )
