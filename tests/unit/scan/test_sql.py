"""The SQL classifier: each statement by what running it twice does (sqlglot, per dialect)."""

from __future__ import annotations

import pytest

from airflow_crashsafe.scan.model import combine
from airflow_crashsafe.scan.sql import classify_sql, dialect_of, mark_placeholders

RUN = ["2031-07-14"]
CASES = [
    ("postgres", "SELECT 1 -- insert into audit", True, "safe", "read_only"),
    ("postgres", "SELECT 'INSERT INTO x VALUES (1)'", True, "safe", "read_only"),
    ("postgres", "INSERT INTO t SELECT * FROM s", True, "risky", "append"),
    (
        "postgres",
        "INSERT INTO t (id) SELECT id FROM s ON CONFLICT DO NOTHING",
        True,
        "safe",
        "natural_key_merge",
    ),
    (
        "postgres",
        "INSERT INTO t AS x (k, n) SELECT k, n FROM s ON CONFLICT (k) DO UPDATE SET n = x.n + excluded.n",
        True,
        "risky",
        "increment",
    ),
    (
        "postgres",
        "INSERT INTO t (id, v) SELECT gen_random_uuid(), v FROM s ON CONFLICT DO NOTHING",
        True,
        "risky",
        "generated_key_merge",
    ),
    ("postgres", "UPDATE t SET n = n + 1", True, "risky", "increment"),
    ("postgres", "UPDATE t SET status = 'done' WHERE day = '2031-07-14'", True, "safe", "idempotent_update"),
    (
        "postgres",
        "DELETE FROM t WHERE day = '2031-07-14'; INSERT INTO t SELECT * FROM s",
        True,
        "safe",
        "partition_overwrite",
    ),
    (
        "postgres",
        "DELETE FROM t WHERE day = '2031-07-14'; INSERT INTO t SELECT * FROM s",
        False,
        "risky",
        "overwrite_not_atomic",
    ),
    (
        "postgres",
        "DELETE FROM t WHERE region = 'eu'; INSERT INTO t SELECT * FROM s",
        True,
        "risky",
        "overwrite_not_atomic",
    ),
    (
        "postgres",
        "BEGIN; TRUNCATE t; INSERT INTO t SELECT * FROM s; COMMIT",
        False,
        "safe",
        "partition_overwrite",
    ),
    ("postgres", "CREATE TEMP TABLE x AS SELECT 1 AS a; INSERT INTO x SELECT 2", False, "safe", "temporary"),
    ("postgres", "CALL refresh()", True, "unknown", "procedure_call"),
    (
        "postgres",
        "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$",
        True,
        "safe",
        "idempotent_ddl",
    ),
    (
        "postgres",
        "INSERT INTO t (id) SELECT s.id FROM s WHERE NOT EXISTS (SELECT 1 FROM t AS x WHERE x.id = s.id)",
        True,
        "safe",
        "insert_missing",
    ),
    (
        "mysql",
        "INSERT INTO t (a, b) VALUES (1, 2) ON DUPLICATE KEY UPDATE b = VALUES(b)",
        True,
        "safe",
        "natural_key_merge",
    ),
    (
        "mysql",
        "INSERT INTO t (a, b) VALUES (1, 2) ON DUPLICATE KEY UPDATE b = b + VALUES(b)",
        True,
        "risky",
        "increment",
    ),
    ("mysql", "REPLACE INTO t (a) VALUES (1)", True, "safe", "natural_key_merge"),
    ("snowflake", "INSERT OVERWRITE INTO t SELECT * FROM s", True, "safe", "overwrite"),
    ("snowflake", "COPY INTO t FROM @stage FILE_FORMAT = (TYPE = CSV)", True, "safe", "load_once"),
    ("snowflake", "COPY INTO t FROM @stage FORCE = TRUE", True, "risky", "append"),
    (
        "snowflake",
        "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = s.v "
        "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)",
        True,
        "safe",
        "natural_key_merge",
    ),
    (
        "postgres",
        "MERGE INTO t USING s ON t.k = s.k WHEN NOT MATCHED THEN INSERT (id, k) VALUES (nextval('q'), s.k)",
        True,
        "safe",
        "natural_key_merge",
    ),
    (
        "postgres",
        "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id, k) VALUES (nextval('q'), s.k)",
        True,
        "risky",
        "generated_key_merge",
    ),
    ("postgres", "UPDATE stats AS s SET n = s.n + 1 WHERE s.job = 'x'", True, "risky", "increment"),
    ("mysql", "UPDATE stats s SET s.n = s.n + 1", True, "risky", "increment"),
    ("postgres", "UPDATE t SET tags = tags || ARRAY['x']", True, "risky", "increment"),
    ("tsql", "UPDATE t SET n += 1 WHERE id = 1", True, "risky", "increment"),
    (
        "postgres",
        "UPDATE t SET status = CASE WHEN status = 'new' THEN 'seen' ELSE status END",
        True,
        "safe",
        "idempotent_update",
    ),
    (
        "postgres",
        "UPDATE w SET until = GREATEST(until, '2031-07-14') WHERE src = 'a'",
        True,
        "safe",
        "idempotent_update",
    ),
    (
        "postgres",
        "UPDATE t SET n = (SELECT count(*) FROM s WHERE s.n > 0)",
        True,
        "safe",
        "idempotent_update",
    ),
    (
        "postgres",
        "INSERT INTO stats AS s (k, n) SELECT k, n FROM src "
        "ON CONFLICT (k) DO UPDATE SET n = s.n + excluded.n",
        True,
        "risky",
        "increment",
    ),
    (
        "snowflake",
        "MERGE INTO d t USING (SELECT seq.NEXTVAL AS sk, email FROM raw.c) s ON t.sk = s.sk "
        "WHEN NOT MATCHED THEN INSERT (sk, email) VALUES (s.sk, s.email)",
        True,
        "risky",
        "generated_key_merge",
    ),
    (
        "tsql",
        "MERGE INTO d AS t USING (SELECT NEXT VALUE FOR seq AS sk, email FROM c) AS s ON t.sk = s.sk "
        "WHEN NOT MATCHED THEN INSERT (sk, email) VALUES (s.sk, s.email);",
        True,
        "risky",
        "generated_key_merge",
    ),
    (
        "snowflake",
        "MERGE INTO d t USING raw.c s ON t.email = s.email "
        "WHEN NOT MATCHED THEN INSERT (sk, email) VALUES (seq.NEXTVAL, s.email)",
        True,
        "safe",
        "natural_key_merge",
    ),
    ("snowflake", "ALTER TABLE a.orders SWAP WITH a.orders_staging", True, "risky", "table_swap"),
    (
        "snowflake",
        "CREATE OR REPLACE TABLE a.orders_next AS SELECT 1 AS x; "
        "ALTER TABLE a.orders SWAP WITH a.orders_next",
        True,
        "safe",
        "ddl",
    ),
    (
        "postgres",
        "ALTER TABLE IF EXISTS live RENAME TO live_old; ALTER TABLE IF EXISTS live_new RENAME TO live; "
        "DROP TABLE IF EXISTS live_old",
        True,
        "risky",
        "table_swap",
    ),
    (
        "postgres",
        "ALTER TABLE live RENAME TO live_old; ALTER TABLE live_new RENAME TO live; DROP TABLE live_old",
        True,
        "safe",
        "ddl",
    ),
    (
        "postgres",
        "ALTER TABLE live RENAME TO live_old; ALTER TABLE live_new RENAME TO live; DROP TABLE live_old",
        False,
        "risky",
        "table_swap",
    ),
    ("snowflake", "DROP TABLE IF EXISTS live; ALTER TABLE stage RENAME TO live", True, "risky", "table_swap"),
    ("mysql", "DROP TABLE IF EXISTS s_old; RENAME TABLE s TO s_old, s_new TO s", True, "safe", "ddl"),
    ("postgres", "PREPARE ins AS INSERT INTO t (a) VALUES ($1); EXECUTE ins(1)", True, "risky", "append"),
    (
        "postgres",
        "INSERT INTO t (id) SELECT s.id FROM s LEFT JOIN t AS x ON x.id = s.id WHERE x.id IS NULL",
        True,
        "safe",
        "insert_missing",
    ),
    (
        "postgres",
        "INSERT INTO t (id) SELECT id FROM s EXCEPT SELECT id FROM t",
        True,
        "safe",
        "insert_missing",
    ),
    ("postgres", "COPY staging.events FROM STDIN WITH CSV", True, "risky", "append"),
    (
        "postgres",
        "TRUNCATE staging.events; COPY staging.events FROM STDIN WITH CSV",
        True,
        "safe",
        "partition_overwrite",
    ),
]


