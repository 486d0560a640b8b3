"""Exactly one sender among watchdog replicas: claim files in a directory they share.

Deadline alerts carry the same ``dedup_key`` on every replica, which is enough for a sink that
deduplicates (PagerDuty). A webhook, Slack or SMTP receives each replica's copy. With a shared
``deadline_claim_dir`` (one host, or a network file system with working ``flock``), a replica
takes an exclusive ``flock`` on ``.lock``, and for each alert: if its claim file exists another
replica already spooled it and it is dropped; else it is spooled to this replica's outbox first
and claimed second. A replica killed between the two leaves no claim, so the other one sends it
too: at least once, and exactly once otherwise. A claim names the dedup key and the event (a
repeat also its ``repeat_interval`` slot); claims older than a week are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.alerting.outbox import atomic_write_text
from airflow_crashsafe.errors import ConfigurationError

__all__ = ["ClaimDir"]

log = logging.getLogger(__name__)
KEEP_CLAIMS = 7 * 86400.0


class ClaimDir:
    """Claims in ``path``; ``admit`` spools each alert no other replica has spooled."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(
                f"deadline_claim_dir {self.path}: {exc.strerror or exc}; "
                "give a directory every replica can write"
            ) from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.path / ".lock", "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def claim_name(self, alert: Alert, repeat_interval: float) -> str:
        event = alert.event
        if event == "repeat" and repeat_interval > 0:
            event += f"-{int(alert.at.timestamp() // repeat_interval)}"
        return hashlib.sha256(alert.dedup_key.encode()).hexdigest()[:32] + f".{event}"

    def admit(
        self, alerts: Iterable[Alert], enqueue: Callable[[Alert], Any], repeat_interval: float
    ) -> list[Alert]:
        """Spool (with ``enqueue``) and claim each alert not yet claimed; return those spooled."""
        alerts = list(alerts)
        if not alerts:
            return []
        sent: list[Alert] = []
        with self._locked():
            for alert in alerts:
                claim = self.path / self.claim_name(alert, repeat_interval)
                if claim.exists():
                    log.info("alert %s %s already sent by another replica", alert.event, alert.dedup_key)
                    continue
                enqueue(alert)
                atomic_write_text(claim, f"{alert.dedup_key} {alert.event} {alert.at.isoformat()}\n")
                sent.append(alert)
            self._prune()
        return sent

    def _prune(self) -> None:
        cutoff = time.time() - KEEP_CLAIMS
        for claim in self.path.iterdir():
            with contextlib.suppress(OSError):
                if not claim.name.startswith(".") and claim.stat().st_mtime < cutoff:
                    claim.unlink()
