"""Fill in the ends no hook reported, from Airflow's task-instance history (REST API v2).

A reset attempt fires no listener hook, and a SIGKILLed one cannot: its row stays open. For every
open execution older than ``grace``, this reads ``GET /api/v2/dags/{dag}/dagRuns/{run}/
taskInstances/{task}/tries?map_index=N`` (archived tries from ``task_instance_history`` plus the
current try) and merges each finished try's end and state into the store with source
``reconcile``; a try that ran but left no record at all is added too. Works against any
api-server: no auth (SimpleAuthManager ``all_admins``), a bearer token, or a user and password
exchanged at ``POST /auth/token``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import requests

from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.store import attempts
from airflow_crashsafe.store.store import Store

__all__ = ["AirflowApi", "ReconcileReport", "reconcile"]

log = logging.getLogger(__name__)
_FINISHED = {"success", "failed", "skipped", "upstream_failed", "removed", "up_for_retry"}


class AirflowApi:
    """A minimal client of Airflow's public REST API."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 10.0,
        session: requests.Session | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"--api-url must start with http:// or https://, got {base_url!r}")
        self.base = base_url.rstrip("/")
        self._static, self._token = token, token
        self._username, self._password = username, password
        self.timeout = timeout
        self._session = session or requests.Session()

    def _headers(self) -> dict[str, str]:
        if self._token is None and self._username and self._password:
            response = self._session.post(
                self.base + "/auth/token",
                timeout=self.timeout,
                json={"username": self._username, "password": self._password},
            )
            if response.status_code not in (200, 201):
                raise ConfigurationError(
                    f"login at {self.base}/auth/token answered HTTP {response.status_code}"
                )
            self._token = str(response.json()["access_token"])
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """GET a JSON object; None on 404. Re-logs in once on 401."""
        for attempt in (1, 2):
            response = self._session.get(
                self.base + path, params=params, headers=self._headers(), timeout=self.timeout
            )
            if response.status_code == 401 and attempt == 1 and not self._static and self._username:
                self._token = None
                continue
            if response.status_code == 404:
                return None
            if response.status_code in (401, 403):
                raise ConfigurationError(
                    f"GET {path} answered HTTP {response.status_code}: give --api-token-env or "
                    "--api-user/--api-password-env for a user who may read task instances"
                )
            response.raise_for_status()
            body = response.json()
            if not isinstance(body, dict):
                raise ValueError(f"GET {path} did not answer a JSON object")
            return body
        return None  # pragma: no cover - the loop returns or raises

    def tries(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> list[dict[str, Any]] | None:
        """Every try of one task instance (history and current), or None if Airflow has none."""
        path = "/api/v2/dags/{}/dagRuns/{}/taskInstances/{}/tries".format(
            *(quote(p, safe="") for p in (dag_id, run_id, task_id))
        )
        body = self.get(path, {"map_index": map_index})
        return None if body is None else list(body.get("task_instances", []))


@dataclass
class ReconcileReport:
    """What one reconcile pass did."""

    task_instances: int = 0
    ends_filled: int = 0
    tries_added: int = 0
    still_running: int = 0
    not_found: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _ts(value: Any) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _event(ti: tuple[str, str, int, str], partition: str, t: dict[str, Any]) -> AttemptEvent:
    dag_id, task_id, map_index, run_id = ti
    state = t.get("state")
    return AttemptEvent(
        source="reconcile",
        dag_id=dag_id,
        task_id=task_id,
        map_index=map_index,
        run_id=run_id,
        try_number=int(t["try_number"]),
        hostname=str(t.get("hostname") or ""),
        pid=int(t.get("pid") or 0),
        slot_partition=partition,
        started_at=_ts(t.get("start_date")),
        ended_at=_ts(t.get("end_date")) if state in _FINISHED else None,
        state=state,
    )


def reconcile(
    store: Store, api: AirflowApi, *, grace: timedelta = timedelta(seconds=60), now: datetime | None = None
) -> ReconcileReport:
    """One pass over the open executions that started more than ``grace`` ago."""
    now = now or datetime.now(timezone.utc)
    report = ReconcileReport()
    with store.transaction() as db:
        rows = attempts.open_attempts(db, started_before=now - grace)
    groups: dict[tuple[str, str, int, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["dag_id"], row["task_id"], int(row["map_index"]), row["run_id"])
        group = groups.setdefault(key, {"partition": "", "open": set()})
        group["partition"] = group["partition"] or row["slot_partition"]
        group["open"].add(int(row["try_number"]))
    for key, group in groups.items():
        report.task_instances += 1
        try:
            tries = api.tries(key[0], key[3], key[1], key[2])
        except (requests.RequestException, ValueError) as exc:
            report.errors.append(f"{key[0]}.{key[1]}[{key[2]}] {key[3]}: {type(exc).__name__}: {exc}")
            continue
        if tries is None:
            report.not_found.append(f"{key[0]}.{key[1]}[{key[2]}] {key[3]}")
            continue
        with store.transaction() as db:
            existing = attempts.task_instance_rows(
                db, dag_id=key[0], task_id=key[1], map_index=key[2], run_id=key[3]
            )
            known = {int(r["try_number"]) for r in existing}
            procs = {(int(r["try_number"]), r["hostname"], int(r["pid"])) for r in existing}
            for t in tries:
                event = _event(key, group["partition"], t)
                if event.started_at is None:
                    continue  # never ran (failed while queued)
                if event.ended_at is None:
                    report.still_running += event.try_number in group["open"]
                    continue
                if event.try_number in group["open"]:
                    report.ends_filled += 1
                    if (event.try_number, event.hostname, event.pid) not in procs:
                        event = replace(event, hostname="", pid=0)  # every row of that try
                elif event.try_number not in known:
                    report.tries_added += 1
                else:
                    continue
                attempts.record(db, event)
    log.info("crashsafe reconcile: %s", report)
    return report
