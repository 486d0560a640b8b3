"""The storm's warehouse: finite capacity, modelled inside PostgreSQL without burning CPU.

A load's work is ``steps`` steps. Before each step it counts the loads working in its warehouse
right now (backends labelled ``crashsafe-work:<warehouse>/...`` that are active, read from
``pg_stat_activity``) and sleeps ``step_seconds * max(1, active / capacity)``: up to ``capacity``
loads each progress at full speed, beyond it every load slows in proportion, as a warehouse whose
slots are shared out. The sleep is ``pg_sleep``, so an overloaded warehouse costs wall time, not
this machine's CPU. The work runs under the loader role's ``statement_timeout``, so a load slowed
enough is cancelled by PostgreSQL itself (SQLSTATE 57014), as a real warehouse's timeout would.

The label is the work meter's (:mod:`drill.work_meter`): the same backends are measured for work
needed and redone. Loads wait for their source outside the warehouse (in the task), so waiting never
counts against the timeout or the capacity. Statement timeouts are counted from the server's own
log, whose line prefix :func:`install` sets to name the backend's label (``%a``).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from drill.work_meter import LABEL_PREFIX

__all__ = [
    "ACTIVE_SQL",
    "LOADER_ROLE",
    "SCHEMA",
    "TIMEOUT_MESSAGE",
    "CapacityProbe",
    "count_timeouts",
    "install",
    "loader_url",
    "start_night",
    "timeouts_in_log",
]

SCHEMA = "storm"
#: The role the storm DAGs connect as: its ``statement_timeout`` is the warehouse's.
LOADER_ROLE = "storm_loader"
TIMEOUT_MESSAGE = "canceling statement due to statement timeout"

_SETUP = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    # When the night's first source lands, per DAG; load i's source lands i intervals later.
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.night (
        dag_id text PRIMARY KEY, first_arrival double precision NOT NULL,
        arrival_interval double precision NOT NULL)""",
    # What the loads wrote: one row per (DAG, load); plain appends, crashsafe merges on the key.
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.loaded (
        dag_id text NOT NULL, load_id integer NOT NULL, steps integer NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.loaded_once (
        dag_id text NOT NULL, load_id integer NOT NULL, steps integer NOT NULL,
        PRIMARY KEY (dag_id, load_id))""",
    f"""CREATE OR REPLACE FUNCTION {SCHEMA}.load(
            warehouse text, label text, steps integer, step_seconds double precision, capacity integer)
        RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
        DECLARE
            active integer;
        BEGIN
            PERFORM set_config('application_name', '{LABEL_PREFIX}' || label, true);
            FOR i IN 1..steps LOOP
                PERFORM pg_stat_clear_snapshot();  -- pg_stat_activity is cached per transaction
                SELECT count(*) INTO active FROM pg_stat_activity
                 WHERE starts_with(application_name, '{LABEL_PREFIX}' || warehouse || '/')
                   AND state = 'active';
                PERFORM pg_sleep(step_seconds * greatest(1.0, active::double precision / capacity));
            END LOOP;
            RETURN steps;
        END $$""",
]


def loader_url(url: str) -> str:
    """``url`` with the loader role as its user (the throwaway cluster trusts local logins)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{LOADER_ROLE}@{host}", *parts[2:]))


def install(url: str, *, statement_timeout: float) -> None:
    """Create the loader role (with its timeout), the schema, the tables and ``storm.load()``.

    ``url`` must connect as a superuser. The loader is a superuser too (it creates crashsafe's
    tables in the warehouse and reads every backend's activity); the cluster is thrown away.
    """
    import psycopg

    millis = int(statement_timeout * 1000)
    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (LOADER_ROLE,)).fetchone()
        if not exists:
            conn.execute(f"CREATE ROLE {LOADER_ROLE} LOGIN SUPERUSER")
        conn.execute(f"ALTER ROLE {LOADER_ROLE} SET statement_timeout = {millis}")
        for statement in _SETUP:
            conn.execute(statement)
        conn.execute("ALTER SYSTEM SET log_line_prefix = '%m [%p] app=%a '")
        conn.execute("SELECT pg_reload_conf()")


def start_night(url: str, dag_ids: list[str], first_arrival: float, interval: float) -> None:
    """The night begins: each DAG's load ``i`` finds its source at ``first_arrival + i * interval``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for dag_id in dag_ids:
            conn.execute(
                f"INSERT INTO {SCHEMA}.night (dag_id, first_arrival, arrival_interval) VALUES (%s, %s, %s)"
                " ON CONFLICT (dag_id) DO UPDATE SET first_arrival = excluded.first_arrival,"
                " arrival_interval = excluded.arrival_interval",
                (dag_id, first_arrival, interval),
            )


_TIMEOUT_LINE = re.compile(r"app=" + re.escape(LABEL_PREFIX) + r"([^/\s]+)/(\S+) ERROR:\s+" + TIMEOUT_MESSAGE)


def count_timeouts(log_text: str) -> dict[str, list[str]]:
    """Warehouse (DAG id) -> the task of each statement the server cancelled for its timeout."""
    found: dict[str, list[str]] = {}
    for match in _TIMEOUT_LINE.finditer(log_text):
        found.setdefault(match.group(1), []).append(match.group(2))
    return found


def timeouts_in_log(path: Path) -> dict[str, list[str]]:
    """:func:`count_timeouts` of a server log file (empty when it cannot be read)."""
    try:
        return count_timeouts(path.read_text(errors="replace"))
    except OSError:
        return {}


ACTIVE_SQL = f"""
SELECT split_part(substr(application_name, {len(LABEL_PREFIX) + 1}), '/', 1), count(*)
FROM pg_stat_activity
WHERE starts_with(application_name, %s) AND state = 'active'
GROUP BY 1
"""


@dataclass
class CapacityProbe:
    """Samples how many loads work in each warehouse (own thread); keeps the peak and the time above C."""

    url: str
    capacity: int
    interval: float = 0.2
    peak: dict[str, int] = field(default_factory=dict)
    above: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    failed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> CapacityProbe:
        self._thread = threading.Thread(target=self._run, name="storm-capacity-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def add(self, counts: dict[str, int], seconds: float) -> None:
        """Fold one sample (warehouse -> active loads) covering ``seconds`` of time."""
        self.samples += 1
        for warehouse, active in counts.items():
            self.peak[warehouse] = max(self.peak.get(warehouse, 0), active)
            if active > self.capacity:
                self.above[warehouse] = self.above.get(warehouse, 0.0) + seconds

    def _run(self) -> None:
        import psycopg

        conn: Any = None
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                if conn is None:
                    conn = psycopg.connect(self.url, autocommit=True, application_name="storm-probe")
                rows = conn.execute(ACTIVE_SQL, (LABEL_PREFIX,)).fetchall()
                self.add({str(w): int(n) for w, n in rows}, self.interval)
            except Exception:  # a failed sample is counted, never the drill's end
                self.failed += 1
                conn = None
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))
        if conn is not None:
            conn.close()
