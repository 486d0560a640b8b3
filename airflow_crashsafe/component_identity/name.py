"""The ``application_name`` an Airflow component's own metadata sessions carry, built and parsed.

``airflow-scheduler job=17 pid=4242 host=sched-1.example.com``: the component, the id of its
``job`` row, the process that created that job, and the job row's ``hostname``. PostgreSQL keeps
only the first 63 bytes of an application name, so the fields that must survive come first and
the host last; a parsed identity whose host may have been cut says so, and only the part that
survived is compared. Non-ASCII never matches (PostgreSQL rewrites it), which fails safe: an
identity that cannot be matched proves nothing. Imports nothing from Airflow: the watchdog uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["COMPONENT_OF_JOB_TYPE", "MAX_BYTES", "ComponentIdentity", "application_name", "parse"]

#: PostgreSQL's limit on ``application_name`` (NAMEDATALEN - 1); longer names are cut silently.
MAX_BYTES = 63
#: The ``job`` row's ``job_type`` -> the component named in the identity.
COMPONENT_OF_JOB_TYPE = {
    "SchedulerJob": "scheduler",
    "TriggererJob": "triggerer",
    "DagProcessorJob": "dag-processor",
}
# A job id is an int4 and a pid at most 7 digits, so everything up to "host=" always fits.
_PATTERN = re.compile(
    r"airflow-(scheduler|triggerer|dag-processor) job=([1-9][0-9]{0,9}) pid=([1-9][0-9]{0,9}) "
    r"host=([\x21-\x7e]*)"
)


@dataclass(frozen=True)
class ComponentIdentity:
    """A parsed identity. ``truncated``: the name filled PostgreSQL's limit, so the host may be cut."""

    component: str
    job_id: int
    pid: int
    host: str
    truncated: bool = False

    def host_matches(self, hostname: str | None) -> bool:
        """Whether ``hostname`` (the job row's) is this host: equal, or starting with what survived."""
        if not hostname or not self.host:
            return False
        return hostname.startswith(self.host) if self.truncated else hostname == self.host

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly summary for alert details."""
        return {
            "component": self.component,
            "job_id": self.job_id,
            "pid": self.pid,
            "host": self.host + ("…" if self.truncated else ""),
        }


def application_name(component: str, job_id: int, pid: int, host: str) -> str:
    """The identity as PostgreSQL will store it: ASCII, at most :data:`MAX_BYTES` bytes."""
    text = f"airflow-{component} job={int(job_id)} pid={int(pid)} host={host}"
    return text.encode("ascii", "replace")[:MAX_BYTES].decode("ascii")


def parse(name: str | None) -> ComponentIdentity | None:
    """The identity in ``name``, or None when it is not one (a person's tool, another program)."""
    match = _PATTERN.fullmatch(name or "")
    if match is None:
        return None
    component, job_id, pid, host = match.groups()
    truncated = len((name or "").encode("utf-8")) >= MAX_BYTES
    return ComponentIdentity(component, int(job_id), int(pid), host, truncated)
