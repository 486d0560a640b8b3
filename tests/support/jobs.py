"""A real in-process external job service, and operators that submit to it the crashsafe way and
Airflow's plain way (``ResumableJobMixin``).

The service speaks HTTP on 127.0.0.1: ``POST /jobs {"name", "spec"}`` creates a job and answers its
id (it does not deduplicate names, like many batch services); ``GET /jobs?name=N`` lists the ids of
jobs with that name; ``GET /jobs/ID`` gives a job's state (``RUNNING`` until ``run_seconds`` pass,
then ``SUCCEEDED``, or ``FAILED`` for names in ``fail_names``). ``submissions`` counts every job
ever created, so a test can assert that a crash did not submit twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
from airflow.sdk import BaseOperator, ResumableJobMixin

from airflow_crashsafe.effects import CrashsafeResumableJobMixin
from tests.support.httpserver import Recorded, Reply, serve

__all__ = ["JobService", "KeyedJobOperator", "PlainResumableJobOperator", "job_service"]


@dataclass
class JobService:
    """The service's state, shared with the handler thread."""

    url: str = ""
    run_seconds: float = 0.2
    fail_names: set[str] = field(default_factory=set)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def submissions(self) -> int:
        with self.lock:
            return len(self.jobs)

    def names(self) -> list[str]:
        with self.lock:
            return [job["name"] for job in self.jobs.values()]

    def _create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        with self.lock:
            job_id = f"job-{len(self.jobs) + 1}"
            self.jobs[job_id] = {"id": job_id, "name": body.get("name"), "at": time.monotonic()}
        return {"id": job_id}

    def _state(self, job_id: str) -> dict[str, Any] | None:
        with self.lock:
            job = self.jobs.get(job_id)
        if job is None:
            return None
        if time.monotonic() - job["at"] < self.run_seconds:
            state = "RUNNING"
        else:
            state = "FAILED" if job["name"] in self.fail_names else "SUCCEEDED"
        return {"id": job_id, "name": job["name"], "state": state, "rows": 42}

    def _find(self, name: str) -> dict[str, Any]:
        with self.lock:
            return {"ids": [job_id for job_id, job in self.jobs.items() if job["name"] == name]}


@contextmanager
def job_service(**settings: Any) -> Iterator[JobService]:
    """Run a job service on a free loopback port for the duration of the block."""
    service = JobService(**settings)

    def answer(request: Recorded) -> Reply:
        parts = urlsplit(request.path)
        if request.method == "POST":
            return Reply(201, service._create(request.json()))
        if parts.path == "/jobs":
            return Reply(200, service._find(parse_qs(parts.query).get("name", [""])[0]))
        state = service._state(parts.path.rsplit("/", 1)[-1])
        return Reply(404, {"error": "no such job"}) if state is None else Reply(200, state)

    with serve(answer) as server:
        service.url = server.url
        yield service


class _JobClient:
    """What both operators do against the service: the parts ResumableJobMixin leaves abstract."""

    service_url: str
    poll_seconds = 0.05

    def _post_job(self, name: str) -> str:
        response = requests.post(f"{self.service_url}/jobs", json={"name": name}, timeout=10)
        response.raise_for_status()
        return str(response.json()["id"])

    def get_job_status(self, external_id: Any, context: Any) -> str:
        response = requests.get(f"{self.service_url}/jobs/{external_id}", timeout=10)
        response.raise_for_status()
        return str(response.json()["state"])

    def is_job_active(self, status: str) -> bool:
        return status == "RUNNING"

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        while self.is_job_active(status := self.get_job_status(external_id, context)):
            time.sleep(self.poll_seconds)
        if not self.is_job_succeeded(status):
            raise RuntimeError(f"job {external_id} ended {status}")

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        response = requests.get(f"{self.service_url}/jobs/{external_id}", timeout=10)
        return {"job": external_id, "rows": response.json()["rows"]}


class KeyedJobOperator(_JobClient, CrashsafeResumableJobMixin, BaseOperator):
    """Submits under the crashsafe key (as the job's name) and can find a job by it."""

    def __init__(self, *, service_url: str, lookup: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service_url = service_url
        self.lookup = lookup

    def execute(self, context: Any) -> Any:
        return self.execute_resumable(context)

    def submit_job(self, context: Any) -> Any:
        assert self.crashsafe_key is not None
        return self._post_job(self.crashsafe_key)

    def find_job(self, key: str, context: Any) -> Any:
        if not self.lookup:
            return super().find_job(key, context)
        response = requests.get(f"{self.service_url}/jobs", params={"name": key}, timeout=10)
        response.raise_for_status()
        ids = response.json()["ids"]
        return ids[-1] if ids else None


class PlainResumableJobOperator(_JobClient, ResumableJobMixin, BaseOperator):
    """Airflow's own mixin: the job id is persisted to task_state_store after submit_job returns."""

    def __init__(self, *, service_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service_url = service_url

    def execute(self, context: Any) -> Any:
        return self.execute_resumable(context)

    def submit_job(self, context: Any) -> Any:
        return self._post_job(f"{self.task_id}-try{context['ti'].try_number}")
