"""The AWS side of the ingestion platform: S3 housekeeping, DynamoDB state, Lambda and Athena."""

from datetime import datetime

import boto3
from airflow.sdk import dag, task

BUCKET = "acme-ingest"


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, tags=["aws"])
def boto3_tasks():
    @task
    def list_new_files(ds=None) -> list:
        s3 = boto3.client("s3")
        paginator = s3.get_paginator("list_objects_v2")
        keys = []
        for page in paginator.paginate(Bucket=BUCKET, Prefix=f"incoming/{ds}/"):
            keys += [obj["Key"] for obj in page.get("Contents", [])]
        return keys

    @task
    def refresh_cache_lambda():
        client = boto3.client("lambda")
        client.invoke(FunctionName="refresh-product-cache", InvocationType="Event")

    @task
    def bump_load_counter():
        table = boto3.resource("dynamodb").Table("pipeline_state")
        table.update_item(
            Key={"pipeline": "orders"},
            UpdateExpression="ADD load_count :one",
            ExpressionAttributeValues={":one": 1},
        )

    @task
    def save_watermark(ds=None):
        table = boto3.resource("dynamodb").Table("pipeline_state")
        table.put_item(Item={"pipeline": "orders", "watermark": ds})

    @task
    def athena_daily_counts(ds=None):
        athena = boto3.client("athena")
        athena.start_query_execution(
            QueryString=f"SELECT count(*) FROM lake.orders WHERE dt = '{ds}'",
            ResultConfiguration={"OutputLocation": f"s3://{BUCKET}/athena-results/"},
        )

    @task
    def email_ops_summary(ds=None):
        ses = boto3.client("ses", region_name="eu-west-1")
        ses.send_email(
            Source="etl@acme.example.com",
            Destination={"ToAddresses": ["ops@acme.example.com"]},
            Message={"Subject": {"Data": f"Loads for {ds}"}, "Body": {"Text": {"Data": "done"}}},
        )

    @task
    def archive_inputs(keys: list | None = None, ds=None):
        s3 = boto3.client("s3")
        for key in keys or []:
            name = key.rsplit("/", 1)[-1]
            s3.copy_object(Bucket=BUCKET, CopySource={"Bucket": BUCKET, "Key": key}, Key=f"archive/{ds}/{name}")
            s3.delete_object(Bucket=BUCKET, Key=key)

    @task
    def stream_metrics(ds=None):
        firehose = boto3.client("firehose")
        firehose.put_record(DeliveryStreamName="pipeline-metrics", Record={"Data": f'{{"day": "{ds}"}}'.encode()})

    @task
    def drain_dead_letters():
        sqs = boto3.client("sqs")
        url = sqs.get_queue_url(QueueName="orders-dlq")["QueueUrl"]
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        for message in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return len(messages)

    keys = list_new_files()
    archive_inputs(keys)
    refresh_cache_lambda()
    bump_load_counter()
    save_watermark()
    athena_daily_counts()
    email_ops_summary()
    stream_metrics()
    drain_dead_letters()


boto3_tasks()
