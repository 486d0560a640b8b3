"""Our team's operators (the plugins folder of the warehouse repository)."""

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import BaseOperator


class PostgresTableSwapOperator(SQLExecuteQueryOperator):
    """Publish <table>_new as <table>: the old version is kept as <table>_old, then dropped."""

    template_fields = (*SQLExecuteQueryOperator.template_fields, "table")

    def __init__(self, *, table: str, postgres_conn_id: str = "postgres_default", cascade: bool = False, **kwargs):
        super().__init__(sql="", conn_id=postgres_conn_id, **kwargs)
        self.table = table
        self.cascade = cascade

    def execute(self, context):
        backup = f"{self.table}_old"
        drop = "DROP TABLE IF EXISTS {}" + (" CASCADE" if self.cascade else "")
        self.sql = []
        self.sql.append(f"ALTER TABLE IF EXISTS {self.table} RENAME TO {backup}")
        self.sql.append(f"ALTER TABLE IF EXISTS {self.table}_new RENAME TO {self.table}")
        self.sql.append(drop.format(backup))
        self.log.info("swapping %s", self.table)
        return super().execute(context)


class RebuildTableOperator(SQLExecuteQueryOperator):
    """Rebuild a table from a query into <table>_next, then swap it in (Snowflake)."""

    template_fields = (*SQLExecuteQueryOperator.template_fields, "table", "select_sql")

    def __init__(self, *, table: str, select_sql: str, **kwargs):
        super().__init__(sql="SELECT 1", **kwargs)
        self.table = table
        self.select_sql = select_sql

    def execute(self, context):
        self.sql = [
            f"CREATE OR REPLACE TABLE {self.table}_next AS {self.select_sql}",
            f"ALTER TABLE {self.table} SWAP WITH {self.table}_next",
            f"DROP TABLE IF EXISTS {self.table}_next",
        ]
        super().execute(context)


class LoadAuditOperator(BaseOperator):
    """Writes one line per load into the audit table."""

    template_fields = ("table", "source")

    def __init__(self, *, table: str, source: str, conn_id: str = "postgres_dwh", **kwargs):
        super().__init__(**kwargs)
        self.table = table
        self.source = source
        self.conn_id = conn_id

    def execute(self, context):
        hook = PostgresHook(postgres_conn_id=self.conn_id)
        hook.run(
            f"INSERT INTO {self.table} (source, loaded_for, loaded_at) VALUES (%s, %s, now())",
            parameters=(self.source, context["ds"]),
        )


class TableRowCountOperator(BaseOperator):
    """Logs how many rows a table holds for the run's day."""

    template_fields = ("table",)

    def __init__(self, *, table: str, conn_id: str = "postgres_dwh", **kwargs):
        super().__init__(**kwargs)
        self.table = table
        self.conn_id = conn_id

    def execute(self, context):
        hook = PostgresHook(postgres_conn_id=self.conn_id)
        count = hook.get_first(f"SELECT count(*) FROM {self.table} WHERE day = %s", parameters=(context["ds"],))
        self.log.info("%s holds %s rows", self.table, count)
        return count
