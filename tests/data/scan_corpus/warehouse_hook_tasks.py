"""Reporting refreshes through the team's WarehouseHook (search_path set by its run())."""

from datetime import datetime

from airflow.sdk import dag, task
from team_lib.warehouse import WarehouseHook


@dag(schedule="0 6 * * *", start_date=datetime(2024, 1, 1), catchup=False, tags=["reporting"])
def warehouse_hook_tasks():
    @task
    def publish_monthly_report():
        WarehouseHook(postgres_conn_id="postgres_dwh").publish("monthly_report")

    @task
    def check_freshness():
        return WarehouseHook(postgres_conn_id="postgres_dwh").latest_load("monthly_report")

    @task
    def refresh_daily_summary(ds=None):
        hook = WarehouseHook(postgres_conn_id="postgres_dwh")
        hook.run(
            """
            INSERT INTO daily_summary (day, orders, revenue)
            SELECT day, count(*), sum(amount) FROM orders WHERE day = %(day)s GROUP BY day
            ON CONFLICT (day) DO UPDATE SET orders = excluded.orders, revenue = excluded.revenue
            """,
            parameters={"day": ds},
        )

    @task
    def note_refresh():
        WarehouseHook(postgres_conn_id="postgres_dwh").record_refresh("daily_summary")

    check_freshness() >> publish_monthly_report()
    refresh_daily_summary() >> note_refresh()


warehouse_hook_tasks()
