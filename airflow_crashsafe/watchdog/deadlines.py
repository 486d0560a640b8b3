"""``[[deadlines]]``: which run must be done by when, as a list of :class:`Deadline` values.

A deadline is either a time of day in a time zone (``at = "06:00"``, ``timezone =
"Europe/Berlin"``) or a cron expression in that zone plus an offset (``cron = "0 0 * * *"``,
``offset = "6h"``: each run due at a cron time must be done that long after it). Each occurrence
watches **one run**, the newest run of ``dag_id`` whose ``run_type`` is in ``run_types`` and
whose ``run_after`` (the time Airflow 3 made it due; for a scheduled run the end of its data
interval) lies in the occurrence's window:

* time of day: from the previous occurrence of the same deadline (included) to this one
  (excluded) — "the newest run that became due since yesterday's 06:00";
* cron: from the cron time (included) to the next cron time (excluded).

A local time that does not exist (the spring DST gap) is the instant it would have been (02:30
→ 03:30 summer time); one that exists twice (autumn) is the first of the two. Cron times come
from ``croniter``, which Airflow itself depends on. Every mistake is a ConfigurationError naming
the entry and the field. How the occurrences page: :mod:`airflow_crashsafe.watchdog.deadline_rules`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_crashsafe.alerting.model import SEVERITIES
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.limits import YEAR, Limit

__all__ = ["DEFAULT_RUN_TYPES", "Deadline", "Occurrence", "parse_deadlines", "severity_option"]

DEFAULT_RUN_TYPES = ("scheduled", "asset_triggered")
_FIELDS = {
    "name",
    "dag_id",
    "at",
    "timezone",
    "cron",
    "offset",
    "severity",
    "early_severity",
    "early",
    "run_types",
}
#: How long after its cron time a run may be due: beyond a year, its window never closes.
OFFSET_LIMIT = Limit(0, YEAR)
_OFFSET = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


@dataclass(frozen=True)
class Occurrence:
    """One instant a run must be done by, and the window its run became due in."""

    at: datetime
    due_from: datetime
    due_before: datetime


@dataclass(frozen=True)
class Deadline:
    """One ``[[deadlines]]`` entry, validated."""

    name: str
    dag_id: str
    tz: ZoneInfo
    at: time | None = None
    cron: str | None = None
    offset: timedelta = timedelta(0)
    severity: str = "critical"
    early_severity: str = "critical"
    early: bool = True
    run_types: tuple[str, ...] = DEFAULT_RUN_TYPES

    def occurrences(self, now: datetime, keep: float) -> list[Occurrence]:
        """Occurrences whose deadline is at most ``keep`` s past, up to the next one whose run can be due."""
        oldest = now - timedelta(seconds=keep)
        found = self._cron(now, oldest) if self.cron else self._daily(now, oldest)
        return [o for o in found if o.at > oldest and o.due_from <= now]

    def _daily(self, now: datetime, oldest: datetime) -> list[Occurrence]:
        assert self.at is not None
        first = oldest.astimezone(self.tz).date() - timedelta(days=2)
        days = (now.astimezone(self.tz).date() - first).days + 2
        instants = [
            datetime.combine(first + timedelta(days=n), self.at, tzinfo=self.tz).astimezone(timezone.utc)
            for n in range(days + 1)
        ]
        pairs = [Occurrence(b, a, b) for a, b in itertools.pairwise(instants)]
        upcoming = [o for o in pairs if o.at > now][:1]
        return [o for o in pairs if o.at <= now] + upcoming

    def _cron(self, now: datetime, oldest: datetime) -> list[Occurrence]:
        from croniter import croniter  # type: ignore[import-untyped]

        start = (oldest - self.offset - timedelta(days=1)).astimezone(self.tz)
        it = croniter(self.cron, start)
        fires: list[datetime] = []
        while not fires or fires[-1] <= now:
            fires.append(it.get_next(datetime).astimezone(timezone.utc))
            if len(fires) > 10_000:  # e.g. every minute for a long keep: enough
                break
        return [Occurrence(a + self.offset, a, b) for a, b in itertools.pairwise(fires)]

    @property
    def identity(self) -> str:
        """``<name>#<hash>`` of what decides which instants and which run are watched.

        Changing the DAG, the name, the time, zone, cron, offset or run types makes a new rule
        (watched from when it is first seen); changing only a severity or ``early`` does not.
        """
        when = self.at.isoformat() if self.at else None
        what: list[Any] = [self.dag_id, self.name, self.tz.key, when, self.cron, self.offset.total_seconds()]
        what.append(list(self.run_types))
        digest = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:12]
        return f"{self.name}#{digest}"

    def describe(self) -> str:
        when = f"{self.at.isoformat('minutes')}" if self.at else f"cron {self.cron!r} + {self.offset}"
        return f"{when} {self.tz.key}"


def _offset(where: str, value: Any) -> timedelta:
    """``offset`` as "6h"/"1h30m" or seconds, within :data:`OFFSET_LIMIT` (nan or inf: refused)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=OFFSET_LIMIT.check(value, f"{where}: 'offset'", example='"6h"'))
    match = _OFFSET.match(value) if isinstance(value, str) and value else None
    if not match:
        raise ConfigurationError(f'{where}: \'offset\' must be like "6h", "1h30m" or seconds, not {value!r}')
    d, h, m, s = (int(x or 0) for x in match.groups())
    seconds = ((d * 24 + h) * 60 + m) * 60 + s
    return timedelta(seconds=OFFSET_LIMIT.check(seconds, f"{where}: 'offset' {value!r} in seconds"))


