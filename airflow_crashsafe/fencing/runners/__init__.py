"""One runner per dialect: *how* a :class:`~airflow_crashsafe.fencing.decision.Run` is written.

A runner takes the write plan (:mod:`airflow_crashsafe.sql.plans`, *what* to write) and runs it
under the attempt's token, records the commit and returns the operator's result. It also holds
what ``on_kill`` needs while the write runs.

- PostgreSQL: :class:`~.server_unit.ServerUnitRunner`, one server-side unit that commits even
  if its sender is killed, and that a re-run can adopt;
- SQLite: :class:`~.client.ClientRunner`, the client-driven fenced transaction.

A new database is a new runner here (and a method for it on the plans), chosen in :func:`runner_for`.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from airflow_crashsafe.fencing.decision import Run
from airflow_crashsafe.fencing.runners.client import ClientRunner
from airflow_crashsafe.fencing.runners.server_unit import ServerUnitRunner
from airflow_crashsafe.sql.plans import WritePlan
from airflow_crashsafe.store.dbapi import Db

__all__ = ["ClientRunner", "Runner", "ServerUnitRunner", "runner_for"]

P = TypeVar("P")


class Runner(Protocol):
    """Runs a plan's write for one attempt on one open connection."""

    @property
    def in_flight_units(self) -> bool:
        """Whether writes run as server-side units that may outlive their attempt (probe, adopt)."""
        ...

    @property
    def unit_running(self) -> bool:
        """Whether a server-side unit of this runner is running right now."""
        ...

    def run(self, run: Run, plan: WritePlan[P], prepared: P) -> dict[str, Any]:
        """Write under ``run.token``, record the commit; the operator's result."""
        ...

    def on_kill(self, task_id: str, *, leave_unit: bool) -> None:
        """Cancel what runs (or, with ``leave_unit``, leave a running unit to commit)."""
        ...


def runner_for(db: Db) -> Runner:
    """The runner of ``db``'s dialect."""
    return ServerUnitRunner(db) if db.dialect.is_postgres else ClientRunner(db)
