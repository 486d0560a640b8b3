"""``build_alerting_dag()``: the in-Airflow alerting DAG, and the canary the watchdog watches.

The watchdog (``airflow-crashsafe watch``) runs outside Airflow and sees what the health endpoint
says. This DAG adds what only a running Airflow can prove (docs/design.md, "Watchdog and
alerting"):

* it *is* the canary: every successful run proves a scheduler scheduled it and a worker ran it.
  Point the watchdog at it: ``--canary-dag-id crashsafe_alerting --canary-max-age 600``;
* it pings a dead-man's switch (healthchecks.io and the like), which pages when the pings stop,
  even with all of Airflow down;
* it checks every component's heartbeat, task instances stuck queued or running, and runs the
  audit reconciliation;
* it alerts through the same sinks as the watchdog, and through Airflow Notifiers (SMTP, Slack,
  PagerDuty providers' and their connections), directly from its alert task, never through
  Airflow callbacks;
* its last task defers for a second and comes back, proving a triggerer runs triggers (one that
  heartbeats but runs none fails the run).

A run succeeds whenever its alert task and that round trip ran, whatever the checks found (they
alert instead of failing), so "no recent successful run" means scheduling (or the triggerer) is
broken, not that a check found something. A broken sinks configuration fails the run on purpose:
the watchdog's canary rule then reports it. Incidents open, repeat and resolve like the
watchdog's; they are remembered in a state file under ``state_dir`` (on executors with many
worker hosts put it on a shared volume, or accept that a repeat may be sent again from another
host).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_crashsafe import config
from airflow_crashsafe.dags._checks import (
    ApiAccess,
    check_heartbeats,
    find_stuck_tasks,
    ping_dead_mans_switch,
    run_reconcile,
)
from airflow_crashsafe.dags.findings import Finding, condition, finding, fold
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.rules import check_expectation
from airflow_crashsafe.watchdog.settings import LIMITS as WATCH_LIMITS

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from airflow_crashsafe.alerting import Dispatcher

__all__ = [
    "CHECK_TASKS",
    "DEFAULT_DAG_ID",
    "ROUND_TRIP_TASK",
    "AlertingSettings",
    "alert_task",
    "build_alerting_dag",
]

log = logging.getLogger(__name__)

DEFAULT_DAG_ID = "crashsafe_alerting"
#: Check task id -> the check name its finding carries.
CHECK_TASKS = {
    "ping_dead_mans_switch": "dead_mans_switch",
    "check_heartbeats": "heartbeats",
    "find_stuck_tasks": "stuck_tasks",
    "reconcile_audit": "audit_reconcile",
}
#: The last task: a deferral the triggerer must answer (:mod:`airflow_crashsafe.dags.round_trip`).
ROUND_TRIP_TASK = "triggerer_round_trip"


@dataclass(frozen=True)
class AlertingSettings:
    """What :func:`build_alerting_dag` was given; ``None`` fields are resolved at run time from
    ``[crashsafe]`` options (never at parse time)."""

    dag_id: str = DEFAULT_DAG_ID
    dead_mans_switch_url: str | None = None
    sinks_config: str | None = None
    state_dir: str | None = None
    api_url: str | None = None
    api_conn_id: str | None = None
    instance: str | None = None
    threshold_seconds: float = 30.0
    grace: timedelta = timedelta(seconds=60)
    repeat_interval: timedelta = timedelta(hours=1)
    expect_triggerer: str = "auto"
    expect_dag_processor: str = "auto"
    stuck_queued_after: timedelta | None = timedelta(minutes=10)
    stuck_running_after: timedelta | None = timedelta(hours=6)
    reconcile_grace: timedelta = timedelta(seconds=60)
    request_timeout: float = 10.0
    notifiers: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        check_expectation("expect_triggerer", self.expect_triggerer)
        check_expectation("expect_dag_processor", self.expect_dag_processor)
        # The watchdog's limits for the same two numbers: a nan threshold would call every component alive.
        WATCH_LIMITS["threshold"].check(self.threshold_seconds, "threshold_seconds", example=30)
        WATCH_LIMITS["timeout"].check(self.request_timeout, "request_timeout", example=10)
        for name in (
            "grace",
            "repeat_interval",
            "reconcile_grace",
            "stuck_queued_after",
            "stuck_running_after",
        ):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, timedelta) or value < timedelta(0)):
                raise ConfigurationError(
                    f"{name} must be a non-negative timedelta, got {value!r}: give e.g. timedelta(minutes=1)"
                )

    # -- resolved at run time ------------------------------------------------------------------

    def conn_id(self) -> str:
        return self.api_conn_id or config.api_conn_id()

    def dms_url(self) -> str | None:
        return self.dead_mans_switch_url or config.dead_mans_switch_url()

    def state_path(self) -> Path:
        return Path(self.state_dir).expanduser() if self.state_dir else config.alerting_state_dir()

    def api(self) -> tuple[ApiAccess, ApiAccess | None]:
        """(where the health endpoint is, the authenticated REST API or None without a connection)."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        conn_id = self.conn_id()
        try:
            conn = BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            return ApiAccess(config.api_url(self.api_url)), None
        base = self.api_url or _conn_base_url(conn.host, conn.schema, conn.port) or None
        extra = conn.extra_dejson or {}
        access = ApiAccess(
            config.api_url(base),
            token=extra.get("token") or None,
            username=conn.login or None,
            password=conn.password or None,
        )
        return access, access

    def instance_name(self, api: ApiAccess) -> str:
        return (
            self.instance or config.alerting_instance() or f"{urlsplit(api.base_url).hostname}/{self.dag_id}"
        )


