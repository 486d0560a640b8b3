"""Tables published by the team's own operators (plugins folder), as the GIS team writes them."""

from datetime import datetime

from airflow.sdk import DAG
from team_lib.operators import (
    LoadAuditOperator,
    PostgresTableSwapOperator,
    RebuildTableOperator,
    TableRowCountOperator,
)

with DAG(
    "custom_sql_operators",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["gis"],
):
    count_new = TableRowCountOperator(task_id="count_parcels_new", table="parcels_new")
    swap = PostgresTableSwapOperator(task_id="swap_parcels", table="parcels", postgres_conn_id="postgres_gis")
    rebuild = RebuildTableOperator(
        task_id="rebuild_zones",
        conn_id="snowflake_dw",
        table="analytics.zones",
        select_sql="SELECT zone_id, name, geom FROM raw.zones WHERE valid_to IS NULL",
    )
    audit = LoadAuditOperator(task_id="audit_parcels", table="ops.load_audit", source="parcels")
    count_new >> swap >> audit
    rebuild
