"""Pandas cleaning before loads: frames renamed and reassigned step by step, as analysts write them."""

from datetime import datetime

import pandas as pd
import requests
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import dag, task


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    df = df.rename(columns=str.lower)
    df = df.rename(columns={"zip": "postcode"})
    df = df.dropna(subset=["postcode"])
    df = df.assign(postcode=df.postcode.str.upper())
    return df


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, tags=["pandas"])
def df_transforms():
    @task
    def rebuild_addresses(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        df = pd.read_csv(f"/data/addresses/{ds}.csv")
        df = _clean(df)
        df = df.rename(columns={"street_name": "street"})
        df = df.drop_duplicates()
        df.to_sql("addresses", hook.get_sqlalchemy_engine(), schema="ref", if_exists="replace", index=False)

    @task
    def append_visits(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        df = pd.read_csv(f"/data/visits/{ds}.csv")
        df = df.rename(columns=str.lower)
        df = df[df.duration > 0]
        df.to_sql("visits", hook.get_sqlalchemy_engine(), schema="raw", if_exists="append", index=False)

    @task
    def push_leads(ds=None):
        df = pd.read_csv(f"/data/leads/{ds}.csv")
        df = df.rename(columns=str.lower)
        df = df.merge(pd.read_csv("/data/ref/regions.csv"), on="region", how="left")
        for row in df.itertuples():
            requests.post("https://crm.example.com/api/leads", json=row._asdict(), timeout=30)

    @task
    def summarise_frame(ds=None) -> dict:
        df = pd.read_csv(f"/data/visits/{ds}.csv")
        df = df.rename(columns=str.lower)
        df = df.groupby("site").agg(total=("duration", "sum")).reset_index()
        return df.to_dict()

    rebuild_addresses()
    append_visits()
    push_leads()
    summarise_frame()


df_transforms()
