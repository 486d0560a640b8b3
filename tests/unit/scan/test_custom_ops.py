"""A team's own operators and hooks are read: SQL built in execute(), template fields, partials, run()."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.providers.slack.operators.slack_webhook import SlackWebhookOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, BaseOperator

from airflow_crashsafe.scan.model import Finding
from airflow_crashsafe.scan.rules import classify_task


class SwapOperator(SQLExecuteQueryOperator):
    """Built the way the issue's repository did: the swap set in execute(), then the parent runs it."""

    template_fields = (*SQLExecuteQueryOperator.template_fields, "table")

    def __init__(self, *, table: str, **kwargs: Any) -> None:
        super().__init__(sql="SELECT 1", **kwargs)
        self.table = table

    def execute(self, context: Any) -> Any:
        self.sql = [
            f"ALTER TABLE IF EXISTS {self.table} RENAME TO {self.table}_old",
            f"ALTER TABLE IF EXISTS {self.table}_new RENAME TO {self.table}",
            f"DROP TABLE IF EXISTS {self.table}_old",
        ]
        return super().execute(context)


class RebuildOperator(SQLExecuteQueryOperator):
    def __init__(self, *, table: str, **kwargs: Any) -> None:
        super().__init__(sql="SELECT 1", **kwargs)
        self.table = table

    def execute(self, context: Any) -> Any:
        self.sql = f"CREATE OR REPLACE TABLE {self.table} AS SELECT * FROM raw.source"
        return super().execute(context)


class RuntimeSqlOperator(SQLExecuteQueryOperator):
    def execute(self, context: Any) -> Any:
        self.sql = self._statements_from(context)
        return super().execute(context)

    def _statements_from(self, context: Any) -> list[str]:
        return list(context["params"]["statements"])


