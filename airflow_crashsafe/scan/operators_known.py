"""Provider operators judged by their arguments: loads, transfers, jobs (no source is read).

Each rule names the operator classes it knows (by class name anywhere in the MRO, so a team's
subclass is known too) and reads the arguments as the task holds them (rendered with the sample
run): ``write_disposition`` and ``configuration`` of BigQuery jobs, Redshift's ``method``,
``insert_args`` of ``SQLInsertRowsOperator``, a Databricks ``idempotency_token``, a Dataproc
``request_id``. ``get(name)`` gives an argument's value (None when absent), so a DAG file that
does not import can be judged from its literal arguments the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from airflow_crashsafe.scan.call_names import FIX_JOB
from airflow_crashsafe.scan.model import Finding, Reason, combine
from airflow_crashsafe.scan.sql import classify_sql
from airflow_crashsafe.scan.writes import FIX_APPEND, disposition_finding

__all__ = ["classify_known"]

Get = Callable[[str], Any]

_JOBS = {
    "EmrAddStepsOperator", "EmrCreateJobFlowOperator", "EmrServerlessStartJobOperator", "GlueJobOperator",
    "BatchOperator", "SageMakerTrainingOperator", "SageMakerProcessingOperator", "DbtCloudRunJobOperator",
    "AirbyteTriggerSyncOperator", "FivetranOperator", "StepFunctionStartExecutionOperator",
    "DataflowTemplatedJobStartOperator", "DataflowStartFlexTemplateOperator", "CloudRunExecuteJobOperator",
    "DatabricksRunNowOperator", "DatabricksSubmitRunOperator", "DataprocSubmitJobOperator",
    "DataprocCreateBatchOperator", "AzureDataFactoryRunPipelineOperator", "EmrContainerOperator",
}  # fmt: skip
#: Arguments that make a job submission idempotent (the service finds the job a token started).
_JOB_TOKENS = ("idempotency_token", "request_id", "client_request_token", "batch_id")
_OPAQUE = {
    "SparkSubmitOperator", "SSHOperator", "LambdaInvokeFunctionOperator", "SparkSqlOperator",
    "SparkJDBCOperator", "WinRMOperator", "DbtRunOperator", "DbtBuildOperator",
    "BeamRunPythonPipelineOperator",
}  # fmt: skip
_READS = {
    "S3ListOperator", "GCSListObjectsOperator", "S3ListPrefixesOperator", "BigQueryGetDataOperator",
    "BigQueryCheckOperator", "BigQueryValueCheckOperator", "ExternalTaskMarker",
    "BigQueryTableExistenceSensor",
}  # fmt: skip
_DELETES = {
    "S3DeleteObjectsOperator", "GCSDeleteObjectsOperator", "BigQueryDeleteTableOperator",
    "S3DeleteBucketOperator", "GCSDeleteBucketOperator", "BigQueryDeleteDatasetOperator",
}  # fmt: skip
_CREATES = {
    "BigQueryCreateEmptyTableOperator", "BigQueryCreateEmptyDatasetOperator", "S3CreateBucketOperator",
    "GCSCreateBucketOperator", "BigQueryCreateTableOperator",
}  # fmt: skip
_RANDOM = re.compile(r"uuid|now\(|utcnow|random|time\(\)|try_number", re.IGNORECASE)
_OBJECT_TARGETS = ("dest_key", "s3_key", "dest_s3_key", "destination_object", "dst", "dest_bucket_key",
                   "filename", "object_name", "remote_filepath", "dest_blob", "destination_path")  # fmt: skip


def _text(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def classify_known(names: list[str], get: Get, *, markers: tuple[str, ...] = ()) -> Finding | None:
    """The finding of a provider operator this module knows, None for one it does not."""
    name = next((n for n in names if _known(n)), None)
    if name is None:
        return None
    if name in _READS:
        return Finding("safe", "read_only", [Reason(f"{name} only reads")])
    if name in _DELETES:
        return Finding("safe", "delete", [Reason(f"{name}: deleting again removes nothing more")])
    if name in _CREATES:
        return Finding("safe", "ddl", [Reason(f"{name}: creating again fails or finds it there")])
    if name in _OPAQUE:
        return Finding(
            "unknown",
            "opaque_command",
            [Reason(f"{name} runs a program whose effect is not readable here")],
            "replay_safe(task, reason=...) if running it twice is harmless; "
            "otherwise make it key its writes by the run",
        )
    if name in _JOBS:
        token = next((t for t in _JOB_TOKENS if get(t)), None)
        if token is not None:
            return Finding(
                "safe", "job_keyed", [Reason(f"{name} submitted with {token}: a re-run finds the job")]
            )
        return Finding(
            "risky", "job_submission", [Reason(f"{name} starts the job again on a re-run")], FIX_JOB
        )
    return _RULES[name](name, get, markers)


def _known(name: str) -> bool:
    return (
        name in _RULES
        or name in _JOBS
        or name in _OPAQUE
        or name in _READS
        or name in _DELETES
        or name in _CREATES
    )


def _insert_rows(name: str, get: Get, markers: tuple[str, ...]) -> Finding:
    table = str(get("table_name") or get("table") or "?")
    insert_args = get("insert_args") or {}
    if isinstance(insert_args, dict) and insert_args.get("replace"):
        return Finding(
            "safe", "natural_key_merge", [Reason(f"{name} with replace=True upserts on the key", table)]
        )
    pre = get("preoperator")
    if pre:
        facts = classify_sql(
            ";\n".join(pre) if isinstance(pre, list | tuple) else str(pre),
            dialect=None,
            transactional=False,
            markers=markers,
        )
        if table in facts.cleared or any(t.split(".")[-1] == table.split(".")[-1] for t in facts.cleared):
            return Finding(
                "risky",
                "overwrite_not_atomic",
                [
                    Reason(
                        f"{name} clears {table} in its preoperator, then inserts in other transactions", table
                    )
                ],
                FIX_APPEND,
            )
    return Finding(
        "risky", "append", [Reason(f"{name} inserts the rows again on a re-run", table)], FIX_APPEND
    )


def _bigquery_job(name: str, get: Get, markers: tuple[str, ...]) -> Finding:
    config = get("configuration") or {}
    text = _text(config) + f" write_disposition={get('write_disposition')}"
    parts: list[Finding] = []
    query = config.get("query", {}) if isinstance(config, dict) else {}
    sql = query.get("query") if isinstance(query, dict) else None
    sql = sql or get("sql")
    if sql:
        facts = classify_sql(str(sql), dialect="bigquery", transactional=True, markers=markers)
        parts += facts.findings
    destination = (isinstance(query, dict) and query.get("destinationTable")) or get(
        "destination_dataset_table"
    )
    load = isinstance(config, dict) and "load" in config
    found = disposition_finding(text, appends_by_default=bool(load), evidence=name)
    if found is not None and (destination or load or "copy" in (config or {})):
        parts.append(found)
    if not parts:
        return Finding(
            "unknown", "unknown_operator", [Reason(f"{name}: its job configuration is not readable")]
        )
    return combine(parts, pure_category="read_only")


def _disposition(default_append: bool) -> Callable[[str, Get, tuple[str, ...]], Finding]:
    def rule(name: str, get: Get, markers: tuple[str, ...]) -> Finding:
        found = disposition_finding(
            f"write_disposition={get('write_disposition')}", appends_by_default=default_append, evidence=name
        )
        return found or Finding(
            "safe", "overwrite", [Reason(f"{name} fails on a table that holds rows", name)]
        )

    return rule


def _redshift(name: str, get: Get, markers: tuple[str, ...]) -> Finding:
    method = str(get("method") or "APPEND").upper()
    if method in {"REPLACE", "UPSERT"}:
        return Finding(
            "safe", "overwrite", [Reason(f"{name} with method={method!r} does not load rows twice")]
        )
    return Finding(
        "risky",
        "append",
        [Reason(f"{name} with method='APPEND' loads the files again on a re-run")],
        FIX_APPEND,
    )


def _stage_copy(name: str, get: Get, markers: tuple[str, ...]) -> Finding:
    options = _text(get("copy_options") or "")
    if re.search(r"FORCE\s*=\s*TRUE", options, re.IGNORECASE):
        return Finding(
            "risky", "append", [Reason(f"{name} with FORCE = TRUE loads the files again")], FIX_APPEND
        )
    return Finding(
        "safe", "load_once", [Reason(f"{name}: COPY INTO from a stage skips files it already loaded")]
    )


def _object_write(name: str, get: Get, markers: tuple[str, ...]) -> Finding:
    target = " ".join(str(get(k)) for k in _OBJECT_TARGETS if get(k))
    if _RANDOM.search(target):
        return Finding(
            "risky",
            "object_write_random",
            [Reason(f"{name} writes under a random or time-based name: a re-run writes another", target)],
            "name the object from the run ({{ ds }}) so a re-run overwrites it",
        )
    return Finding(
        "safe", "object_write_fixed", [Reason(f"{name} writes under a name fixed by the run", target)]
    )


def _athena(name: str, get: Get, markers: tuple[str, ...]) -> Finding:
    query = get("query")
    if not query:
        return Finding("unknown", "unknown_operator", [Reason(f"{name}: no query to read")])
    facts = classify_sql(str(query), dialect="trino", transactional=False, markers=markers)
    return combine(facts.findings, pure_category="read_only")


def _sftp(name: str, get: Get, markers: tuple[str, ...]) -> Finding:
    if str(get("operation") or "put").lower() == "get":
        return Finding("safe", "read_only", [Reason(f"{name} downloads a file")])
    return _object_write(name, get, markers)


_OBJECT_WRITERS = (
    "LocalFilesystemToS3Operator",
    "SqlToS3Operator",
    "S3CopyObjectOperator",
    "GCSToGCSOperator",
    "LocalFilesystemToGCSOperator",
    "PostgresToGCSOperator",
    "MySQLToGCSOperator",
    "BigQueryToGCSOperator",
    "GCSToS3Operator",
    "S3ToGCSOperator",
    "S3FileTransformOperator",
    "SFTPToS3Operator",
    "S3ToSFTPOperator",
    "LocalFilesystemToWasbOperator",
    "HttpToS3Operator",
    "SFTPToGCSOperator",
    "GCSToSFTPOperator",
)
_RULES: dict[str, Callable[[str, Get, tuple[str, ...]], Finding]] = {
    "SQLInsertRowsOperator": _insert_rows,
    "BigQueryInsertJobOperator": _bigquery_job,
    "BigQueryExecuteQueryOperator": _bigquery_job,
    "GCSToBigQueryOperator": _disposition(False),
    "BigQueryToBigQueryOperator": _disposition(False),
    "BigQueryInsertAllOperator": lambda n, g, m: Finding(
        "risky", "append", [Reason(f"{n} streams the rows in again on a re-run")], FIX_APPEND
    ),
    "S3ToRedshiftOperator": _redshift,
    "CopyFromExternalStageToSnowflakeOperator": _stage_copy,
    "S3ToSnowflakeOperator": _stage_copy,
    "AthenaOperator": _athena,
    "SFTPOperator": _sftp,
    **dict.fromkeys(_OBJECT_WRITERS, _object_write),
}  # fmt: skip
