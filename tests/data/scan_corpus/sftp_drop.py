import uuid
from datetime import datetime

from airflow.sdk import dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def sftp_drop():
    @task
    def drop_daily(ds=None):
        import paramiko

        sftp = paramiko.SFTPClient.from_transport(paramiko.Transport(("sftp.partner", 22)))
        sftp.put("/tmp/daily.csv", f"/inbox/daily-{ds}.csv")

    @task
    def drop_unique():
        import paramiko

        sftp = paramiko.SFTPClient.from_transport(paramiko.Transport(("sftp.partner", 22)))
        sftp.put("/tmp/daily.csv", f"/inbox/{uuid.uuid4()}.csv")

    drop_daily()
    drop_unique()


sftp_drop()
