"""What the names of calls mean to the scan: which clients, methods and arguments reach outside.

Data only, read by :mod:`.exprs` and :mod:`.calls`; extend these sets to teach the scan a library.
"""

from __future__ import annotations

import re

__all__ = [
    "FIX_EFFECT",
    "FIX_HTTP",
    "FIX_JOB",
    "FIX_SQL",
    "HOOK_DIALECTS",
    "HTTP_BASE",
    "HTTP_MUTATING",
    "JOB_ATTRS",
    "JOB_TOKENS",
    "NOTIFY_ATTRS",
    "OBJECT_ATTRS",
    "OPAQUE",
    "PROTECTIONS",
    "PUBLISH_ATTRS",
    "RANDOM",
    "READ_ATTRS",
    "RUN_SCOPED",
    "SQL_BASE",
]

RUN_SCOPED = frozenset(
    {
        "ds",
        "ds_nodash",
        "ts",
        "ts_nodash",
        "logical_date",
        "data_interval_start",
        "data_interval_end",
        "run_id",
        "dag_run",
        "params",
        "execution_date",
        "partition",
        "day",
    }
)
RANDOM = re.compile(
    r"\b(uuid\.uuid[14]|uuid[14]|time\.time|time_ns|datetime\.(?:now|utcnow)|\.now\(|\.utcnow\(|random\.|secrets\.|token_hex|"
    r"ti\.id|try_number|os\.getpid|mkstemp)",
)
HTTP_BASE = ("requests", "httpx", "session", "client", "http", "api", "urllib", "sess", "conn")
HTTP_MUTATING = {"post", "put", "patch", "delete"}
SQL_BASE = (
    "cur",
    "hook",
    "conn",
    "db",
    "engine",
    "session",
    "sql",
    "tx",
    "warehouse",
    "pg",
    "mysql",
    "snow",
)
NOTIFY_ATTRS = {
    "sendmail",
    "send_email",
    "send_email_smtp",
    "chat_postMessage",
    "chat_postEphemeral",
    "files_upload",
    "files_upload_v2",
}
PUBLISH_ATTRS = {
    "publish",
    "basic_publish",
    "produce",
    "send_message_batch",
    "put_record",
    "put_records",
    "put_events",
    "send_messages",
    "xadd",
    "lpush",
    "rpush",
}
OBJECT_ATTRS = {
    "put_object",
    "upload_file",
    "upload_fileobj",
    "load_string",
    "load_file",
    "load_bytes",
    "load_file_obj",
    "upload_from_string",
    "upload_from_filename",
    "upload_from_file",
    "upload_blob",
    "to_parquet",
    "to_csv",
    "write_deltalake",
    "write_table",
    "put",
    "copy_object",
    "copy_blob",
    "rewrite",
    "compose",
}
JOB_ATTRS = {
    "submit_job",
    "run_job_flow",
    "start_job_run",
    "create_job",
    "start_pipeline_execution",
    "run_now",
    "submit_run",
    "start_execution",
    "start_query_execution",
    "create_batch",
    "create_training_job",
    "start_build",
    "trigger_dag",
}
JOB_TOKENS = re.compile(
    r"client_?token|client_request_token|idempotency|request_id|requestid|clientrequesttoken", re.IGNORECASE
)
READ_ATTRS = {
    "get_records",
    "get_first",
    "get_pandas_df",
    "get_df",
    "read_sql",
    "read_sql_query",
    "fetchall",
    "fetchone",
    "get",
    "head",
    "options",
}
OPAQUE = {
    "subprocess.run",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "subprocess.Popen",
    "os.system",
    "os.popen",
}
PROTECTIONS = ("effect", "fenced_transaction")
HOOK_DIALECTS = {
    "postgres": "postgres",
    "mysql": "mysql",
    "snowflake": "snowflake",
    "bigquery": "bigquery",
    "sqlite": "sqlite",
    "redshift": "redshift",
    "mssql": "tsql",
    "trino": "trino",
}

FIX_EFFECT = (
    'wrap the call: with effect("{task}", payload=...) as fx: if fx.pending: ...; fx.done(result) '
    "(airflow_crashsafe.effects.effect), passing fx.key to the target if it takes one"
)
FIX_HTTP = (
    'wrap the call: with effect("{task}", payload=<the body>) as fx: if fx.pending: <the call, with '
    'headers={{"Idempotency-Key": fx.key}}>; fx.done(<what it returned>) (airflow_crashsafe.effects.effect); '
    "or send it with IdempotentHttpOperator(http_conn_id=..., endpoint=..., method=..., json=<the body>)"
)
FIX_SQL = (
    'run it inside fenced_transaction(conn_id, "<target table>") as tx '
    "(airflow_crashsafe.fenced_transaction), "
    "writing with MERGE/ON CONFLICT on the natural key or DELETE of the run's partition + INSERT"
)
FIX_JOB = (
    "submit with a client token derived from the run (airflow_crashsafe.effects.idempotency_key(...)), "
    "or use CrashsafeResumableJobMixin"
)
