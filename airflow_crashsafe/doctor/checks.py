"""The doctor's checks, in the order they are printed, and the loop that runs them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from airflow_crashsafe.doctor.executor import check_celery, check_heartbeat_timeouts
from airflow_crashsafe.doctor.findings import ERROR, Finding
from airflow_crashsafe.doctor.metadata import check_idle_transaction_timeout, check_triggerer_for_adoption
from airflow_crashsafe.doctor.session_identity import check_scheduler_session_identity
from airflow_crashsafe.doctor.store_conn import check_store_connection
from airflow_crashsafe.dsn import mask_dsn_text
from airflow_crashsafe.errors import ConfigurationError

__all__ = ["CHECKS", "DoctorSettings", "run_checks"]


@dataclass(frozen=True)
class DoctorSettings:
    """What the checks need beyond Airflow's configuration."""

    #: Seconds the longest task may run (a broker must not redeliver before).
    longest_task: float = 3600.0


#: (name, check) in print order; a check returns one finding per hazard it looks for.
CHECKS: tuple[tuple[str, Callable[[DoctorSettings], list[Finding]]], ...] = (
    ("metadata_idle_transaction_timeout", lambda _: check_idle_transaction_timeout()),
    ("scheduler_session_identity", lambda _: check_scheduler_session_identity()),
    ("triggerer_for_adoption", lambda _: check_triggerer_for_adoption()),
    ("store_connection", lambda _: check_store_connection()),
    ("celery", lambda settings: check_celery(settings.longest_task)),
    ("heartbeat_timeouts", lambda _: check_heartbeat_timeouts()),
)


def run_checks(settings: DoctorSettings | None = None) -> list[Finding]:
    """Every check's findings; a check that fails to run becomes an ``error`` finding."""
    settings = settings or DoctorSettings()
    findings: list[Finding] = []
    for name, check in CHECKS:
        try:
            findings += check(settings)
        except ConfigurationError:
            raise
        except Exception as exc:  # one unreadable part must not hide the other hazards
            message = mask_dsn_text(str(exc).strip().splitlines()[0]) if str(exc).strip() else ""
            findings.append(
                Finding(name, ERROR, f"could not check from here: {type(exc).__name__}: {message}"[:500])
            )
    return findings
