"""The ``airflow-crashsafe`` command; see :mod:`airflow_crashsafe.cli.main`."""

from __future__ import annotations
