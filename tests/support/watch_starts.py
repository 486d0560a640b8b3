"""A watchdog state directory that has watched a config's deadlines since a given moment."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from airflow_crashsafe.watchdog.deadline_watch import AIRFLOW_RULE
from airflow_crashsafe.watchdog.deadlines import parse_deadlines
from airflow_crashsafe.watchdog.state import WatchStarts


def watching_since(config: Path, state_dir: Path, since: datetime) -> None:
    """Record in ``state_dir`` that every rule of the JSON ``config`` is watched since ``since``.

    What a watchdog polling since then would have written: its deadlines passing after ``since``
    page, as they do for a watchdog that was running when they passed.
    """
    data = json.loads(config.read_text())
    rules = [d.identity for d in parse_deadlines(data.get("deadlines"))]
    if data.get("watch", {}).get("watch_airflow_deadlines"):
        rules.append(AIRFLOW_RULE)
    WatchStarts(state_dir / "deadlines.json").save(dict.fromkeys(rules, since))
