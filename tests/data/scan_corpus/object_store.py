import json
import time
import uuid
from datetime import datetime

from airflow.sdk import dag, task

BUCKET = "acme-lake"


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def object_store():
    @task
    def write_partition(ds=None):
        import boto3

        s3 = boto3.client("s3")
        s3.put_object(Bucket=BUCKET, Key=f"raw/orders/{ds}/orders.json", Body=json.dumps([]))

    @task
    def write_random():
        import boto3

        s3 = boto3.client("s3")
        s3.put_object(Bucket=BUCKET, Key=f"raw/orders/{uuid.uuid4()}.json", Body=b"[]")

    @task
    def export_timestamped():
        name = f"exports/report-{int(time.time())}.csv"
        import boto3

        s3 = boto3.client("s3")
        s3.upload_file("/tmp/report.csv", BUCKET, name)

    @task
    def write_parquet(ds=None):
        import pandas as pd

        pd.DataFrame({"a": [1]}).to_parquet(f"s3://{BUCKET}/curated/{ds}/a.parquet")

    write_partition()
    write_random()
    export_timestamped()
    write_parquet()


object_store()
