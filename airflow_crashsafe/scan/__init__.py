"""The scan: which tasks are unsafe to run twice, found before a crash does (docs/scan.md).

``airflow-crashsafe scan`` loads DAG files with Airflow's DagBag (nothing runs) and judges each
task: :mod:`.rules` by operator kind, :mod:`.sql` (statements, with sqlglot), :mod:`.python_code`
with :mod:`.calls`, :mod:`.call_names` and :mod:`.exprs` (callables' source), :mod:`.bash`;
:mod:`.loader` ties them together and :mod:`.render` writes text, JSON or SARIF. The cluster
policy (:mod:`airflow_crashsafe.policy`) uses the same rules at parse time.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ScanResult", "judge", "scan_paths"]


def __getattr__(name: str) -> Any:
    """The loader's names, imported on first use: ``airflow-crashsafe --help`` loads no SQL parser."""
    if name in __all__:
        from airflow_crashsafe.scan import loader

        return getattr(loader, name)
    raise AttributeError(name)
