"""Write plans: *what* a fenced SQL operator writes, apart from *how* a dialect runs it.

A plan holds an operator's arguments, already validated, and knows its statements and data
checks. It is handed to the runner of the target's dialect (:mod:`airflow_crashsafe.fencing.runners`),
which calls the one method written for it:

- :meth:`WritePlan.unit` adds the write to a PostgreSQL server-side unit (a ``DO`` block that
  commits even if its sender dies); a data check that fails raises a coded error in the block,
  which the runner hands back to :meth:`WritePlan.data_error` for wording;
- :meth:`WritePlan.transaction` writes through the client-driven fenced transaction (SQLite).

A new database is a new method here (its statements) and a new runner; the operators do not change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from airflow_crashsafe.sql.unit_program import UnitFailure, UnitProgram
from airflow_crashsafe.store.dbapi import Db

__all__ = ["OpenTransaction", "Params", "WritePlan"]

#: Query parameters in the driver's style: a mapping, a sequence, or none.
Params = Mapping[str, Any] | Sequence[Any] | None

Prepared = TypeVar("Prepared")


class OpenTransaction(Protocol):
    """The client-driven runner's open, fenced transaction, as a plan writes through it."""

    @property
    def db(self) -> Db: ...

    @property
    def cursor(self) -> Any: ...

    @property
    def params(self) -> dict[str, Any]: ...


class WritePlan(Protocol[Prepared]):
    """One fenced write: read-only checks first, then the write in the runner's fence."""

    @property
    def target(self) -> str:
        """The fence's target name (usually the table)."""
        ...

    def prepare(self, db: Db) -> Prepared:
        """Read-only checks of the target, before any token is taken; what the write needs."""
        ...

    def unit(self, program: UnitProgram, db: Db, prepared: Prepared) -> None:
        """PostgreSQL: add the statements and data checks to the server-side unit."""
        ...

    def transaction(self, tx: OpenTransaction, prepared: Prepared) -> dict[str, Any]:
        """SQLite: run the statements and checks in the open fenced transaction; the result."""
        ...

    def data_error(self, failure: UnitFailure) -> Exception:
        """The error to raise for a data check that failed inside the unit."""
        ...
