from datetime import datetime

from airflow.sdk import dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def jobs():
    @task
    def start_glue(ds=None):
        import boto3

        glue = boto3.client("glue")
        return glue.start_job_run(JobName="nightly", Arguments={"--day": ds})["JobRunId"]

    @task
    def submit_batch():
        import boto3

        batch = boto3.client("batch")
        batch.submit_job(jobName="rebuild", jobQueue="q", jobDefinition="d")

    @task
    def athena_keyed(run_id=None):
        import boto3

        athena = boto3.client("athena")
        athena.start_query_execution(QueryString="SELECT 1", ClientRequestToken=f"{run_id}-athena"[:64])

    start_glue()
    submit_batch()
    athena_keyed()


jobs()