def severity_option(where: str, value: Any) -> str:
    """A severity name, or a ConfigurationError naming ``where`` it was given."""
    if value not in SEVERITIES:
        raise ConfigurationError(f"{where} must be one of {SEVERITIES}, not {value!r}")
    return str(value)


def _one(index: int, spec: Any) -> Deadline:
    where = f"[[deadlines]] entry {index + 1}"
    if not isinstance(spec, Mapping):
        raise ConfigurationError(f"{where} must be a table with dag_id and at (or cron and offset)")
    dag_id = spec.get("dag_id")
    if not isinstance(dag_id, str) or not dag_id:
        raise ConfigurationError(f"{where}: 'dag_id' is required: the DAG whose run has the deadline")
    where = f"{where} (dag_id {dag_id!r})"
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise ConfigurationError(f"{where}: unknown field(s) {unknown}; known: {sorted(_FIELDS)}")
    try:
        tz = ZoneInfo(str(spec.get("timezone", "UTC")))
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"{where}: 'timezone' {spec.get('timezone')!r} is not an IANA zone: use e.g. \"Europe/Berlin\""
        ) from None
    at, cron, offset = spec.get("at"), spec.get("cron"), timedelta(0)
    if (at is None) == (cron is None):
        raise ConfigurationError(f"{where}: give exactly one of 'at' (\"06:00\") or 'cron' (with 'offset')")
    when: time | None = None
    if at is not None:
        if "offset" in spec:
            raise ConfigurationError(f"{where}: 'offset' goes with 'cron', not with 'at'")
        try:
            when = time.fromisoformat(at) if isinstance(at, str) else at
        except ValueError:
            when = None
        if not isinstance(when, time) or when.tzinfo is not None:
            raise ConfigurationError(f"{where}: 'at' must be a local time like \"06:00\", not {at!r}")
    else:
        if "offset" not in spec:
            raise ConfigurationError(f"{where}: 'cron' needs 'offset', e.g. \"6h\" after each cron time")
        offset = _offset(where, spec["offset"])
        try:
            from croniter import croniter
        except ImportError:  # pragma: no cover - Airflow depends on croniter
            raise ConfigurationError(f"{where}: 'cron' needs the croniter package; use 'at'") from None
        if not isinstance(cron, str) or not croniter.is_valid(cron):
            raise ConfigurationError(f"{where}: 'cron' {cron!r} is not a valid cron expression")
    severity = severity_option(f"{where}: 'severity'", spec.get("severity", "critical"))
    run_types = spec.get("run_types", list(DEFAULT_RUN_TYPES))
    if not isinstance(run_types, Sequence) or isinstance(run_types, str) or not run_types:
        raise ConfigurationError(f"{where}: 'run_types' must be a list like [\"scheduled\"]")
    early = spec.get("early", True)
    if not isinstance(early, bool):
        raise ConfigurationError(f"{where}: 'early' must be true or false")
    name = spec.get("name") or f"{dag_id}@{at if at is not None else cron}"
    if str(name).startswith("airflow:"):
        raise ConfigurationError(
            f"{where}: 'name' must not start with 'airflow:' (Airflow's own deadlines do)"
        )
    return Deadline(
        name=str(name),
        dag_id=dag_id,
        tz=tz,
        at=when,
        cron=cron,
        offset=offset,
        severity=severity,
        early_severity=severity_option(f"{where}: 'early_severity'", spec.get("early_severity", severity)),
        early=early,
        run_types=tuple(str(t) for t in run_types),
    )


def parse_deadlines(specs: Any, source: str | None = None) -> tuple[Deadline, ...]:
    """The ``deadlines`` list of the watchdog's config file, validated; ``source``: the file,
    named in every error."""
    try:
        return _parse(specs)
    except ConfigurationError as exc:
        if source is None:
            raise
        raise ConfigurationError(f"{source}: {exc}") from None


def _parse(specs: Any) -> tuple[Deadline, ...]:
    if specs is None:
        return ()
    if not isinstance(specs, list):
        raise ConfigurationError("'deadlines' must be a list of tables: write [[deadlines]]")
    deadlines = tuple(_one(i, spec) for i, spec in enumerate(specs))
    names = [d.name for d in deadlines]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigurationError(f"[[deadlines]]: name(s) {twice} used twice: give each entry its own 'name'")
    return deadlines
