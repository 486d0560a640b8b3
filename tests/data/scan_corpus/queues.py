import json
from datetime import datetime

from airflow.sdk import dag, task


@dag(schedule="@hourly", start_date=datetime(2024, 1, 1), catchup=False)
def queues():
    @task
    def enqueue_jobs():
        import boto3

        sqs = boto3.client("sqs")
        sqs.send_message(QueueUrl="https://sqs/jobs", MessageBody=json.dumps({"job": "rebuild"}))

    @task
    def announce():
        import boto3

        sns = boto3.client("sns")
        sns.publish(TopicArn="arn:aws:sns:eu-west-1:1:ready", Message="ready")

    @task
    def stream_events():
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers="kafka:9092")
        producer.send("events", b"batch-ready")
        producer.flush()

    @task
    def peek_queue():
        import boto3

        sqs = boto3.client("sqs")
        return sqs.get_queue_attributes(QueueUrl="https://sqs/jobs", AttributeNames=["All"])

    enqueue_jobs()
    announce()
    stream_events()
    peek_queue()


queues()
