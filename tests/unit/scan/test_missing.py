"""Inserting only what the target lacks is safe; SQLAlchemy statements and ORM writes are read as calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import declarative_base

from airflow_crashsafe.scan.model import combine
from airflow_crashsafe.scan.python_code import analyze_callable

RUN = ["2031-07-14"]
Base = declarative_base()
events = Table("events", MetaData(), Column("id", Integer), schema="audit")


class Author(Base):  # type: ignore[misc,valid-type]
    __tablename__ = "authors"
    id = Column(Integer, primary_key=True)
    sunet = Column(String)
    runs = Column(Integer)


class Harvest(Base):  # type: ignore[misc,valid-type]
    __tablename__ = "harvests"
    id = Column(Integer, primary_key=True)


def _read_ids_then_insert_rest(conn: Any, rows: list) -> None:
    cur = conn.cursor()
    cur.execute("SELECT id FROM crm.customers")
    existing = {r[0] for r in cur.fetchall()}
    new = [(r["id"], r["email"]) for r in rows if r["id"] not in existing]
    cur.executemany("INSERT INTO crm.customers (id, email) VALUES (%s, %s)", new)
    conn.commit()


def _insert_everything(conn: Any, rows: list) -> None:
    cur = conn.cursor()
    cur.executemany("INSERT INTO crm.customers (id, email) VALUES (%s, %s)", rows)


def _add_when_absent(session: Any, person: dict) -> None:
    author = session.query(Author).filter_by(sunet=person["sunet"]).first()
    if author is None:
        session.add(Author(sunet=person["sunet"]))
    session.commit()


def _skip_known_with_continue(session: Any, people: list) -> None:
    for person in people:
        if session.query(Author).filter_by(sunet=person["sunet"]).first():
            continue
        session.add(Author(sunet=person["sunet"]))


def _add_every_time(session: Any) -> None:
    session.add(Harvest())
    session.commit()


def _guard_on_another_table(session: Any) -> None:
    if session.query(Author).first() is None:
        session.add(Harvest())


def _alert_when_empty(rows: list) -> None:
    import requests

    if not rows:
        requests.post("https://hooks.slack.com/services/x", json={"text": "no rows"}, timeout=5)


def _frame_filtered_by_target(hook: Any, frame: Any, engine: Any) -> None:
    existing = hook.get_pandas_df("SELECT order_id FROM mart.orders")
    fresh = frame[~frame.order_id.isin(existing.order_id)]
    fresh.to_sql("orders", engine, schema="mart", if_exists="append")


def _core_upsert(session: Any, rows: list) -> None:
    stmt = pg_insert(Author).values(rows)
    stmt = stmt.on_conflict_do_update(index_elements=["sunet"], set_={"id": stmt.excluded.id})
    session.execute(stmt)


def _core_insert(engine: Any) -> None:
    with engine.begin() as conn:
        conn.execute(insert(events).values(id=1))


def _core_increment(session: Any) -> None:
    session.execute(update(Author).where(Author.sunet == "x").values(runs=Author.runs + 1))


def _orm_merge(session: Any, author: Any) -> None:
    session.merge(author)
    session.commit()


CASES: list[tuple[Callable[..., Any], str, str]] = [
    (_read_ids_then_insert_rest, "safe", "insert_missing"),
    (_insert_everything, "risky", "append"),
    (_add_when_absent, "safe", "insert_missing"),
    (_skip_known_with_continue, "safe", "insert_missing"),
    (_add_every_time, "risky", "append"),
    (_guard_on_another_table, "risky", "append"),
    (_alert_when_empty, "risky", "http_mutating"),
    (_frame_filtered_by_target, "safe", "insert_missing"),
    (_core_upsert, "safe", "natural_key_merge"),
    (_core_insert, "risky", "append"),
    (_core_increment, "risky", "increment"),
    (_orm_merge, "safe", "natural_key_merge"),
]


@pytest.mark.parametrize(("fn", "verdict", "category"), CASES, ids=[c[0].__name__ for c in CASES])
def test_insert_missing_and_sqlalchemy(fn: Callable[..., Any], verdict: str, category: str) -> None:
    """An insert guarded or filtered by a read of its own target is safe; any other guard changes nothing."""
    found = combine(analyze_callable(fn, markers=RUN))
    assert (found.verdict, found.category) == (verdict, category), found.reasons
