"""The tests' scripted HTTP server: :mod:`airflow_crashsafe.testing.http` under the tests' names."""

from __future__ import annotations

from airflow_crashsafe.testing.http import LocalServer as Server
from airflow_crashsafe.testing.http import Received as Recorded
from airflow_crashsafe.testing.http import Reply, serve

__all__ = ["Recorded", "Reply", "Server", "serve"]
