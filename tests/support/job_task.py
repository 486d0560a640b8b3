"""Run one attempt of a job-submitting operator in this process, optionally SIGKILLing itself.

``python -m tests.support.job_task TRY_NUMBER CRASH_POINT KIND``: KIND is ``keyed`` (crashsafe
mixin with lookup by key), ``keyed-nolookup`` (crashsafe mixin, no ``find_job``) or ``plain``
(Airflow's ResumableJobMixin). CRASH_POINT is ``none`` or ``after_submit``: the process dies right
after the service created the job, before the job id is persisted. The service URL comes from
``$JOB_SERVICE_URL``; the plain mixin's task_state_store is a JSON file at ``$JOB_STATE_FILE``
(Airflow keeps it in its metadata database). Exit 0 printing the job id, 3 on a CrashsafeError.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


class FileStateStore:
    """``task_state_store``'s get/set, persisted like Airflow's so it survives the process."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, key: str) -> Any:
        return json.loads(self.path.read_text()).get(key) if self.path.exists() else None

    def set(self, key: str, value: Any) -> None:
        data = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.path.write_text(json.dumps(data | {key: value}))


def main() -> int:
    try_number, crash_point, kind = int(sys.argv[1]), sys.argv[2], sys.argv[3]

    from airflow_crashsafe.errors import CrashsafeError
    from airflow_crashsafe.testing import fake_context
    from tests.support.jobs import KeyedJobOperator, PlainResumableJobOperator

    url = os.environ["JOB_SERVICE_URL"]
    operator: Any
    if kind == "plain":
        operator = PlainResumableJobOperator(task_id="nightly_job", service_url=url)
    else:
        operator = KeyedJobOperator(task_id="nightly_job", service_url=url, lookup=kind == "keyed")
    if crash_point == "after_submit":
        submit = operator._post_job

        def submit_then_die(name: str) -> str:
            submit(name)
            os.kill(os.getpid(), signal.SIGKILL)
            raise AssertionError("unreachable")

        operator._post_job = submit_then_die
    context = fake_context(dag_id="warehouse", task_id="nightly_job", try_number=try_number)
    context["task_state_store"] = FileStateStore(Path(os.environ["JOB_STATE_FILE"]))
    context["ti"].stats_tags = {}  # ResumableJobMixin reads the team name from it
    try:
        result = operator.execute(context)
    except CrashsafeError as exc:
        print(type(exc).__name__)
        return 3
    print(result["job"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
