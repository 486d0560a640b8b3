"""Files on the shared NFS export mount that the finance team picks up."""

import csv
import json
from datetime import datetime
from pathlib import Path

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task

EXPORTS = Path("/mnt/finance-share/exports")

with DAG("file_appends", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def append_audit_line(ds=None):
        with open("/mnt/finance-share/audit/loads.log", "a") as fh:
            fh.write(f"{ds} loaded\n")

    @task
    def write_daily_extract(ds=None):
        with open(EXPORTS / f"extract_{ds}.json", "w") as fh:
            json.dump({"day": ds}, fh)

    @task
    def append_ledger_rows(rows: list | None = None):
        with open("/mnt/finance-share/ledger.csv", "a", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerows(rows or [])

    @task
    def write_manifest(ds=None):
        (EXPORTS / f"manifest_{ds}.json").write_text(json.dumps({"day": ds, "files": 1}))

    BashOperator(task_id="mark_day_processed", bash_command="echo {{ ds }} >> /mnt/finance-share/processed_days.txt")
    BashOperator(
        task_id="unpack_drop",
        bash_command="rm -rf /tmp/drop && mkdir -p /tmp/drop && unzip -o /data/drops/{{ ds }}.zip -d /tmp/drop",
    )

    append_audit_line()
    write_daily_extract()
    append_ledger_rows()
    write_manifest()