@pytest.mark.parametrize(("dialect", "sql", "transactional", "verdict", "category"), CASES)
def test_statement_verdicts(dialect: str, sql: str, transactional: bool, verdict: str, category: str) -> None:
    """Each statement kind gets the verdict and category docs/scan.md gives it."""
    facts = classify_sql(sql, dialect=dialect, transactional=transactional, markers=RUN)
    found = combine(facts.findings)
    assert (found.verdict, found.category) == (verdict, category)


def test_parameter_holding_the_run_date_scopes_a_delete() -> None:
    """A DELETE whose %(day)s parameter holds the run's date is scoped to the run."""
    sql = "DELETE FROM t WHERE day = %(day)s; INSERT INTO t SELECT * FROM s WHERE day = %(day)s"
    scoped = classify_sql(
        sql, dialect="postgres", transactional=True, markers=[*RUN, "__crashsafe_param_day"]
    )
    unscoped = classify_sql(sql, dialect="postgres", transactional=True, markers=RUN)
    assert combine(scoped.findings).verdict == "safe"
    assert combine(unscoped.findings).verdict == "risky"


def test_every_statement_of_a_multi_statement_string_counts() -> None:
    """A read followed by an append is risky, and the reason quotes the INSERT."""
    facts = classify_sql("SELECT 1; INSERT INTO t VALUES (1)", dialect=None, transactional=True, markers=RUN)
    found = combine(facts.findings)
    assert found.verdict == "risky"
    assert "INSERT INTO t" in found.reasons[0].evidence
    assert facts.written == ["t"]


def test_placeholders_become_markers_and_dialects_map() -> None:
    """DB-API placeholders turn into named string markers; connection types map to sqlglot dialects."""
    assert mark_placeholders("a = %(day)s AND b = %s AND c LIKE 'x%%'") == (
        "a = '__crashsafe_param_day' AND b = '__crashsafe_param_0' AND c LIKE 'x%'"
    )
    assert dialect_of("postgres") == "postgres"
    assert dialect_of("google_cloud_platform") == "bigquery"
    assert dialect_of("no_such_type") is None


def test_unparseable_sql_is_unknown() -> None:
    """Text the parser cannot read is unknown, never safe."""
    facts = classify_sql("INSERT INTO (((", dialect="postgres", transactional=True, markers=RUN)
    assert combine(facts.findings).verdict == "unknown"