class AuditOperator(BaseOperator):
    template_fields = ("table",)

    def __init__(self, *, table: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table

    def execute(self, context: Any) -> None:
        PostgresHook(postgres_conn_id="pg").run(f"INSERT INTO {self.table} (at) VALUES (now())")


class SearchPathHook(PostgresHook):
    def run(
        self, sql: Any, autocommit: bool = False, parameters: Any = None, handler: Any = None, **kw: Any
    ) -> Any:
        statements = [sql] if isinstance(sql, str) else list(sql)
        return super().run(
            ["SET search_path TO mart", *statements], autocommit=autocommit, parameters=parameters
        )

    def publish(self, table: str) -> None:
        self.run([f"DROP TABLE IF EXISTS {table}", f"ALTER TABLE IF EXISTS {table}_next RENAME TO {table}"])


class TeamPostgresOperator(BaseOperator):
    """The team's own SQL operator (not a provider's): its execute runs self.sql through a hook."""

    template_fields = ("sql",)

    def __init__(self, *, sql: Any = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sql = sql

    def execute(self, context: Any) -> None:
        self.hook = PostgresHook(postgres_conn_id="pg")
        self.hook.run(self.sql)


class TeamRenameOperator(TeamPostgresOperator):
    def __init__(self, *, table: str, **kwargs: Any) -> None:
        super().__init__(sql="", **kwargs)
        self.table = table

    def execute(self, context: Any) -> None:
        self.sql = []
        for statement in (
            "ALTER TABLE IF EXISTS {live} RENAME TO {backup}",
            "ALTER TABLE IF EXISTS {fresh} RENAME TO {live}",
            "DROP TABLE IF EXISTS {backup}",
        ):
            self.sql.append(
                statement.format(live=self.table, fresh=f"{self.table}_new", backup=f"{self.table}_old")
            )
        super().execute(context)


class TeamSlackOperator(SlackWebhookOperator):
    """The team's notifier: a subclass whose own name says nothing."""


class RetryingTrigger(TriggerDagRunOperator):
    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except Exception:
            self.trigger_run_id = f"{self.trigger_run_id}_at_{datetime.now().isoformat()}"
            return super().execute(context)


def run_sql(sql: str) -> None:
    PostgresHook(postgres_conn_id="pg").run(sql)


def _upsert_through_team_hook() -> None:
    SearchPathHook(postgres_conn_id="pg").run(
        "INSERT INTO daily (day, n) VALUES ('x', 1) ON CONFLICT (day) DO NOTHING"
    )


def _publish_through_team_hook() -> None:
    SearchPathHook(postgres_conn_id="pg").publish("monthly_report")


def judge(factory: Any, **kwargs: Any) -> Finding:
    with DAG(
        "custom_ops", schedule=None, start_date=datetime(2024, 1, 1), params={"target": "ops.audit"}
    ) as dag:
        task = factory(task_id="t", **kwargs)
    return classify_task(task, dag)


def test_sql_set_in_execute_is_judged_not_the_init_sql() -> None:
    """The swap assigned to self.sql before super().execute() is what runs: risky, not read-only."""
    found = judge(SwapOperator, conn_id="postgres_gis", table="parcels")
    assert (found.verdict, found.category) == ("risky", "table_swap")
    assert "parcels_new" in found.reasons[0].why


def test_sql_set_before_a_team_parents_execute_is_judged() -> None:
    """super().execute() into the team's own parent operator is walked with the fields the child set."""
    found = judge(TeamRenameOperator, table="parcels")
    assert (found.verdict, found.category) == ("risky", "table_swap")


def test_rebuild_set_in_execute_is_safe() -> None:
    """A CREATE OR REPLACE set in execute() is idempotent DDL."""
    assert judge(RebuildOperator, conn_id="snowflake_dw", table="a.zones").verdict == "safe"


def test_sql_built_from_run_time_data_is_unknown() -> None:
    """self.sql computed from the context at run time cannot be read: unknown, never safe."""
    assert judge(RuntimeSqlOperator, conn_id="postgres_dwh", sql="SELECT 1").verdict == "unknown"


def test_template_field_is_rendered_into_the_sql() -> None:
    """self.table is the task's template field rendered with the sample run: the INSERT names it."""
    found = judge(AuditOperator, table="{{ params.target }}")
    assert (found.verdict, found.category) == ("risky", "append")
    assert "ops.audit" in found.reasons[0].evidence


def test_partial_callable_is_read_with_its_bound_sql() -> None:
    """functools.partial(run_sql, sql=...) is run_sql with that SQL: an INSERT is an append."""
    append = judge(
        PythonOperator, python_callable=functools.partial(run_sql, sql="INSERT INTO a SELECT * FROM b")
    )
    read = judge(PythonOperator, python_callable=functools.partial(run_sql, "SELECT count(*) FROM b"))
    assert (append.verdict, append.category) == ("risky", "append")
    assert read.verdict == "safe"


def test_op_kwargs_sql_is_rendered_and_read() -> None:
    """SQL in op_kwargs is rendered with the sample run: a DELETE of the run's day then INSERT is safe."""
    sql = "DELETE FROM m.d WHERE day = '{{ ds }}'; INSERT INTO m.d SELECT * FROM s WHERE day = '{{ ds }}'"
    found = judge(PythonOperator, python_callable=run_sql, op_kwargs={"sql": sql})
    assert (found.verdict, found.category) == ("safe", "partition_overwrite")


def test_hook_overriding_run_is_given_the_callers_sql() -> None:
    """A hook subclass's run() passes the caller's SQL on: an upsert through it stays a keyed upsert."""
    found = judge(PythonOperator, python_callable=_upsert_through_team_hook)
    assert (found.verdict, found.category) == ("safe", "natural_key_merge")


def test_hook_helper_swapping_tables_is_risky() -> None:
    """A hook method that drops the live table and renames another in (guarded) is a swap: risky."""
    found = judge(PythonOperator, python_callable=_publish_through_team_hook)
    assert (found.verdict, found.category) == ("risky", "table_swap")


def test_subclass_of_a_notifier_is_a_notification() -> None:
    """A team's subclass of a Slack operator sends again on a re-run, whatever it is called."""
    found = judge(TeamSlackOperator, slack_webhook_conn_id="slack", message="done")
    assert (found.verdict, found.category) == ("risky", "notification")


def test_trigger_that_retries_with_a_timestamp_is_risky() -> None:
    """A trigger whose execute() retries under a time-stamped run id starts a second run on a re-run."""
    found = judge(
        RetryingTrigger,
        trigger_dag_id="rollout",
        trigger_run_id="{{ run_id }}",
        skip_when_already_exists=True,
    )
    assert (found.verdict, found.category) == ("risky", "trigger_dag")
