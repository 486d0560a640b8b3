"""Test helpers users can build on: real local stand-ins for the systems crashsafe protects.

:mod:`~airflow_crashsafe.testing.vendor` (payment vendors with and without idempotency keys),
:mod:`~airflow_crashsafe.testing.http` (an HTTP server answering from your function),
:mod:`~airflow_crashsafe.testing.tls` (that server as an HTTPS stand-in for a host a client
hard-codes, reached through ``HTTPS_PROXY``),
:mod:`~airflow_crashsafe.testing.postgres` (a throwaway PostgreSQL cluster),
:mod:`~airflow_crashsafe.testing.mariadb` (a throwaway MariaDB server: ``start_server``),
:class:`RecordingSink` (an alert sink that keeps what it is sent),
:func:`record_metrics` (what reaches Airflow's metrics backend) and
:func:`fake_context` (a task context made of plain objects).
"""

from __future__ import annotations

from airflow_crashsafe.testing.alerts import RecordingSink
from airflow_crashsafe.testing.context import fake_context
from airflow_crashsafe.testing.http import LocalServer, Reply, serve
from airflow_crashsafe.testing.metrics import MetricsRecorder, record_metrics
from airflow_crashsafe.testing.postgres import PostgresCluster, drop_database, make_database, start_cluster
from airflow_crashsafe.testing.vendor import KeyHonouringVendor, NaiveVendor, Received

__all__ = [
    "KeyHonouringVendor",
    "LocalServer",
    "MetricsRecorder",
    "NaiveVendor",
    "PostgresCluster",
    "Received",
    "RecordingSink",
    "Reply",
    "drop_database",
    "fake_context",
    "make_database",
    "record_metrics",
    "serve",
    "start_cluster",
]
