"""How Python values cross into the audit's tables and back, on both dialects.

SQLite has no timestamp type: the audit's tables keep times there as ISO-8601 text in UTC with a
``Z`` (sortable as text, so ``<`` and ``ORDER BY`` still work), and booleans as 0/1. PostgreSQL
takes both as they are. Reading back, every time becomes an aware UTC ``datetime``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from airflow_crashsafe.store.dbapi import Db

__all__ = ["in_list", "stamp_from_db", "stamps_from_db", "to_db"]


def to_db(db: Db, value: Any) -> Any:
    """``value`` as this dialect stores it (times as UTC text on SQLite, booleans as integers)."""
    if isinstance(value, datetime) and not db.dialect.is_postgres:
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, bool):
        return int(value)
    return value


def stamp_from_db(value: Any) -> Any:
    """A stored time as an aware UTC ``datetime`` (anything else, None included, as it is)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def stamps_from_db(row: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """``row`` as a dict with its columns ``names`` read back as times."""
    out = dict(row)
    for name in names:
        out[name] = stamp_from_db(out.get(name))
    return out


def in_list(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``%(p0)s, %(p1)s, ...`` for an ``IN (...)`` and its parameters, named ``prefix`` + position."""
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(f"%({n})s" for n in names), dict(zip(names, values, strict=True))