def _conn_base_url(host: str | None, schema: str | None, port: int | None) -> str | None:
    """An HTTP connection's root URL, the way HttpHook builds it (host may carry the scheme)."""
    if not host:
        return None
    if "://" in host:
        return host
    return f"{schema or 'http'}://{host}" + (f":{port}" if port else "")


def build_dispatcher(settings: AlertingSettings) -> Dispatcher:
    """Sinks from the TOML/JSON file of ``sinks_config`` or ``[crashsafe] alerting_config`` (its
    ``[[sinks]]``; a ``[watch]`` table is ignored, so the watchdog's file can be shared), then the
    Airflow Notifiers of ``notifiers`` and ``[crashsafe] alert_notifiers``."""
    from airflow_crashsafe.alerting import Dispatcher, FileOutbox, build_sinks, load_config_file
    from airflow_crashsafe.dags.notifiers import notifier_sinks

    path = settings.sinks_config or config.alerting_config()
    sinks = build_sinks(load_config_file(path).get("sinks", []), source=path) if path else []
    sinks += notifier_sinks(settings.notifiers, config.alert_notifiers())
    if not sinks:
        log.warning(
            "No alert sinks configured (sinks_config / [crashsafe] alerting_config / notifiers / "
            "[crashsafe] alert_notifiers): alerts go to this task's log only."
        )
    outbox = FileOutbox(settings.state_path() / "outbox.jsonl")
    return Dispatcher(sinks, outbox=outbox, retry_delay=1.0, max_backoff=300.0)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def ping_task(settings: AlertingSettings) -> Finding:
    return ping_dead_mans_switch(settings.dms_url(), timeout=settings.request_timeout)


def heartbeats_task(settings: AlertingSettings, now: datetime | None = None) -> Finding:
    health, _ = settings.api()
    return check_heartbeats(
        health,
        threshold=settings.threshold_seconds,
        expect_triggerer=settings.expect_triggerer,
        expect_dag_processor=settings.expect_dag_processor,
        timeout=settings.request_timeout,
        instance=settings.instance_name(health),
        now=now or _now(),
    )


def stuck_task(settings: AlertingSettings, now: datetime | None = None) -> Finding:
    _, api = settings.api()
    return find_stuck_tasks(
        api,
        queued_after=settings.stuck_queued_after,
        running_after=settings.stuck_running_after,
        now=now or _now(),
        exclude_dag_ids=(settings.dag_id,),
        timeout=settings.request_timeout,
        conn_id=settings.conn_id(),
    )


def audit_task(settings: AlertingSettings, store: Any = None) -> Finding:
    _, api = settings.api()
    return run_reconcile(
        api,
        grace=settings.reconcile_grace,
        timeout=max(30.0, settings.request_timeout),
        conn_id=settings.conn_id(),
        store=store,
    )


def alert_task(
    settings: AlertingSettings, findings: dict[str, Finding | None], now: datetime | None = None
) -> dict[str, Any]:
    """Fold the checks' findings into incidents and deliver the alerts through the sinks.

    ``findings`` maps each check task id to what it returned (None when it crashed or never ran:
    that is itself an incident, so a broken check does not go unnoticed).
    """
    from airflow_crashsafe.watchdog.state import StateFile

    now = now or _now()
    dispatcher = build_dispatcher(settings)  # before anything else: a bad config fails the run
    complete: list[Finding] = []
    for task_id, found in findings.items():
        if found is None:
            check = CHECK_TASKS.get(task_id, task_id)
            summary = (
                f"Alerting check {task_id!r} of DAG {settings.dag_id!r} did not finish: see its task log"
            )
            cond = condition("did_not_finish", "warning", summary, details={"task_id": task_id})
            complete.append(finding(check, complete=False, conditions=[cond]))
        else:
            complete.append(found)
    state = StateFile(settings.state_path() / "incidents.json")
    health, _ = settings.api()
    incidents, alerts = fold(
        state.load(),
        complete,
        now,
        grace=settings.grace.total_seconds(),
        repeat_interval=settings.repeat_interval.total_seconds(),
        instance=settings.instance_name(health),
    )
    for alert in alerts:
        dispatcher.enqueue(alert)
    state.save(incidents)
    report = dispatcher.deliver()
    for sink, key, event, error in report.failed:
        log.error("Alert %s (%s) not delivered to sink %r yet: %s; retried next run", key, event, sink, error)
    return {
        "alerts": [f"{a.event}: {a.summary}" for a in alerts],
        "open": sorted(k for k, i in incidents.items() if i.opened_at is not None),
        "pending_deliveries": report.pending,
    }


