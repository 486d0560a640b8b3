"""The watchdog's memory: incidents (pending and open) and when it began watching each deadline.

Both are JSON files in the state directory, replaced atomically. Restarting the watchdog must not
page again for an incident already paged, nor forget to resolve it, nor restart a grace period
(``state.json``, :class:`StateFile`); nor forget since when it watches a ``[[deadlines]]`` rule,
which decides whether a deadline passed while it watched or before (``deadlines.json``,
:class:`WatchStarts`). A file that cannot be parsed (not UTF-8, not JSON, not the expected shape)
is moved aside (``.corrupt-<time>``) and logged; watching goes on from an empty state rather than
not at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_crashsafe.alerting.incidents import Incident
from airflow_crashsafe.alerting.outbox import atomic_write_text

__all__ = ["StateFile", "WatchStarts", "default_state_dir"]

log = logging.getLogger(__name__)
VERSION = 1


def _dump(incident: Incident) -> dict[str, Any]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "key": incident.key,
        "severity": incident.severity,
        "summary": incident.summary,
        "first_seen": iso(incident.first_seen),
        "began_at": iso(incident.began_at),
        "details": incident.details,
        "min_duration": incident.min_duration,
        "opened_at": iso(incident.opened_at),
        "last_sent_at": iso(incident.last_sent_at),
        "dedup_id": incident.dedup_id,
    }


def _load(data: Mapping[str, Any]) -> Incident:
    def dt(value: Any) -> datetime | None:
        return datetime.fromisoformat(value) if value else None

    first_seen = dt(data["first_seen"])
    began_at = dt(data["began_at"])
    if first_seen is None or began_at is None:
        raise ValueError("first_seen and began_at are required")
    return Incident(
        key=str(data["key"]),
        severity=str(data["severity"]),
        summary=str(data["summary"]),
        first_seen=first_seen,
        began_at=began_at,
        details=dict(data.get("details") or {}),
        min_duration=float(data.get("min_duration", 0.0)),
        opened_at=dt(data.get("opened_at")),
        last_sent_at=dt(data.get("last_sent_at")),
        dedup_id=data.get("dedup_id"),
    )


def default_state_dir(instance: str, target: str, root: Path | None = None) -> Path:
    """Where a watchdog keeps its state when not told: one directory per watched Airflow.

    ``<root>/<instance>-<8 hex>`` under ``~/.local/state/airflow-crashsafe`` by default; the hex
    is a hash of the instance name and the watched URL (without its password), so two watchdogs
    of two Airflows never share incidents or an outbox, and one restarted finds its own again.
    """
    base = root if root is not None else Path.home() / ".local" / "state" / "airflow-crashsafe"
    digest = hashlib.sha256(f"{instance}\n{target}".encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", instance).strip("._") or "airflow"
    return base / f"{slug[:40]}-{digest}"


def _read(path: Path, section: str) -> dict[str, Any]:
    """The ``section`` object of the versioned JSON file at ``path``; {} if absent or unreadable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))  # not UTF-8 is corrupt too (UnicodeDecodeError)
        if (
            not isinstance(data, dict)
            or data.get("version") != VERSION
            or not isinstance(data[section], dict)
        ):
            raise ValueError(f"expected an object with version {VERSION} and {section!r}")
        return data[section]
    except (ValueError, KeyError, TypeError) as exc:
        _set_aside(path, exc)
        return {}


def _set_aside(path: Path, exc: Exception) -> None:
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
    os.replace(path, aside)
    log.error("watchdog state %s unreadable (%s); moved to %s, starting empty", path, exc, aside)


class StateFile:
    """``load()`` and ``save()`` the incidents at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, Incident]:
        try:
            return {key: _load(value) for key, value in _read(self.path, "incidents").items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            _set_aside(self.path, exc)
            return {}

    def save(self, incidents: Mapping[str, Incident]) -> None:
        data = {"version": VERSION, "incidents": {key: _dump(i) for key, i in sorted(incidents.items())}}
        atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")


class WatchStarts:
    """``load()`` and ``save()`` when this watchdog began watching each deadline rule, by identity.

    A deadline that passed before its rule was watched is not paged (a rule configured at 10:00
    does not page for 06:00 that morning), so the moment must survive a restart of the watchdog
    and of each ``--once``. Unreadable, it is moved aside and watching starts anew: no page for
    what passed before, the conservative side.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, datetime]:
        try:
            found = {
                key: datetime.fromisoformat(value["since"])
                for key, value in _read(self.path, "rules").items()
            }
            if any(since.tzinfo is None for since in found.values()):
                raise ValueError("'since' must have a UTC offset")
        except (ValueError, KeyError, TypeError) as exc:
            _set_aside(self.path, exc)
            return {}
        return found

    def save(self, starts: Mapping[str, datetime]) -> None:
        rules = {key: {"since": since.isoformat()} for key, since in sorted(starts.items())}
        atomic_write_text(self.path, json.dumps({"version": VERSION, "rules": rules}, indent=1) + "\n")
