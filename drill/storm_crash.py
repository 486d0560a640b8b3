"""What the storm's ``lost`` variant destroys with the crash: the loads' workers and warehouse backends.

A host lost with the scheduler takes its task processes, and their database sessions die with
their connections. The drill does both on purpose, for the variant's DAGs only: it SIGKILLs each
load's LocalExecutor worker (its supervisor) and task process, then terminates the loads'
backends, so no unit is left in flight for a re-run to adopt (docs/drill-storm.md).
"""

from __future__ import annotations

import signal

import psutil

from drill.components import drill_processes
from drill.session import DrillSession
from drill.work_meter import LABEL_PREFIX

__all__ = ["lose_in_flight"]


def lose_in_flight(session: DrillSession, url: str, dag_ids: list[str], ti_ids: list[str]) -> dict[str, int]:
    """The crash takes the loads of ``dag_ids`` with it: SIGKILL their workers, terminate their backends.

    A LocalExecutor worker and the task process it supervises both carry the task instance's id
    in their process title, which is how ``ti_ids`` find them.
    """
    import psycopg

    killed = 0
    for proc in drill_processes(session.sessions, session.home.airflow_home):
        try:
            title = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if any(ti_id in title for ti_id in ti_ids):
            family = [proc, *proc.children(recursive=True)]
            for p in family:
                try:
                    p.send_signal(signal.SIGKILL)
                    killed += 1
                except psutil.Error:
                    continue
    with psycopg.connect(url, autocommit=True) as conn:
        labels = [f"{LABEL_PREFIX}{d}/" for d in dag_ids]
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE EXISTS (SELECT 1 FROM unnest(%s::text[]) AS p WHERE starts_with(application_name, p))",
            (labels,),
        ).fetchall()
    return {"processes": killed, "backends": sum(bool(r[0]) for r in rows)}
