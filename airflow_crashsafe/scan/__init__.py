"""The scan: which tasks are unsafe to run twice, found before a crash does (docs/scan.md).

``airflow-crashsafe scan`` imports each DAG file as Airflow's parser does, in a worker process
with a time limit (:mod:`.loader`, :mod:`.files`, :mod:`.isolation`, :mod:`.worker`; no task
runs), and judges each task: :mod:`.rules` by operator kind, :mod:`.sql` (statements, with
sqlglot), :mod:`.python_code` with :mod:`.calls`, :mod:`.call_names` and :mod:`.exprs`
(callables' source), :mod:`.bash`. A file that does not import is judged from its syntax tree by
the same rules (:mod:`.static` and the ``static_*`` modules, :mod:`.airflow2` for Airflow 2
import paths); :mod:`.render` writes text, JSON or SARIF (:mod:`.categories`). The cluster policy
(:mod:`airflow_crashsafe.policy`) uses the same rules at parse time.
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
