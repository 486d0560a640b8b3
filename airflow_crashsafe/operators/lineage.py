"""OpenLineage for the fenced SQL operators, the way ``common.sql``'s operators provide it.

The OpenLineage provider calls ``get_openlineage_facets_on_start`` / ``_on_complete`` on every
operator; ``SQLExecuteQueryOperator`` answers by handing its SQL to the provider's ``SQLParser``
with the hook's database info, so its reads and writes appear as datasets. crashsafe's operators
do the same with the SQL that describes what they do: your statements for
:class:`~airflow_crashsafe.operators.sql.FencedSQLOperator`, and ``INSERT INTO <target> <your
query>`` for the partition overwrite and the natural-key merge (the fence's own statements touch
only crashsafe's tables and are not lineage). Nothing of OpenLineage is imported until the
provider asks, and without the provider these methods answer None, as ``common.sql``'s do.

The lineage is the task's, not the attempt's: a retry that finds the slot committed and writes
nothing reports the same datasets, as a re-run ``SQLExecuteQueryOperator`` would.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.store.dbapi import get_sql_hook

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

__all__ = ["SQLLineageMixin", "sql_lineage"]

log = logging.getLogger(__name__)


def sql_lineage(conn_id: str, statements: list[str]) -> OperatorLineage | None:
    """The datasets ``statements`` read and write on connection ``conn_id``, as ``common.sql`` finds them.

    None without the OpenLineage provider; an empty lineage for a database it cannot name (a hook
    without OpenLineage support, e.g. SQLite's).
    """
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from airflow.providers.openlineage.sqlparser import SQLParser
        from airflow.providers.openlineage.utils.utils import should_use_external_connection
    except ImportError:
        log.debug("crashsafe: the OpenLineage provider is not installed; no lineage.")
        return None
    hook = get_sql_hook(conn_id)
    connection = hook.get_connection(conn_id)
    try:
        database_info = hook.get_openlineage_database_info(connection)
        dialect = hook.get_openlineage_database_dialect(connection)
    except AttributeError:
        log.debug("crashsafe: %s provides no OpenLineage database info; no datasets.", type(hook).__name__)
        return OperatorLineage()
    if database_info is None:
        return OperatorLineage()
    parser = SQLParser(dialect=dialect, default_schema=hook.get_openlineage_default_schema())
    return parser.generate_openlineage_metadata_from_sql(
        sql=statements,
        hook=hook,
        database_info=database_info,
        database=None,
        sqlalchemy_engine=hook.get_sqlalchemy_engine(),
        use_connection=should_use_external_connection(hook),
    )


class SQLLineageMixin:
    """``get_openlineage_facets_on_start`` / ``_on_complete`` for an operator with ``conn_id``."""

    conn_id: str

    def lineage_sql(self) -> list[str]:
        """The statements whose reads and writes are this task's lineage (rendered at run time)."""
        raise NotImplementedError

    def get_openlineage_facets_on_start(self) -> OperatorLineage | None:
        """Datasets read and written by :meth:`lineage_sql`, as ``SQLExecuteQueryOperator`` reports."""
        return sql_lineage(self.conn_id, self.lineage_sql())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        """The start's lineage plus what the hook adds once the task ran (query ids, on some databases)."""
        lineage = self.get_openlineage_facets_on_start()
        if lineage is None:
            return None
        extra = getattr(get_sql_hook(self.conn_id), "get_openlineage_database_specific_lineage", None)
        more = extra(task_instance) if extra is not None else None
        if more is None:
            return lineage
        return type(lineage)(
            inputs=lineage.inputs + more.inputs,
            outputs=lineage.outputs + more.outputs,
            run_facets={**lineage.run_facets, **more.run_facets},
            job_facets={**lineage.job_facets, **more.job_facets},
        )
