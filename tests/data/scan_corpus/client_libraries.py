"""Loads and lookups through vendor SDKs, imported inside the tasks as the platform team asks."""

import json
from datetime import datetime

from airflow.sdk import Variable, dag, task

PROJECT = "acme-analytics"


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, tags=["sdk"])
def client_libraries():
    @task
    def bq_append_events(ds=None):
        import pandas as pd
        from google.cloud import bigquery

        client = bigquery.Client(project=PROJECT)
        frame = pd.read_parquet(f"gs://acme-landing/events/{ds}.parquet")
        job_config = bigquery.LoadJobConfig(write_disposition=bigquery.WriteDisposition.WRITE_APPEND)
        client.load_table_from_dataframe(frame, f"{PROJECT}.raw.events", job_config=job_config).result()

    @task
    def bq_replace_partition(ds_nodash=None):
        from google.cloud import bigquery

        client = bigquery.Client(project=PROJECT)
        job_config = bigquery.LoadJobConfig(source_format=bigquery.SourceFormat.PARQUET)
        job_config.write_disposition = "WRITE_TRUNCATE"
        uri = f"gs://acme-landing/sessions/{ds_nodash}/*.parquet"
        client.load_table_from_uri(uri, f"{PROJECT}.raw.sessions${ds_nodash}", job_config=job_config).result()

    @task
    def bq_daily_kpis(ds=None):
        from google.cloud import bigquery

        client = bigquery.Client(project=PROJECT)
        rows = client.query(f"SELECT metric, value FROM `{PROJECT}.mart.kpis` WHERE day = '{ds}'").result()
        return [dict(r) for r in rows]

    @task
    def snowflake_append_frame(ds=None):
        import pandas as pd
        import snowflake.connector
        from snowflake.connector.pandas_tools import write_pandas

        frame = pd.read_csv(f"/data/exports/{ds}.csv")
        conn = snowflake.connector.connect(**json.loads(Variable.get("snowflake_creds")))
        write_pandas(conn, frame, "EVENTS", schema="RAW")

    @task
    def snowflake_replace_frame(ds=None):
        import pandas as pd
        import snowflake.connector
        from snowflake.connector.pandas_tools import write_pandas

        frame = pd.read_csv(f"/data/exports/{ds}_dim.csv")
        conn = snowflake.connector.connect(**json.loads(Variable.get("snowflake_creds")))
        write_pandas(conn, frame, "DIM_STORE", schema="ANALYTICS", overwrite=True, auto_create_table=True)

    @task
    def index_orders(orders: list | None = None):
        from elasticsearch import Elasticsearch

        es = Elasticsearch("https://search.internal:9200")
        for order in orders or []:
            es.index(index="orders", document=order)

    @task
    def search_open_tickets():
        from elasticsearch import Elasticsearch

        es = Elasticsearch("https://search.internal:9200")
        hits = es.search(index="tickets", query={"term": {"status": "open"}})
        return hits["hits"]["total"]["value"]

    @task
    def count_runs():
        import redis

        r = redis.Redis(host="cache.internal")
        r.incr("pipeline:daily:runs")

    @task
    def cache_report(ds=None):
        import redis

        r = redis.Redis(host="cache.internal")
        r.set(f"report:{ds}", json.dumps({"ok": True}), ex=86400)

    @task
    def publish_changes(changes: list | None = None):
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": "kafka:9092"})
        for change in changes or []:
            p.produce("customer-changes", json.dumps(change).encode())
        p.flush()

    @task
    def sync_billing(ds=None):
        from acme_billing.client import BillingClient

        BillingClient.from_env().sync_invoices(day=ds)

    @task
    def upsert_profiles(profiles: list | None = None):
        from pymongo import MongoClient

        coll = MongoClient("mongodb://mongo.internal")["crm"]["profiles"]
        for profile in profiles or []:
            coll.update_one({"_id": profile["id"]}, {"$set": profile}, upsert=True)

    @task
    def archive_events(events: list | None = None):
        from pymongo import MongoClient

        db = MongoClient("mongodb://mongo.internal").audit
        db.events.insert_many(events or [])

    bq_append_events()
    bq_replace_partition()
    bq_daily_kpis()
    snowflake_append_frame()
    snowflake_replace_frame()
    index_orders()
    search_open_tickets()
    count_runs()
    cache_report()
    publish_changes()
    sync_billing()
    upsert_profiles()
    archive_events()


client_libraries()
