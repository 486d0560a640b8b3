"""Run one attempt of a push task of the drill's plain DAG, protected by ``policy_mode=protect``.

Used by ``tests/integration/policy``: ``python -m tests.support.policy_http_task TASK_ID TRY_NUMBER``,
with the vendor connections and the crashsafe store given through the environment. The DAG file is
parsed with Airflow's DagBag, unchanged; the cluster policy is applied to the task as Airflow applies
it when a policy is hooked in from airflow_local_settings.py. Exit code 0 on success (the response
printed), 3 on a CrashsafeError (its class name printed); the vendor may SIGKILL this process.
"""

from __future__ import annotations

import sys


def main() -> int:
    task_id, try_number = sys.argv[1], int(sys.argv[2])

    from airflow.dag_processing.dagbag import DagBag

    from airflow_crashsafe.errors import CrashsafeError
    from airflow_crashsafe.policy import task_policy
    from airflow_crashsafe.testing import fake_context
    from drill.dags import DAGS, EXAMPLES

    dag_id = DAGS["plain"][0]
    dag = DagBag(dag_folder=str(EXAMPLES / f"{dag_id}.py"), safe_mode=False).dags[dag_id]
    task = dag.get_task(task_id)
    task_policy(task)
    context = {**fake_context(dag_id=dag_id, task_id=task_id, try_number=try_number), "task": task}
    try:
        result = task.execute(context)
    except CrashsafeError as exc:
        print(type(exc).__name__)
        return 3
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
