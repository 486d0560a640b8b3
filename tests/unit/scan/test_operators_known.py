"""Provider operators judged by their arguments: loads by disposition, jobs by token, inserts by conflicts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from airflow.providers.common.sql.operators.sql import SQLInsertRowsOperator
from airflow.sdk import DAG

from airflow_crashsafe.scan.operators_known import classify_known
from airflow_crashsafe.scan.rules import classify_task

RUN = ("2031-07-14",)


def known(name: str, **args: Any) -> tuple[str, str] | None:
    found = classify_known([name, "BaseOperator"], args.get, markers=RUN)
    return None if found is None else (found.verdict, found.category)


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        (
            "BigQueryInsertJobOperator",
            {"configuration": {"load": {"sourceUris": ["gs://b/x"]}}},
            ("risky", "append"),
        ),
        (
            "BigQueryInsertJobOperator",
            {"configuration": {"load": {"sourceUris": ["gs://b/x"], "writeDisposition": "WRITE_TRUNCATE"}}},
            ("safe", "overwrite"),
        ),
        (
            "BigQueryInsertJobOperator",
            {
                "configuration": {
                    "query": {"query": "INSERT INTO d.t SELECT * FROM d.s", "useLegacySql": False}
                }
            },
            ("risky", "append"),
        ),
        (
            "BigQueryInsertJobOperator",
            {
                "configuration": {
                    "query": {
                        "query": "SELECT * FROM d.s",
                        "destinationTable": {"datasetId": "d", "tableId": "t"},
                        "writeDisposition": "WRITE_APPEND",
                    }
                }
            },
            ("risky", "append"),
        ),
        (
            "BigQueryInsertJobOperator",
            {"configuration": {"query": {"query": "SELECT 1"}}},
            ("safe", "read_only"),
        ),
        ("GCSToBigQueryOperator", {"write_disposition": "WRITE_APPEND"}, ("risky", "append")),
        ("GCSToBigQueryOperator", {}, ("safe", "overwrite")),
        ("S3ToRedshiftOperator", {}, ("risky", "append")),
        ("S3ToRedshiftOperator", {"method": "UPSERT"}, ("safe", "overwrite")),
        ("CopyFromExternalStageToSnowflakeOperator", {}, ("safe", "load_once")),
        ("CopyFromExternalStageToSnowflakeOperator", {"copy_options": "FORCE = TRUE"}, ("risky", "append")),
        ("DatabricksRunNowOperator", {"job_id": 1}, ("risky", "job_submission")),
        (
            "DatabricksRunNowOperator",
            {"job_id": 1, "idempotency_token": "run-2031-07-14"},
            ("safe", "job_keyed"),
        ),
        ("DataprocSubmitJobOperator", {"request_id": "r-2031-07-14"}, ("safe", "job_keyed")),
        ("LambdaInvokeFunctionOperator", {}, ("unknown", "opaque_command")),
        ("S3DeleteObjectsOperator", {}, ("safe", "delete")),
        (
            "LocalFilesystemToS3Operator",
            {"dest_key": "exports/2031-07-14/x.csv"},
            ("safe", "object_write_fixed"),
        ),
        ("AthenaOperator", {"query": "SELECT count(*) FROM t"}, ("safe", "read_only")),
        ("SomeNewVendorOperator", {}, None),
    ],
)
def test_known_provider_operators(name: str, args: dict[str, Any], expected: tuple[str, str] | None) -> None:
    """Each known operator's arguments decide; an operator no rule knows gives None (unknown upstream)."""
    assert known(name, **args) == expected


def insert_rows(**kwargs: Any) -> tuple[str, str]:
    with DAG("insert_rows", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        task = SQLInsertRowsOperator(
            task_id="t", conn_id="postgres_dwh", table_name="mart.t", rows=[(1,)], **kwargs
        )
    found = classify_task(task, dag)
    return found.verdict, found.category


def test_sql_insert_rows_operator_appends() -> None:
    """SQLInsertRowsOperator inserts again on a re-run, unless insert_args asks to replace on the key."""
    assert insert_rows() == ("risky", "append")
    assert insert_rows(insert_args={"replace": True, "replace_index": "id"}) == ("safe", "natural_key_merge")


def test_sql_insert_rows_operator_with_a_clearing_preoperator_is_not_atomic() -> None:
    """A preoperator DELETE then the inserts run in separate transactions: two attempts can both insert."""
    found = insert_rows(preoperator="DELETE FROM mart.t WHERE day = '{{ ds }}'")
    assert found == ("risky", "overwrite_not_atomic")
