"""Where the import paths Airflow 3 removed live now, so a folder mid-upgrade is read as a whole.

Static analysis (docs/scan.md) resolves each imported operator name through these tables before
it looks the class up: an Airflow 1.10/2 module path (``airflow.operators.dummy``,
``airflow.operators.bash_operator``, ``airflow.contrib.*``, ``airflow.hooks.postgres_hook``) maps
to its Airflow 3 module, and a class Airflow 3 renamed or folded into another (``DummyOperator``,
``PostgresOperator``, ``SimpleHttpOperator``) maps to the class whose behaviour it has, with the
argument names that changed (``postgres_conn_id`` is ``conn_id``). The tables cover what Airflow
3's own deprecation shims and its providers' changelogs name; a path missing here is looked up by
its class name, and a class no table knows is ``unknown``.

The scan does not install these as an import shim that would let such a file import for real:
Airflow 3 itself does not import it, so the scan must say so (the gate fails), and making it
import would also need the removed arguments (``schedule_interval``, ``provide_context``,
``days_ago``) patched into Airflow's own classes, each a guess about what the author meant.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MODULES", "RENAMED", "Home", "airflow3_home"]

_STD = "airflow.providers.standard"
_SQL = "airflow.providers.common.sql.operators.sql"
_SQL_SENSOR = "airflow.providers.common.sql.sensors.sql"

#: Airflow 1.10 / 2 module → its Airflow 3 module (the class names are kept, unless RENAMED says).
MODULES: dict[str, str] = {
    "airflow.operators.dummy": f"{_STD}.operators.empty",
    "airflow.operators.dummy_operator": f"{_STD}.operators.empty",
    "airflow.operators.empty": f"{_STD}.operators.empty",
    "airflow.operators.bash": f"{_STD}.operators.bash",
    "airflow.operators.bash_operator": f"{_STD}.operators.bash",
    "airflow.operators.python": f"{_STD}.operators.python",
    "airflow.operators.python_operator": f"{_STD}.operators.python",
    "airflow.operators.datetime": f"{_STD}.operators.datetime",
    "airflow.operators.weekday": f"{_STD}.operators.weekday",
    "airflow.operators.latest_only": f"{_STD}.operators.latest_only",
    "airflow.operators.latest_only_operator": f"{_STD}.operators.latest_only",
    "airflow.operators.trigger_dagrun": f"{_STD}.operators.trigger_dagrun",
    "airflow.operators.dagrun_operator": f"{_STD}.operators.trigger_dagrun",
    "airflow.operators.branch": "airflow.sdk.bases.branch",
    "airflow.operators.branch_operator": "airflow.sdk.bases.branch",
    "airflow.operators.email": "airflow.providers.smtp.operators.smtp",
    "airflow.operators.email_operator": "airflow.providers.smtp.operators.smtp",
    "airflow.operators.sql": _SQL,
    "airflow.operators.check_operator": _SQL,
    "airflow.operators.sql_branch_operator": _SQL,
    "airflow.operators.generic_transfer": "airflow.providers.common.sql.operators.generic_transfer",
    "airflow.operators.postgres_operator": _SQL,
    "airflow.operators.mysql_operator": _SQL,
    "airflow.operators.mssql_operator": _SQL,
    "airflow.operators.oracle_operator": _SQL,
    "airflow.operators.sqlite_operator": _SQL,
    "airflow.operators.jdbc_operator": _SQL,
    "airflow.operators.presto_check_operator": _SQL,
    "airflow.operators.http_operator": "airflow.providers.http.operators.http",
    "airflow.operators.docker_operator": "airflow.providers.docker.operators.docker",
    "airflow.operators.slack_operator": "airflow.providers.slack.operators.slack",
    "airflow.operators.s3_file_transform_operator": "airflow.providers.amazon.aws.operators.s3",
    "airflow.providers.postgres.operators.postgres": _SQL,
    "airflow.providers.mysql.operators.mysql": _SQL,
    "airflow.providers.sqlite.operators.sqlite": _SQL,
    "airflow.providers.microsoft.mssql.operators.mssql": _SQL,
    "airflow.providers.oracle.operators.oracle": _SQL,
    "airflow.providers.trino.operators.trino": _SQL,
    "airflow.providers.vertica.operators.vertica": _SQL,
    "airflow.providers.jdbc.operators.jdbc": _SQL,
    "airflow.providers.exasol.operators.exasol": _SQL,
    "airflow.providers.amazon.aws.operators.redshift_sql": _SQL,
    "airflow.sensors.base": "airflow.sdk.bases.sensor",
    "airflow.sensors.base_sensor_operator": "airflow.sdk.bases.sensor",
    "airflow.sensors.external_task": f"{_STD}.sensors.external_task",
    "airflow.sensors.external_task_sensor": f"{_STD}.sensors.external_task",
    "airflow.sensors.time_delta": f"{_STD}.sensors.time_delta",
    "airflow.sensors.time_delta_sensor": f"{_STD}.sensors.time_delta",
    "airflow.sensors.time_sensor": f"{_STD}.sensors.time",
    "airflow.sensors.date_time": f"{_STD}.sensors.date_time",
    "airflow.sensors.date_time_sensor": f"{_STD}.sensors.date_time",
    "airflow.sensors.filesystem": f"{_STD}.sensors.filesystem",
    "airflow.sensors.python": f"{_STD}.sensors.python",
    "airflow.sensors.bash": f"{_STD}.sensors.bash",
    "airflow.sensors.weekday": f"{_STD}.sensors.weekday",
    "airflow.sensors.day_of_week_sensor": f"{_STD}.sensors.weekday",
    "airflow.sensors.sql": _SQL_SENSOR,
    "airflow.sensors.sql_sensor": _SQL_SENSOR,
    "airflow.sensors.http_sensor": "airflow.providers.http.sensors.http",
    "airflow.sensors.s3_key_sensor": "airflow.providers.amazon.aws.sensors.s3",
    "airflow.hooks.base": "airflow.sdk.bases.hook",
    "airflow.hooks.base_hook": "airflow.sdk.bases.hook",
    "airflow.hooks.dbapi": "airflow.providers.common.sql.hooks.sql",
    "airflow.hooks.dbapi_hook": "airflow.providers.common.sql.hooks.sql",
    "airflow.hooks.postgres_hook": "airflow.providers.postgres.hooks.postgres",
    "airflow.hooks.mysql_hook": "airflow.providers.mysql.hooks.mysql",
    "airflow.hooks.sqlite_hook": "airflow.providers.sqlite.hooks.sqlite",
    "airflow.hooks.http_hook": "airflow.providers.http.hooks.http",
    "airflow.hooks.S3_hook": "airflow.providers.amazon.aws.hooks.s3",
    "airflow.hooks.subprocess": f"{_STD}.hooks.subprocess",
    "airflow.models.baseoperator": "airflow.sdk.bases.operator",
    "airflow.models.dag": "airflow.sdk",
    "airflow.decorators": "airflow.sdk",
    "airflow.utils.task_group": "airflow.sdk",
    "airflow.contrib.operators.bigquery_operator": "airflow.providers.google.cloud.operators.bigquery",
    "airflow.contrib.operators.kubernetes_pod_operator": ("airflow.providers.cncf.kubernetes.operators.pod"),
    "airflow.contrib.operators.ssh_operator": "airflow.providers.ssh.operators.ssh",
    "airflow.contrib.operators.slack_webhook_operator": "airflow.providers.slack.operators.slack_webhook",
    "airflow.contrib.operators.snowflake_operator": _SQL,
    "airflow.contrib.sensors.file_sensor": f"{_STD}.sensors.filesystem",
    "airflow.contrib.hooks.ssh_hook": "airflow.providers.ssh.hooks.ssh",
}


@dataclass(frozen=True)
class Home:
    """An Airflow 3 class a removed or renamed one behaves as, and the arguments that changed name."""

    module: str
    name: str
    arguments: dict[str, str] = field(default_factory=dict)


def _sql(conn_arg: str) -> Home:
    return Home(_SQL, "SQLExecuteQueryOperator", {conn_arg: "conn_id"})


#: Class names Airflow 3 (or its providers) removed, and provider classes that are thin subclasses
#: of a common one, with the class that does the same work where the scan runs.
RENAMED: dict[str, Home] = {
    "DummyOperator": Home(f"{_STD}.operators.empty", "EmptyOperator"),
    "SimpleHttpOperator": Home("airflow.providers.http.operators.http", "HttpOperator"),
    "PostgresOperator": _sql("postgres_conn_id"),
    "MySqlOperator": _sql("mysql_conn_id"),
    "MsSqlOperator": _sql("mssql_conn_id"),
    "SqliteOperator": _sql("sqlite_conn_id"),
    "OracleOperator": _sql("oracle_conn_id"),
    "TrinoOperator": _sql("trino_conn_id"),
    "VerticaOperator": _sql("vertica_conn_id"),
    "JdbcOperator": _sql("jdbc_conn_id"),
    "ExasolOperator": _sql("exasol_conn_id"),
    "SnowflakeOperator": _sql("snowflake_conn_id"),
    "RedshiftSQLOperator": _sql("redshift_conn_id"),
    "DatabricksSqlOperator": _sql("databricks_conn_id"),
    "CheckOperator": Home(_SQL, "SQLCheckOperator"),
    "ValueCheckOperator": Home(_SQL, "SQLValueCheckOperator"),
    "IntervalCheckOperator": Home(_SQL, "SQLIntervalCheckOperator"),
    "SqlSensor": Home(_SQL_SENSOR, "SqlSensor"),
    "BaseSensorOperator": Home("airflow.sdk.bases.sensor", "BaseSensorOperator"),
    "BaseOperator": Home("airflow.sdk.bases.operator", "BaseOperator"),
    "BaseHook": Home("airflow.sdk.bases.hook", "BaseHook"),
    "DbApiHook": Home("airflow.providers.common.sql.hooks.sql", "DbApiHook"),
    "BaseBranchOperator": Home("airflow.sdk.bases.branch", "BaseBranchOperator"),
    "TaskGroup": Home("airflow.sdk", "TaskGroup"),
    "DAG": Home("airflow.sdk", "DAG"),
}


def airflow3_home(module: str, name: str) -> list[Home]:
    """Where ``module.name`` may live in Airflow 3, the most specific guess first."""
    homes: list[Home] = []
    renamed = RENAMED.get(name)
    if renamed is not None:
        homes.append(renamed)
    moved = MODULES.get(module)
    if moved is not None:
        homes.append(Home(moved, name))
    return homes
