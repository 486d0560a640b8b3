"""``airflow-crashsafe watch``: a scheduler watchdog that runs outside Airflow and imports none of it.

Parts: :mod:`.health` / :mod:`.api` / :mod:`.db` read an Observation, :mod:`.rules` decides,
:mod:`.state` remembers, :mod:`.loop` polls, :mod:`.metrics` exports, :mod:`.cli` wires it up.
Alerts go through :mod:`airflow_crashsafe.alerting`. Nothing is imported here eagerly.
"""

from __future__ import annotations
