"""DAGs shipped with airflow-crashsafe, as factories: ``dags_examples/`` only calls them."""

from __future__ import annotations

from airflow_crashsafe.dags.alerting import DEFAULT_DAG_ID, AlertingSettings, build_alerting_dag

__all__ = ["DEFAULT_DAG_ID", "AlertingSettings", "build_alerting_dag"]
