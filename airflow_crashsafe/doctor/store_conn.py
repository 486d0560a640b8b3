"""Hazard: the crashsafe store is not the same for every host that runs tasks.

Without the ``[crashsafe] conn_id`` connection each process falls back to an embedded SQLite file
on its own host; with an executor that runs tasks on several hosts their ledgers, fences and audit
then never meet. See docs/design.md, "Store".
"""

from __future__ import annotations

from airflow_crashsafe import config
from airflow_crashsafe.doctor.findings import HAZARD, OK, Finding
from airflow_crashsafe.dsn import mask_dsn_text
from airflow_crashsafe.store.store import store_connection_exists

__all__ = ["check_store_connection"]


def check_store_connection() -> list[Finding]:
    """The store connection is defined and opens from here; else the fallback must be single-host."""
    name = "store_connection"
    conn_id = config.store_conn_id()
    define = (
        f"define the connection {conn_id!r} (PostgreSQL) on every host that runs tasks, the triggerer "
        f"and the api-server, e.g. AIRFLOW_CONN_{conn_id.upper()}=postgresql://user:pass@host:5432/"
        "crashsafe, then run `airflow-crashsafe db migrate`"
    )
    several = config.multi_host_executors()
    if not store_connection_exists(conn_id):
        path = config.embedded_store_path()
        details = {"conn_id": conn_id, "embedded_path": str(path), "executors": config.executor_names()}
        if several:
            return [
                Finding(
                    name,
                    HAZARD,
                    f"no Airflow connection {conn_id!r} here: tasks fall back to an embedded SQLite store "
                    f"on their own host ({path}), but {', '.join(several)} runs tasks on several hosts, "
                    "whose fences, ledger and audit would never meet",
                    fix=define,
                    details=details,
                )
            ]
        summary = f"no connection {conn_id!r}: the embedded SQLite store {path} serves this one host"
        return [Finding(name, OK, summary, details=details)]
    from airflow_crashsafe.hooks.crashsafe import CrashsafeHook

    try:
        db = CrashsafeHook(conn_id).get_conn()
    except Exception as exc:
        reason = mask_dsn_text(str(exc).strip().splitlines()[0]) if str(exc).strip() else type(exc).__name__
        return [
            Finding(
                name,
                HAZARD,
                f"the store connection {conn_id!r} does not open from here: {reason}",
                fix=f"fix the connection {conn_id!r} so that it opens from every host that runs tasks",
                details={"conn_id": conn_id},
            )
        ]
    try:
        where, shared = db.describe(), db.dialect.is_postgres
    finally:
        db.close()
    if several and not shared:
        return [
            Finding(
                name,
                HAZARD,
                f"the store connection {conn_id!r} is a SQLite file ({where}), but {', '.join(several)} "
                "runs tasks on several hosts, which cannot share it",
                fix=define,
                details={"conn_id": conn_id},
            )
        ]
    return [
        Finding(
            name,
            OK,
            f"the store connection {conn_id!r} opens from here: {where}",
            details={"conn_id": conn_id},
        )
    ]
