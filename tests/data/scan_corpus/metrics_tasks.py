from datetime import datetime

from airflow.sdk import dag, task


@dag(schedule="@hourly", start_date=datetime(2024, 1, 1), catchup=False)
def metrics_tasks():
    @task
    def compute_lag() -> float:
        import time

        return time.time() % 60

    @task
    def publish_to_topic(lag: float):
        from google.cloud import pubsub_v1

        publisher = pubsub_v1.PublisherClient()
        publisher.publish("projects/p/topics/lag", str(lag).encode())

    publish_to_topic(compute_lag())


metrics_tasks()
