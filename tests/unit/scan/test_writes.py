"""Loads by disposition and file writes by mode: append is risky, replace is safe, whatever the library."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.scan.model import combine
from airflow_crashsafe.scan.python_code import analyze_callable

RUN = ["2031-07-14"]


def _bq_load_default(uri: str) -> None:
    from google.cloud import bigquery  # type: ignore[import-not-found]

    bigquery.Client().load_table_from_uri(uri, "p.raw.events").result()


def _bq_load_append_enum(frame: Any) -> None:
    from google.cloud import bigquery  # type: ignore[import-not-found]

    config = bigquery.LoadJobConfig(write_disposition=bigquery.WriteDisposition.WRITE_APPEND)
    bigquery.Client().load_table_from_dataframe(frame, "p.raw.events", job_config=config)


def _bq_load_truncate_attribute(uri: str) -> None:
    from google.cloud import bigquery  # type: ignore[import-not-found]

    config = bigquery.LoadJobConfig()
    config.write_disposition = "WRITE_TRUNCATE"
    bigquery.Client().load_table_from_uri(uri, "p.raw.events$20310714", job_config=config)


def _bq_query_append() -> None:
    from google.cloud import bigquery  # type: ignore[import-not-found]

    config = bigquery.QueryJobConfig(destination="p.mart.daily", write_disposition="WRITE_APPEND")
    bigquery.Client().query("SELECT 1 AS x", job_config=config).result()


def _bq_copy_default() -> None:
    from google.cloud import bigquery  # type: ignore[import-not-found]

    bigquery.Client().copy_table("p.raw.a", "p.raw.b")


def _bq_stream(rows: list) -> None:
    from google.cloud import bigquery  # type: ignore[import-not-found]

    bigquery.Client().insert_rows_json("p.raw.events", rows)


def _gbq_append(frame: Any) -> None:
    frame.to_gbq("raw.clicks", project_id="p", if_exists="append")


def _gbq_replace(frame: Any) -> None:
    frame.to_gbq("raw.clicks", project_id="p", if_exists="replace")


def _sql_append(frame: Any, engine: Any) -> None:
    frame.to_sql("visits", engine, if_exists="append")


def _write_pandas_default(conn: Any, frame: Any) -> None:
    from snowflake.connector.pandas_tools import write_pandas

    write_pandas(conn, frame, "EVENTS")


def _write_pandas_overwrite(conn: Any, frame: Any) -> None:
    from snowflake.connector.pandas_tools import write_pandas

    write_pandas(conn, frame, "EVENTS", overwrite=True)


def _spark_append(df: Any) -> None:
    df.write.mode("append").saveAsTable("lake.events")


def _spark_overwrite(df: Any, ds: str) -> None:
    df.write.format("parquet").mode("overwrite").save(f"s3a://lake/events/dt={ds}")


def _spark_insert_into(df: Any) -> None:
    df.write.insertInto("lake.events")


def _delta_append(frame: Any) -> None:
    from deltalake import write_deltalake  # type: ignore[import-not-found]

    write_deltalake("s3://lake/metrics", frame, mode="append")


def _open_append(ds: str) -> None:
    with open("/mnt/share/loads.log", "a") as fh:
        fh.write(ds)


def _open_write(ds: str) -> None:
    with open(f"/mnt/share/extract_{ds}.csv", "w") as fh:
        fh.write(ds)


def _path_open_append(ds: str) -> None:
    with Path("/mnt/share/loads.log").open("a") as fh:
        fh.write(ds)


def _open_read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _copy_in(hook: Any) -> None:
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    PostgresHook(postgres_conn_id="pg").copy_expert("COPY staging.events FROM STDIN WITH CSV", "/tmp/e.csv")


def _copy_out(ds: str) -> None:
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    PostgresHook(postgres_conn_id="pg").copy_expert(
        f"COPY (SELECT * FROM mart.daily WHERE day = '{ds}') TO STDOUT WITH CSV", f"/tmp/{ds}.csv"
    )


def _copy_from_file(conn: Any, fh: Any) -> None:
    cur = conn.cursor()
    cur.copy_from(fh, "staging.clicks")


def _bulk_load() -> None:
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    PostgresHook(postgres_conn_id="pg").bulk_load("staging.rows", "/tmp/rows.tsv")


def _truncate_then_copy(conn: Any, fh: Any) -> None:
    cur = conn.cursor()
    cur.execute("TRUNCATE staging.today")
    cur.copy_expert("COPY staging.today FROM STDIN WITH CSV", fh)
    conn.commit()


def _execute_batch(conn: Any, rows: list) -> None:
    from psycopg2.extras import execute_batch

    execute_batch(conn.cursor(), "INSERT INTO iot.readings (id, value) VALUES (%s, %s)", rows)


CASES: list[tuple[Callable[..., Any], str, str]] = [
    (_bq_load_default, "risky", "append"),
    (_bq_load_append_enum, "risky", "append"),
    (_bq_load_truncate_attribute, "safe", "overwrite"),
    (_bq_query_append, "risky", "append"),
    (_bq_copy_default, "safe", "overwrite"),
    (_bq_stream, "risky", "append"),
    (_gbq_append, "risky", "append"),
    (_gbq_replace, "safe", "overwrite"),
    (_sql_append, "risky", "append"),
    (_write_pandas_default, "risky", "append"),
    (_write_pandas_overwrite, "safe", "overwrite"),
    (_spark_append, "risky", "append"),
    (_spark_overwrite, "safe", "overwrite"),
    (_spark_insert_into, "risky", "append"),
    (_delta_append, "risky", "append"),
    (_open_append, "risky", "append"),
    (_open_write, "safe", "pure"),
    (_path_open_append, "risky", "append"),
    (_open_read, "safe", "pure"),
    (_copy_in, "risky", "append"),
    (_copy_out, "safe", "export"),
    (_copy_from_file, "risky", "append"),
    (_bulk_load, "risky", "append"),
    (_truncate_then_copy, "safe", "partition_overwrite"),
    (_execute_batch, "risky", "append"),
]


@pytest.mark.parametrize(("fn", "verdict", "category"), CASES, ids=[c[0].__name__ for c in CASES])
def test_write_dispositions(fn: Callable[..., Any], verdict: str, category: str) -> None:
    """Appends (by disposition, mode, or default) are risky; replacing writes are safe."""
    found = combine(analyze_callable(fn, markers=RUN))
    assert (found.verdict, found.category) == (verdict, category), found.reasons
