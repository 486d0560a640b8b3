from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

with DAG("docker_tasks", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    BashOperator(task_id="run_image", bash_command="docker run --rm acme/ml-train:3.2 --day {{ ds }}")
    BashOperator(task_id="upload_model", bash_command="aws s3 cp /models/latest.pkl s3://acme-models/{{ ds }}/model.pkl")
    BashOperator(task_id="mail_report", bash_command="mail -s 'report {{ ds }}' team@example.com < /tmp/report.txt")
