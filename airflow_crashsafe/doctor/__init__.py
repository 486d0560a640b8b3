"""``airflow-crashsafe doctor``: the deployment hazards this package knows, each with its fix.

Every check reads Airflow's own configuration (and, where it must, the metadata database or the
store connection) from where it runs; none needs the scheduler. Checks are small functions that
return :class:`~airflow_crashsafe.doctor.findings.Finding` values; :func:`run_checks` runs them
all, turning a check that raised into an ``error`` finding rather than stopping the rest.
"""

from __future__ import annotations

from airflow_crashsafe.doctor.checks import CHECKS, run_checks
from airflow_crashsafe.doctor.findings import Finding

__all__ = ["CHECKS", "Finding", "run_checks"]
