"""The alerting DAG's checks as plain functions: arguments in, a finding (JSON) out.

None of them raises for what it is checking: an unreachable endpoint, a dead component or a
stuck task becomes a condition in the finding, and the DAG's last task alerts on it through
the sinks. A check that cannot run for want of configuration says so with a WARNING and returns
a finding with ``ran`` False, so nothing is skipped silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import requests

from airflow_crashsafe.dags.findings import Finding, condition, finding, from_watchdog
from airflow_crashsafe.watchdog.health import parse_timestamp

__all__ = ["ApiAccess", "check_heartbeats", "find_stuck_tasks", "ping_dead_mans_switch", "run_reconcile"]

log = logging.getLogger(__name__)

TASK_INSTANCES = "/api/v2/dags/~/dagRuns/~/taskInstances"


@dataclass(frozen=True)
class ApiAccess:
    """How to reach the public REST API: a root URL and optional credentials (never logged)."""

    base_url: str
    token: str | None = None
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        return f"ApiAccess({self.base_url!r}, authenticated={bool(self.token or self.username)})"

    def credentials(self) -> dict[str, str | None]:
        return {"token": self.token, "username": self.username, "password": self.password}

    def client(self, timeout: float) -> Any:
        from airflow_crashsafe.audit.reconcile import AirflowApi

        return AirflowApi(
            self.base_url, token=self.token, username=self.username, password=self.password, timeout=timeout
        )


def _host(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def ping_dead_mans_switch(url: str | None, *, timeout: float = 10.0) -> Finding:
    """GET ``url`` (healthchecks.io, Cronitor, Dead Man's Snitch...): the external monitor pages
    when these pings stop, which is the path that still works when all of Airflow is down.

    The URL carries the monitor's token, so only its host is ever logged or alerted.
    """
    check = "dead_mans_switch"
    if not url:
        log.warning(
            "No dead-man's switch URL configured (build_alerting_dag(dead_mans_switch_url=...) or "
            "[crashsafe] dead_mans_switch_url): nothing outside Airflow will notice if Airflow stops."
        )
        return finding(check, ran=False, notes=["no dead-man's switch URL configured"])
    host = _host(url)
    try:
        response = requests.get(url, timeout=timeout, headers={"User-Agent": "airflow-crashsafe-alerting"})
        error = None if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
    except requests.RequestException as exc:
        error = type(exc).__name__
    if error is None:
        log.info("Pinged the dead-man's switch at %s", host)
        return finding(check)
    log.warning("Dead-man's switch ping to %s failed: %s", host, error)
    summary = (
        f"Dead-man's switch ping to {host} failed ({error}): the external monitor will page "
        "when it misses its pings although Airflow runs"
    )
    return finding(check, conditions=[condition("ping_failed", "warning", summary, details={"error": error})])


def check_heartbeats(
    api: ApiAccess,
    *,
    threshold: float,
    expect_triggerer: str = "auto",
    expect_dag_processor: str = "auto",
    timeout: float = 10.0,
    instance: str = "airflow",
    now: datetime | None = None,
) -> Finding:
    """Every component's heartbeat, judged by the watchdog's rules (HA replicas need credentials)."""
    from airflow_crashsafe.sensors.heartbeat import read_health
    from airflow_crashsafe.watchdog.rules import Rules, conditions

    observation = read_health(api.base_url, timeout=timeout, now=now, **api.credentials())
    rules = Rules(
        threshold=threshold,
        grace=0,
        expect_triggerer=expect_triggerer,
        expect_dag_processor=expect_dag_processor,
        instance=instance,
    )
    found, seen = conditions(observation, rules)
    for note in observation.notes:
        log.warning("Heartbeat check: %s", note)
    if found:
        log.warning("Heartbeat check: %s", "; ".join(c.summary for c in found.values()))
    else:
        log.info("Heartbeat check: every expected component is alive at %s", api.base_url)
    return finding("heartbeats", complete=seen, conditions=from_watchdog(found), notes=observation.notes)


def _skipped(check: str, what: str, conn_id: str) -> Finding:
    log.warning(
        "%s skipped: it needs Airflow's REST API and no connection %r exists. A task cannot use its "
        "execution-API token for the REST API; create an HTTP connection %r (host: the api-server "
        'root; login/password, or extra {"token": ...}; no credentials if the API needs none).',
        what,
        conn_id,
        conn_id,
    )
    return finding(check, ran=False, notes=[f"skipped: no connection {conn_id!r}"])


def find_stuck_tasks(
    api: ApiAccess | None,
    *,
    queued_after: timedelta | None,
    running_after: timedelta | None,
    now: datetime,
    exclude_dag_ids: tuple[str, ...] = (),
    timeout: float = 10.0,
    conn_id: str = "crashsafe_api",
    limit: int = 100,
) -> Finding:
    """Task instances queued longer than ``queued_after`` or running longer than ``running_after``,
    one incident per state (listing the tasks), so a dead scheduler does not page per task."""
    check = "stuck_tasks"
    if api is None:
        return _skipped(check, "Stuck-task check", conn_id)
    client = api.client(timeout)
    found: list[dict[str, Any]] = []
    for state, after, field in (
        ("queued", queued_after, "queued_when"),
        ("running", running_after, "start_date"),
    ):
        if after is None:
            continue
        cutoff = now - after
        params: dict[str, Any] = {"state": state, "limit": limit, "order_by": "run_after"}
        if state == "running":
            params["start_date_lte"] = cutoff.isoformat()
        try:
            body = client.get(TASK_INSTANCES, params) or {}
        except (requests.RequestException, ValueError) as exc:  # ConfigurationError is a ValueError
            summary = f"Stuck-task check could not read the REST API: {exc}"
            log.warning("%s", summary)
            cond = condition("api_error", "warning", summary, details={"error": str(exc)})
            return finding(check, complete=False, conditions=[cond])
        stuck = []
        for ti in body.get("task_instances", []):
            since = parse_timestamp(ti.get(field))
            if since is None or since > cutoff or ti.get("dag_id") in exclude_dag_ids:
                continue
            stuck.append((since, ti))
        if not stuck:
            continue
        stuck.sort(key=lambda item: item[0])
        tasks = [
            f"{ti.get('dag_id')}.{ti.get('task_id')}[{ti.get('map_index')}] run={ti.get('dag_run_id')} "
            f"try={ti.get('try_number')} {state} since {since.isoformat()}"
            + (f" on {ti.get('hostname')}" if ti.get("hostname") else "")
            for since, ti in stuck
        ]
        minutes = after.total_seconds() / 60
        summary = f"{len(stuck)} task(s) {state} for more than {minutes:g} min"
        log.warning("%s: %s", summary, "; ".join(tasks[:10]))
        details = {"tasks": tasks[:50], "total_seen": body.get("total_entries")}
        found.append(
            condition(f"{state}_too_long", "warning", summary, began_at=stuck[0][0], details=details)
        )
    if not found:
        log.info("No task instance queued or running longer than allowed")
    return finding(check, conditions=found)


def run_reconcile(
    api: ApiAccess | None,
    *,
    grace: timedelta,
    timeout: float = 30.0,
    conn_id: str = "crashsafe_api",
    store: Any = None,
) -> Finding:
    """``airflow-crashsafe audit reconcile``: fill attempt ends no hook reported (resets, SIGKILLs)."""
    check = "audit_reconcile"
    if api is None:
        return _skipped(check, "Audit reconciliation", conn_id)
    from airflow_crashsafe.audit.reconcile import reconcile
    from airflow_crashsafe.store import open_store

    try:
        report = reconcile(store if store is not None else open_store(), api.client(timeout), grace=grace)
    except Exception as exc:  # store unreachable, bad credentials: alert, keep the run going
        summary = f"Audit reconciliation failed: {type(exc).__name__}: {exc}"
        log.warning("%s", summary)
        return finding(check, complete=False, conditions=[condition("failed", "warning", summary)])
    notes = [
        f"{report.task_instances} task instances: {report.ends_filled} ends filled, "
        f"{report.tries_added} tries added, {report.still_running} still running, "
        f"{len(report.not_found)} not found, {len(report.errors)} errors"
    ]
    if not report.errors:
        return finding(check, notes=notes)
    summary = f"Audit reconciliation could not read {len(report.errors)} task instance(s)"
    details = {"errors": report.errors[:20]}
    return finding(check, notes=notes, conditions=[condition("errors", "warning", summary, details=details)])
