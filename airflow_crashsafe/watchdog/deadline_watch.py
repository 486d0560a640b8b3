"""The deadline watch of one watchdog: its rules, since when it watches them, one poll's pages.

:meth:`DeadlineWatch.evaluate` folds an observation's DAG runs into the deadline incidents with
the conditions of :mod:`airflow_crashsafe.watchdog.deadline_rules`, each rule judged only from
the moment this watchdog began watching it (kept in the state directory's ``deadlines.json`` by
:class:`~airflow_crashsafe.watchdog.state.WatchStarts`, so a restart does not forget it), and
spools the alerts once among replicas (:class:`~airflow_crashsafe.watchdog.claims.ClaimDir`).
See docs/design.md, "Watchdog and alerting".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_crashsafe.alerting.incidents import Condition, Incident, advance
from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.watchdog.claims import ClaimDir
from airflow_crashsafe.watchdog.deadline_rules import (
    AIRFLOW_NAME,
    airflow_deadline_conditions,
    deadline_conditions,
)
from airflow_crashsafe.watchdog.deadlines import Deadline
from airflow_crashsafe.watchdog.health import Observation
from airflow_crashsafe.watchdog.runs import RunReader
from airflow_crashsafe.watchdog.state import WatchStarts

__all__ = ["AIRFLOW_RULE", "DEADLINE_PREFIX", "DeadlineWatch", "build_deadline_watch"]

DEADLINE_PREFIX = "deadline_"
#: The identity under which :class:`WatchStarts` keeps when Airflow's DeadlineAlerts began to be watched.
AIRFLOW_RULE = "airflow:DeadlineAlert"


@dataclass
class DeadlineWatch:
    """The deadlines of one watchdog and how they page (see the module docstring)."""

    deadlines: tuple[Deadline, ...]
    instance: str
    repeat_interval: float = 3600.0
    keep: float = 86400.0
    default_duration: float = 300.0
    claims: ClaimDir | None = None
    #: Severity of the pages for Airflow's own DeadlineAlerts; None: those are not watched.
    airflow_severity: str | None = None
    #: Where the moments it began watching each rule are kept; None: in memory only.
    starts: WatchStarts | None = None
    _since: dict[str, datetime] | None = field(default=None, init=False, repr=False)

    @staticmethod
    def owns(key: str) -> bool:
        return key.startswith(DEADLINE_PREFIX)

    def watching_since(self, now: datetime) -> dict[str, datetime]:
        """Per rule identity, when this watchdog began watching it: kept, or ``now`` if new.

        Rules no longer configured are dropped, so one removed and added again is new again.
        """
        if self._since is None:
            self._since = self.starts.load() if self.starts is not None else {}
        rules = [d.identity for d in self.deadlines] + ([AIRFLOW_RULE] if self.airflow_severity else [])
        since = {rule: self._since.get(rule, now) for rule in rules}
        if since != self._since:
            if self.starts is not None:
                self.starts.save(since)
            self._since = since
        return since

    def wanted(self, now: datetime) -> dict[str, datetime]:
        """Per watched DAG, the oldest ``run_after`` any occurrence being watched can have."""
        out: dict[str, datetime] = {}
        for deadline in self.deadlines:
            for occurrence in deadline.occurrences(now, self.keep):
                since = out.get(deadline.dag_id)
                out[deadline.dag_id] = min(since, occurrence.due_from) if since else occurrence.due_from
        return out

    def evaluate(
        self, incidents: Mapping[str, Incident], observation: Observation, enqueue: Callable[[Alert], Any]
    ) -> tuple[dict[str, Incident], list[Alert]]:
        """Fold one observation into the deadline incidents; spool their alerts with ``enqueue``."""
        now = observation.at
        since = self.watching_since(now)
        oldest = now - timedelta(seconds=self.keep)
        current = {  # an occurrence past ``keep`` is forgotten (it stays open in the sink, if it was)
            key: i
            for key, i in incidents.items()
            if datetime.fromisoformat(str(i.details.get("deadline_utc") or now.isoformat())) > oldest
        }
        views = {dag: view for dag, view in (observation.deadline_dags or {}).items() if view.error is None}
        theirs = {dag for dag, view in views.items() if view.airflow_deadlines is not None}
        active: dict[str, Condition] = {}
        for deadline in self.deadlines:
            if deadline.dag_id in views:
                view = views[deadline.dag_id]
                found = deadline_conditions(
                    deadline,
                    view,
                    now,
                    keep=self.keep,
                    default_duration=self.default_duration,
                    is_open=lambda key: key in current,
                    since=since[deadline.identity],
                )
                active.update(found)
        for dag in theirs if self.airflow_severity else ():
            assert self.airflow_severity is not None
            found = airflow_deadline_conditions(
                views[dag],
                now,
                severity=self.airflow_severity,
                default_duration=self.default_duration,
                is_open=lambda key: key in current,
                since=since[AIRFLOW_RULE],
            )
            active.update(found)

        def judged(key: str) -> bool:
            details = current[key].details
            airflow = str(details.get("deadline", "")).startswith(AIRFLOW_NAME)
            return details.get("dag_id") in (theirs if airflow else views)

        result, alerts = advance(
            current,
            active,
            now,
            grace=0.0,
            repeat_interval=self.repeat_interval,
            instance=self.instance,
            judged=judged,
        )
        if self.claims is not None:
            return result, self.claims.admit(alerts, enqueue, self.repeat_interval)
        for alert in alerts:
            enqueue(alert)
        return result, alerts


def build_deadline_watch(
    config: str | None,
    opts: Mapping[str, Any],
    instance: str,
    repeat_interval: float,
    state_dir: Path | None = None,
) -> tuple[DeadlineWatch, RunReader] | None:
    """The watch and the run reader for ``[[deadlines]]`` and ``watch_airflow_deadlines``; else None.

    With ``state_dir``, when each rule began to be watched is kept in its ``deadlines.json``.
    """
    from airflow_crashsafe.alerting.config import load_config_file
    from airflow_crashsafe.watchdog.deadlines import parse_deadlines, severity_option

    deadlines = parse_deadlines(load_config_file(config).get("deadlines"), config) if config else ()
    airflow = opts.get("watch_airflow_deadlines") or False
    if not isinstance(airflow, bool):
        airflow = severity_option("watch_airflow_deadlines", airflow)
    if not deadlines and not airflow:
        return None
    # ``opts`` are watchdog.settings' (their numbers already checked against their limits).
    claim_dir = opts["deadline_claim_dir"]
    watch = DeadlineWatch(
        deadlines,
        instance,
        repeat_interval=repeat_interval,
        keep=float(opts["deadline_keep"]),
        default_duration=float(opts["deadline_default_duration"]),
        claims=ClaimDir(claim_dir) if claim_dir else None,
        airflow_severity=("critical" if airflow is True else airflow) if airflow else None,
        starts=WatchStarts(state_dir / "deadlines.json") if state_dir is not None else None,
    )
    reader = RunReader(
        watch.wanted,
        history=int(opts["deadline_history"]),
        refresh=float(opts["deadline_refresh"]),
        airflow_deadlines=bool(airflow),
        keep=watch.keep,
    )
    return watch, reader
