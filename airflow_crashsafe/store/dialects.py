"""The databases fenced writes go to: what each one guarantees, and its SQL spelt by sqlglot.

crashsafe's guarantees come from the target database, so they differ by database
(docs/databases.md):

- **fencing** needs the fence check and the write to commit in one transaction, with the fence
  row locked (or, with optimistic concurrency, a write-write conflict) between check and commit;
- **committed means done** needs only the fence row, committed with the write;
- **adoption** needs a server-side unit: one statement that keeps running and commits after its
  client is gone (PostgreSQL's ``DO`` block in autocommit). A client-driven transaction rolls
  back when its client dies, so a re-run redoes the work instead of adopting it;
- **transactional DDL**: without it a DDL statement commits the open transaction implicitly,
  which would commit a write before its fence check; crashsafe then refuses DDL inside a fenced
  write.

Statements that differ between databases are written once, in PostgreSQL's spelling with
``:name`` placeholders, and generated for the target by sqlglot (:meth:`SqlDialect.render`):
identifier quoting, column types, functions, and the driver's placeholder style. The fence check
is an UPDATE of the fence row: a row lock until commit where the database has row locks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.errors import ConfigurationError

if TYPE_CHECKING:
    from sqlglot import exp

__all__ = ["DIALECTS", "Guarantees", "SqlDialect", "dialect_named", "say_limits"]


@dataclass(frozen=True)
class Guarantees:
    """What crashsafe can promise on a database, with the reason for each missing promise."""

    adoption: bool
    transactional_ddl: bool
    row_locks: bool
    why_no_adoption: str = ""
    why_no_ddl: str = ""
    why_no_row_locks: str = ""

    def limits(self) -> list[str]:
        """One sentence per guarantee this database cannot give (empty: all of them)."""
        out = []
        if not self.adoption:
            out.append(f"no adoption of an in-flight write ({self.why_no_adoption})")
        if not self.transactional_ddl:
            out.append(f"no transactional DDL ({self.why_no_ddl})")
        if not self.row_locks:
            out.append(f"no row locks ({self.why_no_row_locks})")
        return out


@dataclass(frozen=True)
class SqlDialect:
    """One database as crashsafe writes to it: its names, driver style and guarantees."""

    name: str  # the Db dialect: postgresql | sqlite | mysql | duckdb
    product: str
    sqlglot: str  # sqlglot's name for the dialect
    placeholder: str  # the driver's named placeholder, with {} for the name
    guarantees: Guarantees

    def ident(self, name: str) -> str:
        """One identifier, quoted the way this database reads it (doubling an inner quote)."""
        from sqlglot import exp

        return exp.to_identifier(name, quoted=True).sql(dialect=self.sqlglot)

    def render(self, sql: str | exp.Expression, *, read: str = "postgres") -> str:
        """``sql`` (PostgreSQL spelling, ``:name`` placeholders) as this database and driver spell it."""
        import sqlglot
        from sqlglot import exp

        tree = sqlglot.parse_one(sql, read=read) if isinstance(sql, str) else sql

        def placeholders(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Placeholder) and node.name:
                return exp.var(self.placeholder.format(node.name))
            return node

        return tree.transform(placeholders).sql(dialect=self.sqlglot)

    def describe_limits(self) -> str:
        """The log line an operator writes at start when this database cannot give everything."""
        limits = self.guarantees.limits()
        return (
            f"crashsafe: {self.product} target: fenced writes and committed-means-done hold; "
            + "; ".join(limits)
            + ". See docs/databases.md."
        )


_CLIENT_DIES = (
    "a transaction driven by its client is rolled back when the client dies, so a reset re-run "
    "redoes the work"
)

DIALECTS: dict[str, SqlDialect] = {
    "postgresql": SqlDialect("postgresql", "PostgreSQL", "postgres", "%({})s", Guarantees(True, True, True)),
    "sqlite": SqlDialect(
        "sqlite",
        "SQLite",
        "sqlite",
        ":{}",
        Guarantees(
            adoption=False,
            transactional_ddl=True,
            row_locks=False,
            why_no_adoption=f"an embedded database has no server; {_CLIENT_DIES}",
            why_no_row_locks="one writer at a time holds the whole database: attempts are serialised",
        ),
    ),
    "mysql": SqlDialect(
        "mysql",
        "MySQL/MariaDB",
        "mysql",
        "%({})s",
        Guarantees(
            adoption=False,
            transactional_ddl=False,
            row_locks=True,
            why_no_adoption="the write's statements run in one transaction its client drives, with no "
            f"anonymous block to run them as one server-side unit; {_CLIENT_DIES}",
            why_no_ddl="CREATE/ALTER/DROP/TRUNCATE commit the open transaction implicitly, "
            "so DDL inside a fenced write is refused",
        ),
    ),
    "duckdb": SqlDialect(
        "duckdb",
        "DuckDB",
        "duckdb",
        "${}",
        Guarantees(
            adoption=False,
            transactional_ddl=True,
            row_locks=False,
            why_no_adoption=f"an embedded database has no server; {_CLIENT_DIES}",
            why_no_row_locks="optimistic concurrency: the fence check is a write to the fence row, "
            "and a stale attempt's commit fails on the write-write conflict; one process at a time "
            "may open a DuckDB file for writing",
        ),
    ),
    "snowflake": SqlDialect(
        "snowflake",
        "Snowflake",
        "snowflake",
        "%({})s",
        Guarantees(
            adoption=False,
            transactional_ddl=False,
            row_locks=False,
            why_no_adoption="the write's statements run in one transaction its client drives; "
            f"{_CLIENT_DIES}",
            why_no_ddl="DDL (CREATE, also of a TEMPORARY table, ALTER, DROP, TRUNCATE) commits the open "
            "transaction implicitly, so DDL inside a fenced write is refused",
            why_no_row_locks="an UPDATE, DELETE or MERGE locks the whole table until commit: the fence "
            "check locks the fence table, so fenced writes to one Snowflake schema commit one at a time, "
            "and a newer attempt's token waits for an older attempt's commit",
        ),
    ),
}


def dialect_named(name: str) -> SqlDialect:
    """The dialect of a :class:`~airflow_crashsafe.store.dbapi.Db` (its ``dialect.name``)."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ConfigurationError(
            f"crashsafe has no SQL dialect {name!r}; fenced writes support {sorted(DIALECTS)}."
        ) from None


# SQLite's limits are the documented behaviour of the embedded store and its targets since the
# start (README); the databases added since say theirs in every task's log.
_QUIET = ("postgresql", "sqlite")


def say_limits(db: Any, log: Any) -> None:
    """Log, as a warning, the guarantees the target database of a fenced write cannot give."""
    line = _limits_line(db.dialect.name)
    if line:
        log.warning(line)


@functools.cache
def _limits_line(name: str) -> str:
    """The warning ``say_limits`` logs for a database, or "" (worked out once: it runs every write)."""
    if name in _QUIET or not dialect_named(name).guarantees.limits():
        return ""
    return dialect_named(name).describe_limits()
