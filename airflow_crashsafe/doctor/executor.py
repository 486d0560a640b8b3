"""Hazards in the executor's settings: the ones that make Airflow run one try twice.

* CeleryExecutor without ``task_acks_late``: a message is acknowledged on receipt, so a worker
  lost mid-task loses it and the task comes back only after the heartbeat timeout, as a new try,
  while a partitioned worker may still be running the old one;
* a ``visibility_timeout`` shorter than the longest task: the broker delivers the same try again
  to another worker while the first still runs;
* a short ``task_instance_heartbeat_timeout``: an api-server restart or a network blip gets running
  tasks declared dead and retried while they still run;
* ``scheduler_health_check_threshold`` within a few scheduler heartbeats: a busy scheduler is
  declared dead and a restarted or HA scheduler resets everything it was running.

See docs/design.md, "How Airflow behaves on a crash".
"""

from __future__ import annotations

from airflow_crashsafe.doctor.airflow_settings import executors, flag, number, option
from airflow_crashsafe.doctor.findings import HAZARD, OK, SKIPPED, Finding

__all__ = ["MIN_TASK_HEARTBEAT_TIMEOUT", "check_celery", "check_heartbeat_timeouts"]

#: Seconds below which ``task_instance_heartbeat_timeout`` is a hazard (an api-server restart).
MIN_TASK_HEARTBEAT_TIMEOUT = 120.0
#: Scheduler heartbeats that must fit in ``scheduler_health_check_threshold``.
MIN_SCHEDULER_BEATS = 3


def check_celery(longest_task: float) -> list[Finding]:
    """``task_acks_late`` on and ``visibility_timeout`` above the longest task, for CeleryExecutor."""
    if not any(name == "CeleryExecutor" for name in executors()):
        skip = "no CeleryExecutor configured"
        return [
            Finding("celery_acks_late", SKIPPED, skip),
            Finding("celery_visibility_timeout", SKIPPED, skip),
        ]
    found: list[Finding] = []
    if flag("celery", "task_acks_late", True):
        found.append(Finding("celery_acks_late", OK, "[celery] task_acks_late is on"))
    else:
        found.append(
            Finding(
                "celery_acks_late",
                HAZARD,
                "[celery] task_acks_late is off: a worker lost mid-task loses its message; the task "
                "returns only after the heartbeat timeout, as a new try, while a partitioned worker may "
                "still run the old one",
                fix="set [celery] task_acks_late = True (AIRFLOW__CELERY__TASK_ACKS_LATE=True)",
            )
        )
    raw = option("celery_broker_transport_options", "visibility_timeout")
    if raw is None or not raw.strip():
        found.append(
            Finding("celery_visibility_timeout", OK, "visibility_timeout is the broker's default (21600 s)")
        )
        return found
    timeout = number("celery_broker_transport_options", "visibility_timeout", 21600.0)
    details = {"visibility_timeout": timeout, "longest_task_seconds": longest_task}
    if timeout >= longest_task:
        found.append(
            Finding("celery_visibility_timeout", OK, f"visibility_timeout {timeout:g} s", details=details)
        )
    else:
        found.append(
            Finding(
                "celery_visibility_timeout",
                HAZARD,
                f"[celery_broker_transport_options] visibility_timeout is {timeout:g} s, shorter than the "
                f"longest task ({longest_task:g} s): the broker hands the same try to another worker "
                "while the first still runs it",
                fix="raise visibility_timeout above your longest task (Airflow's default is 21600), e.g. "
                "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT=21600",
                details=details,
            )
        )
    return found


def check_heartbeat_timeouts() -> list[Finding]:
    """Timeouts short enough that a live task or scheduler is declared dead and its work re-run."""
    found: list[Finding] = []
    task_timeout = number("scheduler", "task_instance_heartbeat_timeout", 300.0)
    if task_timeout >= MIN_TASK_HEARTBEAT_TIMEOUT:
        found.append(
            Finding("task_heartbeat_timeout", OK, f"task_instance_heartbeat_timeout {task_timeout:g} s")
        )
    else:
        found.append(
            Finding(
                "task_heartbeat_timeout",
                HAZARD,
                f"[scheduler] task_instance_heartbeat_timeout is {task_timeout:g} s: an api-server restart "
                "or a network blip that long gets running tasks declared dead and retried while they "
                "still run",
                fix=f"set it to at least {MIN_TASK_HEARTBEAT_TIMEOUT:g} (Airflow's default is 300)",
                details={"task_instance_heartbeat_timeout": task_timeout},
            )
        )
    threshold = number("scheduler", "scheduler_health_check_threshold", 30.0)
    beat = number("scheduler", "scheduler_heartbeat_sec", 5.0)
    details = {"scheduler_health_check_threshold": threshold, "scheduler_heartbeat_sec": beat}
    if threshold >= MIN_SCHEDULER_BEATS * beat:
        found.append(
            Finding("scheduler_health_threshold", OK, f"scheduler_health_check_threshold {threshold:g} s")
        )
    else:
        found.append(
            Finding(
                "scheduler_health_threshold",
                HAZARD,
                f"[scheduler] scheduler_health_check_threshold ({threshold:g} s) is under "
                f"{MIN_SCHEDULER_BEATS} scheduler heartbeats ({beat:g} s each): a busy scheduler is "
                "declared dead, and a restarted or HA scheduler resets the tasks it was running",
                fix=f"set it to at least {MIN_SCHEDULER_BEATS * beat:g} (Airflow's default is 30 with "
                "heartbeats every 5 s)",
                details=details,
            )
        )
    return found
