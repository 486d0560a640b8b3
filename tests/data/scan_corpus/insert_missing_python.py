"""CRM sync: new customers only, authors added when absent, upserts through SQLAlchemy."""

from datetime import datetime

import pandas as pd
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import dag, task
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session, declarative_base

Base = declarative_base()
metadata = MetaData()
events = Table("events", metadata, Column("id", Integer), Column("kind", String), schema="audit")


class Author(Base):
    __tablename__ = "authors"
    id = Column(Integer, primary_key=True)
    sunet = Column(String, unique=True)
    name = Column(String)


class HarvestRun(Base):
    __tablename__ = "harvest_runs"
    id = Column(Integer, primary_key=True)
    started = Column(String)


class Publication(Base):
    __tablename__ = "publications"
    id = Column(Integer, primary_key=True)
    doi = Column(String, unique=True)
    title = Column(String)


def engine():
    return create_engine(PostgresHook(postgres_conn_id="postgres_rialto").get_uri())


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, tags=["crm"])
def insert_missing_python():
    @task
    def sync_new_customers(rows: list | None = None):
        hook = PostgresHook(postgres_conn_id="postgres_crm")
        conn = hook.get_conn()
        cur = conn.cursor()
        cur.execute("SELECT id FROM crm.customers")
        existing = {r[0] for r in cur.fetchall()}
        new = [(r["id"], r["email"]) for r in rows or [] if r["id"] not in existing]
        cur.executemany("INSERT INTO crm.customers (id, email) VALUES (%s, %s)", new)
        conn.commit()

    @task
    def load_authors(people: list | None = None):
        with Session(engine()) as session:
            for person in people or []:
                author = session.query(Author).filter_by(sunet=person["sunet"]).first()
                if author is None:
                    session.add(Author(sunet=person["sunet"], name=person["name"]))
                else:
                    author.name = person["name"]
            session.commit()

    @task
    def record_harvest(ts=None):
        with Session(engine()) as session:
            session.add(HarvestRun(started=ts))
            session.commit()

    @task
    def new_orders_only(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        frame = pd.read_parquet(f"/data/orders/{ds}.parquet")
        existing = hook.get_pandas_df("SELECT order_id FROM mart.orders WHERE day = %s", parameters=(ds,))
        fresh = frame[~frame.order_id.isin(existing.order_id)]
        fresh.to_sql("orders", hook.get_sqlalchemy_engine(), schema="mart", if_exists="append", index=False)

    @task
    def upsert_publications(pubs: list | None = None):
        stmt = pg_insert(Publication).values(pubs or [])
        stmt = stmt.on_conflict_do_update(index_elements=["doi"], set_={"title": stmt.excluded.title})
        with Session(engine()) as session:
            session.execute(stmt)
            session.commit()

    @task
    def log_event(kind: str = "daily"):
        with engine().begin() as conn:
            conn.execute(insert(events).values(kind=kind))

    @task
    def count_authors():
        with Session(engine()) as session:
            return session.execute(select(Author)).scalars().all().__len__()

    sync_new_customers()
    load_authors()
    record_harvest()
    new_orders_only()
    upsert_publications()
    log_event()
    count_authors()


insert_missing_python()