DOC_MD = __doc__


def build_alerting_dag(
    dag_id: str = DEFAULT_DAG_ID,
    *,
    schedule: str | None = "* * * * *",
    dead_mans_switch_url: str | None = None,
    sinks_config: str | None = None,
    state_dir: str | None = None,
    api_url: str | None = None,
    api_conn_id: str | None = None,
    instance: str | None = None,
    threshold_seconds: float = 30.0,
    grace: timedelta = timedelta(seconds=60),
    repeat_interval: timedelta = timedelta(hours=1),
    expect_triggerer: str = "auto",
    expect_dag_processor: str = "auto",
    stuck_queued_after: timedelta | None = timedelta(minutes=10),
    stuck_running_after: timedelta | None = timedelta(hours=6),
    reconcile_grace: timedelta = timedelta(seconds=60),
    request_timeout: float = 10.0,
    notifiers: Sequence[Any] = (),
    start_date: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc),
    tags: tuple[str, ...] = ("crashsafe", "alerting"),
    **dag_kwargs: Any,
) -> DAG:
    """The alerting DAG (see the module docstring). Reads no configuration at parse time.

    :param dead_mans_switch_url: pinged every run; default ``[crashsafe] dead_mans_switch_url``.
    :param sinks_config: TOML/JSON file with ``[[sinks]]``; default ``[crashsafe] alerting_config``.
    :param state_dir: incidents and the alert outbox; default ``[crashsafe] alerting_state_dir``,
        else ``$AIRFLOW_HOME/crashsafe-alerting``.
    :param api_conn_id: HTTP connection to the REST API (stuck tasks, reconciliation, HA
        replicas); default ``[crashsafe] api_conn_id``, else ``crashsafe_api``. Without it those
        checks are skipped with a WARNING.
    :param notifiers: Airflow Notifiers (``SmtpNotifier(...)``, a Slack or PagerDuty provider's)
        alerted through beside the sinks, rendered with ``alert`` in their context; see
        :mod:`airflow_crashsafe.dags.notifiers`. Also ``[crashsafe] alert_notifiers``.
    :param grace: how long a condition must last before it pages.
    :param stuck_queued_after, stuck_running_after: None turns that half of the check off.
    """
    from airflow.sdk import DAG, TriggerRule, task

    from airflow_crashsafe.dags.round_trip import TriggererRoundTrip

    # Every AlertingSettings field, with its default (a unit test keeps the two in step).
    settings = AlertingSettings(
        dag_id=dag_id,
        dead_mans_switch_url=dead_mans_switch_url,
        sinks_config=sinks_config,
        state_dir=state_dir,
        api_url=api_url,
        api_conn_id=api_conn_id,
        instance=instance,
        threshold_seconds=threshold_seconds,
        grace=grace,
        repeat_interval=repeat_interval,
        expect_triggerer=expect_triggerer,
        expect_dag_processor=expect_dag_processor,
        stuck_queued_after=stuck_queued_after,
        stuck_running_after=stuck_running_after,
        reconcile_grace=reconcile_grace,
        request_timeout=request_timeout,
        notifiers=tuple(notifiers),
    )
    short = timedelta(seconds=max(60, int(4 * request_timeout)))
    defaults = {"retries": 0, "execution_timeout": short, "owner": "airflow-crashsafe"}
    defaults.update(dag_kwargs.pop("default_args", {}))
    dag_kwargs.setdefault("doc_md", DOC_MD)
    dag_kwargs.setdefault("is_paused_upon_creation", False)
    dag_kwargs.setdefault("dagrun_timeout", timedelta(minutes=10))
    with DAG(
        dag_id,
        schedule=schedule,
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        tags=list(tags),
        default_args=defaults,
        **dag_kwargs,
    ) as dag:

        @task(task_id="ping_dead_mans_switch")
        def ping_dead_mans_switch() -> Finding:
            return ping_task(settings)

        @task(task_id="check_heartbeats")
        def check_heartbeats() -> Finding:
            return heartbeats_task(settings)

        @task(task_id="find_stuck_tasks")
        def find_stuck_tasks() -> Finding:
            return stuck_task(settings)

        @task(task_id="reconcile_audit", execution_timeout=timedelta(minutes=5))
        def reconcile_audit() -> Finding:
            return audit_task(settings)

        @task(task_id="alert", trigger_rule=TriggerRule.ALL_DONE, execution_timeout=timedelta(minutes=2))
        def alert(ping: Any, heartbeats: Any, stuck: Any, audit: Any) -> dict[str, Any]:
            # Each is the check's Finding, or None when that task crashed (no XCom): typed Any
            # because at parse time they are XComArgs.
            findings = dict(zip(CHECK_TASKS, (ping, heartbeats, stuck, audit), strict=True))
            return alert_task(settings, findings)

        alerted = alert(ping_dead_mans_switch(), check_heartbeats(), find_stuck_tasks(), reconcile_audit())
        # Last, so a triggerer that runs no trigger fails the run: the canary then pages.
        alerted >> TriggererRoundTrip(task_id=ROUND_TRIP_TASK, settings=settings)
    return dag
