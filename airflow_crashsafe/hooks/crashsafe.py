"""``CrashsafeHook``: the crashsafe store's Airflow connection, and a test of it.

The store is an ordinary database connection (PostgreSQL in production, SQLite on one machine),
so the hook runs no SQL of its own: it opens the connection through that database's own SQL hook
(:func:`airflow_crashsafe.store.dbapi.connect_target`) and hands out the
:class:`~airflow_crashsafe.store.Store`, the only code that knows crashsafe's tables. That is why
it is a ``BaseHook`` and not a ``DbApiHook``: a ``run()`` on crashsafe's tables would bypass the store.
See docs/design.md, "Store".
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.sdk import BaseHook

from airflow_crashsafe import config
from airflow_crashsafe.store import schema
from airflow_crashsafe.store.dbapi import STORE_CONN_TYPE, Db, connect_target
from airflow_crashsafe.store.store import Store, connection_store

__all__ = ["CrashsafeHook"]

_MIGRATE = "airflow-crashsafe db migrate"


class CrashsafeHook(BaseHook):
    """The crashsafe store's connection: of type ``postgres``, ``sqlite`` or ``crashsafe``.

    A ``crashsafe`` connection takes PostgreSQL's fields (host, port, login, password, database in
    *schema*, psycopg options in *extra*). Without any such connection the store falls back to an
    embedded SQLite file (see ``[crashsafe] conn_id``); this hook only speaks for the connection.

    :param crashsafe_conn_id: the Airflow connection of the store (default ``crashsafe_default``).
    """

    conn_name_attr: ClassVar[str] = "crashsafe_conn_id"
    default_conn_name: ClassVar[str] = "crashsafe_default"
    conn_type: ClassVar[str] = STORE_CONN_TYPE
    hook_name: ClassVar[str] = "Crashsafe store"

    def __init__(self, crashsafe_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.crashsafe_conn_id = crashsafe_conn_id

    def get_conn(self) -> Db:
        """A new connection to the store's database, opened by its SQL hook; the caller closes it."""
        return connect_target(self.crashsafe_conn_id)

    def get_store(self) -> Store:
        """The crashsafe store in this connection's database (migrated at first use); close it when done."""
        return connection_store(self.crashsafe_conn_id)

    def test_connection(self) -> tuple[bool, str]:
        """Connect and say which database it is and whether its crashsafe schema is current; never raises."""
        name = self.crashsafe_conn_id
        try:
            db = self.get_conn()
        except Exception as exc:
            return False, f"Cannot open the crashsafe store connection {name!r}: {exc}"
        try:
            return _verdict(name, db.describe(), _schema_version(db))
        except Exception as exc:
            return False, f"Connected through {name!r}, but cannot read the crashsafe schema: {exc}"
        finally:
            db.close()


def _schema_version(db: Db) -> int:
    """The store's schema version, read only: unlike the store's first use, this never migrates."""
    db.begin()
    try:
        return schema.current_version(db)
    finally:
        db.rollback()


def _verdict(name: str, where: str, version: int) -> tuple[bool, str]:
    latest = schema.latest_version()
    env = "" if name == config.store_conn_id() else f"AIRFLOW__CRASHSAFE__CONN_ID={name} "
    migrate = f"run `{env}{_MIGRATE}`"
    if version == latest:
        return True, f"Connected to {where}; crashsafe schema version {version} (current)."
    if version == 0:
        return False, f"Connected to {where}, which holds no crashsafe schema yet; {migrate}."
    if version < latest:
        return False, (
            f"Connected to {where}; crashsafe schema version {version} is older than this "
            f"package's {latest}; {migrate}."
        )
    return False, (
        f"Connected to {where}; crashsafe schema version {version} is newer than this package "
        f"knows ({latest}); upgrade airflow-crashsafe on this machine."
    )
