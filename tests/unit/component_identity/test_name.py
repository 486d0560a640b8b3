"""The session identity's format: within 63 bytes, parsed back, hosts compared by what survived."""

from __future__ import annotations

import pytest

from airflow_crashsafe.component_identity.name import MAX_BYTES, application_name, parse


def test_an_identity_round_trips() -> None:
    """Component, job id, pid and host come back exactly; a short name is not marked cut."""
    name = application_name("scheduler", 17, 4242, "sched-1.example.com")
    assert name == "airflow-scheduler job=17 pid=4242 host=sched-1.example.com"
    identity = parse(name)
    assert identity is not None
    assert (identity.component, identity.job_id, identity.pid, identity.host) == (
        "scheduler",
        17,
        4242,
        "sched-1.example.com",
    )
    assert not identity.truncated
    assert identity.host_matches("sched-1.example.com")
    assert not identity.host_matches("sched-1.example.com.evil")  # whole host, not a prefix


def test_a_long_host_is_cut_last_and_compared_by_the_part_that_survived() -> None:
    """The biggest job id and pid still leave room for the host's start; only that part is compared."""
    host = "ip-172-31-255-255.ap-southeast-2.compute.internal"
    name = application_name("dag-processor", 2147483647, 4194304, host)
    assert len(name.encode()) == MAX_BYTES
    identity = parse(name)
    assert identity is not None
    assert (identity.job_id, identity.pid, identity.truncated) == (2147483647, 4194304, True)
    assert identity.host
    assert host.startswith(identity.host)
    assert identity.host_matches(host)
    assert not identity.host_matches("ip-10-0-0-1.ec2.internal")
    assert not identity.host_matches(None)


@pytest.mark.parametrize(
    "name",
    [
        None,
        "",
        "psql",
        "analyst-psql",
        "DBeaver 24.1.0 - SQLEditor <airflow>",
        "airflow-scheduler",
        "airflow-scheduler job=1 pid=2",
        "airflow-webserver job=1 pid=2 host=h",
        "airflow-scheduler job=01 pid=2 host=h",
        "airflow-scheduler job=1 pid=2 host=two words",
        " airflow-scheduler job=1 pid=2 host=h",
    ],
)
def test_anything_else_is_no_identity(name: str | None) -> None:
    """People's tools, other programs, near misses: no identity at all."""
    assert parse(name) is None


def test_a_non_ascii_host_never_matches() -> None:
    """PostgreSQL rewrites non-ASCII: the identity is built with '?' and matches no real host."""
    name = application_name("scheduler", 1, 2, "hôte")
    identity = parse(name)
    assert identity is not None
    assert not identity.host_matches("hôte")
