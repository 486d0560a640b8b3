"""The identity hook: registered with Airflow's listener managers, silent outside a job, never raising."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_crashsafe.component_identity import listener
from airflow_crashsafe.component_identity.name import application_name


@pytest.fixture(autouse=True)
def no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no job installed in this process, and leaves none."""
    monkeypatch.setattr(listener, "_job", None)


def test_the_plugin_registers_the_hook_with_both_listener_managers() -> None:
    """Airflow's core and Task SDK listener managers accept on_starting; the plugin lists the module."""
    from airflow.listeners.listener import get_listener_manager as core_manager
    from airflow.sdk.listener import get_listener_manager as sdk_manager

    from airflow_crashsafe.plugin import CrashsafePlugin

    assert listener in CrashsafePlugin.listeners
    for manager in (core_manager(), sdk_manager()):
        if not manager.pm.is_registered(listener):
            manager.add_listener(listener)
        impls = manager.pm.hook.on_starting.get_hookimpls()
        assert listener.on_starting in [i.function for i in impls]


def postgres_engine() -> Any:
    """An engine on PostgreSQL that never connects (the hook only attaches events)."""
    from sqlalchemy import create_engine

    return create_engine("postgresql+psycopg2://nobody@127.0.0.1:9/none")


class Job:
    """Stands in for Airflow's Job where only its loaded attributes matter."""

    def __init__(self, **state: Any) -> None:
        self.__dict__.update(state)


def test_the_identity_appears_once_the_job_has_a_type_and_an_id() -> None:
    """Before the runner sets the type and the row gets its id there is no identity; then the scheduler's."""
    import os

    job = Job(job_type=None, id=None, hostname="sched-1")
    assert listener.install(job, postgres_engine())
    assert listener.current_identity() is None
    job.job_type = "SchedulerJob"
    assert listener.current_identity() is None
    job.id = 41
    assert listener.current_identity() == application_name("scheduler", 41, os.getpid(), "sched-1")


def test_not_on_sqlite_and_not_for_a_task_runner(caplog: pytest.LogCaptureFixture) -> None:
    """A non-PostgreSQL engine is left alone; the task runner's marker and other objects are ignored."""
    from sqlalchemy import create_engine

    assert not listener.install(Job(job_type="SchedulerJob", id=1, hostname="h"), create_engine("sqlite://"))
    with caplog.at_level(logging.WARNING):
        listener.on_starting(component=SimpleNamespace(job_type="SchedulerJob", id=1, hostname="h"))
    assert listener.current_identity() is None
    assert caplog.records == []


def test_a_broken_engine_is_logged_never_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever fails while attaching, Airflow's job goes on: the hook logs and returns."""
    from airflow import settings
    from airflow.jobs.job import Job as AirflowJob

    monkeypatch.setattr(settings, "engine", SimpleNamespace(dialect=None))
    with caplog.at_level(logging.DEBUG, logger=listener.log.name):
        listener.on_starting(component=AirflowJob.__new__(AirflowJob))
    assert [r for r in caplog.records if "attach the session identity" in r.getMessage()]
    assert listener.current_identity() is None
