"""The scan: which tasks are unsafe to run twice, found before a crash does (docs/scan.md).

``airflow-crashsafe scan`` loads DAG files with Airflow's DagBag (nothing runs) and judges each
task: :mod:`.rules` by operator kind, :mod:`.sql` (statements, with sqlglot), :mod:`.python_code`
and :mod:`.calls` (callables' source), :mod:`.bash`; :mod:`.loader` ties them together and
:mod:`.render` writes text, JSON or SARIF. The cluster policy (:mod:`airflow_crashsafe.policy`)
uses the same rules at parse time.
"""

from __future__ import annotations

from airflow_crashsafe.scan.loader import ScanResult, judge, scan_paths

__all__ = ["ScanResult", "judge", "scan_paths"]
