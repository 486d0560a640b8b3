"""Read an :class:`~airflow_crashsafe.watchdog.health.Observation` from Airflow's api-server.

The unauthenticated health endpoint is always read. With credentials (a bearer token, or a user
and password exchanged at ``/auth/token``), the REST API also gives every running job (so a dead
HA replica is seen), the canary DAG's newest successful run and the running task instances.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.health import (
    COMPONENT_OF_JOB_TYPE,
    HealthFormatError,
    JobRecord,
    Observation,
    parse_health,
    parse_timestamp,
)

if TYPE_CHECKING:
    from airflow_crashsafe.watchdog.runs import RunReader

__all__ = ["HEALTH_PATH", "AccessDenied", "ApiSource", "NotFound"]

HEALTH_PATH = "/api/v2/monitor/health"
_DENIED = (401, 403)


class AccessDenied(ValueError):
    """An endpoint answered 401 or 403: a monitoring blind spot, not a passing hiccup.

    ``source`` names the blind spot: the endpoint's, or ``login`` when the login itself failed
    (then every authenticated endpoint is blind, and one alert says so).
    """

    def __init__(self, message: str, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class NotFound(ValueError):
    """The api-server answered 404: the path (or the object it names) does not exist there."""


def _refused(blind: dict[str, str], source: str, exc: AccessDenied, lost: str) -> None:
    if exc.source == "login":
        blind["login"] = f"{exc} (replicas, canary and running tasks unchecked)"
    else:
        blind[source] = f"{exc} ({lost})"


def _safe_url(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class ApiSource:
    """Polls one api-server. ``base_url`` is its root (``http://host:8080``) or the health URL."""

    source = "api"

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 5.0,
        token: str | None = None,
        username: str | None = None,
        password: str | None = None,
        canary_dag_id: str | None = None,
        session: requests.Session | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        if base.endswith(HEALTH_PATH):
            base = base[: -len(HEALTH_PATH)]
        if not base.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"--api-url must start with http:// or https://, got {_safe_url(base_url)!r}: give the "
                "api-server's root URL, e.g. http://airflow-api:8080"
            )
        self.base = base
        self.health_url = base + HEALTH_PATH
        self.timeout = timeout
        self._static_token = token
        self._token = token
        self._username, self._password = username, password
        self.canary_dag_id = canary_dag_id
        self._session = session or requests.Session()
        #: Reads the runs of DAGs with a deadline (set by the CLI when ``[[deadlines]]`` exist).
        self.runs: RunReader | None = None

    @property
    def target(self) -> str:
        return _safe_url(self.health_url)

    @property
    def authenticated(self) -> bool:
        return bool(self._static_token or (self._username and self._password))

    def observe(self, now: datetime) -> Observation:
        """One poll; never raises for a network or format problem."""
        try:
            response = self._session.get(self.health_url, timeout=self.timeout)
        except requests.RequestException as exc:
            return Observation(
                at=now, source="api", error=f"cannot reach {self.target}: {type(exc).__name__}"
            )
        if response.status_code in _DENIED:
            # Airflow serves health without auth: a proxy in front demands credentials.
            problem = f"GET {self.target} answers HTTP {response.status_code}"
            return Observation(
                at=now,
                source="api",
                error=f"GET {self.target} answered HTTP {response.status_code}",
                blind_spots={"health": problem},
            )
        if response.status_code != 200:
            hint = ""
            if response.status_code == 404:
                hint = (
                    " - is --api-url the api-server's root (e.g. http://localhost:8080)? "
                    "Airflow 3 serves health at /api/v2/monitor/health"
                )
            return Observation(
                at=now, source="api", error=f"GET {self.target} answered HTTP {response.status_code}{hint}"
            )
        try:
            observation = parse_health(response.json(), now)
        except ValueError as exc:  # includes JSON decode errors and HealthFormatError
            kind = "not Airflow's health JSON" if isinstance(exc, HealthFormatError) else "not JSON"
            return Observation(at=now, source="api", error=f"GET {self.target} answered {kind}: {exc}")
        if self.authenticated:
            observation = self._enrich(observation)
        elif self.canary_dag_id:
            observation = dataclasses.replace(
                observation,
                notes=("canary not checked: the DAG-runs API needs --api-token-env or --api-user",),
            )
        if self.runs is not None:
            observation = self._read_runs(observation)
        return observation

    def _enrich(self, observation: Observation) -> Observation:
        notes: list[str] = []
        blind: dict[str, str] = {}
        changes: dict[str, Any] = {}
        try:
            body = self._get_json("/api/v2/jobs", {"job_state": "running", "limit": 100})
            running = [job for job in body.get("jobs", []) if job.get("job_type") in COMPONENT_OF_JOB_TYPE]
            records = [
                JobRecord(
                    COMPONENT_OF_JOB_TYPE[job["job_type"]],
                    parse_timestamp(job.get("latest_heartbeat")),
                    state=job.get("state"),
                    job_id=job.get("id"),
                    hostname=job.get("hostname"),
                )
                for job in running
            ]
            seen = {r.component for r in records}
            # A component with no running row keeps the health endpoint's view of its newest job.
            records += [job for job in observation.jobs if job.component not in seen]
            changes["jobs"] = tuple(records)
        except AccessDenied as exc:
            _refused(blind, "jobs", exc, "scheduler replicas unwatched")
            notes.append(f"jobs list unavailable: {exc}")
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            notes.append(f"jobs list unavailable: {_describe(exc)}")
        if self.canary_dag_id:
            try:
                path = f"/api/v2/dags/{quote(self.canary_dag_id, safe='')}/dagRuns"
                body = self._get_json(path, {"state": "success", "order_by": "-end_date", "limit": 1})
                runs = body.get("dag_runs", [])
                changes["canary_checked"] = True
                changes["canary_last_success"] = parse_timestamp(runs[0].get("end_date")) if runs else None
            except AccessDenied as exc:
                _refused(blind, "canary", exc, "canary DAG unchecked")
                notes.append(f"canary not checked: {exc}")
            except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
                notes.append(f"canary not checked: {_describe(exc)}")
        try:
            body = self._get_json(
                "/api/v2/dags/~/dagRuns/~/taskInstances", {"state": ["running", "queued"], "limit": 50}
            )
            changes["running_tasks"] = tuple(
                f"{ti.get('dag_id')}.{ti.get('task_id')}[{ti.get('map_index')}] run={ti.get('dag_run_id')} "
                f"try={ti.get('try_number')} {ti.get('state')} on {ti.get('hostname')}"
                for ti in body.get("task_instances", [])
            )
        except AccessDenied as exc:
            _refused(blind, "task_instances", exc, "running tasks unlisted")
            notes.append(f"running tasks unavailable: {exc}")
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            notes.append(f"running tasks unavailable: {_describe(exc)}")
        return dataclasses.replace(observation, notes=tuple(notes), blind_spots=blind, **changes)

    def _read_runs(self, observation: Observation) -> Observation:
        if not self.authenticated:
            note = "deadlines not checked: the DAG-runs API needs --api-token-env or --api-user"
            return dataclasses.replace(observation, notes=(*observation.notes, note))
        from airflow_crashsafe.watchdog.run_fetchers import ApiRunFetcher

        assert self.runs is not None
        dags = self.runs.read(ApiRunFetcher(self.get_json, self.post_json), observation.at)
        return dataclasses.replace(observation, deadline_dags=dags)

    def get_json(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        """GET an authenticated REST path; raise ValueError (or a requests error) unless 200 JSON."""
        return self._get_json(path, params)

    def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a JSON query to a read-only REST path (the ``.../list`` batch reads), as :meth:`get_json`."""
        return self._request("POST", path, json_body=body)

    def _get_json(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        return self._request("GET", path, params=params)

    def _request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json_body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        for attempt in (1, 2):
            response = self._session.request(
                method,
                self.base + path,
                params=params,
                json=json_body,
                headers=self._auth_header(),
                timeout=self.timeout,
            )
            if response.status_code == 401 and attempt == 1 and not self._static_token:
                self._token = None  # expired: log in again once
                continue
            if response.status_code in _DENIED:
                raise AccessDenied(f"{method} {path} answers HTTP {response.status_code}")
            if response.status_code == 404:
                raise NotFound(f"{method} {path} answered HTTP 404")
            if response.status_code != 200:
                raise ValueError(f"{method} {path} answered HTTP {response.status_code}")
            body = response.json()
            if not isinstance(body, dict):
                raise ValueError(f"{method} {path} did not answer a JSON object")
            return body
        raise ValueError(f"{method} {path} answered HTTP 401 twice")  # pragma: no cover - loop returns

    def _auth_header(self) -> dict[str, str]:
        if self._token is None and self._username and self._password:
            response = self._session.post(
                self.base + "/auth/token",
                json={"username": self._username, "password": self._password},
                timeout=self.timeout,
            )
            if response.status_code in _DENIED:
                raise AccessDenied(f"login at /auth/token answers HTTP {response.status_code}", "login")
            if response.status_code not in (200, 201):
                raise ValueError(f"login at /auth/token answered HTTP {response.status_code}")
            self._token = str(response.json()["access_token"])
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ValueError) else type(exc).__name__
