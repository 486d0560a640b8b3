"""The warehouse hook every DAG uses: the reporting search_path on every statement, and helpers."""

from airflow.providers.postgres.hooks.postgres import PostgresHook


class WarehouseHook(PostgresHook):
    def run(self, sql, autocommit=False, parameters=None, handler=None, **kwargs):
        statements = [sql] if isinstance(sql, str) else list(sql)
        return super().run(
            ["SET search_path TO reporting, public", *statements],
            autocommit=autocommit,
            parameters=parameters,
            handler=handler,
            **kwargs,
        )

    def publish(self, table: str) -> None:
        """Swap the freshly built <table>_next in as <table>."""
        self.run(
            [f"DROP TABLE IF EXISTS {table}", f"ALTER TABLE IF EXISTS {table}_next RENAME TO {table}"],
            autocommit=True,
        )

    def latest_load(self, table: str):
        return self.get_first(f"SELECT max(loaded_at) FROM {table}")

    def record_refresh(self, name: str) -> None:
        self.run("INSERT INTO refresh_log (name, refreshed_at) VALUES (%s, now())", parameters=(name,))


def run_statement(sql: str, conn_id: str = "postgres_dwh"):
    """Run one SQL string (several statements allowed) in one transaction."""
    return PostgresHook(postgres_conn_id=conn_id).run(sql)
