from datetime import datetime

from airflow.sdk import Variable, dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def taskflow_pure():
    @task
    def extract() -> list[dict]:
        return [{"id": i, "amount": i * 1.5} for i in range(10)]

    @task
    def transform(rows: list[dict]) -> list[dict]:
        return [{**r, "amount_cents": int(r["amount"] * 100)} for r in rows if r["amount"] > 0]

    @task
    def summarise(rows: list[dict]) -> dict:
        total = sum(r["amount_cents"] for r in rows)
        return {"rows": len(rows), "total": total}

    @task
    def read_threshold() -> int:
        return int(Variable.get("threshold", default="10"))

    summarise(transform(extract()))
    read_threshold()


taskflow_pure()
