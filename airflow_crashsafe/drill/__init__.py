"""The crash drill: boot real Airflow, SIGKILL the scheduler mid-run, restart it late, report.

``airflow-crashsafe drill`` (``cli.run``) is the entry point; the modules split the work into the
temporary home, the components, the warehouse, the crash scenario, the facts and the report.
"""

from __future__ import annotations
